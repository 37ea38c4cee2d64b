package engine

import (
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/wal"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// openRecovery is what an open found that needs doing before the store takes
// writes. A write open carries it out (recover); a read-only open and
// Check report it (Notes) and leave the files as they are, so that Check
// says what Open would do by running the same code.
type openRecovery struct {
	temps      []string            // unfinished creations and rewrites: ours by their names
	quarantine []quarantined       // files that are not (or no longer) segments this store can use
	drop       []uint64            // prepared segments that never held a frame
	tail       *segment.ScanResult // the newest segment's scan, to resume appending after
	tailID     uint64
	cp         index.Checkpoint // the index checkpoint the replay started from
	end        uint64           // a read-only open: the position its replay reached
	rebuild    string           // why the index is rebuilt from the segments; "" if it is used
	notes      []string
}

type quarantined struct {
	path, reason string
}

func (rc *openRecovery) note(format string, args ...any) {
	rc.notes = append(rc.notes, fmt.Sprintf(format, args...))
}

// QuarantineDir is the directory, inside a store, where Open moves files
// it cannot identify or use (a damaged index, a file under a segment's
// name that holds no segment) instead of deleting them.
const QuarantineDir = "quarantine"

// recover loads the index and replays the segments after its checkpoint.
// If the index cannot be read, or it disagrees with segments that are
// intact, the index is set aside and every segment is replayed instead
// (the index is a cache); only segments missing what the index proves was
// durable are an error. On a write open it then carries out the recovery:
// unfinished temporaries are removed, unusable files moved to quarantine/,
// unused prepared segments removed, the torn tail of the newest segment
// cut, migrations a crash cut short abandoned.
func (db *DB) recover() error {
	db.rec = &openRecovery{}
	if err := db.findTemporaries(); err != nil {
		return err
	}
	cp, err := db.loadIndex()
	if err != nil {
		return err
	}
	db.rec.cp = cp
	db.startFold()
	notes := len(db.rec.notes)
	if db.rebuildIndex && db.recIndex != nil {
		err = errRebuildRequested
	} else {
		err = db.replay(cp, false)
	}
	if err != nil && db.recIndex != nil && (isCorruption(err) || err == errRebuildRequested) {
		// The index may disagree with the segments: replay all of them.
		why := "it disagrees with the segments: " + err.Error()
		if err == errRebuildRequested {
			why = err.Error()
		}
		db.resetReplay()
		db.rec.notes = db.rec.notes[:notes] // the full replay finds them again
		if err := db.replay(cp, true); err != nil {
			return err // the segments themselves are damaged; the index stays
		}
		if err := db.checkIndexClaims(cp); err != nil {
			if !db.rebuildIndex {
				return err
			}
			// Asked for: the old index (kept in quarantine/) is overruled.
			db.opts.Logger.Warn("engine: rebuilding the index although it holds data the segments lack", "error", err)
		}
		if err := db.setIndexAside(why); err != nil {
			return err
		}
		err = nil
	}
	if err != nil {
		return err
	}
	if db.passive() {
		if db.opts.bound != 0 {
			db.fold.replacing = nil // Check: the store as one reopen would see it
		}
		if db.rec.tail != nil {
			db.rec.end = coord.Position(db.rec.tailID, db.rec.tail.End)
		}
		return nil
	}
	return db.carryOut()
}

// passive reports whether the open's recovery must leave the files as
// they are: a read-only open, or a write open that joins processes
// writing the store (its files are theirs too).
func (db *DB) passive() bool { return db.opts.ReadOnly || db.joined }

var errRebuildRequested = errors.New("a rebuild was asked for (RebuildIndex)")

func isCorruption(err error) bool {
	var ce *store.CorruptionError
	return errors.As(err, &ce)
}

// findTemporaries lists the files a crash left in the middle of creating
// or rewriting a segment (named by segment.TempName or RewriteName), or of
// writing a dictionary. They never held anything acknowledged (no frame
// names a dictionary before it is in place) and are removed at once by a
// write open.
func (db *DB) findTemporaries() error {
	names, err := db.opts.FS.List(db.dir)
	if err != nil {
		return fmt.Errorf("engine: list %s: %w", db.dir, err)
	}
	for _, n := range names {
		if segment.IsTemporary(n) {
			db.rec.temps = append(db.rec.temps, filepath.Join(db.dir, n))
		}
	}
	if len(db.rec.temps) == 0 {
		return nil
	}
	if db.passive() {
		db.rec.note("%d unfinished segment or dictionary files (a creation or compaction cut short): the next write open removes them", len(db.rec.temps))
		return nil
	}
	for _, p := range db.rec.temps {
		if err := db.opts.FS.Remove(p); err != nil {
			return fmt.Errorf("engine: removing unfinished %s: %w", p, err)
		}
	}
	if err := db.opts.FS.SyncDir(db.dir); err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	db.opts.Logger.Warn("engine: removed unfinished segment files of a creation or compaction cut short", "files", len(db.rec.temps))
	return nil
}

// loadIndex opens the index and loads its checkpoint and sessions. An
// index that cannot be read is set aside (rebuilt from the segments).
func (db *DB) loadIndex() (index.Checkpoint, error) {
	if db.opts.NoIndex {
		return index.Checkpoint{}, nil
	}
	if db.passive() {
		if _, err := os.Stat(db.opts.IndexPath); err != nil {
			db.rec.note("no index file: the next write open builds it from the segments")
			return index.Checkpoint{}, nil // none yet: read every segment
		}
	}
	ld := newSessionLoader()
	defer ld.finish()
	idx, err := index.Open(db.opts.IndexPath, &index.Options{ReadOnly: db.passive(), Timeout: indexWait, Sessions: ld.add})
	if errors.Is(err, index.ErrLocked) {
		return index.Checkpoint{}, fmt.Errorf("engine: %w", err)
	}
	if err != nil {
		return index.Checkpoint{}, db.setIndexAside("it cannot be read: " + err.Error())
	}
	db.recIndex = idx
	if err := db.checkRewriteIntent(); err != nil {
		return index.Checkpoint{}, err
	}
	if db.recIndex == nil {
		return index.Checkpoint{}, nil
	}
	cp, err := db.recIndex.Checkpoint()
	if err == nil && cp.Created != 0 {
		// The checkpoint's segment must be the one the index was written
		// with: an index of another store, or an old copy of this one,
		// proves nothing about these segments.
		if r, oerr := segment.OpenReader(db.opts.FS, db.segPath(cp.Segment)); oerr == nil {
			created := r.Header().CreatedNs
			r.Close()
			if created != cp.Created {
				return index.Checkpoint{}, db.setIndexAside(fmt.Sprintf("it belongs to another store or an older copy of this one (its checkpoint's segment %d was created at %d, the store's at %d)", cp.Segment, cp.Created, created))
			}
		}
	}
	if err != nil {
		return index.Checkpoint{}, db.setIndexAside("it cannot be read: " + err.Error())
	}
	sessions, inOrder := ld.finish()
	db.mu.sessions = sessions
	db.mu.list.Seed(idsOf(inOrder))
	db.mu.byUpdated.seed(inOrder, true)
	return cp, nil
}

// startFold starts a replay of frames into db.mu.sessions.
func (db *DB) startFold() {
	db.fold = newFold(db.mu.sessions, true)
	db.fold.onList = db.relist
}

// setIndexAside stops using the index for this open. A write open moves
// the file to quarantine/ and starts an empty index, which the first
// checkpoint fills with everything replayed; a read-only open just reads
// every segment.
func (db *DB) setIndexAside(why string) error {
	if db.recIndex != nil {
		db.recIndex.Close()
		db.recIndex = nil
	}
	db.rec.rebuild = why
	if db.passive() {
		db.rec.note("the index is not used (%s): the next write open sets it aside and rebuilds it from the segments", why)
		return nil
	}
	db.opts.Logger.Warn("engine: the index is set aside and rebuilt from the segments", "reason", why, "index", db.opts.IndexPath)
	return db.newIndex(func() error {
		// The index is a file of the OS (bbolt), wherever the segments are.
		qdir := filepath.Join(db.dir, QuarantineDir)
		if db.opts.FS != vfs.Default {
			qdir = ""
		}
		return moveAside(vfs.Default, db.opts.IndexPath, qdir)
	})
}

// newIndex gets the old index file out of the way (away) and starts an
// empty index, which the first checkpoint fills with everything replayed.
func (db *DB) newIndex(away func() error) error {
	if err := away(); err != nil {
		return fmt.Errorf("engine: replacing the index: %w", err)
	}
	idx, err := index.Open(db.opts.IndexPath, nil)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	db.recIndex = idx
	return nil
}

// moveAside moves path into the directory qdir (created if needed), or,
// if qdir is "" or on another file system, next to itself under a
// ".quarantined-" name, and makes the move durable. A path that does not
// exist is nothing to move.
func moveAside(fsys vfs.FS, path, qdir string) error {
	f, err := fsys.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		f.Close()
	}
	stamp := time.Now().UTC().Format("20060102T150405.000000000Z")
	dir := filepath.Dir(path)
	moved := false
	if qdir != "" {
		if err := fsys.MkdirAll(qdir, 0o755); err == nil && fsys.SyncDir(filepath.Dir(qdir)) == nil {
			moved = fsys.Rename(path, filepath.Join(qdir, filepath.Base(path)+"."+stamp)) == nil
		}
	}
	if !moved {
		qdir = dir
		if err := fsys.Rename(path, path+".quarantined-"+stamp); err != nil {
			return err
		}
	}
	if err := fsys.SyncDir(qdir); err != nil {
		return err
	}
	if qdir != dir {
		return fsys.SyncDir(dir)
	}
	return nil
}

