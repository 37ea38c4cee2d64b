package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/seglog/seglog/internal/base"
)

// Version is the index format version this build writes and reads. Part of
// the on-disk format.
const Version = 1

// Bucket and key names. Part of the on-disk format.
var (
	bucketMeta     = []byte("meta")
	bucketSessions = []byte("sessions")
	bucketFrames   = []byte("frames")
	keyVersion     = []byte("version")
	keyCheckpoint  = []byte("checkpoint")
	keyRewrite     = []byte("rewrite")
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
}

// A session record: a version byte (1), uvarints uid, events, size and
// inherited, then the header bytes. Part of the on-disk format.
const sessionRecordV1 = 1

func encodeSession(s Session) []byte {
	b := make([]byte, 0, 1+4*binary.MaxVarintLen64+len(s.Header))
	b = append(b, sessionRecordV1)
	b = binary.AppendUvarint(b, s.UID)
	b = binary.AppendUvarint(b, s.Events)
	b = binary.AppendUvarint(b, uint64(s.Size))
	b = binary.AppendUvarint(b, s.Inherited)
	return append(b, s.Header...)
}

func decodeSession(v []byte) (Session, bool) {
	if len(v) == 0 || v[0] != sessionRecordV1 {
		return Session{}, false
	}
	v = v[1:]
	var f [4]uint64
	for i := range f {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return Session{}, false
		}
		f[i], v = x, v[n:]
	}
	return Session{UID: f[0], Events: f[1], Size: int64(f[2]), Inherited: f[3], Header: bytes.Clone(v)}, true
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
}

// Index is the bbolt-backed catalog. It is safe for concurrent use.
type Index struct {
	db   *bolt.DB
	path string
}

// Open opens or creates the index file at path. It returns a
// *base.FormatError for an index written by a build with another format
// version, and ErrLocked if another process holds it.
func Open(path string, opts *Options) (*Index, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Timeout == 0 {
		o.Timeout = 100 * time.Millisecond
	}
	db, err := bolt.Open(path, 0o644, &bolt.Options{
		Timeout:        o.Timeout,
		ReadOnly:       o.ReadOnly,
		NoSync:         o.NoSync,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("index: open %s: %w", path, err)
	}
	x := &Index{db: db, path: path}
	if err := x.init(o.ReadOnly); err != nil {
		db.Close()
		return nil, err
	}
	return x, nil
}

func (x *Index) init(readOnly bool) error {
	check := func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return nil
		}
		v := m.Get(keyVersion)
		if len(v) != 2 {
			return &base.CorruptionError{Path: x.path, Reason: "index has no format version"}
		}
		if got := int(binary.LittleEndian.Uint16(v)); got != Version {
			return &base.FormatError{Path: x.path, What: "index", Version: got, Supported: Version, Oldest: Version}
		}
		return nil
	}
	if readOnly {
		return x.db.View(check)
	}
	return x.db.Update(func(tx *bolt.Tx) error {
		if err := check(tx); err != nil {
			return err
		}
		m, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if m.Get(keyVersion) == nil {
			if err := m.Put(keyVersion, binary.LittleEndian.AppendUint16(nil, Version)); err != nil {
				return err
			}
		}
		for _, b := range [][]byte{bucketSessions, bucketFrames} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
}

// Path returns the index file name.
func (x *Index) Path() string { return x.path }

// Close closes the index.
func (x *Index) Close() error { return x.db.Close() }

// Checkpoint returns the stored checkpoint.
func (x *Index) Checkpoint() (Checkpoint, error) {
	var c Checkpoint
	err := x.db.View(func(tx *bolt.Tx) error {
		var err error
		c, err = x.checkpoint(tx)
		return err
	})
	return c, err
}

func (x *Index) checkpoint(tx *bolt.Tx) (Checkpoint, error) {
	m := tx.Bucket(bucketMeta)
	if m == nil {
		return Checkpoint{}, nil
	}
	v := m.Get(keyCheckpoint)
	if v == nil {
		return Checkpoint{}, nil
	}
	if len(v) != 16 {
		return Checkpoint{}, &base.CorruptionError{Path: x.path, Reason: fmt.Sprintf("checkpoint of %d bytes", len(v))}
	}
	return Checkpoint{Segment: binary.LittleEndian.Uint64(v), Offset: int64(binary.LittleEndian.Uint64(v[8:]))}, nil
}

// Sessions calls fn for every session, in ID order.
func (x *Index) Sessions(fn func(Session) error) error {
	return x.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketSessions)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			s, ok := decodeSession(v)
			if !ok {
				return &base.CorruptionError{Path: x.path, Reason: fmt.Sprintf("session %q record is malformed", k)}
			}
			s.ID = string(k)
			return fn(s)
		})
	})
}

func frameKey(dst []byte, id string, seq uint64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(id)))
	dst = append(dst, id...)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// Frames returns the frames of session id, in seq order.
