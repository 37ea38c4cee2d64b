package store

import (
	"context"
	"iter"

	"github.com/seglog/seglog/event"
)

// Store is what every backend of the contract offers: sessions created,
// opened, described, listed, deleted and resumed after a crash, and a
// flush barrier over every write handle. *engine.DB and *jetstream.Store implement it through Wrap (their
// methods return their own handle types).
type Store interface {
	Create(ctx context.Context, h Header, opts ...CreateOption) (Handle, error)
	Open(ctx context.Context, id string, access Access) (Handle, error)
	Stat(ctx context.Context, id string) (Snapshot, error)
	List(ctx context.Context) ([]Snapshot, error)
	// ListPage is List filtered, ordered and paged (ListOptions): the
	// page, in the order asked for (by ID unless OrderUpdated), and the
	// cursor of the next one ("" after the last).
	ListPage(ctx context.Context, opts ListOptions) ([]Snapshot, string, error)
	// Inspect returns a session's log and the closers a resume would
	// append to it, without taking the write lease and writing nothing:
	// the balanced view an observer shows, even of a session another
	// handle (or process) writes: Inspection.Holder then names that
	// writer, whose turn is in progress, not interrupted. The closers
	// and the turn state cost the open turn, not the log; the events are
	// the whole log unless InspectEvents says otherwise.
	Inspect(ctx context.Context, id string, opts ...InspectOption) (Inspection, error)
	// Fork creates session h.ID as a fork of session parent at n events:
	// its first n events are the parent's, seq n is the inherited end-seed
	// marker (ForkMarker), and it is seeded with InheritedEventCount n
	// (the header as PrepareForkHeader makes it). The fork is durable when
	// Fork returns the write handle of it. A backend shares the parent's
	// stored events where it can (see each backend), else copies them
	// (CopyFork); reads cannot tell the two apart. MarkerTime sets the
	// marker's time (default: now).
	Fork(ctx context.Context, parent string, n uint64, h Header, opts ...ForkOption) (Handle, error)
	// Delete removes session id for every instance of the store (every
	// process, every host) and durably when it returns: Stat and Open
	// fail with ErrSessionNotFound, List leaves it out, and a read or a
	// Wait through a handle opened before fails with ErrSessionNotFound.
	// It takes the session's write lease for the time of the delete, so
	// it fails with ErrAlreadyOwned while a write handle (or a creator),
	// here or elsewhere, holds it; read handles do not hold it back. It
	// fails with ErrSessionNotFound if the session does not exist. The id
	// may be created again: a new incarnation, whose revisions never
	// repeat the old one's and in which no old event reappears. With
	// IfRevision(rev), it deletes the session only if its revision is
	// still rev once the lease is held (else ErrRevisionMismatch, and
	// the session stays): no event written since rev is lost.
	Delete(ctx context.Context, id string, opts ...DeleteOption) error
	// Resume opens session id for write and closes a turn that a crash
	// left open: it appends the closers of recovery.
	// InterruptedTurnClosers of the stored log as one batch, flushes, and
	// returns the write handle with the closers it wrote (none if the log
	// was balanced). It fails as Open(id, Write) does (ErrAlreadyOwned
	// while another handle or host writes the session), writing nothing.
	Resume(ctx context.Context, id string) (Handle, []event.Event, error)
	// ResumeMany is Resume of each of ids, sharing one flush (a host's
	// start-up: every session it had open, resumed in one sync instead of
	// one each): one Resumed per ID, in order, with the error of a
	// session that could not be resumed (the others go on). The error
	// returned is the flush's, which leaves no handle open.
	ResumeMany(ctx context.Context, ids []string) ([]Resumed[Handle], error)
	// Changes iterates over the store's change feed from cursor from on
	// ("" is the start): every create, durable append, fork and delete,
	// of any process or host, in the order it became durable, each with
	// the cursor past it. Only durable events show, and only what a read
	// would show (a fork or migration takes effect whole or not at all;
	// compaction, index rebuilds and migrations are not changes). It
	// ends once caught up, or with Follow waits for more until ctx ends.
	// A cursor it cannot resume from is a *CursorError
	// (ErrCursorExpired, ErrInvalidCursor).
	Changes(ctx context.Context, from Cursor, opts ...ChangesOption) iter.Seq2[Change, error]
	Flush(ctx context.Context) error
	Close() error
}

// Inspection is a session as Inspect sees it: its log as stored (every
// event a read returns) and, if its last turn is open (a crash, or a turn
// in progress elsewhere), the events that would close it
// (recovery.InterruptedTurnClosers), which are written nowhere.
//
// Holder names the live writer that holds the session's write lease when
// Inspect looked (as a refused Open(Write) would name it: PID, Host,
// Since where the backend records them), nil if none did. A session a
// live writer holds is not interrupted: its open turn is in progress, and
// Closers are only what a resume would append if that writer died. (The
// lease may change hands at any moment: Holder is what Inspect saw.)
type Inspection struct {
	Header Header
	// Events are the stored events of the window InspectEvents asked for
	// (by default the whole log).
	Events  []event.Event
	Closers []event.Event // nil: balanced
	// Turn is the turn state of the log as stored (TurnState): Turn.Open
	// is true exactly when Closers is not nil.
	Turn   TurnState
	Holder *OwnedError `json:",omitempty"`
}