// quarantineDir is the store's quarantine directory.
func (db *DB) quarantineDir() string { return filepath.Join(db.dir, QuarantineDir) }

// resetReplay forgets what a replay built, for another one.
func (db *DB) resetReplay() {
	for _, r := range db.mu.readers {
		r.Close()
	}
	db.mu.readers = map[uint64]*segment.Reader{}
	db.mu.sessions = map[string]*session{}
	db.mu.list.Reset()
	db.mu.byUpdated.reset()
	db.startFold()
	rb, notes := db.rec.rebuild, db.rec.notes
	*db.rec = openRecovery{temps: db.rec.temps, rebuild: rb, notes: notes}
}

// checkIndexClaims, after a replay of every segment, checks what the
// index proves was durable: the checkpoint's segment up to its offset,
// and every session it holds (unless the replay met its end: a tombstone,
// or the migration that replaced it).
func (db *DB) checkIndexClaims(cp index.Checkpoint) error {
	if cp.Segment != 0 && cp.Offset > segment.HeaderSize {
		f, err := db.opts.FS.Open(db.segPath(cp.Segment))
		if err == nil {
			f.Close()
		} else {
			return &store.CorruptionError{Path: db.segPath(cp.Segment), Offset: cp.Offset,
				Reason: "segment missing: the index checkpoint proves it held durable data up to this offset"}
		}
	}
	var lost []string
	err := db.recIndex.Sessions(func(is index.Session) error {
		if db.fold.ended[is.UID] {
			return nil
		}
		s := db.mu.sessions[is.ID]
		switch {
		case s == nil || s.uid != is.UID:
			lost = append(lost, fmt.Sprintf("session %q (%d events) is in the index but not in the segments", is.ID, is.Events))
		case s.next < is.Events:
			lost = append(lost, fmt.Sprintf("session %q: the index holds %d events, the segments %d", is.ID, is.Events, s.next))
		}
		return nil
	})
	if err != nil {
		return nil // an index that cannot be read proves nothing
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		return &store.CorruptionError{Path: db.dir, Offset: -1, Reason: "segments lost acknowledged data: " + strings.Join(lost, "; ")}
	}
	return nil
}

