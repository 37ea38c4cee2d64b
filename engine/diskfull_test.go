package engine_test

// A full disk is not a broken disk: a write that fails before its
// fdatasync placed nothing, the flushes it covered fail with the cause,
// their events stay with their handles for the next flush, and the store
// goes on for everyone. An fsync error still poisons (poison_test.go).

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestWriteErrorKeepsEvents: session b's flush hits ENOSPC on its write
// (full and short writes, preallocated or not). The flush fails with
// ENOSPC; nothing was placed, and b's events stay with its handle: once
// space is back, the next flush stores them. Session a is untouched and
// goes on appending and flushing; a crash at any point afterwards, and a
// clean reopen, keep exactly what was acknowledged.
func TestWriteErrorKeepsEvents(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rule     vfs.Rule
		prealloc bool
	}{
		{"enospc", vfs.Rule{Op: vfs.OpWrite, Nth: 1, Err: syscall.ENOSPC}, false},
		{"short", vfs.Rule{Op: vfs.OpWrite, Nth: 1, Short: -1, Err: syscall.ENOSPC}, false},
		{"short-prealloc", vfs.Rule{Op: vfs.OpWrite, Nth: 1, Short: -1, Err: syscall.ENOSPC}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			opts := &engine.Options{FS: ff, NoPreallocate: !tc.prealloc, SegmentSize: 1 << 20, CompactInterval: -1}
			db, err := engine.OpenStore(t, "/db", opts)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string][]event.Event{}
			a, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			b, err := db.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
			if err != nil {
				t.Fatal(err)
			}
			want["a"] = testgen.Events(0, 5, 300)
			want["b"] = testgen.Events(0, 3, 300)
			for id, h := range map[string]*engine.Handle{"a": a, "b": b} {
				if err := h.Append(ctx, want[id]...); err != nil {
					t.Fatal(err)
				}
				if err := h.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			// b's next flush meets the full disk.
			kept := testgen.Events(3, 4, 300)
			if err := b.Append(ctx, kept...); err != nil {
				t.Fatal(err)
			}
			ff.Add(tc.rule)
			err = b.Flush(ctx)
			if !errors.Is(err, syscall.ENOSPC) || errors.Is(err, store.ErrWriteLost) {
				t.Fatalf("flush on a full disk: %v, want ENOSPC (and nothing lost)", err)
			}
			if snap, err := db.Stat(ctx, "b"); err != nil || snap.EventCount != 7 {
				t.Fatalf("b after its failed write: %d events, %v; want the 7 appended", snap.EventCount, err)
			}
			ff.Clear()
			// Space is back: b's next flush stores what the failed one did not.
			if err := b.Flush(ctx); err != nil {
				t.Fatalf("flush once space is back: %v", err)
			}
			want["b"] = append(want["b"], kept...)
			// The store goes on: a appends and flushes.
			more := testgen.Events(5, 10, 300)
			if err := a.Append(ctx, more...); err != nil {
				t.Fatalf("another session after the full disk: %v", err)
			}
			if err := a.Flush(ctx); err != nil {
				t.Fatalf("another session's flush after the full disk: %v", err)
			}
			want["a"] = append(want["a"], more...)
			again := testgen.Events(7, 2, 300)
			if err := b.Append(ctx, again...); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want["b"] = append(want["b"], again...)
			checkLogs(t, db, want)
			// A power cut now keeps every acknowledged event.
			for _, cfg := range []vfs.CrashConfig{{KeepAll: true}, {}} {
				crashed := mem.CrashClone(cfg)
				db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: !tc.prealloc, CompactInterval: -1})
				if err != nil {
					t.Fatalf("reopen after a crash: %v", err)
				}
				checkLogs(t, db2, want)
				if rep, err := engine.Check("/db", &engine.Options{FS: crashed}); err != nil || len(rep.Problems) != 0 {
					t.Fatalf("check after a crash: %v %v", rep.Problems, err)
				}
				db2.Close()
			}
			a.Close()
			b.Close()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, err = engine.OpenStore(t, "/db", &engine.Options{FS: mem, NoPreallocate: !tc.prealloc, CompactInterval: -1})
			if err != nil {
				t.Fatal(err)
			}
			checkLogs(t, db, want)
			db.Close()
		})
	}
}

