package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// oldSession is a session stored in an older format and what reads see of
// it migrated.
type oldSession struct {
	hdr  store.Header
	inh  uint64 // the stored inherited count (a v1 header's seedLength)
	src  []event.Event
	want []event.Event // migrated
	cut  uint64        // the migrated inherited count
}

func oldSessions(t *testing.T) []oldSession {
	t.Helper()
	v2 := testgen.V2Turns("", 2)
	v2want, err := recovery.MigrateV2("v2", v2)
	if err != nil {
		t.Fatal(err)
	}
	out := []oldSession{{hdr: store.Header{Version: 2, ID: "v2", CreatedAt: 1}, src: v2, want: v2want}}
	v1 := v1Events(0, 1, 2)
	seeded := v1Events(0, 1, 1)
	inh := uint64(len(seeded))
	seeded = append(seeded, event.Event{Seq: inh, Type: "session/end-seed", Time: 2000, Data: json.RawMessage(`{}`)})
	seeded = append(seeded, v1Events(inh+1, 2, 1)...)
	for _, s := range []oldSession{
		{hdr: store.Header{Version: 1, ID: "v1", CreatedAt: 1}, src: v1},
		{hdr: store.Header{Version: 1, ID: "v1child", CreatedAt: 1, ParentSession: "parent", IsSeeded: true}, inh: inh, src: seeded},
	} {
		s.want, s.cut, err = recovery.MigrateV1(recovery.LegacySession{ID: s.hdr.ID, CreatedAt: 1, ParentSession: s.hdr.ParentSession, IsSeeded: s.hdr.IsSeeded, Inherited: s.inh}, s.src)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

func storeOld(t *testing.T, db *engine.DB, s oldSession) {
	t.Helper()
	ctx := context.Background()
	var opts []store.CreateOption
	if s.hdr.IsSeeded {
		opts = append(opts, store.Inherited(s.inh))
	}
	h, err := db.Create(ctx, s.hdr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, s.src...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteOpenMigrates: a write open of a session stored in format v1 or
// v2 migrates it in place (as Migrate does) and appends after the migrated
// log, as the reference's write open publishes session.v3.jsonl and
// appends there: reads give the migrated log and then the suffix, before
// and after the store is reopened, and the session is current (version 3,
// a new revision, the migrated inherited count). FAILED before: every such
// open was ErrMigrationRequired ("migrate it first").
func TestWriteOpenMigrates(t *testing.T) {
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
			olds := oldSessions(t)
			for _, s := range olds {
				storeOld(t, db, s)
			}
			wants := map[string][]event.Event{}
			for _, s := range olds {
				id := s.hdr.ID
				before, err := db.Stat(ctx, id)
				if err != nil || before.FormatStatus != store.FormatMigrationRequired {
					t.Fatalf("Stat(%s) before = %+v, %v", id, before, err)
				}
				h, err := db.Open(ctx, id, store.Write)
				if err != nil {
					t.Fatalf("write open of a v%d session: %v", s.hdr.Version, err)
				}
				if h.Len() != uint64(len(s.want)) || h.InheritedEventCount() != s.cut || h.Header().Version != store.FormatVersion {
					t.Errorf("%s: write handle Len %d, inherited %d, header %+v; want %d, %d, v%d", id, h.Len(), h.InheritedEventCount(), h.Header(), len(s.want), s.cut, store.FormatVersion)
				}
				after, err := db.Stat(ctx, id)
				if err != nil || after.FormatStatus != store.FormatCurrent || after.Header.Version != store.FormatVersion ||
					after.EventCount != uint64(len(s.want)) || after.InheritedEventCount != s.cut || after.Revision == before.Revision {
					t.Errorf("%s: Stat after the write open = %+v, %v (before %+v)", id, after, err, before)
				}
				suffix := testgen.Events(uint64(len(s.want)), 2, 50)
				if err := h.Append(ctx, suffix...); err != nil {
					t.Fatalf("%s: append after the migrated log: %v", id, err)
				}
				if err := h.Close(); err != nil {
					t.Fatal(err)
				}
				wants[id] = append(append([]event.Event(nil), s.want...), suffix...)
				engine.SameEvents(t, id+": migrated + suffix", engine.ReadAll(t, db, id), wants[id])
				// Migrate afterwards has nothing to do.
				if again, err := db.Migrate(ctx, id); err != nil || again.EventCount != uint64(len(wants[id])) {
					t.Errorf("%s: Migrate after the write open = %+v, %v", id, again, err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // once replaying, once from the index
				if db, err = engine.OpenStore(t, dir, backend.opts(dir)); err != nil {
					t.Fatal(err)
				}
				for id, want := range wants {
					engine.SameEvents(t, id+": after reopen", engine.ReadAll(t, db, id), want)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if rep, err := engine.Check(dir, backend.opts(dir)); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("Check after the write opens = %+v, %v", rep, err)
			}
			db, err = engine.OpenStore(t, dir, backend.opts(dir))
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestResumeMigrates: Resume of a v2 session whose last turn a crash left
// open migrates it and appends the closers after the migrated log, at the
// seqs the migrated log continues with. FAILED before: ErrMigrationRequired.
func TestResumeMigrates(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, engine.CheckedDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := testgen.V2Turns("", 2)
	src = src[:len(src)-2] // the last turn's step/end and turn/end never written
	want, err := recovery.MigrateV2("open", src)
	if err != nil {
		t.Fatal(err)
	}
	createV2(t, db, "open", src)
	h, closers, err := db.Resume(ctx, "open")
	if err != nil {
		t.Fatalf("Resume of a v2 session: %v", err)
	}
	defer h.Close()
	if len(closers) != 2 || closers[0].Seq != uint64(len(want)) || closers[1].Type != recovery.TypeTurnEnd {
		t.Fatalf("closers = %+v, want step/end and turn/end from seq %d", closers, len(want))
	}
	engine.SameEvents(t, "migrated + closers", engine.ReadAll(t, db, "open"), append(want, closers...))
	if s, err := db.Stat(ctx, "open"); err != nil || s.FormatStatus != store.FormatCurrent {
		t.Errorf("Stat after Resume = %+v, %v", s, err)
	}
}

// TestWriteOpenMigrationRefused: a write open of an older session whose
// migration the reference refuses (an unknown historical type, even an
// ignorable one) fails with the migration's error, changes nothing, and
// leaves the session free (a retry fails the same way, not with
// ErrAlreadyOwned); a read-only store refuses the write open without
// migrating.
func TestWriteOpenMigrationRefused(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	engine.ExpectProblem(t, dir, `unknown historical event type "x/custom"`)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := testgen.V2Turns("", 1)
	bad[4] = event.Event{Seq: 4, Type: "x/custom", Data: json.RawMessage(`{}`), Ignorable: true}
	createV2(t, db, "bad", bad)
	createV2(t, db, "good", testgen.V2Turns("", 1))
	before, _ := db.Stat(ctx, "bad")
	for try := range 2 {
		if _, err := db.Open(ctx, "bad", store.Write); !errors.Is(err, store.ErrUnsupportedEvent) || errors.Is(err, store.ErrAlreadyOwned) {
			t.Errorf("write open #%d of a v2 session with an unknown historical type: %v", try, err)
		}
	}
	if after, _ := db.Stat(ctx, "bad"); after.Revision != before.Revision || after.FormatStatus != store.FormatMigrationRequired {
		t.Errorf("a refused write open changed the session: %+v -> %+v", before, after)
	}
	goodBefore, _ := db.Stat(ctx, "good")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := engine.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Open(ctx, "good", store.Write); !errors.Is(err, store.ErrReadOnlyStore) {
		t.Errorf("write open on a read-only store: %v", err)
	}
	if after, _ := ro.Stat(ctx, "good"); after.Revision != goodBefore.Revision || after.FormatStatus != store.FormatMigrationRequired {
		t.Errorf("a read-only write open changed the session: %+v -> %+v", goodBefore, after)
	}
}
