package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestLiveReader: a read-only DB beside a writing one on the same store
// (two DBs in one process hold their locks as two processes do) sees
// every flushed event at once, never an unflushed one, follows new and
// deleted sessions and a compaction, and Check agrees with the writer
// while it writes.
func TestLiveReader(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1})
	a, err := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 3, 100)
	a.Append(ctx, want...)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := openStore(t, dir, &Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	defer r.Close()
	ra, err := r.Open(ctx, "a", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	readsAll(t, "reader after open", ra, want)

	more := testgen.Events(3, 2, 100)
	a.Append(ctx, more...) // appended, not flushed: never seen by another process
	if snap, err := r.Stat(ctx, "a"); err != nil || snap.EventCount != 3 {
		t.Fatalf("reader before the flush: %+v, %v; want 3 events", snap, err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	readsAll(t, "reader after the flush", ra, want) // the freshness rule, across DBs

	b, err := w.Create(ctx, store.Header{ID: "b", CreatedAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	bWant := testgen.Events(0, 40, 300)
	b.Append(ctx, bWant...)
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if list, err := r.List(ctx); err != nil || len(list) != 2 {
		t.Fatalf("reader list after a create: %d sessions, %v", len(list), err)
	}
	rb, err := r.Open(ctx, "b", store.Read)
	if err != nil {
		t.Fatalf("reader opens a session created after it opened: %v", err)
	}
	readsAll(t, "b", rb, bWant)

	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check beside a writer: %+v, %v", rep, err)
	}

	// A delete, then a compaction that removes and rewrites segments.
	a.Close()
	if err := w.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Stat(ctx, "a"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("reader stat of a deleted session: %v", err)
	}
	if _, err := w.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		t.Fatal(err)
	}
	more = testgen.Events(40, 5, 300)
	b.Append(ctx, more...)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	bWant = append(bWant, more...)
	readsAll(t, "b after a compaction", rb, bWant)
	if rep, err := Check(dir, nil); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("check after the compaction: %+v, %v", rep, err)
	}
	b.Close()
}

// TestLiveReaderCompaction: a reader that took a session's frame list from
// the index before a compaction rewrote the segments under it reads the
// session right afterwards (the layout counter makes it rebuild its
// state: the offsets moved).
func TestLiveReaderCompaction(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	opts := &Options{CompactInterval: -1, SegmentSize: 1 << 16}
	w := liveOpen(t, dir, opts)
	a, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	b, _ := w.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	var bWant []event.Event
	for i := range 40 {
		a.Append(ctx, testgen.Events(uint64(i*10), 10, 200)...)
		evs := testgen.Events(uint64(i*10), 10, 200)
		b.Append(ctx, evs...)
		bWant = append(bWant, evs...)
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	rb, err := r.Open(ctx, "b", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	// The last event only: the frame list comes from the index, and only
	// the newest segment is opened.
	if got, err := rb.Read(ctx, len(bWant)-1, 1); err != nil || len(got) != 1 {
		t.Fatalf("read the last event: %d, %v", len(got), err)
	}
	if err := w.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rep, err := w.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 0.99})
	if err != nil || len(rep.Rewritten) == 0 {
		t.Fatalf("compaction rewrote nothing: %+v, %v", rep, err)
	}
	readsAll(t, "read after the compaction", rb, bWant)
	b.Close()
}

// TestWait: a read handle in a reader DB waits for the writer's flush,
// not for its appends, and learns of a delete and a cancelled context.
func TestWait(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1})
	a, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	a.Append(ctx, testgen.Events(0, 3, 100)...)
	a.Flush(ctx)
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	ra, _ := r.Open(ctx, "a", store.Read)
	if n, err := ra.Wait(ctx, 2); n != 3 || err != nil {
		t.Fatalf("wait for more than 2 of 3 events: %d, %v", n, err)
	}
	got := make(chan error, 1)
	var n uint64
	go func() {
		var err error
		n, err = ra.Wait(ctx, 3)
		got <- err
	}()
	a.Append(ctx, testgen.Events(3, 2, 100)...)
	select {
	case err := <-got:
		t.Fatalf("wait returned (%v, %d) before the flush", err, n)
	case <-time.After(30 * time.Millisecond):
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil || n != 5 {
		t.Fatalf("wait after the flush: %d, %v; want 5", n, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := ra.Wait(cctx, 5); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with nothing coming: %v, want the context's error", err)
	}
	a.Close()
	go func() {
		_, err := ra.Wait(ctx, 5)
		got <- err
	}()
	if err := w.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("wait on a deleted session: %v", err)
	}
	// In the writer's own DB, an append is enough.
	b, _ := w.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	wb, _ := w.Open(ctx, "b", store.Read)
	b.Append(ctx, testgen.Events(0, 1, 100)...)
	if n, err := wb.Wait(ctx, 0); n != 1 || err != nil {
		t.Fatalf("wait in the writer's DB: %d, %v", n, err)
	}
	b.Close()
}

// TestWaitSleepsOnTheSyncWord: a process's waits sleep on the word of
// the shared memory that every sync moves: a flush in another process
// closes the channel they wait on, without any polling. Closing the DB
// ends the watch and the wait in it.
func TestWaitSleepsOnTheSyncWord(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1})
	a, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	a.Append(ctx, testgen.Events(0, 1, 100)...)
	a.Flush(ctx)
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	synced := r.shared.Changed()
	if synced == nil {
		t.Fatal("a read-only process of a live store cannot watch its syncs")
	}
	select {
	case <-synced:
		t.Fatal("the watch fired before any sync")
	default:
	}
	a.Append(ctx, testgen.Events(1, 1, 100)...)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-synced:
	case <-time.After(30 * time.Second):
		t.Fatal("a flush in another process did not fire the watch")
	}
	ra, _ := r.Open(ctx, "a", store.Read)
	got := make(chan error, 1)
	go func() {
		_, err := ra.Wait(ctx, 2)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // (mostly) asleep in Wait by now
	r.Close()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("a wait returned no error after its DB closed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a wait went on after its DB closed")
	}
	a.Close()
}