// TestPoisonedStoreReopensInPlace: after an fsync error poisons the store,
// Close releases it and the same process opens it again, with every
// acknowledged event.
func TestPoisonedStoreReopensInPlace(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	opts := &engine.Options{FS: ff, NoPreallocate: true, CompactInterval: -1}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	want := testgen.Events(0, 4, 200)
	h.Append(ctx, want...)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Append(ctx, testgen.Events(4, 2, 200)...)
	ff.Add(vfs.Rule{Op: vfs.OpSync, Nth: 1})
	if err := h.Flush(ctx); err == nil {
		t.Fatal("flush succeeded despite the fsync error")
	}
	if err := db.Close(); err == nil {
		t.Fatal("close of a poisoned store reports nothing")
	}
	ff.Clear()
	db, err = engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatalf("reopen in the same process: %v", err)
	}
	defer db.Close()
	r, err := db.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, 4)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("acknowledged events (-want +got):\n%s", diff)
	}
}

// TestFullTmpfs runs the engine on a real, small file system (a tmpfs
// mounted for the test; it needs root, as CI has): the disk fills while
// the next segment is prepared and then at the roll (preallocated), or
// while a flush writes (not preallocated). The flush fails with
// ENOSPC, nothing but the segments is left behind (no partial segment, no
// poisoned store, a bounded number of warnings), and once space is freed
// the same DB goes on without a reopen.
func TestFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	t.Run("prealloc", func(t *testing.T) { fullTmpfs(t, false) })
	t.Run("no-prealloc", func(t *testing.T) { fullTmpfs(t, true) })
	t.Run("smaller-than-a-segment", smallerThanASegment)
	t.Run("never-flushes", neverFlushesOnAFullTmpfs)
}

// neverFlushesOnAFullTmpfs: a host that never flushes appends and
// enqueues on a tmpfs that fills. Its first call after a window's flush
// met ENOSPC fails with a *store.NotDurableError naming ENOSPC, and so
// does every call until space returns; then the window's retry writes
// what the handle holds and the calls are taken again, without a Flush.
// Nothing handed over is dropped: after a reopen the log is every event
// the host was told nil for, in order (issue 44: 24,497 such events were
// lost, the calls all returning nil).
func neverFlushesOnAFullTmpfs(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=2m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	ctx := context.Background()
	storeDir := filepath.Join(dir, "store")
	filler := filepath.Join(dir, "filler")
	const window = 20 * time.Millisecond
	db, err := engine.OpenStore(t, storeDir, &engine.Options{SegmentSize: 256 << 10, Uncompressed: true, WriteBehindWindow: window, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*int64(st.Bsize)-256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var told []event.Event
	call := func(i int) error {
		evs := testgen.Events(uint64(len(told)), 4, 1000)
		var err error
		if i%2 == 0 {
			err = h.Append(ctx, evs...)
		} else {
			err = h.Enqueue(evs...)
		}
		if err == nil {
			told = append(told, evs...)
		} else if h.Len() != uint64(len(told)) {
			t.Fatalf("a refused call took events: length %d, told nil for %d", h.Len(), len(told))
		}
		return err
	}
	deadline := time.Now().Add(30 * time.Second) // (bounds the waits below)
	var first error
	for i := 0; first == nil; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no call failed on the full tmpfs (%d events told nil)", len(told))
		}
		first = call(i)
		time.Sleep(time.Millisecond)
	}
	var nd *store.NotDurableError
	if !errors.As(first, &nd) || !errors.Is(first, syscall.ENOSPC) {
		t.Fatalf("the first failed call: %v, want a *store.NotDurableError of ENOSPC", first)
	}
	for i := range 20 { // the failure lasts: every call fails
		if err := call(i); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("call %d after the first failure, the disk still full: %v, want ENOSPC", i, err)
		}
		time.Sleep(window / 2)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // the retry, backing off to at most 5 s, ends it
		if time.Now().After(deadline) {
			t.Fatal("the calls were still refused 30 s after the test began, space back")
		}
		if err := call(i); err == nil {
			break
		}
		time.Sleep(window)
	}
	for i := range 20 {
		if err := call(i); err != nil {
			t.Fatalf("call %d once space is back: %v", i, err)
		}
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, storeDir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkLogs(t, db, map[string][]event.Event{"s": told})
}

