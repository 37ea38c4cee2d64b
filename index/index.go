package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Version is the index format version this build writes and reads. Part of
// the on-disk format.
const Version = 1

// Bucket and key names. Part of the on-disk format.
var (
	bucketMeta           = []byte("meta")
	bucketSessions       = []byte("sessions")
	bucketFrames         = []byte("frames")
	keyVersion           = []byte("version")
	keyCheckpoint        = []byte("checkpoint")
	keyRewrite           = []byte("rewrite")
	keyCheckpointSegment = []byte("checkpoint-segment")
)

// ErrLocked is returned by Open when another process has the index open.
var ErrLocked = errors.New("index: locked by another process")

// Checkpoint is the position in the segments up to which the index holds
// every frame: frames before it are indexed, frames at or after it must be
// re-read from the segments on open. The zero value means nothing is
// indexed.
type Checkpoint struct {
	Segment uint64 // segment ID
	Offset  int64  // offset within that segment
	// Created is the creation time (Unix ns) in that segment's header, so
	// that an index of another store, or an old copy, is told from the
	// store's own; 0 if unknown (indexes written before it was kept).
	Created int64
}

// Less reports whether c is before d.
func (c Checkpoint) Less(d Checkpoint) bool {
	return c.Segment < d.Segment || (c.Segment == d.Segment && c.Offset < d.Offset)
}

// Session is the catalog entry of one session.
type Session struct {
	ID        string
	Header    []byte // the session header, as the engine encodes it (opaque here)
	UID       uint64 // unique per incarnation of the ID within the store
	Events    uint64 // events stored (the next seq)
	Size      int64  // bytes of frames on disk
	Inherited uint64
	// What the engine lists the session by, as of its first MetaEvents
	// events (at most Events; the engine reads the frames after them to
	// bring it up to date): Title is the latest session/title's, "" if
	// none; UpdatedAt the time of event MetaEvents-1. A record of version
	// 1 has MetaEvents 0: nothing known.
	Title      string
	UpdatedAt  int64
	MetaEvents uint64
	// Checked is how many of the session's first events (at most Events)
	// a write open of the engine need not check again under a catalog
	// whose fingerprint is Catalog (event.Catalog.Fingerprint): they
	// keep the seed marker rules and that catalog accepts them. 0 (and
	// Catalog 0): none. A record of version 1 or 2 has none.
	Checked uint64
	Catalog uint64
	// TurnFrom is the seq, plus one, of a turn/start or turn/end among
	// the session's first Events events, where the engine's fold of its
	// open turn starts (a hint it checks against the log); 0: none known.
	// A record of version 1, 2 or 3 has none.
	TurnFrom uint64
}

// A session record: a version byte, then uvarints uid, events, size and
// inherited; in versions 2 and 3, then a uvarint MetaEvents, a varint
// (zigzag) UpdatedAt, and the Title as a uvarint length and its bytes; in
// version 3, then a uvarint Checked (at most events) and the Catalog
// fingerprint, uint64 LE; in version 4, then a uvarint Checked (0: none)
// and the Catalog fingerprint, uint64 LE, and a uvarint TurnFrom (1 to
// events); then the header bytes (the rest). This build writes version 4
// for a session with a TurnFrom, else version 3 for one with a Checked
// count, else version 2, and reads all four. Part of the on-disk format.
const (
	sessionRecordV1 = 1
	sessionRecordV2 = 2
	sessionRecordV3 = 3
	sessionRecordV4 = 4
)

func encodeSession(s Session) []byte {
	b := make([]byte, 0, 1+8*binary.MaxVarintLen64+8+len(s.Title)+len(s.Header))
	switch {
	case s.TurnFrom > 0:
		b = append(b, sessionRecordV4)
	case s.Checked > 0:
		b = append(b, sessionRecordV3)
	default:
		b = append(b, sessionRecordV2)
	}
	b = binary.AppendUvarint(b, s.UID)
	b = binary.AppendUvarint(b, s.Events)
	b = binary.AppendUvarint(b, uint64(s.Size))
	b = binary.AppendUvarint(b, s.Inherited)
	b = binary.AppendUvarint(b, s.MetaEvents)
	b = binary.AppendVarint(b, s.UpdatedAt)
	b = binary.AppendUvarint(b, uint64(len(s.Title)))
	b = append(b, s.Title...)
	if s.Checked > 0 || s.TurnFrom > 0 {
		b = binary.AppendUvarint(b, s.Checked)
		b = binary.LittleEndian.AppendUint64(b, s.Catalog)
	}
	if s.TurnFrom > 0 {
		b = binary.AppendUvarint(b, s.TurnFrom)
	}
	return append(b, s.Header...)
}

