package engine

import (
	"context"
	"errors"
	"github.com/seglog/seglog/engine/internal/wal"
	"slices"
	"sync/atomic"
	"time"

	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
)

// Metrics is a snapshot of a DB's counters and gauges (DB.Metrics), for
// operators: what this process did with the store since its Open
// (counters, which only grow; a new Open starts them at zero) and how it
// stands now (gauges). Every figure is this process's own: other
// processes that have the store open count theirs. A snapshot is a plain
// value; its fields are read one at a time while the store works, so two
// counters of one snapshot may be a few operations apart.
type Metrics struct {
	// Appends counts the batches of events staged into sessions: each
	// Append with events, and each write of a write-behind batch (the
	// background write after Enqueue's window, or the drain before an
	// Append, Read, Flush or Close). Counter.
	Appends uint64
	// EventsAppended counts the events of those batches. Counter.
	EventsAppended uint64
	// BytesAppended counts the bytes of those events' Data and SurfaceOp
	// (the JSON the host handed over). Counter, bytes.
	BytesAppended uint64

	// Flushes counts the flush barriers, Handle.Flush and DB.Flush, that
	// returned (failed ones too); equal to FlushLatency.Count. Counter.
	Flushes uint64
	// FlushErrors counts the flushes that returned an error. Counter.
	FlushErrors uint64
	// WindowFlushes counts the background flushes at the end of a
	// durability window (Options.WriteBehindWindow): the first event
	// handed to a write handle after its last window ended opens one.
	// They are not in Flushes. Counter.
	WindowFlushes uint64
	// WindowFlushErrors counts those that returned an error (each logs a
	// warning; the handle's next Flush writes the events or returns the
	// error). Counter.
	WindowFlushErrors uint64
	// FlushLatency is the time each flush took, from its call to its
	// return (the drain of its write-behind buffer, the cut of its open
	// events, their placement and the fdatasync it waited for).
	FlushLatency LatencyHistogram
	// Fsyncs counts the fdatasyncs of the active segment that this
	// process's group commit issued (failed ones too), for flushes, and
	// for a Delete's tombstone or a handle's Close: one covers every
	// flush waiting at that moment, of every session, so under load it is
	// far below Flushes. The syncs of a roll (the seal), of a segment's
	// creation or growth, of a dictionary and of the index are not
	// counted. Counter.
	Fsyncs uint64
	// EventsWritten counts the events in the frames this process wrote
	// into segments (cut from a session's open events at a flush, a full
	// batch or a handle's close; forks' and migrations' copies too).
	// EventsWritten / Fsyncs is the events per fsync (EventsPerFsync).
	// Counter.
	EventsWritten uint64
	// BytesWritten counts the bytes of the frames this process wrote into
	// segments: frame headers, keys, payloads as stored, padding. Seals
	// and compaction's rewrites are not counted. Counter, bytes.
	BytesWritten uint64
	// Frames counts the frames this process wrote (events, session
	// headers, tombstones; not seals), by the codec of their payload.
	Frames FramesByCodec

	// WriteBehindEvents is the number of events handed to Enqueue and not
	// yet appended (buffered, or in a background write in flight), over
	// every write handle of this DB. Gauge.
	WriteBehindEvents int64
	// WriteBehindFailures counts the background writes of write-behind
	// batches that failed: each logs a warning and keeps its events
	// buffered, and the handle's next Flush tries again and returns the
	// error. Counter.
	WriteBehindFailures uint64

	// OpenCheckedEvents counts the stored events write opens set out to
	// read to check them (a failed check's too) (the catalog, the seed rules): those not known checked
	// already, by the session's index record, an earlier write open or
	// this process's own appends under the same catalog (a write open of
	// a session checked through its end reads none). With
	// Options.SurfaceRules a write open reads the whole log besides, not
	// counted here. Counter.
	OpenCheckedEvents uint64

	// TurnEvents counts the stored events Resume, ResumeMany, Inspect and
	// Handle.TurnState folded for a session's open turn: from its last
	// turn boundary (found reading back from the log's end, down to the
	// session's hint at most), else from seq 0 (a hint that names no
	// boundary: once, the fold then records the boundary it found). An
	// Inspect that returns the whole log folds the events it read and
	// counts them. Counter.
	TurnEvents uint64

	// IndexCheckpoints counts the index checkpoints this process
	// committed (one bbolt transaction each). Counter.
	IndexCheckpoints uint64
	// IndexCheckpointFailures counts the checkpoint ticks that failed
	// (their frames stay pending for the next one). Counter.
	IndexCheckpointFailures uint64
	// IndexLagFrames is the number of frames this process knows of (its
	// own, and those it followed from other processes) that the index
	// does not hold yet: what the next open would re-read if the index
	// checkpoint stopped here. Gauge.
	IndexLagFrames int
	// IndexLagBytes is the bytes of those frames. Gauge, bytes.
	IndexLagBytes int64
	// IndexLagAge is, while frames are pending, the time since the index
	// last caught up (this process's checkpoint indexed every durable
	// frame it knew, or, in a process that does not checkpoint, it last
	// saw the checkpointing process's checkpoint move past some of them);
	// 0 while none is pending. A healthy store keeps it within about
	// Options.IndexInterval. Gauge.
	IndexLagAge time.Duration

	// Compactions counts the compactions this process ran to the end
	// (Compact, and the background compactor's runs). Counter.
	Compactions uint64
	// CompactionFailures counts the compactions that got their locks and
	// then failed (not those cancelled by Close). Counter.
	CompactionFailures uint64
	// SegmentsDropped and SegmentsRewritten count the segments
	// compactions removed and rewrote without their dead frames,
	// failed compactions' included. Counters.
	SegmentsDropped, SegmentsRewritten uint64
	// CompactionReclaimedBytes counts the bytes compactions freed: the
	// sizes of removed segments, and what rewrites cut from theirs.
	// Counter, bytes.
	CompactionReclaimedBytes uint64

	// ReadHandles and WriteHandles are the handles of this DB open now
	// (made by Open, Create, Fork, Resume; not yet closed), by access. A
	// read handle its caller never closes stays counted. Gauges.
	ReadHandles, WriteHandles int64

	// Poisoned reports that the store failed (an fdatasync error, or its
	// shared memory found cut under this process; see docs/DURABILITY.md,
	// Failing storage): every later append and flush fails until the DB
	// is closed and opened again. PoisonError is the
	// error's text ("" while not poisoned). Gauge.
	Poisoned    bool
	PoisonError string
}

