package enginetest

import (
	"context"
	"slices"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/store"
)

// listedIDs is every session s lists, in ID order.
func (e *env) listedIDs() []string {
	e.t.Helper()
	snaps, err := e.s.List(e.ctx)
	if err != nil {
		e.t.Fatalf("List: %v", err)
	}
	ids := []string{}
	for _, s := range snaps {
		ids = append(ids, s.Header.ID)
	}
	return ids
}

func (e *env) wantIDs(what string, want []string) {
	e.t.Helper()
	if diff := cmp.Diff(want, e.listedIDs()); diff != "" {
		e.t.Errorf("%s: the sessions listed mismatch (-want +got):\n%s", what, diff)
	}
}

// aged creates sessions whose last events are at the times given (ms).
func (e *env) aged(times map[string]int64) {
	e.t.Helper()
	for id, ms := range times {
		e.session(id, at(0, ms, "turn/start", `{"turn":0}`))
	}
}

// retainCases are store.Retain's, on one backend: Run runs them.
var retainCases = []contractCase{
	{"store/delete-if-revision", func(e *env) {
		e.session("s", OneTurn()...)
		old, err := e.s.Stat(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		w := e.open("s", store.Write)
		e.append(w, Turn2()...)
		e.flush(w)
		w.Close()
		e.wantErr("Delete at the revision before the last write", e.s.Delete(e.ctx, "s", store.IfRevision(old.Revision)), store.ErrRevisionMismatch)
		e.wantEvents("the session after the refused delete", append(OneTurn(), Turn2()...), e.read(e.open("s", store.Read), 0, -1))
		cur, err := e.s.Stat(e.ctx, "s")
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.s.Delete(e.ctx, "s", store.IfRevision(cur.Revision)); err != nil {
			e.t.Fatalf("Delete at the current revision: %v", err)
		}
		e.wantGone("after the delete", e.s, "s")
		// A new incarnation never has the old one's revision, even at the
		// same length.
		e.session("s", append(OneTurn(), Turn2()...)...)
		e.wantErr("Delete of the new incarnation at the old one's revision", e.s.Delete(e.ctx, "s", store.IfRevision(cur.Revision)), store.ErrRevisionMismatch)
	}},
	{"retain/by-age-and-count", func(e *env) {
		e.aged(map[string]int64{"s1": 1000, "s2": 2000, "s3": 3000, "s4": 4000, "s5": 5000, "s6": 6000, "keep-x": 500})
		now := time.UnixMilli(10_000)
		all := []string{"keep-x", "s1", "s2", "s3", "s4", "s5", "s6"}
		_, err := store.Retain(e.ctx, e.s, store.RetainPolicy{})
		e.wantErr("a policy that deletes nothing", err, store.ErrInvalidArgument)
		_, err = store.Retain(e.ctx, e.s, store.RetainPolicy{Keep: -1})
		e.wantErr("a negative Keep", err, store.ErrInvalidArgument)
		rep, err := store.Retain(e.ctx, e.s, store.RetainPolicy{OlderThan: 7500 * time.Millisecond, Prefix: "s", DryRun: true, Now: now})
		if err != nil || !slices.Equal(rep.Deleted, []string{"s2", "s1"}) || rep.Considered != 6 {
			e.t.Errorf("dry run by age: %+v, %v; want s2, s1 of 6", rep, err)
		}
		rep, err = store.Retain(e.ctx, e.s, store.RetainPolicy{Keep: 3, Prefix: "s", DryRun: true, Now: now})
		if err != nil || !slices.Equal(rep.Deleted, []string{"s3", "s2", "s1"}) {
			e.t.Errorf("dry run by count: %+v, %v; want s3, s2, s1", rep, err)
		}
		e.wantIDs("after the dry runs", all)
		// s2 is held by a writer; s3 is written after the listing chose
		// it: both are skipped.
		held := e.open("s2", store.Write)
		rep, err = store.Retain(e.ctx, e.s, store.RetainPolicy{Keep: 3, Prefix: "s", Now: now, Filter: func(s *store.Snapshot) bool {
			if s.Header.ID == "s3" {
				w := e.open("s3", store.Write)
				e.append(w, at(1, 9000, "turn/end", `{"turn":0,"reason":{"kind":"completed"}}`))
				e.flush(w)
				w.Close()
			}
			return true
		}})
		if err != nil || !slices.Equal(rep.Deleted, []string{"s1"}) || !slices.Equal(rep.Held, []string{"s2"}) || !slices.Equal(rep.Changed, []string{"s3"}) {
			e.t.Errorf("Retain keeping 3: %+v, %v; want s1 deleted, s2 held, s3 changed", rep, err)
		}
		if rep.Tombstones != nil {
			e.t.Errorf("Retain purged tombstones unasked: %+v", rep.Tombstones)
		}
		e.wantIDs("after keeping 3", []string{"keep-x", "s2", "s3", "s4", "s5", "s6"})
		held.Close()
		// Again: s3 is now the newest; s4 and s2 go. keep-x is not
		// considered (the prefix), however old.
		rep, err = store.Retain(e.ctx, e.s, store.RetainPolicy{Keep: 3, Prefix: "s", Now: now})
		if err != nil || !slices.Equal(rep.Deleted, []string{"s4", "s2"}) || len(rep.Held)+len(rep.Changed) != 0 {
			e.t.Errorf("Retain again: %+v, %v; want s4, s2 deleted", rep, err)
		}
		e.wantIDs("after keeping 3 again", []string{"keep-x", "s3", "s5", "s6"})
		// By age and count at once: anything older than 5.5 s before now
		// (keep-x, s5), and beyond the newest 2 of what is left.
		rep, err = store.Retain(e.ctx, e.s, store.RetainPolicy{Keep: 2, OlderThan: 5500 * time.Millisecond, Now: now})
		if err != nil || !slices.Equal(rep.Deleted, []string{"s5", "keep-x"}) {
			e.t.Errorf("Retain by age and count: %+v, %v; want s5, keep-x", rep, err)
		}
		e.wantIDs("in the end", []string{"s3", "s6"})
	}},
	{"retain/cut-short-then-again", func(e *env) {
		e.aged(map[string]int64{"a": 1000, "b": 2000, "c": 3000, "d": 4000, "e": 5000})
		ctx, cancel := context.WithCancel(e.ctx)
		seen := 0
		_, err := store.Retain(ctx, e.s, store.RetainPolicy{OlderThan: time.Second, Filter: func(*store.Snapshot) bool {
			if seen++; seen == 3 {
				cancel() // (a crash before the third delete)
			}
			return true
		}})
		e.wantErr("Retain cut short", err, context.Canceled)
		e.restart(false) // the deletes made are durable
		e.wantIDs("after the cut", []string{"a", "b", "c"})
		rep, err := store.Retain(e.ctx, e.s, store.RetainPolicy{OlderThan: time.Second})
		if err != nil || !slices.Equal(rep.Deleted, []string{"c", "b", "a"}) {
			e.t.Errorf("Retain again: %+v, %v", rep, err)
		}
		e.restart(false)
		e.wantIDs("in the end", []string{})
	}},
}
