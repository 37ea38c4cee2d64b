package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/vfs"
)

// A review of DB.Fork: tests that try to break it. The model of a store
// is what each live session reads (what a copy would); every check reads
// every session of it, lists the store, and (at rest) runs Check.

type reviewModel map[string][]event.Event

func (m reviewModel) clone() reviewModel {
	out := reviewModel{}
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// reviewStore is one store under review, reopened in one of several
// ways.
type reviewStore struct {
	t    *testing.T
	mode string // os-index, os-noindex, os-rebuild, mem-crash
	dir  string
	mem  *vfs.MemFS
	db   *engine.DB
}

func (s *reviewStore) opts() *engine.Options {
	o := &engine.Options{SegmentSize: 16 << 10, CompactInterval: -1}
	switch s.mode {
	case "os-noindex":
		o.NoIndex = true
	case "mem-crash":
		o.FS = s.mem
	}
	return o
}

func newReviewStore(t *testing.T, mode string) *reviewStore {
	t.Helper()
	s := &reviewStore{t: t, mode: mode, dir: t.TempDir()}
	if mode == "mem-crash" {
		s.mem, s.dir = vfs.NewMem(), "/db"
	}
	db, err := engine.Open(s.dir, s.opts())
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	t.Cleanup(func() { s.db.Close() })
	return s
}

// reopen closes the store (a power cut for mem-crash: only what was
// synced stays), checks it at rest, and opens it again.
func (s *reviewStore) reopen(label string) {
	t := s.t
	t.Helper()
	if s.mode == "mem-crash" {
		crashed := s.mem.CrashClone(vfs.CrashConfig{})
		s.db.Close()
		s.mem = crashed
	} else if err := s.db.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	rep, err := engine.Check(s.dir, s.opts())
	if err != nil {
		t.Fatalf("%s: check: %v", label, err)
	}
	for _, p := range rep.Problems {
		t.Errorf("%s: check: %v", label, p)
	}
	if s.mode == "os-rebuild" {
		if err := engine.RebuildIndex(s.dir, s.opts()); err != nil {
			t.Fatalf("%s: rebuild the index: %v", label, err)
		}
	}
	db, err := engine.Open(s.dir, s.opts())
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	s.db = db
}

// verify reads every session of model through db and compares; the store
// lists exactly model's sessions.
func verifyModel(t *testing.T, label string, db *engine.DB, model reviewModel) {
	t.Helper()
	ctx := context.Background()
	ss, err := db.List(ctx)
	if err != nil {
		t.Fatalf("%s: list: %v", label, err)
	}
	var got []string
	for _, s := range ss {
		got = append(got, s.Header.ID)
		if want := uint64(len(model[s.Header.ID])); s.EventCount != want {
			t.Errorf("%s: List says %s has %d events, want %d", label, s.Header.ID, s.EventCount, want)
		}
	}
	sort.Strings(got)
	want := slices.Sorted(maps.Keys(model))
	if !slices.Equal(got, want) {
		t.Errorf("%s: List = %v, want %v", label, got, want)
	}
	for _, id := range want {
		h, err := db.Open(ctx, id, engine.Read)
		if err != nil {
			t.Errorf("%s: open %s: %v", label, id, err)
			continue
		}
		evs, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Errorf("%s: read %s: %v", label, id, err)
			continue
		}
		if diff := cmp.Diff(model[id], evs); diff != "" {
			t.Errorf("%s: %s reads (-want +got):\n%s", label, id, diff)
		}
		// A range read inside the shared part, across the cut.
		if len(evs) > 3 {
			h, err := db.Open(ctx, id, engine.Read)
			if err != nil {
				t.Fatal(err)
			}
			mid, err := h.Read(ctx, 1, len(evs)-2)
			h.Close()
			if err != nil {
				t.Errorf("%s: range read %s: %v", label, id, err)
			} else if diff := cmp.Diff(model[id][1:len(evs)-1], mid); diff != "" {
				t.Errorf("%s: %s range read (-want +got):\n%s", label, id, diff)
			}
		}
	}
}

// reviewFork forks parent at n into id, checks the fork reads what a
// copy would (the parent's first n events and the marker), records it in
// model and returns its handle.
func reviewFork(t *testing.T, db *engine.DB, model reviewModel, parent string, n uint64, id string) *engine.Handle {
	t.Helper()
	ctx := context.Background()
	h, err := db.Fork(ctx, parent, n, enginetest.Meta(id))
	if err != nil {
		t.Fatalf("fork %s of %s at %d: %v", id, parent, n, err)
	}
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatalf("read the fork %s: %v", id, err)
	}
	if uint64(len(got)) != n+1 || !engine.IsInheritedMarker(&got[n]) || got[n].Seq != n {
		t.Fatalf("fork %s of %s at %d: %d events, last %+v", id, parent, n, len(got), got[len(got)-1])
	}
	if diff := cmp.Diff(model[parent][:n], got[:n]); diff != "" {
		t.Fatalf("fork %s of %s at %d: (-parent +fork):\n%s", id, parent, n, diff)
	}
	model[id] = got
	return h
}

