package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/plan"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/vfs"
)

func rawEv(seq uint64, typ, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: 5000 + int64(seq), Data: json.RawMessage(data)}
}

// Write through the engine, cut the power in the middle of a turn, reopen,
// resume: the log is the flushed prefix plus exactly one set of closers,
// and a second resume adds nothing.
func TestResumeAfterPowerCut(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	db, err := engine.OpenStore(t, "/db", &engine.Options{FS: mem})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	flushed := append(enginetest.OneTurn(),
		rawEv(6, "turn/start", `{"turn":1}`),
		rawEv(7, "step/start", `{"turn":1,"step":0}`),
		rawEv(8, "assistant/message", `{"turn":1,"step":0,"message":{"id":"a2","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"bash","arguments":"{}"},{"type":"tool-call","id":"c2","name":"read","arguments":"{}"}],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[]}`),
		rawEv(9, "tool/call", `{"turn":1,"step":0,"callId":"c1","name":"bash","arguments":"{}"}`),
	)
	flushed[8].SurfaceOp = json.RawMessage(`"append"`)
	if err := h.Append(ctx, flushed...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// Appended but never flushed: may or may not survive; here the cut drops it.
	if err := h.Append(ctx, rawEv(10, "tool/call", `{"turn":1,"step":0,"callId":"c2","name":"read","arguments":"{}"}`)); err != nil {
		t.Fatal(err)
	}
	crashed := mem.CrashClone(vfs.CrashConfig{})
	db.Close()

	db, err = engine.OpenStore(t, "/db", &engine.Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Open(ctx, "s", store.Write); err != nil {
		t.Fatal(err) // owns it now: a concurrent resume must fail
	}
	if _, _, err := db.Resume(ctx, "s"); !errors.Is(err, store.ErrAlreadyOwned) {
		t.Fatalf("Resume while owned = %v, want ErrAlreadyOwned", err)
	}
	db.Close()

	db, err = engine.OpenStore(t, "/db", &engine.Options{FS: crashed})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w, closers, err := db.Resume(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	want, err := recovery.InterruptedTurnClosers(flushed)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 4 { // c1 outcome unknown, c2 not started, step/end, turn/end
		t.Fatalf("expected 4 closers, got %d", len(want))
	}
	if diff := cmp.Diff(want, closers); diff != "" {
		t.Fatalf("closers mismatch (-want +got):\n%s", diff)
	}
	got, err := w.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(flushed, want...), got); diff != "" {
		t.Fatalf("stored log mismatch (-want +got):\n%s", diff)
	}
	w.Close()
	w2, again, err := db.Resume(ctx, "s")
	if err != nil || len(again) != 0 {
		t.Fatalf("second Resume wrote %d closers, %v", len(again), err)
	}
	w2.Close()
	// The closers were flushed: they survive another cut.
	db2 := crashed.CrashClone(vfs.CrashConfig{})
	db.Close()
	d3, err := engine.OpenStore(t, "/db", &engine.Options{FS: db2})
	if err != nil {
		t.Fatal(err)
	}
	defer d3.Close()
	r, _ := d3.Open(ctx, "s", store.Read)
	if got, _ := r.Read(ctx, 0, -1); len(got) != len(flushed)+4 {
		t.Fatalf("after another cut: %d events", len(got))
	}
}

// An engine write handle is the Log plan mode runs on.
var _ plan.Log = (*engine.Handle)(nil)
