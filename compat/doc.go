// Package compat is the reference harness's older session-persistence
// calls, for a host ported from it, where they mean something here:
// Locate (where a session's reference log lives), ReadRaw and
// SupportsRawArtifacts (a session as the reference's JSONL text), and a
// Preparer that keeps a few inspected sessions (5 by default, as the
// reference's coordinator did) so that a Prepare after an Inspect does
// not read the log again. docs/GUIDE.md (Coming from the reference harness)
// maps each of the reference's calls to seglog's.
//
// It works on any backend of the store contract (store.Store: *engine.DB
// through store.Wrap, *jetstream.Store) and does no I/O of its own but
// through the store it is given (Locate does none at all). It must not
// import engine, index, segment or any backend.
//
// Concurrency: a Preparer is safe for concurrent use.
package compat
