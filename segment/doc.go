// Package segment reads and writes segment files, the shared append-only
// files that hold the events of every session: a 64-byte header followed
// by 8-byte-aligned frames, each one batch of events of one session,
// optionally compressed (zstd or S2, with or without a dictionary) and
// covered by an xxhash64 checksum. Frames are
// self-describing, so a segment can be scanned and re-indexed without the
// index. The format is specified in docs/FORMAT.md#segment-file and
// summarized in format.go.
//
// Segments are written by one writer, the engine's (package
// engine/internal/wal: placements at the shared tail, rolls, growth, group
// fdatasync), with what this package exports for it: [Create] (a new
// segment, its header synced and renamed into place), an [Encoder] and
// [Encoded.AppendFrame], [AppendSeal], [DecodeHeader]. [Scan]
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
// segment imports only event, internal/base and vfs: it knows
// nothing of the index, handles, recovery, plan or the engine, and starts no
// goroutines.
//
// Concurrency: an Encoder, a Reader and Dicts are safe for concurrent use
// (a Reader's Close excepted).
//
//	_ = segment.Create(vfs.Default, "db/0000000000000001.seg", 1, segment.CreateOptions{})
//	e, _ := segment.Encoder{}.Events("session-1", 0, events)
//	f.WriteAt(e.AppendFrame(nil, segment.HeaderSize), segment.HeaderSize); f.Sync()
//	r, _ := segment.OpenReader(vfs.Default, "db/0000000000000001.seg")
//	fr, _ := r.ReadFrame(segment.HeaderSize)
package segment
