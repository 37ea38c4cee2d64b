// Package enginetest is the contract suite of seglog's session store, in
// the manner of testing/fstest: Run checks any implementation of Store
// against every contract case of the reference harness (its persistence
// contract cases, C and L) that applies to this API.
//
// The local engine runs it in engine's tests; another backend (a
// replicated one) runs the same suite by providing a Backend.
//
// It also holds the end-of-test store check of the tests outside package
// engine (storecheck.go: OpenStore, CheckedDir, KeepBroken, ExpectProblem,
// CheckStore), whose only I/O is through engine (Check, a read-only open).
//
// enginetest imports engine, event and handle; it is test support.
package enginetest

import (
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/store"
)

// Store is the contract's store interface (store.Store).
type Store = store.Store

// Session is the contract's handle interface (store.Handle).
type Session = store.Handle

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

// Recataloger is a Backend whose event catalog a case can change: the
// stores it opens after SetCatalog (Open, Restart) read and write with c.
// The fail-closed cases need it (a store holding a type the reader's
// catalog does not know can only come from a host that knew it).
type Recataloger interface {
	SetCatalog(c *event.Catalog)
}

// SurfaceRuler is a Backend whose stores can check the v3 surface rules
// on appends (engine.Options.SurfaceRules): the stores it opens after
// SetSurfaceRules (Open, Restart) check them if on.
type SurfaceRuler interface {
	SetSurfaceRules(on bool)
}

// Local adapts an *engine.DB to Store.
func Local(db *engine.DB) Store { return store.Wrap[*engine.Handle](db) }

// DB returns the *engine.DB behind a Store made by Local, or nil.
func DB(s Store) *engine.DB {
	db, _ := store.Unwrap[*engine.DB](s)
	return db
}

// Clock is the fake clock the suite drives write-behind windows with:
// timers fire only when a case calls Advance. Pass its AfterFunc in the
// backend's options.
type Clock = testclock.Clock