// replay reads the segments from the checkpoint cp (with all, every
// segment) into db.mu.sessions and db.mu.pend, and decides what the recovery
// does with the newest segments. The checkpoint is what the index proves
// durable either way: its segment and those before it are never dropped,
// and damage before its offset is never taken for a torn tail.
func (db *DB) replay(cp index.Checkpoint, all bool) error {
	ids, err := segment.List(db.opts.FS, db.dir)
	if err != nil {
		return fmt.Errorf("engine: list %s: %w", db.dir, err)
	}
	if ids, err = db.planTail(ids, cp); err != nil {
		return err
	}
	if db.knobs.listed != nil {
		db.knobs.listed()
	}
	if db.bound != 0 {
		// Another process writes the store: read what it made durable,
		// never a frame it is writing. Its index checkpoint (read after
		// the durable position was) may be past it, and is durable too.
		if c := coord.Position(cp.Segment, cp.Offset); cp.Segment != 0 && c > db.bound {
			db.bound = c
		}
		bseg, _ := coord.SplitPosition(db.bound)
		ids = slices.DeleteFunc(ids, func(id uint64) bool { return id > bseg })
	}
	if cp.Segment != 0 && !slices.Contains(ids, cp.Segment) {
		return &store.CorruptionError{Path: db.segPath(cp.Segment), Offset: cp.Offset, Reason: "segment named by the index checkpoint is missing"}
	}
	// Sessions the index knows have their frames in the index; every
	// session first met in the scan has all of them in memory.
	for i, id := range ids {
		last := i == len(ids)-1
		if id < cp.Segment && !all {
			// Indexed, not read; but it must still be whole.
			if err := segment.CheckSealed(db.opts.FS, db.segPath(id)); err != nil {
				return fmt.Errorf("engine: %w", err)
			}
			continue
		}
		path := db.segPath(id)
		r, err := db.openSegment(id)
		if err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		db.mu.readers[id] = r
		opts := segment.ScanOptions{}
		if bseg, boff := coord.SplitPosition(db.bound); db.bound != 0 && id == bseg {
			opts.Limit = boff
			if err := r.Remap(); err != nil {
				return err
			}
		}
		if opts.Limit > 0 {
			// Published durable by the writing processes: damage below it
			// is corruption, never a torn tail.
			opts.Durable = opts.Limit
		}
		if id == cp.Segment {
			opts.Durable = max(opts.Durable, cp.Offset)
			if !all {
				opts.From = cp.Offset
			}
		}
		res, err := r.Scan(opts, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindSeal {
				return nil
			}
			_, err := db.fold.frame(r, id, fi)
			return err
		})
		if err != nil {
			return err
		}
		if !last && (!res.Sealed || res.Torn) {
			reason := "segment before the newest is not sealed"
			if res.TornReason != "" {
				reason += ": " + res.TornReason
			}
			return &store.CorruptionError{Path: path, Offset: res.End, Reason: reason}
		}
		if last {
			db.rec.tail, db.rec.tailID = &res, id
			if res.Torn {
				db.rec.note("%s @%d: torn tail (%s), never acknowledged: a write open cuts it", path, res.End, res.TornReason)
			}
		}
	}
	if err := db.fold.finish(); err != nil {
		return err
	}
	db.mu.pend = append(db.mu.pend, db.fold.pend...)
	db.fold.pend = nil
	for key, rp := range db.fold.replacing {
		if rp.fork {
			db.rec.note("%s @%d: the fork %q was cut short before its marker: a write open abandons it", db.segPath(rp.start.seg), rp.start.off, key)
			continue
		}
		db.rec.note("%s @%d: the migration of session %q was cut short: a write open abandons it (the old format stays)", db.segPath(rp.start.seg), rp.start.off, key)
	}
	return nil
}

