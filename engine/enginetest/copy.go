package enginetest

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// RunCopy runs the cases of store.Copy from stores newSource makes to
// stores newDest makes (a fresh, empty backend of each per case): the
// same kind of backend or another (the local engine into JetStream and
// back).
func RunCopy(t *testing.T, newSource, newDest func(t *testing.T, clock *Clock) Backend) {
	for _, c := range copyCases {
		t.Run(c.name, func(t *testing.T) {
			src := newEnv(t, newSource)
			dst := newEnv(t, newDest)
			c.run(src, dst)
		})
	}
}

// newEnv opens the first instance of a fresh backend, closed (and
// checked, if the backend can) when the case ends.
func newEnv(t *testing.T, newBackend func(t *testing.T, clock *Clock) Backend) *env {
	clock := &Clock{}
	b := newBackend(t, clock)
	s, err := b.Open()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, b: b, s: s, clock: clock, ctx: context.Background()}
	t.Cleanup(func() {
		e.s.Close()
		if c, ok := b.(Checker); ok {
			if err := c.Check(); err != nil {
				t.Errorf("the store this case left: %v", err)
			}
		}
	})
	return e
}

type copyCase struct {
	name string
	run  func(src, dst *env)
}

// copyAll copies from src to dst and returns the results by session.
func copyAll(src, dst *env, opts store.CopyOptions) (map[string]store.CopyResult, error) {
	src.t.Helper()
	res, err := store.Copy(src.ctx, dst.s, src.s, opts)
	out := map[string]store.CopyResult{}
	for _, r := range res {
		if _, dup := out[r.ID]; dup {
			src.t.Errorf("Copy: session %q copied twice in one run", r.ID)
		}
		out[r.ID] = r
	}
	return out, err
}

// wantStatus checks each session's copy status (and, if want holds them,
// the events it copied).
func wantStatus(e *env, what string, got map[string]store.CopyResult, want map[string]store.CopyStatus) {
	e.t.Helper()
	for id, st := range want {
		if r := got[id]; r.Status != st {
			e.t.Errorf("%s: session %q: %v (%v), want %v", what, id, r.Status, r.Err, st)
		}
	}
	if len(got) != len(want) {
		e.t.Errorf("%s: %d results, want %d: %+v", what, len(got), len(want), got)
	}
}

// wantSameSession checks that dst holds session id as src does: what Stat
// says (all but the revision, which is the destination's own, and the
// size) and every event.
func wantSameSession(src, dst *env, id string) {
	src.t.Helper()
	a, err := src.s.Stat(src.ctx, id)
	if err != nil {
		src.t.Fatalf("Stat %q at the source: %v", id, err)
	}
	b, err := dst.s.Stat(dst.ctx, id)
	if err != nil {
		src.t.Errorf("Stat %q at the destination: %v", id, err)
		return
	}
	if a.Revision == b.Revision {
		src.t.Errorf("session %q: the copy has the source's revision %s (a new incarnation has its own)", id, a.Revision)
	}
	a.Revision, b.Revision, a.SizeBytes, b.SizeBytes = "", "", 0, 0
	if diff := cmp.Diff(a, b); diff != "" {
		src.t.Errorf("session %q: Stat of the copy mismatch (-source +destination):\n%s", id, diff)
	}
	r, err := src.s.Open(src.ctx, id, store.Read)
	if err != nil {
		src.t.Fatal(err)
	}
	defer r.Close()
	d, err := dst.s.Open(dst.ctx, id, store.Read)
	if err != nil {
		src.t.Fatal(err)
	}
	defer d.Close()
	src.wantEvents("the events of the copy of "+id, src.read(r, 0, -1), dst.read(d, 0, -1))
}

// renumber returns evs with seqs from first on.
func renumber(first uint64, evs []event.Event) []event.Event {
	out := make([]event.Event, len(evs))
	for i, x := range evs {
		x.Seq = first + uint64(i)
		out[i] = x
	}
	return out
}

