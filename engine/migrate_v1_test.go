package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// v1Events is a v1 log of n turns from seq `from` (turn numbers from
// turn0): each streams its answer as top-level assistant/chunk events that
// the assistant/message cites.
func v1Events(from uint64, turn0, turns int) []event.Event {
	var out []event.Event
	add := func(typ, data string, src ...uint64) *event.Event {
		seq := from + uint64(len(out))
		out = append(out, event.Event{Seq: seq, Type: typ, Time: int64(1000 + seq), Data: json.RawMessage(data), SourceEventSeqs: src})
		return &out[len(out)-1]
	}
	for t := turn0; t < turn0+turns; t++ {
		ts := fmt.Sprintf(`"turn":%d,"step":1`, t)
		add("turn/start", fmt.Sprintf(`{"turn":%d}`, t))
		add("step/start", "{"+ts+"}")
		add("user/message", fmt.Sprintf(`{"id":"u%d","role":"user","content":[{"type":"text","text":"q"}],"source":{"kind":"user"}}`, t)).SurfaceOp = json.RawMessage(`"append"`)
		c := from + uint64(len(out))
		add("assistant/chunk", "{"+ts+`,"chunk":{"type":"text-delta","index":0,"text":"he"}}`)
		add("assistant/chunk", "{"+ts+`,"chunk":{"type":"text-delta","index":0,"text":"llo"}}`)
		add("assistant/chunk", "{"+ts+`,"chunk":{"type":"finish","reason":{"kind":"stop"}}}`)
		add("assistant/message", "{"+ts+fmt.Sprintf(`,"message":{"id":"a%d","role":"assistant","content":[{"type":"text","text":"hello"}],"source":{"kind":"model","provider":"p","model":"m"}}}`, t), c, c+1, c+2).SurfaceOp = json.RawMessage(`"append"`)
		add("step/end", "{"+ts+"}")
		add("turn/end", fmt.Sprintf(`{"turn":%d,"reason":{"kind":"completed"}}`, t))
	}
	return out
}

