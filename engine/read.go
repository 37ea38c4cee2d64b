package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// openSegment opens segment id and checks that its header names the same
// ID as its file name (a renamed or swapped file is corruption).
func (db *DB) openSegment(id uint64) (*segment.Reader, error) {
	r, err := segment.OpenReaderDicts(db.opts.FS, db.segPath(id), db.dicts)
	if err != nil {
		return nil, err
	}
	if got := r.Header().ID; got != id {
		r.Close()
		return nil, &store.CorruptionError{Path: db.segPath(id), Offset: 0, Reason: fmt.Sprintf("header says segment %d", got)}
	}
	return r, nil
}

// reader returns the open reader of segment id, opening it if needed.
func (db *DB) reader(id uint64) (*segment.Reader, error) {
	db.mu.Lock()
	r := db.mu.readers[id]
	db.mu.Unlock()
	if r != nil {
		return r, nil
	}
	r, err := db.openSegment(id)
	if err != nil {
		return nil, err
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if old := db.mu.readers[id]; old != nil {
		r.Close()
		return old, nil
	}
	db.mu.readers[id] = r
	return r, nil
}

// Read returns the events at offset..offset+limit-1 (limit < 0: to the
// end). An offset at or past the end gives an empty slice and no error.
// The events are the caller's: they share no memory with the store or with
// other reads. Reads started after an Append returned see its events.
func (h *Handle) Read(ctx context.Context, offset, limit int) ([]event.Event, error) {
	db := h.db
	if err := db.enter(); err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	defer db.leave()
	if err := h.front.CheckRead(ctx, offset); err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		var layout uint64
		if db.follow != nil {
			layout = db.shared.StableLayout()
		}
		evs, err := h.read(ctx, offset, limit)
		if db.follow == nil || db.shared.Layout() == layout || try == openTries {
			if err == nil {
				err = h.front.CheckSeeds(evs)
			}
			if err != nil {
				return nil, err
			}
			return evs, nil
		}
		// A compaction by the writing process moved frames during the
		// read: read again, from the rebuilt state.
	}
}

func (h *Handle) read(ctx context.Context, offset, limit int) ([]event.Event, error) {
	if err := h.db.catchUp(); err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if h.Header().Version < store.FormatVersion {
		return h.readMigrated(ctx, offset, limit)
	}
	return h.readStored(ctx, offset, limit, true)
}

// readMigrated is Read of a session stored in an older format: the whole
// log is read and migrated in memory (nothing is written), then sliced.
func (h *Handle) readMigrated(ctx context.Context, offset, limit int) ([]event.Event, error) {
	raw, err := h.readStored(ctx, 0, -1, false)
	if err != nil {
		return nil, err
	}
	evs, err := migrate(h.Header(), h.storedInherited(), raw)
	if err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	lo, hi := store.ReadRange(uint64(len(evs)), offset, limit) // offset+limit may overflow an int
	if lo >= hi {
		return []event.Event{}, nil
	}
	return evs[lo:hi], nil
}

// readStored is Read of the events as stored; check applies the catalog.
func (h *Handle) readStored(ctx context.Context, offset, limit int, check bool) ([]event.Event, error) {
	db := h.db
	db.layoutMu.RLock()
	out, err := h.readFrames(ctx, offset, limit)
	db.layoutMu.RUnlock()
	if err != nil {
		return nil, err
	}
	for i := range out { // fail closed on events this build does not know
		if !check {
			break
		}
		if err := db.opts.Catalog.Check(&out[i]); err != nil {
			// Another process may have recorded the type since this one
			// loaded the store's types: look once more.
			if !db.loadTypes() || db.opts.Catalog.Check(&out[i]) != nil {
				return nil, sessionErr(h.ID(), "read", err)
			}
		}
	}
	return out, nil
}

