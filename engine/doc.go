// Package engine is seglog's local backend of the store contract (package
// store): Open a directory, which any number of processes may share,
// create or open sessions through handles, append events, and flush them
// durably.
//
//	db, err := engine.Open(dir, nil) // nil options = defaults
//	h, err := db.Create(ctx, store.Header{ID: "s-1", CreatedAt: nowMs})
//	err = h.Append(ctx, evs...)      // visible at once; durable within the write-behind window plus one fdatasync
//	err = h.Flush(ctx)               // the durability barrier
//	evs, err := h.Read(ctx, 0, -1)   // the caller's copies
//	err = h.Close()
//	err = db.Close()
//
// # Model
//
// Events of all sessions go into shared segment files (package segment);
// a bbolt index (package index) maps each session to its frames and is
// checkpointed in the background, never on the flush path. Each session
// has at most one write handle at a time (a lease: Open(id, Write) fails
// with ErrAlreadyOwned while another is live, and a handle whose lease was
// revoked can never write again); read handles are unlimited. Appended
// events are visible to every read started afterwards, and durable within
// the write-behind window (Options.WriteBehindWindow, 200 ms, plus one
// fdatasync; Options.FlushOnly turns that off); Flush (per handle, or
// DB.Flush for all) is the barrier that waits for it, and flushes of many
// sessions at once share one fdatasync. Enqueue
// is the non-blocking write-behind path: a fixed 200 ms window batches
// events in the background. An fsync error poisons the store; a write that
// fails before its fsync (a full disk) placed nothing: the flush fails and
// its events stay with the handle for the next one.
//
// Several processes may have one store open, writing and reading
// (docs/MULTIPROCESS.md, Many processes): they append to one shared log, a
// session's lease holds across processes (and dies with its process), and
// every process sees what any other flushed. The files they coordinate
// through (LOCK, locks, shm) removed, replaced or cut under them corrupt
// nothing: a newcomer is refused and a process whose shm was cut is
// poisoned, both with ErrCoordinationLost (docs/MULTIPROCESS.md, "When the
// coordination files are removed or cut").
// Delete writes a tombstone; Compact (and a background compactor) removes
// sealed segments with nothing alive and rewrites mostly dead ones under
// the same ID, crash-safe at every step. docs/FORMAT.md has the format and
// docs/DURABILITY.md the durability argument.
//
// # Metrics
//
// DB.Metrics returns a snapshot (Metrics, a plain value) of the DB's
// counters and gauges: appends, flushes and their latency histogram,
// fsyncs, frames by codec, the write-behind queue, the index lag,
// compactions, open handles, the poison. They are always on: atomics
// added to where the work happens (metrics.go; docs/DESIGN.md, Metrics).
// The Prometheus collector is in its own module, metrics/prometheus.
//
// # Errors
//
// Every error is typed or wraps a sentinel of package store: test with
// errors.Is and errors.As. Corruption is a *store.CorruptionError with its
// file and offset; a newer format is a *store.FormatError.
//
// # Layering and concurrency
//
// engine composes segment, index, handle and vfs; it must not
// import bench, fuzz or cmd (docs/DESIGN.md#layering). The goroutines it
// starts, each with what stops it:
//
//	indexLoop         the index checkpointer (indexer.go): Close closes db.stop; waited for (db.wg)
//	prepareLoop       the segment preparer: creates and grows segments ahead (write.go): db.stop, db.wg
//	dictLoop          the dictionary trainer, in a writing DB (dict.go; package engine/internal/dict): db.stop, db.wg
//	compactLoop       the background compactor, with CompactInterval > 0 (compact.go): Close cancels db.stopCtx (a run in progress too), db.wg
//	the updated sort  one sort of the most-recently-updated listing at a time (listupdated.go): ends by itself, db.wg
//	sessionLoader.run an open's decoder of the index's session records (loadsessions.go): ends when the open's load finishes
//	the futex watch   wakes Waits when another process syncs (package engine/internal/coord, Shared.Changed): runs while a Wait waits; Close (coord.Shared.Close) stops it before the shared memory is unmapped
//	a write-out       an Append's frames written behind its caller, one per handle (write.go): inside the DB's gate (Close waits for it); the handle's next cut waits for it
//	write-behind      a handle's window timer (package handle, Options.AfterFunc): the handle's Close or DB.Close stops it
//
// (segment.Encoder.EventsFrames compresses a large batch on up to
// GOMAXPROCS goroutines and waits for them before it returns.) A DB and
// its Handles are safe for concurrent use, Close
// included: every public operation that touches the files, the index or
// the shared memory enters the DB's gate (gate.go), which Close shuts at
// its start and waits to empty before it flushes the handles and closes
// anything; an operation that begins afterwards fails with ErrClosed.
// Entering never blocks (an operation inside the gate may call another).
//
// Lock order, outermost first (a goroutine that holds one of these takes
// only those below it; internal/lint's TestEngineLockOrder checks this list
// against the code):
//
//	store.Front.mu         a handle's lock: one write through a handle at a time
//	DB.compaction          one compaction at a time
//	DB.checkpoints         one index checkpoint or relocation at a time
//	wal.Log.growth         one growth of the active segment
//	DB.appendMu            this process's placements (coord.LockAppend across processes)
//	wal.Log.queue          the placement queue (package engine/internal/wal)
//	wal.Log.syncer         one sync at a time, and its waiters
//	wal.Log.created        one creation of a segment
//	wal.Log.files          the open segment files
//	follower.mu            one catch-up on the other processes' frames
//	DB.layoutMu            where frames are (reads shared, compaction exclusive)
//	indexFile.mu           one use of the index file
//	DB.mu                  the fields of DB.mu: sessions, handles, poison
//	DB.pins                forks' pins on their parents' frames
//	coord.Shared.bumpMu    one raise of the layout counter (package engine/internal/coord)
//	coord.Shared.mu        the leases' bytes against Close
//	coord.durableWatch.mu  the durable position's watchers
//	dict.Trainer.training  the dictionary's training state (package engine/internal/dict)
//	dict.Trainer.budget    its CPU budget
//	holders.mu             the lease holder file's slots (holders.go)
//
// A placement registers its frames under DB.mu before it moves the shared
// tail; a checkpoint reads its position under it, so that no placement is
// half registered. A read takes no handle lock. Across processes,
// package coord's byte locks: LockWriters (shared by writing processes for
// as long as they are open, exclusive during a compaction) before LockInit
// (held by an open until it is done), then LockAppend (a placement),
// LockPrepare (creating a segment), and the leases (lease.go), each taken
// without waiting; LockIndex is held by the checkpointing process until it
// closes. internal/lint's TestLockReentry
// and TestLockOrder check the mutexes statically: no function takes one it
// may hold already (a function whose doc says "Called with db.mu held" is
// walked holding it), and no two are taken in both orders; a call the
// check cannot tell apart by instance (another DB's, a new handle's) carries
// a //lint:lockok comment saying why (internal/lint/doc.go).
//
// # Files
//
// db.go: the DB, Open, Close and the session API (Create, Open, Stat,
// List, Delete); session.go: a session's in-memory state; replay.go: the
// one replay fold of frames into sessions (Open's recovery, compaction's
// planning, Usage); write.go: the write path (the handle's store.Writer,
// encode, frame, sync, poison, Flush); read.go: the read path (snapshot,
// frame decoding, readers); handle.go: the handle (over store.Front) and
// its lease; recover.go: Open's recovery, shared with Check (check.go;
// its scan of every frame is package engine/internal/framecheck);
// indexer.go: index checkpoints; indexfile.go: the index opened for each
// use; log.go: the DB's wiring of its log, package engine/internal/wal (the
// one segment writer: placing frames at the tail under the append lock,
// rolls, preparation and growth of segments, group commit of syncs, the
// undo of a dead placer's write); lease.go: session leases across
// processes; holders.go: the file naming the leases a DB holds, which a
// refused process reads for the holder; compact.go: compaction (its plan, package
// engine/internal/compactplan, is pure over what the fold attributes:
// planFold; its execution drops and rewrites segments); listorder.go,
// listupdated.go: the orders ListPage keeps between pages (the lists
// themselves are package engine/internal/listorder); listing.go: each
// session's title and update time; migrate.go: v1 and v2 migration; package engine/internal/coord: the
// store's processes (the directory's lock, LOCK, byte locks, shared
// memory, its layout and stamp, the futex watch);
// follow.go: following the frames the
// other processes write, and Handle.Wait; metrics.go: DB.Metrics and the
// counters behind it; gate.go: the operations in progress, which Close
// waits for; contract.go: the engine's session errors;
// knobs.go: the test hooks and tuning overrides; dict.go: the
// dictionary's loop and its lock (the training, its samples and budget
// are package engine/internal/dict); options.go: Options and their
// defaults; types.go: the store's registered event types (a host's own);
// opencheck.go: how far each session's events were checked against the
// catalog; fork.go: Fork, by reference or by copy; turn.go: the turn hint,
// Resume, ResumeMany and Handle.TurnState (reading back to the open
// turn); resume.go: the holder named when a resume finds the session
// leased; changes.go: the change feed (DB.Changes) read from the
// segments; purgelog.go: the purge log (the file purged), where
// compaction records the deleted incarnations it purges before it drops
// or rewrites a segment, which the change feed gives consumers behind as
// deletes; trim.go: the last close's trim of the preallocated room and
// the index's compaction; rebuild_live.go: rebuilding the index while the
// store is open (check --repair). TestDocNamesEveryFile checks that this
// list names every file of the package.
//
// # Recovery and failing storage
//
// Open's recovery (recover.go) is one code path that a write open carries
// out and a read-only open and Check report: the index is a cache, set
// aside to quarantine/ and rebuilt when it cannot be read or disagrees
// with intact segments; files the engine cannot identify are moved to
// quarantine/, never deleted. A write that fails (a full disk) moves
// nothing: the tail stays before it, the next placement clears what it
// left, and only the flushes it carried fail (their events stay with
// their handles); an fsync error poisons the DB until it is closed and
// opened again.
//
// # Tests
//
// Test hooks and tuning overrides are per DB, as pebble's testing knobs:
// testingKnobs (knobs.go), an unexported field of Options that Open copies
// into the DB, so only this package's tests set them, and tests that do
// can run in parallel (TestKnobsPerDB). No package variable is a test
// hook (internal/lint's TestNoPackageTestHooks); the log's are fields of
// wal.Log (TestHookGrow, TestHookSync). The
// tests of package engine_test reach what they need of them through
// export_test.go (NoWaitPolls).
package engine
