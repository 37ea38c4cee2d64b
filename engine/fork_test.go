package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

// forkEvents is n events of a few hundred bytes each, that compress
// little (so that they fill segments).
func forkEvents(from, n uint64, tag string) []event.Event {
	var evs []event.Event
	for seq := from; seq < from+n; seq++ {
		sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d", tag, seq))
		evs = append(evs, event.Event{Seq: seq, Type: "user/message", Time: 1000 + int64(seq), Data: json.RawMessage(fmt.Sprintf(`{"n":%d,"tag":%q,"pad":"%x%x"}`, seq, tag, sum, sum[:16]))})
	}
	return evs
}

// TestForkOutlivesItsParent: a fork shares its parent's frames, and keeps
// them when the parent is deleted and compacted, across a reopen (a crash
// that keeps only what was synced, without an index; a close and open,
// with one); the frames go once the fork goes too.
func TestForkOutlivesItsParent(t *testing.T) {
	ctx := context.Background()
	for _, variant := range []string{"mem-crash", "os-index"} {
		t.Run(variant, func(t *testing.T) {
			mem := vfs.NewMem()
			dir, opts := "/db", &engine.Options{FS: mem, SegmentSize: 64 << 10}
			if variant == "os-index" {
				dir, opts = engine.CheckedDir(t), &engine.Options{SegmentSize: 64 << 10}
			}
			reopen := func(db *engine.DB) *engine.DB {
				t.Helper()
				if variant == "mem-crash" {
					crashed := mem.CrashClone(vfs.CrashConfig{})
					db.Close()
					mem = crashed
					opts = &engine.Options{FS: mem, SegmentSize: 64 << 10}
				} else {
					db.Close()
				}
				db, err := engine.OpenStore(t, dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				return db
			}
			db, err := engine.OpenStore(t, dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { db.Close() }()
			p, err := db.Create(ctx, enginetest.Meta("p"))
			if err != nil {
				t.Fatal(err)
			}
			parent := forkEvents(0, 3000, "p")
			for i := 0; i < len(parent); i += 100 { // a flush a turn: many frames
				if err := p.Append(ctx, parent[i:i+100]...); err != nil {
					t.Fatal(err)
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			before, err := db.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c, err := db.Fork(ctx, "p", 2550, enginetest.Meta("c")) // inside a frame
			if err != nil {
				t.Fatal(err)
			}
			st, err := db.Stat(ctx, "c")
			if err != nil || st.SizeBytes > 4096 || st.EventCount != 2551 {
				t.Fatalf("Stat of the fork: %+v, %v: want 2551 events in under 4 KiB of its own", st, err)
			}
			c.Close() // durable without a flush: Fork synced it
			p.Close()
			if err := db.Delete(ctx, "p"); err != nil {
				t.Fatal(err)
			}
			after, err := db.Usage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var live, liveBefore int64
			for _, u := range before {
				liveBefore += u.LiveBytes
			}
			for _, u := range after {
				live += u.LiveBytes
			}
			if live < liveBefore {
				t.Errorf("Usage counts %d live bytes with the parent deleted and its fork alive, %d before: the fork keeps them", live, liveBefore)
			}
			rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Dropped) > 0 {
				t.Errorf("compaction dropped segments %v of the fork's parent", rep.Dropped)
			}
			db = reopen(db)
			want := append(parent[:2550:2550], event.Event{})
			check := func(what string) {
				t.Helper()
				r, err := db.Open(ctx, "c", store.Write)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				defer r.Close()
				got, err := r.Read(ctx, 0, -1)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if len(got) != 2551 || !store.IsInheritedMarker(&got[2550]) {
					t.Fatalf("%s: %d events", what, len(got))
				}
				want[2550] = got[2550]
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: inherited events differ (-parent +fork):\n%s", what, diff)
				}
			}
			check("fork after its parent was deleted and compacted")
			if _, err := db.Stat(ctx, "p"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("Stat of the deleted parent = %v", err)
			}
			// The fork goes: so do the parent's frames.
			if err := db.Delete(ctx, "c"); err != nil {
				t.Fatal(err)
			}
			rep, err = db.Compact(ctx, engine.CompactOptions{Roll: true})
			if err != nil {
				t.Fatal(err)
			}
			var total int64
			for _, u := range before {
				total += u.LiveBytes
			}
			if rep.ReclaimedBytes < total/2 {
				t.Errorf("with the fork gone, compaction reclaimed %d bytes of the parent's %d", rep.ReclaimedBytes, total)
			}
			db = reopen(db)
			if ss, err := db.List(ctx); err != nil || len(ss) != 0 {
				t.Errorf("List after both went: %v, %v", ss, err)
			}
		})
	}
}

// TestForkFollowsMovedFrames: a compaction that rewrites the segments of
// a fork's parent moves the shared frames; the fork reads them at their
// new places, in this process, in another one, and after a reopen from
// the index (whose copy of them moved with the parent's).
func TestForkFollowsMovedFrames(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	opts := &engine.Options{SegmentSize: 64 << 10}
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { db.Close() }()
	p, _ := db.Create(ctx, enginetest.Meta("p"))
	d, _ := db.Create(ctx, enginetest.Meta("dead"))
	pe, de := forkEvents(0, 1500, "p"), forkEvents(0, 1500, "dead")
	for i := 0; i < 1500; i += 50 { // interleaved: every segment is half dead once "dead" goes
		if err := p.Append(ctx, pe[i:i+50]...); err != nil {
			t.Fatal(err)
		}
		if err := d.Append(ctx, de[i:i+50]...); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c, err := db.Fork(ctx, "p", 1200, enginetest.Meta("c"))
	if err != nil {
		t.Fatal(err)
	}
	// Another process, which loaded the fork before the move.
	other, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { other.Close() }()
	read := func(db *engine.DB, what string) {
		t.Helper()
		r, err := db.Open(ctx, "c", store.Read)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer r.Close()
		got, err := r.Read(ctx, 0, -1)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(got) != 1202 {
			t.Fatalf("%s: %d events, want 1202", what, len(got))
		}
		if diff := cmp.Diff(pe[:1200], got[:1200]); diff != "" {
			t.Errorf("%s: (-parent +fork):\n%s", what, diff)
		}
	}
	if err := c.Append(ctx, forkEvents(1201, 1, "c")...); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	read(other, "the other process, before")
	d.Close()
	if err := db.Delete(ctx, "dead"); err != nil {
		t.Fatal(err)
	}
	// Roll first, then let the other process follow past it: a compaction
	// moves nothing that a writing process has not followed.
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: -1}); err != nil {
		t.Fatal(err)
	}
	read(other, "the other process, after the delete")
	rep, err := db.Compact(ctx, engine.CompactOptions{LiveRatio: 0.9})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rewritten) == 0 {
		t.Fatalf("no segment rewritten: %+v", rep)
	}
	read(db, "this process, after the rewrite")
	read(other, "the other process, after the rewrite")
	// The parent goes, and the segments move again.
	p.Close()
	if err := db.Delete(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: -1}); err != nil {
		t.Fatal(err)
	}
	read(other, "the other process, after the parent's delete")
	// The fork keeps the deleted parent's frames: nothing of them goes.
	if rep, err = db.Compact(ctx, engine.CompactOptions{LiveRatio: 0.99}); err != nil || len(rep.Rewritten)+len(rep.Dropped) > 0 {
		t.Fatalf("compaction after the parent's delete: %+v, %v", rep, err)
	}
	read(db, "this process, after the parent went")
	read(other, "the other process, after the parent went")
	c.Close()
	other.Close()
	db.Close()
	db, err = engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	read(db, "a reopen from the index")
	if rep, err := engine.Check(dir, &engine.Options{ReadOnly: true}); err != nil || len(rep.Problems) > 0 {
		t.Errorf("check: %v %v", rep, err)
	}
}

