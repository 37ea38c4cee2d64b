package engine

import (
	"time"

	"github.com/seglog/seglog/engine/internal/dict"
)

// testingKnobs are one DB's test hooks and the tuning its tests override
// (as pebble's testing knobs). Only package engine's tests set them: in
// Options.testing before Open (Open copies them into DB.knobs; a hook
// that runs during the open must be set there), or in DB.knobs of an open
// DB before the operation they watch. They are per DB, not package
// variables, so tests that set them can run in parallel and two DBs in
// one test can have different hooks. The zero value is production: no
// hook runs, every override takes its default.
type testingKnobs struct {
	// listed runs in an open's replay once it has listed the segments.
	listed func()
	// joinSettle runs in a joining writer's open each time it finds a
	// layout change that a dead compaction left, before it tries to
	// settle it.
	joinSettle func()
	// createLeased runs in Create once it holds the new session's lease,
	// before it catches up.
	createLeased func()
	// appended runs in appendFrames after the frames are placed and
	// registered.
	appended func()
	// deleted runs in Delete after the tombstone is appended and before
	// it is synced.
	deleted func()
	// cut runs in a handle's synchronous cut (a flush's, a full Append's
	// without the write-out behind, DB.Close's), with the handle's store.Front
	// locked, before anything is encoded.
	cut func(*Handle)
	// forkPlacing runs in a fork by shared frames after it looked at the
	// parent's frames and before it places its own.
	forkPlacing func()
	// migrated runs in Migrate after the migration's frames are appended
	// and before they are synced.
	migrated func()
	// follow runs in a catch-up before it reads frames.
	follow func()
	// closeWaits runs in DB.Close once the gate is shut, before it waits
	// for the operations in it.
	closeWaits func()
	// compactLocked runs once a compaction holds its locks, before it
	// settles or relayouts.
	compactLocked func()
	// rewrite runs after a rewritten segment is in place and before the
	// index learns the new offsets; an error it returns ends the
	// compaction there, as a crash would.
	rewrite func(seg uint64) error
	// checkOpened runs in each try of Check once its read-only open is
	// done, before it reads anything else.
	checkOpened func()
	// trimPlanned runs in a close that may trim the active segment's
	// room (trim.go) once it holds LockInit, before it looks for other
	// writers and reads the tail; trimmed runs after it cut segment seg's file, before
	// the sync.
	trimPlanned func()
	trimmed     func(seg uint64)
	// bump runs in a bump of the layout counter between the counter's
	// move and the follower's. Open gives it to the DB's shared (its
	// bumpHook), which is where a test sets it on an open DB.
	bump func()

	// waitMin and waitMax, if set, bound Handle.Wait's polling interval
	// (default waitMin, waitMax); watchPoll, if set, bounds one sleep of
	// the watching goroutine (default watchPoll). A test makes them long
	// so that only a wake-up ends a Wait.
	waitMin, waitMax, watchPoll time.Duration
	// dict, if set, replaces the dictionary's tuning (dict.DefaultTuning).
	dict *dict.Tuning
}
