package engine

import (
	"errors"
	"fmt"

	"github.com/seglog/seglog/segment"
)

// storeErr classifies an error of the segment layer for an append or a
// flush: a loss is undone (the caller holds appendMu if held is true), an
// fsync failure poisons the store, anything else is returned as it is (a
// segment that could not be created for a roll, say: nothing was written,
// and the next append tries again).
func (db *DB) storeErr(err error, held bool) error {
	var lost *segment.LostError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &lost):
		if uerr := db.undoLost(held); uerr != nil {
			return uerr
		}
		return fmt.Errorf("%w: %w", ErrWriteLost, err)
	case errors.Is(err, segment.ErrSyncFailed):
		db.poisonWith(err)
	}
	return err
}

// undoLost undoes a write the active segment lost: every frame registered
// from the loss's offset on is forgotten (the sessions go back to their
// stored events; their write handles fail with ErrWriteLost; a deleted
// session whose tombstone was lost is back), then the writer zeroes or
// cuts what the write may have left and resumes there. A loss that took
// part of a migration poisons the store instead (its halves cannot be put
// back in memory). With held, the caller holds appendMu.
func (db *DB) undoLost(held bool) error {
	if !held {
		db.appendMu.Lock()
		defer db.appendMu.Unlock()
	}
	db.layoutMu.Lock()
	db.mu.Lock()
	if db.mu.poison != nil {
		err := db.mu.poison
		db.mu.Unlock()
		db.layoutMu.Unlock()
		return err
	}
	w := db.mu.roller.Active()
	lost := w.Lost()
	if lost == nil { // undone already by another caller
		db.mu.Unlock()
		db.layoutMu.Unlock()
		return nil
	}
	seg, from := w.Header().ID, lost.From
	cut := len(db.mu.pend)
	for i, p := range db.mu.pend {
		if p.ref.seg == seg && p.ref.off >= from {
			cut = i
			break
		}
	}
	gone := db.mu.pend[cut:]
	for _, p := range gone {
		if p.migration || (p.delete && db.mu.sessions[p.s.id] != nil) {
			db.mu.Unlock()
			db.layoutMu.Unlock()
			db.poisonWith(lost)
			return db.poisonErr()
		}
	}
	db.mu.pend = db.mu.pend[:cut:cut]
	touched := map[*session]bool{}
	for _, p := range gone {
		s := p.s
		switch {
		case p.delete:
			s.erased = false
			db.mu.sessions[s.id] = s
		case p.header:
			s.pending = true
			s.size -= int64(p.ref.size)
			touched[s] = true
		default:
			touched[s] = true
		}
	}
	for s := range touched {
		keep := len(s.frames)
		for keep > 0 && s.frames[keep-1].seg == seg && s.frames[keep-1].off >= from {
			keep--
			s.size -= int64(s.frames[keep].size)
		}
		if keep < len(s.frames) {
			s.framed = s.frames[keep].first
		}
		s.frames = s.frames[:keep:keep]
		s.next, s.open, s.openBytes = s.framed, nil, 0
		s.checked = min(s.checked, s.next)
		if s.owner != nil {
			s.owner.lost.Store(&lostErr{fmt.Errorf("%w: %w", ErrWriteLost, lost)})
		}
	}
	db.mu.Unlock()
	db.layoutMu.Unlock()
	db.opts.Logger.Warn("engine: a write failed before it was synced; its events were not stored and the sessions that lost events must be reopened",
		"segment", w.Path(), "offset", from, "sessions", len(touched), "error", lost.Err)
	if err := db.mu.roller.Recover(); err != nil {
		db.poisonWith(err)
		return db.poisonErr()
	}
	return nil
}

// lostErr boxes a handle's loss for an atomic.Pointer.
type lostErr struct{ err error }

func (db *DB) poisonErr() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.mu.poison
}
