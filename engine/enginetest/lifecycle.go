package enginetest

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// Hosts is a Backend that can open another instance beside the first,
// over the same storage, as another host would (the local engine: a second
// DB on the directory, as another process; JetStream: a store under
// another Host name). The cases of what every host sees need it; a
// backend without it skips them. Run closes the instances it opens when
// the case ends.
type Hosts interface {
	OpenHost() (Store, error)
}

// otherHost opens another instance (Hosts), or skips the case.
func (e *env) otherHost() Store {
	e.t.Helper()
	o, ok := e.hosts()
	if !ok {
		e.t.Skipf("the backend %T cannot open a second host (enginetest.Hosts)", e.b)
	}
	return o
}

// hosts opens another instance if the backend can.
func (e *env) hosts() (Store, bool) {
	e.t.Helper()
	hb, ok := e.b.(Hosts)
	if !ok {
		return nil, false
	}
	o, err := hb.OpenHost()
	if err != nil {
		e.t.Fatalf("open another host: %v", err)
	}
	e.t.Cleanup(func() { o.Close() }) // before Run's cleanup: its check sees a closed storage
	return o, true
}

// interruptedTurn is a turn cut by a crash inside a tool call: seqs 0..3.
func interruptedTurn() []event.Event {
	return []event.Event{
		ev(0, "turn/start", `{"turn":0}`),
		ev(1, "step/start", `{"turn":0,"step":0}`),
		ev(2, "assistant/message", `{"turn":0,"step":0,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"read","arguments":"{}"}]}}`),
		ev(3, "tool/call", `{"turn":0,"step":0,"callId":"c1","name":"read","arguments":"{}"}`),
	}
}

func types(evs []event.Event) []string {
	out := []string{}
	for _, x := range evs {
		out = append(out, x.Type)
	}
	return out
}

// wantGone checks that session id is deleted as store s sees it: Stat,
// Open (both accesses), Inspect, Resume and Delete fail with
// ErrSessionNotFound, and List leaves it out.
func (e *env) wantGone(what string, s Store, id string) {
	e.t.Helper()
	_, err := s.Stat(e.ctx, id)
	e.wantErr(what+": Stat", err, store.ErrSessionNotFound)
	for _, a := range []store.Access{store.Read, store.Write} {
		_, err = s.Open(e.ctx, id, a)
		e.wantErr(what+": Open "+a.String(), err, store.ErrSessionNotFound)
	}
	_, err = s.Inspect(e.ctx, id)
	e.wantErr(what+": Inspect", err, store.ErrSessionNotFound)
	_, _, err = s.Resume(e.ctx, id)
	e.wantErr(what+": Resume", err, store.ErrSessionNotFound)
	e.wantErr(what+": Delete", s.Delete(e.ctx, id), store.ErrSessionNotFound)
	snaps, err := s.List(e.ctx)
	if err != nil {
		e.t.Fatalf("%s: List: %v", what, err)
	}
	for _, snap := range snaps {
		if snap.Header.ID == id {
			e.t.Errorf("%s: List still holds %q", what, id)
		}
	}
}

// wantReaderGone checks that a read handle opened before the delete
// fails with ErrSessionNotFound: Read, and Wait (at once, not at its
// context's end).
func (e *env) wantReaderGone(what string, r Session) {
	e.t.Helper()
	_, err := r.Read(e.ctx, 0, -1)
	e.wantErr(what+": Read", err, store.ErrSessionNotFound)
	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	defer cancel()
	_, err = r.Wait(ctx, 0)
	e.wantErr(what+": Wait", err, store.ErrSessionNotFound)
}