// TestWriterAfterACompactionCutShort: a compaction cut short (its
// process died between the two bumps of the layout counter) leaves the
// counter odd; the next writer settles it, and readers and more writers
// open beside it.
func TestWriterAfterACompactionCutShort(t *testing.T) {
	dir := t.TempDir()
	w1, err := openStore(t, dir, &Options{IndexInterval: time.Hour, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	r := liveOpen(t, dir, &Options{ReadOnly: true}) // the store stays open: no first opener resets shm
	w1.shared.LayoutBegin()                         // a compaction began...
	dieNow(w1)                                      // ...and the process died: its locks went with it
	defer w1.closeFiles()
	w2 := liveOpen(t, dir, nil)
	if l := w2.shared.Layout(); l%2 != 0 {
		t.Errorf("layout counter %d left odd by the new writer", l)
	}
	w3 := liveOpen(t, dir, nil)
	ctx := context.Background()
	h, err := w3.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendFlushed(t, h, testgen.Events(0, 2, 100)...)
	for _, db := range []*DB{r, w2} {
		if snap, err := db.Stat(ctx, "a"); err != nil || snap.EventCount != 2 {
			t.Fatalf("after the dead compaction: %+v, %v", snap, err)
		}
	}
}

// TestReaderBeforeAnyWriter: a reader that opened a directory holding no
// store yet follows the writer that creates it.
func TestReaderBeforeAnyWriter(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	w := liveOpen(t, dir, nil)
	h, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	appendFlushed(t, h, testgen.Events(0, 4, 100)...)
	list, err := r.List(ctx)
	if err != nil || len(list) != 1 || list[0].EventCount != 4 {
		t.Fatalf("reader opened before the writer: %+v, %v", list, err)
	}
	h.Close()
}

// TestFirstOpenerClearsShm: what shm holds from a time no process had the
// store open (here: a durable position far past the segments, as a
// restore of older files leaves it) is forgotten by the first opener, so
// the writer's published position is its own and readers follow it.
func TestFirstOpenerClearsShm(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	sh, err := vfs.Default.MapShared(dir+"/"+coord.ShmFile, coord.ShmSize, true)
	if err != nil {
		t.Fatal(err)
	}
	sh.Uint64(int(coord.Version)).Store(coord.VersionValue)
	sh.Uint64(int(coord.Durable)).Store(coord.Position(999, 1<<20))
	sh.Uint64(int(coord.Magic)).Store(coord.MagicValue)
	sh.Close()
	w := liveOpen(t, dir, nil)
	h, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	appendFlushed(t, h, testgen.Events(0, 2, 100)...)
	if d, ok := w.shared.Durable(); !ok || d >= coord.Position(999, 0) {
		t.Fatalf("published durable position %x (%v): the stale one survived the first open", d, ok)
	}
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	appendFlushed(t, h, testgen.Events(2, 3, 100)...)
	if snap, err := r.Stat(ctx, "a"); err != nil || snap.EventCount != 5 {
		t.Fatalf("reader: %+v, %v; want 5 events", snap, err)
	}
	h.Close()
}

// liveOpen opens the store in dir (another process, as far as the
// store's locks go, from every other DB) and closes it when the test ends.
func liveOpen(t *testing.T, dir string, opts *Options) *DB {
	t.Helper()
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// appendFlushed appends evs through h and flushes them.
func appendFlushed(t *testing.T, h *Handle, evs ...event.Event) {
	t.Helper()
	if err := h.Append(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// readsAll reads every event through h and compares them with want.
func readsAll(t *testing.T, label string, h *Handle, want []event.Event) {
	t.Helper()
	got, err := h.Read(context.Background(), 0, -1)
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", label, len(got), len(want))
	}
	for i := range got {
		if got[i].Seq != want[i].Seq || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("%s: event %d differs", label, i)
		}
	}
}

// TestCatchUpDuringACompaction: a compaction that removes the segment a
// reader's catch-up is about to read (the reader saw the old layout)
// makes the catch-up start over from the store as it is, not fail.
func TestCatchUpDuringACompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1, SegmentSize: 1 << 16})
	r := liveOpen(t, dir, &Options{ReadOnly: true})
	deadSegments(t, w, func() {
		if _, err := r.Stat(ctx, "b"); err != nil { // the reader is this far
			t.Fatal(err)
		}
	})
	hook, fired := compactOnce(t, w)
	r.knobs.follow = hook
	if snap, err := r.Stat(ctx, "b"); err != nil || snap.EventCount != 1 {
		t.Fatalf("stat beside a compaction: %+v, %v", snap, err)
	}
	if _, err := r.Stat(ctx, "a"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("stat of the deleted session: %v", err)
	}
	if !*fired {
		t.Fatal("the hook never ran")
	}
}

