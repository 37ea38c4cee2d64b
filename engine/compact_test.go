package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

func segBytes(t *testing.T, fsys vfs.FS, dir string) (int64, int) {
	t.Helper()
	ids, err := segment.List(fsys, dir)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, id := range ids {
		b, _ := vfs.ReadFile(fsys, dir+"/"+segment.Name(id))
		n += int64(len(b))
	}
	return n, len(ids)
}

// compactStore writes sessions over many small segments; deleting those
// whose index is in del.
func compactStore(t *testing.T, fsys vfs.FS, keep map[int]bool) *engine.DB {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 60; j += 10 {
			h.Append(ctx, testgen.Events(uint64(j), 10, 300)...)
		}
		h.Close()
	}
	for i := range 12 {
		if !keep[i] {
			if err := db.Delete(ctx, fmt.Sprintf("s%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return db
}

func TestCompactReclaimsDeleted(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db := compactStore(t, mem, nil) // every session deleted
	before, nsegs := segBytes(t, mem, "/db")
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil {
		t.Fatal(err)
	}
	after, left := segBytes(t, mem, "/db")
	reclaimed := float64(before-after) / float64(before)
	t.Logf("%d segments (%d bytes) -> %d segments (%d bytes): %.1f%% reclaimed; report %d dropped, %d bytes",
		nsegs, before, left, after, 100*reclaimed, len(rep.Dropped), rep.ReclaimedBytes)
	if reclaimed < 0.9 {
		t.Errorf("reclaimed %.1f%% of a store whose sessions were all deleted, want at least 90%%", 100*reclaimed)
	}
	db.Close()
	db, err = engine.OpenStore(t, "/db", &engine.Options{FS: mem.CrashClone(vfs.CrashConfig{}), NoPreallocate: true})
	if err != nil {
		t.Fatalf("reopen after compaction: %v", err)
	}
	defer db.Close()
	if snaps, _ := db.List(ctx); len(snaps) != 0 {
		t.Errorf("%d sessions after deleting all and compacting", len(snaps))
	}
}

// A crash at any point of a compaction (every remove and directory sync
// cut in turn) leaves a store that opens to exactly the live sessions.
func TestCompactCrashAtEveryStep(t *testing.T) {
	ctx := context.Background()
	keep := map[int]bool{3: true, 8: true}
	points := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db := compactStore(t, ff, keep)
		ff.Add(vfs.Rule{Op: vfs.OpRemove, Nth: k, Sticky: true})
		ff.Add(vfs.Rule{Op: vfs.OpSyncDir, Nth: k, Sticky: true})
		_, cerr := db.Compact(ctx, engine.CompactOptions{Roll: true})
		for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}} {
			crashed := mem.CrashClone(cfg)
			db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: crashed, NoPreallocate: true})
			if err != nil {
				t.Fatalf("cut %d variant %d: reopen: %v", k, variant, err)
			}
			snaps, _ := db2.List(ctx)
			if len(snaps) != len(keep) {
				t.Fatalf("cut %d variant %d: %d sessions, want %d", k, variant, len(snaps), len(keep))
			}
			for i := range keep {
				r, err := db2.Open(ctx, fmt.Sprintf("s%d", i), store.Read)
				if err != nil {
					t.Fatal(err)
				}
				evs, err := r.Read(ctx, 0, -1)
				if err != nil || len(evs) != 60 {
					t.Fatalf("cut %d variant %d: s%d has %d events, %v", k, variant, i, len(evs), err)
				}
			}
			db2.Close()
			points++
		}
		db.Close()
		if cerr == nil {
			break // the compaction finished before the k-th step: all steps covered
		}
	}
	t.Logf("checked %d crash points", points)
}

// With the index on the OS: after compacting, the index never points into a
// removed segment, and check finds nothing wrong.
func TestCompactWithIndex(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	opts := &engine.Options{SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true}
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	write := func(i int) {
		h, _ := db.Create(ctx, store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1})
		h.Append(ctx, testgen.Events(0, 60, 300)...)
		h.Close()
	}
	for i := range 8 {
		if i != 5 {
			write(i)
		}
	}
	db.Compact(ctx, engine.CompactOptions{Roll: true}) // seal: their frames end in sealed segments
	for i := range 8 {
		if i != 5 {
			db.Delete(ctx, fmt.Sprintf("s%d", i))
		}
	}
	write(5) // the live session's frames share no segment with the deleted ones'
	// (compaction never splits an incarnation across dropped and kept segments)
	rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
	if err != nil || len(rep.Dropped) == 0 {
		t.Fatalf("compact: %+v, %v", rep, err)
	}
	db.Close()
	if rep, err := engine.Check(dir, opts); err != nil || len(rep.Problems) != 0 || rep.Sessions != 1 {
		t.Fatalf("check after compaction: %+v, %v", rep, err)
	}
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, _ := db.Open(ctx, "s5", store.Read)
	if evs, err := r.Read(ctx, 0, -1); err != nil || len(evs) != 60 {
		t.Fatalf("s5 after compaction: %d events, %v", len(evs), err)
	}
}

