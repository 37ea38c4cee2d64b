package engine_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/plan"
	"github.com/seglog/seglog/store"
)

// TestPlanAfterEnqueue: the plan controller over a write handle whose
// events are still in the write-behind buffer numbers its events after
// them (a write handle reads its own enqueued events), and the handle's
// Len agrees.
func TestPlanAfterEnqueue(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, t.TempDir(), &engine.Options{WriteBehindWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	ev := func(seq uint64, typ, data string) event.Event {
		return event.Event{Seq: seq, Type: typ, Time: 1, Data: json.RawMessage(data)}
	}
	if err := h.Enqueue(ev(0, "turn/start", `{"turn":0}`), ev(1, "step/start", `{"turn":0,"step":0}`)); err != nil {
		t.Fatal(err)
	}
	c := plan.NewController(plan.Config{}, h, func() int64 { return 2 })
	if res, err := c.Set(ctx, true); err != nil || res != plan.Queued {
		t.Fatalf("Set in a turn: %v, %v; want queued", res, err)
	}
	if err := c.PreStep(ctx); err != nil {
		t.Fatalf("PreStep after Enqueue: %v", err)
	}
	evs, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 3 || evs[2].Type != plan.EventType || h.Len() != uint64(len(evs)) {
		t.Fatalf("log after the pre-step: %d events (Len %d), third %+v", len(evs), h.Len(), evs[min(2, len(evs)-1)])
	}
}
