// Package bufpool keeps byte buffers for reuse: the payloads a bulk load
// encodes (segment) and the frames a placement lays out (engine) are each
// some 32 KiB to a few MiB, and a fresh buffer each time is garbage the
// collector must clear and return. It imports nothing from seglog.
package bufpool