// TestReadOnlyOpenDuringACompaction: a compaction that removes a segment
// a read-only open has listed makes the open start over, not fail.
func TestReadOnlyOpenDuringACompaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1, SegmentSize: 1 << 16, IndexInterval: time.Hour})
	deadSegments(t, w, nil)
	hook, fired := compactOnce(t, w)
	opts := &Options{ReadOnly: true, NoIndex: true}
	opts.testing.listed = hook
	r, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatalf("read-only open beside a compaction: %v", err)
	}
	defer r.Close()
	if !*fired {
		t.Fatal("the hook never ran")
	}
	if snap, err := r.Stat(ctx, "b"); err != nil || snap.EventCount != 1 {
		t.Fatalf("stat after the open: %+v, %v", snap, err)
	}
}

// deadSegments writes, through w, session b (one event flushed), then
// (after between, if set) segments that hold only session a, and deletes
// a: a compaction then drops those segments.
func deadSegments(t *testing.T, w *DB, between func()) {
	t.Helper()
	ctx := context.Background()
	a, _ := w.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	b, _ := w.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	appendFlushed(t, b, testgen.Events(0, 1, 100)...)
	if between != nil {
		between()
	}
	for i := range 40 {
		appendFlushed(t, a, testgen.Events(uint64(i*10), 10, 400)...)
	}
	a.Close()
	if err := w.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
}

