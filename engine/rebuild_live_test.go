package engine

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
)

// TestRebuildIndexBesideWriters: RebuildIndex (seglog check --repair) of a
// store two writing processes have open, one of them checkpointing, and a
// reader: the checkpointer hands the index over, the new index replaces
// the old one (a copy of it in quarantine/), and every process goes on
// reading and writing; a checkpoint by one of them lands in the new
// index, and a reopen from the new index alone (no replay of what it
// covers) and Check find every event.
func TestRebuildIndexBesideWriters(t *testing.T) {
	dir := checkedDir(t)
	opts := func() *Options {
		o := besideOpts()
		o.IndexInterval = 5 * time.Millisecond
		return o
	}
	w1 := liveOpen(t, dir, opts()) // the checkpointer
	w2 := liveOpen(t, dir, opts())
	hs, want := mixedSessions(t, w1, w2)
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	if err := RebuildIndex(dir, opts()); err != nil {
		t.Fatalf("rebuild beside writers: %v", err)
	}
	q, _ := os.ReadDir(filepath.Join(dir, QuarantineDir))
	if len(q) != 1 {
		t.Fatalf("quarantine holds %d files, want the old index", len(q))
	}
	checkBoth(t, "after the rebuild", []*DB{w1, w2, r}, want)
	writeMore(t, hs, want, true)
	// Some process takes the checkpoints over again and indexes the new
	// frames into the new index.
	durable := w2.durablePos()
	for deadline := time.Now().Add(10 * time.Second); ; {
		cp, err := w2.index.checkpoint()
		if err != nil {
			t.Fatal(err)
		}
		if coord.Position(cp.Segment, cp.Offset) >= durable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no checkpoint into the new index: at %d/%d, durable %x", cp.Segment, cp.Offset, durable)
		}
		time.Sleep(5 * time.Millisecond)
	}
	checkBoth(t, "after more writes", []*DB{w2, w1, r}, want)
	r.Close()
	w1.Close()
	w2.Close()
	reopenAndCheck(t, dir, opts(), want)
}

// TestRebuildDamagedIndexBesideWriters: the index file of a live store is
// overwritten with garbage (as a bad disk or a stray tool would): the
// writing processes go on (their checkpoints fail), RebuildIndex replaces
// it beside them, and checkpoints, reads and a reopen work again.
func TestRebuildDamagedIndexBesideWriters(t *testing.T) {
	dir := checkedDir(t)
	opts := func() *Options {
		o := besideOpts()
		o.IndexInterval = 20 * time.Millisecond
		return o
	}
	w1 := liveOpen(t, dir, opts())
	w2 := liveOpen(t, dir, opts())
	hs, want := mixedSessions(t, w1, w2)
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(i * 7)
	}
	// (Put in place whole: a checkpoint never meets it half written.)
	if err := os.WriteFile(filepath.Join(dir, "garbage"), garbage, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "garbage"), filepath.Join(dir, "index.db")); err != nil {
		t.Fatal(err)
	}
	for _, w := range []*DB{w1, w2} { // they meet the damage first
		if err := w.checkpoint(); err == nil {
			t.Logf("a checkpoint into a damaged index did not fail")
		}
	}
	if err := RebuildIndex(dir, opts()); err != nil {
		t.Fatalf("rebuild of a damaged index beside writers: %v", err)
	}
	writeMore(t, hs, want, true)
	checkBoth(t, "after the rebuild", []*DB{w1, w2}, want)
	w1.Close()
	w2.Close()
	reopenAndCheck(t, dir, opts(), want)
}

// TestRebuildThatDiedWhileWaiting: a rebuild killed while it waited for
// the checkpointer left its request in shm; the checkpointer finds no
// process behind it (coord.LockWant is free), forgets it and goes on
// checkpointing, rather than stepping down for good.
func TestRebuildThatDiedWhileWaiting(t *testing.T) {
	dir := checkedDir(t)
	w := liveOpen(t, dir, besideOpts())
	hs, want := mixedSessions(t, w, w)
	for _, h := range hs {
		h.Close()
	}
	w.shared.Word(coord.IndexWant).Store(1)
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if !w.shared.HoldsIndex() || w.shared.Word(coord.IndexWant).Load() != 0 {
		t.Fatalf("after a dead rebuild's request: checkpointer %v, request %d; want the checkpointer to go on, the request gone",
			w.shared.HoldsIndex(), w.shared.Word(coord.IndexWant).Load())
	}
	checkBoth(t, "after", []*DB{w}, want)
}
