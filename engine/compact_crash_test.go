package engine_test

// Power cuts in the middle of a compaction or a migration, then the
// sequence a store lives through after one: reopen, compact, reopen. The
// state after each step is checked against a model: every acknowledged
// event there byte for byte, deleted sessions gone, a migration either
// done or not, and the same after the compaction as before it.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// crashVariants is what a power cut may keep of unsynced state: nothing,
// everything, and a random part with the last write of each file garbled.
func crashVariants(k int) []vfs.CrashConfig {
	return []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(k), 5)), Garble: true}}
}

// reopenCompactReopen opens the crashed store, checks it, compacts it
// (rewriting and dropping what it can), checks it, reopens what a power
// cut right after the compaction leaves, and checks again; check is
// called after each step with the open DB.
func reopenCompactReopen(t *testing.T, label string, crashed *vfs.MemFS, opts func(vfs.FS) *engine.Options, check func(label string, db *engine.DB)) {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, "/db", opts(crashed))
	if err != nil {
		t.Fatalf("%s: reopen: %v", label, err)
	}
	check(label+": reopened", db)
	if rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		db.Close()
		t.Fatalf("%s: compact after the reopen: %+v, %v", label, rep, err)
	}
	check(label+": compacted", db)
	// A cut right after the compaction returned: only what it synced.
	again := crashed.CrashClone(vfs.CrashConfig{})
	db.Close()
	if db, err = engine.OpenStore(t, "/db", opts(again)); err != nil {
		t.Fatalf("%s: reopen after the compaction: %v", label, err)
	}
	check(label+": compacted and reopened", db)
	if rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.99}); err != nil {
		db.Close()
		t.Fatalf("%s: second compact: %+v, %v", label, rep, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("%s: close: %v", label, err)
	}
	if db, err = engine.OpenStore(t, "/db", opts(again)); err != nil {
		t.Fatalf("%s: reopen after the second compaction: %v", label, err)
	}
	check(label+": compacted twice and reopened", db)
	db.Close()
	if rep, err := engine.Check("/db", opts(again)); err != nil || len(rep.Problems) != 0 {
		t.Fatalf("%s: check: %+v, %v", label, rep, err)
	}
}

// TestCompactAfterCutCompaction cuts the power at every file-system
// operation of a compaction that drops and rewrites segments (mixedStore:
// a deleted session with segments of its own, deleted sessions
// interleaved with live ones, a session deleted and created again, a
// migrated one), then reopens, compacts, and reopens. A cut between the
// removal of a segment holding a deleted incarnation's header and that of
// its later frames leaves those frames orphaned: the next compaction must
// keep their tombstone, and never purge a live incarnation.
func TestCompactAfterCutCompaction(t *testing.T) {
	ctx := context.Background()
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, NoPreallocate: true, CompactInterval: -1}
	}
	points := 0
	for k := 1; ; k++ {
		mem := vfs.NewMem()
		ff := vfs.NewFault(mem)
		db, want := mixedStore(t, ff)
		ff.Add(vfs.Rule{Op: vfs.OpAny, Nth: k, Sticky: true})
		rep, cerr := db.Compact(ctx, engine.CompactOptions{Roll: true, LiveRatio: 0.95})
		check := func(label string, db *engine.DB) { expectSessions(t, label, db, want) }
		for variant, cfg := range crashVariants(k) {
			reopenCompactReopen(t, fmt.Sprintf("cut %d variant %d", k, variant), mem.CrashClone(cfg), opts, check)
			points++
		}
		db.Close()
		if cerr == nil {
			if len(rep.Rewritten) == 0 || len(rep.Dropped) == 0 {
				t.Fatalf("the compaction rewrote %d and dropped %d segments; the sweep needs both", len(rep.Rewritten), len(rep.Dropped))
			}
			break // it finished before the k-th operation: every step was cut
		}
	}
	t.Logf("checked %d cut points", points)
}

// migrationTurns makes m's migration span a segment roll (which syncs
// its first part) at 16 KiB segments.
const migrationTurns = 150