func decodeSession(v []byte) (Session, bool) {
	s, hdr, ok := parseSession(v)
	if !ok {
		return Session{}, false
	}
	s.Header = bytes.Clone(hdr)
	return s, true
}

func validSession(v []byte) bool {
	_, _, ok := parseSession(v)
	return ok
}

// parseSession decodes a session record but its header bytes (hdr, which
// share v's memory).
func parseSession(v []byte) (s Session, hdr []byte, ok bool) {
	if len(v) == 0 || v[0] < sessionRecordV1 || v[0] > sessionRecordV4 {
		return s, nil, false
	}
	version := v[0]
	v = v[1:]
	uv := func() uint64 {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			ok = false
			return 0
		}
		v = v[n:]
		return x
	}
	ok = true
	s.UID, s.Events, s.Size, s.Inherited = uv(), uv(), int64(uv()), uv()
	if !ok {
		return Session{}, nil, false
	}
	if version == sessionRecordV1 {
		return s, v, true
	}
	s.MetaEvents = uv()
	if !ok || s.MetaEvents > s.Events {
		return Session{}, nil, false
	}
	at, n := binary.Varint(v)
	if n <= 0 {
		return Session{}, nil, false
	}
	s.UpdatedAt, v = at, v[n:]
	tl := uv()
	if !ok || tl > uint64(len(v)) {
		return Session{}, nil, false
	}
	s.Title, v = string(v[:tl]), v[tl:]
	if version >= sessionRecordV3 {
		s.Checked = uv()
		if !ok || (s.Checked == 0 && version == sessionRecordV3) || s.Checked > s.Events || len(v) < 8 {
			return Session{}, nil, false
		}
		s.Catalog, v = binary.LittleEndian.Uint64(v), v[8:]
	}
	if version == sessionRecordV4 {
		s.TurnFrom = uv()
		if !ok || s.TurnFrom == 0 || s.TurnFrom > s.Events {
			return Session{}, nil, false
		}
	}
	return s, v, true
}

// Frame locates one frame of a session.
type Frame struct {
	FirstSeq uint64
	Count    uint32
	Segment  uint64
	Offset   int64
	Size     uint32
}

const frameValueLen = 24

// SessionFrame is a Frame of a named session.
type SessionFrame struct {
	ID string
	Frame
}

// Update is one atomic change to the index.
type Update struct {
	Sessions   []Session      // upserted
	Frames     []SessionFrame // added
	Deleted    []string       // sessions removed, with their frames (applied first)
	Checkpoint Checkpoint     // the new checkpoint; it never moves back
	// Forks records forks indexed in this update in the registry (applied
	// first: a parent deleted in the same update keeps, retired, the
	// frames they share); Unforks removes deleted forks from it, and the
	// retired frames no fork shares any more. See SharedFrames.
	Forks   []Fork
	Unforks []Fork
	// Ended are frames of incarnations that a tombstone in this update
	// ends before the index ever held them: those that a registered fork
	// shares are retired, the others dropped.
	Ended []SessionFrame
	// EndedUIDs are the incarnations of Ended, by index.
	EndedUIDs []uint64
}

// Options configures Open. A nil *Options means the defaults.
type Options struct {
	// ReadOnly opens the index for reading, sharing it with other readers.
	ReadOnly bool
	// NoSync skips bbolt's fsyncs. The index is rebuildable from the
	// segments, so losing its tail costs only a longer next open; the engine
	// still syncs by default so that reopening stays cheap.
	NoSync bool
	// Timeout bounds the wait for bbolt's file lock; default 100ms.
	Timeout time.Duration
	// NoCheck skips the check of the whole file before bbolt reads it. It
	// is for a caller that opened and checked the file before, and opens
	// it again for each use (the engine, which shares the file with other
	// processes): a damaged page bbolt then meets is still a *DamageError,
	// never a panic, but damage is found only where a read goes.
	NoCheck bool
	// Sessions, if set, is called by Open's check of the file with each
	// session record it meets, in ID order, with its ID and header bytes
	// in the file's memory, valid only until it returns (s.ID is "" and
	// s.Header nil): a caller that loads every session needs no second
	// walk of them, and copies them in bulk.
	// They are the index's sessions if Open succeeds (a check that fails
	// may have passed some before). Not called for a file Open creates,
	// nor with NoCheck.
	Sessions func(id []byte, s Session, header []byte)
}