// TestMigrateV1 is TestMigrate for sessions stored in format v1 (the
// reference's released v1, imported from session.v1.jsonl or session.jsonl),
// one of them seeded: its cut, the v1 header's seedLength, becomes the
// tagged marker of the migrated log wherever the migration puts it, for
// read handles before Migrate and for the session after it.
func TestMigrateV1(t *testing.T) {
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

			plain := v1Events(0, 1, 2)
			seeded := v1Events(0, 1, 1) // the parent's turn: 9 events
			cut := uint64(len(seeded))
			seeded = append(seeded, event.Event{Seq: cut, Type: "session/end-seed", Time: 2000, Data: json.RawMessage(`{}`)})
			seeded = append(seeded, v1Events(cut+1, 2, 1)...)
			hdrs := map[string]store.Header{
				"plain": {Version: 1, ID: "plain", CreatedAt: 1},
				"child": {Version: 1, ID: "child", CreatedAt: 1, ParentSession: "parent", IsSeeded: true},
			}
			srcs := map[string][]event.Event{"plain": plain, "child": seeded}
			wants, cuts := map[string][]event.Event{}, map[string]uint64{}
			for id, h := range hdrs {
				var opts []store.CreateOption
				var inh uint64
				if h.IsSeeded {
					inh = cut
					opts = append(opts, store.Inherited(cut))
				}
				w, c, err := recovery.MigrateV1(recovery.LegacySession{ID: id, CreatedAt: 1, ParentSession: h.ParentSession, IsSeeded: h.IsSeeded, Inherited: inh}, srcs[id])
				if err != nil {
					t.Fatal(err)
				}
				wants[id], cuts[id] = w, c
				wh, err := db.Create(ctx, h, opts...)
				if err != nil {
					t.Fatal(err)
				}
				if err := wh.Append(ctx, srcs[id]...); err != nil {
					t.Fatal(err)
				}
				if err := wh.Close(); err != nil {
					t.Fatal(err)
				}
			}
			// 9 v1 events a turn become 6 (the chunks are in the message);
			// v3 adds the system head after the first step/start. The
			// child's cut: 9 → 6 → 7.
			if len(wants["plain"]) != 13 || cuts["child"] != 7 {
				t.Fatalf("migrated: %d events, child cut %d", len(wants["plain"]), cuts["child"])
			}

			for id := range hdrs {
				snap, err := db.Stat(ctx, id)
				if err != nil || snap.FormatStatus != store.FormatMigrationRequired || snap.Header.Version != 1 || snap.EventCount != uint64(len(srcs[id])) {
					t.Fatalf("Stat(%s) before = %+v, %v", id, snap, err)
				}
				engine.SameEvents(t, id+": read before migration", engine.ReadAll(t, db, id), wants[id])
			}
			rh, err := db.Open(ctx, "child", store.Read)
			if err != nil {
				t.Fatal(err)
			}
			if rh.InheritedEventCount() != cuts["child"] {
				t.Errorf("read handle on the v1 child: inherited %d, want %d (the migrated marker)", rh.InheritedEventCount(), cuts["child"])
			}
			if part, err := rh.Read(ctx, int(cuts["child"]), 1); err != nil || len(part) != 1 || !store.IsInheritedMarker(&part[0]) {
				t.Errorf("Read at the cut = %+v, %v", part, err)
			}
			rh.Close()
			list, err := db.List(ctx)
			if err != nil || len(list) != 2 || list[0].FormatStatus != store.FormatMigrationRequired || list[1].FormatStatus != store.FormatMigrationRequired {
				t.Fatalf("List before = %+v, %v", list, err)
			}

			for id := range hdrs {
				before, _ := db.Stat(ctx, id)
				after, err := db.Migrate(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if after.FormatStatus != store.FormatCurrent || after.Header.Version != store.FormatVersion || after.EventCount != uint64(len(wants[id])) ||
					after.Revision == before.Revision || after.InheritedEventCount != cuts[id] || after.Header.IsSeeded != hdrs[id].IsSeeded {
					t.Fatalf("Migrate(%s) = %+v (before %+v)", id, after, before)
				}
				engine.SameEvents(t, id+": read after migration", engine.ReadAll(t, db, id), wants[id])
			}
			// The migrated child passes a write open's seed rules and takes
			// appends.
			wh, err := db.Open(ctx, "child", store.Write)
			if err != nil {
				t.Fatal(err)
			}
			more := testgen.Events(uint64(len(wants["child"])), 3, 100)
			if err := wh.Append(ctx, more...); err != nil {
				t.Fatal(err)
			}
			if err := wh.Close(); err != nil {
				t.Fatal(err)
			}
			wants["child"] = append(wants["child"], more...)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			for range 2 { // reopen twice: once replaying, once from the index
				if db, err = engine.OpenStore(t, dir, backend.opts(dir)); err != nil {
					t.Fatal(err)
				}
				for id := range hdrs {
					engine.SameEvents(t, id+": after reopen", engine.ReadAll(t, db, id), wants[id])
				}
				if s, _ := db.Stat(ctx, "child"); s.InheritedEventCount != cuts["child"] || s.FormatStatus != store.FormatCurrent {
					t.Fatalf("Stat(child) after reopen = %+v", s)
				}
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if rep, err := engine.Check(dir, backend.opts(dir)); err != nil || len(rep.Problems) != 0 {
				t.Fatalf("Check after migration = %+v, %v", rep, err)
			}
			db, _ = engine.OpenStore(t, dir, backend.opts(dir))
		})
	}
}

// A v1 log its migration refuses: reads and Migrate report the event, and
// the session stays as it was.
func TestMigrateV1Refused(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	engine.ExpectProblem(t, dir, "not one complete ordered attempt")
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bad := v1Events(0, 1, 1)
	bad[6].SourceEventSeqs = bad[6].SourceEventSeqs[:2] // the message cites part of its attempt
	h, err := db.Create(ctx, store.Header{Version: 1, ID: "bad", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, bad...); err != nil {
		t.Fatal(err)
	}
	h.Close()
	before, _ := db.Stat(ctx, "bad")
	rh, err := db.Open(ctx, "bad", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer rh.Close()
	if _, err := rh.Read(ctx, 0, -1); !errors.Is(err, recovery.ErrMigration) {
		t.Errorf("read of a v1 log the migration refuses: %v", err)
	}
	if _, err := db.Migrate(ctx, "bad"); !errors.Is(err, recovery.ErrMigration) {
		t.Errorf("Migrate: %v", err)
	}
	if after, _ := db.Stat(ctx, "bad"); after.Revision != before.Revision || after.FormatStatus != store.FormatMigrationRequired {
		t.Errorf("a refused migration changed the session: %+v -> %+v", before, after)
	}
}
