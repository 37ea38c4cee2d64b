package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
)

// follower is how a DB keeps up with the other processes that write its
// store: before each Stat, List, Open, Usage and Read (and, in a writing
// process, before it takes a session's lease and before each index
// checkpoint) it feeds the replay fold the frames they made durable since
// (docs/MULTIPROCESS.md, Many processes). It never reads past the durable
// position, so it never meets a frame being written; it skips the frames
// this process placed (db.mu.own), which it registered as it placed them.
type follower struct {
	// mu: one catch-up at a time. After the log's locks, before
	// DB.layoutMu.
	mu struct {
		sync.Mutex
		pos uint64 // position up to which the fold has been fed
	}
	// layout is the layout counter the state was built at. This process's
	// own compactions move it along with the counter (coord.Shared.LayoutBegin and LayoutEnd), so
	// only other processes' changes make them differ.
	layout atomic.Uint64
}

// catchUp brings a following DB up to what the writing processes
// published as durable. A compaction since (the layout counter moved) rebuilds the
// state: the frame offsets of rewritten segments changed.
func (db *DB) catchUp() error {
	f := db.follow
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// Read under f.mu: a compaction of this process passes its own
	// follower (under f.mu) before it rewrites what the follower read.
	d, ok := db.shared.Durable()
	if err := db.shared.Followable(d, ok); err != nil {
		return err
	}
	if !ok {
		return nil
	}
	switch {
	case !db.shared.LayoutMoved(&f.layout):
	case db.opts.ReadOnly:
		return db.reload()
	default:
		if err := db.relayout(f); err != nil {
			return err
		}
	}
	err := db.follow1(f, d)
	if err != nil && db.opts.ReadOnly && db.shared.LayoutMoved(&f.layout) {
		// A compaction removed or rewrote a segment under the catch-up:
		// what it read may be gone; start over from the store as it is.
		// (A writing process's follower never meets one: compactions
		// leave alone what it has not followed.)
		return db.reload()
	}
	db.shared.PublishFollow(f.mu.pos)
	return err
}

// relayout brings a writing process's frame references up to the
// compactions other processes did since it last looked (the layout
// counter moved): every segment a compaction removed or rewrote is
// wholly before the index checkpoint (see Compact), so every frame this
// process knows of there is in the index. It drops those references, and
// its readers of those segments; a session that lost some reloads them
// from the index on its next read (snapshot), as a session not read
// since the open does. A compaction that died mid-change is settled
// first. Called with f.mu held.
func (db *DB) relayout(f *follower) error {
	l := db.shared.StableLayout()
	if l%2 == 1 {
		if err := db.settleCompaction(); err != nil {
			return err
		}
		l = db.shared.StableLayout()
	}
	if db.index == nil {
		// (No other process compacts beside a writer without an index:
		// coord.LockFixed.)
		f.layout.Store(l)
		return nil
	}
	cp, err := db.index.checkpoint()
	if err != nil {
		return err
	}
	db.layoutMu.Lock()
	db.mu.Lock()
	for _, s := range db.mu.sessions {
		n := 0
		for n < len(s.frames) && s.frames[n].seg < cp.Segment {
			n++
		}
		if n > 0 {
			s.frames = slices.Clone(s.frames[n:])
			s.loaded = false
		}
	}
	var stale []*segment.Reader
	for id, r := range db.mu.readers {
		if id < cp.Segment {
			stale = append(stale, r)
			delete(db.mu.readers, id)
		}
	}
	db.mu.Unlock()
	db.layoutMu.Unlock()
	for _, r := range stale {
		r.Close()
	}
	f.layout.Store(l)
	return nil
}

