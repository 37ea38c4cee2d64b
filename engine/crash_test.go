package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// crashWorkload appends and flushes on a few sessions, deterministically
// from seed, until an operation fails (the injected cut). It returns, per
// session, every event whose append was attempted and how many a
// successful flush acked.
//
// With indexPath, the store keeps a persistent bbolt index in that real
// file (the segments stay on fsys), checkpointed every millisecond, so
// that index checkpoints race the cut.
func crashWorkload(fsys vfs.FS, seed uint64, steps int, indexPath string) (appended map[string][]event.Event, acked map[string]int, err error) {
	return crashWorkloadN(fsys, seed, steps, indexPath, 1)
}

// crashWorkloadN is crashWorkload with writers DBs open on the store at
// once (as several processes: each holds its locks on its own open
// files), each writing its own three sessions, the steps interleaved.
func crashWorkloadN(fsys vfs.FS, seed uint64, steps int, indexPath string, writers int) (appended map[string][]event.Event, acked map[string]int, err error) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed, 7))
	appended, acked = map[string][]event.Event{}, map[string]int{}
	var dbs []*engine.DB
	for range writers {
		// Odd seeds run without preallocation: no background segment
		// creation, so their cut points replay exactly.
		db, err := engine.OpenUnchecked("the workload runs until a cut; its test checks the crashed copies", "/db", &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: seed%2 == 1,
			IndexPath: indexPath, IndexInterval: time.Millisecond, CompactInterval: -1})
		if err != nil {
			return appended, acked, err
		}
		defer db.Close()
		dbs = append(dbs, db)
	}
	hs := map[string]*engine.Handle{}
	var ids []string
	for w := range writers {
		for _, id := range []string{"a", "b", "c"} {
			ids = append(ids, fmt.Sprintf("%s%d", id, w))
		}
	}
	for step := range steps {
		k := r.IntN(len(ids))
		id, db := ids[k], dbs[k/3]
		h := hs[id]
		if h == nil {
			if h, err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
				return appended, acked, fmt.Errorf("step %d: create: %w", step, err)
			}
			hs[id] = h
		}
		switch op := r.IntN(10); {
		case op < 7:
			n := 1 + r.IntN(8)
			next := uint64(len(appended[id]))
			evs := testgen.Events(next, n, 100+r.IntN(400))
			// A failed append has an unknown outcome (a prefix of its
			// frames may reach the disk), so its events count as attempted.
			appended[id] = append(appended[id], evs...)
			if err := h.Append(ctx, evs...); err != nil {
				return appended, acked, fmt.Errorf("step %d: append: %w", step, err)
			}
		case op < 9:
			if err := h.Flush(ctx); err != nil {
				return appended, acked, fmt.Errorf("step %d: flush: %w", step, err)
			}
			acked[id] = len(appended[id])
		default:
			if err := db.Flush(ctx); err != nil {
				return appended, acked, fmt.Errorf("step %d: db flush: %w", step, err)
			}
			for id := range hs {
				if dbs[slices.Index(ids, id)/3] == db {
					acked[id] = len(appended[id])
				}
			}
		}
	}
	return appended, acked, nil
}

