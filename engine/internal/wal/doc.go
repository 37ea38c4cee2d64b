// Package wal is the one segment writer: a writing process's side of the
// shared log (docs/MULTIPROCESS.md, Many processes, Appending). Every process
// appends to the same active segment; a [Log] places frames at the tail
// under the cross-process append lock in one pwrite (Place: a group
// commit of the frames its callers queued), seals a full segment and
// rolls to the next, creates the next segment ahead of the roll
// (PrepareNext) and grows the active one ahead of its tail (Grow, the
// preallocation), makes everything placed durable with one fdatasync for
// all its waiters and across processes (Sync), and zeroes what a placer
// that died mid-write left past the tail before it places again.
//
// It knows segments and the file system, nothing of sessions, the index
// or the contract: what it needs from the DB comes in a [Config] (the
// directory, segment sizes, the DB's lock and poison, its metrics) and
// the store's coordination with other processes through the [Shared]
// interface (byte locks, shared words, the wake-ups of syncs), which the
// engine implements over its shared memory. It starts no goroutines: the
// engine's preparer calls Grow and PrepareNext when Config.Kick tells it.
package wal
