package engine

// Internal tests of compaction racing Delete, Create, Migrate and Usage:
// db.knobs.rewrite runs the racing operation at a fixed point of a rewrite
// (after the rename, before the index learns the new offsets).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCompactRacingDeleteCreateMigrate: between a compaction's plan and
// its index relocation, sessions whose frames the rewritten segment holds
// are deleted, deleted and created again, and migrated, and the index
// checkpoints each change. The compaction must succeed (it relocates only
// what the index still holds there), leave no rewrite intent behind, the
// next compaction must succeed too, and every session must read right
// before and after a reopen, and Check must agree.
func TestCompactRacingDeleteCreateMigrate(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1, IndexInterval: 1 << 40}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	src := testgen.V2Turns("", 30)
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "m", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, src...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	want := interleavedStore(t, db) // s1, s3, s5, s7 live; their frames share every segment
	if want["m"], err = recovery.MigrateV2("m", src); err != nil {
		t.Fatal(err)
	}
	calls := 0
	db.knobs.rewrite = func(seg uint64) error {
		calls++
		if calls > 1 {
			return nil
		}
		// Deleted.
		if err := db.Delete(ctx, "s1"); err != nil {
			return err
		}
		delete(want, "s1")
		// Deleted and created again: its seqs start at 0 again elsewhere.
		if err := db.Delete(ctx, "s3"); err != nil {
			return err
		}
		h, err := db.Create(ctx, store.Header{ID: "s3", CreatedAt: 2})
		if err != nil {
			return err
		}
		want["s3"] = testgen.Events(0, 25, 200)
		if err := h.Append(ctx, want["s3"]...); err != nil {
			return err
		}
		if err := h.Close(); err != nil {
			return err
		}
		// Migrated: its frames move to a new incarnation.
		if _, err := db.Migrate(ctx, "m"); err != nil {
			return err
		}
		return db.checkpoint() // the index learns all of it before the relocation
	}
	defer func() { db.knobs.rewrite = nil }()
	rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
	if err != nil {
		t.Fatalf("compaction racing delete/create/migrate: %+v, %v", rep, err)
	}
	if calls == 0 {
		t.Fatal("nothing was rewritten: the race was not run")
	}
	db.knobs.rewrite = nil
	if rw, ok, err := db.idxRewrite(); ok || err != nil {
		t.Fatalf("a rewrite intent %+v (%v) is left after the compaction", rw, err)
	}
	checkSessions(t, "after the racing compaction", db, want)
	if rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		t.Fatalf("the next compaction: %+v, %v", rep, err)
	}
	checkSessions(t, "after the next compaction", db, want)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = openStore(t, dir, opts); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	checkSessions(t, "after reopen", db, want)
	db.Close()
	if rep, err := Check(dir, opts); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %+v, %v", rep, err)
	}
}

// TestUsageWhileCompactionDrops: Usage runs over and over while
// compactions remove segments (and rewrite others) under it; it never
// fails, and never reports a segment that is gone by then.
func TestUsageWhileCompactionDrops(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	stop := make(chan struct{})
	usageErr := make(chan error, 1)
	calls := 0
	go func() {
		defer close(usageErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := db.Usage(ctx); err != nil {
				usageErr <- err
				return
			}
			calls++
		}
	}()
	keep, err := db.Create(ctx, store.Header{ID: "keep", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var kept uint64
	dropped := 0
	for round := range 30 {
		id := fmt.Sprintf("gone%d", round)
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		for seq := uint64(0); seq < 150; seq += 10 { // segments of its own
			if err := h.Append(ctx, testgen.Events(seq, 10, 300)...); err != nil {
				t.Fatal(err)
			}
		}
		h.Close()
		if err := keep.Append(ctx, testgen.Events(kept, 3, 300)...); err != nil {
			t.Fatal(err)
		}
		kept += 3
		if err := keep.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if err := db.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.5})
		if err != nil {
			t.Fatalf("round %d: compact: %v", round, err)
		}
		dropped += len(rep.Dropped)
	}
	close(stop)
	if err := <-usageErr; err != nil {
		t.Fatalf("Usage while compacting: %v", err)
	}
	if dropped == 0 {
		t.Fatal("no segment was dropped")
	}
	t.Logf("%d Usage calls while compactions dropped %d segments", calls, dropped)
	if err := keep.Close(); err != nil {
		t.Fatal(err)
	}
	us, err := db.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var live int64
	for _, u := range us {
		live += u.LiveBytes
	}
	snap, err := db.Stat(ctx, "keep")
	if err != nil {
		t.Fatal(err)
	}
	if live != snap.SizeBytes {
		t.Errorf("Usage counts %d live bytes, the only session holds %d", live, snap.SizeBytes)
	}
}