// carryOut is a write open's part of the recovery, once the replay
// succeeded.
func (db *DB) carryOut() error {
	fsys := db.opts.FS
	for _, q := range db.rec.quarantine {
		db.opts.Logger.Warn("engine: moved a file that is not a usable segment to quarantine", "file", q.path, "reason", q.reason)
		if err := moveAside(db.opts.FS, q.path, db.quarantineDir()); err != nil {
			return fmt.Errorf("engine: quarantining %s: %w", q.path, err)
		}
	}
	if db.shared.First() && db.shared.Writes() {
		// No process holds a lease: a record left is a dead holder's.
		db.removeLeaseRecords()
	}
	drop := db.rec.drop
	if !db.shared.First() {
		// Readers have the store open: a file they may be about to open
		// stays. An empty segment prepared ahead of a roll is the next
		// roll's (or this open's next segment, below).
		drop = nil
	}
	for _, id := range drop {
		if err := fsys.Remove(db.segPath(id)); err != nil {
			return fmt.Errorf("engine: removing unused prepared segment: %w", err)
		}
	}
	if len(drop) > 0 {
		if err := fsys.SyncDir(db.dir); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
	}
	var tailID uint64
	var tailEnd int64
	var frames uint32
	if t := db.rec.tail; t != nil && !t.Sealed {
		if t.Torn {
			db.opts.Logger.Warn("engine: recovered a torn tail; incomplete tail bytes were discarded",
				"segment", db.segPath(db.rec.tailID), "offset", t.End, "reason", t.TornReason)
		}
		// Cut the torn tail (zero or trim what follows the last frame),
		// synced before anything is appended after it.
		if err := wal.CutTail(fsys, db.segPath(db.rec.tailID), *t, !db.opts.NoPreallocate); err != nil {
			return fmt.Errorf("engine: %w", err)
		}
		tailID, tailEnd, frames = db.rec.tailID, t.End, t.Frames
	} else {
		next := db.rec.tailID + 1
		if db.rec.tail == nil {
			next = db.lastSegmentID() + 1
		}
		if slices.Contains(db.rec.drop, next) && !slices.Contains(drop, next) {
			// Prepared (and kept): it holds no frame, as planTail checked.
		} else {
			if err := segment.Create(fsys, db.segPath(next), next, db.opts.createOptions(next)); err != nil {
				return fmt.Errorf("engine: %w", err)
			}
		}
		tailID, tailEnd = next, segment.HeaderSize
	}
	// The shared log starts where the recovery left the files.
	db.shared.SetUp(tailID, tailEnd, frames)
	db.rec.end = coord.Position(tailID, tailEnd)
	db.log = newLog(db)
	return db.abandonMigrations()
}

