package enginetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
)

// The change feed's contract cases (store.Store.Changes). Each checks the
// feed against what reads show: a consumer that applies every change to
// a model of the store (feedModel) holds exactly the sessions List
// returns, each with the events a read returns.

// feedModel is what a consumer of the change feed builds: each live
// session's events.
type feedModel map[string][]event.Event

// apply applies c, or says why it cannot follow what came before.
func (m feedModel) apply(c store.Change) error {
	switch c.Kind {
	case store.ChangeCreate:
		if _, ok := m[c.Session]; ok {
			return fmt.Errorf("create of %q, which exists", c.Session)
		}
		if c.Header == nil || c.Header.ID != c.Session {
			return fmt.Errorf("create of %q with header %+v", c.Session, c.Header)
		}
		m[c.Session] = nil
	case store.ChangeFork:
		if _, ok := m[c.Session]; ok {
			return fmt.Errorf("fork %q, which exists", c.Session)
		}
		p, ok := m[c.Parent]
		if !ok || uint64(len(p)) < c.N {
			return fmt.Errorf("fork %q of %q at %d: the parent holds %d events (exists: %v)", c.Session, c.Parent, c.N, len(p), ok)
		}
		m[c.Session] = slices.Clone(p[:c.N])
	case store.ChangeAppend:
		evs, ok := m[c.Session]
		if !ok {
			return fmt.Errorf("append to %q, which does not exist", c.Session)
		}
		if len(c.Events) == 0 || c.Seq != uint64(len(evs)) {
			return fmt.Errorf("append of %d events at seq %d to %q, which holds %d", len(c.Events), c.Seq, c.Session, len(evs))
		}
		for i, ev := range c.Events {
			if ev.Seq != c.Seq+uint64(i) {
				return fmt.Errorf("append to %q: event %d has seq %d, want %d", c.Session, i, ev.Seq, c.Seq+uint64(i))
			}
		}
		m[c.Session] = append(evs, c.Events...)
	case store.ChangeDelete:
		// (A backend whose delete purges the session's earlier changes,
		// jetstream, may show the delete of a session whose create a
		// consumer behind never got.)
		delete(m, c.Session)
	default:
		return fmt.Errorf("change of kind %v", c.Kind)
	}
	return nil
}

// changes reads s's feed from cursor from to its end.
func changes(ctx context.Context, s Store, from store.Cursor) ([]store.Change, error) {
	var out []store.Change
	for c, err := range s.Changes(ctx, from) {
		if err != nil {
			return out, err
		}
		if c.Cursor == "" {
			return out, fmt.Errorf("change %d (%v of %q) has no cursor", len(out), c.Kind, c.Session)
		}
		out = append(out, c)
	}
	return out, nil
}

