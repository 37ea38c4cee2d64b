package engine_test

// Hostile cases of the write-out behind an Append (CutBehind): other
// goroutines reading, flushing and forking the session while its frames
// are compressed and placed; write-outs that fail part-way, across a
// roll; Close and DB.Close after a failed write-out; DB.Close racing a
// bulk load; and power cuts while write-outs are in flight.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// behindSize is the size of the events of these tests: a batch of 60
// fills several 4 KiB frames.
const behindSize = 300

// samePrefix reports how got differs from the first len(got) events
// testgen makes (of behindSize bytes), or "".
func samePrefix(got []event.Event) string { return sameFrom(0, got) }

// sameFrom reports how got differs from the len(got) events testgen makes
// from seq from on, or "".
func sameFrom(from int, got []event.Event) string {
	if len(got) == 0 {
		return ""
	}
	want := testgen.Events(uint64(from), len(got), behindSize)
	if reflect.DeepEqual(want, got) {
		return ""
	}
	return cmp.Diff(want, got)
}

// TestAppendBehindConcurrentReadsFlushesForks: one goroutine bulk-loads a
// session (every Append fills frames, written behind it, across segment
// rolls) while others read it through its write handle and a read handle,
// flush the DB, and fork it at the length an Append already returned.
// Every read holds at least what was appended before it started, exactly
// as appended; every fork holds exactly its parent's first n events; and
// the reopened store (and a power cut after the last flush) holds the
// whole log. Run it with -race.
func TestAppendBehindConcurrentReadsFlushesForks(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := func(fs vfs.FS) *engine.Options {
		return &engine.Options{FS: fs, SegmentSize: 64 << 10, FrameBytes: 4 << 10, CompactInterval: -1}
	}
	db, err := engine.OpenStore(t, "/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, enginetest.Meta("bulk"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "bulk", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	const batches, per = 16, 50
	var appended atomic.Int64 // events whose Append returned
	var done atomic.Bool
	errc := make(chan error, 8)
	fail := func(format string, args ...any) {
		select {
		case errc <- fmt.Errorf(format, args...):
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer done.Store(true)
		for b := range batches {
			evs := testgen.Events(uint64(b*per), per, behindSize)
			if err := h.Append(ctx, evs...); err != nil {
				fail("append %d: %v", b, err)
				return
			}
			appended.Store(int64((b + 1) * per))
		}
	})
	for name, rd := range map[string]*engine.Handle{"writer": h, "reader": r} {
		wg.Go(func() {
			for !done.Load() {
				before := appended.Load()
				from := max(0, before-2*per) // (the tail, where the frames are in flight)
				got, err := rd.Read(ctx, int(from), -1)
				if err != nil {
					fail("%s: read: %v", name, err)
					return
				}
				if from+int64(len(got)) < before {
					fail("%s: read %d events from %d, %d were appended before it started", name, len(got), from, before)
					return
				}
				if d := sameFrom(int(from), got); d != "" {
					fail("%s: read of %d events (-want +got):\n%s", name, len(got), d)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for !done.Load() {
			if err := db.Flush(ctx); err != nil {
				fail("DB.Flush: %v", err)
				return
			}
		}
	})
	forks := map[string]uint64{}
	var fmu sync.Mutex
	wg.Go(func() {
		for i := 0; !done.Load(); i++ {
			n := uint64(appended.Load())
			if n == 0 {
				continue
			}
			id := fmt.Sprintf("fork%d", i)
			c, err := db.Fork(ctx, "bulk", n, enginetest.Meta(id))
			if err != nil {
				fail("fork at %d: %v", n, err)
				return
			}
			got, err := c.Read(ctx, 0, int(n))
			c.Close()
			if err != nil {
				fail("fork at %d: read: %v", n, err)
				return
			}
			if uint64(len(got)) != n {
				fail("fork at %d: %d events", n, len(got))
				return
			}
			if d := samePrefix(got); d != "" {
				fail("fork at %d (-want +got):\n%s", n, d)
				return
			}
			fmu.Lock()
			forks[id] = n
			fmu.Unlock()
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	t.Logf("%d forks", len(forks))
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	all := testgen.Events(0, batches*per, behindSize)
	want := map[string][]event.Event{"bulk": all}
	checkLogs(t, db, want)
	// A power cut after the last flush keeps the whole log, and the forks.
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db2, err := engine.OpenStore(t, "/db", opts(crashed))
	if err != nil {
		t.Fatalf("reopen after a power cut: %v", err)
	}
	checkLogs(t, db2, want)
	for id, n := range forks {
		c, err := db2.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatalf("fork %s after a power cut: %v", id, err)
		}
		got, err := c.Read(ctx, 0, int(n))
		c.Close()
		if err != nil || uint64(len(got)) != n || samePrefix(got) != "" {
			t.Fatalf("fork %s at %d after a power cut: %d events, %v", id, n, len(got), err)
		}
	}
	db2.Close()
	r.Close()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAppendBehindFailsAcrossARoll: a write-out behind an Append is split
// by a roll whose next segment cannot be created (a full disk): its first
// frames are placed in the full segment, the rest stay open, and so do the
// next Appends' events. Reads meanwhile return every event once; the
// flush fails while the disk is full; once space is back, every event is
// stored once, in order, after a reopen and after a power cut.
func TestAppendBehindFailsAcrossARoll(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	ff := vfs.NewFault(mem)
	opts := func(fs vfs.FS) *engine.Options {
		return &engine.Options{FS: fs, NoPreallocate: true, Uncompressed: true, SegmentSize: 64 << 10, FrameBytes: 4 << 10, CompactInterval: -1}
	}
	db, err := engine.OpenStore(t, "/db", opts(ff))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	// ~40 KiB of 64: the next batches' write-out needs a roll part-way.
	n := 0
	appendN := func(k int) {
		t.Helper()
		if err := h.Append(ctx, testgen.Events(uint64(n), k, behindSize)...); err != nil {
			t.Fatalf("append at %d: %v", n, err)
		}
		n += k
	}
	appendN(130)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ff.Add(vfs.Rule{Op: vfs.OpCreate, Name: ".seg", Err: syscall.ENOSPC})
	// The Appends go on until the failed write-out is known (the next
	// write-out behind waits for it); from then on an Append takes
	// nothing and names the first seq not durable, the flushed 130.
	refused := false
	for i := 0; i < 8 && !refused; i++ {
		err := h.Append(ctx, testgen.Events(uint64(n), 60, behindSize)...)
		switch {
		case err == nil:
			n += 60
		case errors.Is(err, syscall.ENOSPC) && errors.Is(err, store.ErrNotDurable):
			var nd *store.NotDurableError
			if !errors.As(err, &nd) || nd.Seq != 130 {
				t.Fatalf("append refused with %v, want the first seq not durable, 130", err)
			}
			refused = true
		default:
			t.Fatalf("append at %d with the roll failing: %v", n, err)
		}
		got, err := h.Read(ctx, 0, -1)
		if err != nil || len(got) != n {
			t.Fatalf("read with the roll failing: %d events, %v; want %d", len(got), err, n)
		}
		if d := samePrefix(got); d != "" {
			t.Fatalf("read with the roll failing (-want +got):\n%s", d)
		}
	}
	if !refused || n <= 130 {
		t.Fatalf("%d events taken with the roll failing, refused %v: want some taken, then a refusal", n, refused)
	}
	if err := h.Flush(ctx); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush with the roll failing: %v, want ENOSPC", err)
	}
	if err := h.Enqueue(testgen.Events(uint64(n), 1, behindSize)...); !errors.Is(err, store.ErrNotDurable) {
		t.Fatalf("enqueue after the failed flush: %v, want ErrNotDurable", err)
	}
	if snap, err := db.Stat(ctx, "s"); err != nil || snap.EventCount != uint64(n) {
		t.Fatalf("stat with the roll failing: %d events, %v; want %d", snap.EventCount, err, n)
	}
	ff.Clear()
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush once space is back: %v", err)
	}
	appendN(60)
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush after it: %v", err)
	}
	want := map[string][]event.Event{"s": testgen.Events(0, n, behindSize)}
	checkLogs(t, db, want)
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db2, err := engine.OpenStore(t, "/db", opts(crashed))
	if err != nil {
		t.Fatalf("reopen after a power cut: %v", err)
	}
	checkLogs(t, db2, want)
	if rep, err := engine.Check("/db", &engine.Options{FS: crashed}); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("check after a power cut: %v %v", rep.Problems, err)
	}
	db2.Close()
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCloseAfterBehindFailure: the write-out behind an Append failed (a
// full disk) and the disk is still full: the handle's Close (or the DB's)
// writes the events again and fails with ENOSPC rather than returning nil
// over events it did not store; the store reopens with what was flushed.
func TestCloseAfterBehindFailure(t *testing.T) {
	for _, which := range []string{"handle", "db"} {
		t.Run(which, func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem)
			opts := func(fs vfs.FS) *engine.Options {
				return &engine.Options{FS: fs, NoPreallocate: true, SegmentSize: 1 << 20, FrameBytes: 4 << 10, CompactInterval: -1}
			}
			db, err := engine.OpenStore(t, "/db", opts(ff))
			if err != nil {
				t.Fatal(err)
			}
			h, err := db.Create(ctx, enginetest.Meta("s"))
			if err != nil {
				t.Fatal(err)
			}
			flushed := testgen.Events(0, 5, behindSize)
			if err := h.Append(ctx, flushed...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			ff.Add(vfs.Rule{Op: vfs.OpWrite, Name: ".seg", Err: syscall.ENOSPC})
			if err := h.Append(ctx, testgen.Events(5, 60, behindSize)...); err != nil {
				t.Fatalf("append on a full disk: %v", err)
			}
			if which == "handle" {
				if err := h.Close(); !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("Close on a full disk after a failed write-out: %v, want ENOSPC", err)
				}
			}
			if err := db.Close(); which == "db" && !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("DB.Close on a full disk after a failed write-out: %v, want ENOSPC", err)
			}
			if which == "db" {
				h.Close()
			}
			ff.Clear()
			db, err = engine.OpenStore(t, "/db", opts(mem))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			checkLogs(t, db, map[string][]event.Event{"s": flushed})
		})
	}
}

// TestDBCloseRacesBulkAppends: DB.Close while another goroutine
// bulk-loads sessions (each Append's frames written behind it). Every
// event whose Append returned before Close was called is durable (a power
// cut right after Close keeps it), and each log is its appended events in
// order, with no gap and none twice.
func TestDBCloseRacesBulkAppends(t *testing.T) {
	for round := range 8 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			ctx := context.Background()
			mem := vfs.NewMem()
			opts := func(fs vfs.FS) *engine.Options {
				return &engine.Options{FS: fs, SegmentSize: 128 << 10, FrameBytes: 4 << 10, CompactInterval: -1}
			}
			db, err := engine.OpenStore(t, "/db", opts(mem))
			if err != nil {
				t.Fatal(err)
			}
			ids := []string{"a", "b"}
			var appended [2]atomic.Int64
			var stopped atomic.Bool // an appender returned
			var wg sync.WaitGroup
			for i, id := range ids {
				h, err := db.Create(ctx, enginetest.Meta(id))
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() {
					defer stopped.Store(true)
					for b := 0; ; b++ {
						if err := h.Append(ctx, testgen.Events(uint64(b*50), 50, behindSize)...); err != nil {
							return // the DB closed
						}
						appended[i].Store(int64((b + 1) * 50))
					}
				})
			}
			rng := rand.New(rand.NewPCG(uint64(round), 7))
			for goal := int64(50 * (1 + rng.IntN(6))); appended[0].Load() < goal && !stopped.Load(); {
				// let the load get going
			}
			var before [2]int64
			for i := range ids {
				before[i] = appended[i].Load()
			}
			if err := db.Close(); err != nil {
				t.Fatalf("DB.Close: %v", err)
			}
			wg.Wait()
			for _, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}} {
				db2, err := engine.OpenStore(t, "/db", opts(mem.CrashClone(cfg)))
				if err != nil {
					t.Fatalf("reopen after Close and a power cut: %v", err)
				}
				for i, id := range ids {
					got := readBehindLog(t, db2, id)
					if int64(len(got)) < before[i] {
						t.Errorf("%s: %d events after Close and a power cut; %d were appended before Close", id, len(got), before[i])
					}
					if d := samePrefix(got); d != "" {
						t.Errorf("%s (-want +got):\n%s", id, d)
					}
				}
				db2.Close()
			}
		})
	}
}

