// Package store is the contract of a seglog store, which every backend
// implements the same way (the local engine, package engine, and the NATS
// JetStream backend, package backend/jetstream): a session's Header and
// Snapshot, handle Access, the errors a caller tests with errors.Is and
// errors.As, and the session rules (PrepareHeader for a new header,
// CheckBatch for an appended batch, CheckLog for a write open's check of a
// stored log, ReadRange, ObserveLength, the header record a backend stores
// and the revision it reports).
//
// store holds no storage and starts no goroutine. It may import event,
// internal/base, handle (the lease errors) and internal/vfs (the lock
// error); segment, index, engine and the backends import it
// (docs/DESIGN.md#layering). package engine re-exports its types and
// errors under the names a host has always used.
package store
