package jetstream

import (
	"context"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
)

// Resume, Inspect and TurnState fold the open turn, not the log, from a
// hint of where it starts (session.turnFrom: a turn/start or turn/end of
// the stream, which storekit.OpenTurn checks before it trusts it), as the
// engine does. This instance keeps the hint in memory only: it moves with
// the batches its handles publish and with what its folds find, and a
// fold of a session this instance knows nothing of reads the stream of
// the session whole, once.

// turnHint is where a fold of s's open turn starts.
func (st *Store) turnHint(s *session) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return s.turnFrom
}

// noteTurn records what a fold from hint used found (see engine's
// noteTurn): a later boundary of the published events, or the one that
// replaces a hint the log did not confirm.
func (st *Store) noteTurn(s *session, used uint64, fold recovery.State) {
	found := fold.TurnFrom
	if found == used {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if found > s.framed || (found < used && s.turnFrom != used) {
		return
	}
	if found > s.turnFrom || s.turnFrom == used {
		s.turnFrom = found
	}
}

// Resume opens session id for write and appends the closers of a turn a
// crash left open (storekit.Turns: recovery.Closers of the open
// turn, the same as the local engine's); see store.Store.Resume. It fails
// as Open(id, store.Write) does, writing nothing.
func (st *Store) Resume(ctx context.Context, id string) (*Handle, []event.Event, error) {
	return st.turns().Resume(ctx, id)
}

// ResumeMany resumes each of ids as Resume does, with one Flush for all;
// see store.Store.ResumeMany.
func (st *Store) ResumeMany(ctx context.Context, ids []string) ([]store.Resumed[*Handle], error) {
	return st.turns().ResumeMany(ctx, ids)
}

// TurnState is the turn state of the log as the handle sees it (its own
// enqueued events count): store.TurnState, from the open turn.
func (h *Handle) TurnState(ctx context.Context) (store.TurnState, error) {
	return h.st.turns().TurnState(ctx, h)
}

// Inspect returns a session's events (the window InspectEvents asks for,
// by default the whole log), its turn state and the closers a resume
// would append, without the write lease and writing nothing; see
// engine.DB.Inspect. Holder names the live writer that held the session
// when Inspect looked (its Host: the ownership record names nothing
// else), nil if none did.
func (st *Store) Inspect(ctx context.Context, id string, opts ...store.InspectOption) (store.Inspection, error) {
	return st.turns().Inspect(ctx, id, opts...)
}

// turns is the store's rules of Resume, ResumeMany, Inspect and
// TurnState (storekit.Turns, shared with the local engine) over this
// Store: its open, its turn hint, its lease holders, its Flush.
func (st *Store) turns() storekit.Turns[*Handle] {
	return storekit.Turns[*Handle]{
		Open:   st.Open,
		Hint:   func(h *Handle) uint64 { return st.turnHint(h.s) },
		Note:   func(h *Handle, used uint64, fold recovery.State) { st.noteTurn(h.s, used, fold) },
		Holder: st.liveHolder,
		Flush:  st.Flush,
	}
}