// Handle is one open channel onto a session: a read handle, or the single
// write handle.
type Handle interface {
	ID() string
	Header() Header
	InheritedEventCount() uint64
	Access() Access
	// Len is the session's length as the handle knows it: on a write
	// handle the seq the next Append or Enqueue must carry (enqueued
	// events count), on a read handle the length its last read saw.
	Len() uint64
	Read(ctx context.Context, offset, limit int) ([]event.Event, error)
	// Events iterates over the log from seq from on, a chunk of events at
	// a time (see Iterate): for logs too long to load whole.
	Events(ctx context.Context, from int) iter.Seq2[event.Event, error]
	Append(ctx context.Context, evs ...event.Event) error
	Enqueue(evs ...event.Event) error
	Flush(ctx context.Context) error
	// Wait waits until the session holds more than n events that a Read
	// through this handle would return, and returns how many it holds:
	// events written elsewhere count once they are durable (flushed),
	// events appended through the same store instance at once. It fails
	// with ErrSessionNotFound once the session is deleted, ErrHandleClosed,
	// ErrClosed, or the context's error.
	Wait(ctx context.Context, n uint64) (uint64, error)
	// TurnState is the turn state of the log as the handle sees it (a
	// write handle's own enqueued events count, as in Read): the next
	// turn's number, the open step, the pending tool calls. It reads the
	// open turn, not the log.
	TurnState(ctx context.Context) (TurnState, error)
	Close() error
}

// Backend is a Store whose Create and Open return its own handle type H.
type Backend[H Handle] interface {
	Create(ctx context.Context, h Header, opts ...CreateOption) (H, error)
	Open(ctx context.Context, id string, access Access) (H, error)
	Stat(ctx context.Context, id string) (Snapshot, error)
	List(ctx context.Context) ([]Snapshot, error)
	ListPage(ctx context.Context, opts ListOptions) ([]Snapshot, string, error)
	Inspect(ctx context.Context, id string, opts ...InspectOption) (Inspection, error)
	Fork(ctx context.Context, parent string, n uint64, h Header, opts ...ForkOption) (H, error)
	Delete(ctx context.Context, id string, opts ...DeleteOption) error
	Resume(ctx context.Context, id string) (H, []event.Event, error)
	ResumeMany(ctx context.Context, ids []string) ([]Resumed[H], error)
	Changes(ctx context.Context, from Cursor, opts ...ChangesOption) iter.Seq2[Change, error]
	Flush(ctx context.Context) error
	Close() error
}

// Wrap makes a Store of b (Go has no covariant results: a method returning
// *engine.Handle does not satisfy one returning Handle). A failed Create
// or Open gives a nil Handle, never a typed nil.
func Wrap[H Handle](b Backend[H]) Store { return wrapped[H]{b} }

// Unwrap returns the backend a Store made by Wrap holds, and whether it is
// a B.
func Unwrap[B any](s Store) (B, bool) {
	type unwrapper interface{ backend() any }
	var zero B
	u, ok := s.(unwrapper)
	if !ok {
		return zero, false
	}
	b, ok := u.backend().(B)
	return b, ok
}

type wrapped[H Handle] struct{ b Backend[H] }

func (w wrapped[H]) backend() any { return w.b }

func (w wrapped[H]) Create(ctx context.Context, h Header, opts ...CreateOption) (Handle, error) {
	s, err := w.b.Create(ctx, h, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (w wrapped[H]) Fork(ctx context.Context, parent string, n uint64, h Header, opts ...ForkOption) (Handle, error) {
	s, err := w.b.Fork(ctx, parent, n, h, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (w wrapped[H]) Open(ctx context.Context, id string, access Access) (Handle, error) {
	s, err := w.b.Open(ctx, id, access)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (w wrapped[H]) Resume(ctx context.Context, id string) (Handle, []event.Event, error) {
	s, closers, err := w.b.Resume(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return s, closers, nil
}

func (w wrapped[H]) ResumeMany(ctx context.Context, ids []string) ([]Resumed[Handle], error) {
	rs, err := w.b.ResumeMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]Resumed[Handle], len(rs))
	for i, r := range rs {
		out[i] = Resumed[Handle]{ID: r.ID, Closers: r.Closers, Err: r.Err}
		if r.Err == nil {
			out[i].Handle = r.Handle
		}
	}
	return out, nil
}

func (w wrapped[H]) Delete(ctx context.Context, id string, opts ...DeleteOption) error {
	return w.b.Delete(ctx, id, opts...)
}

func (w wrapped[H]) Stat(ctx context.Context, id string) (Snapshot, error) { return w.b.Stat(ctx, id) }
func (w wrapped[H]) List(ctx context.Context) ([]Snapshot, error)          { return w.b.List(ctx) }
func (w wrapped[H]) ListPage(ctx context.Context, opts ListOptions) ([]Snapshot, string, error) {
	return w.b.ListPage(ctx, opts)
}
func (w wrapped[H]) Inspect(ctx context.Context, id string, opts ...InspectOption) (Inspection, error) {
	return w.b.Inspect(ctx, id, opts...)
}
func (w wrapped[H]) Changes(ctx context.Context, from Cursor, opts ...ChangesOption) iter.Seq2[Change, error] {
	return w.b.Changes(ctx, from, opts...)
}
func (w wrapped[H]) Flush(ctx context.Context) error { return w.b.Flush(ctx) }
func (w wrapped[H]) Close() error                    { return w.b.Close() }
