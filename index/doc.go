// Package index is the bbolt-backed catalog of a store: per-session
// metadata (header, event count, size, incarnation), the location of every
// frame of every session ((session, first seq) to segment and offset), and
// the checkpoint up to which the segments have been indexed.
//
// The segments stay the source of truth. The engine applies Updates in the
// background, only for frames that are already durable in their segments,
// so the index is never ahead of the segments; on open it re-reads only the
// frames after the checkpoint. A lost or stale index costs a longer open,
// never data.
//
// index imports internal/base and go.etcd.io/bbolt only. It must not import
// segment, handle, engine, recovery or plan. An Index is safe for
// concurrent use.
//
// Layout (bbolt buckets; part of the on-disk format):
//
//	meta      "version"    -> uint16 LE, Version
//	          "checkpoint" -> segment ID uint64 LE, offset uint64 LE
//	          "rewrite"    -> segment ID uint64 LE, generation uint64 LE (a compaction's rewrite in progress)
//	sessions  <id>         -> 0x01, uvarints uid, events, size, inherited, then the header bytes
//	frames    uvarint(len(id)) id BE64(first seq) -> segment u64, offset u64, count u32, size u32 (LE)
package index
