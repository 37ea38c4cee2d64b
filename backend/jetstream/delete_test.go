package jetstream

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// subjectMsgs returns how many messages the stream holds on session id's
// subject.
func subjectMsgs(t *testing.T, st *Store, id string) uint64 {
	t.Helper()
	info, err := st.stream.Info(context.Background(), natsjs.WithSubjectFilter(st.subject(id)))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Subjects[st.subject(id)]
}

// written creates session id on st with one flushed turn and closes it.
func written(t *testing.T, st *Store, id string) {
	t.Helper()
	ctx := context.Background()
	h, err := st.Create(ctx, enginetest.Meta(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
}

// wantDeleted checks that st sees no session id.
func wantDeleted(t *testing.T, what string, st *Store, id string) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Stat(ctx, id); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("%s: Stat = %v, want ErrSessionNotFound", what, err)
	}
	if _, err := st.Open(ctx, id, store.Read); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("%s: Open = %v, want ErrSessionNotFound", what, err)
	}
	snaps, err := st.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		if s.Header.ID == id {
			t.Errorf("%s: listed", what)
		}
	}
}

// A host killed right after its tombstone is stored (before it updates
// anything or releases the leases) leaves the session deleted for every
// host, its subject holding the tombstone alone (the rollup purged the
// rest). The id's lease stays held until it expires, or until the dead
// host's Host opens again and takes it over.
func TestDeleteCrashAfterTombstone(t *testing.T) {
	ctx := context.Background()
	oa := freshOptions()
	ob := *oa
	ob.Host = "host-b"
	a, b := openStore(t, oa), openStore(t, &ob)
	written(t, a, "s")
	r, err := b.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(ctx, 0, -1); err != nil {
		t.Fatal(err)
	}
	killed := errors.New("killed")
	hook := func() error { return killed }
	a.afterTombstone.Store(&hook)
	if err := a.Delete(ctx, "s"); !errors.Is(err, killed) {
		t.Fatalf("Delete = %v, want the hook's error", err)
	}
	a.abandon()
	wantDeleted(t, "another host", b, "s")
	if _, err := r.Read(ctx, 0, -1); !errors.Is(err, store.ErrSessionNotFound) {
		t.Errorf("the other host's reader: %v, want ErrSessionNotFound", err)
	}
	if n := subjectMsgs(t, b, "s"); n != 1 {
		t.Errorf("the subject holds %d messages, want the tombstone alone", n)
	}
	if _, err := b.Create(ctx, enginetest.Meta("s")); !errors.Is(err, store.ErrSessionExists) {
		t.Errorf("create on another host while the dead host's lease lives: %v, want ErrSessionExists", err)
	}
	// The dead host restarts: its lease is taken over, the id is free.
	a = openStore(t, oa)
	wantDeleted(t, "the restarted host", a, "s")
	h, err := a.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatalf("create after the restart: %v", err)
	}
	if err := h.Append(ctx, enginetest.OneTurn()[:1]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = b.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r.Read(ctx, 0, -1); err != nil || len(got) != 1 {
		t.Errorf("the new incarnation on the other host: %d events, %v; want 1", len(got), err)
	}
}

// A message that lands on the subject between the Delete's read and its
// tombstone (a publish an earlier writer started) makes the tombstone's
// publish fail: the Delete reads again and publishes again; a subject
// that keeps moving makes it fail with ErrOwnershipLost, the session
// untouched and its lease released.
func TestDeleteFenced(t *testing.T) {
	ctx := context.Background()
	js := newJS(t)
	o := freshOptions()
	st := openStore(t, o)
	// land publishes a fence message (as a late publish of an earlier
	// writer would land) after the last message on the subject.
	land := func() {
		last, err := st.stream.GetLastMsgForSubject(ctx, st.subject("s"))
		if err != nil {
			t.Error(err)
			return
		}
		msg := nats.NewMsg(st.subject("s"))
		msg.Header.Set(hdrFence, "earlier")
		if _, err := js.PublishMsg(ctx, msg, natsjs.WithExpectLastSequencePerSubject(last.Sequence)); err != nil {
			t.Error(err)
		}
	}
	t.Run("once", func(t *testing.T) {
		written(t, st, "s")
		lands := 0
		hook := func() {
			if lands == 0 {
				land()
			}
			lands++
		}
		st.afterOpenLoad.Store(&hook)
		defer st.afterOpenLoad.Store(nil)
		if err := st.Delete(ctx, "s"); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		if lands != 2 {
			t.Errorf("the subject was read %d times, want 2", lands)
		}
		wantDeleted(t, "after the delete", st, "s")
		if n := subjectMsgs(t, st, "s"); n != 1 {
			t.Errorf("the subject holds %d messages, want the tombstone alone", n)
		}
	})
	t.Run("always", func(t *testing.T) {
		written(t, st, "s")
		hook := land
		st.afterOpenLoad.Store(&hook)
		err := st.Delete(ctx, "s")
		st.afterOpenLoad.Store(nil)
		if !errors.Is(err, store.ErrOwnershipLost) {
			t.Fatalf("Delete on a subject that keeps moving: %v, want ErrOwnershipLost", err)
		}
		w, err := st.Open(ctx, "s", store.Write) // the leases were released
		if err != nil {
			t.Fatalf("write open after the failed delete: %v", err)
		}
		if got, err := w.Read(ctx, 0, -1); err != nil || len(got) != len(enginetest.OneTurn()) {
			t.Errorf("the session after the failed delete: %d events, %v", len(got), err)
		}
		w.Close()
	})
}
