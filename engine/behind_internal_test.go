package engine

import (
	"context"
	"errors"
	"testing"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestNoWriteOutAfterClose: an Append of a handle that DB.Close did not
// flush (one opened after Close took its handles) passed its lease check
// before Close revoked the lease, and stages its batch and writes it out
// only once Close is done. Close's Wait is over: a write-out it started
// then ran on the closed files (a nil dereference on its goroutine, which
// took the process down) or added to the WaitGroup while Close's Wait
// returned (which panics). It must start none: the events stay open, for
// the handle's Close to count as dropped.
func TestNoWriteOutAfterClose(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := &Options{FS: mem, SegmentSize: 1 << 20, FrameBytes: 4 << 10, CompactInterval: -1}
	db, err := openStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	flushed := testgen.Events(0, 5, 300)
	if err := h.Append(ctx, flushed...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The rest of that Append (Front.appendNow), past its lease check
	// (nothing else uses the handle: the Front's lock is not needed).
	w := handleWriter{h}
	full, err := w.Stage(testgen.Events(5, 60, 300))
	if err != nil || !full {
		t.Fatalf("stage: full %v, %v; want a full batch", full, err)
	}
	err = w.CutBehind(ctx)
	started := h.behind != nil
	h.waitBehind()
	if started || err != nil {
		// (nil: nothing failed, so the Front logs no failed write-out.)
		t.Fatalf("CutBehind after DB.Close: %v, a write-out started: %v; want nil and none", err, started)
	}
	var dropped *store.DroppedError
	if err := h.Close(); !errors.As(err, &dropped) || dropped.Dropped != 60 {
		t.Fatalf("Close of the handle: %v, want the 60 events dropped", err)
	}
	if got, err := reopenRead(t, "/db", opts, "s"); err != nil || len(got) != len(flushed) {
		t.Fatalf("reopened: %d events, %v; want the %d flushed", len(got), err, len(flushed))
	}
}
