package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// What the timing ratios of bench (durable p50 against the raw
// fdatasync, the group-commit gain) stand for, counted instead of timed:
// a flush costs one fdatasync, and concurrent flushes share them. The
// ratios themselves are the regression guard's (bench/cmd/regress).

// syncCountOptions: a store on a counting FS, nothing in the background
// that syncs (no preallocation, no dictionary, no compaction; a MemFS
// store has no index), segments that do not roll.
func syncCountOptions(fs vfs.FS) *engine.Options {
	return &engine.Options{FS: fs, SegmentSize: 64 << 20, NoPreallocate: true, NoDict: true, CompactInterval: -1}
}

// TestFlushSyncsOnce: each flush of a session with new events issues one
// fdatasync, and a flush with nothing new none.
func TestFlushSyncsOnce(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	db, err := engine.OpenStore(t, "/db", syncCountOptions(ff))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	const flushes = 50
	evs := testgen.Events(0, flushes+1, 300)
	if err := h.Append(ctx, evs[0]); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil { // the first: the session's header too
		t.Fatal(err)
	}
	syncs, fsyncs := ff.Count(vfs.OpSync), db.Metrics().Fsyncs
	for _, e := range evs[1:] {
		if err := h.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil { // nothing new
			t.Fatal(err)
		}
	}
	if got := ff.Count(vfs.OpSync) - syncs; got != flushes {
		t.Errorf("%d flushes with an event each (and as many with none) made %d fdatasyncs, want %d", flushes, got, flushes)
	}
	if got := db.Metrics().Fsyncs - fsyncs; got != flushes {
		t.Errorf("Metrics.Fsyncs counted %d, want %d", got, flushes)
	}
}

// TestGroupCommitSharesSyncs: 16 sessions flush at once, 5 times each, on
// a device whose fdatasync takes 20 ms: the flushes that wait while a
// sync runs share the next one, so there are far fewer fdatasyncs than
// flushes (without group commit, one each).
func TestGroupCommitSharesSyncs(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	db, err := engine.OpenStore(t, "/db", syncCountOptions(ff))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const sessions, rounds = 16, 5
	hs := make([]*engine.Handle, sessions)
	for i := range hs {
		if hs[i], err = db.Create(ctx, store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ff.SetLatency(vfs.OpSync, 20*time.Millisecond)
	syncs := ff.Count(vfs.OpSync)
	var wg sync.WaitGroup
	for _, h := range hs {
		wg.Go(func() {
			for seq := range uint64(rounds) {
				if err := h.Append(ctx, testgen.Event(seq, 300)); err != nil {
					t.Error(err)
					return
				}
				if err := h.Flush(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	got := ff.Count(vfs.OpSync) - syncs
	t.Logf("%d flushes, %d fdatasyncs", sessions*rounds, got)
	if got == 0 || got > sessions*rounds/2 {
		t.Errorf("%d concurrent flushes made %d fdatasyncs, want at least one and at most %d (two flushes a sync)", sessions*rounds, got, sessions*rounds/2)
	}
}
