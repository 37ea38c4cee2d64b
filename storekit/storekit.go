package storekit

import (
	"context"
	"errors"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
)

// OpenTurn folds the log h reads (recovery.Fold) from the open turn on:
// from is a backend's hint of where that turn starts, the seq plus one of
// a turn/start or turn/end it stored (recovery.State.TurnFrom of an
// earlier fold, or of the events it appended), 0 if it knows none.
//
// It reads the log backwards from its end, in windows that double
// (tailWindow events, then twice as many, ...), down to the last turn
// boundary, and folds from there: the open turn, whatever the hint (which
// a crash leaves behind the log's end by what was written after the
// index's last checkpoint). The hint only bounds the search: if the
// windows reach seq from-1 without finding a boundary, the event there
// must be one; if it is not (a hint that outlived its events, a damaged
// index), the log is folded from seq 0. Either way the state is the one a
// fold of the whole log gives (recovery.FoldFrom); its TurnFrom is the
// hint to keep.
func OpenTurn(ctx context.Context, h store.Handle, from uint64) (recovery.State, error) {
	fold := func(evs []event.Event, from bool) (recovery.State, error) {
		var st recovery.State
		var err error
		if from {
			st, err = recovery.FoldFrom(evs)
		} else {
			st, err = recovery.Fold(evs)
		}
		if err != nil {
			return recovery.State{}, &store.SessionError{ID: h.ID(), Op: "fold", Err: err}
		}
		return st, nil
	}
	end := h.Len()
	if h.Access() != store.Write {
		// (A read handle's Len is what its last read saw: any read makes
		// it the log's.)
		if _, err := h.Read(ctx, 0, 1); err != nil {
			return recovery.State{}, err
		}
		end = h.Len()
	}
	floor := uint64(0) // the search stops here: the hint's boundary, or seq 0
	if from > 0 && from <= end {
		floor = from - 1
	}
	var tail []event.Event // the events from lo on, read so far
	lo := end
	for w := uint64(tailWindow); lo > floor; w *= 2 {
		start := max(floor, lo-min(w, lo))
		evs, err := h.Read(ctx, int(start), int(lo-start))
		if err != nil {
			return recovery.State{}, err
		}
		if uint64(len(evs)) != lo-start || len(evs) > 0 && evs[0].Seq != start {
			break // (a log that changed under the read: fold it whole below)
		}
		tail = append(evs, tail...)
		lo = start
		for i := len(evs) - 1; i >= 0; i-- {
			if recovery.IsTurnBoundary(evs[i].Type) {
				return fold(tail[i:], true)
			}
		}
	}
	if lo == 0 && uint64(len(tail)) == end {
		return fold(tail, false) // (no boundary: the whole log is in hand)
	}
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		return recovery.State{}, err
	}
	return fold(evs, false)
}

// tailWindow is the first window of events OpenTurn reads back from a
// log's end: a turn of an agent host is a few dozen events.
const tailWindow = 64

// TurnStateOf is the store.TurnState of a fold's state.
func TurnStateOf(st recovery.State) store.TurnState {
	ts := store.TurnState{
		Len: uint64(st.Len), Open: !st.Balanced(), Turn: st.LastTurn,
		NextTurn: store.NextTurnAfter(st.LastTurn),
	}
	if st.Phase == recovery.InStep {
		ts.Step = st.Step
	}
	if st.Phase != recovery.Idle && len(st.Pending) > 0 {
		ts.Pending = make([]store.PendingCall, len(st.Pending))
		for i, c := range st.Pending {
			p := store.PendingCall{CallID: c.CallID, Name: c.Name, Step: c.Step}
			if c.CallSeq != nil {
				p.Started, p.CallSeq = true, *c.CallSeq
			}
			ts.Pending[i] = p
		}
	}
	return ts
}