// migrationStore is a store with a v2 session "m" (several frames),
// sessions interleaved with it in the same segments, two of them deleted,
// all closed. It returns the live sessions' events other than m's.
func migrationStore(t *testing.T, dir string, opts *engine.Options) map[string][]event.Event {
	t.Helper()
	ctx := context.Background()
	db, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]event.Event{}
	hs := map[string]*engine.Handle{}
	for i := range 4 {
		id := fmt.Sprintf("a%d", i)
		if hs[id], err = db.Create(ctx, store.Header{ID: id, CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := db.Create(ctx, store.Header{Version: 2, ID: "m", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	src := v2Events(migrationTurns)
	for round := range 4 {
		part := src[round*len(src)/4 : (round+1)*len(src)/4]
		if err := m.Append(ctx, part...); err != nil {
			t.Fatal(err)
		}
		if err := m.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		for id, h := range hs {
			evs := testgen.Events(uint64(len(want[id])), 6, 300)
			if err := h.Append(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			want[id] = append(want[id], evs...)
		}
	}
	m.Close()
	for id, h := range hs {
		h.Close()
		if id == "a1" || id == "a2" {
			if err := db.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
			delete(want, id)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestCompactAfterCutMigration cuts the power at every sync and write of a
// run that migrates "m" while another session appends around it, then
// reopens, compacts, and reopens. m reopens either as it was or migrated
// (migrated for sure if Migrate returned), and stays so through the
// compactions: an abandoned migration's old incarnation is live and must
// never be purged; the replaced one of a finished migration goes.
func TestCompactAfterCutMigration(t *testing.T) {
	ctx := context.Background()
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 1 << 10, NoPreallocate: true, CompactInterval: -1}
	}
	wantM, err := recovery.MigrateV2("m", v2Events(migrationTurns))
	if err != nil {
		t.Fatal(err)
	}
	var want map[string][]event.Event
	setup := func() *vfs.MemFS {
		mem := vfs.NewMem()
		want = migrationStore(t, "/db", opts(mem))
		return mem
	}
	side := testgen.Events(0, 10, 300)
	// run acknowledges side's first 5 events, then migrates m, then
	// acknowledges the other 5; it returns how many of side's were
	// acknowledged and whether Migrate returned.
	run := func(fsys vfs.FS) (acked int, migrated bool) {
		db, err := engine.OpenStore(t, "/db", opts(fsys))
		if err != nil {
			return 0, false
		}
		defer db.Close()
		h, err := db.Create(ctx, store.Header{ID: "side", CreatedAt: 1})
		if err != nil {
			return 0, false
		}
		if h.Append(ctx, side[:5]...) != nil || h.Flush(ctx) != nil {
			return 0, false
		}
		acked = 5
		if _, err := db.Migrate(ctx, "m"); err != nil {
			return acked, false
		}
		if h.Append(ctx, side[5:]...) != nil || h.Flush(ctx) != nil {
			return acked, true
		}
		return 10, true
	}
	probe := vfs.NewFault(setup())
	if acked, migrated := run(probe); acked != 10 || !migrated {
		t.Fatal("the run without faults failed")
	}
	points := 0
	outcomes := map[store.FormatStatus]int{}
	abandoned := 0
	for _, cut := range []struct {
		op    vfs.Op
		short int
	}{{vfs.OpSync, 0}, {vfs.OpWrite, 0}, {vfs.OpWrite, -1}} {
		for k := 1; k <= probe.Count(cut.op); k++ {
			mem := setup()
			acked, migrated := run(vfs.NewFault(mem, vfs.Rule{Op: cut.op, Nth: k, Sticky: true, Short: cut.short}))
			for variant, cfg := range crashVariants(k) {
				label := fmt.Sprintf("cut at %v #%d (short %d) variant %d", cut.op, k, cut.short, variant)
				var status store.FormatStatus
				var sideLen = -1
				first := true
				check := func(label string, db *engine.DB) {
					t.Helper()
					snap, err := db.Stat(ctx, "m")
					if err != nil {
						t.Fatalf("%s: stat m: %v", label, err)
					}
					if first {
						status = snap.FormatStatus
						outcomes[status]++
						if migrated && status != store.FormatCurrent {
							t.Fatalf("%s: Migrate returned but m reopened unmigrated", label)
						}
					} else if snap.FormatStatus != status {
						t.Fatalf("%s: m is %v, was %v", label, snap.FormatStatus, status)
					}
					engine.SameEvents(t, label+" m", engine.ReadAll(t, db, "m"), wantM)
					// side: the acknowledged events at least, a prefix of
					// what was appended, and the same from the first reopen on.
					// (-1: no session; its header alone may have survived)
					got := -1
					if _, err := db.Stat(ctx, "side"); err == nil {
						evs := engine.ReadAll(t, db, "side")
						engine.SameEvents(t, label+" side", evs, side[:len(evs)])
						got = len(evs)
					}
					if (acked > 0 && got < acked) || (!first && got != sideLen) {
						t.Fatalf("%s: side has %d events (acked %d, %d at the first reopen)", label, got, acked, sideLen)
					}
					sideLen, first = got, false
					list, err := db.List(ctx)
					if err != nil {
						t.Fatal(err)
					}
					n := len(want) + 1 // and m
					if got >= 0 {
						n++
					}
					if len(list) != n {
						t.Fatalf("%s: %d sessions, want %d", label, len(list), n)
					}
					for id, evs := range want {
						engine.SameEvents(t, label+" "+id, engine.ReadAll(t, db, id), evs)
					}
				}
				crashed := mem.CrashClone(cfg)
				abandoned += migrationTails(t, crashed)
				reopenCompactReopen(t, label, crashed, opts, check)
				points++
			}
		}
	}
	t.Logf("checked %d cut points: %v; %d left a migration cut short", points, outcomes, abandoned)
	if abandoned == 0 {
		t.Error("no cut left a migration cut short: an abandoned migration (whose old incarnation stays live) was never compacted")
	}
	if outcomes[store.FormatCurrent] == 0 || outcomes[store.FormatMigrationRequired] == 0 {
		t.Errorf("the sweep never saw one of the outcomes: %v", outcomes)
	}
}

// migrationTails reports 1 if the store holds the header of m's migration
// (replaces != 0) but not all of its events: the next open abandons it.
func migrationTails(t *testing.T, fsys *vfs.MemFS) int {
	t.Helper()
	ids, err := segment.List(fsys, "/db")
	if err != nil {
		t.Fatal(err)
	}
	var want, got uint64
	for _, id := range ids {
		r, err := segment.OpenReader(fsys, "/db/"+segment.Name(id))
		if err != nil {
			continue
		}
		r.Scan(segment.ScanOptions{}, func(fi *segment.FrameInfo) error {
			if string(fi.Key) != "m" {
				return nil
			}
			switch fi.Kind {
			case segment.KindHeader:
				f, err := r.ReadFrame(fi.Offset)
				if err != nil {
					return err
				}
				var rec struct {
					Replaces uint64 `json:"replaces"`
					Events   uint64 `json:"events"`
				}
				if json.Unmarshal(f.Payload, &rec) == nil && rec.Replaces != 0 {
					want, got = rec.Events, 0
				}
			case segment.KindEvents:
				if want > 0 {
					got += uint64(fi.Count)
				}
			}
			return nil
		})
		r.Close()
	}
	if want > 0 && got < want {
		return 1
	}
	return 0
}