// follow1 feeds the fold the frames from f.mu.pos up to d. Called with f.mu
// held.
func (db *DB) follow1(f *follower, d uint64) error {
	if d <= f.mu.pos {
		return nil
	}
	if db.knobs.follow != nil {
		db.knobs.follow()
	}
	seg, off := coord.SplitPosition(f.mu.pos)
	dseg, doff := coord.SplitPosition(d)
	if seg == 0 {
		// The open found no segment: start at the first there is.
		ids, err := segment.List(db.opts.FS, db.dir)
		if err != nil {
			return err
		}
		if len(ids) == 0 || ids[0] > dseg {
			return &store.CorruptionError{Path: db.segPath(dseg), Offset: doff, Reason: "the writer published it durable, but no segment is there"}
		}
		seg, off = ids[0], 0
	}
	for {
		r, err := db.reader(seg)
		if err != nil {
			return err
		}
		if err := r.Remap(); err != nil { // grown, or trimmed by its seal
			return err
		}
		db.mu.Lock()
		p := db.skipOwn(coord.Position(seg, off), d)
		if p == d {
			db.mu.Unlock()
			f.mu.pos = d
			return nil
		}
		_, off = coord.SplitPosition(p)
		// Everything up to durable is durable: damage there is corruption,
		// never a torn tail (a segment before durable's is sealed whole).
		opts := segment.ScanOptions{From: off, Durable: math.MaxInt64}
		if seg == dseg {
			opts.Limit, opts.Durable = doff, doff
		}
		res, err := r.Scan(opts, func(fi *segment.FrameInfo) error {
			if fi.Kind == segment.KindSeal {
				return nil
			}
			p := coord.Position(seg, fi.Offset)
			own := db.mu.own
			for len(own) > 0 && own[0].at < p {
				own = own[1:]
			}
			if len(own) > 0 && own[0].at == p {
				db.mu.own = own[1:] // placed by this process: registered then
				return nil
			}
			db.mu.own = own
			_, err := db.fold.frame(r, seg, fi)
			return err
		})
		if db.opts.ReadOnly {
			db.fold.pend = nil // a reader indexes nothing
		} else {
			db.mu.pend = append(db.mu.pend, db.fold.pend...)
			db.fold.pend = nil
		}
		db.mu.Unlock()
		if err != nil {
			return err
		}
		if seg == dseg {
			if res.End != doff {
				return &store.CorruptionError{Path: r.Path(), Offset: res.End, Reason: fmt.Sprintf("the log ends before the durable offset %d", doff)}
			}
			f.mu.pos = d
			return nil
		}
		if !res.Sealed {
			return &store.CorruptionError{Path: r.Path(), Offset: res.End, Reason: "segment before the durable one is not sealed"}
		}
		f.mu.pos = coord.Position(seg, res.End)
		ids, err := segment.List(db.opts.FS, db.dir)
		if err != nil {
			return err
		}
		i, _ := slices.BinarySearch(ids, seg+1)
		if i == len(ids) || ids[i] > dseg {
			return &store.CorruptionError{Path: db.segPath(dseg), Offset: doff, Reason: fmt.Sprintf("the writer published it durable, but no segment follows %d", seg)}
		}
		seg, off = ids[i], 0
	}
}

// ownFrame is a frame this process placed: its position and the one
// after it.
type ownFrame struct{ at, end uint64 }

// skipOwn returns the position after the frames this process placed from
// pos on, up to d, and drops them and those before pos from db.mu.own:
// they were registered as they were placed, so its follower need not read
// them (a process alone on the store reads none of its log back). Called
// with db.mu held.
func (db *DB) skipOwn(pos, d uint64) uint64 {
	own := db.mu.own
	for len(own) > 0 && own[0].at < pos {
		own = own[1:]
	}
	for len(own) > 0 && own[0].at == pos && own[0].end <= d {
		pos = own[0].end
		own = own[1:]
	}
	db.mu.own = own
	return pos
}

// durablePos is the durable position the writing processes published, 0
// if there is none to know of (a read-only DB of a store it cannot
// coordinate on, or that no process writes).
func (db *DB) durablePos() uint64 {
	d, _ := db.shared.Durable()
	return d
}

