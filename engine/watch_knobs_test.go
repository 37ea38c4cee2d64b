package engine

import (
	"testing"
	"time"
)

// NoWaitPolls turns off, for the length of the test, the polls that end a
// Handle.Wait (its timer) and a sleep of the watching goroutine without a
// wake-up: a Wait then returns only once a notify's futex wake reaches
// it, or its context ends, which a test gives less than NoPollFor. (The
// watcher still wakes after NoPollFor: with a wake-up that never comes,
// DB.Close, which wakes it the same way, would wait for it forever.) For
// the tests of the wake-up in package engine_test.
func NoWaitPolls(t *testing.T) {
	minWas, maxWas, watchWas := waitMin, waitMax, watchPoll
	waitMin, waitMax, watchPoll = time.Hour, time.Hour, NoPollFor
	t.Cleanup(func() { waitMin, waitMax, watchPoll = minWas, maxWas, watchWas })
}

// SyncWaiters is how many sleepers, of every process, the store's shared
// memory counts on the word a sync's notify wakes.
func SyncWaiters(db *DB) uint32 { return db.shared.shm.Uint32(shmSyncWaiters).Load() }

// NoPollFor is how long NoWaitPolls keeps the watcher asleep without a
// wake-up.
const NoPollFor = 20 * time.Second
