package engine

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// The order of syncs and placements across processes (docs/MULTIPROCESS.md,
// Many processes, Appending): an fdatasync covers only the frames placed
// before it began, so a flush whose frames another process placed while
// that fdatasync ran must not be acknowledged by it. Two DBs on one MemFS
// are two processes; a MemFS Sync makes durable what the file holds when
// it is called, and a power cut (CrashClone) keeps nothing else.

// syncHookFS runs hooks once each, when armed, on segment files opened
// for writing: afterSync right after the first Sync returns (the
// fdatasync is done, and what the hook writes is not covered by it),
// beforeWrite before the first WriteAt (a placement held mid-write).
type syncHookFS struct {
	vfs.FS
	mu          sync.Mutex
	afterSync   func()
	beforeWrite func()
}

func (s *syncHookFS) arm(afterSync, beforeWrite func()) {
	s.mu.Lock()
	s.afterSync, s.beforeWrite = afterSync, beforeWrite
	s.mu.Unlock()
}

// take returns the hook *h and disarms it.
func (s *syncHookFS) take(h *func()) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := *h
	*h = nil
	return f
}

func (s *syncHookFS) OpenReadWrite(name string) (vfs.File, error) {
	f, err := s.FS.OpenReadWrite(name)
	if err != nil || !strings.HasSuffix(name, ".seg") {
		return f, err
	}
	return &syncHookFile{File: f, fs: s}, nil
}

type syncHookFile struct {
	vfs.File
	fs *syncHookFS
}

func (f *syncHookFile) Sync() error {
	err := f.File.Sync()
	if hook := f.fs.take(&f.fs.afterSync); hook != nil {
		hook()
	}
	return err
}

func (f *syncHookFile) WriteAt(p []byte, off int64) (int, error) {
	if hook := f.fs.take(&f.fs.beforeWrite); hook != nil {
		hook()
	}
	return f.File.WriteAt(p, off)
}

// syncOrderOpts: no background work that syncs or rolls.
func syncOrderOpts(fs vfs.FS) *Options {
	return &Options{FS: fs, CompactInterval: -1, NoPreallocate: true, NoDict: true, IndexInterval: time.Hour}
}