// Index is the bbolt-backed catalog. It is safe for concurrent use.
type Index struct {
	db       *bolt.DB
	path     string
	file     *os.File // bbolt's file (bbolt closes it)
	readOnly bool
	broken   atomic.Pointer[DamageError] // set once bbolt panicked or faulted
}

// Open opens or creates the index file at path.
//
// An existing file is checked whole before bbolt reads it (see Verify for
// what a check covers, and doc.go for what no check can see): Open returns
// a *DamageError (errors.Is(err, ErrDamaged)) for a file that is empty,
// truncated, not a bbolt file, a bbolt file of another layout, damaged in
// any page bbolt would read, or of another index format version (the
// *DamageError then wraps a *base.FormatError). It returns ErrLocked if
// another process holds the file, and an error wrapping fs.ErrNotExist for
// a read-only open of a missing file. A failed Open writes nothing.
func Open(path string, opts *Options) (*Index, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = 100 * time.Millisecond
	}
	f, fresh, err := lockFile(path, o.ReadOnly, o.Timeout)
	if err != nil {
		return nil, err
	}
	if !fresh && !o.NoCheck {
		if err := checkLocked(f, path, &fileCheck{onSession: o.Sessions}); err != nil {
			f.Close()
			return nil, err
		}
	}
	size, mapped := sizes(f)
	var db *bolt.DB
	err = protect(path, "open", nil, func() error {
		var err error
		db, err = bolt.Open(path, 0o644, &bolt.Options{
			Timeout:         o.Timeout,
			ReadOnly:        o.ReadOnly,
			NoSync:          o.NoSync,
			InitialMmapSize: mapped,
			// The free list is written with each commit: the engine opens
			// the index for each checkpoint (other processes use it too),
			// and an open without it walks every page to rebuild it.
			NoFreelistSync: false,
			FreelistType:   bolt.FreelistMapType,
			// bbolt takes the lock lockFile holds again, on the same file.
			OpenFile: func(string, int, os.FileMode) (*os.File, error) { return f, nil },
		})
		return err
	})
	if err != nil {
		// bbolt closed the file, unless it panicked, maybe with the file
		// still mapped: a mapping keeps the open file (and so its flock)
		// alive after the close, and every other opener would wait for
		// this process to exit. The lock goes first.
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		switch {
		case errors.Is(err, ErrDamaged):
			return nil, err
		case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
			return nil, newDamage(path, -1, "bbolt refuses it", err)
		case errors.Is(err, bolt.ErrTimeout):
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	db.AllocSize = growStep(size)
	x := &Index{db: db, path: path, file: f, readOnly: o.ReadOnly}
	if fresh {
		if err := x.create(); err != nil {
			db.Close()
			return nil, err
		}
	}
	return x, nil
}

// sizes returns the index file's size and the size bbolt maps it at: the
// file and as much again (at least mapHeadroom) of address space past it.
// A commit that grows the file past its mapping maps it again, and bbolt
// first copies every key and value the write transaction holds out of the
// old mapping: with the index opened for each checkpoint at the size of
// the file, that was most checkpoints once the file grew, and a sixth of a
// durable flush's allocations. The space past the end is only reserved,
// never touched.
func sizes(f *os.File) (size int64, mapped int) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0 // bbolt maps the file's size
	}
	return fi.Size(), int(fi.Size() + max(fi.Size(), mapHeadroom))
}

// mapHeadroom is the least address space mapped past the index file's end.
const mapHeadroom = 4 << 20

// growStep is bbolt's AllocSize for a file of size bytes: how much it adds
// past what a commit needs when it grows the file. bbolt grows a file
// mapped at no more than AllocSize to its whole mapping, so the step must
// stay under the mapping for the file to stay sized to its content: a
// quarter of the file, between 64 KiB and bbolt's default 16 MiB.
func growStep(size int64) int {
	return int(min(max(size/4, 64<<10), 16<<20))
}