// smallerThanASegment: a store on a file system with less room than one
// preallocated segment (64 MiB) opens, takes writes and reopens: the
// segment is created without preallocation. (Open used to fail, as did a
// write open whose newest segment was sealed, on a full disk.)
func smallerThanASegment(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	// (A cleanup, not a defer: the end-of-test check of the store in
	// dir/store, which runs first, reads it on the tmpfs.)
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	ctx := context.Background()
	storeDir := filepath.Join(dir, "store")
	want := map[string][]event.Event{}
	for round := range 3 {
		db, err := engine.OpenStore(t, storeDir, &engine.Options{CompactInterval: -1})
		if err != nil {
			t.Fatalf("open %d on a small file system: %v", round, err)
		}
		more := writeSessions(t, db, 20, "a")
		want["a"] = append(want["a"], more["a"]...)
		checkLogs(t, db, want)
		if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true}); err != nil { // the newest sealed: the next open creates one
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func fullTmpfs(t *testing.T, noPrealloc bool) {
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	// (A cleanup, not a defer: the end-of-test check of the store in
	// dir/store, which runs first, reads it on the tmpfs.)
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	ctx := context.Background()
	storeDir := filepath.Join(dir, "store")
	filler := filepath.Join(dir, "filler")
	var log logBuffer
	db, err := engine.OpenStore(t, storeDir, &engine.Options{SegmentSize: 256 << 10, NoPreallocate: noPrealloc, IndexInterval: 1 << 40, CompactInterval: -1, Logger: log.logger()})
	if err != nil {
		t.Fatal(err)
	}
	// Fill what is left but a little.
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if err := os.WriteFile(filler, make([]byte, free-64<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var acked, pending []event.Event
	var failed error
	for seq := uint64(0); seq < 2000 && failed == nil; seq += 10 {
		evs := testgen.Events(seq, 10, 1000)
		if err := h.Append(ctx, evs...); err != nil {
			failed = err
			break
		}
		if err := h.Flush(ctx); err != nil {
			failed, pending = err, evs
			break
		}
		acked = append(acked, evs...)
	}
	if !errors.Is(failed, syscall.ENOSPC) {
		t.Fatalf("the disk never filled, or failed otherwise: %v (%d events acknowledged)", failed, len(acked))
	}
	t.Logf("failed with %v after %d events; log:\n%s", failed, len(acked), log.String())
	if n := strings.Count(log.String(), "preparing the next segment failed"); n > 2 {
		t.Errorf("%d warnings about the same failure", n)
	}
	names, _ := os.ReadDir(storeDir)
	for _, n := range names {
		if strings.Contains(n.Name(), ".create") {
			t.Errorf("a partial segment was left: %s", n.Name())
		}
	}
	// Space comes back: the same DB goes on.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// Nothing was placed: the appended events are still there; flush again.
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush again once space is back: %v", err)
	}
	acked = append(acked, pending...)
	if snap, _ := db.Stat(ctx, "s"); snap.EventCount != uint64(len(acked)) {
		t.Fatalf("%d events stored, %d acknowledged", snap.EventCount, len(acked))
	}
	next := uint64(len(acked))
	evs := testgen.Events(next, 300, 1000) // past the next roll
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatalf("append once space is back: %v", err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	acked = append(acked, evs...)
	h.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = engine.OpenStore(t, storeDir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	checkLogs(t, db, map[string][]event.Event{"s": acked})
}

// TestFullDiskUnderWriteBehind: a background write of enqueued events
// takes them into the session, and then its frame's write meets a full
// disk. The events are the session's (a read sees them), so the
// write-behind must not hold them to append again: once space is back,
// the next Flush stores them, and the handle goes on. (It held them: every
// later Flush failed with "append seq mismatch", for good.)
func TestFullDiskUnderWriteBehind(t *testing.T) {
	ctx := context.Background()
	ff := vfs.NewFault(vfs.NewMem())
	// The test fires the write-behind's window itself; FlushOnly arms no
	// durability window beside it.
	fires := make(chan func(), 1)
	db, err := engine.OpenStore(t, "/db", &engine.Options{FlushOnly: true, FS: ff, NoPreallocate: true, CompactInterval: -1, FrameBytes: 1 << 10,
		AfterFunc: func(_ time.Duration, f func()) handle.Timer {
			fires <- f
			return firedTimer{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 2, 300)
	if err := h.Append(ctx, want...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	queued := testgen.Events(2, 8, 300) // (past FrameBytes: the background write cuts a frame)
	if err := h.Enqueue(queued...); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpWrite, Err: syscall.ENOSPC})
	(<-fires)() // the window ends: the background write meets the full disk
	want = append(want, queued...)
	if got, err := h.Read(ctx, 0, -1); err != nil || len(got) != len(want) {
		t.Fatalf("read on the full disk: %d events, %v; want %d", len(got), err, len(want))
	}
	if err := h.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on the full disk: %v, want ENOSPC", err)
	}
	ff.Clear()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	more := testgen.Events(10, 3, 300)
	if err := h.Append(ctx, more...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want = append(want, more...)
	checkLogs(t, db, map[string][]event.Event{"s": want})
}
