package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/recovery"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// Meta is the reference fixture meta(id).
func Meta(id string) store.Header {
	return store.Header{Version: store.FormatVersion, ID: id, CreatedAt: 1000}
}

func ev(seq uint64, typ, data string) event.Event {
	return event.Event{Seq: seq, Type: typ, Time: 1000 + int64(seq), Data: json.RawMessage(data)}
}

// OneTurn is the reference fixture oneTurn: seqs 0..5, one complete turn.
func OneTurn() []event.Event {
	user := ev(1, "user/message", `{"turn":0,"step":0,"message":{"id":"u1","role":"user","content":[{"type":"text","text":"hello"}],"source":{"kind":"user"}}}`)
	user.SurfaceOp = json.RawMessage(`"append"`)
	asst := ev(3, "assistant/message", `{"turn":0,"step":0,"message":{"id":"a1","role":"assistant","content":[{"type":"text","text":"hi"}],"source":{"kind":"model","provider":"p","model":"m"}},"stream":[{"type":"text-chunks","time0":1003,"index":0,"dt":[1],"texts":["h","i"]}]}`)
	asst.SurfaceOp = json.RawMessage(`"append"`)
	return []event.Event{
		ev(0, "turn/start", `{"turn":0}`),
		user,
		ev(2, "step/start", `{"turn":0,"step":0}`),
		asst,
		ev(4, "step/end", `{"turn":0,"step":0}`),
		ev(5, "turn/end", `{"turn":0,"reason":{"kind":"completed"}}`),
	}
}

// Turn2 is the reference fixture turn2: seqs 6..7.
func Turn2() []event.Event {
	return []event.Event{
		ev(6, "turn/start", `{"turn":1}`),
		ev(7, "turn/end", `{"turn":1,"reason":{"kind":"aborted","source":"user"}}`),
	}
}

// SurfaceTurn is a one-turn log that keeps the v3 surface rules: seqs
// 0..5, a system head at 2 and a user message at 3 (the surface).
func SurfaceTurn() []event.Event {
	sys := ev(2, "system/message", `{"turn":0,"step":0,"message":{"id":"s","role":"system","content":[],"source":{"kind":"plugin","plugin":"p"}}}`)
	sys.SurfaceOp = json.RawMessage(`"append"`)
	user := ev(3, "user/message", `{"id":"u1","role":"user","content":[{"type":"text","text":"hello"}],"source":{"kind":"user"}}`)
	user.SurfaceOp, user.SourceEventSeqs = json.RawMessage(`"append"`), []uint64{1}
	return []event.Event{
		ev(0, "turn/start", `{"turn":0}`),
		ev(1, "step/start", `{"turn":0,"step":0}`),
		sys,
		user,
		ev(4, "step/end", `{"turn":0,"step":0}`),
		ev(5, "turn/end", `{"turn":0,"reason":{"kind":"completed"}}`),
	}
}

// Run runs every contract case against stores newBackend makes; each case
// gets a fresh, empty backend. clock drives write-behind windows: the
// backend must pass clock.AfterFunc to its stores.
func Run(t *testing.T, newBackend func(t *testing.T, clock *Clock) Backend) {
	for _, c := range slices.Concat(contractCases, lifecycleCases, retainCases, turnCases, changesCases) {
		t.Run(c.name, func(t *testing.T) {
			clock := &Clock{}
			b := newBackend(t, clock)
			s, err := b.Open()
			if err != nil {
				t.Fatal(err)
			}
			env := &env{t: t, b: b, s: s, clock: clock, ctx: context.Background()}
			t.Cleanup(func() {
				env.s.Close()
				// bbolt's MustCheck habit: what a case leaves must be a
				// store its own checker finds nothing wrong with.
				if c, ok := b.(Checker); ok {
					if err := c.Check(); err != nil {
						t.Errorf("the store this case left: %v", err)
					}
				}
			})
			c.run(env)
		})
	}
}

type env struct {
	t     *testing.T
	b     Backend
	s     Store
	clock *Clock
	ctx   context.Context
}

func (e *env) restart(torn bool) {
	e.t.Helper()
	s, err := e.b.Restart(e.s, torn)
	if err != nil {
		e.t.Fatalf("restart: %v", err)
	}
	e.s = s
}

// appendTurnLater appends a turn to h and flushes it on a goroutine of
// its own, a moment from now (while the caller waits for it), and sends
// the outcome.
func appendTurnLater(ctx context.Context, h Session) <-chan error {
	done := make(chan error, 1)
	go func() {
		time.Sleep(5 * time.Millisecond)
		if err := h.Append(ctx, OneTurn()...); err != nil {
			done <- err
			return
		}
		done <- h.Flush(ctx)
	}()
	return done
}

func (e *env) flush(h Session) {
	e.t.Helper()
	if err := h.Flush(e.ctx); err != nil {
		e.t.Fatalf("Flush: %v", err)
	}
}

// at is an event of seq with time t.
func at(seq uint64, t int64, typ, data string) event.Event {
	x := ev(seq, typ, data)
	x.Time = t
	return x
}

// wantListing checks what Stat, List and ListPage say of session id's
// title and update time.
func (e *env) wantListing(what, id, title string, updatedAt int64) {
	e.t.Helper()
	snap, err := e.s.Stat(e.ctx, id)
	if err != nil || snap.Title != title || snap.UpdatedAt != updatedAt {
		e.t.Errorf("%s: Stat: title %q, updated %d, %v; want %q, %d", what, snap.Title, snap.UpdatedAt, err, title, updatedAt)
	}
	page, _, err := e.s.ListPage(e.ctx, store.ListOptions{Prefix: id, OrderBy: store.OrderUpdated})
	if err != nil || len(page) == 0 || page[0].Title != title || page[0].UpdatedAt != updatedAt {
		e.t.Errorf("%s: ListPage: %+v, %v; want title %q, updated %d", what, page, err, title, updatedAt)
	}
}

func (e *env) create(id string) Session {
	e.t.Helper()
	h, err := e.s.Create(e.ctx, Meta(id))
	if err != nil {
		e.t.Fatalf("Create(%q): %v", id, err)
	}
	return h
}

func (e *env) open(id string, a store.Access) Session {
	e.t.Helper()
	h, err := e.s.Open(e.ctx, id, a)
	if err != nil {
		e.t.Fatalf("Open(%q, %v): %v", id, a, err)
	}
	return h
}

func (e *env) append(h Session, evs ...event.Event) {
	e.t.Helper()
	if err := h.Append(e.ctx, evs...); err != nil {
		e.t.Fatalf("Append: %v", err)
	}
}

func (e *env) read(h Session, off, limit int) []event.Event {
	e.t.Helper()
	evs, err := h.Read(e.ctx, off, limit)
	if err != nil {
		e.t.Fatalf("Read(%d, %d): %v", off, limit, err)
	}
	return evs
}

func (e *env) wantEvents(what string, want, got []event.Event) {
	e.t.Helper()
	if want == nil {
		want = []event.Event{}
	}
	if got == nil {
		e.t.Errorf("%s: nil slice, want an empty one", what)
		got = []event.Event{}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("%s mismatch (-want +got):\n%s", what, diff)
	}
}

func (e *env) wantErr(what string, err, kind error) {
	e.t.Helper()
	if !errors.Is(err, kind) {
		e.t.Errorf("%s: err = %v, want %v", what, err, kind)
	}
}

// faults returns the backend's FaultInjector; a backend without one
// skips the case.
func (e *env) faults() FaultInjector {
	fi, ok := e.b.(FaultInjector)
	if !ok {
		e.t.Skip("backend cannot inject write failures")
	}
	return fi
}