// create lays out a new index.
func (x *Index) create() error {
	return x.db.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if err := m.Put(keyVersion, binary.LittleEndian.AppendUint16(nil, Version)); err != nil {
			return err
		}
		for _, b := range [][]byte{bucketSessions, bucketFrames} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// do runs fn, an operation that reads pages, under protect. Once bbolt has
// panicked or faulted, every later call returns that damage.
func (x *Index) do(op string, user *bool, fn func() error) error {
	if d := x.broken.Load(); d != nil {
		return d
	}
	err := protect(x.path, op, user, fn)
	var pe panicError
	var d *DamageError
	if errors.As(err, &pe) && errors.As(err, &d) {
		x.broken.CompareAndSwap(nil, d)
	}
	return err
}

// damagef returns a *DamageError for a record that does not decode.
func (x *Index) damagef(format string, args ...any) error {
	return newDamage(x.path, -1, fmt.Sprintf(format, args...), nil)
}

// Path returns the index file name.
func (x *Index) Path() string { return x.path }

// Close closes the index.
func (x *Index) Close() error { return x.db.Close() }

// Checkpoint returns the stored checkpoint.
func (x *Index) Checkpoint() (Checkpoint, error) {
	var c Checkpoint
	err := x.do("checkpoint", nil, func() error {
		return x.db.View(func(tx *bolt.Tx) error {
			var err error
			c, err = x.checkpoint(tx)
			return err
		})
	})
	return c, err
}

func (x *Index) checkpoint(tx *bolt.Tx) (Checkpoint, error) {
	m := tx.Bucket(bucketMeta)
	if m == nil {
		return Checkpoint{}, x.damagef("no meta bucket")
	}
	v := m.Get(keyCheckpoint)
	if v == nil {
		return Checkpoint{}, nil
	}
	if len(v) != 16 {
		return Checkpoint{}, x.damagef("checkpoint of %d bytes", len(v))
	}
	cp := Checkpoint{Segment: binary.LittleEndian.Uint64(v), Offset: int64(binary.LittleEndian.Uint64(v[8:]))}
	if c := m.Get(keyCheckpointSegment); c != nil {
		if len(c) != 8 {
			return Checkpoint{}, x.damagef("checkpoint segment of %d bytes", len(c))
		}
		cp.Created = int64(binary.LittleEndian.Uint64(c))
	}
	return cp, nil
}

// bucket returns the named bucket of tx; the layout has it.
func (x *Index) bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, x.damagef("no %q bucket", name)
	}
	return b, nil
}

// Sessions calls fn for every session, in ID order. A panic in fn is fn's
// own and goes up unchanged.
func (x *Index) Sessions(fn func(Session) error) error {
	var user bool
	return x.do("sessions", &user, func() error {
		return x.db.View(func(tx *bolt.Tx) error {
			b, err := x.bucket(tx, bucketSessions)
			if err != nil {
				return err
			}
			return b.ForEach(func(k, v []byte) error {
				s, ok := decodeSession(v)
				if !ok {
					return x.damagef("session %q record is malformed", k)
				}
				s.ID = string(k)
				user = true
				err := fn(s)
				user = false
				return err
			})
		})
	})
}

func frameKey(dst []byte, id string, seq uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// parseFrameKey splits a frames key into session ID and first seq.
func parseFrameKey(k []byte) (id []byte, seq uint64, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)) || uint64(len(k)) != uint64(w)+n+8 {
		return nil, 0, false
	}
	return k[w : w+int(n)], binary.BigEndian.Uint64(k[w+int(n):]), true
}

func decodeFrame(seq uint64, v []byte) Frame {
	return Frame{
		FirstSeq: seq,
		Segment:  binary.LittleEndian.Uint64(v),
		Offset:   int64(binary.LittleEndian.Uint64(v[8:])),
		Count:    binary.LittleEndian.Uint32(v[16:]),
		Size:     binary.LittleEndian.Uint32(v[20:]),
	}
}

// Frames returns the frames of session id, in seq order.
func (x *Index) Frames(id string) ([]Frame, error) {
	_, out, err := x.framesOf(id, false)
	return out, err
}

// FramesOf returns the incarnation (UID) session id has in the index, 0 if
// it has none, and its frames in seq order, as of one moment: another
// process may checkpoint between two calls, and a session deleted and
// created again meanwhile has another incarnation's frames.
func (x *Index) FramesOf(id string) (uint64, []Frame, error) {
	return x.framesOf(id, true)
}

