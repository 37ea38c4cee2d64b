package engine

import (
	"fmt"
	"slices"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// fold is the one replay of segment frames into session state: Open's
// recovery (and so Check, which opens the store twice), compaction's
// planning and Usage all feed it the frames they scan, in segment order,
// and it alone knows how frames make incarnations:
//
//   - a header frame starts an incarnation of its session (a migration's
//     header starts one that replaces the current one once all its events
//     follow);
//   - an events frame belongs to the current incarnation of its key, and
//     continues its seqs; one met while a migration is replayed belongs to
//     the migration;
//   - a tombstone ends the incarnation it names (of a migration in
//     progress: the migration was abandoned and the old incarnation stays);
//   - events frames of a key with no incarnation are orphans: frames of an
//     ended incarnation whose header compaction already removed. A later
//     tombstone or migration header of their key accounts for them; finish
//     reports those still unaccounted for.
//
// A fold is fed incrementally: feeding the frames of one segment, then
// those appended to it later, is the same as feeding them at once. The
// state it starts from may be sessions the index holds (their frames
// before the checkpoint are not fed again).
type fold struct {
	sessions  map[string]*session     // the current incarnation of each session
	replacing map[string]*replacement // migrations whose events are not all fed yet
	orphans   map[string]*orphan      // keys with events frames and no incarnation
	ended     map[uint64]bool         // incarnations a tombstone or migration ended
	pend      []pendFrame             // with frames: what the index must learn, in file order
	frames    bool                    // keep frame lists and pend (Open); else only attribute (compaction)
	// forkOf maps each fork's incarnation to its parent's (compaction
	// keeps a parent while a fork of it stays).
	forkOf map[uint64]uint64
	broken []*session // forks met broken (see forkHeader)
	// onList, if set, learns of each session the fold makes (made) or
	// adds frames to (DB.relist).
	onList func(s *session, made bool)
}

func newFold(sessions map[string]*session, frames bool) *fold {
	return &fold{sessions: sessions, frames: frames}
}

// step is what one frame did to the fold.
type step struct {
	// owner is the incarnation the frame belongs to: a header's own, an
	// events frame's (0: an orphan); 0 for a tombstone.
	owner uint64
	// ends is the incarnation the frame ends: a tombstone's, or the one a
	// migration header replaces; else 0.
	ends uint64
}

// replacement is a migration met during replay whose events are not all
// replayed yet.
type replacement struct {
	s     *session // the new incarnation
	old   *session // the one it replaces; nil if compaction dropped it
	want  uint64   // its events
	start frameRef // its header frame
	pend  []pendFrame
	// replaces is the replaced incarnation's uid (old may be nil)
	replaces uint64
	// orphans: frames of the replaced incarnation met without its header
	// (compaction dropped it first), accounted for once the migration
	// takes over.
	orphans *orphan
	// fork: not a migration but a fork (forkHeader) or a session
	// created whole (a fork by copy), which replaces nothing
	fork bool
}

// orphan is the first events frame of a key met without its header.
type orphan struct {
	path string
	off  int64
}

// frame feeds the frame fi of segment seg (read through r) to the fold.
// A frame that cannot follow the ones before is a *CorruptionError at it.
// Seal frames are not fed.
func (f *fold) frame(r *segment.Reader, seg uint64, fi *segment.FrameInfo) (step, error) {
	corrupt := func(reason string) (step, error) {
		return step{}, &store.CorruptionError{Path: r.Path(), Offset: fi.Offset, Reason: reason}
	}
	ref := frameRef{first: fi.FirstSeq, count: fi.Count, seg: seg, off: fi.Offset, size: uint32(fi.Size)}
	switch fi.Kind {
	case segment.KindHeader:
		fr, err := r.ReadFrame(fi.Offset)
		if err != nil {
			return step{}, err
		}
		rec, err := store.DecodeHeaderRecord(fr.Payload, fr.Session)
		if err != nil {
			return corrupt(err.Error())
		}
		if rec.UID == 0 {
			return corrupt(fmt.Sprintf("header of session %q has no incarnation id", fr.Session))
		}
		if f.replacing[fr.Session] != nil {
			return corrupt(fmt.Sprintf("header of session %q inside its unfinished migration", fr.Session))
		}
		old, exists := f.sessions[fr.Session]
		if exists && (rec.Replaces == 0 || old.uid != rec.Replaces) {
			return corrupt(fmt.Sprintf("second header for session %q", fr.Session))
		}
		orphans := f.orphans[fr.Session]
		if orphans != nil && (rec.Replaces == 0 || exists) {
			return step{}, &store.CorruptionError{Path: orphans.path, Offset: orphans.off, Reason: fmt.Sprintf("events of session %q without its header", fr.Session)}
		}
		s := &session{id: fr.Session, hdr: &rec.Header, inherited: rec.Inherited, uid: rec.UID, loaded: true, size: fi.Size, fork: rec.Fork}
		if len(rec.Fork) > 0 {
			return f.forkHeader(r, fi, s, ref, rec.Events)
		}
		if rec.Replaces == 0 && rec.Events > 0 {
			// A session created whole (a fork by copy): like a migration,
			// it takes effect once all its events follow.
			rp := &replacement{s: s, want: rec.Events, start: ref, fork: true}
			if f.frames {
				rp.pend = append(rp.pend, pendFrame{s: s, header: true, ref: ref})
			}
			if f.replacing == nil {
				f.replacing = map[string]*replacement{}
			}
			f.replacing[s.id] = rp
			return step{owner: s.uid}, nil
		}
		if rec.Replaces == 0 {
			f.sessions[s.id] = s
			f.made(s)
			f.index(pendFrame{s: s, header: true, ref: ref})
			return step{owner: s.uid}, nil
		}
		// A migration: the new incarnation takes over once all its events
		// are replayed. (The old one may be gone already: compaction drops
		// a replaced incarnation's segments.)
		rp := &replacement{s: s, old: old, replaces: rec.Replaces, want: rec.Events, start: ref}
		if orphans != nil {
			// Frames of the incarnation it replaces, whose header
			// compaction dropped before them (a compaction cut short):
			// the migration accounts for them, as a tombstone would, once
			// it takes over.
			rp.orphans = orphans
			delete(f.orphans, fr.Session)
		}
		if f.frames {
			rp.pend = append(rp.pend, pendFrame{s: s, header: true, ref: ref})
		}
		if f.replacing == nil {
			f.replacing = map[string]*replacement{}
		}
		f.replacing[s.id] = rp
		f.replaced(rp)
		return step{owner: s.uid, ends: rec.Replaces}, nil
	case segment.KindDelete:
		fr, err := r.ReadFrame(fi.Offset)
		if err != nil {
			return step{}, err
		}
		uid := fr.Deletes
		if rp := f.replacing[fr.Session]; rp != nil {
			if rp.s.uid != uid {
				return corrupt(fmt.Sprintf("tombstone of session %q inside its unfinished migration", fr.Session))
			}
			f.abandon(rp)
			return step{ends: uid}, nil
		}
		s, ok := f.sessions[fr.Session]
		if !ok {
			// Its header (and frames) were in segments compaction dropped:
			// the orphaned frames seen since belong to it.
			delete(f.orphans, fr.Session)
			f.end(uid)
			return step{ends: uid}, nil
		}
		if s.uid != uid {
			return corrupt(fmt.Sprintf("tombstone of session %q, which does not exist in that incarnation", fr.Session))
		}
		s.erased = true
		delete(f.sessions, s.id)
		f.index(pendFrame{s: s, delete: true, ref: ref})
		f.end(s.uid)
		return step{ends: uid}, nil
	case segment.KindEvents:
		if rp := f.replacing[string(fi.Key)]; rp != nil {
			s := rp.s
			if fi.FirstSeq != s.next || s.next+uint64(fi.Count) > rp.want {
				return corrupt(fmt.Sprintf("session %q: migrated frame of seqs %d+%d, expected %d of %d", s.id, fi.FirstSeq, fi.Count, s.next, rp.want))
			}
			if p, ok := f.add(s, ref); ok {
				rp.pend = append(rp.pend, p)
			}
			f.replaced(rp)
			return step{owner: s.uid}, nil
		}
		s, ok := f.sessions[string(fi.Key)]
		if !ok {
			// Frames of a deleted incarnation whose header compaction
			// dropped are fine if its tombstone follows; finish checks
			// that one did.
			if f.orphans == nil {
				f.orphans = map[string]*orphan{}
			}
			if f.orphans[string(fi.Key)] == nil {
				f.orphans[string(fi.Key)] = &orphan{path: r.Path(), off: fi.Offset}
			}
			return step{}, nil
		}
		if fi.FirstSeq != s.next {
			return corrupt(fmt.Sprintf("session %q: frame starts at seq %d, expected %d", s.id, fi.FirstSeq, s.next))
		}
		if p, ok := f.add(s, ref); ok {
			f.pend = append(f.pend, p) // s.frames: all of them, or those after the index's
		}
		return step{owner: s.uid}, nil
	}
	return step{}, nil
}

// forkHeader starts s, a fork that shares its parent's frames (see
// DB.Fork). Like a migration, it takes effect once its events follow:
// here the one frame of its marker, placed with the header; a crash that
// kept the header alone leaves a fork that never was, which the next
// write open abandons with a tombstone. Its parent's incarnation must be
// live before it with at least the cut's events: a fork whose parent is
// not (compaction removed the parent of a deleted fork) is broken, which
// is corruption only if the fork is still live at the end (finish).
func (f *fold) forkHeader(r *segment.Reader, fi *segment.FrameInfo, s *session, ref frameRef, want uint64) (step, error) {
	link := s.fork[0]
	rp := &replacement{s: s, want: want, start: ref, fork: true}
	s.framed, s.next = link.Cut, link.Cut
	p := f.sessions[link.ID]
	switch {
	case p == nil || p.uid != link.UID || p.next < link.Cut:
		s.broken = &orphan{path: r.Path(), off: fi.Offset}
		f.broken = append(f.broken, s)
		if f.frames {
			rp.pend = append(rp.pend, pendFrame{s: s, header: true, ref: ref})
		}
	case f.frames:
		// The parent's frames the fold knows: all of them, or those past
		// the index checkpoint (then the fork, like its parent, takes the
		// others from the index on its first read: its ancestors'
		// entries there, see indexFrames).
		s.frames, s.loaded = clipRefs(p.frames, link.Cut), p.loaded
		rp.pend = append(rp.pend, pendFrame{s: s, header: true, ref: ref})
	}
	if f.forkOf == nil {
		f.forkOf = map[uint64]uint64{}
	}
	f.forkOf[s.uid] = link.UID
	if f.replacing == nil {
		f.replacing = map[string]*replacement{}
	}
	f.replacing[s.id] = rp
	return step{owner: s.uid}, nil
}

// clipRefs returns a copy of the frames of refs (a session's frames, from
// seq 0 or from the first past the index checkpoint) that hold seqs
// before cut, the last one cut short there.
func clipRefs(refs []frameRef, cut uint64) []frameRef {
	n := 0
	for n < len(refs) && refs[n].first < cut {
		n++
	}
	out := slices.Clone(refs[:n:n])
	if n > 0 {
		if last := &out[n-1]; last.first+uint64(last.count) > cut {
			last.count = uint32(cut - last.first)
		}
	}
	return out
}

// made tells onList of a session the fold made.
func (f *fold) made(s *session) {
	if f.onList != nil {
		f.onList(s, true)
	}
}

// add records an events frame of s.
func (f *fold) add(s *session, ref frameRef) (pendFrame, bool) {
	if !f.frames {
		s.framed += uint64(ref.count)
		s.next = s.framed
		return pendFrame{}, false
	}
	p := s.addFrame(ref)
	s.next = s.framed
	if f.onList != nil {
		f.onList(s, false)
	}
	return p, true
}

// index records what the index must learn.
func (f *fold) index(p pendFrame) {
	if f.frames {
		f.pend = append(f.pend, p)
	}
}

// finish ends a replay of every frame there is: a migration not complete
// accounts for nothing (its orphans are back), and orphans left are a
// *CorruptionError at the first of them. The migrations still in
// f.replacing are those a crash cut short.
func (f *fold) finish() error {
	for _, rp := range f.replacing {
		f.restoreOrphans(rp)
	}
	for key, o := range f.orphans {
		return &store.CorruptionError{Path: o.path, Offset: o.off, Reason: fmt.Sprintf("events of session %q before its header", key)}
	}
	for _, s := range f.broken {
		if f.sessions[s.id] == s {
			return &store.CorruptionError{Path: s.broken.path, Offset: s.broken.off, Reason: fmt.Sprintf("fork %q of session %q: the parent's incarnation %d with %d events is not in the log before it", s.id, s.fork[0].ID, s.fork[0].UID, s.fork[0].Cut)}
		}
	}
	f.orphans = nil
	return nil
}

// abandon ends rp, a migration (or fork) that a crash cut short, at its
// tombstone: its new incarnation never was, and the old one stays.
func (f *fold) abandon(rp *replacement) {
	delete(f.replacing, rp.s.id)
	f.end(rp.s.uid)
	f.restoreOrphans(rp)
}

// restoreOrphans puts back the orphaned frames a migration that did not
// take over was holding: without a header, they are corruption.
func (f *fold) restoreOrphans(rp *replacement) {
	if rp.orphans == nil {
		return
	}
	if f.orphans == nil {
		f.orphans = map[string]*orphan{}
	}
	f.orphans[rp.s.id] = rp.orphans
}

// end records that incarnation uid ended.
func (f *fold) end(uid uint64) {
	if f.ended == nil {
		f.ended = map[uint64]bool{}
	}
	f.ended[uid] = true
}

// replaced switches to the new incarnation of a migration once all its
// events are replayed.
func (f *fold) replaced(rp *replacement) {
	if rp.s.next < rp.want {
		return
	}
	delete(f.replacing, rp.s.id)
	if rp.replaces != 0 {
		f.end(rp.replaces)
	}
	if rp.old != nil {
		rp.old.erased = true
		f.index(pendFrame{s: rp.old, delete: true, ref: rp.start})
	}
	f.sessions[rp.s.id] = rp.s
	f.made(rp.s)
	if f.frames {
		f.pend = append(f.pend, rp.pend...)
	}
}
