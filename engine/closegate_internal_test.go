package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testgen"
	"github.com/seglog/seglog/internal/vfs"
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
	db, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Open(context.Background(), id, Read)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.Read(context.Background(), 0, -1)
}

// closeWhileBlocked runs db.Close on a goroutine and returns once it
// waits for the operations in progress (testHookCloseWaits), once it
// returned (a Close that waits for nothing), or after 5 s (a Close
// blocked elsewhere, as one that lacks the hook was, on the lock of a
// handle the caller holds). done gets Close's error.
func closeWhileBlocked(t *testing.T, db *DB) (done chan error) {
	waits := make(chan struct{})
	var once sync.Once
	testHookCloseWaits = func() { once.Do(func() { close(waits) }) }
	t.Cleanup(func() { testHookCloseWaits = nil })
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
	db, err := Open("/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	var closed chan error
	var once atomic.Bool
	testHookCreateLeased = func() {
		if once.CompareAndSwap(false, true) {
			closed = closeWhileBlocked(t, db)
		}
	}
	defer func() { testHookCreateLeased = nil }()
	h, err := db.Create(ctx, Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatalf("Create that began before Close: %v", err)
	}
	err = h.Append(ctx, testgen.Events(0, 3, 300)...)
	if !errors.Is(err, ErrClosed) || !errors.Is(err, ErrOwnershipLost) {
		t.Errorf("Append once Close began: %v, want ErrClosed (and ErrOwnershipLost)", err)
	}
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Errorf("Close of the handle: %v", err)
	}
	db, err = Open("/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Stat(ctx, "s"); !errors.Is(err, ErrSessionNotFound) {
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
	db, err := Open("/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	h0, err := db.Create(ctx, Header{ID: "a", CreatedAt: 1})
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
	testHookCut = func(h *Handle) {
		if h == late {
			close(inCut)
			<-closeReturned // (the rest of the Flush once Close is over)
		}
	}
	var once atomic.Bool
	testHookAppended = func() { // (Close's flush of h0, after it listed its handles)
		if !once.CompareAndSwap(false, true) {
			return
		}
		late, createErr = db.Create(ctx, Header{ID: "late", CreatedAt: 1})
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
	defer func() { testHookCut, testHookAppended = nil, nil }()
	err = db.Close()
	close(closeReturned)
	if err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if late != nil {
		err := <-flushed
		t.Errorf("a Create during Close made a handle; its Flush: %v", err)
		late.Close()
	} else if !errors.Is(createErr, ErrClosed) {
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
	db, err := Open("/db", closeGateOpts(mem))
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, Header{ID: "s", CreatedAt: 1})
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
	testHookCut = func(x *Handle) {
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
	defer func() { testHookCut = nil }()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("Flush that began before Close: %v", err)
	}
	if closedEarly.Load() {
		t.Error("DB.Close returned while a Flush was in progress")
	}
	if err := <-closed; err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	if err := h.Flush(ctx); !errors.Is(err, ErrClosed) {
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
		db, err := Open("/db", closeGateOpts(mem))
		if err != nil {
			t.Fatal(err)
		}
		h, err := db.Create(ctx, Header{ID: "s", CreatedAt: 1})
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
			if db, err = Open("/db", o); err != nil {
				t.Fatal(err)
			}
		}
		r, err := db.Open(ctx, "s", Read)
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
		if err := <-waited; !errors.Is(err, ErrClosed) {
			t.Errorf("read-only %v: Wait across Close: %v, want ErrClosed", ro, err)
		}
		r.Close()
	}
}