func (x *Index) framesOf(id string, withUID bool) (uint64, []Frame, error) {
	var out []Frame
	var uid uint64
	err := x.do("frames", nil, func() error {
		return x.db.View(func(tx *bolt.Tx) error {
			if withUID {
				sb, err := x.bucket(tx, bucketSessions)
				if err != nil {
					return err
				}
				if v := sb.Get([]byte(id)); v != nil {
					s, ok := decodeSession(v)
					if !ok {
						return x.damagef("session %q record is malformed", id)
					}
					uid = s.UID
				}
			}
			b, err := x.bucket(tx, bucketFrames)
			if err != nil {
				return err
			}
			prefix := frameKey(nil, id, 0)
			prefix = prefix[:len(prefix)-8]
			c := b.Cursor()
			for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
				if len(k) != len(prefix)+8 {
					return x.damagef("frame key %x of session %q is malformed", k, id)
				}
				if len(v) != frameValueLen {
					return x.damagef("frame record of session %q: %d bytes", id, len(v))
				}
				out = append(out, decodeFrame(binary.BigEndian.Uint64(k[len(prefix):]), v))
			}
			return nil
		})
	})
	if err != nil {
		return 0, nil, err
	}
	return uid, out, nil
}

// Apply makes u durable in one bbolt transaction. A checkpoint before the
// stored one is an error.
func (x *Index) Apply(u *Update) error {
	return x.do("apply", nil, func() error {
		return x.db.Update(func(tx *bolt.Tx) error {
			old, err := x.checkpoint(tx)
			if err != nil {
				return err
			}
			if u.Checkpoint.Less(old) {
				return fmt.Errorf("index: checkpoint %+v before the stored %+v", u.Checkpoint, old)
			}
			sb, fb, mb := tx.Bucket(bucketSessions), tx.Bucket(bucketFrames), tx.Bucket(bucketMeta)
			if sb == nil || fb == nil {
				return x.damagef("no sessions or frames bucket")
			}
			gc, err := x.applyForks(tx, u)
			if err != nil {
				return err
			}
			for _, id := range u.Deleted {
				if err := x.deleteSession(tx, id); err != nil {
					return err
				}
			}
			if err := x.retireEnded(tx, u); err != nil {
				return err
			}
			if err := collect(tx, gc); err != nil {
				return err
			}
			for _, s := range u.Sessions {
				if err := sb.Put([]byte(s.ID), encodeSession(s)); err != nil {
					return err
				}
			}
			var kbuf []byte
			for _, f := range byKey(u.Frames) {
				kbuf = frameKey(kbuf[:0], f.ID, f.FirstSeq)
				var v [frameValueLen]byte
				binary.LittleEndian.PutUint64(v[0:], f.Segment)
				binary.LittleEndian.PutUint64(v[8:], uint64(f.Offset))
				binary.LittleEndian.PutUint32(v[16:], f.Count)
				binary.LittleEndian.PutUint32(v[20:], f.Size)
				if err := fb.Put(kbuf, v[:]); err != nil {
					return err
				}
			}
			var cp [16]byte
			binary.LittleEndian.PutUint64(cp[0:], u.Checkpoint.Segment)
			binary.LittleEndian.PutUint64(cp[8:], uint64(u.Checkpoint.Offset))
			if err := mb.Put(keyCheckpoint, cp[:]); err != nil {
				return err
			}
			if u.Checkpoint.Created == 0 {
				return mb.Delete(keyCheckpointSegment)
			}
			return mb.Put(keyCheckpointSegment, binary.LittleEndian.AppendUint64(nil, uint64(u.Checkpoint.Created)))
		})
	})
}

// byKey returns the frames grouped by session, the sessions in the order
// of their keys, each session's frames in their order in frames (log
// order, which is seq order; of two frames with one key the later still
// wins). Frames come in log order, the sessions interleaved, and bbolt
// splits a page only at commit: in log order each insert would shift
// every entry the transaction already added to that page after its own,
// which for a checkpoint of many young sessions (all in one page) is
// quadratic: 13 µs a frame for 32k of them against 1.4 in key order
// (BenchmarkApplyFirst), where an insert shifts only the older entries
// of the sessions after it. A counting sort by session: one map lookup a
// frame, a sort of the sessions only.
func byKey(frames []SessionFrame) []SessionFrame {
	group := make([]int32, len(frames))
	idx := map[string]int32{}
	var ids []string
	var counts []int
	for i := range frames {
		g, ok := idx[frames[i].ID]
		if !ok {
			g = int32(len(ids))
			idx[frames[i].ID] = g
			ids = append(ids, frames[i].ID)
			counts = append(counts, 0)
		}
		group[i] = g
		counts[g]++
	}
	if len(ids) == 1 {
		return frames
	}
	order := make([]int32, len(ids))
	for g := range order {
		order[g] = int32(g)
	}
	slices.SortFunc(order, func(a, b int32) int { return cmpKeyID(ids[a], ids[b]) })
	next := make([]int, len(ids))
	pos := 0
	for _, g := range order {
		next[g] = pos
		pos += counts[g]
	}
	out := make([]SessionFrame, len(frames))
	for i := range frames {
		g := group[i]
		out[next[g]] = frames[i]
		next[g]++
	}
	return out
}