// TestCompactSettlesLeftoverIntent: a rewrite intent left in the index by
// an earlier compaction of this process. If its rename never happened
// (the segment is still at the old generation: clearing the intent
// failed), the next compaction clears it and runs. If the rename happened
// (the index's offsets are stale), the next compaction applies the
// intent's moves and runs. An intent without moves (an older build's)
// cannot be finished: the compaction refuses with a clear error and
// poisons the store (the background compactor stops retrying); the reopen
// rebuilds the index and compacts.
func TestCompactSettlesLeftoverIntent(t *testing.T) {
	ctx := context.Background()
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1}
	t.Run("not-renamed", func(t *testing.T) {
		dir := checkedDir(t)
		db, err := openStore(t, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		want := interleavedStore(t, db)
		if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: -1}); err != nil {
			t.Fatal(err)
		}
		if err := db.idxBeginRewrite(index.Rewrite{Segment: 1, Generation: 1}); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Compact(ctx, CompactOptions{LiveRatio: 0.99})
		if err != nil || len(rep.Rewritten) == 0 {
			t.Fatalf("compact over an intent whose rename never happened: %+v, %v", rep, err)
		}
		if _, ok, _ := db.idxRewrite(); ok {
			t.Error("an intent is left")
		}
		checkSessions(t, "after compaction", db, want)
	})
	for _, older := range []bool{false, true} {
		t.Run(fmt.Sprintf("renamed/older-build=%v", older), func(t *testing.T) {
			dir := checkedDir(t)
			db, err := openStore(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := interleavedStore(t, db)
			db.knobs.rewrite = func(uint64) error { return errHook } // stops after the rename
			_, err = db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
			db.knobs.rewrite = nil
			if !errors.Is(err, errHook) {
				t.Fatalf("compact = %v, want the hook's error", err)
			}
			if older { // what an older build leaves: no moves
				rw, _, _ := db.idxRewrite()
				if err := db.idxClearRewrite(); err != nil {
					t.Fatal(err)
				}
				if err := db.idxBeginRewrite(index.Rewrite{Segment: rw.Segment, Generation: rw.Generation}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := db.Compact(ctx, CompactOptions{LiveRatio: 0.99})
			switch {
			case older && (err == nil || !strings.Contains(err.Error(), "index does not know its offsets")):
				t.Fatalf("compact over a landed rewrite without moves: %v, want a refusal", err)
			case older && !db.poisoned():
				t.Error("the store is not marked failed")
			case !older && err != nil:
				t.Fatalf("compact over a landed rewrite: %+v, %v; want it finished and the compaction run", rep, err)
			case !older:
				if _, ok, _ := db.idxRewrite(); ok {
					t.Error("an intent is left")
				}
			}
			checkSessions(t, "after the second compaction", db, want)
			db.Close()
			if db, err = openStore(t, dir, opts); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkSessions(t, "after reopen", db, want)
			// (Frames of deleted sessions whose headers the cut compaction
			// removed stay: the plan cannot attribute them.)
			if rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
				t.Fatalf("compact after reopen: %+v, %v", rep, err)
			}
			checkSessions(t, "after compaction", db, want)
		})
	}
}

// TestCompactRewriteIndexFailure: the index refuses the relocation after
// the rename (here its intent is gone, as a failed commit would refuse
// it): the compaction fails and poisons the store, reads of sessions whose
// frames come from the index go on with the right events (from the old
// file, which matches the index), and the reopen rebuilds the index.
func TestCompactRewriteIndexFailure(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: -1}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := interleavedStore(t, db)
	db.Close()
	if db, err = openStore(t, dir, opts); err != nil { // nothing loaded: reads take their frames from the index
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	var intent index.Rewrite
	db.knobs.rewrite = func(uint64) error {
		intent, _, _ = db.idxRewrite()
		return db.idxClearRewrite()
	}
	_, err = db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
	db.knobs.rewrite = nil
	if err == nil || !db.poisoned() {
		t.Fatalf("compact with a failing index: %v (poisoned %v)", err, db.poisoned())
	}
	checkSessions(t, "after the failed relocation", db, want)
	// What a failed commit leaves: the intent.
	if err := db.idxBeginRewrite(intent); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if db, err = openStore(t, dir, opts); err != nil {
		t.Fatal(err)
	}
	checkSessions(t, "after reopen", db, want)
	if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		t.Fatal(err)
	}
	checkSessions(t, "after compaction", db, want)
}