// TestBackgroundCompaction: with CompactInterval set, segments holding only
// deleted sessions go away without a Compact call, while appends go on,
// and the live sessions are untouched.
func TestBackgroundCompaction(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := &engine.Options{FS: mem, SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true, CompactInterval: 2 * time.Millisecond}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := range 12 {
		h, err := db.Create(ctx, store.Header{ID: fmt.Sprintf("s%d", i), CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, testgen.Events(0, 60, 300)...); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	orig, err := segment.List(mem, "/db")
	if err != nil {
		t.Fatal(err)
	}
	nsegs := len(orig)
	present := func() int {
		now, _ := segment.List(mem, "/db")
		n := 0
		for _, id := range orig {
			if slices.Contains(now, id) {
				n++
			}
		}
		return n
	}
	// Keep s11 (the newest). Dropping-only compaction never splits an
	// incarnation, so a live session sharing a segment keeps its
	// neighbours' segments too; this store has none but s11.
	for i := range 11 {
		if err := db.Delete(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	live, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	var seq uint64
	left := nsegs
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		// Appends go on while the compactor works.
		if err := live.Append(ctx, testgen.Events(seq, 1, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := live.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		seq++
		if left = present(); left <= nsegs/2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	t.Logf("%d segments -> %d of them left by the background compactor, %d appends meanwhile", nsegs, left, seq)
	if left > nsegs/2 {
		t.Fatalf("background compaction left %d of %d segments", left, nsegs)
	}
	for _, id := range []string{"s11"} {
		if got := engine.ReadAll(t, db, id); len(got) != 60 {
			t.Errorf("%s holds %d events after background compaction, want 60", id, len(got))
		}
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := engine.ReadAll(t, db, "live"); uint64(len(got)) != seq {
		t.Errorf("live holds %d events after reopen, want %d", len(got), seq)
	}
	if snaps, _ := db.List(ctx); len(snaps) != 2 {
		t.Errorf("%d sessions after reopen, want 2", len(snaps))
	}
}

// mixedStore is a store for rewrites: a deleted session filling segments
// of its own, sessions appended round-robin (every segment holds
// several), half of them deleted, one deleted and created
// again, one v2 session migrated (its old incarnation replaced). It
// returns the events of the live sessions.
func mixedStore(t *testing.T, fsys vfs.FS) (*engine.DB, map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 2 << 10, NoPreallocate: true})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]event.Event{}
	createV2(t, db, "m", v2Events(3))
	// gone fills segments of its own: they are removed whole.
	g, err := db.Create(ctx, store.Header{ID: "gone", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < 120; seq += 10 {
		g.Append(ctx, testgen.Events(seq, 10, 300)...)
	}
	g.Close()
	if err := db.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	hs := map[string]*engine.Handle{}
	for i := range 6 {
		id := fmt.Sprintf("s%d", i)
		if hs[id], err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 5 {
		for i := range 6 {
			id := fmt.Sprintf("s%d", i)
			evs := testgen.Events(uint64(round*8), 8, 300)
			if err := hs[id].Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			if err := hs[id].Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], evs...)
		}
	}
	for i := range 6 {
		id := fmt.Sprintf("s%d", i)
		hs[id].Close()
		if i%2 == 1 {
			if err := db.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			delete(want, id)
		}
	}
	if _, err := db.Migrate(ctx, "m"); err != nil {
		t.Fatal(err)
	}
	want["m"] = engine.ReadAll(t, db, "m")
	// s1 again: a new incarnation after the deleted one.
	h, err := db.Create(ctx, store.Header{ID: "s1", CreatedAt: 2})
	if err != nil {
		t.Fatal(err)
	}
	want["s1"] = testgen.Events(0, 12, 200)
	h.Append(ctx, want["s1"]...)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return db, want
}

func expectSessions(t *testing.T, label string, db *engine.DB, want map[string][]event.Event) {
	t.Helper()
	snaps, err := db.List(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", label, err)
	}
	if len(snaps) != len(want) {
		t.Fatalf("%s: %d sessions, want %d", label, len(snaps), len(want))
	}
	for id, evs := range want {
		engine.SameEvents(t, label+" "+id, engine.ReadAll(t, db, id), evs)
	}
}

// TestCompactRewriteCrashAtEveryOp cuts the power at every file-system
// operation of a compaction that rewrites most segments (the k-th
// operation and all after it fail, then the synced state, and the state
// with every unsynced write and directory change kept, are reopened):
// each reopens to exactly the live sessions with all their events, and a
// compaction after the reopen finishes and changes nothing they hold.
func TestCompactRewriteCrashAtEveryOp(t *testing.T) {
	ctx := context.Background()
	points, rewrites := 0, 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db, want := mixedStore(t, ff)
		ff.Add(vfs.Rule{Op: vfs.OpAny, Nth: k, Sticky: true})
		rep, cerr := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.95})
		for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}} {
			label := fmt.Sprintf("cut %d variant %d", k, variant)
			db2, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem.CrashClone(cfg), NoPreallocate: true})
			if err != nil {
				t.Fatalf("%s: reopen: %v", label, err)
			}
			expectSessions(t, label, db2, want)
			if _, err := db2.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.95}); err != nil {
				t.Fatalf("%s: compact after reopen: %v", label, err)
			}
			expectSessions(t, label+" recompacted", db2, want)
			db2.Close()
			points++
		}
		db.Close()
		if cerr == nil {
			rewrites = len(rep.Rewritten)
			if rewrites == 0 || len(rep.Dropped) == 0 {
				t.Fatalf("the compaction rewrote %d and dropped %d segments; the sweep needs both", rewrites, len(rep.Dropped))
			}
			break // it finished before the k-th operation: every step was cut
		}
	}
	t.Logf("checked %d crash points of a compaction rewriting %d segments", points, rewrites)
}

