package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestKeptLiveReportsDroppedFrame: compaction's own check that a rewrite
// kept every live frame fails with a *CorruptionError naming the frame and
// poisons the store. It held db.mu and poisoned through poisonWith, which
// takes db.mu again: the store hung instead.
func TestKeptLiveReportsDroppedFrame(t *testing.T) {
	ctx := context.Background()
	db, err := openStore(t, t.TempDir(), &Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	// (no deferred Close: after a deadlock on db.mu it would hang the test)
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(0, 3, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	f := db.mu.sessions["s"].frames[0]
	db.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- db.keptLive(f.seg, map[int64]int64{f.off + 4096: f.off}) }()
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("keptLive did not return (deadlock on db.mu)")
	}
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || ce.Path != db.segPath(f.seg) {
		t.Fatalf("keptLive of a rewrite without the session's frame: %v, want a *CorruptionError at %s", err, db.segPath(f.seg))
	}
	if perr := db.poisonErr(); !errors.As(perr, &ce) {
		t.Fatalf("store not poisoned by the dropped frame: %v", perr)
	}
	if err := h.Append(ctx, testgen.Events(3, 1, 100)...); err == nil {
		if err = h.Flush(ctx); err == nil {
			t.Fatal("a flush was acknowledged after compaction dropped a live frame")
		}
	}
	if err := db.keptLive(f.seg, map[int64]int64{f.off: f.off}); err != nil {
		t.Fatalf("keptLive of a rewrite that kept the frame: %v", err)
	}
	h.Close()
	db.Close()
}
