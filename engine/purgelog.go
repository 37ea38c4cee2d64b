package engine

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/seglog/seglog/engine/internal/compactplan"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// The purge log (docs/SEARCH.md, "Change feed", "Deletes compaction
// purged"): the deletes the change feed can no longer show, because a
// compaction removed an incarnation with its tombstone. Compaction
// writes it, whole, before it removes or rewrites any segment; the feed
// reads it to give a consumer behind such a tombstone the delete anyway
// (or ErrCursorExpired where it cannot place the consumer).

// PurgeLogFile is the purge log's name in the store directory.
const PurgeLogFile = "purged"

// maxPurged is how many purged deletes the log keeps; past it, the
// oldest give way to the floor.
const maxPurged = 1 << 16

// purgeLog is the content of the purge log.
type purgeLog struct {
	version uint64 // one more at each write
	// floor: the last segment of the deletes the log gave up (maxPurged);
	// a cursor in it or before may have missed one of them.
	floor uint64
	dels  []compactplan.Delete
}

const purgeMagic = "seglog-purged 1"

func (db *DB) purgeLogPath() string { return filepath.Join(db.dir, PurgeLogFile) }

// encode writes l as text: a first line (magic, version, floor, count),
// a line per delete (key in hex, incarnation, header's segment,
// generation and offset, tombstone's), and a last line with the
// xxhash64 of the rest.
func (l *purgeLog) encode() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %d %d %d\n", purgeMagic, l.version, l.floor, len(l.dels))
	for _, d := range l.dels {
		fmt.Fprintf(&b, "%s %d %d %d %d %d %d %d\n", hex.EncodeToString([]byte(d.Key)), d.UID,
			d.Header.Seg, d.Header.Gen, d.Header.Off, d.Tomb.Seg, d.Tomb.Gen, d.Tomb.Off)
	}
	fmt.Fprintf(&b, "end %016x\n", xxhash.Sum64(b.Bytes()))
	return b.Bytes()
}

// decodePurgeLog reads what encode wrote; anything else is a
// *store.CorruptionError naming path (the file is replaced whole, by a
// rename: a torn one is damage).
func decodePurgeLog(b []byte, path string) (*purgeLog, error) {
	bad := func(off int, why string) error {
		return &store.CorruptionError{Path: path, Offset: int64(off), Reason: "purge log: " + why}
	}
	end := bytes.LastIndex(b, []byte("end "))
	if end < 0 || !bytes.HasSuffix(b, []byte("\n")) {
		return nil, bad(len(b), "no end line")
	}
	if want := fmt.Sprintf("end %016x\n", xxhash.Sum64(b[:end])); string(b[end:]) != want {
		return nil, bad(end, "checksum mismatch")
	}
	lines := strings.Split(string(b[:end]), "\n")
	lines = lines[:len(lines)-1] // (the empty string after the last newline)
	l := &purgeLog{}
	var n int
	if len(lines) == 0 || !strings.HasPrefix(lines[0], purgeMagic+" ") {
		return nil, bad(0, "not a purge log")
	}
	if _, err := fmt.Sscanf(lines[0][len(purgeMagic):], " %d %d %d", &l.version, &l.floor, &n); err != nil || n != len(lines)-1 {
		return nil, bad(0, fmt.Sprintf("bad first line %q", lines[0]))
	}
	off := len(lines[0]) + 1
	for _, ln := range lines[1:] {
		f := strings.Fields(ln)
		var v [7]uint64
		ok := len(f) == 8
		for i := 0; ok && i < 7; i++ {
			x, err := strconv.ParseUint(f[i+1], 10, 64)
			ok = err == nil
			v[i] = x
		}
		key, err := hex.DecodeString(f0(f))
		if !ok || err != nil {
			return nil, bad(off, fmt.Sprintf("bad line %q", ln))
		}
		l.dels = append(l.dels, compactplan.Delete{Key: string(key), UID: v[0],
			Header: compactplan.Pos{Seg: v[1], Gen: v[2], Off: int64(v[3])},
			Tomb:   compactplan.Pos{Seg: v[4], Gen: v[5], Off: int64(v[6])}})
		off += len(ln) + 1
	}
	return l, nil
}

func f0(f []string) string {
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// readPurgeLog reads the store's purge log; an empty one if there is
// none.
func (db *DB) readPurgeLog() (*purgeLog, error) {
	b, err := vfs.ReadFile(db.opts.FS, db.purgeLogPath())
	if errors.Is(err, fs.ErrNotExist) {
		return &purgeLog{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("engine: reading the purge log: %w", err)
	}
	return decodePurgeLog(b, db.purgeLogPath())
}

// purgeLogVersion reads only the version of the purge log (0: none), to
// tell whether it changed.
func (db *DB) purgeLogVersion() (uint64, error) {
	f, err := db.opts.FS.Open(db.purgeLogPath())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, 64)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, err
	}
	var v uint64
	if _, err := fmt.Sscanf(string(b[:n]), purgeMagic+" %d", &v); err != nil {
		return 0, &store.CorruptionError{Path: db.purgeLogPath(), Reason: "purge log: bad first line"}
	}
	return v, nil
}

// recordPurges adds dels, the deletes a compaction is about to purge,
// to the purge log, and drops those no cursor can need any more: a
// delete is needed while a segment exists from its header's (the
// first, if unknown) to its tombstone's. segs are the store's segments.
// The new log is written beside and renamed in place, durably, before
// it returns: a compaction that dies after leaves the deletes recorded
// (the feed uses a record only once its tombstone is gone).
func (db *DB) recordPurges(dels []compactplan.Delete, segs []uint64) error {
	old, err := db.readPurgeLog()
	force := false
	if ce := (*store.CorruptionError)(nil); errors.As(err, &ce) && len(segs) > 0 {
		// Damaged: what it said is lost. Every cursor up to the last
		// segment may have missed one of its deletes: they expire.
		v, _ := db.purgeLogVersion()
		db.opts.Logger.Warn("engine: compact: the purge log is damaged; it is replaced, and change feed cursors up to now expire", "error", err)
		old, err, force = &purgeLog{version: v, floor: segs[len(segs)-1]}, nil, true
	}
	if err != nil {
		return err
	}
	l := &purgeLog{version: old.version + 1, floor: old.floor}
	for _, d := range append(old.dels, dels...) {
		i, _ := slices.BinarySearch(segs, d.Header.Seg)
		if i < len(segs) && segs[i] <= d.Tomb.Seg {
			l.dels = append(l.dels, d)
		}
	}
	if !force && len(dels) == 0 && len(l.dels) == len(old.dels) {
		return nil // nothing to add or drop
	}
	if n := len(l.dels) - maxPurged; n > 0 {
		for _, d := range l.dels[:n] {
			l.floor = max(l.floor, d.Tomb.Seg)
		}
		l.dels = slices.Clone(l.dels[n:])
	}
	tmp := db.purgeLogPath() + ".tmp"
	if err := db.opts.FS.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := db.opts.FS.Create(tmp)
	if err != nil {
		return err
	}
	b := l.encode()
	_, err = f.WriteAt(b, 0)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = db.opts.FS.Rename(tmp, db.purgeLogPath())
	}
	if err == nil {
		err = db.opts.FS.SyncDir(db.dir)
	}
	if err != nil {
		return fmt.Errorf("engine: compact: writing the purge log: %w", err)
	}
	return nil
}