// HandleTurnState is Handle.TurnState through a handle of any backend,
// from its hint of where the open turn starts (OpenTurn), with the fold's
// state (whose TurnFrom the backend keeps as its next hint).
func HandleTurnState(ctx context.Context, h store.Handle, from uint64) (store.TurnState, recovery.State, error) {
	st, err := OpenTurn(ctx, h, from)
	if err != nil {
		return store.TurnState{}, st, err
	}
	return TurnStateOf(st), st, nil
}

// AppendClosers folds the open turn (OpenTurn, from the backend's hint
// from) and appends the closers of recovery.Closers as one batch, without
// a flush (Turns.Resume flushes; ResumeMany shares one flush among many
// sessions), and returns them (nil if the log was balanced) and the
// fold's state before them. The caller closes the handle if it fails.
func AppendClosers(ctx context.Context, h store.Handle, from uint64) ([]event.Event, recovery.State, error) {
	st, err := OpenTurn(ctx, h, from)
	if err != nil {
		return nil, st, err
	}
	closers := recovery.Closers(st)
	if len(closers) == 0 {
		return nil, st, nil
	}
	if err := h.Append(ctx, closers...); err != nil {
		return nil, st, err
	}
	return closers, st, nil
}

// InspectHandle is a store's Inspect through an open handle of any
// backend: the events of the window opts asks for (the whole log by
// default), and the closers Resume would append and the turn state, from
// the open turn (OpenTurn, from the backend's hint from), with the fold's
// state.
func InspectHandle(ctx context.Context, h store.Handle, from uint64, opts ...store.InspectOption) (store.Inspection, recovery.State, error) {
	o := store.InspectOptionsOf(opts)
	var evs []event.Event
	if o.Limit != 0 {
		var err error
		if evs, err = h.Read(ctx, o.Offset, o.Limit); err != nil {
			return store.Inspection{}, recovery.State{}, err
		}
	}
	var st recovery.State
	var err error
	if o.Offset == 0 && o.Limit < 0 {
		// (The whole log is in hand: fold it, reading nothing more.)
		if st, err = recovery.Fold(evs); err != nil {
			return store.Inspection{}, st, &store.SessionError{ID: h.ID(), Op: "inspect", Err: err}
		}
	} else if st, err = OpenTurn(ctx, h, from); err != nil {
		return store.Inspection{}, st, err
	}
	return store.Inspection{Header: h.Header(), Events: evs, Closers: recovery.Closers(st), Turn: TurnStateOf(st)}, st, nil
}

// ResumeMany resumes sessions ids as Resume does, sharing one flush: each
// is opened for write by resume (a backend's Resume without its flush:
// the write open, then AppendClosers), and once all are, flush (the
// backend's Flush of every write handle) makes their closers durable
// together, one sync for all where the backend groups them. A session
// that cannot be resumed (ErrAlreadyOwned, ErrSessionNotFound, ...) has
// its error in its Resumed, and the others go on. If the flush fails,
// every handle opened is closed and ResumeMany returns the flush's error
// and no handle.
func ResumeMany[H store.Handle](ctx context.Context, ids []string, resume func(ctx context.Context, id string) (H, []event.Event, error), flush func(ctx context.Context) error) ([]store.Resumed[H], error) {
	out := make([]store.Resumed[H], len(ids))
	opened := false
	for i, id := range ids {
		out[i].ID = id
		out[i].Handle, out[i].Closers, out[i].Err = resume(ctx, id)
		opened = opened || out[i].Err == nil
	}
	if !opened {
		return out, nil
	}
	if err := flush(ctx); err != nil {
		for i := range out {
			if out[i].Err == nil {
				_ = out[i].Handle.Close() // (the flush's error is the one to report)
			}
		}
		return nil, err
	}
	return out, nil
}