// interleaved writes n sessions round-robin (every segment holds many of
// them) and deletes all but every keep-th; it returns the live ones' events.
func interleaved(tb testing.TB, db *engine.DB, n, rounds, keep int) map[string][]event.Event {
	tb.Helper()
	ctx := context.Background()
	hs := make([]*engine.Handle, n)
	want := map[string][]event.Event{}
	for i := range n {
		var err error
		if hs[i], err = db.Create(ctx, store.Header{ID: fmt.Sprintf("s%03d", i), CreatedAt: 1}); err != nil {
			tb.Fatal(err)
		}
	}
	for r := range rounds {
		for i, h := range hs {
			evs := testgen.Events(uint64(r*8), 8, 300)
			if err := h.Append(ctx, evs...); err != nil {
				tb.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil { // a frame per round: sessions interleave in every segment
				tb.Fatal(err)
			}
			if i%keep == 0 {
				want[h.ID()] = append(want[h.ID()], evs...)
			}
		}
	}
	for i, h := range hs {
		h.Close()
		if i%keep != 0 {
			if err := db.Delete(ctx, h.ID()); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return want
}

// TestCompactReclaimsInterleaved: with 9 of every 10 sessions deleted and
// the live tenth interleaved in every segment, no segment is dead, yet
// rewriting reclaims at least 80% of the bytes; the live sessions read the
// same before and after a reopen.
func TestCompactReclaimsInterleaved(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := &engine.Options{FS: mem, SegmentSize: 64 << 10, NoPreallocate: true}
	db, err := engine.OpenStore(t, "/db", opts)
	if err != nil {
		t.Fatal(err)
	}
	want := interleaved(t, db, 40, 12, 10)
	before, nsegs := segBytes(t, mem, "/db")
	dropOnly, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: -1})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := db.Compact(ctx, engine.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	after, left := segBytes(t, mem, "/db")
	reclaimed := float64(before-after) / float64(before)
	t.Logf("%d segments (%d bytes), 4 of 40 sessions live: drop-only compaction reclaimed %d bytes; rewriting %d segments, dropping %d: %d segments (%d bytes), %.1f%% reclaimed",
		nsegs, before, dropOnly.ReclaimedBytes, len(rep.Rewritten), len(rep.Dropped), left, after, 100*reclaimed)
	if reclaimed < 0.8 {
		t.Errorf("reclaimed %.1f%% of a store with 90%% of its sessions deleted, want at least 80%%", 100*reclaimed)
	}
	expectSessions(t, "after compaction", db, want)
	db.Close()
	if db, err = engine.OpenStore(t, "/db", opts); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	expectSessions(t, "after reopen", db, want)
}

// BenchmarkCompactRewrite: compacting segments of which a tenth is live,
// in MB/s of bytes reclaimed (every segment read, its live frames
// rewritten and synced, the index relocated).
func BenchmarkCompactRewrite(b *testing.B) {
	ctx := context.Background()
	var bytes int64
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		opts := &engine.Options{SegmentSize: 1 << 20, NoPreallocate: true, CompactInterval: -1}
		db, err := engine.OpenStore(b, dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		interleaved(b, db, 100, 20, 10)
		b.StartTimer()
		rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
		if err != nil || len(rep.Rewritten) == 0 {
			b.Fatalf("compact = %+v, %v", rep, err)
		}
		b.StopTimer()
		bytes += rep.ReclaimedBytes
		db.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(bytes)/1e6/b.Elapsed().Seconds(), "MB-reclaimed/s")
}
