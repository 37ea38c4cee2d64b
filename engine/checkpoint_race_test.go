package engine

// Internal tests of the index checkpoint against appends in flight: they
// set db.knobs.appended / db.knobs.migrated to run a checkpoint in the window
// an append leaves, then "crash" by copying the store's files as they are
// (what a SIGKILL leaves: every written byte, nothing more).

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// crashCopy copies the files of the store in dir (not its lock) to a new
// directory, as a process crash would leave them.
func crashCopy(t *testing.T, dir string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		in, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		if err := out.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// The crash loses what is not durable: the active segment from the
	// durable position the writers published on.
	if b, err := os.ReadFile(filepath.Join(dir, coord.ShmFile)); err == nil && len(b) >= coord.ShmSize &&
		binary.LittleEndian.Uint64(b[coord.Magic:]) == coord.MagicValue {
		seg, off := coord.SplitPosition(binary.LittleEndian.Uint64(b[coord.Durable:]))
		p := filepath.Join(dst, segment.Name(seg))
		if fi, err := os.Stat(p); err == nil && fi.Size() > off {
			if err := os.Truncate(p, off); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dst
}

// CrashCopy is crashCopy for the external tests (package engine_test).
func CrashCopy(t *testing.T, dir string) string { return crashCopy(t, dir) }

// checkpointInWindow starts a checkpoint and waits until it finishes or
// has plainly blocked (it must wait for the append in progress).
func checkpointInWindow(db *DB) <-chan error {
	done := make(chan error, 1)
	go func() { done <- db.checkpoint() }()
	return done
}

// TestCheckpointDuringAppend: a frame can become durable inside its own
// append, before it is registered for the index (here another session's
// flush syncs it; a roll or a buffer spill does the same). A checkpoint
// in that window must not move past it, or a crash afterwards loses
// acknowledged events (the index skips them and replay starts after them)
// or leaves events "before their header".
func TestCheckpointDuringAppend(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{IndexInterval: time.Hour, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// An indexed session first, so that the index has a checkpoint.
	a, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, testgen.Event(0, 200)); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	// A flushed frame of a that the index has not taken yet: the next
	// checkpoint has something to store, and stores the durable offset.
	a, err = db.Open(ctx, "a", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Append(ctx, testgen.Event(1, 200)); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	var done <-chan error
	fired := false
	db.knobs.appended = func() {
		if fired {
			return
		}
		fired = true
		// Another session's flush makes this frame durable now.
		if err := db.sync(); err != nil {
			t.Error(err)
		}
		done = checkpointInWindow(db)
		select {
		case err := <-done: // the bug: it did not wait for this append
			ch := make(chan error, 1)
			ch <- err
			done = ch
		case <-time.After(200 * time.Millisecond):
		}
	}
	defer func() { db.knobs.appended = nil }()

	b, err := db.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []event.Event{testgen.Event(0, 300), testgen.Event(1, 300)}
	if err := b.Append(ctx, want...); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil { // acknowledged
		t.Fatal(err)
	}
	if !fired {
		t.Fatal("hook did not run")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A crash now must keep b (the suspicion of silent loss: its frames
	// before the checkpoint, but not in the index).
	early := crashCopy(t, dir)
	dbe, err := openStore(t, early, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	if snap, err := dbe.Stat(ctx, "b"); err != nil || snap.EventCount != 2 {
		t.Fatalf("acknowledged session b after a crash: %+v, %v (want 2 events)", snap, err)
	}
	dbe.Close()
	// A later flush of b, not yet checkpointed, then the crash.
	if err := b.Append(ctx, testgen.Event(2, 300)); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, testgen.Event(2, 300))
	crashed := crashCopy(t, dir)

	db2, err := openStore(t, crashed, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer db2.Close()
	h, err := db2.Open(ctx, "b", store.Read)
	if err != nil {
		t.Fatalf("acknowledged session lost: %v", err)
	}
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("session b after the crash (-acknowledged +read):\n%s", diff)
	}
}

// TestCheckpointDuringMigration: a migration's old incarnation is erased
// in memory as soon as its frames are appended, but it is the session on
// disk until the migration is durable as a whole. A checkpoint taken in
// between (the migration's header already synced by a spill) must still
// index the old incarnation's unindexed frames; otherwise a crash before
// the migration's last sync abandons the migration and the session is
// gone.
func TestCheckpointDuringMigration(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{IndexInterval: time.Hour, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.checkpoint(); err != nil { // an (empty) indexed state
		t.Fatal(err)
	}
	// A v2 session large enough that its migration spills the write
	// buffer (1 MiB) twice: the header is synced before the last part.
	old := testgen.V2Filler(0, 8000, 1000) // ~2.7 MB compressed; v2-valid (no step/start: no head)
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "m", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, old...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil { // acknowledged, not yet indexed
		t.Fatal(err)
	}

	var crashed string
	db.knobs.migrated = func() {
		if err := db.checkpoint(); err != nil {
			t.Error(err)
		}
		crashed = crashCopy(t, dir) // the migration's last part is not written yet
	}
	defer func() { db.knobs.migrated = nil }()
	if _, err := db.Migrate(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	if crashed == "" {
		t.Fatal("hook did not run")
	}

	db2, err := openStore(t, crashed, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer db2.Close()
	snap, err := db2.Stat(ctx, "m")
	if err != nil {
		t.Fatalf("session lost by a migration cut short: %v", err)
	}
	if snap.EventCount != uint64(len(old)) { // migrated or not: the same events (no step/start, no head)
		t.Fatalf("session m: %d events in format %d, want the %d it had", snap.EventCount, snap.Header.Version, len(old))
	}
}

// TestCheckpointDuringDelete: a deleted session is gone from memory as
// soon as its tombstone is appended, but on disk only once the tombstone
// is durable. A checkpoint in between must index the session's unindexed
// frames, or a crash before the tombstone's sync loses the (undeleted,
// acknowledged) session.
func TestCheckpointDuringDelete(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := openStore(t, dir, &Options{IndexInterval: time.Hour, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "d"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, testgen.Events(0, 3, 200)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil { // acknowledged, not indexed
			t.Fatal(err)
		}
	}
	var crashed string
	db.knobs.deleted = func() {
		if err := db.checkpoint(); err != nil {
			t.Error(err)
		}
		crashed = crashCopy(t, dir) // the tombstone is not written yet
	}
	defer func() { db.knobs.deleted = nil }()
	if err := db.Delete(ctx, "d"); err != nil {
		t.Fatal(err)
	}
	db2, err := openStore(t, crashed, &Options{CompactInterval: -1})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer db2.Close()
	for _, id := range []string{"a", "d"} {
		if snap, err := db2.Stat(ctx, id); err != nil || snap.EventCount != 3 {
			t.Fatalf("session %s after a crash before its Delete was durable: %+v, %v (want 3 events)", id, snap.EventCount, err)
		}
	}
}
