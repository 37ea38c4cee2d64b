// Package handle is the client-side concurrency of a store, generic over the
// storage below it: single-writer leases with fencing ([Owners], [Lease])
// and the write-behind buffer ([WriteBehind]: a fixed batching window,
// single-flight drains, failed batches retained in order; [Stats] counts
// what a store's buffers hold and their failed background writes). The engine
// composes them with its flush barrier.
//
// handle imports nothing from seglog's storage: it must not import segment,
// index, engine, recovery or vfs. It talks to the storage through
// the Write function it is given. See docs/DESIGN.md#layering.
//
// Everything here is safe for concurrent use. A WriteBehind owns at most
// one timer goroutine at a time, stopped by Close.
package handle
