package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestCheckReadsAsOfOnePoint: a check beside a writing process reads the
// store as of its open (the durable position published then, and the index
// as the open read it), whatever the writer does between the open and the
// check's later reads (its checkOpened hook): each case ends with an index
// checkpoint, so that the index the check would read again has moved on.
// Before, the check read the index checkpoint again after its open (a
// checkpoint past the bound it read the segments up to: "log ends at X,
// before the durable offset Y"), and a session's frames on its first read
// (a session deleted, created again, migrated or forked over since: "not
// found"). fuzz.TestCheckBesideWriters meets them at random beside writer
// processes.
func TestCheckReadsAsOfOnePoint(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		// before makes what the check's open finds; after runs between
		// the open and the rest of the check.
		before, after func(t *testing.T, w *DB)
	}{
		{"checkpoint past the bound", nil, func(t *testing.T, w *DB) {
			writeSession(t, w, "a", 20)
		}},
		{"deleted", func(t *testing.T, w *DB) {
			writeSession(t, w, "b", 10)
		}, func(t *testing.T, w *DB) {
			if err := w.Delete(ctx, "b"); err != nil {
				t.Fatal(err)
			}
		}},
		{"created again", func(t *testing.T, w *DB) {
			writeSession(t, w, "b", 10)
		}, func(t *testing.T, w *DB) {
			if err := w.Delete(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			writeSession(t, w, "b", 3)
		}},
		{"migrated", func(t *testing.T, w *DB) {
			h, err := w.Create(ctx, store.Header{Version: 2, ID: "v", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			appendFlushed(t, h, testgen.V2Turns("", 2)...)
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, w *DB) {
			if _, err := w.Migrate(ctx, "v"); err != nil {
				t.Fatal(err)
			}
		}},
		{"forked, parent deleted", func(t *testing.T, w *DB) {
			writeSession(t, w, "p", 10)
			h, err := w.Fork(ctx, "p", 6, store.Header{ID: "f", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, w *DB) {
			for _, id := range []string{"f", "p"} {
				if err := w.Delete(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := checkedDir(t)
			w := liveOpen(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
			writeSession(t, w, "base", 5)
			if c.before != nil {
				c.before(t, w)
			}
			if err := w.checkpoint(); err != nil {
				t.Fatal(err)
			}
			tries := 0
			o := &Options{}
			o.testing.checkOpened = func() {
				if tries++; tries > 1 {
					return
				}
				c.after(t, w)
				if err := w.checkpoint(); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := Check(dir, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Problems {
				t.Errorf("check beside the writer: %s", p)
			}
			if tries != 1 {
				t.Errorf("the check ran %d times, want once (no compaction ran)", tries)
			}
		})
	}
}

// writeSession creates session id in w with n events, flushed, and closes
// it.
func writeSession(t *testing.T, w *DB, id string, n int) {
	t.Helper()
	h, err := w.Create(context.Background(), store.Header{ID: id, CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(0, n, 200)...)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCheckBesideCompactions: a writer compacts (a segment of a deleted
// session removed, a mostly dead one rewritten) while every try of the
// check reads (its checkOpened hook): the check starts over after each of
// its first checkFreeTries, then keeps compactions out for the next (the
// writer's Compact fails with ErrLocked), which reads the store as of one
// layout and finds no problem. Before, it started over up to openTries
// times, and returned the last try's report, read across a compaction.
func TestCheckBesideCompactions(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, besideOpts())
	writeSession(t, w, "keep", 30)
	n := 0
	compact := func() error {
		// A session of its own segments, deleted, and the active
		// segment sealed: the next Compact removes or rewrites them.
		n++
		id := fmt.Sprintf("gone-%d", n)
		writeSession(t, w, id, 150)
		writeSession(t, w, fmt.Sprintf("kept-%d", n), 5)
		if err := w.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
		rep, err := w.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.9})
		if err == nil && len(rep.Dropped)+len(rep.Rewritten) == 0 {
			t.Fatalf("compaction %d changed nothing: the check would not start over", n)
		}
		return err
	}
	var errs []error
	o := &Options{}
	o.testing.checkOpened = func() { errs = append(errs, compact()) }
	rep, err := Check(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Errorf("check beside compactions: %s", p)
	}
	if len(errs) != checkFreeTries+1 {
		t.Fatalf("the check made %d tries, want %d", len(errs), checkFreeTries+1)
	}
	for i, err := range errs[:checkFreeTries] {
		if err != nil {
			t.Errorf("compaction during try %d: %v", i+1, err)
		}
	}
	if err := errs[checkFreeTries]; !errors.Is(err, store.ErrLocked) {
		t.Errorf("compaction during the try that keeps them out: %v, want ErrLocked", err)
	}
	if _, err := w.Compact(ctx, CompactOptions{}); err != nil {
		t.Errorf("compaction after the check: %v", err)
	}
}

// TestCheckBesideAWriterThatJoins: no process has the store open when the
// check's open begins, so it reads with no bound; a writer opens it after
// that open and writes (its checkOpened hook). The rest of that try would
// read the segments past what the open read (a session the open does not
// serve: "the index lost it"): the check sees that a writer set the log up
// since, and checks again, bounded by what the writer publishes.
func TestCheckBesideAWriterThatJoins(t *testing.T) {
	dir := checkedDir(t)
	w, err := openStore(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	writeSession(t, w, "before", 5)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	tries := 0
	o := &Options{}
	o.testing.checkOpened = func() {
		if tries++; tries > 1 {
			return
		}
		w := liveOpen(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
		writeSession(t, w, "after", 5)
	}
	rep, err := Check(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Problems {
		t.Errorf("check beside a writer that joined: %s", p)
	}
	if tries != 2 {
		t.Errorf("the check made %d tries, want 2", tries)
	}
}

// TestCompactGivesWayToAWaitingCheck: while a check waits to keep
// compactions out (it holds coord.LockCheck shared), a compaction does not
// start (ErrLocked), so that the check gets coord.LockCompact once the
// compaction in progress ends, beside compactors that would otherwise
// hold it nearly all the time (in fuzz.TestCheckBesideWriters a check
// polling for it waited up to 20 s, and each retry of its open as long).
func TestCompactGivesWayToAWaitingCheck(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, besideOpts())
	writeSession(t, w, "a", 10)
	r, err := openStore(t, dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if ok, err := r.shared.TryLock(coord.LockCheck, false); err != nil || !ok {
		t.Fatalf("a check's LockCheck: %v, %v", ok, err)
	}
	if _, err := w.Compact(ctx, CompactOptions{}); !errors.Is(err, store.ErrLocked) {
		t.Errorf("compaction while a check waits: %v, want ErrLocked", err)
	}
	if err := r.shared.Unlock(coord.LockCheck); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Compact(ctx, CompactOptions{}); err != nil {
		t.Errorf("compaction once the check no longer waits: %v", err)
	}
}