// reload rebuilds a following DB's state from the store as it is now, as
// a new read-only open would. Reads in progress finish on the old state:
// layoutMu keeps the readers they use open until they are done.
func (db *DB) reload() error {
	o := db.opts
	nd, err := open(db.dir, &o, false) //lint:lockok the locks it takes are the new DB's, not db's
	if err != nil {
		return err
	}
	if nd.follow == nil { // cannot happen while this DB shares LOCK: no first opener resets shm
		nd.Close() //lint:lockok nd is a new DB of this goroutine's, not db: none of its mutexes is db's
		return fmt.Errorf("engine: %s: the writer's published state is gone", db.dir)
	}
	db.layoutMu.Lock()
	db.mu.Lock()
	old := db.mu.readers
	db.mu.sessions, db.mu.readers = nd.mu.sessions, nd.mu.readers
	db.mu.list, db.mu.byUpdated = nd.mu.list, nd.mu.byUpdated
	db.fold, db.index, db.rec = nd.fold, nd.index, nd.rec
	if db.fold != nil {
		db.fold.onList = db.relist // (nd's was nd's)
	}
	db.follow.mu.pos = nd.follow.mu.pos
	db.follow.layout.Store(nd.follow.layout.Load())
	db.mu.Unlock()
	db.layoutMu.Unlock()
	nd.mu.readers = nil
	nd.shared.Close()
	for _, r := range old {
		r.Close()
	}
	return nil
}

// current returns the state of the session a read handle is on: after a
// reload, the new state of the same incarnation. Called with db.mu held.
func (db *DB) current(s *session) *session {
	cur := db.mu.sessions[s.id]
	switch {
	case cur == s:
		return s
	case cur != nil && cur.uid == s.uid:
		return cur
	case !s.pending:
		// Not the live incarnation any more (deleted, or replaced by a
		// migration or a new creation), whether this DB saw its end or a
		// rebuild after a compaction replaced the sessions without it: its
		// frames may have been reclaimed, and its offsets mean nothing.
		s.erased = true
	}
	return s
}

// Wait waits until the session holds more than n events that a Read
// through this handle would return, and returns how many it holds. Events
// another process writes count once it has flushed them; events appended
// through this DB count at once. It fails with ErrSessionNotFound once the
// session is deleted, ErrHandleClosed, ErrClosed, or the context's error.
// A reader in another process wakes as soon as the writer's flush has
// published its events: every sync moves a word of the shared memory, and
// one goroutine of the reader's process sleeps on it (a futex) for all of
// its Waits. Events appended through this DB are seen by polling, every
// waitMin to waitMax. The DB's Close wakes it (ErrClosed).
func (h *Handle) Wait(ctx context.Context, n uint64) (uint64, error) {
	db := h.db
	if err := db.enter(); err != nil {
		return 0, sessionErr(h.ID(), "wait", err)
	}
	defer db.leave()
	delay := db.knobs.waitMin
	var t *time.Timer
	for {
		// Taken before looking: a sync that publishes after this point
		// closes it.
		synced := db.shared.Changed()
		if err := h.front.CheckRead(ctx, 0); err != nil {
			return 0, err
		}
		if err := db.catchUp(); err != nil {
			return 0, sessionErr(h.ID(), "wait", err)
		}
		db.mu.Lock()
		s := db.current(h.s)
		gone := s.erased || db.mu.sessions[s.id] != s
		count := s.next
		db.mu.Unlock()
		if gone {
			return 0, sessionErr(h.ID(), "wait", store.ErrSessionNotFound)
		}
		if count > n {
			return count, nil
		}
		if t == nil {
			t = time.NewTimer(delay)
			defer t.Stop()
		} else {
			t.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-db.stop: // Close began: it waits for this Wait to end
			return 0, sessionErr(h.ID(), "wait", store.ErrClosed)
		case <-synced: // (nil, never, if this process cannot watch)
			delay = db.knobs.waitMin
		case <-t.C:
			delay = min(2*delay, db.knobs.waitMax)
		}
	}
}

// Wait's polling interval grows from waitMin to waitMax while nothing
// comes. (A test turns the polls off in its DB's knobs, so that only a
// wake-up ends a Wait.)
const (
	waitMin = 500 * time.Microsecond
	waitMax = 5 * time.Millisecond
)