// lastSegmentID is the highest segment ID in use or set aside by this
// recovery (a new segment never reuses a quarantined one's name), 0 if none.
func (db *DB) lastSegmentID() uint64 {
	var last uint64
	for id := range db.mu.readers {
		last = max(last, id)
	}
	for _, id := range db.rec.drop {
		last = max(last, id)
	}
	for _, q := range db.rec.quarantine {
		if id, ok := segment.ParseName(filepath.Base(q.path)); ok {
			last = max(last, id)
		}
	}
	return last
}

// checkRewriteIntent handles a compaction's rewrite that a crash cut
// short (see Compact). If the rewritten segment is in place, the index's
// offsets into it are stale until the intent's moves are applied: a write
// open does so (FinishRewrite), if no compaction runs; an intent an older
// build recorded without its moves makes the index rebuilt from the
// segments (read only: not used). Otherwise the rewrite changed nothing and
// its intent is cleared.
func (db *DB) checkRewriteIntent() error {
	rw, ok, err := db.recIndex.Rewrite()
	if err != nil {
		return db.setIndexAside("it cannot be read: " + err.Error())
	}
	if !ok {
		return nil
	}
	landed := true // a segment that cannot be read: rebuild, and let the replay report it
	readable := false
	if r, err := segment.OpenReader(db.opts.FS, db.segPath(rw.Segment)); err == nil {
		landed = r.Header().Generation >= rw.Generation
		readable = true
		r.Close()
	}
	// (A joining writer has the index read-only: it settled what a dead
	// compaction left before, see open; an intent still there is a
	// running compaction's.)
	settle := !db.passive()
	switch {
	case !landed && !settle:
		db.rec.note("a compaction's rewrite of segment %d never landed: a write open clears its intent", rw.Segment)
		return nil
	case (!landed || readable) && settle:
		// (A layout change the compaction left is ended by open.)
		if settled, err := db.settleIntent(db.recIndex, rw, landed); err != nil || settled {
			return err
		}
	case readable && rw.HasMoves:
		db.rec.note("a compaction's rewrite of segment %d is in place and its index moves are not applied yet: a write open applies them", rw.Segment)
	}
	why := fmt.Sprintf("a compaction was cut short after rewriting segment %d: its offsets in the index are stale", rw.Segment)
	db.recIndex.Close()
	db.recIndex = nil
	db.rec.rebuild = why
	if db.passive() {
		db.rec.note("the index is not used (%s): the next write open rebuilds it from the segments", why)
		return nil
	}
	// Proven stale, and ours: removed rather than set aside.
	db.opts.Logger.Warn("engine: rebuilding the index from the segments", "reason", why)
	return db.newIndex(func() error { return index.Remove(db.opts.IndexPath) })
}

// abandonMigrations ends the replay of migrations a crash cut short: their
// new incarnation never took over (the old one is the session), and a
// durable tombstone of it tells later replays so before anything else is
// appended.
func (db *DB) abandonMigrations() error {
	replacing := db.fold.replacing
	// The replay is over; what follows is the other processes' frames.
	db.startFold()
	keys := slices.Sorted(maps.Keys(replacing))
	if len(keys) == 0 {
		return nil
	}
	var es []*segment.Encoded
	for _, key := range keys {
		rp := replacing[key]
		e, err := db.encoder(false).Delete(key, rp.s.uid)
		if err != nil {
			return err
		}
		es = append(es, e)
		if rp.fork {
			db.opts.Logger.Warn("engine: a fork was cut short before its marker; it never was", "session", key)
			continue
		}
		db.opts.Logger.Warn("engine: a migration was cut short; the session stays in its old format", "session", key)
	}
	if err := db.log.Place(&wal.Placement{Frames: es}); err != nil {
		return fmt.Errorf("engine: abandoning migrations: %w", err)
	}
	if err := db.log.SyncPlaced(); err != nil {
		return fmt.Errorf("engine: abandoning migrations: %w", err)
	}
	return nil
}

