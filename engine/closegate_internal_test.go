package engine

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// closeGateOpts are the options of these tests: frames of 4 KiB, no
// background compaction.
func closeGateOpts(fs vfs.FS) *Options {
	return &Options{FS: fs, SegmentSize: 1 << 20, FrameBytes: 4 << 10, CompactInterval: -1}
}

// reopenRead opens the store in dir with opts, reads every event of
// session id and closes it again: what a later process finds.
func reopenRead(t *testing.T, dir string, opts *Options, id string) ([]event.Event, error) {
	t.Helper()
	db, err := openStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Open(context.Background(), id, store.Read)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Read(context.Background(), 0, -1)
}

// closeWhileBlocked runs db.Close on a goroutine and returns once it
// waits for the operations in progress (db.knobs.closeWaits), once it
// returned (a Close that waits for nothing), or after 5 s (a Close
// blocked elsewhere, as one that lacks the hook was, on the lock of a
// handle the caller holds). done gets Close's error.
func closeWhileBlocked(t *testing.T, db *DB) (done chan error) {
	waits := make(chan struct{})
	var once sync.Once
	db.knobs.closeWaits = func() { once.Do(func() { close(waits) }) }
	t.Cleanup(func() { db.knobs.closeWaits = nil })
	done = make(chan error, 1)
	returned := make(chan struct{})
	go func() {
		done <- db.Close()
		close(returned)
	}()
	select {
	case <-waits:
	case <-returned:
	case <-time.After(5 * time.Second):
	}
	return done
}

// TestCreateRacesClose: a Create that holds its lease when DB.Close
// begins goes on to catch up (reading the shared memory) and to register
// its handle. Close waits for it: before, Close went on, released the
// shared memory, and the Create read it (a nil dereference: the process
// died). The Create succeeds (it began first); its handle is Close's to
// flush, and a write through it fails with ErrClosed.
func TestCreateRacesClose(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	var closed chan error
	var once atomic.Bool
	db.knobs.createLeased = func() {
		if once.CompareAndSwap(false, true) {
			closed = closeWhileBlocked(t, db)
		}
	}
	defer func() { db.knobs.createLeased = nil }()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatalf("Create that began before Close: %v", err)
	}
	err = h.Append(ctx, testgen.Events(0, 3, 300)...)
	if !errors.Is(err, store.ErrClosed) || !errors.Is(err, store.ErrOwnershipLost) {
		t.Errorf("Append once Close began: %v, want ErrClosed (and ErrOwnershipLost)", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close of the handle: %v", err)
	}
	db, err = openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Stat(ctx, "s"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("Stat of the session created and never written: %v, want ErrSessionNotFound", err)
	}
}

// TestNoHandleOpensDuringClose: DB.Close flushes the handles it lists; a
// handle opened after that (here: by a Create during Close's flush of
// another handle) was not among them, and its Flush, past its lease
// check before Close revoked the lease, placed frames on the files Close
// had closed (a nil dereference). No handle opens once Close has begun:
// the Create fails with ErrClosed.
func TestNoHandleOpensDuringClose(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	h0, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 5, 300)
	if err := h0.Append(ctx, evs...); err != nil { // (open: Close's flush cuts them)
		t.Fatal(err)
	}
	closeReturned := make(chan struct{})
	var late *Handle
	var createErr error
	flushed := make(chan error, 1)
	inCut := make(chan struct{})
	db.knobs.cut = func(h *Handle) {
		if h == late {
			close(inCut)
			<-closeReturned // (the rest of the Flush once Close is over)
		}
	}
	var once atomic.Bool
	db.knobs.appended = func() { // (Close's flush of h0, after it listed its handles)
		if !once.CompareAndSwap(false, true) {
			return
		}
		late, createErr = db.Create(ctx, store.Header{ID: "late", CreatedAt: 1})
		if createErr != nil {
			return
		}
		if err := late.Append(ctx, testgen.Events(0, 3, 300)...); err != nil {
			flushed <- err
			return
		}
		go func() { flushed <- late.Flush(ctx) }()
		<-inCut
	}
	defer func() { db.knobs.cut, db.knobs.appended = nil, nil }()
	err = db.Close()
	close(closeReturned)
	if err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if late != nil {
		err := <-flushed
		t.Errorf("a Create during Close made a handle; its Flush: %v", err)
		late.Close()
	} else if !errors.Is(createErr, store.ErrClosed) {
		t.Errorf("Create during Close: %v, want ErrClosed", createErr)
	}
	if err := h0.Close(); err != nil {
		t.Errorf("Close of a handle Close flushed: %v", err)
	}
	if got, err := reopenRead(t, "/db", closeGateOpts(mem.CrashClone(vfs.CrashConfig{})), "a"); err != nil || len(got) != len(evs) {
		t.Errorf("after Close and a power cut: %d events, %v; want the %d Close flushed", len(got), err, len(evs))
	}
}