// TestFirstReadAfterTheIndexMovedOn: a reader's first read of a session
// takes its frames from the index; if another process deleted the
// session and created it again, and checkpointed, in between, the index
// holds the new incarnation's frames: the read finds the session gone,
// never a mix of the two (it once reported "frames cover 2 of events
// 0..13" as corruption).
func TestFirstReadAfterTheIndexMovedOn(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w := liveOpen(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
	s, _ := w.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	appendFlushed(t, s, testgen.Events(0, 13, 100)...)
	s.Close()
	if err := w.checkpoint(); err != nil {
		t.Fatal(err)
	}
	r := liveOpen(t, dir, &Options{ReadOnly: true}) // s from the index, frames not loaded
	h, err := r.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	o, _ := w.Create(ctx, store.Header{ID: "other", CreatedAt: 1})
	appendFlushed(t, o, testgen.Events(0, 1, 100)...) // something for the reader to follow
	fired := false
	r.knobs.follow = func() {
		if fired {
			return
		}
		fired = true
		if err := w.Delete(ctx, "s"); err != nil {
			t.Error(err)
		}
		s2, err := w.Create(ctx, store.Header{ID: "s", CreatedAt: 2})
		if err != nil {
			t.Error(err)
			return
		}
		appendFlushed(t, s2, testgen.Events(0, 2, 100)...)
		s2.Close()
		if err := w.checkpoint(); err != nil {
			t.Error(err)
		}
	}
	if _, err := h.Read(ctx, 0, -1); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("first read of a session deleted and created again since: %v, want ErrSessionNotFound", err)
	}
	if !fired {
		t.Fatal("the hook never ran")
	}
}

// TestForkFirstReadAfterTheIndexMovedOn: a reader that meets a fork past
// its index checkpoint while the parent is not loaded holds only the
// fork's own frames (and the parent's past the checkpoint), and takes the
// shared ones from the index on the first read. If the fork was deleted
// (and its parent too, or only the fork) and the index checkpointed past
// it between the reader's catch-up and that read, the index no longer
// holds the fork: the read finds it gone. It once took the index's lack
// of the fork for "not indexed yet", found none of the parent's frames
// (they went with the parent), and read zero events for seqs 0..n-1
// (SIGKILL campaign: `unsupported event "" at seq 0`).
func TestForkFirstReadAfterTheIndexMovedOn(t *testing.T) {
	for _, parentToo := range []bool{true, false} {
		t.Run(fmt.Sprintf("parent deleted %v", parentToo), func(t *testing.T) {
			ctx := context.Background()
			dir := checkedDir(t)
			w := liveOpen(t, dir, &Options{CompactInterval: -1, IndexInterval: time.Hour})
			p, _ := w.Create(ctx, store.Header{ID: "p", CreatedAt: 1})
			appendFlushed(t, p, testgen.Events(0, 13, 100)...)
			p.Close()
			if err := w.checkpoint(); err != nil {
				t.Fatal(err)
			}
			r := liveOpen(t, dir, &Options{ReadOnly: true}) // p from the index, frames not loaded
			f, err := w.Fork(ctx, "p", 9, store.Header{ID: "f", CreatedAt: 2})
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
			h, err := r.Open(ctx, "f", store.Read) // met past the checkpoint, the parent not loaded
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			r.mu.Lock()
			loaded := r.mu.sessions["f"].loaded
			r.mu.Unlock()
			if loaded {
				t.Fatal("the reader loaded the fork's frames: the test needs them taken from the index on the first read")
			}
			o, _ := w.Create(ctx, store.Header{ID: "other", CreatedAt: 1})
			appendFlushed(t, o, testgen.Events(0, 1, 100)...) // something for the reader to follow
			fired := false
			r.knobs.follow = func() {
				if fired {
					return
				}
				fired = true
				if err := w.Delete(ctx, "f"); err != nil {
					t.Error(err)
				}
				if parentToo {
					if err := w.Delete(ctx, "p"); err != nil {
						t.Error(err)
					}
				}
				if err := w.checkpoint(); err != nil {
					t.Error(err)
				}
			}
			if evs, err := h.Read(ctx, 0, -1); !errors.Is(err, store.ErrSessionNotFound) {
				t.Fatalf("first read of a fork deleted and indexed since: %d events, %v; want ErrSessionNotFound", len(evs), err)
			}
			if !fired {
				t.Fatal("the hook never ran")
			}
		})
	}
}

// compactOnce returns a test hook that compacts w (rolling) the first time
// it runs and fails the test if that dropped no segment, and whether it ran.
func compactOnce(t *testing.T, w *DB) (func(), *bool) {
	fired := new(bool)
	return func() {
		if *fired {
			return
		}
		*fired = true
		rep, err := w.Compact(context.Background(), CompactOptions{Roll: true})
		if err != nil || len(rep.Dropped) == 0 {
			t.Errorf("the compaction dropped nothing: %+v, %v", rep, err)
		}
	}, fired
}
