package jetstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// PurgeTombstones purges the tombstones past the grace period, of IDs no
// one holds: their subjects hold nothing then. Every host finds the
// sessions gone as before; a late publish of the old incarnation is
// refused as before; the ID created again has new revisions and none of
// the old events; a tombstone whose ID a creator holds stays, and the
// creator's header (expecting it) is stored.
func TestPurgeTombstones(t *testing.T) {
	ctx := context.Background()
	oa := freshOptions()
	ob := *oa
	ob.Host = "host-b"
	oc := *oa
	oc.Host = "host-c"
	a, b, c := openStore(t, oa), openStore(t, &ob), openStore(t, &oc)
	for _, id := range []string{"s", "t", "live"} {
		written(t, a, id)
	}
	// c reads s now and looks again only once s is created again: its
	// view of the old incarnation meets the new one's header, no
	// tombstone between.
	if snap, err := c.Stat(ctx, "s"); err != nil || snap.EventCount != 6 {
		t.Fatalf("Stat on c: %+v, %v", snap, err)
	}
	r, err := b.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, -1); err != nil {
		t.Fatal(err)
	}
	old, err := b.Stat(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	last, err := a.stream.GetLastMsgForSubject(ctx, a.subject("s"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s", "t"} {
		if err := a.Delete(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := b.PurgeTombstones(ctx, time.Hour, false)
	if err != nil || len(rep.Purged) != 0 || rep.Young != 2 {
		t.Errorf("purge of tombstones younger than the grace: %+v, %v; want 2 young, none purged", rep, err)
	}
	rep, err = b.PurgeTombstones(ctx, 0, true)
	if err != nil || !slices.Equal(rep.Purged, []string{"s", "t"}) || subjectMsgs(t, b, "s") != 1 {
		t.Errorf("dry run: %+v, %v; want s and t, and nothing purged", rep, err)
	}
	// A creator of t holds its lease: its tombstone stays.
	ct, err := a.Create(ctx, enginetest.Meta("t"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err = b.PurgeTombstones(ctx, 0, false)
	if err != nil || !slices.Equal(rep.Purged, []string{"s"}) || !slices.Equal(rep.Held, []string{"t"}) {
		t.Errorf("purge: %+v, %v; want s purged, t held", rep, err)
	}
	if n, m := subjectMsgs(t, b, "s"), subjectMsgs(t, b, "t"); n != 0 || m != 1 {
		t.Errorf("the subjects hold %d and %d messages, want 0 (purged) and 1 (the tombstone held)", n, m)
	}
	if err := ct.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := ct.Close(); err != nil {
		t.Fatalf("the creator's flush after the purge: %v", err)
	}
	wantDeleted(t, "the deleting host", a, "s")
	wantDeleted(t, "the host that read it", b, "s")
	if _, err := r.Read(ctx, 0, -1); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("a reader opened before the delete: %v, want ErrSessionNotFound", err)
	}
	// A publish of the old incarnation landing late (it expects the last
	// message it knew) is refused.
	msg := nats.NewMsg(a.subject("s"))
	msg.Header.Set(hdrFirst, "6")
	msg.Header.Set(hdrCount, "1")
	msg.Data = []byte("late")
	if _, err := a.js.PublishMsg(ctx, msg, natsjs.WithExpectLastSequencePerSubject(last.Sequence)); err == nil {
		t.Errorf("a late publish of the old incarnation landed on the purged subject")
	}
	// Created again: new revisions, none of the old events.
	n, err := b.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatalf("create after the purge: %v", err)
	}
	if err := n.Append(ctx, enginetest.OneTurn()[:3]...); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, st := range []*Store{a, b, c} {
		snap, err := st.Stat(ctx, "s")
		if err != nil || snap.EventCount != 3 || revisionUIDOf(snap.Revision) == revisionUIDOf(old.Revision) {
			t.Errorf("Stat of the session created again: %+v, %v (old revision %s)", snap, err, old.Revision)
		}
		h, err := st.Open(ctx, "s", store.Read)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := h.Read(ctx, 0, -1); err != nil || len(got) != 3 {
			t.Errorf("the session created again: %d events, %v; want 3", len(got), err)
		}
	}
	rep, err = b.PurgeTombstones(ctx, 0, false)
	if err != nil || len(rep.Purged)+len(rep.Held)+rep.Young != 0 {
		t.Errorf("purge with no tombstone left: %+v, %v", rep, err)
	}
	if _, err := b.PurgeTombstones(ctx, -time.Second, false); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("a negative grace: %v", err)
	}
}

// revisionUIDOf is the incarnation part of a revision.
func revisionUIDOf(rev string) string {
	for i := len(rev) - 1; i >= 0; i-- {
		if rev[i] == '.' {
			return rev[:i]
		}
	}
	return rev
}

// A janitor that purges a tombstone between a Create's look at the
// subject and its leases does not make the Create fail: the subject is
// free under the leases, and the header expects what is there then.
func TestCreateBesidePurge(t *testing.T) {
	ctx := context.Background()
	oa := freshOptions()
	ob := *oa
	ob.Host = "host-b"
	a, b := openStore(t, oa), openStore(t, &ob)
	written(t, a, "s")
	if err := a.Delete(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	hook := func() {
		a.createLooked.Store(nil)
		if rep, err := b.PurgeTombstones(ctx, 0, false); err != nil || len(rep.Purged) != 1 {
			t.Errorf("the purge beside the Create: %+v, %v", rep, err)
		}
	}
	a.createLooked.Store(&hook)
	h, err := a.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatalf("Create beside the purge: %v", err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatalf("the flush of the session created beside the purge: %v", err)
	}
	if snap, err := b.Stat(ctx, "s"); err != nil || snap.EventCount != 6 {
		t.Errorf("Stat: %+v, %v", snap, err)
	}
}

// Retain on a stream deletes by policy and, asked to, purges the
// tombstones past their grace period (here, every one: its own too).
func TestRetainPurgesTombstones(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, freshOptions())
	for _, id := range []string{"a", "b", "c"} {
		written(t, st, id) // (OneTurn: all updated at 1005 ms)
	}
	s := store.Wrap[*Handle](st)
	rep, err := store.Retain(ctx, s, store.RetainPolicy{Keep: 1, DryRun: true, TombstonesOlderThan: time.Hour})
	if err != nil || !slices.Equal(rep.Deleted, []string{"b", "c"}) || rep.Tombstones == nil || len(rep.Tombstones.Purged) != 0 {
		t.Errorf("dry run: %+v, %v", rep, err)
	}
	rep, err = store.Retain(ctx, s, store.RetainPolicy{Keep: 1, TombstonesOlderThan: time.Nanosecond})
	if err != nil || !slices.Equal(rep.Deleted, []string{"b", "c"}) || rep.Tombstones == nil || !slices.Equal(rep.Tombstones.Purged, []string{"b", "c"}) {
		t.Errorf("Retain: %+v (tombstones %+v), %v", rep, rep.Tombstones, err)
	}
	for _, id := range []string{"b", "c"} {
		if n := subjectMsgs(t, st, id); n != 0 {
			t.Errorf("%s: %d messages left, want none", id, n)
		}
	}
	if snaps, err := st.List(ctx); err != nil || len(snaps) != 1 || snaps[0].Header.ID != "a" {
		t.Errorf("List: %+v, %v", snaps, err)
	}
}
