package engine

import (
	"context"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestReaderBoundRisesToTheCheckpoint: a reader that read the writer's
// durable position from shm before the writer checkpointed the index
// further along (here: shm holds a position in the first segment, the
// checkpoint is in a later one) reads up to the checkpoint it loaded: it
// sees every event the index holds, then follows the writer from there.
// (A bound left below the checkpoint cut off the checkpoint's segment: the
// open failed with "segment named by the index checkpoint is missing".)
func TestReaderBoundRisesToTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour, SegmentSize: 1 << 16, Uncompressed: true})
	h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var want []event.Event
	flushMore := func(n int) {
		t.Helper()
		evs := testgen.Events(uint64(len(want)), n, 200)
		appendFlushed(t, h, evs...)
		want = append(want, evs...)
	}
	flushMore(10)
	stale, ok := w.shared.Durable()
	if !ok {
		t.Fatal("the writer published no durable position")
	}
	for range 40 {
		flushMore(10)
	}
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	cp, err := w.index.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if sseg, _ := coord.SplitPosition(stale); cp.Segment <= sseg {
		t.Fatalf("setup: checkpoint in segment %d, the stale position in %d: want it in a later one", cp.Segment, sseg)
	}
	// The reader reads shm before the checkpoint moved past it.
	w.shared.Word(coord.Durable).Store(stale)

	r, err := openStore(t, dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open with shm's durable position older than the index checkpoint: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	if r.bound != coord.Position(cp.Segment, cp.Offset) {
		t.Errorf("reader's bound %x, want the checkpoint's %x", r.bound, coord.Position(cp.Segment, cp.Offset))
	}
	ra, err := r.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer ra.Close()
	readsAll(t, "reader opened with a stale durable position", ra, want)
	// The next flush publishes past the checkpoint: the reader follows.
	flushMore(3)
	readsAll(t, "reader after the writer's next flush", ra, want)
}