// reviewAppend appends k events to h (flushing every step) and records
// them.
func reviewAppend(t *testing.T, h *engine.Handle, model reviewModel, k, step int) {
	t.Helper()
	ctx := context.Background()
	id := h.ID()
	evs := forkEvents(uint64(len(model[id])), uint64(k), fmt.Sprintf("%s/%d", id, len(model[id])))
	for i := 0; i < len(evs); i += step {
		if err := h.Append(ctx, evs[i:min(i+step, len(evs))]...); err != nil {
			t.Fatalf("append to %s: %v", id, err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	model[id] = append(model[id], evs...)
}

// TestReviewForkChains: forks of forks of forks at cuts inside frames,
// at and past the inherited markers, the ancestors deleted in several
// orders, compacted (rewrites and drops), and reopened after each step
// (with the index, without, with the index rebuilt, after a power cut).
// Every live session always reads what a copy would.
func TestReviewForkChains(t *testing.T) {
	ctx := context.Background()
	orders := [][]string{
		{"p", "c1", "c2"},
		{"c2", "c1", "p"},
		{"c1", "p", "c3", "c2"},
		{"p", "c2", "c5", "c1", "c3"},
	}
	for _, mode := range []string{"os-index", "os-noindex", "os-rebuild", "mem-crash"} {
		for oi, order := range orders {
			t.Run(fmt.Sprintf("%s/order%d", mode, oi), func(t *testing.T) {
				s := newReviewStore(t, mode)
				model := reviewModel{}
				p, err := s.db.Create(ctx, enginetest.Meta("p"))
				if err != nil {
					t.Fatal(err)
				}
				model["p"] = nil
				reviewAppend(t, p, model, 300, 20)
				c1 := reviewFork(t, s.db, model, "p", 137, "c1") // inside a frame
				reviewAppend(t, c1, model, 100, 7)
				c2 := reviewFork(t, s.db, model, "c1", 200, "c2") // past c1's marker
				reviewAppend(t, c2, model, 50, 50)
				c3 := reviewFork(t, s.db, model, "c2", 90, "c3") // before c1's cut: p's frames only
				reviewAppend(t, c3, model, 30, 3)
				c4 := reviewFork(t, s.db, model, "c3", uint64(len(model["c3"])), "c4") // at c3's end
				c5 := reviewFork(t, s.db, model, "c2", 138, "c5")                      // just past c1's marker
				c6 := reviewFork(t, s.db, model, "c1", 137, "c6")                      // at c1's marker: c1's inherited part
				reviewAppend(t, p, model, 40, 40)                                      // the parent goes on
				for _, h := range []*engine.Handle{p, c1, c2, c3, c4, c5, c6} {
					if err := h.Close(); err != nil {
						t.Fatal(err)
					}
				}
				verifyModel(t, "after the forks", s.db, model)
				s.reopen("after the forks")
				verifyModel(t, "after the forks, reopened", s.db, model)
				for _, id := range order {
					if err := s.db.Delete(ctx, id); err != nil {
						t.Fatalf("delete %s: %v", id, err)
					}
					delete(model, id)
					label := "after deleting " + id
					verifyModel(t, label, s.db, model)
					for _, co := range []engine.CompactOptions{{Roll: true, LiveRatio: 0.99}, {LiveRatio: -1}} {
						if _, err := s.db.Compact(ctx, co); err != nil {
							t.Fatalf("%s: compact %+v: %v", label, co, err)
						}
						verifyModel(t, fmt.Sprintf("%s, compacted %+v", label, co), s.db, model)
					}
					s.reopen(label)
					verifyModel(t, label+", reopened", s.db, model)
				}
				// The forks left go on.
				for _, id := range slices.Sorted(maps.Keys(model)) {
					h, err := s.db.Open(ctx, id, engine.Write)
					if err != nil {
						t.Fatalf("write open %s: %v", id, err)
					}
					reviewAppend(t, h, model, 5, 5)
					h.Close()
				}
				s.reopen("after appends to the survivors")
				verifyModel(t, "after appends to the survivors", s.db, model)
				// Everything goes: nothing is left to read, and the store
				// compacts to nothing live.
				for _, id := range slices.Sorted(maps.Keys(model)) {
					if err := s.db.Delete(ctx, id); err != nil {
						t.Fatal(err)
					}
					delete(model, id)
				}
				if _, err := s.db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
					t.Fatal(err)
				}
				s.reopen("after all went")
				verifyModel(t, "after all went", s.db, model)
				us, err := s.db.Usage(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, u := range us {
					if u.LiveBytes > 0 {
						t.Errorf("segment %d keeps %d live bytes with no session left", u.ID, u.LiveBytes)
					}
				}
			})
		}
	}
}

// reviewForkReads checks that session id of db reads parent[:n] and the
// inherited marker at n, and returns what it read.
func reviewForkReads(db *engine.DB, id string, parent []event.Event, n int) error {
	ctx := context.Background()
	h, err := db.Open(ctx, id, engine.Read)
	if err != nil {
		return err
	}
	defer h.Close()
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		return err
	}
	if len(got) != n+1 || !engine.IsInheritedMarker(&got[n]) {
		return fmt.Errorf("%s: %d events, want %d and the marker", id, len(got), n+1)
	}
	if diff := cmp.Diff(parent[:n], got[:n]); diff != "" {
		return fmt.Errorf("%s: (-parent +fork):\n%s", id, diff)
	}
	return nil
}

// TestReviewForkPowerCut: a power cut at every write and every sync of
// a Fork, then the parent's Delete and a compaction; the fork is by
// shared frames (a v3 parent) or by copy (a v2 parent, read migrated).
// The store opens again; an acknowledged Fork (or Delete) is never lost,
// and a fork whose Fork did not return is absent or whole: never a
// partial fork. The "copy" case FAILS: store.CopyFork creates the child,
// then appends the parent's events and the marker in separate writes, so
// a cut (or a write error, when the drop that follows fails too) leaves a
// seeded session with some of the parent's events and no marker.
func TestReviewForkPowerCut(t *testing.T) {
	for _, path := range []string{"shared", "copy"} {
		t.Run(path, func(t *testing.T) { reviewForkPowerCut(t, path) })
	}
}

func reviewForkPowerCut(t *testing.T, path string) {
	ctx := context.Background()
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 1 << 10, NoPreallocate: true, CompactInterval: -1}
	}
	pe := forkEvents(0, 60, "p")
	setup := func() *vfs.MemFS {
		mem := vfs.NewMem()
		db, err := engine.Open("/db", opts(mem))
		if err != nil {
			t.Fatal(err)
		}
		h, err := db.Create(ctx, enginetest.Meta("p"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(pe); i += 6 {
			if err := h.Append(ctx, pe[i:i+6]...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		h.Close()
		createV2(t, db, "old", v2Events(12))
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return mem
	}
	// The parent as reads see it (the v2 one migrated).
	parentID, n := "p", 45
	if path == "copy" {
		parentID, n = "old", 30
	}
	var parent []event.Event
	{
		db, err := engine.Open("/db", opts(setup()))
		if err != nil {
			t.Fatal(err)
		}
		parent = readAllOf(t, db, parentID)
		db.Close()
	}
	type acks struct{ fork, del bool }
	run := func(fsys vfs.FS) (a acks, err error) {
		db, err := engine.Open("/db", opts(fsys))
		if err != nil {
			return a, err
		}
		defer db.Close()
		c, err := db.Fork(ctx, parentID, uint64(n), enginetest.Meta("c"))
		if err != nil {
			return a, err
		}
		a.fork = true
		c.Close()
		if err := db.Delete(ctx, parentID); err != nil {
			return a, err
		}
		a.del = true
		_, err = db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99})
		return a, err
	}
	probe := vfs.NewFault(setup())
	if a, err := run(probe); err != nil || !a.del {
		t.Fatalf("run without a cut: %+v %v", a, err)
	}
	points := 0
	for _, op := range []vfs.Op{vfs.OpSync, vfs.OpWrite} {
		for k := 1; k <= probe.Count(op); k++ {
			mem := setup()
			a, runErr := run(vfs.NewFault(mem, vfs.Rule{Op: op, Nth: k, Sticky: true}))
			for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(k), 7))}} {
				points++
				label := fmt.Sprintf("cut at %v #%d variant %d (acks %+v, run: %v)", op, k, variant, a, runErr)
				crashed := mem.CrashClone(cfg)
				db, err := engine.Open("/db", opts(crashed))
				if err != nil {
					t.Errorf("%s: reopen: %v", label, err)
					continue
				}
				_, serr := db.Stat(ctx, "c")
				if !errors.Is(serr, engine.ErrSessionNotFound) || a.fork {
					if err := reviewForkReads(db, "c", parent, n); err != nil {
						t.Errorf("%s: the fork (acknowledged: %v): %v", label, a.fork, err)
					}
				}
				if _, err := db.Stat(ctx, parentID); a.del && !errors.Is(err, engine.ErrSessionNotFound) || err != nil && !errors.Is(err, engine.ErrSessionNotFound) {
					t.Errorf("%s: Stat of the parent: %v", label, err)
				}
				db.Close()
				rep, err := engine.Check("/db", opts(crashed))
				if err != nil {
					t.Errorf("%s: check: %v", label, err)
				} else {
					for _, p := range rep.Problems {
						t.Errorf("%s: check: %v", label, p)
					}
				}
			}
		}
	}
	t.Logf("%d crash points", points)
}