// seeded creates session id in e, seeded with n inherited events, under
// parent: the events pre (n of them), the marker at n (time ms), then
// post; all flushed.
func (e *env) seeded(id, parent string, pre []event.Event, ms int64, post []event.Event) {
	e.t.Helper()
	h := Meta(id)
	h.IsSeeded, h.ParentSession = true, parent
	n := uint64(len(pre))
	w, err := e.s.Create(e.ctx, h, store.Inherited(n))
	if err != nil {
		e.t.Fatalf("Create seeded %q: %v", id, err)
	}
	e.append(w, pre...)
	e.append(w, store.ForkMarker(n, ms))
	e.append(w, renumber(n+1, post)...)
	e.flush(w)
	if err := w.Close(); err != nil {
		e.t.Fatal(err)
	}
}

// session creates session id in e with events evs, flushed and closed.
func (e *env) session(id string, evs ...event.Event) {
	e.t.Helper()
	h := e.create(id)
	e.append(h, evs...)
	e.flush(h)
	if err := h.Close(); err != nil {
		e.t.Fatal(err)
	}
}

var copyCases = []copyCase{
	{"copy/every-session", func(src, dst *env) {
		src.session("a", append(OneTurn(), at(6, 5000, "session/title", `{"title":"Greeting","messageSeqs":[1]}`))...)
		src.session("empty")
		src.session("p", OneTurn()...)
		c, err := src.s.Fork(src.ctx, "p", 6, Meta("c"), store.MarkerTime(4321))
		if err != nil {
			src.t.Fatalf("Fork: %v", err)
		}
		src.append(c, renumber(7, Turn2())...)
		src.flush(c)
		c.Close()
		// Seeded, its parent elsewhere: copied whole.
		src.seeded("s", "elsewhere", OneTurn()[:2], 1500, Turn2())
		// Seeded under p, but not with p's events: copied whole too.
		other := OneTurn()[:2]
		other[1] = ev(1, "step/start", `{"turn":0,"step":0}`)
		src.seeded("x", "p", other, 1600, nil)
		got, err := copyAll(src, dst, store.CopyOptions{})
		if err != nil {
			src.t.Fatalf("Copy: %v", err)
		}
		wantStatus(src, "the first copy", got, map[string]store.CopyStatus{
			"a": store.CopyCreated, "empty": store.CopyCreated, "p": store.CopyCreated,
			"c": store.CopyForked, "s": store.CopyCreated, "x": store.CopyCreated,
		})
		if r := got["c"]; r.Events != 9 || r.Copied != 9 {
			src.t.Errorf("the fork's copy: %+v, want 9 events, 9 copied", r)
		}
		ids := []string{"a", "empty", "p", "c", "s", "x"}
		for _, id := range ids {
			wantSameSession(src, dst, id)
		}
		// Again, and after the destination restarts: nothing is written
		// twice.
		dst.restart(false)
		got, err = copyAll(src, dst, store.CopyOptions{})
		if err != nil {
			src.t.Fatalf("Copy again: %v", err)
		}
		want := map[string]store.CopyStatus{}
		for _, id := range ids {
			want[id] = store.CopyUpToDate
			wantSameSession(src, dst, id)
		}
		wantStatus(src, "the copy again", got, want)
		got, err = copyAll(src, dst, store.CopyOptions{IDs: []string{"nope"}})
		if err != nil || got["nope"].Status != store.CopyGone {
			src.t.Errorf("Copy of a session the source lacks: %+v, %v", got, err)
		}
	}},
	{"copy/finishes-a-copy-cut-short", func(src, dst *env) {
		src.session("long", testgen.Events(0, 1000, 200)...)
		src.seeded("seeded", "elsewhere", testgen.Events(0, 300, 200), 1_700_000_000_000, testgen.Events(0, 50, 200))
		// Cut short (a crash) once a chunk of 100 events beyond 200 is
		// flushed: first in "long", then in "seeded" (before its marker).
		cut := func(id string) store.CopyOptions {
			ctx, cancel := context.WithCancel(src.ctx)
			src.ctx = ctx
			return store.CopyOptions{Chunk: 100, IDs: []string{"long", "seeded"}, Progress: func(at string, n uint64) {
				if at == id && n >= 200 {
					cancel()
				}
			}}
		}
		base := src.ctx
		_, err := copyAll(src, dst, cut("long"))
		src.wantErr("the copy cut short", err, context.Canceled)
		src.ctx = base
		dst.restart(false)
		_, err = copyAll(src, dst, cut("seeded"))
		src.wantErr("the second copy cut short", err, context.Canceled)
		src.ctx = base
		dst.restart(false)
		if snap, err := dst.s.Stat(dst.ctx, "seeded"); err != nil || snap.EventCount != 200 {
			src.t.Fatalf("the seeded copy cut short: %+v, %v; want 200 events, before its marker", snap, err)
		}
		got, err := copyAll(src, dst, store.CopyOptions{Chunk: 100})
		if err != nil {
			src.t.Fatalf("Copy: %v", err)
		}
		wantStatus(src, "the copy finishing them", got, map[string]store.CopyStatus{"long": store.CopyUpToDate, "seeded": store.CopyResumed})
		if r := got["seeded"]; r.Events != 351 || r.Copied != 151 {
			src.t.Errorf("the seeded session's copy: %+v, want 351 events, 151 copied", r)
		}
		wantSameSession(src, dst, "long")
		wantSameSession(src, dst, "seeded")
	}},
	{"copy/refuses-another-session", func(src, dst *env) {
		src.session("a", OneTurn()...)
		src.session("b", OneTurn()...)
		src.session("c", OneTurn()...)
		h := Meta("a")
		h.CreatedAt++
		w, err := dst.s.Create(dst.ctx, h)
		if err != nil {
			dst.t.Fatal(err)
		}
		dst.append(w, OneTurn()...)
		dst.flush(w)
		w.Close()
		b := OneTurn()
		b[3].Time++
		dst.session("b", b...)
		dst.session("c", append(OneTurn(), Turn2()...)...)
		got, err := copyAll(src, dst, store.CopyOptions{})
		var ce *store.CopyConflictError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrSessionExists) {
			src.t.Errorf("Copy over other sessions: %v, want a *CopyConflictError", err)
		}
		wantStatus(src, "the copy", got, map[string]store.CopyStatus{"a": store.CopyFailed, "b": store.CopyFailed, "c": store.CopyAhead})
		for id, n := range map[string]uint64{"a": 6, "b": 6, "c": 8} {
			if !errors.As(got[id].Err, &ce) && id != "c" {
				src.t.Errorf("%s: %v, want a *CopyConflictError", id, got[id].Err)
			}
			snap, err := dst.s.Stat(dst.ctx, id)
			if err != nil || snap.EventCount != n {
				src.t.Errorf("%s at the destination after the refused copy: %+v, %v; want %d events", id, snap, err, n)
			}
		}
		if errors.As(got["b"].Err, &ce) && ce.Reason != "event 3 differs" {
			src.t.Errorf("b: %v, want event 3 named", got["b"].Err)
		}
	}},
	{"copy/a-session-being-written", func(src, dst *env) {
		o := src.otherHost()
		w, err := o.Create(src.ctx, Meta("w"))
		if err != nil {
			src.t.Fatal(err)
		}
		defer w.Close()
		src.append(w, OneTurn()...)
		src.flush(w)
		src.append(w, Turn2()...) // not flushed: not yet the session's for another host
		got, err := copyAll(src, dst, store.CopyOptions{})
		if err != nil || got["w"].Status != store.CopyCreated || got["w"].Events != 6 {
			src.t.Fatalf("Copy of a session another host writes: %+v, %v; want 6 events created", got, err)
		}
		// The writer kept its lease: it goes on.
		src.append(w, at(8, 3000, "turn/start", `{"turn":2}`))
		src.flush(w)
		got, err = copyAll(src, dst, store.CopyOptions{})
		if err != nil || got["w"].Status != store.CopyResumed || got["w"].Copied != 3 {
			src.t.Fatalf("Copy of the session grown since: %+v, %v; want 3 more", got, err)
		}
		d, err := dst.s.Open(dst.ctx, "w", store.Read)
		if err != nil {
			src.t.Fatal(err)
		}
		defer d.Close()
		src.wantEvents("the copy", append(append(OneTurn(), Turn2()...), at(8, 3000, "turn/start", `{"turn":2}`)), src.read(d, 0, -1))
	}},
}