// planTail decides, from the end of the segment list, what to do with
// newest files that hold no frame, and returns the segments to replay:
//
//   - a file under a segment's name without a valid header and without
//     anything that looks like a frame is not a segment this engine
//     finished writing (segments are created under a temporary name and
//     renamed once their header is synced): it is moved to quarantine/;
//   - a valid segment with no frame after an unsealed segment was
//     prepared ahead of a roll that never came (a roll syncs the seal of
//     the previous segment first): it is removed;
//   - a valid header naming another segment (a copy, a misnamed file) is
//     a *CorruptionError at that file.
//
// Never the segment the index checkpoint names, nor one before it: the
// index proves those were in use.
func (db *DB) planTail(ids []uint64, cp index.Checkpoint) ([]uint64, error) {
	fsys := db.opts.FS
	for len(ids) > 0 {
		id := ids[len(ids)-1]
		if id <= cp.Segment {
			return ids, nil
		}
		if bseg, _ := coord.SplitPosition(db.bound); db.bound != 0 && id > bseg {
			// Past what the writing processes made durable: theirs
			// (prepared, or written and sealed now; a seal trims the
			// segment before it, and a scan of a mapping past the file's
			// new end faults). The replay reads no further anyway.
			ids = ids[:len(ids)-1]
			continue
		}
		path := db.segPath(id)
		r, err := segment.OpenReader(fsys, path)
		switch {
		case err != nil:
			if !unidentifiable(fsys, path, err) {
				// Reported at this file, not as the segment before it
				// being unsealed.
				return nil, fmt.Errorf("engine: newest segment file: %w", err)
			}
			reason := "not a segment (no valid header) and holds no frame: " + err.Error()
			db.rec.quarantine = append(db.rec.quarantine, quarantined{path: path, reason: reason})
			db.rec.note("%s: %s; a write open moves it to %s/", path, reason, QuarantineDir)
		case r.Header().ID != id:
			// A valid header of another segment (a copy, a misnamed
			// file): reported where it is, not as the segment before it
			// being unsealed.
			r.Close()
			return nil, &store.CorruptionError{Path: path, Offset: 0, Reason: fmt.Sprintf("header says segment %d", r.Header().ID)}
		case len(ids) > 1:
			empty, err := noFrames(r)
			r.Close()
			if err != nil || !empty {
				return ids, nil
			}
			sealed, _ := isSealed(fsys, db.segPath(ids[len(ids)-2]))
			if sealed {
				return ids, nil // the active segment, rolled to but not yet written
			}
			db.rec.drop = append(db.rec.drop, id)
			db.rec.note("%s: prepared for a roll that never came (no frame): a write open removes it", path)
		default:
			r.Close()
			return ids, nil
		}
		ids = ids[:len(ids)-1]
	}
	return ids, nil
}

var errStopScan = errors.New("stop")

// noFrames reports whether the segment holds no valid frame (a sealed
// segment holds its seal frame at least).
func noFrames(r *segment.Reader) (bool, error) {
	found := false
	_, err := r.Scan(segment.ScanOptions{}, func(*segment.FrameInfo) error {
		found = true
		return errStopScan // the first frame answers the question
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return false, err
	}
	return !found, nil
}

// isSealed reports whether the segment at path ends with a seal frame; a
// segment that cannot be read is not.
func isSealed(fsys vfs.FS, path string) (bool, error) {
	r, err := segment.OpenReader(fsys, path)
	if err != nil {
		return false, err
	}
	defer r.Close()
	res, err := r.Scan(segment.ScanOptions{}, nil)
	return res.Sealed && err == nil, err
}

// unidentifiable reports whether err from opening a segment file means it
// is not a segment at all: the header is bad and the file holds nothing
// that looks like a frame. A bad header with frames after it is damage to
// a real segment (corruption, reported); a valid header of another format
// version is refused, never moved.
func unidentifiable(fsys vfs.FS, path string, err error) bool {
	var ce *store.CorruptionError
	var fe *store.FormatError
	switch {
	case errors.As(err, &ce) && ce.Offset == 0:
	case errors.As(err, &fe):
	default:
		return false
	}
	b, rerr := vfs.ReadFile(fsys, path)
	if rerr != nil {
		return false
	}
	if fe != nil && segment.HeaderChecksumOK(b) {
		return false
	}
	return !segment.MayHoldFrames(b)
}