// cmpKeyID orders session IDs as their frame keys order them: by the
// uvarint of the length the key starts with, then by bytes.
func cmpKeyID(a, b string) int {
	if len(a) != len(b) {
		var pa, pb [binary.MaxVarintLen64]byte
		na := binary.PutUvarint(pa[:], uint64(len(a)))
		nb := binary.PutUvarint(pb[:], uint64(len(b)))
		if c := bytes.Compare(pa[:na], pb[:nb]); c != 0 {
			return c
		}
	}
	return strings.Compare(a, b)
}

// Rewrite is the intent of a compaction to rewrite one segment: from the
// rename of the new file until FinishRewrite, the index's offsets into
// that segment are stale. It is recorded once the new file is built and
// synced, before its rename, with the moves the rename makes: whoever
// finds it after a crash can finish it (FinishRewrite) if the segment on
// disk has reached Generation, or clear it (ClearRewrite) if not.
type Rewrite struct {
	Segment    uint64
	Generation uint64 // of the new file
	// Moves are the events frames the new file keeps, with their old and
	// new offsets. HasMoves is false for an intent an older build
	// recorded (without them): an index whose segment has reached such an
	// intent's generation can only be rebuilt from the segments.
	Moves    []Move
	HasMoves bool
}

// Move is one events frame a rewrite keeps: From is its offset in the old
// file, To in the new one; Size, if not 0, its size in the new file (a
// frame compressed again by the rewrite), else it keeps its size.
type Move struct {
	ID       string
	FirstSeq uint64
	From, To int64
	Size     uint32
}

// rewriteMovesTag follows the segment and generation in an intent that
// carries its moves; rewriteSizesTag in one whose moves also carry each
// frame's new size (a uvarint after To; 0: unchanged), written only when
// a frame changes size (builds before it read only the first).
const (
	rewriteMovesTag = 1
	rewriteSizesTag = 2
)

func encodeRewrite(r Rewrite) []byte {
	v := make([]byte, 16, 17+len(r.Moves)*24)
	binary.LittleEndian.PutUint64(v[0:], r.Segment)
	binary.LittleEndian.PutUint64(v[8:], r.Generation)
	if !r.HasMoves {
		return v
	}
	tag := byte(rewriteMovesTag)
	for _, m := range r.Moves {
		if m.Size != 0 {
			tag = rewriteSizesTag
			break
		}
	}
	v = append(v, tag)
	for _, m := range r.Moves {
		v = binary.AppendUvarint(v, uint64(len(m.ID)))
		v = append(v, m.ID...)
		v = binary.AppendUvarint(v, m.FirstSeq)
		v = binary.AppendUvarint(v, uint64(m.From))
		v = binary.AppendUvarint(v, uint64(m.To))
		if tag == rewriteSizesTag {
			v = binary.AppendUvarint(v, uint64(m.Size))
		}
	}
	return v
}

