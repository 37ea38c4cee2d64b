// Package enginetest is the contract suite of seglog's session store, in
// the manner of testing/fstest: Run checks any implementation of Store
// against every contract case of the reference harness (REFERENCE.md,
// "Contract cases" C and L) that applies to this API.
//
// The local engine runs it in engine's tests; another backend (a
// replicated one) runs the same suite by providing a Backend.
//
// enginetest imports engine, event and handle; it is test support and does
// no I/O of its own.
package enginetest

import (
	"context"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testclock"
)

// Store is the service interface of a session store.
type Store interface {
	Create(ctx context.Context, h engine.Header, opts ...engine.CreateOption) (Session, error)
	Open(ctx context.Context, id string, access engine.Access) (Session, error)
	Stat(ctx context.Context, id string) (engine.Snapshot, error)
	List(ctx context.Context) ([]engine.Snapshot, error)
	Flush(ctx context.Context) error
	Close() error
}

// Session is the handle interface.
type Session interface {
	ID() string
	Header() engine.Header
	InheritedEventCount() uint64
	Access() engine.Access
	Read(ctx context.Context, offset, limit int) ([]event.Event, error)
	Append(ctx context.Context, evs ...event.Event) error
	Enqueue(evs ...event.Event) error
	Flush(ctx context.Context) error
	Close() error
}

// Backend gives the suite fresh instances over one storage.
type Backend interface {
	// Open opens the first instance.
	Open() (Store, error)
	// Restart abandons s as a power cut would (what was not flushed may be
	// lost; nothing is closed cleanly) and opens a fresh instance over
	// what the storage kept. With torn, the cut also leaves a torn write
	// after the durable data (the tail corruptor).
	Restart(s Store, torn bool) (Store, error)
}

// Local adapts an *engine.DB to Store.
func Local(db *engine.DB) Store { return localStore{db} }

type localStore struct{ db *engine.DB }

func (l localStore) Create(ctx context.Context, h engine.Header, opts ...engine.CreateOption) (Session, error) {
	s, err := l.db.Create(ctx, h, opts...)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (l localStore) Open(ctx context.Context, id string, access engine.Access) (Session, error) {
	s, err := l.db.Open(ctx, id, access)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (l localStore) Stat(ctx context.Context, id string) (engine.Snapshot, error) {
	return l.db.Stat(ctx, id)
}
func (l localStore) List(ctx context.Context) ([]engine.Snapshot, error) { return l.db.List(ctx) }
func (l localStore) Flush(ctx context.Context) error                     { return l.db.Flush(ctx) }
func (l localStore) Close() error                                        { return l.db.Close() }

// DB returns the *engine.DB behind a Store made by Local, or nil.
func DB(s Store) *engine.DB {
	if l, ok := s.(localStore); ok {
		return l.db
	}
	return nil
}

// Clock is the fake clock the suite drives write-behind windows with:
// timers fire only when a case calls Advance. Pass its AfterFunc in the
// backend's options.
type Clock = testclock.Clock
