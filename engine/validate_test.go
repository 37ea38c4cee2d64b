package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// Append refuses an event time the store cannot keep, naming the seq and
// the field, and writes nothing; the extreme times it accepts survive a
// flush and a reopen (item 6 of issue 15: math.MinInt64 was accepted,
// flushed, and then the session read as corruption, "time overflows").
func TestAppendRefusesUnstorableTime(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "t", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := testgen.Events(0, 3, 50)
	if err := h.Append(ctx, want...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ev := func(seq uint64, tm int64) event.Event {
		return event.Event{Seq: seq, Type: "turn/start", Time: tm, Data: json.RawMessage(fmt.Sprintf(`{"turn":"t%d"}`, seq))}
	}
	for _, bad := range []int64{event.MaxTime + 1, event.MinTime - 1, math.MaxInt64, math.MinInt64} {
		// The bad event second in its batch: the whole batch is refused.
		err := h.Append(ctx, ev(3, 0), ev(4, bad))
		var ie *event.InvalidError
		if !errors.As(err, &ie) || !errors.Is(err, store.ErrInvalidEvent) || ie.Seq != 4 || ie.Index != 1 || !strings.Contains(ie.Reason, "time") {
			t.Fatalf("Append with time %d: %v, want *event.InvalidError for seq 4 naming the time", bad, err)
		}
		if err := h.Enqueue(ev(3, bad)); !errors.As(err, &ie) || ie.Seq != 3 || !strings.Contains(ie.Reason, "time") {
			t.Fatalf("Enqueue with time %d: %v, want *event.InvalidError for seq 3 naming the time", bad, err)
		}
		if snap, err := db.Stat(ctx, "t"); err != nil || snap.EventCount != 3 {
			t.Fatalf("after a refused append: Stat = %+v, %v; want 3 events", snap, err)
		}
	}
	// The storable extremes, in the order that makes the largest deltas.
	for i, tm := range []int64{event.MinTime, event.MaxTime, event.MinTime, 0, event.MaxTime, event.MaxTime, event.MinTime} {
		want = append(want, ev(uint64(3+i), tm))
	}
	if err := h.Append(ctx, want[3:]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	engine.SameEvents(t, "before reopen", engine.ReadAll(t, db, "t"), want)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*engine.Options{nil, {NoIndex: true}} {
		db, err := engine.OpenStore(t, dir, o)
		if err != nil {
			t.Fatal(err)
		}
		engine.SameEvents(t, "after reopen", engine.ReadAll(t, db, "t"), want)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
