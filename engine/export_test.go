package engine

// What package engine_test needs of the engine's internals (Go's
// export_test.go idiom: compiled only into the package's tests).

import (
	"testing"
	"time"

	"github.com/seglog/seglog/event"
)

// NoWaitPolls returns o with the polls that end a Handle.Wait (its timer)
// and a sleep of the watching goroutine without a wake-up turned off, in
// the DB opened with it: a Wait then returns only once a notify's futex
// wake reaches it, or its context ends, which a test gives less than
// NoPollFor. (The watcher still wakes after NoPollFor: with a wake-up
// that never comes, DB.Close, which wakes it the same way, would wait for
// it forever.) For the tests of the wake-up in package engine_test.
func NoWaitPolls(o *Options) *Options {
	o.testing.waitMin, o.testing.waitMax, o.testing.watchPoll = time.Hour, time.Hour, NoPollFor
	return o
}

// SyncWaiters is how many sleepers, of every process, the store's shared
// memory counts on the word a sync's notify wakes.
func SyncWaiters(db *DB) uint32 { return db.shared.Waiters() }

// NoPollFor is how long NoWaitPolls keeps the watcher asleep without a
// wake-up.
const NoPollFor = 20 * time.Second

// ReadAll reads session id of db whole through a read handle (readAll).
func ReadAll(t *testing.T, db *DB, id string) []event.Event { return readAll(t, db, id) }

// SameEvents fails t unless got and want are the same events (sameEvents).
func SameEvents(t *testing.T, label string, got, want []event.Event) {
	t.Helper()
	sameEvents(t, label, got, want)
}