func (e *env) listed(id string) bool {
	e.t.Helper()
	snaps, err := e.s.List(e.ctx)
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	for _, s := range snaps {
		if s.Header.ID == id {
			return true
		}
	}
	return false
}

type contractCase struct {
	name string
	run  func(e *env)
}

func seqs(evs []event.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

var contractCases = []contractCase{
	{"C1/create-append-read-slices", func(e *env) {
		h := e.create("s")
		if h.Access() != store.Write || h.ID() != "s" || h.Header() != Meta("s") {
			e.t.Errorf("handle = %v %q %+v", h.Access(), h.ID(), h.Header())
		}
		e.append(h, OneTurn()...)
		e.append(h)
		all := OneTurn()
		e.wantEvents("read()", all, e.read(h, 0, -1))
		e.wantEvents("read(3)", all[3:], e.read(h, 3, -1))
		e.wantEvents("read(0,2)", all[0:2], e.read(h, 0, 2))
		e.wantEvents("read(1,3)", all[1:4], e.read(h, 1, 3))
		e.wantEvents("read(len)", nil, e.read(h, len(all), -1))
		e.wantEvents("read(len+100)", nil, e.read(h, len(all)+100, -1))
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
	}},
	{"C2/negative-offset-rejected", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		_, err := h.Read(e.ctx, -1, -1)
		e.wantErr("read(-1)", err, store.ErrInvalidArgument)
	}},
	{"C3/pending-id-twice-then-free-after-close", func(e *env) {
		h := e.create("s")
		_, err := e.s.Create(e.ctx, Meta("s"))
		e.wantErr("second create", err, store.ErrSessionExists)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		h2 := e.create("s") // the id is free again
		h2.Close()
	}},
	{"C4/concurrent-creates-one-wins", func(e *env) {
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				h, err := e.s.Create(e.ctx, Meta("s"))
				errs[i] = err
				_ = h
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else if !errors.Is(err, store.ErrSessionExists) {
				e.t.Errorf("losing create: %v, want ErrSessionExists", err)
			}
		}
		if won != 1 {
			e.t.Errorf("%d creates won, want 1", won)
		}
	}},
	{"C5/materialized-id-exists-in-fresh-instance", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		_, err := e.s.Create(e.ctx, Meta("s"))
		e.wantErr("create in fresh instance", err, store.ErrSessionExists)
	}},
	{"C6/open-absent-id", func(e *env) {
		for _, a := range []store.Access{store.Read, store.Write} {
			_, err := e.s.Open(e.ctx, "nope", a)
			e.wantErr("open "+a.String(), err, store.ErrSessionNotFound)
		}
	}},
	{"C7/creator-owns-until-close", func(e *env) {
		h := e.create("s")
		_, err := e.s.Open(e.ctx, "s", store.Write)
		e.wantErr("open(write) before append", err, store.ErrAlreadyOwned)
		e.append(h, OneTurn()...)
		_, err = e.s.Open(e.ctx, "s", store.Write)
		e.wantErr("open(write) after append", err, store.ErrAlreadyOwned)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		w := e.open("s", store.Write)
		e.append(w, Turn2()...)
		if got := seqs(e.read(w, 0, -1)); !cmp.Equal(got, []uint64{0, 1, 2, 3, 4, 5, 6, 7}) {
			e.t.Errorf("seqs %v", got)
		}
	}},
	{"C8/read-handle-is-read-only", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		r := e.open("s", store.Read)
		e.wantErr("append on read handle", r.Append(e.ctx, Turn2()...), store.ErrReadOnly)
		e.wantErr("flush on read handle", r.Flush(e.ctx), store.ErrReadOnly)
		e.wantErr("enqueue on read handle", r.Enqueue(Turn2()...), store.ErrReadOnly)
		e.wantEvents("log unchanged", OneTurn(), e.read(r, 0, -1))
	}},
	{"C9/closed-handle", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			e.t.Errorf("second close: %v", err)
		}
		_, err := h.Read(e.ctx, 0, -1)
		e.wantErr("read after close", err, store.ErrHandleClosed)
		e.wantErr("append after close", h.Append(e.ctx, Turn2()...), store.ErrHandleClosed)
		e.wantErr("flush after close", h.Flush(e.ctx), store.ErrHandleClosed)
		w := e.open("s", store.Write) // closing freed ownership
		w.Close()
	}},
	{"C10/service-flush-durable-closing-creator-not", func(e *env) {
		e.create("A")
		b := e.create("B")
		if err := b.Close(); err != nil { // B's close comes before the service flush
			e.t.Fatal(err)
		}
		if err := e.s.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		if _, err := e.s.Stat(e.ctx, "A"); err != nil {
			e.t.Errorf("A after restart: %v", err)
		}
		r := e.open("A", store.Read)
		e.wantEvents("A is empty", nil, e.read(r, 0, -1))
		_, err := e.s.Stat(e.ctx, "B")
		e.wantErr("B after restart", err, store.ErrSessionNotFound)
	}},
	{"C11/created-never-appended", func(e *env) {
		h := e.create("s")
		e.wantEvents("creator reads", nil, e.read(h, 0, -1))
		snap, err := e.s.Stat(e.ctx, "s")
		if err != nil || snap.Header != Meta("s") {
			e.t.Errorf("stat = %+v, %v", snap, err)
		}
		if !e.listed("s") {
			e.t.Error("not listed")
		}
		e.wantEvents("reader reads", nil, e.read(e.open("s", store.Read), 0, -1))
		e.restart(false)
		_, err = e.s.Stat(e.ctx, "s")
		e.wantErr("stat in fresh instance", err, store.ErrSessionNotFound)
		if e.listed("s") {
			e.t.Error("listed in fresh instance")
		}
		_, err = e.s.Open(e.ctx, "s", store.Read)
		e.wantErr("open in fresh instance", err, store.ErrSessionNotFound)
	}},
	{"C12/close-without-append-erases", func(e *env) {
		h := e.create("s")
		r := e.open("s", store.Read)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		_, err := e.s.Stat(e.ctx, "s")
		e.wantErr("stat", err, store.ErrSessionNotFound)
		if e.listed("s") {
			e.t.Error("still listed")
		}
		_, err = e.s.Open(e.ctx, "s", store.Read)
		e.wantErr("open(read)", err, store.ErrSessionNotFound)
		_, err = r.Read(e.ctx, 0, -1)
		e.wantErr("read through an earlier reader", err, store.ErrSessionNotFound)
	}},
	{"C13/flush-of-empty-session-is-durable", func(e *env) {
		h := e.create("s")
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		if !e.listed("s") {
			e.t.Error("not listed after restart")
		}
		snap, err := e.s.Stat(e.ctx, "s")
		if err != nil || snap.Header != Meta("s") || snap.EventCount != 0 {
			e.t.Errorf("stat = %+v, %v", snap, err)
		}
		e.wantEvents("read", nil, e.read(e.open("s", store.Read), 0, -1))
	}},
	{"C14/readers-see-appends", func(e *env) {
		h := e.create("s")
		early := e.open("s", store.Read)
		e.append(h, OneTurn()...)
		late := e.open("s", store.Read)
		e.wantEvents("early reader", OneTurn(), e.read(early, 0, -1))
		e.wantEvents("late reader", OneTurn(), e.read(late, 0, -1))
	}},
	{"C15/fresh-instance-continues-seqs", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		w := e.open("s", store.Write)
		e.append(w, Turn2()...)
		e.wantEvents("0-7", append(OneTurn(), Turn2()...), e.read(w, 0, -1))
	}},
	{"C16/seq-mismatch", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		err := h.Append(e.ctx, OneTurn()...)
		var se *store.SeqError
		if !errors.As(err, &se) || se.Expected != 6 || se.Index != 0 || se.Got != 0 {
			e.t.Errorf("re-append: %v, want *SeqError expected 6", err)
		}
		gap := []event.Event{ev(6, "turn/start", `{"turn":1}`), ev(8, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`)}
		err = h.Append(e.ctx, gap...)
		if !errors.As(err, &se) || se.Expected != 7 || se.Index != 1 {
			e.t.Errorf("gap: %v, want *SeqError expected 7 at index 1", err)
		}
		e.wantEvents("store stays 0-5", OneTurn(), e.read(h, 0, -1))
	}},
	{"store/older-format-write-open-migrates", func(e *env) {
		// A session stored in an older format (v2) opens for write without
		// a migration step: the write open migrates it (the reference's
		// publishes session.v3.jsonl) and the handle appends after the
		// migrated log. A backend that stores only the current format
		// refuses the older header at Create (ErrInvalidHeader) and holds
		// no such session.
		src := testgen.V2Turns("", 1)
		want, err := recovery.MigrateV2("old", src)
		if err != nil {
			e.t.Fatal(err)
		}
		hdr := Meta("old")
		hdr.Version = 2
		c, err := e.s.Create(e.ctx, hdr)
		if errors.Is(err, store.ErrInvalidHeader) {
			if _, err := e.s.Stat(e.ctx, "old"); !errors.Is(err, store.ErrSessionNotFound) {
				e.t.Errorf("Stat after a refused v2 Create: %v", err)
			}
			return
		}
		if err != nil {
			e.t.Fatalf("Create of a v2 header: %v", err)
		}
		e.append(c, src...)
		if err := c.Close(); err != nil {
			e.t.Fatal(err)
		}
		w := e.open("old", store.Write)
		if w.Len() != uint64(len(want)) || w.Header().Version != store.FormatVersion {
			e.t.Errorf("write handle on the v2 session: Len %d, version %d; want %d, %d", w.Len(), w.Header().Version, len(want), store.FormatVersion)
		}
		if s, err := e.s.Stat(e.ctx, "old"); err != nil || s.FormatStatus != store.FormatCurrent {
			e.t.Errorf("Stat after the write open: %+v, %v", s, err)
		}
		more := testgen.Events(uint64(len(want)), 2, 50)
		e.append(w, more...)
		e.flush(w)
		want = append(want, more...)
		e.wantEvents("migrated + suffix", want, e.read(w, 0, -1))
		e.restart(false)
		r := e.open("old", store.Read)
		e.wantEvents("migrated + suffix after a restart", want, e.read(r, 0, -1))
	}},
	{"store/len-counts-enqueued-and-reads-see-them", func(e *env) {
		h := e.create("s")
		if n := h.Len(); n != 0 {
			e.t.Errorf("Len of a new session: %d", n)
		}
		all := OneTurn()
		e.append(h, all[:2]...)
		if err := h.Enqueue(all[2:4]...); err != nil {
			e.t.Fatal(err)
		}
		if n := h.Len(); n != 4 {
			e.t.Errorf("Len after 2 appended and 2 enqueued: %d, want 4", n)
		}
		// A write handle reads its own enqueued events, as its appends.
		e.wantEvents("own enqueued events", all[:4], e.read(h, 0, -1))
		e.append(h, all[4:]...)
		if n := h.Len(); n != uint64(len(all)) {
			e.t.Errorf("Len after the rest appended: %d, want %d", n, len(all))
		}
		r := e.open("s", store.Read)
		if n := r.Len(); n != 0 {
			e.t.Errorf("Len of a read handle before any read: %d", n)
		}
		e.wantEvents("read handle", all, e.read(r, 0, -1))
		if n := r.Len(); n != uint64(len(all)) {
			e.t.Errorf("Len of a read handle after a read: %d, want %d", n, len(all))
		}
	}},
	{"store/inspect-shows-closers-without-the-lease", func(e *env) {
		h := e.create("s")
		open := []event.Event{
			ev(0, "turn/start", `{"turn":0}`),
			ev(1, "step/start", `{"turn":0,"step":0}`),
			ev(2, "assistant/message", `{"turn":0,"step":0,"message":{"id":"a","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"read","arguments":"{}"}]}}`),
			ev(3, "tool/call", `{"turn":0,"step":0,"callId":"c1","name":"read","arguments":"{}"}`),
		}
		e.append(h, open...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		// The write handle holds the lease: Inspect needs none.
		in, err := e.s.Inspect(e.ctx, "s")
		if err != nil {
			e.t.Fatalf("inspect beside the writer: %v", err)
		}
		e.wantEvents("inspected log", open, in.Events)
		if in.Header.ID != "s" {
			e.t.Errorf("inspected header %+v", in.Header)
		}
		var types []string
		for i, c := range in.Closers {
			types = append(types, c.Type)
			if c.Seq != uint64(4+i) {
				e.t.Errorf("closer %d at seq %d, want %d", i, c.Seq, 4+i)
			}
		}
		if want := []string{"tool/result", "step/end", "turn/end"}; !slices.Equal(types, want) {
			e.t.Errorf("closers %v, want %v", types, want)
		}
		e.wantEvents("nothing written", open, e.read(h, 0, -1))
		// The writer is live: Holder names it as a refused write open
		// does, and its turn is in progress.
		_, werr := e.s.Open(e.ctx, "s", store.Write)
		e.wantErr("write open beside the writer", werr, store.ErrAlreadyOwned)
		if in.Holder == nil {
			e.t.Errorf("inspect beside a live writer: no Holder")
		} else if o := (*store.OwnedError)(nil); errors.As(werr, &o) && (o.PID != in.Holder.PID || o.Host != in.Holder.Host) {
			e.t.Errorf("inspect's Holder %v, the refused write open's %v", in.Holder, o)
		}
		if o, ok := e.hosts(); ok {
			if in, err := o.Inspect(e.ctx, "s"); err != nil || in.Holder == nil || len(in.Closers) != 3 {
				e.t.Errorf("inspect from another host beside the writer: Holder %v, %d closers, %v; want the holder named, 3 closers", in.Holder, len(in.Closers), err)
			}
		}
		e.append(h, in.Closers...) // what a resume does
		if in, err = e.s.Inspect(e.ctx, "s"); err != nil || in.Closers != nil || len(in.Events) != 7 {
			e.t.Errorf("inspect of the closed turn: %d events, closers %v, %v", len(in.Events), in.Closers, err)
		}
		// Once the writer lets go, no one holds the session.
		e.append(h, ev(7, "turn/start", `{"turn":1}`))
		e.flush(h)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		if in, err = e.s.Inspect(e.ctx, "s"); err != nil || in.Holder != nil || len(in.Closers) == 0 {
			e.t.Errorf("inspect after the writer closed: Holder %v, %d closers, %v; want no holder, the open turn's closers", in.Holder, len(in.Closers), err)
		}
		_, err = e.s.Inspect(e.ctx, "nope")
		e.wantErr("inspect of a missing session", err, store.ErrSessionNotFound)
	}},
	{"store/fork-reads-as-the-parent-prefix", func(e *env) {
		p := e.create("p")
		e.append(p, append(OneTurn(), Turn2()...)...)
		if err := p.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		parent := e.read(p, 0, -1)
		c, err := e.s.Fork(e.ctx, "p", 6, Meta("c"))
		if err != nil {
			e.t.Fatalf("Fork: %v", err)
		}
		hdr := c.Header()
		if c.ID() != "c" || c.Access() != store.Write || !hdr.IsSeeded || hdr.ParentSession != "p" || c.InheritedEventCount() != 6 || c.Len() != 7 {
			e.t.Errorf("fork handle: id %q access %v header %+v inherited %d len %d", c.ID(), c.Access(), hdr, c.InheritedEventCount(), c.Len())
		}
		got := e.read(c, 0, -1)
		if len(got) != 7 {
			e.t.Fatalf("fork holds %d events, want 7", len(got))
		}
		e.wantEvents("inherited prefix", parent[:6], got[:6])
		if m := got[6]; m.Seq != 6 || !store.IsInheritedMarker(&m) {
			e.t.Errorf("seq 6 of the fork: %+v, want the inherited end-seed marker", m)
		}
		own := ev(7, "turn/start", `{"turn":1}`)
		e.append(c, own)
		if err := c.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		// The parent goes on alone.
		e.append(p, ev(8, "turn/start", `{"turn":2}`))
		if err := p.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		c.Close()
		p.Close()
		e.restart(false)
		st, err := e.s.Stat(e.ctx, "c")
		if err != nil || st.EventCount != 8 || st.InheritedEventCount != 6 || !st.Header.IsSeeded || st.Header.ParentSession != "p" {
			e.t.Errorf("Stat of the fork after a restart: %+v, %v", st, err)
		}
		w := e.open("c", store.Write) // its seed marker is where the rules want it
		e.wantEvents("fork after a restart", append(append(parent[:6:6], got[6]), own), e.read(w, 0, -1))
		if n := len(e.read(e.open("p", store.Read), 0, -1)); n != 9 {
			e.t.Errorf("parent holds %d events after the fork, want 9", n)
		}
		// A fork of the fork inherits both markers; the last is its cut.
		g, err := e.s.Fork(e.ctx, "c", 8, Meta("g"))
		if err != nil {
			e.t.Fatalf("Fork of a fork: %v", err)
		}
		gs := e.read(g, 0, -1)
		if len(gs) != 9 || !store.IsInheritedMarker(&gs[6]) || !store.IsInheritedMarker(&gs[8]) || g.InheritedEventCount() != 8 {
			e.t.Errorf("fork of a fork: %d events, inherited %d", len(gs), g.InheritedEventCount())
		}
		g.Close()
		if _, err := e.s.Open(e.ctx, "g", store.Write); err != nil {
			e.t.Errorf("write open of a fork of a fork: %v", err)
		}
	}},
	{"store/fork-of-an-open-turn-inspects-balanced", func(e *env) {
		p := e.create("p")
		e.append(p, OneTurn()[:3]...) // turn 0, step 0 open
		if err := p.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		c, err := e.s.Fork(e.ctx, "p", 3, Meta("c"))
		if err != nil {
			e.t.Fatalf("Fork: %v", err)
		}
		c.Close()
		in, err := e.s.Inspect(e.ctx, "c")
		if err != nil {
			e.t.Fatalf("Inspect of the fork: %v", err)
		}
		var types []string
		for _, x := range in.Closers {
			types = append(types, x.Type)
		}
		if want := []string{"step/end", "turn/end"}; !slices.Equal(types, want) || len(in.Events) != 4 || in.Closers[0].Seq != 4 {
			e.t.Errorf("fork inside a turn: %d events, closers %v, want %v from seq 4", len(in.Events), types, want)
		}
	}},
	{"store/fork-refuses-bad-requests-and-writes-nothing", func(e *env) {
		p := e.create("p")
		e.append(p, OneTurn()...)
		if err := p.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		_, err := e.s.Fork(e.ctx, "p", 7, Meta("c"))
		e.wantErr("fork past the parent's end", err, store.ErrInvalidArgument)
		var re *store.ForkRangeError
		if !errors.As(err, &re) || re.Len != 6 || re.N != 7 {
			e.t.Errorf("fork past the end: %v, want a *ForkRangeError of 7 against 6", err)
		}
		_, err = e.s.Fork(e.ctx, "nope", 0, Meta("c"))
		e.wantErr("fork of a missing session", err, store.ErrSessionNotFound)
		bad := Meta("c")
		bad.ParentSession = "other"
		_, err = e.s.Fork(e.ctx, "p", 2, bad)
		e.wantErr("fork naming another parent", err, store.ErrInvalidHeader)
		_, err = e.s.Fork(e.ctx, "p", 2, Meta("p"))
		e.wantErr("fork onto its parent's id", err, store.ErrInvalidHeader)
		if _, err := e.s.Stat(e.ctx, "c"); !errors.Is(err, store.ErrSessionNotFound) {
			e.t.Errorf("a refused fork left session c: %v", err)
		}
		x := e.create("x")
		e.append(x, OneTurn()[0])
		if err := x.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		_, err = e.s.Fork(e.ctx, "p", 2, Meta("x"))
		e.wantErr("fork onto an existing id", err, store.ErrSessionExists)
		// n = 0: nothing inherited but the marker.
		z, err := e.s.Fork(e.ctx, "p", 0, Meta("z"))
		if err != nil {
			e.t.Fatalf("fork at 0: %v", err)
		}
		if evs := e.read(z, 0, -1); len(evs) != 1 || !store.IsInheritedMarker(&evs[0]) {
			e.t.Errorf("fork at 0 holds %v", seqs(evs))
		}
	}},
	{"store/events-iterates-in-chunks", func(e *env) {
		h := e.create("s")
		var all []event.Event
		for seq := range uint64(2500) { // more than two chunks
			all = append(all, ev(seq, "user/message", fmt.Sprintf(`{"n":%d}`, seq)))
		}
		e.append(h, all...)
		r := e.open("s", store.Read)
		collect := func(from, stop int) ([]event.Event, error) {
			var out []event.Event
			for ev, err := range r.Events(e.ctx, from) {
				if err != nil {
					return out, err
				}
				out = append(out, ev)
				if len(out) == stop {
					break
				}
			}
			return out, nil
		}
		got, err := collect(0, -1)
		if err != nil {
			e.t.Fatal(err)
		}
		e.wantEvents("every event", all, got)
		got, _ = collect(2400, -1)
		e.wantEvents("from 2400", all[2400:], got)
		got, _ = collect(5, 10)
		e.wantEvents("stopped after 10", all[5:15], got)
		if got, err = collect(9999, -1); len(got) != 0 || err != nil {
			e.t.Errorf("from past the end: %d events, %v", len(got), err)
		}
		r.Close()
		_, err = collect(0, -1)
		e.wantErr("events of a closed handle", err, store.ErrHandleClosed)
	}},
	{"store/list-page-filters-and-pages", func(e *env) {
		for _, id := range []string{"b/2", "a/1", "a/3", "b/1", "a/2"} {
			m := Meta(id)
			m.Cwd = "/work/" + id[:1]
			h, err := e.s.Create(e.ctx, m)
			if err != nil {
				e.t.Fatal(err)
			}
			e.append(h, OneTurn()[:1]...)
			h.Close()
		}
		ids := func(snaps []store.Snapshot) []string {
			var out []string
			for _, s := range snaps {
				out = append(out, s.Header.ID)
			}
			return out
		}
		page, next, err := e.s.ListPage(e.ctx, store.ListOptions{Prefix: "a/", Limit: 2})
		if err != nil || !slices.Equal(ids(page), []string{"a/1", "a/2"}) || next != "a/2" {
			e.t.Errorf("first page: %v, cursor %q, %v", ids(page), next, err)
		}
		page, next, err = e.s.ListPage(e.ctx, store.ListOptions{Prefix: "a/", Limit: 2, After: next})
		if err != nil || !slices.Equal(ids(page), []string{"a/3"}) || next != "" {
			e.t.Errorf("second page: %v, cursor %q, %v", ids(page), next, err)
		}
		page, _, err = e.s.ListPage(e.ctx, store.ListOptions{Cwd: "/work/b"})
		if err != nil || !slices.Equal(ids(page), []string{"b/1", "b/2"}) {
			e.t.Errorf("by cwd: %v, %v", ids(page), err)
		}
		all, _, err := e.s.ListPage(e.ctx, store.ListOptions{})
		if list, _ := e.s.List(e.ctx); err != nil || !slices.Equal(ids(all), ids(list)) {
			e.t.Errorf("the zero options list %v, List %v (%v)", ids(all), ids(list), err)
		}
		_, _, err = e.s.ListPage(e.ctx, store.ListOptions{Limit: -1})
		e.wantErr("negative limit", err, store.ErrInvalidArgument)
	}},
	{"store/created-at-zero-means-now", func(e *env) {
		// Create with no CreatedAt stores the time of the call, not 1970;
		// an explicit one is kept as given. Bounds, not a duration: the
		// stored time lies between two readings of the clock.
		before := time.Now().UnixMilli()
		h, err := e.s.Create(e.ctx, store.Header{ID: "now"})
		after := time.Now().UnixMilli()
		if err != nil {
			e.t.Fatalf("Create with no CreatedAt: %v", err)
		}
		if got := h.Header().CreatedAt; got < before || got > after {
			e.t.Errorf("the handle's CreatedAt %d, want the time of Create in [%d, %d]", got, before, after)
		}
		e.flush(h)
		e.restart(false)
		snap, err := e.s.Stat(e.ctx, "now")
		if err != nil || snap.Header.CreatedAt < before || snap.Header.CreatedAt > after || snap.UpdatedAt != snap.Header.CreatedAt {
			e.t.Errorf("Stat after a restart: createdAt %d, updated %d, %v; want the time of Create in [%d, %d] for both", snap.Header.CreatedAt, snap.UpdatedAt, err, before, after)
		}
		e.create("given")
		if snap, err := e.s.Stat(e.ctx, "given"); err != nil || snap.Header.CreatedAt != Meta("given").CreatedAt {
			e.t.Errorf("Stat of an explicit CreatedAt: %d, %v; want %d as given", snap.Header.CreatedAt, err, Meta("given").CreatedAt)
		}
	}},
	{"store/list-title-and-updated", func(e *env) {
		h := e.create("s")
		e.wantListing("created", "s", "", 1000) // the header's CreatedAt
		e.append(h, OneTurn()...)
		e.flush(h)
		e.wantListing("one turn", "s", "", 1005)
		e.append(h, at(6, 2000, "session/title", `{"title":"First","messageSeqs":[1]}`), at(7, 2100, "turn/start", `{"turn":1}`))
		e.flush(h)
		e.wantListing("titled", "s", "First", 2100)
		e.restart(false)
		e.wantListing("after a restart", "s", "First", 2100)
		h = e.open("s", store.Write)
		// A session/title without a string title names nothing; a later
		// one replaces the title.
		e.append(h, at(8, 2200, "session/title", `{"messageSeqs":[1]}`))
		e.flush(h)
		e.wantListing("untitled title event", "s", "First", 2200)
		e.append(h, at(9, 2300, "session/title", `{"title":"Second"}`), at(10, 2400, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`))
		e.flush(h)
		e.wantListing("retitled", "s", "Second", 2400)
		// Enqueued events count once written out.
		if err := h.Enqueue(at(11, 2500, "session/title", `{"title":"Third"}`)); err != nil {
			e.t.Fatal(err)
		}
		e.flush(h)
		e.wantListing("enqueued and flushed", "s", "Third", 2500)
		h.Close()
		e.restart(false)
		e.wantListing("after a second restart", "s", "Third", 2500)
		r := e.open("s", store.Read)
		defer r.Close()
		if got := e.read(r, 0, -1); len(got) != 12 {
			e.t.Errorf("read %d events, want 12", len(got))
		}
	}},
	{"store/list-order-updated-pages", func(e *env) {
		// Last event times: a 5000, b 3000, c 5000, d none (created at
		// 1000), e 4000.
		for _, c := range []struct {
			id string
			t  int64
		}{{"a", 5000}, {"b", 3000}, {"c", 5000}, {"d", 0}, {"e", 4000}} {
			m := Meta(c.id)
			m.Cwd = "/w"
			if c.id == "e" {
				m.Cwd = "/x"
			}
			h, err := e.s.Create(e.ctx, m)
			if err != nil {
				e.t.Fatal(err)
			}
			if c.t != 0 {
				e.append(h, at(0, c.t-1, "turn/start", `{"turn":0}`), at(1, c.t, "session/title", `{"title":"title of `+c.id+`"}`))
			}
			e.flush(h)
			h.Close()
		}
		ids := func(snaps []store.Snapshot) []string {
			out := []string{}
			for _, s := range snaps {
				out = append(out, s.Header.ID)
			}
			return out
		}
		updated := store.ListOptions{OrderBy: store.OrderUpdated, Limit: 2}
		page := func(what string, opts store.ListOptions, want []string, wantNext string) string {
			e.t.Helper()
			got, next, err := e.s.ListPage(e.ctx, opts)
			if err != nil || !slices.Equal(ids(got), want) || next != wantNext {
				e.t.Errorf("%s: %v, cursor %q, %v; want %v, cursor %q", what, ids(got), next, err, want, wantNext)
			}
			return next
		}
		next := page("first page", updated, []string{"a", "c"}, "5000:c")
		updated.After = next
		next = page("second page", updated, []string{"e", "b"}, "3000:b")
		updated.After = next
		page("last page", updated, []string{"d"}, "")
		// A session updated while paging moves ahead of the cursor: the
		// later pages leave it out, a new listing shows it first.
		h := e.open("b", store.Write)
		e.append(h, at(2, 9000, "turn/end", `{"turn":0,"reason":{"kind":"completed"}}`))
		e.flush(h)
		h.Close()
		updated.After = "5000:c"
		page("second page after b's update", updated, []string{"e", "d"}, "")
		page("a new listing", store.ListOptions{OrderBy: store.OrderUpdated}, []string{"b", "a", "c", "e", "d"}, "")
		page("by cwd", store.ListOptions{OrderBy: store.OrderUpdated, Cwd: "/w", Limit: 3}, []string{"b", "a", "c"}, "5000:c")
		page("by prefix", store.ListOptions{OrderBy: store.OrderUpdated, Prefix: "d"}, []string{"d"}, "")
		all, _, err := e.s.ListPage(e.ctx, store.ListOptions{OrderBy: store.OrderUpdated})
		if err == nil && (all[0].Title != "title of b" || all[0].UpdatedAt != 9000 || all[4].Title != "" || all[4].UpdatedAt != 1000) {
			e.t.Errorf("listing: %+v", all)
		}
		_, _, err = e.s.ListPage(e.ctx, store.ListOptions{OrderBy: store.OrderUpdated, After: "c"})
		e.wantErr("an ID cursor in updated order", err, store.ErrInvalidArgument)
		_, _, err = e.s.ListPage(e.ctx, store.ListOptions{OrderBy: 7})
		e.wantErr("an unknown order", err, store.ErrInvalidArgument)
	}},
	{"C17/invalid-event-writes-nothing", func(e *env) {
		h := e.create("s")
		bad := []event.Event{ev(0, "turn/start", `{"turn":0}`), ev(1, "user/message", `[1,2]`)}
		err := h.Append(e.ctx, bad...)
		var ie *event.InvalidError
		if !errors.Is(err, store.ErrInvalidEvent) || !errors.As(err, &ie) || ie.Index != 1 {
			e.t.Errorf("append: %v, want ErrInvalidEvent naming index 1", err)
		}
		e.wantEvents("nothing stored", nil, e.read(h, 0, -1))
		e.append(h, OneTurn()...) // seq 0 still free
	}},
	{"C18/unknown-type-refused-on-append", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		refused := func(op string, seq uint64, err error) {
			e.t.Helper()
			var ue *store.UnsupportedEventError
			if !errors.Is(err, store.ErrUnsupportedEvent) || !errors.As(err, &ue) || ue.Type != "mystery/event" || ue.Seq != seq {
				e.t.Errorf("%s of an unregistered type: %v, want *UnsupportedEventError for mystery/event at seq %d", op, err, seq)
			}
		}
		// No read could return it: the whole batch is refused.
		refused("append", 7, h.Append(e.ctx, ev(6, "turn/start", `{"turn":1}`), ev(7, "mystery/event", `{}`)))
		refused("append", 6, h.Append(e.ctx, ev(6, "mystery/event", `{}`)))
		err := h.Enqueue(ev(6, "mystery/event", `{}`))
		refused("enqueue", 6, err)
		if se := (*store.SessionError)(nil); !errors.As(err, &se) || se.Op != "enqueue" {
			e.t.Errorf("enqueue's error names the operation %v, want enqueue", err)
		}
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.wantEvents("nothing stored", OneTurn(), e.read(h, 0, -1))
		e.append(h, ev(6, "turn/start", `{"turn":1}`)) // seq 6 still free
	}},
	{"C18/unknown-type-fails-closed", func(e *env) {
		// A host whose catalog knows the type writes it; a build whose
		// catalog does not must refuse to read it.
		rc, ok := e.b.(Recataloger)
		if !ok {
			e.t.Fatalf("the backend %T does not implement enginetest.Recataloger", e.b)
		}
		rc.SetCatalog(event.NewCatalog("mystery/event"))
		e.restart(false)
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.append(h, ev(6, "mystery/event", `{}`))
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		rc.SetCatalog(event.NewCatalog())
		e.restart(false)
		for try := range 2 { // the claim is released between tries
			_, err := e.s.Open(e.ctx, "s", store.Write)
			var ue *store.UnsupportedEventError
			if !errors.Is(err, store.ErrUnsupportedEvent) || !errors.As(err, &ue) || ue.Type != "mystery/event" || ue.Seq != 6 {
				e.t.Errorf("open(write) try %d: %v, want *UnsupportedEventError for mystery/event at seq 6", try, err)
			}
		}
		r := e.open("s", store.Read)
		_, err := r.Read(e.ctx, 0, -1)
		e.wantErr("first read", err, store.ErrUnsupportedEvent)
		e.wantEvents("the known prefix still reads", OneTurn()[:3], e.read(r, 0, 3))
		r.Close()
		// The store is whole: a host that knows the type reads it all
		// (the end-of-case check reads with the last open's catalog).
		rc.SetCatalog(event.NewCatalog("mystery/event"))
		e.restart(false)
	}},
	{"surface-rules/append-and-open", func(e *env) {
		sr, ok := e.b.(SurfaceRuler)
		if !ok {
			e.t.Fatalf("the backend %T does not implement enginetest.SurfaceRuler", e.b)
		}
		// Off by default: a log that breaks the rules (OneTurn's user
		// message comes before the first step/start) is stored.
		legacy := e.create("legacy")
		e.append(legacy, OneTurn()...)
		if err := legacy.Close(); err != nil {
			e.t.Fatal(err)
		}
		sr.SetSurfaceRules(true)
		e.restart(false)
		wantSurface := func(what string, err error, op string, seq uint64) {
			e.t.Helper()
			var se *recovery.SurfaceError
			var sess *store.SessionError
			if !errors.Is(err, recovery.ErrSurface) || !errors.As(err, &se) || se.Seq != seq || !errors.As(err, &sess) || sess.Op != op {
				e.t.Errorf("%s: %v, want a *SurfaceError at seq %d from %s", what, err, seq, op)
			}
		}
		_, err := e.s.Open(e.ctx, "legacy", store.Write)
		wantSurface("write open of a log that breaks the rules", err, "open", 1)
		e.read(e.open("legacy", store.Read), 0, -1) // reads are not checked

		h := e.create("s")
		e.append(h, SurfaceTurn()...)
		// A batch with a bad event stores nothing, its good events neither.
		noOp := ev(8, "user/message", `{"id":"u2","role":"user","content":[],"source":{"kind":"user"}}`)
		err = h.Append(e.ctx, ev(6, "turn/start", `{"turn":1}`), ev(7, "step/start", `{"turn":1,"step":0}`), noOp)
		wantSurface("append without surfaceOp", err, "append", 8)
		late := ev(6, "user/message", `{"id":"u2","role":"user","content":[],"source":{"kind":"user"}}`)
		late.SurfaceOp, late.SourceEventSeqs = json.RawMessage(`"append"`), []uint64{6}
		wantSurface("enqueue citing itself", h.Enqueue(late), "enqueue", 6)
		if n := h.Len(); n != 6 {
			e.t.Errorf("Len after refused batches = %d, want 6", n)
		}
		// Enqueued events count: the replace that follows them checks
		// against the stored surface and them.
		if err := h.Enqueue(ev(6, "turn/start", `{"turn":1}`), ev(7, "step/start", `{"turn":1,"step":0}`)); err != nil {
			e.t.Fatal(err)
		}
		compact := ev(8, "user/message", `{"id":"u3","role":"user","content":[],"source":{"kind":"user"}}`)
		compact.SurfaceOp, compact.SourceEventSeqs = json.RawMessage(`{"op":"replace","startSeq":3,"endSeq":3}`), []uint64{3}
		e.append(h, compact)
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.wantEvents("stored", append(SurfaceTurn(), ev(6, "turn/start", `{"turn":1}`), ev(7, "step/start", `{"turn":1,"step":0}`), compact),
			e.read(e.open("s", store.Read), 0, -1))
		// A write open feeds the checker the stored log: 3 left the surface.
		e.restart(false)
		w := e.open("s", store.Write)
		again := compact
		again.Seq = 9
		wantSurface("replace of a node no longer on the surface", w.Append(e.ctx, again), "append", 9)
		again.SurfaceOp, again.SourceEventSeqs = json.RawMessage(`{"op":"replace","startSeq":8,"endSeq":8}`), []uint64{8}
		e.append(w, again)
		if err := w.Close(); err != nil {
			e.t.Fatal(err)
		}
	}},
	{"surface-rules/fork", func(e *env) {
		// A fork's handle knows the fork's log (the parent's prefix and
		// the seed marker): a whole turn appended at Len(), whose user
		// message replaces the prefix's, keeps the rules. The checker of
		// the handle Fork returned started from seq 0 and refused it
		// ("seq is not contiguous: expected 0").
		e.b.(SurfaceRuler).SetSurfaceRules(true)
		e.restart(false)
		p := e.create("p")
		e.append(p, SurfaceTurn()...)
		for i, held := range []bool{true, false} {
			if !held {
				if err := p.Close(); err != nil {
					e.t.Fatal(err)
				}
			}
			id := fmt.Sprint("f", i)
			f, err := e.s.Fork(e.ctx, "p", 6, Meta(id))
			if err != nil {
				e.t.Fatalf("fork (parent held %v): %v", held, err)
			}
			n := f.Len()
			user := ev(n+2, "user/message", `{"id":"u2","role":"user","content":[{"type":"text","text":"again"}],"source":{"kind":"user"}}`)
			user.SurfaceOp, user.SourceEventSeqs = json.RawMessage(`{"op":"replace","startSeq":3,"endSeq":3}`), []uint64{3}
			turn := []event.Event{
				ev(n, "turn/start", `{"turn":1}`),
				ev(n+1, "step/start", `{"turn":1,"step":0}`),
				user,
				ev(n+3, "step/end", `{"turn":1,"step":0}`),
				ev(n+4, "turn/end", `{"turn":1,"reason":{"kind":"completed"}}`),
			}
			if err := f.Append(e.ctx, turn...); err != nil {
				e.t.Errorf("append of a turn to fork %s (parent held %v) at %d: %v", id, held, n, err)
			}
			bad := ev(f.Len(), "user/message", `{"id":"u3","role":"user","content":[],"source":{"kind":"user"}}`)
			bad.SurfaceOp, bad.SourceEventSeqs = json.RawMessage(`{"op":"replace","startSeq":3,"endSeq":3}`), []uint64{3}
			if err := f.Append(e.ctx, bad); !errors.Is(err, recovery.ErrSurface) {
				e.t.Errorf("fork %s: replace of a node no longer on the surface: %v, want ErrSurface", id, err)
			}
			if err := f.Close(); err != nil {
				e.t.Fatal(err)
			}
		}
	}},
	{"C18/ignorable-unknown-is-kept", func(e *env) {
		h := e.create("s")
		x := ev(0, "mystery/event", `{"v":1}`)
		x.Ignorable = true
		e.append(h, x)
		h.Close()
		w := e.open("s", store.Write)
		e.wantEvents("ignorable unknown", []event.Event{x}, e.read(w, 0, -1))
	}},
	{"store/seed-marker-rules", func(e *env) {
		e.expectProblem("bad seed marker")
		seeded := Meta("child")
		seeded.IsSeeded = true
		h, err := e.s.Create(e.ctx, seeded, store.Inherited(2))
		if err != nil {
			e.t.Fatal(err)
		}
		e.append(h, OneTurn()[:3]...) // seq 2 should have been the marker
		h.Close()
		_, err = e.s.Open(e.ctx, "child", store.Write)
		e.wantErr("seeded without marker", err, store.ErrSeed)
		u := e.create("plain")
		e.append(u, ev(0, "session/end-seed", `{"inherited":true}`))
		u.Close()
		_, err = e.s.Open(e.ctx, "plain", store.Write)
		e.wantErr("unseeded with marker", err, store.ErrSeed)
		// Reads apply the same rules to what they return.
		for _, id := range []string{"child", "plain"} {
			r := e.open(id, store.Read)
			_, err = r.Read(e.ctx, 0, -1)
			e.wantErr("read of "+id, err, store.ErrSeed)
			r.Close()
		}
		m := e.create("boundary")
		e.append(m, ev(0, "session/end-seed", `{}`)) // an untagged marker is a lifecycle boundary
		m.Close()
		e.open("boundary", store.Write).Close()
	}},
	{"C19/torn-tail", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(true)
		e.wantEvents("reader", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
		w := e.open("s", store.Write)
		e.append(w, Turn2()...)
		if err := w.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		e.wantEvents("next instance", append(OneTurn(), Turn2()...), e.read(e.open("s", store.Read), 0, -1))
	}},
	{"C20/revisions", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		s1, err1 := e.s.Stat(e.ctx, "s")
		s2, err2 := e.s.Stat(e.ctx, "s")
		if err1 != nil || err2 != nil || s1.Revision != s2.Revision || s1.Revision == "" {
			e.t.Fatalf("stats %+v %v, %+v %v", s1, err1, s2, err2)
		}
		find := func() store.Snapshot {
			snaps, _ := e.s.List(e.ctx)
			for _, s := range snaps {
				if s.Header.ID == "s" {
					return s
				}
			}
			return store.Snapshot{}
		}
		if find().Revision != s1.Revision {
			e.t.Error("list revision differs from stat")
		}
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		if s3, _ := e.s.Stat(e.ctx, "s"); s3.Revision != s1.Revision {
			e.t.Error("flush changed the revision")
		}
		e.append(h, Turn2()...)
		s4, _ := e.s.Stat(e.ctx, "s")
		if s4.Revision == s1.Revision || s4.EventCount != 8 {
			e.t.Errorf("after append: %+v", s4)
		}
		if find().Revision != s4.Revision {
			e.t.Error("list revision differs from stat after append")
		}
		if s4.Header != h.Header() {
			e.t.Error("snapshot header differs from handle header")
		}
		h.Close()
		w := e.open("s", store.Write) // a change of owner keeps the revision
		if s5, _ := e.s.Stat(e.ctx, "s"); s5.Revision != s4.Revision {
			e.t.Error("a new owner changed the revision")
		}
		w.Close()
		_, err := e.s.Stat(e.ctx, "absent")
		e.wantErr("stat absent", err, store.ErrSessionNotFound)
	}},
	{"L1/window-200ms", func(e *env) {
		h := e.create("s")
		r := e.open("s", store.Read)
		if err := h.Enqueue(OneTurn()[:2]...); err != nil {
			e.t.Fatal(err)
		}
		e.clock.Advance(handle.DefaultWindow - time.Millisecond)
		e.wantEvents("at 199ms", nil, e.read(r, 0, -1))
		e.clock.Advance(time.Millisecond)
		e.wantEvents("at 200ms", OneTurn()[:2], e.read(r, 0, -1))
	}},
	{"L1/window-durable-without-flush", func(e *env) {
		// Events handed to Append or Enqueue and never flushed are durable
		// once their window (WriteBehindWindow) has ended: a power cut
		// after it keeps them. The first event after a window ended opens
		// the next.
		h := e.create("s")
		e.append(h, OneTurn()[:1]...)
		if err := h.Enqueue(OneTurn()[1:]...); err != nil {
			e.t.Fatal(err)
		}
		e.clock.Advance(handle.DefaultWindow)
		e.append(h, Turn2()...)
		e.clock.Advance(handle.DefaultWindow)
		e.restart(false)
		r := e.open("s", store.Read)
		e.wantEvents("after a power cut past two windows", append(OneTurn(), Turn2()...), e.read(r, 0, -1))
	}},
	{"L3/background-failure-is-never-acked", func(e *env) {
		// A failed write is never acknowledged (the local engine undoes a
		// write that failed before its fsync, and poisons on an fsync
		// error), and after a restart what was never acknowledged may be
		// gone, and nothing is duplicated.
		fi := e.faults()
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		fi.FailWrites(true)
		if err := h.Enqueue(Turn2()...); err != nil {
			e.t.Fatal(err)
		}
		e.clock.Advance(handle.DefaultWindow)
		if err := e.s.Flush(e.ctx); err == nil {
			e.t.Fatal("service flush succeeded after a failed background write")
		}
		if err := h.Flush(e.ctx); err == nil {
			e.t.Fatal("second flush succeeded: a failed write must never be acknowledged")
		}
		// A read does not fail because a write did.
		if _, err := h.Read(e.ctx, 0, -1); err != nil {
			e.t.Errorf("read through the handle whose write failed: %v", err)
		}
		fi.FailWrites(false)
		e.restart(false)
		got := e.read(e.open("s", store.Read), 0, -1)
		if len(got) != 6 && len(got) != 8 {
			e.t.Fatalf("after restart %d events, want the flushed 6 (or 8 if the failed write reached the disk)", len(got))
		}
		e.wantEvents("prefix", append(OneTurn(), Turn2()...)[:len(got)], got)
	}},
	{"store/close-reports-its-failure-again", func(e *env) {
		// Close is idempotent: a second call returns the first call's
		// error (on every backend).
		fi := e.faults()
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		fi.FailWrites(true)
		e.append(h, Turn2()...)
		first := h.Close()
		if first == nil {
			e.t.Fatal("close succeeded although its flush failed")
		}
		if second := h.Close(); second == nil || second.Error() != first.Error() {
			e.t.Fatalf("second close = %v, want the first's error %v", second, first)
		}
		fi.FailWrites(false)
		e.restart(false)
		got := e.read(e.open("s", store.Read), 0, -1)
		e.wantEvents("after restart", append(OneTurn(), Turn2()...)[:len(got)], got)
	}},
	{"store/close-after-ownership-lost-reports-dropped-events", func(e *env) {
		// A write handle that lost its ownership (here: its store closed,
		// and the store's flush of the handle failed) cannot write what it
		// still holds: its Close says so, naming the session and how many
		// events it drops, rather than returning nil.
		fi := e.faults()
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.flush(h)
		fi.FailWrites(true)
		e.append(h, Turn2()[:1]...)
		if err := h.Enqueue(Turn2()[1:]...); err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Close(); err == nil {
			e.t.Fatal("the store's close succeeded although its flush failed")
		}
		fi.FailWrites(false)
		err := h.Close()
		var se *store.SessionError
		var de *store.DroppedError
		switch {
		case !errors.Is(err, store.ErrOwnershipLost):
			e.t.Fatalf("close of the handle: %v, want ErrOwnershipLost", err)
		case !errors.As(err, &se) || se.ID != "s" || se.Op != "close":
			e.t.Errorf("close of the handle: %v, want a *SessionError of session s, op close", err)
		case !errors.As(err, &de) || de.Dropped != 2:
			e.t.Errorf("close of the handle: %v, want a *DroppedError of 2 events", err)
		}
		e.t.Logf("reported: %v", err)
		if second := h.Close(); second == nil || second.Error() != err.Error() {
			e.t.Errorf("second close = %v, want the first's error", second)
		}
		e.restart(false)
		e.wantEvents("after restart", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
	}},
	{"store/close-after-store-close-drops-nothing", func(e *env) {
		// A store's Close makes its handles' events durable: their Close
		// then has nothing to drop, and returns nil.
		h := e.create("s")
		e.append(h, OneTurn()[:3]...)
		if err := h.Enqueue(OneTurn()[3:]...); err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Close(); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			e.t.Errorf("close of a handle whose store closed cleanly: %v", err)
		}
		e.restart(false)
		e.wantEvents("after restart", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
	}},
	{"L5/close-drains-buffer", func(e *env) {
		h := e.create("s")
		if err := h.Enqueue(OneTurn()...); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.wantEvents("after close", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
		e.wantErr("enqueue after close", h.Enqueue(Turn2()...), store.ErrHandleClosed)
	}},
	{"L7/store-close-drains-buffer", func(e *env) {
		h := e.create("s")
		if err := h.Enqueue(OneTurn()...); err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Close(); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		e.wantEvents("remount", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
	}},
	{"store/enqueue-keeps-copies", func(e *env) {
		// The caller may reuse its events' bytes once Enqueue returns.
		h := e.create("s")
		evs := OneTurn()
		for i := range evs {
			evs[i].Data = append([]byte(nil), evs[i].Data...)
		}
		if err := h.Enqueue(evs...); err != nil {
			e.t.Fatal(err)
		}
		for i := range evs {
			for j := range evs[i].Data {
				evs[i].Data[j] = ' '
			}
		}
		e.clock.Advance(handle.DefaultWindow)
		e.wantEvents("after the window", OneTurn(), e.read(h, 0, -1))
	}},
	{"L11/second-write-handle-after-close", func(e *env) {
		h := e.create("s")
		if err := h.Enqueue(OneTurn()...); err != nil {
			e.t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			e.t.Fatal(err)
		}
		w := e.open("s", store.Write)
		if err := w.Enqueue(Turn2()...); err != nil {
			e.t.Fatal(err)
		}
		e.clock.Advance(handle.DefaultWindow)
		e.wantEvents("both batches", append(OneTurn(), Turn2()...), e.read(w, 0, -1))
	}},
	{"store/closed", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		if err := e.s.Close(); err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Close(); err != nil {
			e.t.Errorf("second close: %v", err)
		}
		e.wantErr("append through a handle of a closed store", h.Append(e.ctx, Turn2()...), store.ErrOwnershipLost)
		_, err := e.s.Stat(e.ctx, "s")
		e.wantErr("stat on a closed store", err, store.ErrClosed)
		e.restart(false)
		e.wantEvents("close made appends durable", OneTurn(), e.read(e.open("s", store.Read), 0, -1))
	}},
	{"store/wait-for-new-events", func(e *env) {
		h := e.create("s")
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		r := e.open("s", store.Read)
		done := appendTurnLater(e.ctx, h)
		n, err := r.Wait(e.ctx, 0)
		if err != nil || n == 0 {
			e.t.Fatalf("wait for the first event: %d, %v", n, err)
		}
		if err := <-done; err != nil {
			e.t.Fatal(err)
		}
		if n, err := r.Wait(e.ctx, 5); n != 6 || err != nil {
			e.t.Fatalf("wait for what is there: %d, %v; want 6", n, err)
		}
		ctx, cancel := context.WithTimeout(e.ctx, 20*time.Millisecond)
		defer cancel()
		if _, err := r.Wait(ctx, 6); !errors.Is(err, context.DeadlineExceeded) {
			e.t.Errorf("wait past the end: %v, want the context's deadline", err)
		}
		if err := r.Close(); err != nil {
			e.t.Fatal(err)
		}
		_, err = r.Wait(e.ctx, 0)
		e.wantErr("wait on a closed handle", err, store.ErrHandleClosed)
	}},
	{"store/seeded-create-rules", func(e *env) {
		seeded := Meta("child")
		seeded.IsSeeded, seeded.ParentSession = true, "parent"
		_, err := e.s.Create(e.ctx, seeded)
		e.wantErr("seeded without count", err, store.ErrInvalidHeader)
		_, err = e.s.Create(e.ctx, Meta("u"), store.Inherited(1))
		e.wantErr("unseeded with count 1", err, store.ErrInvalidHeader)
		h, err := e.s.Create(e.ctx, seeded, store.Inherited(3))
		if err != nil {
			e.t.Fatal(err)
		}
		if h.InheritedEventCount() != 3 {
			e.t.Errorf("InheritedEventCount = %d", h.InheritedEventCount())
		}
		evs := OneTurn()[:3]
		evs = append(evs, ev(3, "session/end-seed", `{"inherited":true}`))
		e.append(h, evs...)
		if err := h.Flush(e.ctx); err != nil {
			e.t.Fatal(err)
		}
		e.restart(false)
		snap, err := e.s.Stat(e.ctx, "child")
		if err != nil || snap.InheritedEventCount != 3 || !snap.Header.IsSeeded || snap.Header.ParentSession != "parent" {
			e.t.Errorf("stat after restart = %+v, %v", snap, err)
		}
	}},
}

// Checker is implemented by backends that can check the storage a case
// left (after its store is closed): Run calls it when each case ends.
type Checker interface {
	Check() error
}

// ProblemExpecter is implemented by backends whose end-of-case store
// check reads every session: a case that leaves a store such a check
// must find fault with (sessions that break a rule reads enforce) says
// what the check's report must contain.
type ProblemExpecter interface {
	ExpectProblem(what string)
}

// expectProblem tells the backend's end-of-case check, if it has one that
// reads every session, what the store this case leaves must be reported
// for.
func (e *env) expectProblem(what string) {
	if pe, ok := e.b.(ProblemExpecter); ok {
		pe.ExpectProblem(what)
	}
}

// FaultInjector is implemented by backends that can make their storage
// fail writes, for the failure cases.
type FaultInjector interface {
	FailWrites(on bool)
}
