package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// Two DBs in one process hold their locks as two processes do (the byte
// locks are per open file): these tests are of several writing processes.

// TestTwoWriters: two writing DBs on one store see each other's flushed
// sessions, hold their leases against each other (a write open of a
// session the other holds fails with ErrAlreadyOwned, a create of an ID
// the other made or holds with ErrSessionExists), hand a session over
// once its handle closes, delete each other's sessions, and a reopen
// finds everything.
func TestTwoWriters(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, &Options{CompactInterval: -1})
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})

	a, err := w1.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantA := testgen.Events(0, 3, 100)
	appendFlushed(t, a, wantA...)
	b, err := w2.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantB := testgen.Events(0, 2, 100)
	appendFlushed(t, b, wantB...)

	for _, c := range []struct {
		db   *DB
		id   string
		want []event.Event
	}{{w1, "b", wantB}, {w2, "a", wantA}} {
		h, err := c.db.Open(ctx, c.id, store.Read)
		if err != nil {
			t.Fatalf("the other writer's session %s: %v", c.id, err)
		}
		readsAll(t, "the other writer's session "+c.id, h, c.want)
	}
	if _, err := w2.Create(ctx, store.Header{ID: "a", CreatedAt: 1}); !errors.Is(err, store.ErrSessionExists) {
		t.Fatalf("create of an ID the other writer made: %v, want ErrSessionExists", err)
	}
	if _, err := w2.Open(ctx, "a", store.Write); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Fatalf("write open of a session the other writer holds: %v, want ErrAlreadyOwned", err)
	}
	if err := w2.Delete(ctx, "a"); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Fatalf("delete of a session the other writer holds: %v, want ErrAlreadyOwned", err)
	}
	// A creation not yet written holds its ID too.
	c, err := w1.Create(ctx, store.Header{ID: "c", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Create(ctx, store.Header{ID: "c", CreatedAt: 1}); !errors.Is(err, store.ErrSessionExists) {
		t.Fatalf("create of an ID the other writer is creating: %v, want ErrSessionExists", err)
	}
	c.Close() // never written: it vanishes

	// The session changes hands: the new writer continues after the last
	// event the old one flushed.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2, err := w2.Open(ctx, "a", store.Write)
	if err != nil {
		t.Fatalf("write open once the other writer closed it: %v", err)
	}
	more := testgen.Events(3, 2, 100)
	appendFlushed(t, a2, more...)
	wantA = append(wantA, more...)
	ra, err := w1.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "a continued by the other writer", ra, wantA)

	// Deletes cross too.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w1.Delete(ctx, "b"); err != nil {
		t.Fatalf("delete of the other writer's session: %v", err)
	}
	if _, err := w2.Stat(ctx, "b"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("stat of a session the other writer deleted: %v", err)
	}
	if err := a2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	db := liveOpen(t, dir, nil)
	h, err := db.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "a after a reopen", h, wantA)
	if _, err := db.Stat(ctx, "b"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("b after a reopen: %v", err)
	}
}

