package index

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Forks share frames: a fork's first events are its parent's (and maybe
// their parents'), read from their frames. The index holds a fork's own
// frames under its key, and its chain in its header record; its shared
// frames are its ancestors' entries (SharedFrames). Two buckets keep
// those alive and in place:
//
//   - "forks", the registry: for each ancestor incarnation (ID, UID) and
//     each fork that shares its frames, the fork's cut there. Written when
//     a fork is indexed (Update.Forks), removed when it is deleted
//     (Update.Unforks).
//   - "retired": the frames of a deleted incarnation that registered
//     forks still share, moved there by the delete (keyed by ID, UID and
//     first seq, so that the ID can be created again), and removed once
//     no fork shares them. A compaction's moves reach them (FinishRewrite).
var (
	bucketForks   = []byte("forks")
	bucketRetired = []byte("retired")
)

// Link names a session a fork shares frames with: the incarnation UID of
// session ID, whose events before seq Cut are the fork's (the chain of a
// fork lists them nearest first, each cut at most the one before).
type Link struct {
	ID  string
	UID uint64
	Cut uint64
}

// Fork is a fork and its chain, as the registry records it.
type Fork struct {
	ID    string
	Chain []Link
}

// incKey is the key prefix of an incarnation: uvarint(len(id)), id, uid
// (8 bytes, big-endian).
func incKey(id string, uid uint64) []byte {
	k := binary.AppendUvarint(nil, uint64(len(id)))
	k = append(k, id...)
	return binary.BigEndian.AppendUint64(k, uid)
}

// parseIncKey splits a registry or retired key into the incarnation's ID
// and UID and what follows; ok is false if it is malformed.
func parseIncKey(k []byte) (id []byte, uid uint64, rest []byte, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n == 0 || uint64(len(k)) < uint64(w)+n+8 {
		return nil, 0, nil, false
	}
	id = k[w : w+int(n)]
	return id, binary.BigEndian.Uint64(k[w+int(n):]), k[w+int(n)+8:], true
}

// validForkRecord reports whether k, v are a well-formed registry entry:
// an incarnation key, then the fork's ID; the cut as one minimal uvarint.
func validForkRecord(k, v []byte) bool {
	_, _, child, ok := parseIncKey(k)
	cut, w := binary.Uvarint(v)
	return ok && len(child) > 0 && w > 0 && w == len(v) && len(binary.AppendUvarint(nil, cut)) == w
}

// validRetiredRecord reports whether k, v are a well-formed retired frame.
func validRetiredRecord(k, v []byte) bool {
	_, _, seq, ok := parseIncKey(k)
	return ok && len(seq) == 8 && len(v) == frameValueLen
}

// registered reports whether a fork shares frames of incarnation uid of
// id.
func registered(forks *bolt.Bucket, id string, uid uint64) bool {
	if forks == nil {
		return false
	}
	prefix := incKey(id, uid)
	k, _ := forks.Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// deleteRange deletes every key of b that starts with prefix.
func deleteRange(b *bolt.Bucket, prefix []byte) error {
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// deleteSession removes session id's record and frames. If registered
// forks share the frames of the incarnation it holds, they move to the
// retired bucket instead of going.
func (x *Index) deleteSession(tx *bolt.Tx, id string) error {
	sb, fb := tx.Bucket(bucketSessions), tx.Bucket(bucketFrames)
	var uid uint64
	if v := sb.Get([]byte(id)); v != nil {
		s, ok := decodeSession(v)
		if !ok {
			return x.damagef("session %q record is malformed", id)
		}
		uid = s.UID
	}
	if err := sb.Delete([]byte(id)); err != nil {
		return err
	}
	prefix := frameKey(nil, id, 0)
	prefix = prefix[:len(prefix)-8]
	if uid == 0 || !registered(tx.Bucket(bucketForks), id, uid) {
		return deleteRange(fb, prefix)
	}
	rb, err := tx.CreateBucketIfNotExists(bucketRetired)
	if err != nil {
		return err
	}
	inc := incKey(id, uid)
	c := fb.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Seek(prefix) {
		if len(k) != len(prefix)+8 {
			return x.damagef("frame key %x of session %q is malformed", k, id)
		}
		if err := rb.Put(append(inc[:len(inc):len(inc)], k[len(prefix):]...), bytes.Clone(v)); err != nil {
			return err
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// applyForks records u.Forks in the registry and removes u.Unforks from
// it, with the retired frames no fork shares any more. Called first in
// Apply: a parent deleted in the same update is retired, not deleted,
// if a fork indexed with it shares its frames.
func (x *Index) applyForks(tx *bolt.Tx, u *Update) (gc [][]byte, err error) {
	if len(u.Forks) == 0 && len(u.Unforks) == 0 {
		return nil, nil
	}
	forks, err := tx.CreateBucketIfNotExists(bucketForks)
	if err != nil {
		return nil, err
	}
	for _, f := range u.Unforks {
		for _, l := range f.Chain {
			inc := incKey(l.ID, l.UID)
			if err := forks.Delete(append(inc, f.ID...)); err != nil {
				return nil, err
			}
			gc = append(gc, inc)
		}
	}
	for _, f := range u.Forks {
		for _, l := range f.Chain {
			if err := forks.Put(append(incKey(l.ID, l.UID), f.ID...), binary.AppendUvarint(nil, l.Cut)); err != nil {
				return nil, err
			}
		}
	}
	return gc, nil
}

// retireEnded retires the frames of u.Ended that a registered fork
// shares.
func (x *Index) retireEnded(tx *bolt.Tx, u *Update) error {
	forks := tx.Bucket(bucketForks)
	if forks == nil || len(u.Ended) == 0 {
		return nil
	}
	if len(u.EndedUIDs) != len(u.Ended) {
		return fmt.Errorf("index: %d ended frames with %d incarnations", len(u.Ended), len(u.EndedUIDs))
	}
	var rb *bolt.Bucket
	for i, f := range u.Ended {
		if !registered(forks, f.ID, u.EndedUIDs[i]) {
			continue
		}
		if rb == nil {
			var err error
			if rb, err = tx.CreateBucketIfNotExists(bucketRetired); err != nil {
				return err
			}
		}
		var v [frameValueLen]byte
		binary.LittleEndian.PutUint64(v[0:], f.Segment)
		binary.LittleEndian.PutUint64(v[8:], uint64(f.Offset))
		binary.LittleEndian.PutUint32(v[16:], f.Count)
		binary.LittleEndian.PutUint32(v[20:], f.Size)
		if err := rb.Put(binary.BigEndian.AppendUint64(incKey(f.ID, u.EndedUIDs[i]), f.FirstSeq), v[:]); err != nil {
			return err
		}
	}
	return nil
}

// collect removes the retired frames of the incarnations in gc that no
// registered fork shares any more.
func collect(tx *bolt.Tx, gc [][]byte) error {
	rb := tx.Bucket(bucketRetired)
	if rb == nil {
		return nil
	}
	forks := tx.Bucket(bucketForks)
	for _, inc := range gc {
		if k, _ := forks.Cursor().Seek(inc); k != nil && bytes.HasPrefix(k, inc) {
			continue
		}
		if err := deleteRange(rb, inc); err != nil {
			return err
		}
	}
	return nil
}

// SharedFrames returns the frames the index holds of the shared part of a
// fork with chain (nearest first): of each link, the frames of that
// incarnation (live, or retired) in its part of the range, which is from
// the next link's cut (0 for the last) to its own, the last one cut short
// there. A part the index does not hold (an incarnation not yet indexed)
// is left out: the caller has it in memory, past the checkpoint.
func (x *Index) SharedFrames(chain []Link) ([]Frame, error) {
	var out []Frame
	err := x.do("shared frames", nil, func() error {
		return x.db.View(func(tx *bolt.Tx) error {
			sb, fb, rb := tx.Bucket(bucketSessions), tx.Bucket(bucketFrames), tx.Bucket(bucketRetired)
			if sb == nil || fb == nil {
				return x.damagef("no sessions or frames bucket")
			}
			for i := len(chain) - 1; i >= 0; i-- {
				l := chain[i]
				lo := uint64(0)
				if i+1 < len(chain) {
					lo = chain[i+1].Cut
				}
				if lo >= l.Cut {
					continue
				}
				var prefix []byte
				var b *bolt.Bucket
				if v := sb.Get([]byte(l.ID)); v != nil {
					if s, ok := decodeSession(v); !ok {
						return x.damagef("session %q record is malformed", l.ID)
					} else if s.UID == l.UID {
						prefix, b = frameKey(nil, l.ID, 0), fb
						prefix = prefix[:len(prefix)-8]
					}
				}
				if b == nil && rb != nil {
					prefix, b = incKey(l.ID, l.UID), rb
				}
				if b == nil {
					continue
				}
				c := b.Cursor()
				for k, v := c.Seek(binary.BigEndian.AppendUint64(bytes.Clone(prefix), lo)); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
					if len(k) != len(prefix)+8 || len(v) != frameValueLen {
						return x.damagef("frame record %x of session %q is malformed", k, l.ID)
					}
					f := decodeFrame(binary.BigEndian.Uint64(k[len(prefix):]), v)
					if f.FirstSeq >= l.Cut {
						break
					}
					f.Count = uint32(min(uint64(f.Count), l.Cut-f.FirstSeq))
					out = append(out, f)
				}
			}
			return nil
		})
	})
	return out, err
}

// moveRetired applies move mv, of a frame of session id in segment seg,
// to the retired copies of it: where an incarnation of id retired holds
// the frame at the old offset.
func moveRetired(rb *bolt.Bucket, seg uint64, id string, mv Move) error {
	idp := binary.AppendUvarint(nil, uint64(len(id)))
	idp = append(idp, id...)
	c := rb.Cursor()
	for k, _ := c.Seek(idp); k != nil && bytes.HasPrefix(k, idp); {
		gotID, uid, _, ok := parseIncKey(k)
		if !ok || string(gotID) != id {
			break
		}
		key := binary.BigEndian.AppendUint64(incKey(id, uid), mv.FirstSeq)
		if old := rb.Get(key); len(old) == frameValueLen && binary.LittleEndian.Uint64(old) == seg && int64(binary.LittleEndian.Uint64(old[8:])) == mv.From {
			var nv [frameValueLen]byte
			copy(nv[:], old)
			binary.LittleEndian.PutUint64(nv[8:], uint64(mv.To))
			if mv.Size != 0 {
				binary.LittleEndian.PutUint32(nv[20:], mv.Size)
			}
			if err := rb.Put(key, nv[:]); err != nil {
				return err
			}
		}
		if uid == ^uint64(0) {
			break
		}
		k, _ = c.Seek(incKey(id, uid+1))
	}
	return nil
}

// moveFrame points session id's entry for the frame at mv.FirstSeq at
// mv.To (and gives it mv.Size, if set), if it still points at mv.From in
// segment seg. It returns by how much the frame's size changed.
func moveFrame(fb *bolt.Bucket, seg uint64, id string, mv Move) (int64, error) {
	k := frameKey(nil, id, mv.FirstSeq)
	old := fb.Get(k)
	if len(old) != frameValueLen || binary.LittleEndian.Uint64(old) != seg || int64(binary.LittleEndian.Uint64(old[8:])) != mv.From {
		return 0, nil // deleted or replaced since: not this frame any more
	}
	var nv [frameValueLen]byte
	copy(nv[:], old)
	binary.LittleEndian.PutUint64(nv[8:], uint64(mv.To))
	var d int64
	if mv.Size != 0 {
		d = int64(mv.Size) - int64(binary.LittleEndian.Uint32(old[20:]))
		binary.LittleEndian.PutUint32(nv[20:], mv.Size)
	}
	return d, fb.Put(k, nv[:])
}
