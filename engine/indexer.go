package engine

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/store"
)

// indexLoop checkpoints durable frames into the index: after a flush (the
// kick) or every IndexInterval. The index's bbolt commit and its fsyncs
// are never on the flush path.
func (db *DB) indexLoop() {
	defer db.wg.Done()
	t := time.NewTicker(db.opts.IndexInterval)
	defer t.Stop()
	for {
		select {
		case <-db.stop:
			return
		case <-t.C:
		case <-db.idxKick:
		}
		db.indexLoopOnce()
	}
}

// indexLoopOnce runs one checkpoint and logs a failure (the frames stay
// pending for the next one).
func (db *DB) indexLoopOnce() {
	if err := db.checkpoint(); err != nil {
		if errors.Is(err, store.ErrCoordinationLost) {
			// Every later tick fails alike: said once.
			if db.lostLogged.CompareAndSwap(false, true) {
				db.opts.Logger.Error("engine: the store's shared memory was cut under this process: it writes and reads nothing more; close it", "error", err)
			}
			return
		}
		db.opts.Logger.Warn("engine: index checkpoint failed; the next open re-reads more of the segments", "error", err)
	}
}

// checkpoint moves every durable frame from pend into the index, with the
// sessions they touch and the new checkpoint, in one bbolt transaction.
func (db *DB) checkpoint() error { return db.checkpointTo(false) }