// TestCloseWaitsForAFlush: a Flush in progress (encoding its frames)
// when DB.Close begins ends before Close goes on, and what it flushed is
// durable; Close returns only after it.
func TestCloseWaitsForAFlush(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 5, 300)
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	var closed chan error
	var once atomic.Bool
	var closedEarly atomic.Bool
	db.knobs.cut = func(x *Handle) {
		if x != h || !once.CompareAndSwap(false, true) {
			return
		}
		closed = closeWhileBlocked(t, db)
		select {
		case err := <-closed:
			closedEarly.Store(true)
			closed <- err
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer func() { db.knobs.cut = nil }()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("Flush that began before Close: %v", err)
	}
	if closedEarly.Load() {
		t.Error("DB.Close returned while a Flush was in progress")
	}
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if err := h.Flush(ctx); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Flush after Close: %v, want ErrClosed", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close of the handle: %v", err)
	}
	if got, err := reopenRead(t, "/db", closeGateOpts(mem.CrashClone(vfs.CrashConfig{})), "s"); err != nil || len(got) != len(evs) {
		t.Errorf("after Close and a power cut: %d events, %v; want the %d flushed", len(got), err, len(evs))
	}
}

// TestCloseWakesWait: a Wait for events that never come returns
// ErrClosed once DB.Close begins, and Close, which waits for it, returns.
func TestCloseWakesWait(t *testing.T) {
	ctx := context.Background()
	for _, ro := range []bool{false, true} {
		mem := vfs.NewMem()
		db, err := openStore(t, "/db", closeGateOpts(mem))
		if err != nil {
			t.Fatal(err)
		}
		h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
		if err == nil {
			err = h.Flush(ctx) // (a creator closed unwritten vanishes)
		}
		if err == nil {
			err = h.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		if ro {
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			o := closeGateOpts(mem)
			o.ReadOnly = true
			if db, err = openStore(t, "/db", o); err != nil {
				t.Fatal(err)
			}
		}
		r, err := db.Open(ctx, "s", store.Read)
		if err != nil {
			t.Fatalf("read-only %v: %v", ro, err)
		}
		waited := make(chan error, 1)
		go func() {
			_, err := r.Wait(ctx, 10)
			waited <- err
		}()
		time.Sleep(20 * time.Millisecond) // (waiting, most likely)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-waited; !errors.Is(err, store.ErrClosed) {
			t.Errorf("read-only %v: Wait across Close: %v, want ErrClosed", ro, err)
		}
		r.Close()
	}
}

// writesOf sums the operations of ff that change the files or the
// directory: what an operation that must write nothing may not make.
func writesOf(ff *vfs.FaultFS) map[vfs.Op]int {
	m := map[vfs.Op]int{}
	for _, op := range []vfs.Op{vfs.OpCreate, vfs.OpWrite, vfs.OpSync, vfs.OpTruncate, vfs.OpRename, vfs.OpRemove, vfs.OpMkdir, vfs.OpSyncDir} {
		m[op] = ff.Count(op)
	}
	return m
}