// TestPowerCutDuringBulkAppends: power cuts (crash clones, keeping none,
// all or a random part of what was not synced) taken while a bulk load
// runs, its write-outs in flight, and its handle flushed now and then.
// Each reopens to a log that is exactly a prefix of what was appended
// (nothing out of order, nothing twice), holding at least every event a
// Flush acknowledged before the cut.
func TestPowerCutDuringBulkAppends(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := func(fs vfs.FS) *engine.Options {
		return &engine.Options{FS: fs, SegmentSize: 128 << 10, FrameBytes: 4 << 10, CompactInterval: -1}
	}
	db, err := engine.OpenStore(t, "/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, enginetest.Meta("bulk"))
	if err != nil {
		t.Fatal(err)
	}
	var acked, appended atomic.Int64
	var done atomic.Bool
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() {
		defer done.Store(true)
		for b := range 60 {
			if err := h.Append(ctx, testgen.Events(uint64(b*50), 50, behindSize)...); err != nil {
				errc <- err
				return
			}
			appended.Store(int64((b + 1) * 50))
			if b%5 == 4 {
				if err := h.Flush(ctx); err != nil {
					errc <- err
					return
				}
				acked.Store(int64((b + 1) * 50))
			}
		}
	})
	rng := rand.New(rand.NewPCG(1, 2))
	type cut struct {
		fs    *vfs.MemFS
		acked int64
		label string
	}
	var cuts []cut
	for i, last := 0, int64(-1); !done.Load() && i < 40; {
		if appended.Load() == last {
			continue // one cut per Append at most: spread them over the load
		}
		last = appended.Load()
		i++
		a := acked.Load()
		cfgs := []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(i), 3))}}
		cfg := cfgs[rng.IntN(len(cfgs))]
		cuts = append(cuts, cut{mem.CrashClone(cfg), a, fmt.Sprintf("cut %d (%d appended, %d flushed)", i, last, a)})
	}
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	for _, c := range cuts {
		db2, err := engine.OpenStore(t, "/db", opts(c.fs))
		if err != nil {
			t.Fatalf("%s: reopen: %v", c.label, err)
		}
		got := readBehindLog(t, db2, "bulk")
		if int64(len(got)) < c.acked {
			t.Errorf("%s: %d events, %d were flushed before it", c.label, len(got), c.acked)
		}
		if d := samePrefix(got); d != "" {
			t.Errorf("%s (-want +got):\n%s", c.label, d)
		}
		db2.Close()
	}
}

// readBehindLog reads session id whole (nothing if it does not exist).
func readBehindLog(t *testing.T, db *engine.DB, id string) []event.Event {
	t.Helper()
	ctx := context.Background()
	h, err := db.Open(ctx, id, store.Read)
	if errors.Is(err, store.ErrSessionNotFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("open %s: %v", id, err)
	}
	defer h.Close()
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatalf("read %s: %v", id, err)
	}
	return got
}
