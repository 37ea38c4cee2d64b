package engine

// Internal tests: they set db.knobs.rewrite to stop a compaction between a
// rewrite's rename and its index update.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// interleavedStore writes 8 sessions round-robin (so that every segment
// holds several of them) and deletes the even ones. It returns the events
// of the live ones.
func interleavedStore(t *testing.T, db *DB) map[string][]event.Event {
	t.Helper()
	ctx := context.Background()
	hs := map[string]*Handle{}
	want := map[string][]event.Event{}
	for i := range 8 {
		id := fmt.Sprintf("s%d", i)
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		hs[id] = h
	}
	for round := range 6 {
		for i := range 8 {
			id := fmt.Sprintf("s%d", i)
			evs := testgen.Events(uint64(round*10), 10, 300)
			if err := hs[id].Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			if err := hs[id].Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], evs...)
		}
	}
	for i := range 8 {
		id := fmt.Sprintf("s%d", i)
		hs[id].Close()
		if i%2 == 0 {
			if err := db.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			delete(want, id)
		}
	}
	return want
}

func checkSessions(t *testing.T, label string, db *DB, want map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	snaps, err := db.List(ctx)
	if err != nil {
		t.Fatalf("%s: list: %v", label, err)
	}
	if len(snaps) != len(want) {
		t.Fatalf("%s: %d sessions, want %d", label, len(snaps), len(want))
	}
	for id, evs := range want {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("%s: open %s: %v", label, id, err)
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatalf("%s: read %s: %v", label, id, err)
		}
		if len(got) != len(evs) {
			t.Fatalf("%s: %s has %d events, want %d", label, id, len(got), len(evs))
		}
		for i := range got {
			if got[i].Seq != evs[i].Seq || got[i].Type != evs[i].Type || string(got[i].Data) != string(evs[i].Data) {
				t.Fatalf("%s: %s event %d differs", label, id, i)
			}
		}
	}
}

var errHook = errors.New("stopped by the test hook")

// TestRewriteIndexIntent: with the index on the OS, a compaction stopped
// after a rewritten segment is in place but before the index knows its
// offsets leaves the intent in the index; the next open sees the segment's
// new generation, rebuilds the index and serves every live event. Stopped
// before the rename (the temporary file half built), nothing changed: the
// open removes the temporary file and clears the intent.
func TestRewriteIndexIntent(t *testing.T) {
	ctx := context.Background()
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true}
	for _, stage := range []string{"after-rename", "completed"} {
		t.Run(stage, func(t *testing.T) {
			dir := checkedDir(t)
			db, err := openStore(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := interleavedStore(t, db)
			if stage == "after-rename" {
				db.knobs.rewrite = func(uint64) error { return errHook }
				defer func() { db.knobs.rewrite = nil }()
			}
			rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
			if stage == "after-rename" {
				if !errors.Is(err, errHook) {
					t.Fatalf("compact = %+v, %v; want the hook's error", rep, err)
				}
				if rw, ok, _ := db.idxRewrite(); !ok || rw.Generation != 1 {
					t.Fatalf("rewrite intent = %+v, %v; want one of generation 1", rw, ok)
				}
			} else if err != nil || len(rep.Rewritten) == 0 {
				t.Fatalf("compact = %+v, %v; want rewrites", rep, err)
			}
			checkSessions(t, "before reopen", db, want)
			db.knobs.rewrite = nil
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = openStore(t, dir, opts)
			if err != nil {
				t.Fatalf("reopen: %v", err)
			}
			if _, ok, _ := db.idxRewrite(); ok {
				t.Error("the rewrite intent survived the reopen")
			}
			checkSessions(t, "after reopen", db, want)
			if rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9}); err != nil {
				t.Fatalf("compact after reopen: %+v, %v", rep, err)
			}
			checkSessions(t, "after a second compaction", db, want)
			db.Close()
			if rep, err := Check(dir, opts); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("check: %+v, %v", rep, err)
			}
		})
	}
	t.Run("before-rename", func(t *testing.T) {
		dir := checkedDir(t)
		db, err := openStore(t, dir, opts)
		if err != nil {
			t.Fatal(err)
		}
		want := interleavedStore(t, db)
		db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: -1})
		// What a crash during segment.Rewrite leaves: the intent, and a
		// temporary file beside the untouched segment.
		ids, _ := segment.List(nil, dir)
		if err := db.idxBeginRewrite(index.Rewrite{Segment: ids[0], Generation: 1}); err != nil {
			t.Fatal(err)
		}
		tmp := dir + "/" + segment.RewriteName(ids[0])
		if err := os.WriteFile(tmp, []byte("half a segment"), 0o644); err != nil {
			t.Fatal(err)
		}
		db.Close()
		db, err = openStore(t, dir, opts)
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		defer db.Close()
		if _, ok, _ := db.idxRewrite(); ok {
			t.Error("the rewrite intent survived the reopen")
		}
		if _, err := os.Stat(tmp); err == nil {
			t.Error("the unfinished rewrite was not removed")
		}
		checkSessions(t, "after reopen", db, want)
	})
}