// TestNothingBeginsOnceCloseBegan: once DB.Close has begun (its gate is
// shut; here, before it waits for anything), every operation of the DB
// and of its handles, read or write, fails with ErrClosed and touches no
// file: the store a later open finds holds none of what they tried.
func TestNothingBeginsOnceCloseBegan(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	opts := closeGateOpts(ff)
	opts.NoPreallocate, opts.NoDict = true, true // (no background write while the hook runs)
	db, err := openStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	seed := func(id string, n int) {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err == nil {
			err = h.Append(ctx, testgen.Events(0, n, 300)...)
		}
		if err == nil {
			err = h.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	seed("p", 10)
	seed("d", 3)
	w, err := db.Open(ctx, "p", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "p", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	more := testgen.Events(10, 3, 300)

	type op struct {
		name string
		run  func() error
	}
	ops := []op{
		{"Create", func() error { _, err := db.Create(ctx, store.Header{ID: "late", CreatedAt: 1}); return err }},
		{"Open for read", func() error { _, err := db.Open(ctx, "p", store.Read); return err }},
		{"Open for write", func() error { _, err := db.Open(ctx, "d", store.Write); return err }},
		{"Resume", func() error { _, _, err := db.Resume(ctx, "d"); return err }},
		{"Stat", func() error { _, err := db.Stat(ctx, "p"); return err }},
		{"Inspect", func() error { _, err := db.Inspect(ctx, "p"); return err }},
		{"List", func() error { _, err := db.List(ctx); return err }},
		{"ListPage", func() error { _, _, err := db.ListPage(ctx, store.ListOptions{}); return err }},
		{"Delete", func() error { return db.Delete(ctx, "d") }},
		{"Fork", func() error { _, err := db.Fork(ctx, "p", 5, store.Header{ID: "f", CreatedAt: 1}); return err }},
		{"Migrate", func() error { _, err := db.Migrate(ctx, "d"); return err }},
		{"Compact", func() error { _, err := db.Compact(ctx, CompactOptions{Roll: true, LiveRatio: 1}); return err }},
		{"Usage", func() error { _, err := db.Usage(ctx); return err }},
		{"DB.Flush", func() error { return db.Flush(ctx) }},
		{"RegisterTypes", func() error { return db.RegisterTypes(ctx, "acme/*") }},
		{"Append", func() error { return w.Append(ctx, more...) }},
		{"Enqueue", func() error { return w.Enqueue(more...) }},
		{"Flush", func() error { return w.Flush(ctx) }},
		{"Read through the write handle", func() error { _, err := w.Read(ctx, 0, -1); return err }},
		{"Read", func() error { _, err := r.Read(ctx, 0, -1); return err }},
		{"Wait", func() error { _, err := r.Wait(ctx, 1000); return err }},
	}
	ran := false
	db.knobs.closeWaits = func() {
		ran = true
		before := writesOf(ff)
		for _, o := range ops {
			if err := o.run(); !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s once Close began: %v, want ErrClosed", o.name, err)
			}
			if after := writesOf(ff); !maps.Equal(after, before) {
				t.Errorf("%s once Close began wrote: %v, then %v", o.name, before, after)
				before = after
			}
		}
	}
	defer func() { db.knobs.closeWaits = nil }()
	err = db.Close()
	db.knobs.closeWaits = nil
	if err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if !ran {
		t.Fatal("the hook never ran")
	}
	w.Close()
	r.Close()

	db, err = openStore(t, "/db", closeGateOpts(mem.CrashClone(vfs.CrashConfig{})))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, n := range map[string]int{"p": 10, "d": 3} {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("%s after the reopen: %v", id, err)
		}
		if got, err := h.Read(ctx, 0, -1); err != nil || len(got) != n {
			t.Errorf("%s after the reopen: %d events, %v; want the %d written before Close", id, len(got), err, n)
		}
		h.Close()
	}
	for _, id := range []string{"late", "f"} {
		if _, err := db.Stat(ctx, id); !errors.Is(err, store.ErrSessionNotFound) {
			t.Errorf("%s, made once Close began: %v, want ErrSessionNotFound", id, err)
		}
	}
	if types, err := readTypes(mem, "/db"); err != nil || slices.Contains(types, "acme/*") {
		t.Errorf("types recorded once Close began: %v, %v", types, err)
	}
}

// blockFS blocks the first Open of a segment file once armed, until
// released: an operation that reads a segment it has not opened yet is
// held inside.
type blockFS struct {
	vfs.FS
	armed   atomic.Bool
	started chan struct{} // closed when an Open is held
	release chan struct{} // closed to let it go on
}

func newBlockFS(fs vfs.FS) *blockFS {
	return &blockFS{FS: fs, started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockFS) Open(name string) (vfs.File, error) {
	if strings.HasSuffix(name, ".seg") && b.armed.CompareAndSwap(true, false) {
		close(b.started)
		<-b.release
	}
	return b.FS.Open(name)
}

// closeDuring calls DB.Close while an operation is held inside it
// (started is closed), and reports whether Close returned before the
// operation was let go (release): within 50 ms it would have, had it not
// waited. If it did not, it lets the operation go on and returns Close's
// result channel; if it did, the operation stays held (letting it run
// on files Close closed could crash the test binary).
func closeDuring(t *testing.T, db *DB, what string, started <-chan struct{}, release chan struct{}) (closed chan error, ok bool) {
	t.Helper()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatalf("the %s was never held", what)
	}
	closed = closeWhileBlocked(t, db)
	select {
	case err := <-closed:
		t.Errorf("DB.Close returned (%v) while a %s was in progress", err, what)
		return nil, false
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	return closed, true
}

// TestCloseWaitsForARead: a Read in progress (opening the segment it
// reads) when DB.Close begins ends before Close closes anything, and
// returns every event; Close returns after it.
func TestCloseWaitsForARead(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	bfs := newBlockFS(mem)
	h0, err := openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 20, 300)
	h, err := h0.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err == nil {
		err = h.Append(ctx, evs...)
	}
	if err == nil {
		err = h.Close()
	}
	if err == nil {
		err = h0.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	db, err := openStore(t, "/db", closeGateOpts(bfs))
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	db.mu.Lock()
	for _, rd := range db.mu.readers { // (the recovery's: the Read opens its segment again)
		rd.Close()
	}
	clear(db.mu.readers)
	db.mu.Unlock()
	bfs.armed.Store(true)
	type result struct {
		evs []event.Event
		err error
	}
	read := make(chan result, 1)
	go func() {
		got, err := r.Read(ctx, 0, -1)
		read <- result{got, err}
	}()
	closed, ok := closeDuring(t, db, "Read", bfs.started, bfs.release)
	if !ok {
		return
	}
	res := <-read
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if res.err != nil {
		t.Errorf("Read that began before Close: %v", res.err)
	} else {
		sameEvents(t, "Read that began before Close", res.evs, evs)
	}
	if _, err := r.Read(ctx, 0, -1); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Read after Close: %v, want ErrClosed", err)
	}
	r.Close()
}

// TestCloseWaitsForAFork: a Fork in progress (about to place its header
// and marker) when DB.Close begins ends before Close closes anything: it
// returns its handle, and the fork is durable (a power cut right after
// Close keeps it, with the parent's events it shares).
func TestCloseWaitsForAFork(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := openStore(t, "/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 20, 300)
	h, err := db.Create(ctx, store.Header{ID: "p", CreatedAt: 1})
	if err == nil {
		err = h.Append(ctx, evs...)
	}
	if err == nil {
		err = h.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	db.knobs.forkPlacing = func() {
		if once.CompareAndSwap(false, true) {
			close(started)
			<-release
		}
	}
	defer func() { db.knobs.forkPlacing = nil }()
	type result struct {
		h   *Handle
		err error
	}
	forked := make(chan result, 1)
	go func() {
		f, err := db.Fork(ctx, "p", 10, store.Header{ID: "f", CreatedAt: 1})
		forked <- result{f, err}
	}()
	closed, ok := closeDuring(t, db, "Fork", started, release)
	if !ok {
		return
	}
	res := <-forked
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if res.err != nil {
		t.Fatalf("Fork that began before Close: %v", res.err)
	}
	if err := res.h.Append(ctx, testgen.Events(11, 1, 300)...); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Append to the fork after Close: %v, want ErrClosed", err)
	}
	res.h.Close()
	got, err := reopenRead(t, "/db", closeGateOpts(mem.CrashClone(vfs.CrashConfig{})), "f")
	if err != nil || len(got) != 11 {
		t.Fatalf("the fork after Close and a power cut: %d events, %v; want the parent's 10 and the marker", len(got), err)
	}
	sameEvents(t, "the fork's shared events after a power cut", got[:10], evs[:10])
}