// TestFlushPlacedDuringAnotherProcessSync: process A's flush fdatasyncs
// the segment; while that fdatasync runs (after it returned, before A
// publishes what it covered), process B places its frames and flushes,
// and waits for A's sync (B is in waitSync when A publishes). A's sync
// began before B's frames were placed: it must not acknowledge them; B's
// flush returns only once its own sync (or a later one) covered them. A
// power cut right after both flushes returned keeps every event either
// acknowledged.
func TestFlushPlacedDuringAnotherProcessSync(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	hfs := &syncHookFS{FS: mem}
	b, err := openStore(t, "/db", syncOrderOpts(mem)) // the first opener
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a, err := openStore(t, "/db", syncOrderOpts(hfs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.log.Alone() {
		t.Fatal("A, which joined B, thinks it writes alone")
	}
	// As B's next look (a checkpoint tick) would find: another process
	// writes the store, so B's syncs go through coord.LockSync, one at a time
	// across processes.
	b.log.SetAlone(false)

	want := map[string][]event.Event{}
	handles := map[string]*Handle{}
	for id, db := range map[string]*DB{"a": a, "b": b} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		evs := testgen.Events(0, 4, 200)
		appendFlushed(t, h, evs...)
		want[id], handles[id] = evs, h
	}
	for id, h := range handles {
		evs := testgen.Events(4, 4, 200)
		if err := h.Append(ctx, evs...); err != nil { // (open: their flush places them)
			t.Fatal(err)
		}
		want[id] = append(want[id], evs...)
	}

	placedBefore := b.log.PlacedEnd()
	bFlushed := make(chan error, 1)
	hooked := make(chan string, 1)
	hfs.arm(func() {
		// A's fdatasync is over; A has not published yet.
		go func() { bFlushed <- handles["b"].Flush(ctx) }()
		deadline := time.Now().Add(5 * time.Second)
		for b.log.PlacedEnd() == placedBefore || b.shared.Waiters() == 0 {
			if time.Now().After(deadline) {
				hooked <- "B never placed its frames and waited for A's sync"
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
		hooked <- ""
	}, nil)
	if err := handles["a"].Flush(ctx); err != nil {
		t.Fatalf("A's flush: %v", err)
	}
	select {
	case msg := <-hooked:
		if msg != "" {
			t.Fatal(msg)
		}
	default:
		t.Fatal("A's flush did not fdatasync a segment")
	}
	if err := <-bFlushed; err != nil {
		t.Fatalf("B's flush: %v", err)
	}

	crashed := mem.CrashClone(vfs.CrashConfig{}) // nothing unsynced survives
	db, err := openStore(t, "/db", syncOrderOpts(crashed))
	if err != nil {
		t.Fatalf("reopen after the power cut: %v", err)
	}
	defer db.Close()
	for id, evs := range want {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("%s after the power cut: %v", id, err)
		}
		readsAll(t, id+", flushed, after the power cut", h, evs)
		h.Close()
	}
}

// TestFlushPlacedDuringItsProcessSync: in one process, a flush's frames
// are being written (their placement holds the append lock) when another
// flush's sync reads the tail and fdatasyncs: that sync does not cover
// them. The first flush then waits for that sync to end; it must not
// take it for its own, but sync again. A power cut right after both
// flushes returned keeps every event either acknowledged.
func TestFlushPlacedDuringItsProcessSync(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	hfs := &syncHookFS{FS: mem}
	opts := syncOrderOpts(hfs)
	opts.FrameBytes = 4 << 10
	db, err := openStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hs := map[string]*Handle{}
	want := map[string][]event.Event{}
	for _, id := range []string{"s", "x"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		evs := testgen.Events(0, 2, 200)
		appendFlushed(t, h, evs...)
		hs[id], want[id] = h, evs
	}
	// s: frames placed by the write-out behind a full Append, not synced.
	placed := db.log.PlacedEnd()
	evs := testgen.Events(2, 30, 300) // (more than a frame)
	if err := hs["s"].Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	want["s"] = append(want["s"], evs...)
	for deadline := time.Now().Add(5 * time.Second); db.log.PlacedEnd() == placed; time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("the write-out behind the Append placed nothing")
		}
	}
	// x: a few events, open; its flush places them.
	evs = testgen.Events(2, 3, 200)
	if err := hs["x"].Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	want["x"] = append(want["x"], evs...)

	writing, letWrite := make(chan struct{}), make(chan struct{})
	hooked := make(chan string, 1)
	hfs.arm(func() {
		// s's fdatasync is over, and did not cover x's frames (their
		// write is held). Let it go on, and x's flush wait for this sync.
		close(letWrite)
		deadline := time.Now().Add(5 * time.Second)
		for {
			if db.log.SyncWaiters() > 0 {
				break
			}
			if time.Now().After(deadline) {
				hooked <- "x's flush never waited for s's sync"
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
		hooked <- ""
	}, func() {
		close(writing)
		<-letWrite
	})
	xFlushed := make(chan error, 1)
	go func() { xFlushed <- hs["x"].Flush(ctx) }()
	select {
	case <-writing:
	case <-time.After(5 * time.Second):
		t.Fatal("x's flush wrote nothing")
	}
	if err := hs["s"].Flush(ctx); err != nil {
		t.Fatalf("s's flush: %v", err)
	}
	select {
	case msg := <-hooked:
		if msg != "" {
			t.Fatal(msg)
		}
	default:
		t.Fatal("s's flush did not fdatasync a segment")
	}
	if err := <-xFlushed; err != nil {
		t.Fatalf("x's flush: %v", err)
	}

	crashed := mem.CrashClone(vfs.CrashConfig{}) // nothing unsynced survives
	db2, err := openStore(t, "/db", syncOrderOpts(crashed))
	if err != nil {
		t.Fatalf("reopen after the power cut: %v", err)
	}
	defer db2.Close()
	for id, evs := range want {
		h, err := db2.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("%s after the power cut: %v", id, err)
		}
		readsAll(t, id+", flushed, after the power cut", h, evs)
		h.Close()
	}
}