// wantFeedMatchesReads applies cs to m and checks the result against
// what s's reads show.
func wantFeedMatchesReads(t *testing.T, ctx context.Context, s Store, m feedModel, cs []store.Change) {
	t.Helper()
	for i, c := range cs {
		if err := m.apply(c); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != len(m) {
		ids := []string{}
		for _, sn := range list {
			ids = append(ids, sn.Header.ID)
		}
		t.Fatalf("the store lists %v, the feed made %d sessions", ids, len(m))
	}
	for _, sn := range list {
		id := sn.Header.ID
		want, ok := m[id]
		if !ok {
			t.Fatalf("session %q is listed, the feed never made it (or deleted it)", id)
		}
		h, err := s.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("session %q: a read gives %d events, the feed %d", id, len(got), len(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq || got[i].Type != want[i].Type || string(got[i].Data) != string(want[i].Data) || got[i].Time != want[i].Time {
				t.Fatalf("session %q, event %d: read %+v, feed %+v", id, i, got[i], want[i])
			}
		}
	}
}

// kinds is the changes as "kind session seq" lines.
func kinds(cs []store.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%v %s %d+%d", c.Kind, c.Session, c.Seq, len(c.Events)))
	}
	return out
}

var changesCases = []contractCase{
	{"feed/every-change-in-order-and-resumable-from-each", func(e *env) {
		a := e.create("a")
		e.append(a, OneTurn()...)
		e.flush(a)
		b := e.create("b")
		e.append(b, OneTurn()...)
		e.flush(b)
		e.append(a, Turn2()...)
		e.flush(a)
		c, err := e.s.Fork(e.ctx, "a", 6, Meta("c"))
		if err != nil {
			e.t.Fatal(err)
		}
		e.append(c, ev(7, "turn/start", `{"turn":1}`))
		e.flush(c)
		g, err := e.s.Fork(e.ctx, "c", 8, Meta("g")) // a fork of a fork
		if err != nil {
			e.t.Fatal(err)
		}
		g.Close()
		b.Close()
		if err := e.s.Delete(e.ctx, "b"); err != nil {
			e.t.Fatal(err)
		}
		all, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, feedModel{}, all)
		var seen []string
		for _, c := range all {
			// (b's create may be gone with b: see feedModel.apply.)
			if c.Kind != store.ChangeAppend && (c.Session != "b" || c.Kind == store.ChangeDelete) {
				seen = append(seen, fmt.Sprintf("%v %s", c.Kind, c.Session))
			}
		}
		want := []string{"create a", "fork c", "fork g", "delete b"}
		if !slices.Equal(seen, want) {
			e.t.Errorf("creates, forks and deletes: %v, want %v", seen, want)
		}
		for _, c := range all {
			if c.Kind == store.ChangeFork && (c.Session == "c" && (c.Parent != "a" || c.N != 6) || c.Session == "g" && (c.Parent != "c" || c.N != 8)) {
				e.t.Errorf("fork %q: parent %q n %d", c.Session, c.Parent, c.N)
			}
		}
		// From each change's cursor, the feed goes on with the next.
		for i, c := range all {
			rest, err := changes(e.ctx, e.s, c.Cursor)
			if err != nil {
				e.t.Fatalf("from the cursor of change %d: %v", i, err)
			}
			if got, want := kinds(rest), kinds(all[i+1:]); !slices.Equal(got, want) {
				e.t.Fatalf("from the cursor of change %d: %v, want %v", i, got, want)
			}
		}
		// The cursors survive a restart.
		last := all[len(all)-1].Cursor
		e.restart(false)
		h := e.open("a", store.Write)
		e.append(h, ev(8, "turn/start", `{"turn":2}`))
		e.flush(h)
		rest, err := changes(e.ctx, e.s, last)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := kinds(rest); !slices.Equal(got, []string{"append a 8+1"}) {
			e.t.Errorf("after a restart, from the last cursor: %v", got)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, feedModel{}, append(all, rest...))
	}},
	{"feed/only-durable-events", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.flush(h)
		before, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		if err := h.Enqueue(Turn2()...); err != nil {
			e.t.Fatal(err)
		}
		rest, err := changes(e.ctx, e.s, before[len(before)-1].Cursor)
		if err != nil || len(rest) != 0 {
			e.t.Fatalf("before the flush: %v, %v; want nothing", kinds(rest), err)
		}
		e.flush(h)
		rest, err = changes(e.ctx, e.s, before[len(before)-1].Cursor)
		if err != nil || !slices.Equal(kinds(rest), []string{"append s 6+2"}) {
			e.t.Fatalf("after the flush: %v, %v", kinds(rest), err)
		}
	}},
	{"feed/delete-while-a-consumer-is-behind", func(e *env) {
		s := e.create("s")
		e.append(s, OneTurn()...)
		e.flush(s)
		seen, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		m := feedModel{}
		wantFeedMatchesReads(e.t, e.ctx, e.s, m, seen)
		s.Close()
		if err := e.s.Delete(e.ctx, "s"); err != nil {
			e.t.Fatal(err)
		}
		t := e.create("t")
		e.append(t, OneTurn()...)
		e.flush(t)
		t.Close()
		s2 := e.create("s") // the ID again: a new incarnation
		e.append(s2, OneTurn()[:2]...)
		e.flush(s2)
		s2.Close()
		cur := seen[len(seen)-1].Cursor
		rest, err := changes(e.ctx, e.s, cur)
		if err != nil {
			e.t.Fatal(err)
		}
		if got := kinds(rest); len(got) == 0 || got[0] != "delete s 0+0" {
			e.t.Errorf("behind a delete: %v, want the delete first", got)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, maps.Clone(m), rest)
		db := DB(e.s)
		if db == nil {
			return
		}
		// A compaction that purges the deleted incarnation, whose create
		// the consumer saw and whose delete it did not: the feed cannot
		// show that delete any more, and says so (never a feed without it).
		if _, err := db.Compact(e.ctx, engine.CompactOptions{Roll: true, LiveRatio: 1}); err != nil {
			e.t.Fatal(err)
		}
		_, err = changes(e.ctx, e.s, cur)
		if !errors.Is(err, store.ErrCursorExpired) {
			e.t.Fatalf("from a cursor before a delete that compaction purged: %v, want ErrCursorExpired", err)
		}
		all, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, feedModel{}, all)
	}},
	{"feed/compaction-while-a-consumer-is-behind", func(e *env) {
		keep := e.create("keep")
		e.append(keep, OneTurn()...)
		e.flush(keep)
		seen, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		m := feedModel{}
		wantFeedMatchesReads(e.t, e.ctx, e.s, m, seen)
		gone := e.create("gone") // created and deleted behind the consumer
		e.append(gone, OneTurn()...)
		e.flush(gone)
		gone.Close()
		if err := e.s.Delete(e.ctx, "gone"); err != nil {
			e.t.Fatal(err)
		}
		e.append(keep, Turn2()...)
		e.flush(keep)
		if db := DB(e.s); db != nil {
			rep, err := db.Compact(e.ctx, engine.CompactOptions{Roll: true, LiveRatio: 1})
			if err != nil {
				e.t.Fatal(err)
			}
			if len(rep.Rewritten) == 0 {
				e.t.Fatalf("compaction rewrote nothing: %+v", rep)
			}
		}
		e.append(keep, ev(8, "turn/start", `{"turn":2}`))
		e.flush(keep)
		rest, err := changes(e.ctx, e.s, seen[len(seen)-1].Cursor)
		if err != nil {
			e.t.Fatalf("after a compaction: %v", err)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, m, rest)
		if got := kinds(rest); len(got) == 0 || got[len(got)-1] != "append keep 8+1" {
			e.t.Errorf("after a compaction: %v, want keep's appends last", got)
		}
	}},
	{"feed/compaction-purges-a-delete-a-consumer-has-not-seen", func(e *env) {
		// The consumer saw the create of "s", not its delete; compaction
		// purges s with its tombstone, neither in the segment of the
		// frame the consumer's cursor names (a header's segment, and one
		// between the header's and the tombstone's). The consumer must
		// get the delete (or ErrCursorExpired), never keep s.
		db := DB(e.s)
		if db == nil {
			return // (a backend without compaction)
		}
		roll := func() {
			if _, err := db.Compact(e.ctx, engine.CompactOptions{Roll: true, LiveRatio: -1}); err != nil {
				e.t.Fatal(err)
			}
		}
		s := e.create("s")
		e.append(s, OneTurn()...)
		e.flush(s)
		s.Close()
		k := e.create("k")
		e.append(k, OneTurn()...)
		e.flush(k)
		inHeaderSeg, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		roll()
		e.append(k, Turn2()...)
		e.flush(k)
		inMiddleSeg, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		roll()
		if err := e.s.Delete(e.ctx, "s"); err != nil {
			e.t.Fatal(err)
		}
		e.append(k, ev(8, "turn/start", `{"turn":2}`))
		e.flush(k)
		k.Close()
		s2 := e.create("s") // the ID again: a new incarnation, after the delete
		e.append(s2, OneTurn()[:2]...)
		e.flush(s2)
		s2.Close()
		rep, err := db.Compact(e.ctx, engine.CompactOptions{Roll: true, LiveRatio: 1})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(rep.Rewritten)+len(rep.Dropped) < 2 {
			e.t.Fatalf("compaction rewrote %v and dropped %v: the header's and the tombstone's segments must both change", rep.Rewritten, rep.Dropped)
		}
		for name, seen := range map[string][]store.Change{"header's segment": inHeaderSeg, "middle segment": inMiddleSeg} {
			m := feedModel{}
			for _, c := range seen {
				if err := m.apply(c); err != nil {
					e.t.Fatalf("%s: %v", name, err)
				}
			}
			cur := seen[len(seen)-1].Cursor
			rest, err := changes(e.ctx, e.s, cur)
			if errors.Is(err, store.ErrCursorExpired) {
				continue // the consumer rebuilds: correct
			}
			if err != nil {
				e.t.Fatalf("%s: %v", name, err)
			}
			got := kinds(rest)
			if len(got) == 0 || got[0] != "delete s 0+0" {
				e.t.Fatalf("%s: from a cursor between the create and the purged delete of s: %v, want the delete first", name, got)
			}
			wantFeedMatchesReads(e.t, e.ctx, e.s, maps.Clone(m), rest)
			// Resumed from the delete's own cursor, the consumer (which
			// applied it) ends as reads show too.
			m2 := maps.Clone(m)
			delete(m2, "s")
			again, err := changes(e.ctx, e.s, rest[0].Cursor)
			if err != nil {
				e.t.Fatalf("%s: from the delete's cursor: %v", name, err)
			}
			wantFeedMatchesReads(e.t, e.ctx, e.s, m2, again)
		}
	}},
	{"feed/follow-wakes-on-a-flush", func(e *env) {
		h := e.create("s")
		e.flush(h)
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		done := appendTurnLater(e.ctx, h)
		var got []store.Change
		var ferr error
		for c, err := range e.s.Changes(ctx, "", store.Follow()) {
			if err != nil {
				ferr = err
				break
			}
			got = append(got, c)
			if c.Kind == store.ChangeAppend && c.Seq+uint64(len(c.Events)) == 6 {
				cancel()
			}
		}
		if err := <-done; err != nil {
			e.t.Fatal(err)
		}
		if !errors.Is(ferr, context.Canceled) {
			e.t.Errorf("a followed feed ended with %v, want the context's cancellation", ferr)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, feedModel{}, got)
	}},
	{"feed/several-hosts-and-one-that-crashed-mid-turn", func(e *env) {
		others := []Store{e.otherHost(), e.otherHost()}
		writers := append([]Store{e.s}, others...)
		var hs []Session
		for i := range 2 {
			for w, st := range writers {
				h, err := st.Create(e.ctx, Meta(fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					e.t.Fatal(err)
				}
				hs = append(hs, h)
			}
		}
		for _, turn := range [][]event.Event{OneTurn(), Turn2()} {
			for _, h := range hs {
				e.append(h, turn...)
				e.flush(h)
			}
		}
		d := e.create("dying")
		e.append(d, OneTurn()...)
		e.flush(d)
		e.append(d, Turn2()[:1]...) // a turn begun, never flushed
		e.restart(false)            // the host dies
		all, err := changes(e.ctx, e.s, "")
		if err != nil {
			e.t.Fatal(err)
		}
		wantFeedMatchesReads(e.t, e.ctx, e.s, feedModel{}, all)
		for _, o := range others {
			there, err := changes(e.ctx, o, "")
			if err != nil {
				e.t.Fatal(err)
			}
			if got, want := kinds(there), kinds(all); !slices.Equal(got, want) {
				e.t.Fatalf("another host reads %v, this one %v", got, want)
			}
		}
	}},
	{"feed/bad-cursors", func(e *env) {
		h := e.create("s")
		e.append(h, OneTurn()...)
		e.flush(h)
		for _, c := range []store.Cursor{"nonsense", "e1-1-2", "j1-x", "e1-zz-0-0-40-0-0-0-0-0", "-", "e1-1-1-1-41-0-0-0-0-0"} {
			_, err := changes(e.ctx, e.s, c)
			var ce *store.CursorError
			if !errors.Is(err, store.ErrInvalidCursor) || !errors.As(err, &ce) || ce.Cursor != c {
				e.t.Errorf("from cursor %q: %v, want a *CursorError of ErrInvalidCursor", c, err)
			}
		}
		if got := e.read(h, 0, -1); len(got) != 6 {
			e.t.Errorf("the session holds %d events after bad cursors, want 6", len(got))
		}
	}},
}