func (x *Index) Frames(id string) ([]Frame, error) {
	var out []Frame
	err := x.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketFrames)
		if b == nil {
			return nil
		}
		prefix := frameKey(nil, id, 0)
		prefix = prefix[:len(prefix)-8]
		c := b.Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, v = c.Next() {
			if len(v) != frameValueLen {
				return &base.CorruptionError{Path: x.path, Reason: fmt.Sprintf("frame record of session %q: %d bytes", id, len(v))}
			}
			out = append(out, Frame{
				FirstSeq: binary.BigEndian.Uint64(k[len(prefix):]),
				Segment:  binary.LittleEndian.Uint64(v),
				Offset:   int64(binary.LittleEndian.Uint64(v[8:])),
				Count:    binary.LittleEndian.Uint32(v[16:]),
				Size:     binary.LittleEndian.Uint32(v[20:]),
			})
		}
		return nil
	})
	return out, err
}

// Apply makes u durable in one bbolt transaction. A checkpoint before the
// stored one is an error.
func (x *Index) Apply(u *Update) error {
	return x.db.Update(func(tx *bolt.Tx) error {
		old, err := x.checkpoint(tx)
		if err != nil {
			return err
		}
		if u.Checkpoint.Less(old) {
			return fmt.Errorf("index: checkpoint %+v before the stored %+v", u.Checkpoint, old)
		}
		sb, fb, mb := tx.Bucket(bucketSessions), tx.Bucket(bucketFrames), tx.Bucket(bucketMeta)
		for _, id := range u.Deleted {
			if err := sb.Delete([]byte(id)); err != nil {
				return err
			}
			prefix := frameKey(nil, id, 0)
			prefix = prefix[:len(prefix)-8]
			c := fb.Cursor()
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
				if err := c.Delete(); err != nil {
					return err
				}
			}
		}
		for _, s := range u.Sessions {
			if err := sb.Put([]byte(s.ID), encodeSession(s)); err != nil {
				return err
			}
		}
		var kbuf []byte
		for _, f := range u.Frames {
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
		return mb.Put(keyCheckpoint, cp[:])
	})
}

// Rewrite is the intent of a compaction to rewrite one segment: from the
// rename of the new file until Relocate, the index's offsets into that
// segment are stale. The engine reads it at open and rebuilds the index if
// the segment on disk has reached Generation.
type Rewrite struct {
	Segment    uint64
	Generation uint64 // of the new file
}

// Rewrite returns the recorded rewrite intent, if there is one.
func (x *Index) Rewrite() (Rewrite, bool, error) {
	var r Rewrite
	var ok bool
	err := x.db.View(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return nil
		}
		v := m.Get(keyRewrite)
		if v == nil {
			return nil
		}
		if len(v) != 16 {
			return &base.CorruptionError{Path: x.path, Reason: fmt.Sprintf("rewrite intent of %d bytes", len(v))}
		}
		r = Rewrite{Segment: binary.LittleEndian.Uint64(v), Generation: binary.LittleEndian.Uint64(v[8:])}
		ok = true
		return nil
	})
	return r, ok, err
}

// BeginRewrite durably records the intent to rewrite a segment. It fails
// if another intent is recorded.
func (x *Index) BeginRewrite(r Rewrite) error {
	return x.db.Update(func(tx *bolt.Tx) error {
		m := tx.Bucket(bucketMeta)
		if v := m.Get(keyRewrite); v != nil {
			return fmt.Errorf("index: a rewrite is already recorded (%x)", v)
		}
		var v [16]byte
		binary.LittleEndian.PutUint64(v[0:], r.Segment)
		binary.LittleEndian.PutUint64(v[8:], r.Generation)
		return m.Put(keyRewrite, v[:])
	})
}

// ClearRewrite removes the rewrite intent (a rewrite that never renamed
// its file into place changed nothing the index holds).
func (x *Index) ClearRewrite() error {
	return x.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Delete(keyRewrite)
	})
}

// Relocation moves one indexed frame to a new offset in its segment.
type Relocation struct {
	ID       string
	FirstSeq uint64
	Offset   int64 // the frame's offset in the rewritten segment
}

// Relocate ends the rewrite r: in one transaction it moves the given
// frames of r.Segment to their new offsets and clears the intent. Every
// frame named must be indexed in r.Segment; anything else is an error and
// changes nothing.
func (x *Index) Relocate(r Rewrite, moves []Relocation) error {
	return x.db.Update(func(tx *bolt.Tx) error {
		m, fb := tx.Bucket(bucketMeta), tx.Bucket(bucketFrames)
		v := m.Get(keyRewrite)
		if len(v) != 16 || binary.LittleEndian.Uint64(v) != r.Segment || binary.LittleEndian.Uint64(v[8:]) != r.Generation {
			return fmt.Errorf("index: relocate into segment %d generation %d without its rewrite intent", r.Segment, r.Generation)
		}
		var kbuf []byte
		for _, mv := range moves {
			kbuf = frameKey(kbuf[:0], mv.ID, mv.FirstSeq)
			old := fb.Get(kbuf)
			if len(old) != frameValueLen || binary.LittleEndian.Uint64(old) != r.Segment {
				return fmt.Errorf("index: relocate session %q seq %d: not indexed in segment %d", mv.ID, mv.FirstSeq, r.Segment)
			}
			var nv [frameValueLen]byte
			copy(nv[:], old)
			binary.LittleEndian.PutUint64(nv[8:], uint64(mv.Offset))
			if err := fb.Put(kbuf, nv[:]); err != nil {
				return err
			}
		}
		return m.Delete(keyRewrite)
	})
}

// Remove deletes the index file at path (to rebuild it from the segments).
func Remove(path string) error {
	err := os.Remove(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
