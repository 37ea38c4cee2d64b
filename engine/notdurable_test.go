package engine_test

// A failure the host cannot see is a loss (issue 44): a host that never
// flushes hears of every failed write-out or window flush at its next
// Append or Enqueue, as a *store.NotDurableError naming the first seq not
// made durable; on a full disk the events stay the handle's and are
// written, in order, once space returns, with no Flush from the host.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/internal/testclock"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// neverFlushes is a host that never flushes: each step it hands one event
// to its handle (Append and Enqueue in turn) and moves the clock a quarter
// of a window on. It records what each call answered: the events it was
// told nil for, and the errors, in call order.
type neverFlushes struct {
	t     *testing.T
	h     *engine.Handle
	clock *testclock.Clock
	calls int
	told  map[uint64]int // seq -> the call that was told nil
	sent  []event.Event  // every event handed over, refused ones too
	errs  []calledErr
}

type calledErr struct {
	call int
	seq  uint64 // the NotDurableError's Seq
	err  error
}

func (n *neverFlushes) step() error {
	n.t.Helper()
	n.calls++
	next := n.h.Len()
	ev := testgen.Events(next, 1, 200)
	if next == uint64(len(n.sent)) {
		n.sent = append(n.sent, ev...)
	}
	var err error
	if n.calls%2 == 0 {
		err = n.h.Append(context.Background(), ev...)
	} else {
		err = n.h.Enqueue(ev...)
	}
	switch {
	case err == nil:
		n.told[next] = n.calls
	default:
		var nd *store.NotDurableError
		if !errors.As(err, &nd) {
			n.t.Fatalf("call %d (seq %d): %v, want a *store.NotDurableError", n.calls, next, err)
		}
		if got := n.h.Len(); got != next {
			n.t.Fatalf("call %d: refused, yet the handle's length went %d -> %d", n.calls, next, got)
		}
		n.errs = append(n.errs, calledErr{n.calls, nd.Seq, err})
	}
	n.clock.Advance(handle.DefaultWindow / 4)
	return err
}

// lostUntold returns the events the host was told nil for that are not in
// survivors (what a power cut now leaves) and that no later call's error
// covered (a NotDurableError naming their seq or an earlier one).
func (n *neverFlushes) lostUntold(survivors []event.Event) []uint64 {
	var lost []uint64
	for seq, call := range n.told {
		if seq < uint64(len(survivors)) {
			continue
		}
		covered := false
		for _, e := range n.errs {
			if e.call > call && e.seq <= seq {
				covered = true
			}
		}
		if !covered {
			lost = append(lost, seq)
		}
	}
	return lost
}

