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
// # Damaged files
//
// bbolt trusts its file: a damaged page makes it panic, a page past the end
// of a truncated file makes it fault (SIGBUS), and the page walk of a
// read-write open runs in a goroutine of its own where neither can be
// recovered. So Open first takes bbolt's lock itself and checks the whole
// file on its raw bytes, every access bounds-checked, before bbolt reads
// any of it: both meta pages (bbolt's magic, version and checksum, the
// page identity), the high-water mark against the file size, the stored
// free list if any, and every page reachable from the root: its place
// below the high-water mark, its identity and type, that it is reached
// once and is not free, that its elements and their keys and values fit
// it and lie where bbolt lays them out, the key order within and across
// pages (as bbolt's tx.Check), and a bounded depth (no cycles); then the
// layout: exactly the buckets meta, sessions and frames, only the meta
// keys below, the format version, and the shape of every record. Any
// failure is a *DamageError (errors.Is(err, ErrDamaged)), naming the file
// and, where it has one, the offset; its cause is a *base.CorruptionError,
// or a *base.FormatError for another format version. An empty file is
// damaged too (a crash while the file was created leaves one; a read-write
// Open creates a missing file, never an empty one). A failed Open writes
// nothing. The check reads the whole file: on an index of 100k sessions
// and 1M frames (200 MB) it costs about as much as bbolt's own page walk
// of a read-write open (see BenchmarkOpen). A caller that loads every
// session has the check hand it each session record it meets
// (Options.Sessions) instead of walking them again through bbolt.
//
// After Open, every method that reads pages runs with memory faults turned
// into panics (runtime/debug.SetPanicOnFault) and turns a panic of bbolt's
// into a *DamageError; from then on the Index returns that error for every
// call. Verify re-runs the check of Open on the file as it is now, runs
// bbolt's tx.Check, and decodes every record through bbolt.
//
// bbolt keeps no checksums but those of its meta pages. What no check sees
// is damage confined to the stored bytes of a key or a value that leaves
// the record well-formed (a digit of a checkpoint offset, a frame's
// segment offset, a session's event count, a byte of a header, a byte of a
// session ID that keeps the keys in order): such an index returns wrong
// values. Frame locations are checked again when the segment frame is
// read (its header and xxhash64), and the engine treats anything the
// segments contradict as a stale index. Damage to a meta page makes bbolt
// use the other one: the index then reads as of one transaction earlier,
// which is a stale, consistent index, never a wrong one. Damage in free
// pages changes nothing.
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
//	sessions  <id>         -> 0x01|0x02|0x03|0x04, uvarints uid, events, size, inherited; (0x02 on)
//	                          uvarint listed events, varint update time, uvarint title length, title;
//	                          (0x03, 0x04) uvarint checked events, catalog fingerprint u64 LE; (0x04)
//	                          uvarint turn boundary seq+1 (TurnFrom); then the header bytes
//	frames    uvarint(len(id)) id BE64(first seq) -> segment u64, offset u64, count u32, size u32 (LE)
package index