// runChangesAcrossProcesses runs the feed's cases whose writers are other
// OS processes (peers, see RunAcrossProcesses).
func runChangesAcrossProcesses(t *testing.T, open func(t *testing.T, dir string) Store) {
	ctx := context.Background()
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("feed/several-writer-processes", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		t.Cleanup(func() { s.Close() })
		writers := []Store{s, StartPeer(t, dir), StartPeer(t, dir)}
		var hs []Session
		for i := range 3 {
			for w, st := range writers {
				h, err := st.Create(ctx, Meta(fmt.Sprintf("w%d-%d", w, i)))
				must(t, err)
				hs = append(hs, h)
			}
		}
		for _, turn := range [][]event.Event{OneTurn(), Turn2()} {
			for _, h := range hs {
				must(t, h.Append(ctx, turn...))
				must(t, h.Flush(ctx))
			}
		}
		must(t, hs[1].Close())
		must(t, writers[1].Delete(ctx, "w1-0"))
		here, err := changes(ctx, s, "")
		must(t, err)
		wantFeedMatchesReads(t, ctx, s, feedModel{}, here)
		if len(here) != 9*3+1 {
			t.Errorf("%d changes, want %d (9 creates, 18 appends, a delete)", len(here), 9*3+1)
		}
		// Every process reads the same feed, with the same cursors.
		for _, p := range writers[1:] {
			there, err := changes(ctx, p, "")
			must(t, err)
			if len(there) != len(here) {
				t.Fatalf("another process reads %d changes, this one %d", len(there), len(here))
			}
			for i := range there {
				if there[i].Cursor != here[i].Cursor || there[i].Kind != here[i].Kind || there[i].Session != here[i].Session {
					t.Fatalf("change %d: %v %q %s in another process, %v %q %s here", i, there[i].Kind, there[i].Session, there[i].Cursor, here[i].Kind, here[i].Session, here[i].Cursor)
				}
			}
		}
	})
	t.Run("feed/sigkill-of-a-writer-mid-turn", func(t *testing.T) {
		dir := t.TempDir()
		s := open(t, dir)
		t.Cleanup(func() { s.Close() })
		// A consumer follows from the start, in this process.
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		followed := make(chan store.Change, 64)
		go func() {
			defer close(followed)
			for c, err := range s.Changes(fctx, "", store.Follow()) {
				if err != nil {
					return
				}
				followed <- c
			}
		}()
		p := StartPeer(t, dir)
		w, err := p.Create(ctx, Meta("w"))
		must(t, err)
		must(t, w.Append(ctx, OneTurn()...))
		must(t, w.Flush(ctx))
		must(t, w.Append(ctx, Turn2()[:1]...)) // a turn begun, never flushed
		must(t, p.Kill())
		all, err := changes(ctx, s, "")
		must(t, err)
		wantFeedMatchesReads(t, ctx, s, feedModel{}, all)
		// The one who takes it over continues the feed.
		h, closers, err := s.Resume(ctx, "w")
		must(t, err)
		must(t, h.Close())
		rest, err := changes(ctx, s, all[len(all)-1].Cursor)
		must(t, err)
		if len(closers) > 0 && len(rest) != 1 {
			t.Errorf("after a resume that wrote %d closers: %v", len(closers), kinds(rest))
		}
		wantFeedMatchesReads(t, ctx, s, feedModel{}, append(all, rest...))
		// The follower saw the same, in the same order.
		want := kinds(append(all, rest...))
		var got []store.Change
		deadline := time.After(time.Minute)
		for len(got) < len(want) {
			select {
			case c, ok := <-followed:
				if !ok {
					t.Fatalf("the follower ended after %v", kinds(got))
				}
				got = append(got, c)
			case <-deadline:
				t.Fatalf("the follower saw %v in a minute, want %v", kinds(got), want)
			}
		}
		cancel()
		if !slices.Equal(kinds(got), want) {
			t.Errorf("a follower saw %v, want %v", kinds(got), want)
		}
		for c := range followed {
			t.Errorf("the follower saw more: %v %q", c.Kind, c.Session)
		}
	})
}
