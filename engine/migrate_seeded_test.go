package engine_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// TestMigrateSeededV2: a seeded v2 session whose inherited prefix holds
// its first step/start gets the v3 system head inside that prefix, so its
// end-seed marker moves up one seq: the migrated session (read migrated,
// or migrated for good) has its inherited count there too, and opens for
// write.
func TestMigrateSeededV2(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ev := func(seq uint64, typ, data string) event.Event {
		return event.Event{Seq: seq, Type: typ, Time: 1, Data: json.RawMessage(data)}
	}
	evs := []event.Event{
		ev(0, "turn/start", `{"turn":0}`),
		ev(1, "step/start", `{"turn":0,"step":0}`),
		ev(2, "user/message", `{"id":"u","role":"user","content":[],"source":{"kind":"user"}}`),
		ev(3, "session/end-seed", `{"inherited":true}`),
		ev(4, "step/end", `{"turn":0,"step":0}`),
		ev(5, "turn/end", `{"turn":0,"reason":{"kind":"completed"}}`),
	}
	evs[2].SurfaceOp = json.RawMessage(`"append"`) // a v2 surface event has one (the reference refuses it otherwise)
	h, err := db.Create(ctx, store.Header{Version: 2, ID: "child", CreatedAt: 1, IsSeeded: true, ParentSession: "parent"}, store.Inherited(3))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	check := func(label string, h *engine.Handle) {
		t.Helper()
		got, err := h.Read(ctx, 0, -1)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		n := h.InheritedEventCount()
		if n >= uint64(len(got)) || got[n].Type != "session/end-seed" {
			t.Fatalf("%s: inherited count %d, but the marker is not there (%d events)", label, n, len(got))
		}
	}
	r, err := db.Open(ctx, "child", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	check("read migrated", r)
	r.Close()
	if _, err := db.Migrate(ctx, "child"); err != nil {
		t.Fatal(err)
	}
	w, err := db.Open(ctx, "child", store.Write)
	if err != nil {
		t.Fatalf("write open of the migrated seeded session: %v", err)
	}
	check("migrated", w)
	w.Close()
}