// BenchmarkFork forks a 100k-event session at its end: the time Fork
// takes (it syncs the fork's header and marker) and the bytes the fork
// adds to the segments. The parent is written in 1,000-event appends
// (bulk: ~200 frames) or a flush every 20 events (turns: 5,000 frames,
// each of which the fork shares by reference).
func BenchmarkFork(b *testing.B) {
	for _, shape := range []struct {
		name  string
		batch int
		flush bool
	}{{"bulk", 1000, false}, {"turns", 20, true}} {
		b.Run(shape.name, func(b *testing.B) {
			ctx := context.Background()
			db, err := engine.OpenStore(b, b.TempDir(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			p, err := db.Create(ctx, enginetest.Meta("p"))
			if err != nil {
				b.Fatal(err)
			}
			const n = 100_000
			evs := make([]event.Event, 0, shape.batch)
			for seq := uint64(0); seq < n; seq++ {
				evs = append(evs, event.Event{Seq: seq, Type: "user/message", Time: 1000 + int64(seq), Data: json.RawMessage(fmt.Sprintf(`{"turn":%d,"text":"event %d of a long agent session"}`, seq/20, seq))})
				if len(evs) == cap(evs) {
					if err := p.Append(ctx, evs...); err != nil {
						b.Fatal(err)
					}
					evs = evs[:0]
					if shape.flush {
						if err := p.Flush(ctx); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			var disk int64
			b.ResetTimer()
			for i := range b.N {
				c, err := db.Fork(ctx, "p", n, enginetest.Meta(fmt.Sprintf("c%d", i)))
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				st, err := db.Stat(ctx, c.ID())
				if err != nil {
					b.Fatal(err)
				}
				disk += st.SizeBytes
				c.Close()
				b.StartTimer()
			}
			b.ReportMetric(float64(disk)/float64(b.N), "disk-B/fork")
		})
	}
}

// TestSeedMarkerRules: a seeded session may carry markers before its cut
// (inherited from its parent), never after it; an unseeded one none.
func TestSeedMarkerRules(t *testing.T) {
	ctx := context.Background()
	marker := func(seq uint64) event.Event {
		return event.Event{Seq: seq, Type: "session/end-seed", Time: 1000, Data: json.RawMessage(`{"inherited":true}`)}
	}
	turn := func(seq uint64) event.Event {
		return event.Event{Seq: seq, Type: "turn/start", Time: 1000, Data: json.RawMessage(`{"turn":0}`)}
	}
	for _, c := range []struct {
		name      string
		seeded    bool
		inherited uint64
		log       []event.Event
		ok        bool
	}{
		{"marker at the cut", true, 1, []event.Event{turn(0), marker(1), turn(2)}, true},
		{"inherited marker before the cut", true, 3, []event.Event{turn(0), marker(1), turn(2), marker(3)}, true},
		{"marker after the cut", true, 1, []event.Event{turn(0), marker(1), marker(2)}, false},
		{"no marker at the cut", true, 1, []event.Event{turn(0), turn(1)}, false},
		{"unseeded with a marker", false, 0, []event.Event{turn(0), marker(1)}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := engine.OpenStore(t, "/db", &engine.Options{FS: vfs.NewMem()})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if !c.ok {
				engine.ExpectProblem(t, "/db", "bad seed marker")
			}
			hdr := enginetest.Meta("s")
			hdr.IsSeeded = c.seeded
			h, err := db.Create(ctx, hdr, store.Inherited(c.inherited))
			if err != nil {
				t.Fatal(err)
			}
			if err := h.Append(ctx, c.log...); err != nil {
				t.Fatal(err)
			}
			h.Close()
			r, err := db.Open(ctx, "s", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			_, rerr := r.Read(ctx, 0, -1)
			_, werr := db.Open(ctx, "s", store.Write)
			for what, err := range map[string]error{"read": rerr, "write open": werr} {
				if c.ok && err != nil || !c.ok && !errors.Is(err, store.ErrSeed) {
					t.Errorf("%s: %v (want ok: %v)", what, err, c.ok)
				}
			}
		})
	}
}

// TestForkPowerCut cuts the power at every sync and every write of a
// Fork, then of the delete of its parent and a compaction: the store
// reopens; an acknowledged Fork is never lost, one that did not return is
// absent or whole; an acknowledged delete stays.
func TestForkPowerCut(t *testing.T) {
	ctx := context.Background()
	parent := forkEvents(0, 40, "p")
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true}
	}
	setup := func() *vfs.MemFS {
		mem := vfs.NewMem()
		db, err := engine.OpenStore(t, "/db", opts(mem))
		if err != nil {
			t.Fatal(err)
		}
		p, err := db.Create(ctx, enginetest.Meta("p"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(parent); i += 8 {
			if err := p.Append(ctx, parent[i:i+8]...); err != nil {
				t.Fatal(err)
			}
			if err := p.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return mem
	}
	type progress struct{ forked, deleted bool }
	run := func(fsys vfs.FS, pr *progress) error {
		db, err := engine.OpenStore(t, "/db", opts(fsys))
		if err != nil {
			return err
		}
		defer db.Close()
		side, err := db.Create(ctx, enginetest.Meta("side"))
		if err != nil {
			return err
		}
		if err := side.Append(ctx, forkEvents(0, 20, "side")...); err != nil {
			return err
		}
		c, err := db.Fork(ctx, "p", 30, enginetest.Meta("c"))
		if err != nil {
			return err
		}
		pr.forked = true
		if err := c.Close(); err != nil {
			return err
		}
		if err := db.Delete(ctx, "p"); err != nil {
			return err
		}
		pr.deleted = true
		if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
			return err
		}
		return side.Append(ctx, forkEvents(20, 20, "side")...)
	}
	probe := vfs.NewFault(setup())
	if err := run(probe, &progress{}); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for _, op := range []vfs.Op{vfs.OpSync, vfs.OpWrite} {
		for k := 1; k <= probe.Count(op); k++ {
			mem := setup()
			var pr progress
			runErr := run(vfs.NewFault(mem, vfs.Rule{Op: op, Nth: k, Sticky: true}), &pr)
			for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(k), 5)), Garble: true}} {
				label := fmt.Sprintf("cut at %v #%d variant %d (run: %v)", op, k, variant, runErr)
				crashed := mem.CrashClone(cfg)
				db, err := engine.OpenStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: reopen: %v", label, err)
				}
				_, perr := db.Stat(ctx, "p")
				if pr.deleted && !errors.Is(perr, store.ErrSessionNotFound) {
					t.Fatalf("%s: an acknowledged delete of the parent was lost: %v", label, perr)
				}
				st, err := db.Stat(ctx, "c")
				switch {
				case errors.Is(err, store.ErrSessionNotFound):
					if pr.forked {
						t.Fatalf("%s: an acknowledged fork was lost", label)
					}
					outcomes["no fork"]++
				case err != nil:
					t.Fatalf("%s: stat of the fork: %v", label, err)
				default:
					if st.EventCount != 31 || st.InheritedEventCount != 30 {
						t.Fatalf("%s: fork of %d events, inherited %d", label, st.EventCount, st.InheritedEventCount)
					}
					w, err := db.Open(ctx, "c", store.Write)
					if err != nil {
						t.Fatalf("%s: write open of the fork: %v", label, err)
					}
					got, err := w.Read(ctx, 0, -1)
					if err != nil {
						t.Fatalf("%s: read of the fork: %v", label, err)
					}
					if diff := cmp.Diff(parent[:30], got[:30]); diff != "" || !store.IsInheritedMarker(&got[30]) {
						t.Fatalf("%s: the fork reads otherwise than its parent:\n%s", label, diff)
					}
					w.Close()
					outcomes["fork"]++
				}
				if errors.Is(perr, store.ErrSessionNotFound) {
					outcomes["parent gone"]++
				}
				db.Close()
				if rep, err := engine.Check("/db", opts(crashed)); err != nil || len(rep.Problems) > 0 {
					t.Fatalf("%s: check after the reopen: %v %v", label, err, rep.Problems)
				}
			}
		}
	}
	t.Logf("outcomes: %v", outcomes)
	if outcomes["fork"] == 0 || outcomes["no fork"] == 0 || outcomes["parent gone"] == 0 {
		t.Errorf("the cuts missed a case: %v", outcomes)
	}
}

