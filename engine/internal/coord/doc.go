// Package coord is the coordination between the processes that have one
// store directory open (docs/MULTIPROCESS.md, Many processes): the files LOCK
// (flock) and the lock on the directory itself, which tell a process
// whether it is the first opener; the byte-range locks of the locks file
// (the open, the append, the sync, the index, compaction, the follow
// slots, and each session's write lease), which the kernel releases when
// their process dies; the 4 KiB of shared memory (shm) every process maps,
// its layout (Word, Position) and the stamp that proves a newcomer opened
// the files the others hold; the detection of a file removed, replaced,
// cut or wiped under them (a *store.CoordinationError); and the futex
// watch that wakes a process's waiters when another process's sync
// publishes.
//
// It knows nothing of sessions, segments, the index, the log or the
// contract: the engine gives the words and locks their meaning, and
// adapts a [Shared] to the log writer's wal.Shared (engine/log.go). The
// error it returns when a coordination file changed under the processes
// is internal/base's *CoordinationError, which package store names
// (store.CoordinationError, store.ErrCoordinationLost are aliases), as
// base's CorruptionError is: the engine and the log pass it through
// unchanged, and the caller tests it with errors.Is and errors.As.
//
// It starts one goroutine: the watcher of a [Shared.Changed], while some
// channel waits; [Shared.Close] stops it before it unmaps shm.
package coord
