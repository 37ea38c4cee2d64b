package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

func createV2(t *testing.T, db *engine.DB, id string, evs []event.Event) {
	t.Helper()
	ctx := context.Background()
	h, err := db.Create(ctx, store.Header{Version: 2, ID: id, CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestMigrate(t *testing.T) {
	for _, backend := range []struct {
		name string
		opts func(dir string) *engine.Options
	}{
		{"index", func(string) *engine.Options { return nil }},
		{"noindex", func(string) *engine.Options { return &engine.Options{NoIndex: true} }},
	} {
		t.Run(backend.name, func(t *testing.T) {
			ctx := context.Background()
			dir := engine.CheckedDir(t)
			db, err := engine.OpenStore(t, dir, backend.opts(dir))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { db.Close() }()
			src := v2Events(2)
			want, err := recovery.MigrateV2("old", src)
			if err != nil {
				t.Fatal(err)
			}
			createV2(t, db, "old", src)
			createV2(t, db, "other", v2Events(1))

			snap, err := db.Stat(ctx, "old")
			if err != nil || snap.FormatStatus != store.FormatMigrationRequired || snap.Header.Version != 2 || snap.EventCount != uint64(len(src)) {
				t.Fatalf("Stat before = %+v, %v", snap, err)
			}
			engine.SameEvents(t, "read before migration", engine.ReadAll(t, db, "old"), want)
			h, err := db.Open(ctx, "old", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			if part, err := h.Read(ctx, 2, 3); err != nil || len(part) != 3 || part[0].Type != "system/message" || part[0].Seq != 2 {
				t.Errorf("Read(2, 3) of a migrated view = %+v, %v", part, err)
			}
			h.Close()
			// (A write open would migrate it: TestWriteOpenMigrates.)
			w, err := db.Open(ctx, "other", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			w.Close()

			after, err := db.Migrate(ctx, "old")
			if err != nil {
				t.Fatal(err)
			}
			if after.FormatStatus != store.FormatCurrent || after.Header.Version != store.FormatVersion || after.EventCount != uint64(len(want)) || after.Revision == snap.Revision {
				t.Fatalf("Migrate = %+v (before %+v)", after, snap)
			}
			engine.SameEvents(t, "read after migration", engine.ReadAll(t, db, "old"), want)
			if again, err := db.Migrate(ctx, "old"); err != nil || again.Revision != after.Revision {
				t.Errorf("second Migrate = %+v, %v; want a no-op", again, err)
			}
			if _, err := db.Migrate(ctx, "missing"); !errors.Is(err, store.ErrSessionNotFound) {
				t.Errorf("Migrate(missing) = %v", err)
			}
			wh, err := db.Open(ctx, "old", store.Write)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.Migrate(ctx, "other"); err != nil {
				t.Fatal(err)
			}
			// A migrated session takes appends like any other.
			more := testgen.Events(uint64(len(want)), 3, 100)
			if err := wh.Append(ctx, more...); err != nil {
				t.Fatal(err)
			}
			if err := wh.Close(); err != nil {
				t.Fatal(err)
			}
			want = append(want, more...)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // reopen twice: once replaying, once from the index
				if db, err = engine.OpenStore(t, dir, backend.opts(dir)); err != nil {
					t.Fatal(err)
				}
				engine.SameEvents(t, "after reopen", engine.ReadAll(t, db, "old"), want)
				list, err := db.List(ctx)
				if err != nil || len(list) != 2 || list[0].FormatStatus != store.FormatCurrent || list[1].FormatStatus != store.FormatCurrent {
					t.Fatalf("List after reopen = %+v, %v", list, err)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if rep, err := engine.Check(dir, backend.opts(dir)); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("Check after migration = %+v, %v", rep, err)
			}
			db, _ = engine.OpenStore(t, dir, backend.opts(dir))
			// Compaction reclaims the replaced incarnations.
			rep, err := db.Compact(ctx, engine.CompactOptions{Roll: true})
			if err != nil {
				t.Fatal(err)
			}
			engine.SameEvents(t, "after compaction", engine.ReadAll(t, db, "old"), want)
			db.Close()
			db, err = engine.OpenStore(t, dir, backend.opts(dir))
			if err != nil {
				t.Fatalf("reopen after compaction (%+v): %v", rep, err)
			}
			engine.SameEvents(t, "reopen after compaction", engine.ReadAll(t, db, "old"), want)
		})
	}
}

func TestMigrateRefusesOwnedAndUnknown(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	engine.ExpectProblem(t, dir, `unknown historical event type "x/custom"`)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "busy", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, v2Events(1)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Migrate(ctx, "busy"); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Errorf("Migrate of an owned session: %v", err)
	}
	h.Close()
	bad := v2Events(1)
	bad[4] = event.Event{Seq: 4, Type: "x/custom", Data: json.RawMessage(`{}`), Ignorable: true}
	createV2(t, db, "unknown", bad)
	before, _ := db.Stat(ctx, "unknown")
	if _, err := db.Migrate(ctx, "unknown"); !errors.Is(err, store.ErrUnsupportedEvent) {
		t.Errorf("Migrate with an unknown historical type: %v", err)
	}
	if after, _ := db.Stat(ctx, "unknown"); after.Revision != before.Revision || after.FormatStatus != store.FormatMigrationRequired {
		t.Errorf("a refused migration changed the session: %+v -> %+v", before, after)
	}
	if _, err := db.Create(ctx, store.Header{Version: store.FormatVersion + 1, ID: "v4", CreatedAt: 1}); !errors.Is(err, store.ErrInvalidHeader) {
		t.Errorf("Create of a v4 header: %v", err)
	}
}

// TestMigratePowerCut cuts the power at every sync and write of a
// migration (with other sessions appending around it) and checks that the
// session reopens either as it was or fully migrated, and migrates after.
// The migration runs through Migrate, and through a write open that then
// appends (the write open migrates by itself): there the session reopens
// as it was, migrated, or migrated with the whole suffix, never a mix.
func TestMigratePowerCut(t *testing.T) {
	for _, mode := range []string{"Migrate", "write open"} {
		t.Run(mode, func(t *testing.T) { migratePowerCut(t, mode == "write open") })
	}
}

func migratePowerCut(t *testing.T, viaOpen bool) {
	ctx := context.Background()
	src := v2Events(40) // several frames
	want, _ := recovery.MigrateV2("m", src)
	suffix := testgen.Events(uint64(len(want)), 3, 200)
	opts := func(fsys vfs.FS) *engine.Options {
		return &engine.Options{FS: fsys, SegmentSize: 16 << 10, FrameBytes: 1 << 10, NoPreallocate: true}
	}
	setup := func() *vfs.MemFS {
		mem := vfs.NewMem()
		db, err := engine.OpenStore(t, "/db", opts(mem))
		if err != nil {
			t.Fatal(err)
		}
		createV2(t, db, "m", src)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return mem
	}
	migrate := func(db *engine.DB) error {
		if !viaOpen {
			_, err := db.Migrate(ctx, "m")
			return err
		}
		w, err := db.Open(ctx, "m", store.Write)
		if err != nil {
			return err
		}
		if err := w.Append(ctx, suffix...); err != nil {
			w.Close()
			return err
		}
		return w.Close()
	}
	run := func(fsys vfs.FS) error {
		db, err := engine.OpenStore(t, "/db", opts(fsys))
		if err != nil {
			return err
		}
		defer db.Close()
		h, err := db.Create(ctx, store.Header{ID: "side", CreatedAt: 1})
		if err != nil {
			return err
		}
		if err := h.Append(ctx, testgen.Events(0, 5, 300)...); err != nil {
			return err
		}
		if err := migrate(db); err != nil {
			return err
		}
		return h.Append(ctx, testgen.Events(5, 5, 300)...)
	}
	probe := vfs.NewFault(setup())
	if err := run(probe); err != nil {
		t.Fatal(err)
	}
	points := 0
	outcomes := map[string]int{}
	for _, op := range []vfs.Op{vfs.OpSync, vfs.OpWrite} {
		for k := 1; k <= probe.Count(op); k++ {
			mem := setup()
			runErr := run(vfs.NewFault(mem, vfs.Rule{Op: op, Nth: k, Sticky: true}))
			for variant, cfg := range []vfs.CrashConfig{{}, {KeepAll: true}, {Rand: rand.New(rand.NewPCG(uint64(k), 3)), Garble: true}} {
				label := fmt.Sprintf("cut at %v #%d variant %d (run: %v)", op, k, variant, runErr)
				crashed := mem.CrashClone(cfg)
				db, err := engine.OpenStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: reopen: %v", label, err)
				}
				snap, err := db.Stat(ctx, "m")
				if err != nil {
					t.Fatalf("%s: stat: %v", label, err)
				}
				got := engine.ReadAll(t, db, "m")
				outcome := "as it was"
				switch {
				case snap.FormatStatus == store.FormatMigrationRequired:
					if snap.EventCount != uint64(len(src)) {
						t.Fatalf("%s: unmigrated session with %d events, want %d", label, snap.EventCount, len(src))
					}
					engine.SameEvents(t, label, got, want) // read migrated
				case snap.EventCount == uint64(len(want)):
					outcome = "migrated"
					engine.SameEvents(t, label, got, want)
				case viaOpen && snap.EventCount == uint64(len(want)+len(suffix)):
					outcome = "migrated + suffix"
					engine.SameEvents(t, label, got, append(append([]event.Event(nil), want...), suffix...))
				default:
					t.Fatalf("%s: %v session with %d events: neither the old session (%d), the migrated one (%d) nor that and the suffix (%d)",
						label, snap.FormatStatus, snap.EventCount, len(src), len(want), len(want)+len(suffix))
				}
				outcomes[outcome]++
				if runErr == nil && (outcome == "as it was" || viaOpen && outcome != "migrated + suffix") {
					t.Fatalf("%s: the run returned nil but the session reopened %s", label, outcome)
				}
				if _, err := db.Migrate(ctx, "m"); err != nil {
					t.Fatalf("%s: migrate after reopen: %v", label, err)
				}
				db.Close()
				db, err = engine.OpenStore(t, "/db", opts(crashed))
				if err != nil {
					t.Fatalf("%s: second reopen: %v", label, err)
				}
				if s, _ := db.Stat(ctx, "m"); s.FormatStatus != store.FormatCurrent {
					t.Fatalf("%s: not migrated after Migrate: %+v", label, s)
				}
				db.Close()
				points++
			}
		}
	}
	t.Logf("checked %d cut points: %v", points, outcomes)
	if outcomes["migrated"]+outcomes["migrated + suffix"] == 0 || outcomes["as it was"] == 0 || viaOpen && outcomes["migrated + suffix"] == 0 {
		t.Errorf("the sweep never saw one of the outcomes: %v", outcomes)
	}
}

// v2Events is a v2 log of n turns (testgen.V2Turns).
func v2Events(turns int) []event.Event { return testgen.V2Turns("", turns) }
