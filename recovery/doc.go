// Package recovery balances session logs cut by a crash in the middle of a
// turn: the interrupted-turn closers (error results for pending tool calls,
// step/end, turn/end with reason "interrupted"), the read-only balanced view
// and the fold that tells a log's state.
//
// recovery is pure: no I/O and no clock (time is a parameter). It imports
// event and internal/base only, never segment, index, handle, engine or
// internal/vfs, and no I/O package of the standard library. Torn-tail
// truncation of segment files is storage work and lives in segment and
// engine. See docs/DESIGN.md#layering.
package recovery
