// Package recovery balances session logs cut by a crash in the middle of a
// turn: the interrupted-turn closers (error results for pending tool calls,
// step/end, turn/end with reason "interrupted"), the read-only balanced view
// and the fold that tells a log's state; and the v3 surface rules
// (SurfaceChecker, CheckSurface: surfaceOp, replace spans,
// sourceEventSeqs, the system head), which hosts can have the store apply
// to appends and which seglog check --strict and import apply. It also
// holds the migrations of the reference's older session formats to v3
// (MigrateV2, MigrateV1 through MigrateV1ToV2, and MigrateV0 to v1), which
// the engine's reads, DB.Migrate and seglog import use.
//
// Fold follows the reference harness's closer scan, which never refuses a
// log: what a correct agent loop would not write (a turn/end outside a
// turn, a result for a call that is not pending: plugin results, replaced
// spans) passes, so that every log the reference resumes resumes here too,
// with the same closers. FoldStrict reports those events, for tests.
// A turn/start or turn/end resets everything the fold keeps, so FoldFrom
// of a log from its last turn boundary (State.TurnFrom) gives the state
// of the whole log: a store that remembers where it is folds the open
// turn alone to resume a session (Closers of that state).
//
// recovery is pure: no I/O and no clock (time is a parameter). It imports
// event and internal/base only, never segment, index, handle, engine or
// vfs, and no I/O package of the standard library. Torn-tail
// truncation of segment files is storage work and lives in segment and
// engine. See docs/DESIGN.md#layering.
package recovery