// checkpointTo is checkpoint; with advance it stores the new checkpoint
// even when no frame is pending, so that it moves past sealed segments
// (compaction changes only segments wholly before it).
func (db *DB) checkpointTo(advance bool) (err error) {
	db.checkpoints.Lock()
	defer db.checkpoints.Unlock()
	defer func() {
		if err != nil {
			db.metrics.checkpointFailures.Add(1)
		}
	}()
	sh := db.shared
	// (One fstat per tick: a cut of shm that faults nothing is found
	// here if no placement or sync found it first.)
	if err := sh.Verify(true); err != nil {
		return err
	}
	wanted := sh.IndexWanted()
	if sh.HoldsIndex() && wanted {
		// A rebuild of the index (check --repair) in another process
		// waits for it: step down, between two checkpoints.
		if err := sh.ReleaseIndex(); err != nil {
			return err
		}
	}
	if !sh.HoldsIndex() && !wanted && db.index != nil {
		// Another process checkpoints, unless it is gone: then this one
		// takes over.
		ok, err := sh.TakeIndex()
		if err != nil {
			return err
		}
		if ok && db.index != nil {
			// The last checkpointer may have died between its commit and
			// publishing it: what the index holds is indexed, and may have
			// been compacted since (its offsets in pend would be stale).
			cp, err := db.index.checkpoint()
			if err != nil {
				sh.ReleaseIndex()
				return err
			}
			coord.Raise(sh.Word(coord.Indexed), coord.Position(cp.Segment, cp.Offset))
		}
	}
	db.checkpoints.ours.Store(sh.HoldsIndex())
	db.log.SetAlone(sh.Alone())
	if !sh.HoldsIndex() {
		// Frames below the checkpoint the checkpointer committed are
		// indexed: they leave the backlog as if this process had indexed
		// them. This process follows the others only when it needs to (a
		// read, a lease), or when the list of its own placements its
		// follower has to skip grows long.
		indexed := sh.Word(coord.Indexed).Load()
		db.mu.Lock()
		was := len(db.mu.pend)
		db.takeIndexed(indexed)
		if len(db.mu.pend) < was || len(db.mu.pend) == 0 {
			// The checkpointing process moved past some (or there are none).
			db.metrics.caughtUpNow()
		}
		long := len(db.mu.own) > ownFollowMax
		db.mu.Unlock()
		// Nor may it fall a segment behind the checkpoint: a compaction
		// leaves alone what a writing process has not followed.
		db.follow.mu.Lock()
		behind := db.follow.mu.pos>>40 < indexed>>40 || db.shared.LayoutMoved(&db.follow.layout)
		db.follow.mu.Unlock()
		if long || behind {
			return db.catchUp()
		}
		return nil
	}
	// Everything the other processes made durable, in the fold: their
	// frames are indexed with this process's own.
	if err := db.catchUp(); err != nil {
		return err
	}
	if err := db.endDeadGroups(); err != nil {
		return err
	}
	// (A process that took the checkpointer's place may still hold frames
	// the last one committed.)
	db.mu.Lock()
	db.takeIndexed(sh.Word(coord.Indexed).Load())
	db.mu.Unlock()
	// The follower has passed every frame below its position, and every
	// frame this process placed below it is registered (a placement
	// registers its frames before it moves the tail): all are in pend.
	// Under appendMu: a placement of this process in progress (which may
	// have written part of a migration group, across a roll, that it
	// registers only once the group is whole) is over.
	db.appendMu.Lock()
	db.follow.mu.Lock()
	cpos := db.follow.mu.pos
	db.follow.mu.Unlock()
	db.appendMu.Unlock()
	var created int64
	cseg, _ := coord.SplitPosition(cpos)
	if cseg != 0 {
		r, err := db.reader(cseg)
		if err != nil {
			return err
		}
		created = r.Header().CreatedNs
	}
	db.mu.Lock()
	// Nor past the header of a migration of another process that is not
	// whole yet (a roll split its placement, and a sync published the
	// first part): the fold holds its frames until it is, and the index
	// takes it whole, from a replay that starts before its header.
	for _, rp := range db.fold.replacing {
		cpos = min(cpos, rp.start.pos())
	}
	db.sortPend()
	for _, p := range db.mu.pend {
		if p.ref.pos() >= cpos {
			break
		}
		if p.groupEnd != nil && p.groupEnd.pos() >= cpos {
			// A migration not yet durable as a whole: the checkpoint stops
			// before it, so that a reopen replays it from its header.
			cpos = p.ref.pos()
			break
		}
	}
	cseg2, coff := coord.SplitPosition(cpos)
	if cseg2 != cseg {
		r := db.mu.readers[cseg2]
		if r == nil {
			db.mu.Unlock()
			return nil // (the next checkpoint gets further)
		}
		created = r.Header().CreatedNs
	}
	cp := index.Checkpoint{Segment: cseg2, Offset: coff, Created: created}
	if cseg2 == 0 {
		db.mu.Unlock()
		return nil
	}
	n := 0
	for n < len(db.mu.pend) && db.mu.pend[n].ref.pos() < cpos {
		n++
	}
	batch := db.mu.pend[:n:n]
	db.mu.pend = restPend(db.mu.pend[n:], n)
	// Sessions a write open checked further than their records say are
	// written too, even with no frame to index (not moving the checkpoint
	// back: never before the one published).
	checked := len(db.mu.checkedDirty) > 0 && cpos >= sh.Word(coord.Indexed).Load()
	if db.index == nil || (n == 0 && !checked && (!advance || len(db.mu.pend) > 0)) {
		db.mu.Unlock()
		db.metrics.caughtUpNow() // every durable frame it knows is indexed
		return nil
	}
	u, touched := db.indexUpdate(batch)
	u.Checkpoint = cp
	dirty := db.mu.checkedDirty
	db.mu.checkedDirty = nil
	for s := range dirty {
		_, written := touched[s]
		switch {
		case written || db.mu.sessions[s.id] != s:
			// (Written by the update, or deleted or replaced.)
		case s.idxSize == 0 || s.idxNext != s.next:
			// The index does not hold its header yet, or all of its
			// events: left for an update that does (its listing as of
			// them is known then).
			db.noteChecked(s)
		default:
			u.Sessions = append(u.Sessions, db.indexRecord(s, nil))
		}
	}
	db.mu.Unlock()
	if err := db.index.use(true, func(x *index.Index) error { return x.Apply(u) }); err != nil {
		db.mu.Lock() // undo: these frames are still unindexed
		for s, w := range touched {
			s.idxNext, s.idxSize = w.next, w.size
		}
		db.mu.pend = append(batch, db.mu.pend...)
		for s := range dirty {
			db.noteChecked(s)
		}
		db.mu.Unlock()
		return err
	}
	coord.Raise(sh.Word(coord.Indexed), cpos)
	db.metrics.checkpoints.Add(1)
	db.metrics.caughtUpNow()
	return nil
}

// ownFollowMax is how many of its own placements a process that does not
// checkpoint lets its follower fall behind before a checkpoint tick makes
// it catch up (8 bytes each).
const ownFollowMax = 1 << 16

// idxWas is what a session's index record said before an update.
type idxWas struct {
	next uint64
	size int64
}

