package engine_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// payloadBytes is what Metrics.BytesAppended counts of evs.
func payloadBytes(evs []event.Event) uint64 {
	n := 0
	for _, e := range evs {
		n += len(e.Data) + len(e.SurfaceOp)
	}
	return uint64(n)
}

// TestMetrics runs a workload whose every count is known and compares
// DB.Metrics with it: appends, events and bytes, flushes and their
// histogram, fsyncs (sequential flushes: one for each that had something
// to sync), frames by codec, the write-behind gauge, open handles by access,
// the index lag (no checkpoint ran) and a compaction.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, t.TempDir(), &engine.Options{
		IndexInterval:     time.Hour, // no checkpoint but Compact's
		WriteBehindWindow: time.Hour, // Enqueued events wait for the Flush
		CompactInterval:   -1,
		NoPreallocate:     true,
		NoDict:            true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	m := db.Metrics()
	var zero engine.Metrics
	zero.FlushLatency.Bounds = m.FlushLatency.Bounds
	if m != zero {
		t.Fatalf("a new DB's metrics are not all zero: %+v", m)
	}
	hs := make([]*engine.Handle, 3)
	for i := range hs {
		if hs[i], err = db.Create(ctx, store.Header{ID: []string{"s0", "s1", "s2"}[i], CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	var appends, events, bytes uint64
	appendBatch := func(h *engine.Handle, evs []event.Event) {
		t.Helper()
		if err := h.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		appends++
		events += uint64(len(evs))
		bytes += payloadBytes(evs)
	}
	for b := range 4 { // s0: 4 batches of 5 small events
		appendBatch(hs[0], testgen.Events(uint64(5*b), 5, 100))
	}
	appendBatch(hs[1], testgen.Events(0, 40, 2000)) // s1: 80 KB, cut into frames as it fills them
	for seq := range uint64(3) {                    // s2: 3 batches of one event
		appendBatch(hs[2], testgen.Events(seq, 1, 100))
	}
	if err := hs[1].Append(ctx); err != nil { // an empty batch is no append
		t.Fatal(err)
	}
	r1, err := db.Open(ctx, "s0", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := db.Open(ctx, "s0", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	m = db.Metrics()
	if m.Appends != appends || m.EventsAppended != events || m.BytesAppended != bytes {
		t.Errorf("appends, events, bytes = %d, %d, %d; want %d, %d, %d", m.Appends, m.EventsAppended, m.BytesAppended, appends, events, bytes)
	}
	if m.ReadHandles != 2 || m.WriteHandles != 3 {
		t.Errorf("handles: %d read, %d write; want 2, 3", m.ReadHandles, m.WriteHandles)
	}
	if err := r1.Close(); err != nil {
		t.Fatal(err)
	}
	if m := db.Metrics(); m.ReadHandles != 1 {
		t.Errorf("after closing one: %d read handles, want 1", m.ReadHandles)
	}

	flushes := 0
	flush := func(f func(context.Context) error) {
		t.Helper()
		if err := f(ctx); err != nil {
			t.Fatal(err)
		}
		flushes++
	}
	flush(db.Flush)    // fsync 1, for every handle's frames
	flush(hs[1].Flush) // nothing new: no fsync
	enq := testgen.Events(3, 2, 100)
	if err := hs[2].Enqueue(enq...); err != nil {
		t.Fatal(err)
	}
	if m := db.Metrics(); m.WriteBehindEvents != 2 || m.Appends != appends {
		t.Errorf("after Enqueue of 2: write-behind %d events, %d appends; want 2, %d (not appended yet)", m.WriteBehindEvents, m.Appends, appends)
	}
	appends, events, bytes = appends+1, events+2, bytes+payloadBytes(enq)
	flush(hs[2].Flush) // the write-behind batch appended; fsync 2
	flush(db.Flush)    // nothing new: no fsync
	flush(hs[0].Flush) // nothing new: no fsync

	m = db.Metrics()
	if m.Appends != appends || m.EventsAppended != events || m.BytesAppended != bytes {
		t.Errorf("appends, events, bytes = %d, %d, %d; want %d, %d, %d", m.Appends, m.EventsAppended, m.BytesAppended, appends, events, bytes)
	}
	if m.WriteBehindEvents != 0 || m.WriteBehindFailures != 0 {
		t.Errorf("write-behind %d events, %d failures after the flush; want 0, 0", m.WriteBehindEvents, m.WriteBehindFailures)
	}
	if m.Flushes != uint64(flushes) || m.FlushErrors != 0 {
		t.Errorf("flushes %d (errors %d), want %d (0)", m.Flushes, m.FlushErrors, flushes)
	}
	if m.Fsyncs != 2 {
		t.Errorf("fsyncs = %d, want 2 (the three flushes with nothing new need none)", m.Fsyncs)
	}
	if m.EventsWritten != events {
		t.Errorf("events written = %d, want every event appended, %d", m.EventsWritten, events)
	}
	if got, want := m.EventsPerFsync(), float64(events)/2; got != want {
		t.Errorf("EventsPerFsync = %v, want %v", got, want)
	}
	h := m.FlushLatency
	var sum uint64
	for _, c := range h.Counts {
		sum += c
	}
	if h.Count != uint64(flushes) || sum != h.Count || h.Sum <= 0 {
		t.Errorf("flush histogram: count %d, counts add up to %d, sum %v; want %d, %d, > 0", h.Count, sum, h.Sum, flushes, flushes)
	}
	if len(h.Counts) != len(h.Bounds)+1 || !slices.IsSorted(h.Bounds[:]) || h.Bounds[0] != 50*time.Microsecond || h.Bounds[len(h.Bounds)-1] != 10*time.Second {
		t.Errorf("flush histogram bounds %v (%d counts)", h.Bounds, len(h.Counts))
	}
	f := m.Frames
	frames := f.None.Frames + f.Zstd.Frames + f.ZstdDict.Frames + f.S2.Frames + f.S2Dict.Frames
	if f.None.Frames < 3 || f.Zstd.Frames < 3 || f.S2.Frames < 1 || f.ZstdDict.Frames+f.S2Dict.Frames != 0 {
		t.Errorf("frames by codec: %+v; want the 3 session headers and more uncompressed, s1's 80 KB in 3 or more zstd frames and its flush's rest S2, none with a dictionary (NoDict)", f)
	}
	if f.None.RawBytes != f.None.StoredBytes || f.Zstd.StoredBytes >= f.Zstd.RawBytes || f.S2.StoredBytes >= f.S2.RawBytes || f.Zstd.RawBytes+f.S2.RawBytes < 80000 {
		t.Errorf("frame bytes by codec: %+v", f)
	}
	// No checkpoint ran: every frame written waits for the index.
	if m.IndexCheckpoints != 0 || m.IndexLagFrames != int(frames) || m.IndexLagBytes != int64(m.BytesWritten) || m.IndexLagAge <= 0 {
		t.Errorf("index: %d checkpoints, lag %d frames, %d bytes, age %v; want 0, %d, %d, > 0", m.IndexCheckpoints, m.IndexLagFrames, m.IndexLagBytes, m.IndexLagAge, frames, m.BytesWritten)
	}
	if m.Poisoned || m.PoisonError != "" {
		t.Errorf("poisoned: %v %q", m.Poisoned, m.PoisonError)
	}

	// Compaction: s1, most of the bytes, deleted; the rest rewritten.
	if err := hs[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Dropped)+len(rep.Rewritten) == 0 || rep.ReclaimedBytes <= 0 {
		t.Fatalf("the compaction reclaimed nothing: %+v", rep)
	}
	m = db.Metrics()
	if m.Compactions != 1 || m.CompactionFailures != 0 || m.SegmentsDropped != uint64(len(rep.Dropped)) ||
		m.SegmentsRewritten != uint64(len(rep.Rewritten)) || m.CompactionReclaimedBytes != uint64(rep.ReclaimedBytes) {
		t.Errorf("compaction: %d runs (%d failed), %d dropped, %d rewritten, %d bytes; the report: %+v",
			m.Compactions, m.CompactionFailures, m.SegmentsDropped, m.SegmentsRewritten, m.CompactionReclaimedBytes, rep)
	}
	if m.IndexCheckpoints != 1 || m.IndexLagFrames != 0 || m.IndexLagBytes != 0 || m.IndexLagAge != 0 {
		t.Errorf("after the compaction's checkpoint: %d checkpoints, lag %d frames, %d bytes, age %v; want 1, 0, 0, 0",
			m.IndexCheckpoints, m.IndexLagFrames, m.IndexLagBytes, m.IndexLagAge)
	}
	if got := m.Frames.None.Frames + m.Frames.Zstd.Frames + m.Frames.S2.Frames; got != frames+1 {
		t.Errorf("%d frames after the tombstone, want %d", got, frames+1)
	}

	for _, h := range []*engine.Handle{hs[0], hs[2], r2} {
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := r1.Close(); err != nil { // a second Close counts nothing
		t.Fatal(err)
	}
	if m := db.Metrics(); m.ReadHandles != 0 || m.WriteHandles != 0 {
		t.Errorf("after closing every handle: %d read, %d write", m.ReadHandles, m.WriteHandles)
	}
}

// TestMetricsPoison: an fsync failure shows as the poison, the failed
// flush as a flush error (the fsync counted), and a background write of
// the write-behind that fails on the poisoned store as a failure, its
// events still buffered.
func TestMetricsPoison(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	// The test fires the write-behind's window itself; FlushOnly arms no
	// durability window beside it.
	fires := make(chan func(), 1)
	db, err := engine.OpenStore(t, "/db", &engine.Options{FlushOnly: true, FS: ff, NoPreallocate: true, AfterFunc: func(_ time.Duration, f func()) handle.Timer {
		fires <- f
		return firedTimer{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	// Another session's write-behind holds events when the store fails.
	h2, err := db.Create(ctx, enginetest.Meta("s2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Enqueue(enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpSync, Nth: 1})
	if err := h.Flush(ctx); err == nil {
		t.Fatal("the flush succeeded despite the fault")
	}
	m := db.Metrics()
	if !m.Poisoned || !strings.Contains(m.PoisonError, "store failed") {
		t.Errorf("after the failed fsync: poisoned %v, %q", m.Poisoned, m.PoisonError)
	}
	if m.Flushes != 1 || m.FlushErrors != 1 || m.Fsyncs != 1 {
		t.Errorf("flushes %d, errors %d, fsyncs %d; want 1, 1, 1", m.Flushes, m.FlushErrors, m.Fsyncs)
	}
	// A poisoned store takes nothing more: an Enqueue (as an Append)
	// fails with the poison, taking nothing.
	if err := h.Enqueue(enginetest.Turn2()...); !errors.Is(err, segment.ErrSyncFailed) {
		t.Fatalf("an Enqueue on the poisoned store: %v, want the poison (ErrSyncFailed)", err)
	}
	(<-fires)() // s2's window ends: its background write fails
	m = db.Metrics()
	if m.WriteBehindFailures != 1 || m.WriteBehindEvents != int64(len(enginetest.OneTurn())) {
		t.Errorf("write-behind: %d failures, %d events; want 1, %d", m.WriteBehindFailures, m.WriteBehindEvents, len(enginetest.OneTurn()))
	}
}