// TestRewriteWhileReading: reads of the live sessions and appends to
// another go on while compactions rewrite the segments under them; every
// read returns the right events (run with -race).
func TestRewriteWhileReading(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	want := interleavedStore(t, db)
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var reads [8]int
	done := make(chan struct{})
	workers := 0
	for id, evs := range want {
		workers++
		go func() {
			defer func() { done <- struct{}{} }()
			h, err := db.Open(ctx, id, store.Read)
			if err != nil {
				errs <- err
				return
			}
			defer h.Close()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				off := n % len(evs)
				got, err := h.Read(ctx, off, 7)
				if err != nil {
					errs <- fmt.Errorf("read %s at %d: %w", id, off, err)
					return
				}
				for i := range got {
					if string(got[i].Data) != string(evs[off+i].Data) {
						errs <- fmt.Errorf("read %s: event %d differs", id, off+i)
						return
					}
				}
				reads[id[1]-'0']++
			}
		}()
	}
	workers++
	appended := uint64(0)
	go func() {
		defer func() { done <- struct{}{} }()
		h, err := db.Create(ctx, store.Header{ID: "busy", CreatedAt: 1})
		if err != nil {
			errs <- err
			return
		}
		defer h.Close()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := h.Append(ctx, testgen.Events(appended, 4, 250)...); err != nil {
				errs <- err
				return
			}
			appended += 4
		}
	}()
	var rewritten int
	for round := range 4 {
		rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
		if err != nil {
			t.Fatalf("compaction %d: %v", round, err)
		}
		rewritten += len(rep.Rewritten)
	}
	close(stop)
	for range workers {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if rewritten == 0 {
		t.Fatal("no segment was rewritten")
	}
	t.Logf("%d segment rewrites under %v reads and %d appended events", rewritten, reads, appended)
	h, err := db.Open(ctx, "busy", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.Read(ctx, 0, -1)
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(evs)) != appended {
		t.Errorf("busy has %d events, want %d", len(evs), appended)
	}
}

// TestCompactNothingPending: a compaction right after an open (nothing
// pending for the index) still moves the index checkpoint past the
// segments it removes or rewrites, so the next open does not start
// reading inside one.
func TestCompactNothingPending(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true}
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := interleavedStore(t, db)
	db.Close()
	for round := range 2 {
		if db, err = openStore(t, dir, opts); err != nil {
			t.Fatal(err)
		}
		rep, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
		if err != nil || (round == 0 && len(rep.Rewritten) == 0) {
			t.Fatalf("round %d: compact = %+v, %v", round, rep, err)
		}
		db.Close()
		if db, err = openStore(t, dir, opts); err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		checkSessions(t, fmt.Sprintf("round %d", round), db, want)
		db.Close()
	}
}
