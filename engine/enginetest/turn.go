package enginetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/storekit"
	"github.com/seglog/seglog/testgen"
)

// The turn state (issue 47): Handle.TurnState, Inspection.Turn and the
// closers come from the open turn, never from the whole log; these cases
// hold them to what a fold of the whole log gives, through crashes,
// restarts, forks and ResumeMany.
var turnCases = []contractCase{
	{"store/turn-state-names-the-open-turn", func(e *env) {
		h := e.create("s")
		open := []event.Event{
			ev(0, "turn/start", `{"turn":3}`),
			ev(1, "step/start", `{"turn":3,"step":1}`),
			ev(2, "assistant/message", `{"turn":3,"step":1,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"read","arguments":"{}"},{"type":"tool-call","id":"c2","name":"grep","arguments":"{}"}]}}`),
			ev(3, "tool/call", `{"turn":3,"step":1,"callId":"c1","name":"read","arguments":"{}"}`),
		}
		e.append(h, open...)
		e.flush(h)
		want := store.TurnState{Len: 4, Open: true, Turn: json.RawMessage(`3`), NextTurn: 4, Step: json.RawMessage(`1`),
			Pending: []store.PendingCall{
				{CallID: "c1", Name: "read", Step: json.RawMessage(`1`), Started: true, CallSeq: 3},
				{CallID: "c2", Name: "grep", Step: json.RawMessage(`1`)},
			}}
		e.wantTurnState("the writer's", want, h)
		in, err := e.s.Inspect(e.ctx, "s", store.InspectEvents(0, 0))
		if err != nil {
			e.t.Fatal(err)
		}
		if len(in.Events) != 0 || len(in.Closers) != 4 {
			e.t.Errorf("Inspect with InspectEvents(0, 0): %d events, %d closers; want 0 and 4", len(in.Events), len(in.Closers))
		}
		if diff := cmp.Diff(want, in.Turn); diff != "" {
			e.t.Errorf("Inspection.Turn (-want +got):\n%s", diff)
		}
		in, err = e.s.Inspect(e.ctx, "s", store.InspectEvents(1, 2))
		if err != nil {
			e.t.Fatal(err)
		}
		e.wantEvents("InspectEvents(1, 2)", open[1:3], in.Events)
		if len(in.Closers) != 4 {
			e.t.Errorf("InspectEvents(1, 2): %d closers, want 4", len(in.Closers))
		}
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		r, closers, err := e.s.Resume(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		if len(closers) != 4 {
			e.t.Errorf("Resume: %d closers, want 4", len(closers))
		}
		e.wantTurnState("after Resume", store.TurnState{Len: 8, Turn: json.RawMessage(`3`), NextTurn: 4}, r)
		e.append(r, ev(8, "turn/start", `{"turn":4}`))
		e.wantTurnState("after the next turn/start", store.TurnState{Len: 9, Open: true, Turn: json.RawMessage(`4`), NextTurn: 5}, r)
		if err := r.Close(); err != nil {
			e.t.Fatal(err)
		}
		// Before any turn: nothing open, the next turn is 0.
		n := e.create("n")
		e.append(n, ev(0, "system/message", `{"message":{"id":"s","role":"system","content":[]}}`))
		e.wantTurnState("before any turn", store.TurnState{Len: 1}, n)
		if err := n.Close(); err != nil {
			e.t.Fatal(err)
		}
	}},
	{"store/turn-state-from-the-open-turn-is-the-whole-logs", func(e *env) {
		r := rand.New(rand.NewPCG(47, 3))
		var ids []string
		for i := range 6 {
			id := fmt.Sprintf("s%d", i)
			ids = append(ids, id)
			log := testgen.AgentLog(uint64(i), 40+r.IntN(120), 16)
			h := e.create(id)
			for at := 0; at < len(log); {
				n := min(1+r.IntN(9), len(log)-at)
				if err := h.Enqueue(log[at : at+n]...); err != nil {
					e.t.Fatal(err)
				}
				at += n
				if r.IntN(3) == 0 || at == len(log) && i%2 == 0 {
					e.flush(h)
				}
				if r.IntN(4) == 0 {
					e.wantWholeTurn("the writer mid-log", h)
				}
			}
			e.wantWholeTurn("the writer", h)
			e.wantInspectedTurn("beside the writer", id)
			// (Odd sessions end with events not flushed: a crash may
			// cut them.)
		}
		e.restart(true)
		for _, id := range ids {
			e.wantInspectedTurn("after a crash", id)
		}
		// A fork inherits its parent's first n events, open turn and all.
		p := e.open("s1", store.Read)
		plen := uint64(len(e.read(p, 0, -1)))
		if err := p.Close(); err != nil {
			e.t.Fatal(err)
		}
		for _, n := range []uint64{1, plen / 2, plen} {
			if n == 0 {
				continue
			}
			id := fmt.Sprintf("f%d", n)
			f, err := e.s.Fork(e.ctx, "s1", n, Meta(id))
			if err != nil {
				e.t.Fatalf("Fork at %d: %v", n, err)
			}
			e.wantWholeTurn("a fork", f)
			if err := f.Close(); err != nil {
				e.t.Fatal(err)
			}
			e.wantInspectedTurn("a fork", id)
			ids = append(ids, id)
		}
		// Resume them all at once: each gets the closers a fold of its
		// whole log asks for, and is balanced after.
		want := map[string][]event.Event{}
		for _, id := range ids {
			want[id] = e.wholeFoldClosers(id)
		}
		rs, err := e.s.ResumeMany(e.ctx, append(slices.Clone(ids), "missing"))
		if err != nil {
			e.t.Fatalf("ResumeMany: %v", err)
		}
		if len(rs) != len(ids)+1 {
			e.t.Fatalf("ResumeMany: %d results for %d ids", len(rs), len(ids)+1)
		}
		for i, res := range rs[:len(ids)] {
			if res.ID != ids[i] || res.Err != nil {
				e.t.Fatalf("ResumeMany %d: %q, %v; want %q resumed", i, res.ID, res.Err, ids[i])
			}
			if diff := cmp.Diff(want[res.ID], res.Closers, cmp.Comparer(sameEvent)); diff != "" {
				e.t.Errorf("ResumeMany of %s: closers (-want +got):\n%s", res.ID, diff)
			}
			ts, err := res.Handle.TurnState(e.ctx)
			if err != nil || ts.Open {
				e.t.Errorf("ResumeMany of %s: turn state %+v, %v; want closed", res.ID, ts, err)
			}
			e.wantWholeTurn("resumed", res.Handle)
			if err := res.Handle.Close(); err != nil {
				e.t.Fatal(err)
			}
		}
		if last := rs[len(ids)]; last.ID != "missing" || last.Err == nil {
			e.t.Errorf("ResumeMany of a missing session: %+v", last)
		} else {
			e.wantErr("ResumeMany of a missing session", last.Err, store.ErrSessionNotFound)
		}
		// Closers durable after ResumeMany, with one flush: a restart
		// keeps them.
		e.restart(false)
		for _, id := range ids {
			in, err := e.s.Inspect(e.ctx, id, store.InspectEvents(0, 0))
			if err != nil || in.Closers != nil || in.Turn.Open {
				e.t.Errorf("%s after ResumeMany and a restart: closers %d, turn %+v, %v", id, len(in.Closers), in.Turn, err)
			}
			e.wantInspectedTurn("after ResumeMany and a restart", id)
		}
	}},
}

func sameEvent(a, b event.Event) bool {
	return a.Seq == b.Seq && a.Type == b.Type && a.Time == b.Time && string(a.Data) == string(b.Data) &&
		string(a.SurfaceOp) == string(b.SurfaceOp) && slices.Equal(a.SourceEventSeqs, b.SourceEventSeqs)
}

// wholeFold is the fold of the whole log h reads, the reference the
// turn state from the open turn must equal.
func (e *env) wholeFold(h Session) recovery.State {
	e.t.Helper()
	st, err := recovery.Fold(e.read(h, 0, -1))
	if err != nil {
		e.t.Fatalf("fold of %s: %v", h.ID(), err)
	}
	return st
}

func (e *env) wholeFoldClosers(id string) []event.Event {
	e.t.Helper()
	h := e.open(id, store.Read)
	defer h.Close()
	return recovery.Closers(e.wholeFold(h))
}

func (e *env) wantTurnState(what string, want store.TurnState, h Session) {
	e.t.Helper()
	got, err := h.TurnState(e.ctx)
	if err != nil {
		e.t.Fatalf("%s TurnState: %v", what, err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("%s TurnState (-want +got):\n%s", what, diff)
	}
}

// wantWholeTurn: h's TurnState is the whole log's.
func (e *env) wantWholeTurn(what string, h Session) {
	e.t.Helper()
	e.wantTurnState(what+" ("+h.ID()+")", storekit.TurnStateOf(e.wholeFold(h)), h)
}

// wantInspectedTurn: Inspect of session id, its events left out, and a
// read handle's TurnState give the whole log's turn state and closers.
func (e *env) wantInspectedTurn(what, id string) {
	e.t.Helper()
	r := e.open(id, store.Read)
	defer r.Close()
	st := e.wholeFold(r)
	in, err := e.s.Inspect(e.ctx, id, store.InspectEvents(0, 0))
	if err != nil {
		e.t.Fatalf("%s: Inspect(%s): %v", what, id, err)
	}
	if diff := cmp.Diff(storekit.TurnStateOf(st), in.Turn); diff != "" {
		e.t.Errorf("%s: Inspect(%s).Turn (-want +got):\n%s", what, id, diff)
	}
	if diff := cmp.Diff(recovery.Closers(st), in.Closers, cmp.Comparer(sameEvent)); diff != "" {
		e.t.Errorf("%s: Inspect(%s).Closers (-want +got):\n%s", what, id, diff)
	}
	if len(in.Events) != 0 {
		e.t.Errorf("%s: Inspect(%s) with InspectEvents(0, 0) returned %d events", what, id, len(in.Events))
	}
	e.wantWholeTurn(what+" (read handle)", r)
}