// TestWritersInterleaved: three writing DBs append and flush their own
// sessions concurrently through many segment rolls and index
// checkpoints; every DB sees every flushed event, and after all close, a
// reopen (with and without the index) and Check find exactly the
// events, in order.
func TestWritersInterleaved(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{CompactInterval: -1, SegmentSize: 64 << 10, IndexInterval: 5 * time.Millisecond}
	dbs := []*DB{liveOpen(t, dir, opts), liveOpen(t, dir, opts), liveOpen(t, dir, opts)}
	const sessions, rounds = 4, 60
	want := map[string][]event.Event{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, db := range dbs {
		for j := range sessions {
			id := fmt.Sprintf("w%d-s%d", i, j)
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
				if err != nil {
					t.Error(err)
					return
				}
				defer h.Close()
				var seq uint64
				for r := range rounds {
					evs := testgen.Events(seq, 1+r%3, 300)
					seq += uint64(len(evs))
					if err := h.Append(ctx, evs...); err != nil {
						t.Error(err)
						return
					}
					if err := h.Flush(ctx); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					want[id] = append(want[id], evs...)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	check := func(label string, db *DB) {
		t.Helper()
		for id, evs := range want {
			h, err := db.Open(ctx, id, store.Read)
			if err != nil {
				t.Fatalf("%s: %s: %v", label, id, err)
			}
			readsAll(t, label+": "+id, h, evs)
		}
	}
	for i, db := range dbs {
		check(fmt.Sprintf("writer %d", i), db)
	}
	if ids, _ := segment.List(vfs.Default, dir); len(ids) < 4 {
		t.Fatalf("%d segments: the test meant to cross rolls", len(ids))
	}
	for _, db := range dbs {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	check("reopened", liveOpen(t, dir, &Options{ReadOnly: true}))
	check("reopened without the index", liveOpen(t, dir, &Options{ReadOnly: true, NoIndex: true}))
	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v %v", rep.Problems, err)
	}
}

// dieNow stands for the death of db's process: nothing starts any more
// (its handles' window flushes), its goroutines stop (the preparer, the
// checkpointer), then its locks and shared memory go. Its
// files stay open (closeFiles) for the test to release.
func dieNow(db *DB) {
	db.gate.shut() // nothing starts any more: the handles' window flushes
	close(db.stop)
	db.stopCancel()
	db.wg.Wait()
	db.shared.Close()
}

// TestWriterDiesHoldingASession: a writer that placed frames and died
// before syncing them (its leases and locks die with it) leaves them for
// the next owner: the next write open of its session makes them durable
// and continues after them, never beside them.
func TestWriterDiesHoldingASession(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1, err := openStore(t, dir, &Options{IndexInterval: time.Hour, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	w2 := liveOpen(t, dir, &Options{CompactInterval: -1})
	h, err := w1.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 3, 100)
	appendFlushed(t, h, want...)
	placed := testgen.Events(3, 2, 100)
	if err := h.Append(ctx, placed...); err != nil {
		t.Fatal(err)
	}
	if err := h.prepareFlush(ctx); err != nil { // placed, not synced
		t.Fatal(err)
	}
	if _, err := w2.Open(ctx, "a", store.Write); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Fatalf("write open while the writer lives: %v", err)
	}
	dieNow(w1) // the process dies: its locks go with it
	defer w1.closeFiles()
	if snap, err := w2.Stat(ctx, "a"); err != nil || snap.EventCount != 3 {
		t.Fatalf("before the take-over, another process sees what was flushed: %+v, %v", snap, err)
	}
	h2, err := w2.Open(ctx, "a", store.Write)
	if err != nil {
		t.Fatalf("write open after the writer died: %v", err)
	}
	want = append(want, placed...) // placed by the dead writer: kept
	next := testgen.Events(5, 2, 100)
	appendFlushed(t, h2, next...)
	want = append(want, next...)
	readsAll(t, "after the take-over", h2, want)
	h2.Close()
	w2.Close()
	db := liveOpen(t, dir, nil)
	r, err := db.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "reopened", r, want)
}

// TestPlacerDiesMidWrite: a process killed in the middle of its pwrite
// leaves bytes past the tail; here, the worst case, a whole valid frame
// that starts exactly where the next placement (a tombstone) ends. The
// next placement clears them before it writes, so that no reopen reads
// them as part of the log.
func TestPlacerDiesMidWrite(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1, NoPreallocate: true})
	h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 3, 100)
	appendFlushed(t, h, want...)
	x, err := w.Create(ctx, store.Header{ID: "x", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, x, testgen.Events(0, 1, 10)...)
	x.Close()
	// The dead placer's write: junk as long as x's tombstone, then a copy
	// of a's last frame (seq 0..2: a reopen would find a's events twice).
	seg, off := coord.SplitPosition(w.shared.Word(coord.Tail).Load())
	path := filepath.Join(dir, segment.Name(seg))
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref := w.mu.sessions["a"].frames[0]
	tomb, err := w.encoder(false).Delete("x", 1)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, tomb.Size())
	for i := range junk {
		junk[i] = 0xa5
	}
	dead := append(junk, data[ref.off:ref.off+int64(ref.size)]...)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(dead, off); err != nil {
		t.Fatal(err)
	}
	f.Close()
	w.shared.Word(coord.Placing).Store(coord.Position(seg, off+int64(len(dead))))

	if err := w.Delete(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	h.Close()
	w.Close()
	db := liveOpen(t, dir, &Options{NoIndex: true})
	r, err := db.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "a after a placer died mid-write", r, want)
	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check: %v %v", rep.Problems, err)
	}
}

// TestOlderBuildWriter: a writer of a build that writes alone (it holds
// the build byte exclusive) keeps this build's writers out with ErrLocked
// naming its pid.
func TestOlderBuildWriter(t *testing.T) {
	dir := t.TempDir()
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	old, err := vfs.Default.OpenLocks(filepath.Join(dir, coord.LocksFile))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if ok, err := old.TryLock(int64(coord.LockBuild), true); err != nil || !ok {
		t.Fatalf("older build's lock: %v %v", ok, err)
	}
	r.shared.Word(coord.PID).Store(4242)
	_, err = openStore(t, dir, nil)
	var le *store.LockError
	if !errors.Is(err, store.ErrLocked) || !errors.As(err, &le) || le.PID != 4242 {
		t.Fatalf("open beside an older build's writer: %v, want ErrLocked naming pid 4242", err)
	}
}

// TestFollowerReportsDamageBelowDurable: a frame another process made
// durable that a follower finds damaged is corruption, reported with its
// place, never taken for a torn tail and skipped.
func TestFollowerReportsDamageBelowDurable(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	w := liveOpen(t, dir, &Options{CompactInterval: -1, NoPreallocate: true})
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	h, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(0, 2, 100)...)
	if _, err := r.Stat(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(2, 2, 100)...)
	last := w.mu.sessions["a"].frames
	ref := last[len(last)-1]
	f, err := os.OpenFile(filepath.Join(dir, segment.Name(ref.seg)), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff, 0xff}, ref.off+int64(ref.size)/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = r.Stat(ctx, "a")
	var ce *store.CorruptionError
	if !errors.As(err, &ce) || ce.Offset != ref.off {
		t.Fatalf("stat past a damaged durable frame: %v, want a CorruptionError at %d", err, ref.off)
	}
	// The writer indexed the frame as it placed it (it does not read its
	// own frames back): the damage, made after the frame was
	// acknowledged, is corruption to the next open too, never a torn
	// tail cut with the two events acknowledged in it.
	expectProblem(t, dir, "frame checksum mismatch, below the durable offset")
}