// EventsPerFsync returns EventsWritten / Fsyncs: how many events one
// fdatasync made durable, on average since the open (0 before the first).
// It is the figure of group commit.
func (m Metrics) EventsPerFsync() float64 {
	if m.Fsyncs == 0 {
		return 0
	}
	return float64(m.EventsWritten) / float64(m.Fsyncs)
}

// FramesByCodec splits frame counts by how the frames' payloads are
// stored (segment.Codec).
type FramesByCodec struct {
	// None: stored as encoded (frames under 1 KiB raw without a
	// dictionary, session headers, tombstones, Options.Uncompressed).
	None FrameCounts
	// Zstd: one zstd frame.
	Zstd FrameCounts
	// ZstdDict: one zstd frame made with the store's dictionary.
	ZstdDict FrameCounts
	// S2: one S2 block (a flush's frame without a dictionary).
	S2 FrameCounts
	// S2Dict: one S2 block made with the dictionary's S2 form (a flush's
	// frame, once the store has a dictionary).
	S2Dict FrameCounts
}

// FrameCounts counts the frames of one codec. Counters.
type FrameCounts struct {
	Frames      uint64
	RawBytes    uint64 // payload bytes before compression
	StoredBytes uint64 // payload bytes as stored (compressed)
}

// flushBuckets is the number of bounds of the flush latency histogram.
const flushBuckets = 17