// decodeRewrite parses a meta/rewrite value; ok is false if it is
// malformed.
func decodeRewrite(v []byte) (r Rewrite, ok bool) {
	if len(v) < 16 {
		return r, false
	}
	r.Segment, r.Generation = binary.LittleEndian.Uint64(v), binary.LittleEndian.Uint64(v[8:])
	if len(v) == 16 {
		return r, true
	}
	sizes := v[16] == rewriteSizesTag
	if v[16] != rewriteMovesTag && !sizes {
		return r, false
	}
	r.HasMoves = true
	uv := func() (uint64, bool) {
		n, w := binary.Uvarint(v)
		if w <= 0 {
			return 0, false
		}
		v = v[w:]
		return n, true
	}
	for v = v[17:]; len(v) > 0; {
		n, ok := uv()
		if !ok || n > uint64(len(v)) {
			return r, false
		}
		m := Move{ID: string(v[:n])}
		v = v[n:]
		var from, to uint64
		var ok1, ok2, ok3 bool
		m.FirstSeq, ok1 = uv()
		from, ok2 = uv()
		to, ok3 = uv()
		if !ok1 || !ok2 || !ok3 || from > math.MaxInt64 || to > math.MaxInt64 {
			return r, false
		}
		m.From, m.To = int64(from), int64(to)
		if sizes {
			size, ok := uv()
			if !ok || size > math.MaxUint32 {
				return r, false
			}
			m.Size = uint32(size)
		}
		r.Moves = append(r.Moves, m)
	}
	return r, true
}

// Rewrite returns the recorded rewrite intent, if there is one.
func (x *Index) Rewrite() (Rewrite, bool, error) {
	var r Rewrite
	var ok bool
	err := x.do("rewrite", nil, func() error {
		return x.db.View(func(tx *bolt.Tx) error {
			m, err := x.bucket(tx, bucketMeta)
			if err != nil {
				return err
			}
			v := m.Get(keyRewrite)
			if v == nil {
				return nil
			}
			if r, ok = decodeRewrite(v); !ok {
				return x.damagef("rewrite intent of %d bytes is malformed", len(v))
			}
			return nil
		})
	})
	return r, ok, err
}

// BeginRewrite durably records the intent to rewrite a segment, with its
// moves if r.HasMoves. It fails if another intent is recorded.
func (x *Index) BeginRewrite(r Rewrite) error {
	return x.do("begin rewrite", nil, func() error {
		return x.db.Update(func(tx *bolt.Tx) error {
			m, err := x.bucket(tx, bucketMeta)
			if err != nil {
				return err
			}
			if v := m.Get(keyRewrite); v != nil {
				return fmt.Errorf("index: a rewrite is already recorded (segment %d)", binary.LittleEndian.Uint64(v))
			}
			return m.Put(keyRewrite, encodeRewrite(r))
		})
	})
}

// ClearRewrite removes the rewrite intent (a rewrite that never renamed
// its file into place changed nothing the index holds).
func (x *Index) ClearRewrite() error {
	return x.do("clear rewrite", nil, func() error {
		return x.db.Update(func(tx *bolt.Tx) error {
			m, err := x.bucket(tx, bucketMeta)
			if err != nil {
				return err
			}
			return m.Delete(keyRewrite)
		})
	})
}

// FinishRewrite ends the recorded rewrite of r.Segment at r.Generation,
// whose new file is in place: in one transaction it applies the intent's
// moves and clears it. A move applies where the index still holds the
// frame (session, first seq) in the segment at the old offset: the
// session may have been deleted, or replaced by another incarnation,
// since the intent was recorded (its frames are gone from the index, or
// are another incarnation's elsewhere). So it can be done again, by any
// process, until it is cleared. An intent without moves (an older
// build's) cannot be finished: that is an error, and the index must be
// rebuilt from the segments.
func (x *Index) FinishRewrite(r Rewrite) error {
	return x.do("finish rewrite", nil, func() error {
		return x.db.Update(func(tx *bolt.Tx) error {
			m, fb := tx.Bucket(bucketMeta), tx.Bucket(bucketFrames)
			if m == nil || fb == nil {
				return x.damagef("no meta or frames bucket")
			}
			v := m.Get(keyRewrite)
			if v == nil {
				return fmt.Errorf("index: finish the rewrite of segment %d generation %d: %w", r.Segment, r.Generation, ErrNoRewrite)
			}
			rec, ok := decodeRewrite(v)
			switch {
			case !ok:
				return x.damagef("rewrite intent of %d bytes is malformed", len(v))
			case rec.Segment != r.Segment || rec.Generation != r.Generation:
				return fmt.Errorf("index: finish the rewrite of segment %d generation %d: %w (segment %d generation %d is)", r.Segment, r.Generation, ErrNoRewrite, rec.Segment, rec.Generation)
			case !rec.HasMoves:
				return fmt.Errorf("index: the rewrite of segment %d was recorded without its moves (an older build): the index must be rebuilt", r.Segment)
			}
			rb, sb := tx.Bucket(bucketRetired), tx.Bucket(bucketSessions)
			grew := map[string]int64{} // bytes of frames per session, recoded
			for _, mv := range rec.Moves {
				d, err := moveFrame(fb, r.Segment, mv.ID, mv)
				if err != nil {
					return err
				}
				if d != 0 {
					grew[mv.ID] += d
				}
				if rb != nil {
					// The frame of a deleted incarnation that forks share.
					if err := moveRetired(rb, r.Segment, mv.ID, mv); err != nil {
						return err
					}
				}
			}
			for id, d := range grew {
				v := sb.Get([]byte(id))
				s, ok := decodeSession(v)
				if !ok {
					return x.damagef("session record of %q is malformed", id)
				}
				s.Size += d
				if err := sb.Put([]byte(id), encodeSession(s)); err != nil {
					return err
				}
			}
			return m.Delete(keyRewrite)
		})
	})
}

