package compactplan

import (
	"fmt"
	"maps"
	"slices"

	"github.com/seglog/seglog/internal/base"
	"github.com/seglog/seglog/segment"
)

// Step is what one frame did to the attribution.
type Step struct {
	// Owner is the incarnation the frame belongs to: a header's own, an
	// events frame's (0: an orphan, a frame of an incarnation whose header
	// is gone); 0 for a tombstone.
	Owner uint64
	// Ends is the incarnation the frame ends: a tombstone's, or the one a
	// migration header replaces; else 0.
	Ends uint64
}

// Attributor attributes frames to incarnations, fed every frame of the
// store but seals, in segment order (the engine's replay fold).
type Attributor interface {
	// Frame attributes frame fi of segment seg, read through r. A frame
	// that cannot follow those before is an error.
	Frame(r *segment.Reader, seg uint64, fi *segment.FrameInfo) (Step, error)
	// ForkOf maps each fork's incarnation met so far to its parent's.
	ForkOf() map[uint64]uint64
}

// Action is what a compaction does with a sealed segment.
type Action uint8

const (
	Keep Action = iota
	Rewrite
	Drop
)

func (a Action) String() string {
	switch a {
	case Keep:
		return "keep"
	case Rewrite:
		return "rewrite"
	case Drop:
		return "drop"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Segment is one segment as the plan sees it.
type Segment struct {
	ID     uint64
	Size   int64  // file size when scanned
	Action Action // set by Decide
	// Recode: set by Decide on a segment rewritten because its frames are
	// mostly S2 (and not for its dead frames alone).
	Recode bool
	// S2Bytes is the bytes of its events frames whose payload is an S2
	// block (segment.Recodable): what a rewrite compresses again.
	S2Bytes int64
	// Generation is its header's: 0 as written, one more per rewrite.
	Generation uint64
	fixed      int64            // bytes that never go: file header and seal frame
	holds      map[uint64]int64 // frame bytes per incarnation (0: frames whose header is not in a sealed segment)
	tombs      []tomb           // its tombstones and migration headers
	// owners, of a movable segment, is each frame's incarnation in order
	// (a tombstone's: the one it ends), for the rewrite to decide by
	owners []frameOwner
	// movable: sealed and before the index checkpoint, so it may be
	// removed or rewritten
	movable bool
}

// tomb is a frame that ends an incarnation: a tombstone (bytes > 0) or a
// migration header (bytes 0: it goes with its own incarnation).
type tomb struct {
	key   string
	uid   uint64 // the incarnation it ends
	bytes int64
}

type frameOwner struct {
	off int64
	uid uint64
}

// Plan decides what stays. Frames of events carry no incarnation: the
// Attributor, fed every segment in order, attributes them.
type Plan struct {
	live    map[string]uint64 // key -> live incarnation
	liveUID map[uint64]bool   // the live incarnations
	attr    Attributor
	segs    []*Segment
	frames  map[uint64]int    // frames per incarnation, all sealed segments
	ends    map[uint64]bool   // incarnations a tombstone or migration ends
	repl    map[uint64]uint64 // migration incarnation -> the one it replaces
	orphans map[string]bool   // keys with frames of incarnation 0 anywhere
	purge   map[uint64]bool   // incarnations whose frames all go
	// pending: per key, the orphans met since its last header or
	// tombstone (frames of an incarnation whose header a compaction cut
	// short removed). A tombstone of the key next names their incarnation.
	pending map[string][]orphanFrame
	stuck   map[string]bool // keys with orphans no tombstone names (a migration accounts for them)
	// heads and tombAt: where each incarnation's header and tombstone
	// are (for Deletes)
	heads  map[uint64]Pos
	tombAt map[uint64]Pos
}

// Pos is a frame's place in the log: its segment, the segment's
// generation when it was read, and its offset there.
type Pos struct {
	Seg, Gen uint64
	Off      int64
}

// Delete is an incarnation a compaction purges with its tombstone: a
// delete the change feed can no longer show (docs/SEARCH.md, "Change
// feed"). Header is where its session's history as a consumer sees it
// began (its own header, or, for a migration, the header of the
// incarnation it replaced); the zero Pos if the plan did not read it.
type Delete struct {
	Key    string
	UID    uint64
	Header Pos
	Tomb   Pos
}

// orphanFrame is an orphan events frame the plan read: in si, at owners[at]
// (at < 0: si is not movable).
type orphanFrame struct {
	si   *Segment
	at   int
	size int64
}

// New starts a plan over live, each session's live incarnation (by key),
// attributing frames with attr.
func New(live map[string]uint64, attr Attributor) *Plan {
	p := &Plan{
		live: live, liveUID: map[uint64]bool{}, attr: attr, frames: map[uint64]int{},
		ends: map[uint64]bool{}, repl: map[uint64]uint64{}, orphans: map[string]bool{},
		pending: map[string][]orphanFrame{}, stuck: map[string]bool{},
		heads: map[uint64]Pos{}, tombAt: map[uint64]Pos{},
	}
	for _, uid := range live {
		p.liveUID[uid] = true
	}
	return p
}

func (p *Plan) isLive(uid uint64) bool { return p.liveUID[uid] }

// Segments returns the segments scanned, in order.
func (p *Plan) Segments() []*Segment { return p.segs }

// Scan adds one segment, in segment order: a sealed one, or the durable
// part (up to limit) of the active one. Only a movable segment may be
// removed or rewritten; the others are read for what they hold.
func (p *Plan) Scan(rd *segment.Reader, limit int64, movable bool) error {
	si := &Segment{ID: rd.Header().ID, Size: rd.Size(), Generation: rd.Header().Generation, fixed: segment.HeaderSize, holds: map[uint64]int64{}, movable: movable}
	gen := rd.Header().Generation
	res, err := rd.Scan(segment.ScanOptions{Limit: limit}, func(fi *segment.FrameInfo) error {
		if fi.Kind == segment.KindSeal {
			si.fixed += fi.Size
			return nil
		}
		key := string(fi.Key)
		st, err := p.attr.Frame(rd, si.ID, fi)
		if err != nil {
			return err
		}
		owner, ends := st.Owner, st.Ends
		if movable {
			uid := owner
			if fi.Kind == segment.KindDelete {
				uid = ends
			}
			si.owners = append(si.owners, frameOwner{off: fi.Offset, uid: uid})
		}
		switch fi.Kind {
		case segment.KindHeader:
			si.holds[owner] += fi.Size
			p.frames[owner]++
			if owner != 0 {
				p.heads[owner] = Pos{Seg: si.ID, Gen: gen, Off: fi.Offset}
			}
			// Orphans before a header (a migration's, which accounts for
			// them) stay unattributed: their tombstones stay too.
			if len(p.pending[key]) > 0 {
				p.stuck[key] = true
				delete(p.pending, key)
			}
			if ends != 0 {
				si.tombs = append(si.tombs, tomb{key: key, uid: ends})
				p.ends[ends] = true
				p.repl[owner] = ends
			}
		case segment.KindEvents:
			si.holds[owner] += fi.Size
			if segment.Recodable(fi.Kind, fi.Codec) {
				si.S2Bytes += fi.Size
			}
			p.frames[owner]++
			if owner == 0 {
				p.orphans[key] = true
				at := -1
				if movable {
					at = len(si.owners) - 1
				}
				p.pending[key] = append(p.pending[key], orphanFrame{si: si, at: at, size: fi.Size})
			}
		case segment.KindDelete:
			si.tombs = append(si.tombs, tomb{key: key, uid: ends, bytes: fi.Size})
			if ends != 0 && movable {
				p.tombAt[ends] = Pos{Seg: si.ID, Gen: gen, Off: fi.Offset}
			}
			p.ends[ends] = true
			p.attributeOrphans(key, ends)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !res.Sealed && movable {
		return &base.CorruptionError{Path: rd.Path(), Offset: res.End, Reason: "segment before the active one is not sealed"}
	}
	p.segs = append(p.segs, si)
	return nil
}

// attributeOrphans gives the orphans of key met since its last header or
// tombstone to uid, the incarnation the tombstone that follows them ends
// (the fold's rule: they are the frames of the incarnation whose header a
// compaction cut short removed). So they go with it, as its other frames
// would: without this, orphans and every later tombstone of their key
// stayed for good.
func (p *Plan) attributeOrphans(key string, uid uint64) {
	fs := p.pending[key]
	delete(p.pending, key)
	if len(fs) == 0 {
		return
	}
	if uid == 0 {
		p.stuck[key] = true
		return
	}
	for _, o := range fs {
		o.si.holds[0] -= o.size
		if o.si.holds[0] == 0 {
			delete(o.si.holds, 0)
		}
		o.si.holds[uid] += o.size
		if o.at >= 0 {
			o.si.owners[o.at].uid = uid
		}
		p.frames[0]--
		p.frames[uid]++
	}
	if !p.stuck[key] {
		delete(p.orphans, key) // set again by orphans met after this tombstone
	}
}

// dropTomb reports whether a tombstone of uid may go: its incarnation has
// no frames left (or loses them all now), and no frames of an unknown
// incarnation of its key remain that it might be the end of.
func (p *Plan) dropTomb(t tomb) bool {
	return !p.orphans[t.key] && (p.purge[t.uid] || p.frames[t.uid] == 0)
}

// Decide picks each segment's action (Segment.Action), once every
// segment is scanned: a segment that keeps less than ratio of its size is
// rewritten (ratio 0 or less: none is). It is DecideRecode(ratio, 0).
func (p *Plan) Decide(ratio float64) { p.DecideRecode(ratio, 0) }

// DecideRecode is Decide, and also rewrites (to compress its S2 frames
// again: Segment.Recode) a segment never rewritten (generation 0) whose
// S2 frames are at least recode of its size (recode 0 or less: none is).
// A rewrite compresses the S2 frames it keeps again whatever its reason,
// so a segment rewritten once holds only S2 frames that zstd did not
// make smaller: the generation keeps it from being rewritten for them
// again and again. The incarnations to purge are
// those ended by a tombstone or a migration, not live, whose frames are
// all in segments that are removed or rewritten. Keeping a segment keeps
// the incarnations in it, which can keep other segments; iterate to a fixed
// point (the purge set only shrinks).
func (p *Plan) DecideRecode(ratio, recode float64) {
	p.purge = map[uint64]bool{}
	for uid := range p.ends {
		if uid != 0 && p.frames[uid] > 0 && !p.isLive(uid) {
			p.purge[uid] = true
		}
	}
	for uid, old := range p.repl {
		// An abandoned migration of a live incarnation stays whole: its
		// header and events must stay in order with its tombstone.
		if p.isLive(old) {
			delete(p.purge, uid)
		}
	}
	for changed := true; changed; {
		changed = false
		for child, parent := range p.attr.ForkOf() {
			// A fork reads its parent's frames: the parent stays whole
			// (header, frames, tombstone: a replay attributes them as
			// before) while the fork stays.
			if !p.purge[child] && p.purge[parent] {
				delete(p.purge, parent)
				changed = true
			}
		}
		for _, si := range p.segs {
			var kept int64
			for uid, n := range si.holds {
				if !p.purge[uid] {
					kept += n
				}
			}
			for _, t := range si.tombs {
				if t.bytes > 0 && !p.dropTomb(t) {
					kept += t.bytes
				}
			}
			si.Recode = false
			switch {
			case !si.movable:
				si.Action = Keep
			case kept == 0:
				si.Action = Drop
			case ratio > 0 && float64(kept+si.fixed) < ratio*float64(si.Size):
				si.Action = Rewrite
			case recode > 0 && si.Generation == 0 && float64(si.S2Bytes) >= recode*float64(si.Size):
				si.Action, si.Recode = Rewrite, true
			default:
				si.Action = Keep
			}
		}
		for _, si := range p.segs {
			if si.Action != Keep {
				continue
			}
			for uid := range si.holds {
				if p.purge[uid] {
					delete(p.purge, uid)
					changed = true
				}
			}
		}
		for uid, old := range p.repl {
			// A migration header stays while frames of what it replaced
			// stay: without it they would be the session again.
			if p.purge[uid] && !p.purge[old] && p.frames[old] > 0 {
				delete(p.purge, uid)
				changed = true
			}
		}
	}
}

// Stays reports, after Decide, whether the frame of si at fi stays in its rewrite, by
// the attribution its planning recorded (owners, the frames in order;
// at is the frame's index there).
func (p *Plan) Stays(si *Segment, at int, fi *segment.FrameInfo) (bool, error) {
	if at >= len(si.owners) || si.owners[at].off != fi.Offset {
		return true, fmt.Errorf("frame at %d is not the one the plan read there", fi.Offset)
	}
	uid := si.owners[at].uid
	switch fi.Kind {
	case segment.KindHeader:
		return !p.purge[uid], nil
	case segment.KindEvents:
		return uid == 0 || !p.purge[uid], nil
	case segment.KindDelete:
		return !p.dropTomb(tomb{key: string(fi.Key), uid: uid, bytes: fi.Size}), nil
	}
	return true, nil
}

// Purged returns, after Decide, the incarnations whose frames all go, in
// order.
func (p *Plan) Purged() []uint64 {
	return slices.Sorted(maps.Keys(p.purge))
}

// Deletes returns, after Decide, the incarnations purged whose
// tombstone goes too (in a segment removed or rewritten), in the order of
// their tombstones. A migration's Header is that of the first
// incarnation of its chain of replacements the plan read (the zero Pos
// if it read none: the feed then cannot place it).
func (p *Plan) Deletes() []Delete {
	act := map[uint64]Action{}
	for _, si := range p.segs {
		act[si.ID] = si.Action
	}
	var out []Delete
	for _, uid := range p.Purged() {
		t, ok := p.tombAt[uid]
		if !ok || act[t.Seg] == Keep {
			continue
		}
		d := Delete{Key: p.tombKey(t, uid), UID: uid, Tomb: t}
		if !p.dropTomb(tomb{key: d.Key, uid: uid}) {
			continue
		}
		for u, seen := uid, 0; seen <= len(p.repl); seen++ {
			old, ok := p.repl[u]
			if !ok {
				d.Header = p.heads[u]
				break
			}
			u = old
		}
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b Delete) int {
		if a.Tomb.Seg != b.Tomb.Seg {
			return cmpU(a.Tomb.Seg, b.Tomb.Seg)
		}
		return cmpU(uint64(a.Tomb.Off), uint64(b.Tomb.Off))
	})
	return out
}

// tombKey is the key of the tombstone of uid at t.
func (p *Plan) tombKey(t Pos, uid uint64) string {
	for _, si := range p.segs {
		if si.ID != t.Seg {
			continue
		}
		for _, tb := range si.tombs {
			if tb.uid == uid && tb.bytes > 0 {
				return tb.key
			}
		}
	}
	return ""
}

func cmpU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LiveBytes returns the bytes of si's frames of live incarnations, as of
// the segments scanned so far: what a rewrite would keep of si,
// tombstones and the file's header and seal aside.
func (p *Plan) LiveBytes(si *Segment) int64 {
	var n int64
	for uid, b := range si.holds {
		if p.isLive(uid) {
			n += b
		}
	}
	return n
}

// ForkParentBytes returns, per segment scanned (in order), the bytes of
// incarnations not live that a live fork reads through its chain of
// parents: a compaction keeps them (known once a fork's header is read,
// after its parents' frames). nil if there are none.
func (p *Plan) ForkParentBytes() []int64 {
	forkOf := p.attr.ForkOf()
	shared := map[uint64]bool{}
	for uid := range p.liveUID {
		for parent, ok := forkOf[uid]; ok && !shared[parent]; parent, ok = forkOf[parent] {
			shared[parent] = true
		}
	}
	if len(shared) == 0 {
		return nil
	}
	out := make([]int64, len(p.segs))
	for i, si := range p.segs {
		for uid, n := range si.holds {
			if shared[uid] && !p.isLive(uid) {
				out[i] += n
			}
		}
	}
	return out
}

// Owner returns, after Scan, the incarnation the plan attributed the
// frame at index at of movable segment si to (0: none, or at out of
// range). Stays checks that the frame is the one the plan read there.
func (p *Plan) Owner(si *Segment, at int) uint64 {
	if at < 0 || at >= len(si.owners) {
		return 0
	}
	return si.owners[at].uid
}