// TestFailureReachesTheNextCall: for each kind of failure behind a host
// that never flushes (a full disk at a write or at a roll, an fdatasync
// error, shm cut under the process), the first Append or Enqueue after
// the store knew of it fails with a *store.NotDurableError naming the
// cause and the first seq not durable, and takes nothing; so does every
// later one while the failure lasts. After a power cut, no event the host
// was told nil for is missing unless a later call's error named it. A
// full disk is recoverable: once space returns the window's retry writes
// the held events, in order, and the host's Appends are taken again, all
// without a Flush.
func TestFailureReachesTheNextCall(t *testing.T) {
	for _, tc := range []struct {
		name        string
		inject      func(t *testing.T, ff *vfs.FaultFS, mem *vfs.MemFS)
		cause       error
		recoverable bool
		within      int // the calls after the injection by which one fails (the roll's: the segment's end)
	}{
		{"enospc-write", func(t *testing.T, ff *vfs.FaultFS, _ *vfs.MemFS) {
			ff.Add(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
		}, syscall.ENOSPC, true, 8},
		{"enospc-short-write", func(t *testing.T, ff *vfs.FaultFS, _ *vfs.MemFS) {
			ff.Add(vfs.Rule{Op: vfs.OpWrite, Short: -1, Err: syscall.ENOSPC})
		}, syscall.ENOSPC, true, 8},
		{"enospc-roll", func(t *testing.T, ff *vfs.FaultFS, _ *vfs.MemFS) {
			ff.Add(vfs.Rule{Op: vfs.OpCreate, Name: ".seg", Err: syscall.ENOSPC})
		}, syscall.ENOSPC, true, 300},
		{"fsync", func(t *testing.T, ff *vfs.FaultFS, _ *vfs.MemFS) {
			ff.Add(vfs.Rule{Op: vfs.OpSync, Err: syscall.EIO})
		}, syscall.EIO, false, 8},
		{"shm-cut", func(t *testing.T, _ *vfs.FaultFS, mem *vfs.MemFS) {
			shm, err := mem.OpenReadWrite(filepath.Join("/db", coord.ShmFile))
			if err != nil {
				t.Fatal(err)
			}
			defer shm.Close()
			if err := shm.Truncate(0); err != nil {
				t.Fatal(err)
			}
		}, store.ErrCoordinationLost, false, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			clock := &testclock.Clock{}
			db, err := engine.OpenStore(t, "/db", &engine.Options{FS: ff, NoPreallocate: true, Uncompressed: true, SegmentSize: 64 << 10,
				CompactInterval: -1, IndexInterval: time.Hour, AfterFunc: clock.AfterFunc})
			if err != nil {
				t.Fatal(err)
			}
			if !tc.recoverable {
				engine.KeepBroken(t, "/db", "the store is poisoned on purpose; the power cut's copies are checked")
			}
			defer db.Close()
			h, err := db.Create(context.Background(), store.Header{ID: "s", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			host := &neverFlushes{t: t, h: h, clock: clock, told: map[uint64]int{}}
			for range 40 {
				if err := host.step(); err != nil {
					t.Fatalf("before the failure: %v", err)
				}
			}
			tc.inject(t, ff, mem)
			// The failure is met at the latest at the end of the window
			// open now (a roll's, at the segment's end: the 40 events
			// before are under half of it, where the next one is made
			// ahead); from the call after that on, every call fails.
			first := 0
			for i := range tc.within + 20 {
				err := host.step()
				if err == nil && first > 0 {
					t.Fatalf("call %d told nil after call %d failed", host.calls, first)
				}
				if err != nil && first == 0 {
					first = host.calls
					if i >= tc.within {
						t.Fatalf("the failure reached the host only at its %dth call after it began", i+1)
					}
					if !errors.Is(err, tc.cause) || !errors.Is(err, store.ErrNotDurable) {
						t.Fatalf("the first failed call: %v, want %v and ErrNotDurable", err, tc.cause)
					}
				}
			}
			if first == 0 {
				t.Fatal("no call failed")
			}
			if got := survivors(t, mem, "s"); len(host.lostUntold(got)) > 0 {
				t.Fatalf("a power cut now loses events the host was told nil for and never told of after: %v", host.lostUntold(got))
			}
			if !tc.recoverable {
				if err := h.Flush(context.Background()); !errors.Is(err, store.ErrNotDurable) || !errors.Is(err, tc.cause) {
					t.Fatalf("a Flush after the failure: %v, want ErrNotDurable and %v", err, tc.cause)
				}
				return
			}
			held := h.Len()
			ff.Clear()
			// The retries back off (the window doubled, up to 5 s): within
			// 5 s of the clock one of them writes what the handle holds.
			for range 5 * time.Second / (handle.DefaultWindow / 4) {
				clock.Advance(handle.DefaultWindow / 4)
			}
			if got := survivors(t, mem, "s"); uint64(len(got)) != held {
				t.Fatalf("once space is back, a power cut leaves %d events, want the %d held", len(got), held)
			}
			for range 12 {
				if err := host.step(); err != nil {
					t.Fatalf("once space is back and the retry wrote: %v", err)
				}
			}
			for range 8 {
				clock.Advance(handle.DefaultWindow / 4)
			}
			got := survivors(t, mem, "s")
			if uint64(len(got)) != h.Len() || len(host.lostUntold(got)) > 0 {
				t.Fatalf("after the last window: %d events survive a power cut, want %d", len(got), h.Len())
			}
			if d := cmp.Diff(host.sent[:len(got)], got); d != "" {
				t.Fatalf("the events after the recovery (-want +got):\n%s", d)
			}
		})
	}
}

// TestFailureEndsWithAFlush: a host that does flush clears a full disk's
// failure itself: its Flush writes what the handle holds once space is
// back, and the next Append is taken. A Flush that fails, too, is a
// failure of the handle: the Append after it is refused (the flush's
// events are not durable), naming the first seq the flush did not make
// durable.
func TestFailureEndsWithAFlush(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: ff, NoPreallocate: true, CompactInterval: -1, FlushOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(0, 5, 300)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(5, 3, 300)...); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
	if err := h.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v, want ENOSPC", err)
	}
	for _, call := range []func() error{
		func() error { return h.Append(ctx, testgen.Events(8, 1, 300)...) },
		func() error { return h.Enqueue(testgen.Events(8, 1, 300)...) },
		func() error { return db.Flush(ctx) }, // (fails too, and clears nothing)
		func() error { return h.Append(ctx, testgen.Events(8, 1, 300)...) },
	} {
		err := call()
		var nd *store.NotDurableError
		if errors.As(err, &nd) && (nd.Seq != 5 || !errors.Is(err, syscall.ENOSPC)) {
			t.Fatalf("after the failed flush: %v, want seq 5 and ENOSPC named", err)
		}
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("after the failed flush: %v, want ENOSPC", err)
		}
	}
	if h.Len() != 8 {
		t.Fatalf("refused calls took events: length %d, want 8", h.Len())
	}
	ff.Clear()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	if err := h.Append(ctx, testgen.Events(8, 2, 300)...); err != nil {
		t.Fatalf("append after the flush that succeeded: %v", err)
	}
	// A DB's Flush ends the failure too.
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
	if err := db.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the DB's flush on a full disk: %v, want ENOSPC", err)
	}
	var nd *store.NotDurableError
	if err := h.Append(ctx, testgen.Events(10, 1, 300)...); !errors.As(err, &nd) || nd.Seq != 8 {
		t.Fatalf("append after the DB's failed flush: %v, want seq 8 not durable", err)
	}
	ff.Clear()
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(10, 1, 300)...); err != nil {
		t.Fatalf("append after the DB's flush that succeeded: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	checkLogs(t, db, map[string][]event.Event{"s": testgen.Events(0, 11, 300)})
	if s := fmt.Sprint(nd); s == "" {
		t.Fatal("empty error text")
	}
}
