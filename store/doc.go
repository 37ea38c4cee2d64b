// Package store is the contract of a seglog store, which every backend
// implements the same way (the local engine, package engine, and the NATS
// JetStream backend, package backend/jetstream): a session's Header and
// Snapshot, handle Access, the errors a caller tests with errors.Is and
// errors.As, and the session rules (PrepareHeader for a new header,
// CheckBatch for an appended batch, CheckLog for a write open's check of a
// stored log, ReadRange, the header record a backend stores and the
// revision it reports), and the Front of a session handle: what every
// backend's handle does the same (its state, Append and Enqueue with their
// checks and write-behind, the read checks, Close's protocol) over a
// small Writer interface of the backend's own steps. Built on the contract
// alone, for every backend: CopyFork (a fork by copy), Copy (sessions from
// one store into another, safe to run again) and Retain (deletion by a
// policy, with a backend's TombstonePurger).
//
// store holds no storage; a Front's write-behind runs a timer goroutine
// while events wait (package handle), stopped by Close. It may import
// event, internal/base, handle (leases and write-behind) and vfs
// (the lock error); segment, index, engine and the backends import it
// (docs/DESIGN.md#layering). Its types and errors have this one name: a
// host imports store beside the backend it opens (engine,
// backend/jetstream).
package store