// flushBounds are the bounds of the flush latency histogram's buckets:
// from 50 µs (a flush that found its events durable, or an fdatasync of a
// fast NVMe disk) to 10 s (a stalled disk), about 2.5x apart.
var flushBounds = [flushBuckets]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond,
	25 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second,
}

// LatencyHistogram is a histogram of durations over fixed buckets. Its
// counts are not cumulative: Counts[i] is the number of observations d
// with Bounds[i-1] < d <= Bounds[i] (Bounds[-1] taken as 0), and
// Counts[len(Bounds)] the number over the last bound. Count is the number
// of observations (the sum of Counts), Sum their total.
type LatencyHistogram struct {
	Bounds [flushBuckets]time.Duration
	Counts [flushBuckets + 1]uint64
	Count  uint64
	Sum    time.Duration
}

// dbMetrics is a DB's counters: atomics, updated where the work happens,
// without a lock. (Gauges that are state, such as the index lag or the
// poison, are read from the state itself by Metrics.)
type dbMetrics struct {
	// start is the DB's open: caughtUp counts from it (monotonic)
	start time.Time

	appends, eventsAppended, bytesAppended atomic.Uint64

	flushErrors atomic.Uint64
	// window flushes: all, failed
	windowFlushes, windowFlushErrors atomic.Uint64
	flushCounts                      [flushBuckets + 1]atomic.Uint64
	flushSum                         atomic.Int64 // nanoseconds

	fsyncs                      atomic.Uint64
	eventsWritten, bytesWritten atomic.Uint64
	frames                      [5]frameCounters // by segment.Codec

	writeBehind handle.Stats

	openChecked atomic.Uint64 // events write opens read to check
	turnEvents  atomic.Uint64 // events folds of the open turn read

	checkpoints, checkpointFailures atomic.Uint64
	// caughtUp is when the index last caught up (see
	// Metrics.IndexLagAge), as time since start
	caughtUp atomic.Int64

	compactions, compactionFailures, dropped, rewritten, reclaimed atomic.Uint64

	readHandles, writeHandles atomic.Int64
}

type frameCounters struct {
	frames, raw, stored atomic.Uint64
}

// flushed records a flush that started at start and returned err.
func (m *dbMetrics) flushed(start time.Time, err error) {
	d := time.Since(start)
	i, _ := slices.BinarySearch(flushBounds[:], d) // the first bound >= d
	m.flushCounts[i].Add(1)
	m.flushSum.Add(int64(d))
	if err != nil {
		m.flushErrors.Add(1)
	}
}

// staged records a batch of n events of size bytes taken into a session.
func (m *dbMetrics) staged(n, size int) {
	m.appends.Add(1)
	m.eventsAppended.Add(uint64(n))
	m.bytesAppended.Add(uint64(size))
}

// handleOpened and handleClosed keep the gauges of open handles.
func (m *dbMetrics) handleOpened(a store.Access) {
	if a == store.Write {
		m.writeHandles.Add(1)
	} else {
		m.readHandles.Add(1)
	}
}

func (m *dbMetrics) handleClosed(a store.Access) {
	if a == store.Write {
		m.writeHandles.Add(-1)
	} else {
		m.readHandles.Add(-1)
	}
}

// caughtUpNow records that the index caught up (Metrics.IndexLagAge).
func (m *dbMetrics) caughtUpNow() { m.caughtUp.Store(int64(time.Since(m.start))) }

// compacted records the end of a compaction that held its locks.
func (m *dbMetrics) compacted(ctx context.Context, rep *CompactReport, err error) {
	if rep != nil {
		m.dropped.Add(uint64(len(rep.Dropped)))
		m.rewritten.Add(uint64(len(rep.Rewritten)))
		if rep.ReclaimedBytes > 0 {
			m.reclaimed.Add(uint64(rep.ReclaimedBytes))
		}
	}
	switch {
	case err == nil:
		m.compactions.Add(1)
	case ctx.Err() == nil || !errors.Is(err, ctx.Err()):
		m.compactionFailures.Add(1)
	}
}