// TestCompactStressWithIndex: writers delete, create again, append to and
// migrate sessions (ids reused, so keys move between incarnations) while
// compactions with rewrites and Usage run in a loop and the index
// checkpoints every few milliseconds. No compaction may fail; after Close
// and a reopen every acknowledged event is there byte for byte, deleted
// sessions are gone, and Check agrees. Run with -race.
func TestCompactStressWithIndex(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 1 << 10, NoPreallocate: true, CompactInterval: -1, IndexInterval: 2 * time.Millisecond}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	const writers, ops = 4, 120
	models := make([]map[string][]event.Event, writers)
	errs := make(chan error, writers+1)
	var wg sync.WaitGroup
	for w := range writers {
		models[w] = map[string][]event.Event{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- stressWriter(ctx, db, w, ops, models[w])
		}()
	}
	stop := make(chan struct{})
	var compactions, rewrites, drops int
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rep, err := db.Compact(ctx, CompactOptions{Roll: compactions%2 == 0, LiveRatio: 0.9})
			if err != nil {
				errs <- fmt.Errorf("compaction %d: %w", compactions, err)
				return
			}
			compactions++
			rewrites += len(rep.Rewritten)
			drops += len(rep.Dropped)
			if _, err := db.Usage(ctx); err != nil {
				errs <- fmt.Errorf("usage: %w", err)
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		db.Close()
		return
	}
	t.Logf("%d compactions: %d rewrites, %d drops", compactions, rewrites, drops)
	want := map[string][]event.Event{}
	for _, m := range models {
		maps.Copy(want, m)
	}
	checkSessions(t, "before close", db, want)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = openStore(t, dir, opts); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	checkSessions(t, "after reopen", db, want)
	if _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); err != nil {
		t.Fatalf("compact after reopen: %v", err)
	}
	db.Close()
	if rep, err := Check(dir, opts); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %+v, %v", rep, err)
	}
	if db, err = openStore(t, dir, opts); err != nil {
		t.Fatalf("second reopen: %v", err)
	}
	defer db.Close()
	checkSessions(t, "after compacting the reopened store", db, want)
}

// stressWriter runs ops operations on three ids of its own, recording in
// model what each acknowledged: a session created (and closed: flushed),
// appended to, deleted, or migrated from a v2 log.
func stressWriter(ctx context.Context, db *DB, w, ops int, model map[string][]event.Event) error {
	r := rand.New(rand.NewPCG(uint64(w), 11))
	for op := range ops {
		id := fmt.Sprintf("w%d-%d", w, r.IntN(3))
		evs, exists := model[id]
		switch {
		case !exists && r.IntN(4) == 0: // a v2 session, migrated at once
			src := testgen.V2Turns("", 1+r.IntN(8))
			h, err := db.Create(ctx, store.Header{Version: 2, ID: id, CreatedAt: 1})
			if err != nil {
				return fmt.Errorf("op %d: create v2 %s: %w", op, id, err)
			}
			if err := h.Append(ctx, src...); err != nil {
				return err
			}
			if err := h.Close(); err != nil {
				return err
			}
			if model[id], err = recovery.MigrateV2(id, src); err != nil {
				return err
			}
			if _, err := db.Migrate(ctx, id); err != nil {
				return fmt.Errorf("op %d: migrate %s: %w", op, id, err)
			}
		case !exists:
			h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
			if err != nil {
				return fmt.Errorf("op %d: create %s: %w", op, id, err)
			}
			add := testgen.Events(0, 1+r.IntN(20), 100+r.IntN(300))
			if err := h.Append(ctx, add...); err != nil {
				return err
			}
			if err := h.Close(); err != nil {
				return err
			}
			model[id] = add
		case r.IntN(3) == 0:
			if err := db.Delete(ctx, id); err != nil {
				return fmt.Errorf("op %d: delete %s: %w", op, id, err)
			}
			delete(model, id)
		default:
			h, err := db.Open(ctx, id, store.Write)
			if err != nil {
				return fmt.Errorf("op %d: open %s: %w", op, id, err)
			}
			add := testgen.Events(uint64(len(evs)), 1+r.IntN(20), 100+r.IntN(300))
			if err := h.Append(ctx, add...); err != nil {
				return err
			}
			if err := h.Close(); err != nil {
				return err
			}
			model[id] = append(evs, add...)
		}
	}
	return nil
}
