// Package compactplan decides what a compaction keeps (docs/FORMAT.md,
// Segment file and Compaction): fed the segments of a store in order, it
// sums each segment's frame bytes per incarnation, and then picks each
// segment's action (keep it, rewrite it without its dead frames or to
// compress its S2 frames again with zstd, or drop it) and, for a rewrite,
// which frames stay.
//
// An incarnation goes whole or not at all: its frames go only if it is
// ended (by a tombstone or a migration), not live, and every segment that
// holds frames of it goes or is rewritten; a tombstone goes only with the
// last frame of what it ends; a fork's parent stays while the fork does.
// Keeping a segment keeps what it holds, so the decision is a fixed point.
//
// Events frames carry no incarnation: an [Attributor] (the engine's replay
// fold, the one code that knows how frames make incarnations) says whose
// each frame is. The plan knows segments and incarnation numbers, nothing
// of sessions, the index or the DB; it does no I/O but read the segments
// it is handed, takes no lock and starts no goroutine. The engine's
// Compact and Usage run it (engine/compact.go).
package compactplan
