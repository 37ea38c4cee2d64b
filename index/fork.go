package index

import (
	"bytes"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Forks share frames: a fork's first frames are its parent's (and maybe
// their parents'), and the index holds them under the fork's own key as
// well, so that a fork reads without its parent (which may be deleted).
// The bucket "forks" records, for each parent ID, its forks and their
// cuts, so that a compaction's moves of a parent's frames reach the
// forks' copies of them (FinishRewrite).
var bucketForks = []byte("forks")

// Link names a session a fork shares frames with: the incarnation UID of
// session ID, whose frames before seq Cut are the fork's.
type Link struct {
	ID  string
	UID uint64
	Cut uint64
}

// Inherit gives a fork created in an update its share of frames: of the
// nearest session of Chain (nearest first) whose incarnation the index
// holds (or that an earlier Inherit of the same update gave them), those
// before that link's cut; past what those cover, Frames, the shared
// frames as the caller knows them (the caller's copy of the part the
// index holds may be stale: a compaction may have moved those frames).
type Inherit struct {
	ID     string
	UID    uint64
	Chain  []Link
	Frames []Frame
}

// ForkPair is one entry of the forks registry: Child forks Parent.
type ForkPair struct {
	Parent, Child string
}

// forkKey is the registry key of child under parent: uvarint(len(parent)),
// parent, child.
func forkKey(parent, child string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(parent)))
	k = append(k, parent...)
	return append(k, child...)
}

// forkPrefix is the prefix of the registry keys of parent's forks.
func forkPrefix(parent string) []byte {
	k := binary.AppendUvarint(nil, uint64(len(parent)))
	return append(k, parent...)
}

// parseForkKey splits a registry key; ok is false if it is malformed.
func parseForkKey(k []byte) (parent, child []byte, ok bool) {
	n, w := binary.Uvarint(k)
	if w <= 0 || n == 0 || uint64(len(k)) <= uint64(w)+n {
		return nil, nil, false
	}
	return k[w : w+int(n)], k[w+int(n):], true
}

// parseForkValue decodes a registry value: the cut, one minimal uvarint.
func parseForkValue(v []byte) (uint64, bool) {
	cut, w := binary.Uvarint(v)
	return cut, w > 0 && w == len(v) && len(binary.AppendUvarint(nil, cut)) == w
}

// sharedFrames computes, inside tx and before the update changes
// anything, the frames each fork of u.Inherits shares, in order.
func (x *Index) sharedFrames(tx *bolt.Tx, u *Update) ([][]Frame, error) {
	if len(u.Inherits) == 0 {
		return nil, nil
	}
	sb, fb := tx.Bucket(bucketSessions), tx.Bucket(bucketFrames)
	given := map[string]int{} // fork ID -> index in out
	out := make([][]Frame, len(u.Inherits))
	for i, in := range u.Inherits {
		var base []Frame
	chain:
		for _, l := range in.Chain {
			if j, ok := given[l.ID]; ok && u.Inherits[j].UID == l.UID {
				base = clipFrames(out[j], l.Cut)
				break
			}
			if v := sb.Get([]byte(l.ID)); v != nil {
				s, ok := decodeSession(v)
				if !ok {
					return nil, x.damagef("session %q record is malformed", l.ID)
				}
				if s.UID != l.UID {
					continue
				}
				prefix := frameKey(nil, l.ID, 0)
				prefix = prefix[:len(prefix)-8]
				c := fb.Cursor()
				for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
					if len(k) != len(prefix)+8 || len(v) != frameValueLen {
						return nil, x.damagef("frame record %x of session %q is malformed", k, l.ID)
					}
					f := decodeFrame(binary.BigEndian.Uint64(k[len(prefix):]), v)
					if f.FirstSeq >= l.Cut {
						break chain
					}
					base = append(base, f)
				}
				base = clipFrames(base, l.Cut)
				break
			}
		}
		var end uint64
		if len(base) > 0 {
			end = base[len(base)-1].FirstSeq + uint64(base[len(base)-1].Count)
		}
		for _, f := range in.Frames {
			if f.FirstSeq >= end {
				base = append(base, f)
			}
		}
		var cut, next uint64
		if len(in.Chain) > 0 {
			cut = in.Chain[0].Cut
		}
		for _, f := range base {
			if f.FirstSeq != next {
				return nil, fmt.Errorf("index: fork %q: its shared frames do not follow each other (seq %d, expected %d)", in.ID, f.FirstSeq, next)
			}
			next += uint64(f.Count)
		}
		if next != cut {
			return nil, fmt.Errorf("index: fork %q: its shared frames cover %d of its %d inherited events", in.ID, next, cut)
		}
		given[in.ID] = i
		out[i] = base
	}
	return out, nil
}

// clipFrames returns the frames of fs (from seq 0 on) before seq cut, the
// last one cut short there.
func clipFrames(fs []Frame, cut uint64) []Frame {
	out := make([]Frame, 0, len(fs))
	for _, f := range fs {
		if f.FirstSeq >= cut {
			break
		}
		f.Count = uint32(min(uint64(f.Count), cut-f.FirstSeq))
		out = append(out, f)
	}
	return out
}

// moveForks applies move mv of a frame of session id to the copies of it
// that id's forks (and theirs) hold: where a fork's entry for the frame's
// first seq still points at the old offset in segment seg.
func moveForks(forks, fb *bolt.Bucket, seg uint64, id string, mv Move, seen map[string]bool) error {
	prefix := forkPrefix(id)
	var children []string
	c := forks.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		_, child, ok := parseForkKey(k)
		cut, vok := parseForkValue(v)
		if !ok || !vok {
			continue // (Open's check refuses a malformed entry)
		}
		if cut > mv.FirstSeq && !seen[string(child)] {
			children = append(children, string(child))
		}
	}
	for _, child := range children {
		seen[child] = true
		if err := moveFrame(fb, seg, child, mv); err != nil {
			return err
		}
		if err := moveForks(forks, fb, seg, child, mv, seen); err != nil {
			return err
		}
	}
	return nil
}

// moveFrame points session id's entry for the frame at mv.FirstSeq at
// mv.To, if it still points at mv.From in segment seg.
func moveFrame(fb *bolt.Bucket, seg uint64, id string, mv Move) error {
	k := frameKey(nil, id, mv.FirstSeq)
	old := fb.Get(k)
	if len(old) != frameValueLen || binary.LittleEndian.Uint64(old) != seg || int64(binary.LittleEndian.Uint64(old[8:])) != mv.From {
		return nil // deleted or replaced since: not this frame any more
	}
	var nv [frameValueLen]byte
	copy(nv[:], old)
	binary.LittleEndian.PutUint64(nv[8:], uint64(mv.To))
	return fb.Put(k, nv[:])
}