// SurfaceRulesChecker is the store.FrontConfig.Surface of a backend whose
// SurfaceRules option is on (nil when off): it makes a SurfaceChecker that
// knows catalog c's types (recovery.NewSurfaceChecker).
func SurfaceRulesChecker(on bool, c *event.Catalog) func() store.SurfaceChecker {
	if !on {
		return nil
	}
	return func() store.SurfaceChecker { return recovery.NewSurfaceChecker(c) }
}

// Turns is a backend's Resume, ResumeMany, Inspect and Handle.TurnState,
// written once for every backend: each reads the open turn from the
// backend's hint (OpenTurn), and keeps the fold's next hint. A backend
// gives what differs:
//   - Open: its Open (a write open for a resume, a read open to inspect);
//   - Hint: its hint of where the open turn of a handle's session starts;
//   - Note: it keeps the fold's TurnFrom as the next hint (used is the
//     hint the fold began from);
//   - Holder: the live writer holding a session's lease, nil if none
//     (Inspection.Holder);
//   - Flush: its Flush of every write handle (one sync for a ResumeMany).
type Turns[H store.Handle] struct {
	Open   func(ctx context.Context, id string, access store.Access) (H, error)
	Hint   func(h H) uint64
	Note   func(h H, used uint64, st recovery.State)
	Holder func(ctx context.Context, id string) *store.OwnedError
	Flush  func(ctx context.Context) error
}

// Resume opens session id for write, appends the closers of a turn a
// crash left open and flushes, and returns the handle with the closers
// (none if the log was balanced); see store.Store.Resume. It fails as
// Open(id, store.Write) does, writing nothing.
func (t Turns[H]) Resume(ctx context.Context, id string) (H, []event.Event, error) {
	h, closers, err := t.resumeOne(ctx, id)
	if err != nil || len(closers) == 0 {
		return h, closers, err
	}
	if err := h.Flush(ctx); err != nil {
		var none H
		return none, nil, errors.Join(err, h.Close())
	}
	return h, closers, nil
}

// ResumeMany resumes each of ids as Resume does, with one Flush for all
// (ResumeMany above); see store.Store.ResumeMany.
func (t Turns[H]) ResumeMany(ctx context.Context, ids []string) ([]store.Resumed[H], error) {
	return ResumeMany(ctx, ids, t.resumeOne, t.Flush)
}

// resumeOne is Resume without its flush: the write open, and the closers
// appended.
func (t Turns[H]) resumeOne(ctx context.Context, id string) (H, []event.Event, error) {
	var none H
	h, err := t.Open(ctx, id, store.Write)
	if err != nil {
		return none, nil, err
	}
	used := t.Hint(h)
	closers, st, err := AppendClosers(ctx, h, used)
	if err != nil {
		return none, nil, errors.Join(err, h.Close())
	}
	t.Note(h, used, st)
	return h, closers, nil
}

// TurnState is Handle.TurnState: the turn state of the log as h sees it
// (a write handle's own enqueued events count), from the open turn.
func (t Turns[H]) TurnState(ctx context.Context, h H) (store.TurnState, error) {
	used := t.Hint(h)
	ts, st, err := HandleTurnState(ctx, h, used)
	if err != nil {
		return store.TurnState{}, err
	}
	t.Note(h, used, st)
	return ts, nil
}

// Inspect is a store's Inspect: a read open of session id, its events
// (the window opts asks for, the whole log by default), its turn state
// and the closers a resume would append (InspectHandle), and the live
// writer holding it when Inspect looked; see store.Store.Inspect.
func (t Turns[H]) Inspect(ctx context.Context, id string, opts ...store.InspectOption) (store.Inspection, error) {
	h, err := t.Open(ctx, id, store.Read)
	if err != nil {
		return store.Inspection{}, err
	}
	defer h.Close()
	used := t.Hint(h)
	in, st, err := InspectHandle(ctx, h, used, opts...)
	if err != nil {
		return store.Inspection{}, err
	}
	t.Note(h, used, st)
	in.Holder = t.Holder(ctx, id)
	return in, nil
}