// ErrNoRewrite is returned by FinishRewrite when the index records no
// intent for that rewrite (another process finished or cleared it).
var ErrNoRewrite = errors.New("no such rewrite intent recorded")

// Verify checks the whole index file and returns nil or a *DamageError
// (errors.Is(err, ErrDamaged)). It runs the check Open runs (every page
// bbolt can reach: its place, type, elements and key order; the layout;
// every record's shape), bbolt's own tx.Check, and then decodes every
// record through bbolt. It holds off writers while it runs and reads the
// whole file: about as long as reading the file from the page cache (see
// BenchmarkVerify). It cannot see damage to the bytes of a key or value
// that leaves them well-formed: bbolt keeps no checksums of its pages.
func (x *Index) Verify() error {
	return x.do("verify", nil, func() error {
		// A write transaction (in a read-write index) keeps the file as
		// this transaction sees it while the file is checked.
		tx, err := x.db.Begin(!x.readOnly)
		if err != nil {
			return fmt.Errorf("index: verify %s: %w", x.path, err)
		}
		defer tx.Rollback()
		c := &fileCheck{}
		if err := checkLocked(x.file, x.path, c); err != nil {
			return err
		}
		var first error
		for err := range tx.Check() { // drained whole: the checker sends until it is done
			if first == nil {
				first = err
			}
		}
		if first != nil {
			return newDamage(x.path, -1, "bbolt check: "+first.Error(), first)
		}
		return x.decodeAll(tx, c.sessions, c.frames)
	})
}

// decodeAll decodes every record through bbolt and checks that bbolt
// reads as many as the file check counted.
func (x *Index) decodeAll(tx *bolt.Tx, sessions, frames int) error {
	m, err := x.bucket(tx, bucketMeta)
	if err != nil {
		return err
	}
	if v := m.Get(keyVersion); len(v) != 2 || binary.LittleEndian.Uint16(v) != Version {
		return x.damagef("format version %x", v)
	}
	if _, err := x.checkpoint(tx); err != nil {
		return err
	}
	if v := m.Get(keyRewrite); v != nil {
		if _, ok := decodeRewrite(v); !ok {
			return x.damagef("rewrite intent of %d bytes is malformed", len(v))
		}
	}
	sb, err := x.bucket(tx, bucketSessions)
	if err != nil {
		return err
	}
	n := 0
	err = sb.ForEach(func(k, v []byte) error {
		n++
		if _, ok := decodeSession(v); !ok {
			return x.damagef("session %q record is malformed", k)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n != sessions {
		return x.damagef("bbolt reads %d sessions, the pages hold %d", n, sessions)
	}
	fb, err := x.bucket(tx, bucketFrames)
	if err != nil {
		return err
	}
	n = 0
	err = fb.ForEach(func(k, v []byte) error {
		n++
		if _, _, ok := parseFrameKey(k); !ok {
			return x.damagef("frame key %x is malformed", k)
		}
		if len(v) != frameValueLen {
			return x.damagef("frame record of %d bytes", len(v))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n != frames {
		return x.damagef("bbolt reads %d frames, the pages hold %d", n, frames)
	}
	for _, b := range []struct {
		name  []byte
		valid func(k, v []byte) bool
	}{{bucketForks, validForkRecord}, {bucketRetired, validRetiredRecord}} {
		if bk := tx.Bucket(b.name); bk != nil {
			err := bk.ForEach(func(k, v []byte) error {
				if !b.valid(k, v) {
					return x.damagef("%s record %x is malformed", b.name, k)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes the index file at path (to rebuild it from the segments).
func Remove(path string) error {
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