// indexUpdate builds the index update for batch (entries of pend, in file
// order) and moves the sessions' index records on; touched has what they
// were. Called with db.mu held.
func (db *DB) indexUpdate(batch []pendFrame) (*index.Update, map[*session]idxWas) {
	u := &index.Update{}
	touched := map[*session]idxWas{}
	// Frames of an incarnation whose tombstone (or replacing migration) is
	// in this batch are not indexed: the tombstone removes its records.
	// An incarnation erased in memory whose tombstone is not yet durable
	// is still the session on disk: its frames are indexed, or a crash
	// before the tombstone would lose them.
	ended := map[*session]bool{}
	for _, p := range batch {
		if p.delete {
			ended[p.s] = true
		}
	}
	var noted map[*session]*pendFrame // the last entry of each session that has its listing
	for i, p := range batch {
		s := p.s
		if p.delete {
			u.Deleted = append(u.Deleted, s.id) // applied before the upserts below
			if _, err := db.header(s); err == nil && len(s.fork) > 0 {
				u.Unforks = append(u.Unforks, indexFork(s))
			}
			continue
		}
		if ended[s] {
			if !p.header {
				// (Kept if a fork shares them: see index.Update.Ended.)
				u.Ended = append(u.Ended, index.SessionFrame{ID: s.id, Frame: index.Frame{
					FirstSeq: p.ref.first, Count: p.ref.count, Segment: p.ref.seg, Offset: p.ref.off, Size: p.ref.size,
				}})
				u.EndedUIDs = append(u.EndedUIDs, s.uid)
			}
			continue
		}
		if _, ok := touched[s]; !ok {
			touched[s] = idxWas{s.idxNext, s.idxSize}
		}
		if p.header && len(s.fork) > 0 && s.broken == nil {
			u.Forks = append(u.Forks, indexFork(s))
			s.idxNext = max(s.idxNext, s.inherited)
		}
		if p.metaAt != 0 {
			if noted == nil {
				noted = map[*session]*pendFrame{}
			}
			noted[s] = &batch[i]
		}
		s.idxSize += int64(p.ref.size)
		if !p.header {
			s.idxNext = p.ref.first + uint64(p.ref.count)
			u.Frames = append(u.Frames, index.SessionFrame{ID: s.id, Frame: index.Frame{
				FirstSeq: p.ref.first, Count: p.ref.count, Segment: p.ref.seg, Offset: p.ref.off, Size: p.ref.size,
			}})
		}
	}
	for s := range touched {
		u.Sessions = append(u.Sessions, db.indexRecord(s, noted[s]))
	}
	return u, touched
}

// indexRecord is s's index record as of the events the index holds
// (s.idxNext), noted its last frame entry with a listing, if any. Called
// with db.mu held.
func (db *DB) indexRecord(s *session, noted *pendFrame) index.Session {
	title, at, metaAt := s.listingAt(s.idxNext, noted)
	checked, cat := indexChecked(s, s.idxNext)
	return index.Session{
		ID: s.id, Header: marshalHeader(s), UID: s.uid,
		Events: s.idxNext, Size: s.idxSize, Inherited: s.inherited,
		Title: title, UpdatedAt: at, MetaEvents: metaAt,
		Checked: checked, Catalog: cat, TurnFrom: s.indexTurnFrom(),
	}
}

// indexFork is fork s as the index's registry records it.
func indexFork(s *session) index.Fork {
	f := index.Fork{ID: s.id, Chain: make([]index.Link, len(s.fork))}
	for i, l := range s.fork {
		f.Chain[i] = index.Link{ID: l.ID, UID: l.UID, Cut: l.Cut}
	}
	return f
}

// sortPend puts pend in file order: frames this process placed and frames
// it folded from others were added as each came. Called with db.mu held.
func (db *DB) sortPend() {
	byPos := func(a, b pendFrame) int { return cmp.Compare(a.ref.pos(), b.ref.pos()) }
	if !slices.IsSortedFunc(db.mu.pend, byPos) { // (mostly it is: one process writing, or none)
		slices.SortStableFunc(db.mu.pend, byPos)
	}
}

// takeIndexed drops from pend, in a process that does not checkpoint, the
// frames before pos, which the checkpointing process committed, moving
// the sessions' index records on as if this process had. Called with
// db.mu held.
func (db *DB) takeIndexed(pos uint64) {
	db.sortPend()
	n := 0
	for n < len(db.mu.pend) && db.mu.pend[n].ref.pos() < pos {
		n++
	}
	if n == 0 {
		return
	}
	db.indexUpdate(db.mu.pend[:n])
	db.mu.pend = restPend(db.mu.pend[n:], n)
}

// restPend returns a copy of rest, the backlog a checkpoint left, with
// room for as many frames again as it took (taken; at most
// indexBatchFrames, which wake the checkpointer anyway): the backlog
// refills at the rate it was drained, and a copy grown by append from
// nothing was the most bytes a flush allocated at one place (a pendFrame
// is ~100 bytes, and the backlog of 64 sessions' flushes doubled its way
// up again after every checkpoint).
func restPend(rest []pendFrame, taken int) []pendFrame {
	out := make([]pendFrame, len(rest), len(rest)+min(max(taken, 64), indexBatchFrames))
	copy(out, rest)
	return out
}