// readFrames is readStored's part under db.layoutMu.
func (h *Handle) readFrames(ctx context.Context, offset, limit int) ([]event.Event, error) {
	db := h.db
	v, err := db.snapshot(h.s)
	if err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	// Not under h.mu: readFrames runs under layoutMu, which an appender
	// holding h.mu may need (to undo a lost write).
	if err := h.front.Observe(v.len()); err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	off, end := store.ReadRange(v.len(), offset, limit)
	if off >= end {
		return []event.Event{}, nil
	}
	refs := v.refs
	lo := sort.Search(len(refs), func(i int) bool { return refs[i].first+uint64(refs[i].count) > off })
	hi := lo
	for hi < len(refs) && refs[hi].first < end {
		hi++
	}
	if reason := coverage(refs[lo:hi], off, end, v.framed); reason != "" {
		return nil, sessionErr(h.ID(), "read", &store.CorruptionError{Path: db.dir, Reason: fmt.Sprintf("session %q: %s", h.ID(), reason)})
	}
	out := make([]event.Event, end-off)
	if err := db.decodeFrames(ctx, h.s.id, &v, refs[lo:hi], off, end, out); err != nil {
		return nil, sessionErr(h.ID(), "read", err)
	}
	for seq := max(off, v.framed); seq < end; seq++ {
		out[seq-off] = v.open[seq-v.framed].Clone()
	}
	return out, nil
}

// coverage checks that refs (the frames a read of events [off, end) uses)
// and the events not yet framed, from seq framed on, hold each of those
// events exactly once: the frames follow one another with no gap or
// overlap from off (the first may start before it) up to end or framed,
// and none reaches past framed. It returns what is wrong, or "".
func coverage(refs []frameRef, off, end, framed uint64) string {
	next := off // the first seq no frame covers yet
	for i, r := range refs {
		rend := r.first + uint64(r.count)
		switch {
		case r.first > next:
			return fmt.Sprintf("events %d..%d are in no frame (the next frame holds %d..%d, in segment %d at offset %d)", next, r.first-1, r.first, rend-1, r.seg, r.off)
		case i > 0 && r.first < next:
			return fmt.Sprintf("frames overlap: events %d..%d are in two (the second in segment %d at offset %d)", r.first, min(next, rend)-1, r.seg, r.off)
		case rend > framed:
			return fmt.Sprintf("a frame holds events %d..%d, past the %d framed (in segment %d at offset %d)", r.first, rend-1, framed, r.seg, r.off)
		}
		next = max(next, rend)
	}
	if next < min(end, framed) {
		return fmt.Sprintf("events %d..%d are in no frame (%d are framed)", next, min(end, framed)-1, framed)
	}
	return ""
}

// parallelFrames is the number of frames from which a read decodes on
// several cores.
const parallelFrames = 16

