// Package segment reads and writes segment files, the shared append-only
// files that hold the events of every session: a 64-byte header followed
// by 8-byte-aligned frames, each one batch of events of one session,
// optionally zstd-compressed and covered by an xxhash64 checksum. Frames are
// self-describing, so a segment can be scanned and re-indexed without the
// index. The format is specified in docs/DESIGN.md#segment-format and
// summarized in format.go.
//
// The engine writes segments through its own writer, package
// engine/internal/wal, with what this package exports for it: [Create]
// (a new segment, header synced and renamed into place), [Encoder] and
// [Encoded.AppendFrame], [AppendSeal], [DecodeHeader]. A [Writer]'s
// Append, Sync and Seal are not the engine's: they build segment files in
// this package's tests, in fuzz and in engine tests. [Scan]
// walks frames, stops at the first bad one and tells a torn tail (cut it
// off; nothing synced is lost) from damage in synced data (a
// [*CorruptionError] with the offset); a [Reader] maps a segment with mmap
// and decodes frames into events that never alias the mapping.
//
// Rewrite replaces a sealed segment by a copy with only the frames a
// compaction keeps (same ID, format version 2, the next generation),
// built aside and renamed into place; MarshalFrame and UnmarshalFrame
// carry one frame as a standalone message (backend/jetstream). A store's
// zstd dictionaries (dict.go: TrainDict, WriteDict, Dicts) sit beside its
// segments, one file per ID, named by the frames compressed with them.
//
// segment imports only event, internal/base and internal/vfs: it knows
// nothing of the index, handles, recovery, plan or the engine, and starts no
// goroutines.
//
// Concurrency: a Writer and a Reader are safe for concurrent use (Close
// excepted). A Writer has one mutex over its buffer; one goroutine at a time
// owns the file for a write and its fdatasync, without holding the mutex,
// so appends proceed while a sync is in flight and the next sync carries
// everything they appended (group commit).
//
//	w, _ := segment.Create(vfs.Default, "db/00000001.seg", 1, segment.WriterOptions{})
//	loc, _ := w.Append("session-1", 0, events)
//	_ = w.Sync() // durable from here
//	r, _ := segment.OpenReader(vfs.Default, "db/00000001.seg")
//	f, _ := r.ReadFrame(loc.Offset)
package segment