// written counts the frames of t, written, and resets t.
func (m *dbMetrics) written(t *wal.Tally) {
	if t.Bytes == 0 {
		return
	}
	m.eventsWritten.Add(t.Events)
	m.bytesWritten.Add(t.Bytes)
	for c := range t.Codec {
		if k := &t.Codec[c]; k.Frames > 0 {
			m.frames[c].frames.Add(k.Frames)
			m.frames[c].raw.Add(k.Raw)
			m.frames[c].stored.Add(k.Stored)
		}
	}
	*t = wal.Tally{}
}

// Metrics returns a snapshot of the DB's counters and gauges (see
// Metrics). It is cheap (a few dozen atomic loads and a walk of the
// frames waiting for the index, under the DB's innermost lock, which no
// I/O holds), never waits for a flush or the disk, and works on a closed
// DB (the figures as of its Close).
func (db *DB) Metrics() Metrics {
	m := &db.metrics
	out := Metrics{
		Appends:                  m.appends.Load(),
		EventsAppended:           m.eventsAppended.Load(),
		BytesAppended:            m.bytesAppended.Load(),
		FlushErrors:              m.flushErrors.Load(),
		WindowFlushes:            m.windowFlushes.Load(),
		WindowFlushErrors:        m.windowFlushErrors.Load(),
		Fsyncs:                   m.fsyncs.Load(),
		EventsWritten:            m.eventsWritten.Load(),
		BytesWritten:             m.bytesWritten.Load(),
		WriteBehindEvents:        m.writeBehind.Buffered.Load(),
		WriteBehindFailures:      m.writeBehind.Failures.Load(),
		OpenCheckedEvents:        m.openChecked.Load(),
		TurnEvents:               m.turnEvents.Load(),
		IndexCheckpoints:         m.checkpoints.Load(),
		IndexCheckpointFailures:  m.checkpointFailures.Load(),
		Compactions:              m.compactions.Load(),
		CompactionFailures:       m.compactionFailures.Load(),
		SegmentsDropped:          m.dropped.Load(),
		SegmentsRewritten:        m.rewritten.Load(),
		CompactionReclaimedBytes: m.reclaimed.Load(),
		ReadHandles:              m.readHandles.Load(),
		WriteHandles:             m.writeHandles.Load(),
	}
	h := &out.FlushLatency
	h.Bounds = flushBounds
	for i := range m.flushCounts {
		h.Counts[i] = m.flushCounts[i].Load()
		h.Count += h.Counts[i]
	}
	h.Sum = time.Duration(m.flushSum.Load())
	out.Flushes = h.Count
	for c, k := range []*FrameCounts{&out.Frames.None, &out.Frames.Zstd, &out.Frames.ZstdDict, &out.Frames.S2, &out.Frames.S2Dict} {
		k.Frames = m.frames[c].frames.Load()
		k.RawBytes = m.frames[c].raw.Load()
		k.StoredBytes = m.frames[c].stored.Load()
	}
	if err := db.poisonErr(); err != nil {
		// (shm found cut under this process poisons it too)
		out.Poisoned, out.PoisonError = true, err.Error()
	}
	db.mu.Lock()
	if !db.opts.ReadOnly {
		out.IndexLagFrames = len(db.mu.pend)
		for i := range db.mu.pend {
			out.IndexLagBytes += int64(db.mu.pend[i].ref.size)
		}
	}
	db.mu.Unlock()
	if out.IndexLagFrames > 0 {
		out.IndexLagAge = max(0, time.Since(m.start)-time.Duration(m.caughtUp.Load()))
	}
	return out
}