// checkAfterCrash reopens the crashed FS and checks each session holds at
// least its acked events and nothing but a prefix of what was appended.
//
// With indexPath, the index file as the crash left it is copied and used
// (a bbolt commit is synced, so the file holds the last one: what a power
// cut leaves of it).
func checkAfterCrash(t *testing.T, crashed *vfs.MemFS, appended map[string][]event.Event, acked map[string]int, label, indexPath string) {
	t.Helper()
	ctx := context.Background()
	opts := &engine.Options{FS: crashed, SegmentSize: 16 << 10, CompactInterval: -1}
	if indexPath != "" {
		b, err := os.ReadFile(indexPath)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		opts.IndexPath = filepath.Join(t.TempDir(), "index.db")
		if err == nil {
			if err := os.WriteFile(opts.IndexPath, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	defer db.Close()
	for id, want := range appended {
		h, err := db.Open(ctx, id, store.Read)
		if err != nil {
			if acked[id] == 0 {
				continue // never flushed: may vanish
			}
			t.Fatalf("%s: session %s (%d acked): %v", label, id, acked[id], err)
		}
		got, err := h.Read(ctx, 0, -1)
		if err != nil {
			t.Fatalf("%s: read %s: %v", label, id, err)
		}
		if len(got) < acked[id] || len(got) > len(want) {
			t.Fatalf("%s: session %s has %d events, %d acked, %d appended", label, id, len(got), acked[id], len(want))
		}
		for i := range got {
			if !sameEvent(got[i], want[i]) {
				t.Fatalf("%s: session %s event %d differs from what was appended", label, id, i)
			}
		}
		// The store takes appends after recovery.
		w, err := db.Open(ctx, id, store.Write)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, testgen.Events(uint64(len(got)), 1, 50)...); err != nil {
			t.Fatalf("%s: append after recovery: %v", label, err)
		}
		w.Close()
	}
}

func sameEvent(a, b event.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.Time == b.Time && string(a.Data) == string(b.Data) &&
		a.Ignorable == b.Ignorable && string(a.SurfaceOp) == string(b.SurfaceOp) && fmt.Sprint(a.SourceEventSeqs) == fmt.Sprint(b.SourceEventSeqs)
}

// TestPowerCutAtEverySyncAndWrite cuts the power at every sync and every
// write of a fixed workload (the cut operation and all later ones fail),
// keeps a random part of what was not synced, reopens and checks. Every
// one with SEGLOG_LONG=1; by default every fifth, about 20 of each kind
// with -short, spread over the whole workload (see sweepPoints).
//
// It runs without an index (every open replays every segment) and with a
// persistent index checkpointed every millisecond, whose checkpoints then
// race the cut: what the index claims must be what a power cut keeps.
func TestPowerCutAtEverySyncAndWrite(t *testing.T) {
	for _, seed := range []uint64{42, 7, 1234} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { powerCutSweep(t, seed, 300, false) })
		t.Run(fmt.Sprintf("seed=%d/index", seed), func(t *testing.T) { powerCutSweep(t, seed, 300, true) })
	}
}

// TestPowerCutTwoWriters is the sweep with two writing DBs on the store
// (as two processes), their steps interleaved: every cut keeps what
// either acknowledged, and the reopened store takes appends. The cut
// points as in TestPowerCutAtEverySyncAndWrite.
func TestPowerCutTwoWriters(t *testing.T) {
	for _, seed := range []uint64{42, 7} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { powerCutSweepN(t, seed, 300, false, 2) })
		t.Run(fmt.Sprintf("seed=%d/index", seed), func(t *testing.T) { powerCutSweepN(t, seed, 300, true, 2) })
	}
}

func powerCutSweep(t *testing.T, seed uint64, steps int, withIndex bool) {
	powerCutSweepN(t, seed, steps, withIndex, 1)
}

func powerCutSweepN(t *testing.T, seed uint64, steps int, withIndex bool, writers int) {
	indexPath := func() string {
		if !withIndex {
			return ""
		}
		return filepath.Join(t.TempDir(), "index.db")
	}
	probe := vfs.NewFault(vfs.NewMem())
	if _, _, err := crashWorkloadN(probe, seed, steps, indexPath(), writers); err != nil {
		t.Fatalf("workload without faults: %v", err)
	}
	syncs, writes := probe.Count(vfs.OpSync), probe.Count(vfs.OpWrite)
	points := 0
	for _, cut := range []struct {
		op    vfs.Op
		n     int
		short int
	}{{vfs.OpSync, syncs, 0}, {vfs.OpWrite, writes, -1}} {
		for _, k := range sweepPoints(cut.n, seed) {
			mem := vfs.NewMem()
			ff := vfs.NewFault(mem, vfs.Rule{Op: cut.op, Nth: k, Sticky: true, Short: cut.short})
			ipath := indexPath()
			appended, acked, _ := crashWorkloadN(ff, seed, steps, ipath, writers)
			for variant, cfg := range []vfs.CrashConfig{
				{},              // the page cache lost whole
				{KeepAll: true}, // all of it reached the disk
				{Rand: rand.New(rand.NewPCG(uint64(k), 1)), Garble: true},
			} {
				label := fmt.Sprintf("cut at %v #%d, variant %d", cut.op, k, variant)
				checkAfterCrash(t, mem.CrashClone(cfg), appended, acked, label, ipath)
				points++
			}
		}
	}
	t.Logf("checked %d cut points (%d syncs, %d writes in the workload)", points, syncs, writes)
}

// sweepPoints are the operations 1..n a power-cut sweep cuts at: every
// one with SEGLOG_LONG=1; by default every fifth, with -short about 20;
// spread over the whole workload (its first rolls and its last flushes
// alike), from an offset that seed picks, and the last one always.
func sweepPoints(n int, seed uint64) []int {
	stride := testlong.Pick(max(1, n/20), 5, 1)
	var ks []int
	for k := 1 + int(seed%uint64(stride)); k <= n; k += stride {
		ks = append(ks, k)
	}
	if n > 0 && (len(ks) == 0 || ks[len(ks)-1] != n) {
		ks = append(ks, n)
	}
	return ks
}