// decodeFrames decodes refs (consecutive frames of session id, whose view
// v says which of its seqs it shares with the sessions it forks) and puts
// the events in [off, end) at out[seq-off]. Large reads fan out over
// GOMAXPROCS goroutines, each taking every n-th frame.
func (db *DB) decodeFrames(ctx context.Context, id string, v *view, refs []frameRef, off, end uint64, out []event.Event) error {
	one := func(ref frameRef) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := db.readFrame(id, ref, ref.first < v.shared, v.owner(id, ref.first))
		if err != nil {
			return err
		}
		for i, e := range f.Events[:ref.count] {
			if seq := ref.first + uint64(i); seq >= off && seq < end {
				out[seq-off] = e
			}
		}
		return nil
	}
	workers := min(runtime.GOMAXPROCS(0), len(refs)/parallelFrames*2)
	if workers <= 1 {
		for _, ref := range refs {
			if err := one(ref); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(refs); i += workers {
				if err := one(refs[i]); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// view is a consistent view of a session's events: its frames and the
// events not yet framed.
type view struct {
	refs   []frameRef       // frames covering [0, framed)
	shared uint64           // the refs before it are another session's frames (a fork's)
	fork   []store.ForkLink // whose: the fork's chain, nearest first (see owner)
	framed uint64           //
	open   []event.Event    // events [framed, framed+len(open)), not yet framed
}

func (v *view) len() uint64 { return v.framed + uint64(len(v.open)) }

// owner returns the session whose key the frame holding seq of session id
// carries: id's own past the seqs it shares, else the link of its fork
// chain whose part holds seq (from the next link's cut, 0 for the last,
// to its own: as index.SharedFrames takes them).
func (v *view) owner(id string, seq uint64) string {
	if seq >= v.shared {
		return id
	}
	for i := len(v.fork) - 1; i >= 0; i-- {
		if seq < v.fork[i].Cut {
			return v.fork[i].ID
		}
	}
	return id // (no link holds it: the check fails at the frame)
}

// snapshot returns a consistent view of s's events, loading the frame
// list from the index on first use.
func (db *DB) snapshot(s *session) (view, error) {
	db.mu.Lock()
	s = db.current(s)
	if s.erased {
		db.mu.Unlock()
		return view{}, store.ErrSessionNotFound
	}
	if !s.loaded && db.index != nil {
		if _, err := db.header(s); err != nil { // (a fork's links are in its header record)
			db.mu.Unlock()
			return view{}, err
		}
		id, uid, fork, marker := s.id, s.uid, s.fork, forkMarker(s)
		db.mu.Unlock()
		var fromIdx []frameRef
		var found bool
		err := db.index.use(false, func(x *index.Index) error {
			var err error
			fromIdx, found, err = indexFrames(x, id, uid, fork, marker)
			return err
		})
		if err != nil {
			return view{}, err
		}
		db.mu.Lock()
		if !s.loaded && !found {
			// The index (checkpointed since by another process) holds
			// another incarnation, or none: this one, which the open found
			// in the index, was deleted or replaced since, and its frames
			// may be gone.
			s.erased = true
			db.mu.Unlock()
			return view{}, store.ErrSessionNotFound
		}
		if !s.loaded {
			s.frames = withIndexFrames(s, fromIdx)
			s.loaded = true
		}
	}
	if s.hdrRaw != nil {
		if _, err := db.header(s); err != nil {
			db.mu.Unlock()
			return view{}, err
		}
	}
	v := view{refs: s.frames, framed: s.framed, open: s.open}
	if s.fork != nil {
		v.shared, v.fork = s.inherited, s.fork
	}
	db.mu.Unlock()
	return v, nil
}

// forkMarker returns the position of the marker frame of fork s if it is
// in memory (0: none, or s is no fork). A fork whose marker frame is in
// memory has every frame of its own there (its header is past the
// checkpoint): the index may not hold it yet. Called with db.mu held.
func forkMarker(s *session) uint64 {
	if len(s.fork) > 0 {
		if i := slices.IndexFunc(s.frames, func(r frameRef) bool { return r.first == s.inherited }); i >= 0 {
			return s.frames[i].pos()
		}
	}
	return 0
}

// loadEveryFrame loads the frames of every session not loaded yet from x,
// the index the open's recovery read the sessions and the checkpoint
// from (Options.checking: Check's open), as snapshot would on the
// session's first read: the whole view is then the index as of one
// moment, whatever other processes checkpoint later. A session whose
// header or frames x cannot give is left as it is: its first read (the
// check's) meets the same error and reports it. One x does not hold
// (another incarnation, or none) is erased, as snapshot erases it; the
// check reports it, as x is the index the session came from.
func (db *DB) loadEveryFrame(x *index.Index) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, s := range db.mu.sessions {
		if s.loaded || s.erased {
			continue
		}
		if _, err := db.header(s); err != nil {
			continue
		}
		fromIdx, found, err := indexFrames(x, s.id, s.uid, s.fork, forkMarker(s))
		switch {
		case err != nil:
		case !found:
			s.erased = true
		default:
			s.frames = withIndexFrames(s, fromIdx)
			s.loaded = true
		}
	}
}

// indexFrames returns the frames index x holds of incarnation uid of
// session id, and whether it holds that incarnation. Those of a fork
// start with the frames it shares, which x holds as its ancestors' (see
// index.SharedFrames). A fork whose marker frame this process holds in
// memory, at position marker (0: none), has its own frames all there,
// never dropped by a relayout (they are past the checkpoint too): if x
// does not hold it, either x is not that far yet (its checkpoint is not
// past the marker), or the fork was deleted since, and x checkpointed
// past its tombstone (maybe with its parent's, whose frames the fork
// shared: x may hold none of them any more). Another one x does not hold
// was deleted since.
func indexFrames(x *index.Index, id string, uid uint64, fork []store.ForkLink, marker uint64) ([]frameRef, bool, error) {
	got, frames, err := x.FramesOf(id)
	if err != nil || len(fork) == 0 || (got != uid && marker == 0) {
		return toRefs(frames, math.MaxUint64), err == nil && got == uid, err
	}
	if got != uid {
		cp, err := x.Checkpoint()
		if err != nil {
			return nil, false, err
		}
		if coord.Position(cp.Segment, cp.Offset) > marker {
			return nil, false, nil // indexed, and deleted since
		}
	}
	chain := make([]index.Link, len(fork))
	for i, l := range fork {
		chain[i] = index.Link{ID: l.ID, UID: l.UID, Cut: l.Cut}
	}
	shared, err := x.SharedFrames(chain)
	if err != nil {
		return nil, false, err
	}
	refs := toRefs(shared, math.MaxUint64)
	if got == uid {
		refs = append(refs, toRefs(frames, math.MaxUint64)...)
	}
	return refs, true, nil
}

// toRefs turns index frames into frame references, up to seq cut (the
// last one cut short there).
func toRefs(frames []index.Frame, cut uint64) []frameRef {
	refs := make([]frameRef, 0, len(frames))
	for _, f := range frames {
		if f.FirstSeq >= cut {
			break
		}
		refs = append(refs, frameRef{first: f.FirstSeq, count: uint32(min(uint64(f.Count), cut-f.FirstSeq)), seg: f.Segment, off: f.Offset, size: f.Size})
	}
	return refs
}

// withIndexFrames returns the frame list of s made whole with fromIdx,
// frames the index holds of it: those before the first it has in
// memory. Called with db.mu held.
func withIndexFrames(s *session, fromIdx []frameRef) []frameRef {
	limit := s.framed
	if len(s.frames) > 0 {
		limit = s.frames[0].first
	}
	all := make([]frameRef, 0, len(fromIdx)+len(s.frames))
	for _, f := range fromIdx {
		if f.first < limit {
			all = append(all, f)
		}
	}
	return append(all, s.frames...)
}

// readFrame reads the frame at ref, of session id's events, which must
// carry the key of session owner (view.owner): id, or for a shared frame
// (a fork's, of an ancestor's events) that ancestor's; a shared frame may
// hold more events than the fork takes of it. Placed frames are in the
// file (the page cache) from their registration on, synced or not.
func (db *DB) readFrame(id string, ref frameRef, shared bool, owner string) (*segment.Frame, error) {
	r, err := db.reader(ref.seg)
	if errors.Is(err, fs.ErrNotExist) {
		// Reads hold the layout lock: a compaction removes only segments
		// with no live frame, so this one was lost.
		return nil, &store.CorruptionError{Path: db.segPath(ref.seg), Offset: ref.off, Err: err,
			Reason: fmt.Sprintf("segment missing: it held events %d..%d of this session", ref.first, ref.first+uint64(ref.count))}
	}
	if err != nil {
		return nil, err
	}
	f, err := r.ReadFrame(ref.off)
	if err != nil {
		return nil, err
	}
	if f.Kind != segment.KindEvents || f.FirstSeq != ref.first || len(f.Events) < int(ref.count) || f.Session != owner || (!shared && len(f.Events) != int(ref.count)) {
		what := fmt.Sprintf("session %q", id)
		if owner != id {
			what += fmt.Sprintf(" (shared with session %q)", owner)
		}
		return nil, &store.CorruptionError{Path: r.Path(), Offset: ref.off, Reason: fmt.Sprintf("frame does not hold the indexed events %d..%d of %s", ref.first, ref.first+uint64(ref.count), what)}
	}
	return f, nil
}
