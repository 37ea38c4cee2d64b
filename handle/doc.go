// Package handle is the client-side concurrency of a store, generic over the
// storage below it: single-writer leases with fencing, the write-behind
// buffer (a fixed batching window, retained events on failure) and flush
// barriers. It talks to the engine through interfaces it defines.
//
// handle imports event and internal/base only. It must not import segment,
// index, engine, recovery or internal/vfs. See docs/DESIGN.md#layering.
package handle
