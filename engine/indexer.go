package engine

import (
	"slices"
	"time"

	"github.com/seglog/seglog/index"
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
		db.opts.Logger.Warn("engine: index checkpoint failed; the next open re-reads more of the segments", "error", err)
	}
}

// checkpoint moves every durable frame from pend into the index, with the
// sessions they touch and the new checkpoint, in one bbolt transaction.
func (db *DB) checkpoint() error { return db.checkpointTo(false) }

// checkpointTo is checkpoint; with advance it stores the new checkpoint
// even when no frame is pending, so that it moves past sealed segments
// (compaction changes only segments wholly before it).
func (db *DB) checkpointTo(advance bool) error {
	db.idxMu.Lock()
	defer db.idxMu.Unlock()
	// appendMu: no frame is between its append and its registration in
	// pend while the durable offset is read, so every frame below it is in
	// pend or already in the index. (An append can make its own frames
	// durable before it registers them: a roll seals and syncs, a spill
	// syncs the write before. A checkpoint taken in that window would pass
	// frames it never indexed.)
	db.appendMu.Lock()
	db.mu.Lock()
	w := db.mu.roller.Active()
	aid, dur := w.Header().ID, w.Durable()
	db.appendMu.Unlock()
	durable := func(ref frameRef) bool {
		return ref.seg < aid || (ref.seg == aid && ref.off+int64(ref.size) <= dur)
	}
	cp := index.Checkpoint{Segment: aid, Offset: dur, Created: w.Header().CreatedNs}
	n := 0
	for n < len(db.mu.pend) {
		p := &db.mu.pend[n]
		if !durable(p.ref) {
			break
		}
		if p.groupEnd != nil && !durable(*p.groupEnd) {
			// A migration not yet durable as a whole: the checkpoint stops
			// before it, so that a reopen replays it from its header.
			cp = index.Checkpoint{Segment: p.ref.seg, Offset: p.ref.off}
			if p.ref.seg == aid {
				cp.Created = w.Header().CreatedNs
			}
			break
		}
		n++
	}
	batch := db.mu.pend[:n:n]
	db.mu.pend = slices.Clone(db.mu.pend[n:])
	if db.index == nil || (n == 0 && (!advance || len(db.mu.pend) > 0)) {
		db.mu.Unlock()
		return nil
	}
	u := &index.Update{Checkpoint: cp}
	type was struct {
		next uint64
		size int64
	}
	touched := map[*session]was{}
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
	for _, p := range batch {
		s := p.s
		if p.delete {
			u.Deleted = append(u.Deleted, s.id) // applied before the upserts below
			continue
		}
		if ended[s] {
			continue
		}
		if _, ok := touched[s]; !ok {
			touched[s] = was{s.idxNext, s.idxSize}
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
		u.Sessions = append(u.Sessions, index.Session{
			ID: s.id, Header: marshalHeader(s), UID: s.uid,
			Events: s.idxNext, Size: s.idxSize, Inherited: s.inherited,
		})
	}
	db.mu.Unlock()
	if err := db.index.use(true, func(x *index.Index) error { return x.Apply(u) }); err != nil {
		db.mu.Lock() // undo: these frames are still unindexed
		for s, w := range touched {
			s.idxNext, s.idxSize = w.next, w.size
		}
		db.mu.pend = append(batch, db.mu.pend...)
		db.mu.Unlock()
		return err
	}
	return nil
}