// TestForkBesideWriters forks a session while a write handle of the same
// DB appends to it, then closes, and the session is deleted, all
// concurrently; and forks a session that another DB on the store (as
// another process) writes, which copies. Every fork reads as a copy
// would.
func TestForkBesideWriters(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	// No dictionary: the sizes compared below (a copy's frames against a
	// shared fork's) do not then depend on whether this process trained
	// one, which a CPU budget decides.
	db, err := engine.OpenStore(t, dir, &engine.Options{NoDict: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	all := forkEvents(0, 4000, "p")
	p, err := db.Create(ctx, enginetest.Meta("p"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Append(ctx, all[:10]...); err != nil {
		t.Fatal(err)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	done, stop := make(chan error, 1), make(chan struct{})
	go func() {
		for i := 10; i < len(all); i += 10 {
			select {
			case <-stop:
				i = len(all)
				continue
			default:
			}
			if err := p.Append(ctx, all[i:i+10]...); err != nil {
				done <- err
				return
			}
			if err := p.Flush(ctx); err != nil {
				done <- err
				return
			}
		}
		p.Close()
		done <- db.Delete(ctx, "p")
	}()
	forks := 0
	for gone := false; !gone; forks++ {
		if forks == 5 {
			close(stop) // now the writer closes, and deletes the parent
		}
		st, err := db.Stat(ctx, "p")
		if errors.Is(err, store.ErrSessionNotFound) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := st.EventCount / 2
		c, err := db.Fork(ctx, "p", n, enginetest.Meta(fmt.Sprintf("c%d", forks)))
		switch {
		case errors.Is(err, store.ErrSessionNotFound):
			gone = true
			continue
		case err != nil:
			t.Fatalf("fork %d at %d: %v", forks, n, err)
		}
		got, err := c.Read(ctx, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(all[:n], got[:n]); diff != "" || len(got) != int(n)+1 {
			t.Fatalf("fork %d at %d reads otherwise than its parent:\n%s", forks, n, diff)
		}
		c.Close()
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Another process writes q: the fork copies it.
	other, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	q, err := other.Create(ctx, enginetest.Meta("q"))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Append(ctx, all[:50]...); err != nil {
		t.Fatal(err)
	}
	if err := q.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := db.Fork(ctx, "q", 40, enginetest.Meta("cq"))
	if err != nil {
		t.Fatal(err)
	}
	// The same session written here forks by sharing: its fork's own
	// bytes are its header and marker only, where the copy's hold 40
	// events too.
	s, err := db.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Append(ctx, all[:50]...); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cs, err := db.Fork(ctx, "s", 40, enginetest.Meta("cs"))
	if err != nil {
		t.Fatal(err)
	}
	shared, err := db.Stat(ctx, "cs")
	if err != nil {
		t.Fatal(err)
	}
	st, err := db.Stat(ctx, "cq")
	if err != nil || st.EventCount != 41 || st.SizeBytes < shared.SizeBytes+1000 {
		t.Errorf("fork of another process's session: %+v, %v (want a copy: 41 events of their own; a shared fork's own bytes: %d)", st, err, shared.SizeBytes)
	}
	t.Logf("copied fork %d bytes, shared fork %d bytes", st.SizeBytes, shared.SizeBytes)
	cs.Close()
	s.Close()
	c.Close()
	q.Close()
	for _, id := range []string{"cq", "c0"} {
		r, err := other.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Read(ctx, 0, -1); err != nil {
			t.Errorf("%s read in the other process: %v", id, err)
		}
		r.Close()
	}
}

// TestForkSharesUnflushedEvents: a fork of a session whose write handle
// in this DB appended events not yet flushed (nor cut into frames) shares
// them too: the handle cuts them first, and the fork's sync makes them
// durable with it.
func TestForkSharesUnflushedEvents(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	p, err := db.Create(ctx, enginetest.Meta("p"))
	if err != nil {
		t.Fatal(err)
	}
	parent := forkEvents(0, 20, "p") // (under FrameBytes: not cut into frames by Append)
	if err := p.Append(ctx, parent...); err != nil {
		t.Fatal(err)
	}
	c, err := db.Fork(ctx, "p", 15, enginetest.Meta("c"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := db.Stat(ctx, "c")
	if err != nil || st.SizeBytes > 1024 {
		t.Fatalf("the fork takes %d bytes of its own (%v): it copied", st.SizeBytes, err)
	}
	c.Close()
	crashed := mem.CrashClone(vfs.CrashConfig{}) // only what was synced
	db.Close()
	db, err = engine.OpenStore(t, "/db", &engine.Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err := db.Open(ctx, "c", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	if err != nil || len(got) != 16 {
		t.Fatalf("the fork after a power cut: %d events, %v", len(got), err)
	}
	if diff := cmp.Diff(parent[:15], got[:15]); diff != "" {
		t.Errorf("(-parent +fork):\n%s", diff)
	}
}