// lifecycleCases are the contract's Delete and Resume, and what other
// hosts see of a session.
var lifecycleCases = []contractCase{
	{"store/delete", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.flush(h)
		e.wantErr("delete while a write handle holds it", e.s.Delete(e.ctx, "s"), store.ErrAlreadyOwned)
		e.wantEvents("the log after a refused delete", OneTurn(), e.read(h, 0, -1))
		e.append(h, Turn2()...) // the handle still writes
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		old, err := e.s.Stat(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		r := e.open("s", store.Read) // a reader does not hold a delete back
		if err := e.s.Delete(e.ctx, "s"); err != nil {
			e.t.Fatalf("Delete: %v", err)
		}
		e.wantGone("after Delete", e.s, "s")
		e.wantReaderGone("a reader opened before", r)
		e.restart(false) // the delete is durable
		e.wantGone("after a restart", e.s, "s")
		// The id is free: a new incarnation, with nothing of the old.
		n := e.create("s")
		if n.Len() != 0 {
			e.t.Errorf("Len of the recreated session: %d", n.Len())
		}
		e.wantEvents("the recreated session", nil, e.read(n, 0, -1))
		e.append(n, OneTurn()[:2]...)
		e.flush(n)
		snap, err := e.s.Stat(e.ctx, "s")
		if err != nil || snap.EventCount != 2 || snap.Revision == old.Revision {
			e.t.Errorf("Stat of the recreated session: %+v, %v (old revision %s)", snap, err, old.Revision)
		}
		if err := n.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		e.wantEvents("the recreated session after a restart", OneTurn()[:2], e.read(e.open("s", store.Read), 0, -1))
		e.wantErr("delete of a missing session", e.s.Delete(e.ctx, "nope"), store.ErrSessionNotFound)
	}},
	{"store/delete-seen-by-every-host", func(e *env) {
		o := e.otherHost()
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.flush(h)
		r, err := o.Open(e.ctx, "s", store.Read)
		if err != nil {
			e.t.Fatalf("open on the other host: %v", err)
		}
		e.wantEvents("the other host's reader", OneTurn(), e.read(r, 0, -1))
		e.wantErr("delete on the other host while this one writes", o.Delete(e.ctx, "s"), store.ErrAlreadyOwned)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		w, err := o.Open(e.ctx, "s", store.Write)
		if err != nil {
			e.t.Fatalf("write open on the other host: %v", err)
		}
		e.wantErr("delete while the other host writes", e.s.Delete(e.ctx, "s"), store.ErrAlreadyOwned)
		if err := w.Close(); err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Delete(e.ctx, "s"); err != nil {
			e.t.Fatalf("Delete: %v", err)
		}
		e.wantGone("on the other host", o, "s")
		e.wantReaderGone("the other host's reader", r)
		e.wantGone("on this host", e.s, "s")
		// The other host creates it again; this one sees only the new
		// incarnation.
		n, err := o.Create(e.ctx, Meta("s"))
		if err != nil {
			e.t.Fatalf("create on the other host after the delete: %v", err)
		}
		e.append(n, OneTurn()[:1]...)
		e.flush(n)
		snap, err := e.s.Stat(e.ctx, "s")
		if err != nil || snap.EventCount != 1 {
			e.t.Errorf("Stat here of the recreated session: %+v, %v", snap, err)
		}
		e.wantEvents("the recreated session read here", OneTurn()[:1], e.read(e.open("s", store.Read), 0, -1))
		if err := n.Close(); err != nil {
			e.t.Fatal(err)
		}
	}},
	{"store/wait-across-hosts", func(e *env) {
		o := e.otherHost()
		h := e.create("s")
		e.flush(h)
		r, err := o.Open(e.ctx, "s", store.Read)
		if err != nil {
			e.t.Fatalf("open on the other host: %v", err)
		}
		done := appendTurnLater(e.ctx, h)
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		defer cancel()
		n, err := r.Wait(ctx, 0)
		if err != nil || n == 0 {
			e.t.Fatalf("wait on the other host for the first event: %d, %v", n, err)
		}
		if err := <-done; err != nil {
			e.t.Fatal(err)
		}
		if n, err := r.Wait(ctx, 5); n != 6 || err != nil {
			e.t.Fatalf("wait on the other host for what is flushed: %d, %v; want 6", n, err)
		}
		e.wantEvents("read on the other host", OneTurn(), e.read(r, 0, -1))
		short, cancel2 := context.WithTimeout(e.ctx, 20*time.Millisecond)
		defer cancel2()
		if _, err := r.Wait(short, 6); !errors.Is(err, context.DeadlineExceeded) {
			e.t.Errorf("wait past the end on the other host: %v, want the context's deadline", err)
		}
	}},
	{"store/resume-closes-an-interrupted-turn", func(e *env) {
		h := e.create("s")
		e.append(h, interruptedTurn()...)
		e.flush(h)
		e.restart(false) // the host died inside the turn
		in, err := e.s.Inspect(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		w, closers, err := e.s.Resume(e.ctx, "s")
		if err != nil {
			e.t.Fatalf("Resume: %v", err)
		}
		if want := []string{"tool/result", "step/end", "turn/end"}; !slices.Equal(types(closers), want) {
			e.t.Errorf("closers %v, want %v", types(closers), want)
		}
		if diff := cmp.Diff(in.Closers, closers); diff != "" {
			e.t.Errorf("Resume's closers differ from Inspect's (-inspect +resume):\n%s", diff)
		}
		if w.Access() != store.Write || w.Len() != 7 {
			e.t.Errorf("resumed handle: access %v, Len %d; want write, 7", w.Access(), w.Len())
		}
		want := append(interruptedTurn(), closers...)
		e.wantEvents("the resumed log", want, e.read(w, 0, -1))
		_, _, err = e.s.Resume(e.ctx, "s")
		e.wantErr("resume while the resumed handle writes", err, store.ErrAlreadyOwned)
		if o, ok := e.hosts(); ok {
			_, _, err = o.Resume(e.ctx, "s")
			e.wantErr("resume on another host while this one writes", err, store.ErrAlreadyOwned)
		}
		e.wantEvents("a refused resume writes nothing", want, e.read(w, 0, -1))
		e.append(w, ev(7, "turn/start", `{"turn":1}`)) // the host goes on...
		e.flush(w)
		e.restart(false) // ...and dies again inside turn 1
		w, closers, err = e.s.Resume(e.ctx, "s")
		if err != nil {
			e.t.Fatalf("second Resume: %v", err)
		}
		if !slices.Equal(types(closers), []string{"turn/end"}) || closers[0].Seq != 8 {
			e.t.Errorf("second resume's closers: %v, want one turn/end at seq 8", closers)
		}
		if err := w.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		r := e.open("s", store.Read)
		got := e.read(r, 0, -1)
		if len(got) != 9 {
			e.t.Fatalf("after two resumes and a restart: %d events, want 9 (each set of closers once)", len(got))
		}
		e.wantEvents("the log", append(append(want, ev(7, "turn/start", `{"turn":1}`)), closers...), got)
	}},
	{"store/resume-of-a-balanced-log-writes-nothing", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		before, err := e.s.Stat(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		w, closers, err := e.s.Resume(e.ctx, "s")
		if err != nil {
			e.t.Fatalf("Resume: %v", err)
		}
		if len(closers) != 0 || w.Len() != 6 {
			e.t.Errorf("resume of a balanced log: closers %v, Len %d", closers, w.Len())
		}
		e.append(w, Turn2()...) // a write handle like any other
		if err := w.Close(); err != nil {
			e.t.Fatal(err)
		}
		after, err := e.s.Stat(e.ctx, "s")
		if err != nil || after.EventCount != 8 || after.Revision == before.Revision {
			e.t.Errorf("Stat after: %+v, %v", after, err)
		}
		_, _, err = e.s.Resume(e.ctx, "nope")
		e.wantErr("resume of a missing session", err, store.ErrSessionNotFound)
	}},
}
