package engine_test

// A read through an index entry that points at another session's frame
// holding the same seqs (a damaged index: a bad entry written through the
// index package, as a bug or a bit flip in a record would leave it): the
// reader must see that the frame is not the session's and fail with a
// *CorruptionError at the frame, never return the other session's events.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/index"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// foreignStore makes, in a new store, sessions whose logs are two frames
// of 4 events each (seqs 0..3 and 4..7), each session's events its own,
// and then runs more (a fork, say) before closing it. It returns the
// directory and each session's events.
func foreignStore(t *testing.T, ids []string, more func(db *engine.DB)) (string, map[string][]event.Event) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	evs := map[string][]event.Event{}
	for k, id := range ids {
		// The same seqs and shapes, different data in each session.
		all := testgen.Events(0, 8, 100+20*k)
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, part := range [][]event.Event{all[:4], all[4:]} {
			if err := h.Append(ctx, part...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		evs[id] = all
	}
	if more != nil {
		more(db)
	}
	if err := db.Close(); err != nil { // (its last checkpoint indexes everything)
		t.Fatal(err)
	}
	return dir, evs
}

// pointAt makes the index entry of session id's frame at seq 4 point at
// the frame of session other at seq 4, and returns that frame.
func pointAt(t *testing.T, dir, id, other string) index.Frame {
	t.Helper()
	x, err := index.Open(filepath.Join(dir, "index.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	theirs, err := x.Frames(other)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := x.Frames(id)
	if err != nil {
		t.Fatal(err)
	}
	if len(theirs) != 2 || len(ours) != 2 || theirs[1].FirstSeq != 4 || ours[1].FirstSeq != 4 || theirs[1].Count != ours[1].Count {
		t.Fatalf("frames of %s %+v and of %s %+v: want two of the same seqs each", id, ours, other, theirs)
	}
	cp, err := x.Checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Apply(&index.Update{Frames: []index.SessionFrame{{ID: id, Frame: theirs[1]}}, Checkpoint: cp}); err != nil {
		t.Fatal(err)
	}
	if got, err := x.Frames(id); err != nil || got[1] != theirs[1] {
		t.Fatalf("the bad entry did not take: %+v, %v", got, err)
	}
	return theirs[1]
}

// wantForeignRefused reads session id whole and from seq 4 through a read
// handle: each read must fail with a *CorruptionError at frame bad (its
// segment file and offset), and return none of other's events.
func wantForeignRefused(t *testing.T, db *engine.DB, dir, id string, bad index.Frame, other []event.Event) {
	t.Helper()
	ctx := context.Background()
	h, err := db.Open(ctx, id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, from := range []int{0, 4, 6} {
		got, err := h.Read(ctx, from, -1)
		for _, e := range got {
			for _, o := range other {
				if string(e.Data) == string(o.Data) {
					t.Fatalf("read of %s from %d returned another session's event %d", id, from, o.Seq)
				}
			}
		}
		var ce *store.CorruptionError
		if !errors.As(err, &ce) || !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("read of %s from %d through an entry pointing at another session's frame: %d events, %v; want a *CorruptionError", id, from, len(got), err)
		}
		if want := filepath.Join(dir, segment.Name(bad.Segment)); ce.Path != want || ce.Offset != bad.Offset {
			t.Fatalf("read of %s from %d: corruption reported at %s @%d, want the frame at %s @%d (%v)", id, from, ce.Path, ce.Offset, want, bad.Offset, err)
		}
	}
	// The events before the bad frame still read.
	got, err := h.Read(ctx, 0, 4)
	if err != nil || len(got) != 4 {
		t.Fatalf("read of %s's first frame: %d events, %v", id, len(got), err)
	}
}

func TestReadRefusesAnotherSessionsFrame(t *testing.T) {
	dir, evs := foreignStore(t, []string{"a", "b"}, nil)
	bad := pointAt(t, dir, "a", "b")
	engine.ExpectProblem(t, dir, "frame does not hold the indexed events")
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	wantForeignRefused(t, db, dir, "a", bad, evs["b"])
}

// TestForkReadRefusesAnotherSessionsFrame: a fork reads the frames it
// shares with its parent through the parent's index entries; one that
// points at a third session's frame of the same seqs is refused as well
// (a shared frame carries its parent's key, not the fork's).
func TestForkReadRefusesAnotherSessionsFrame(t *testing.T) {
	ctx := context.Background()
	dir, evs := foreignStore(t, []string{"p", "x"}, func(db *engine.DB) {
		f, err := db.Fork(ctx, "p", 8, store.Header{ID: "f", CreatedAt: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	})
	bad := pointAt(t, dir, "p", "x")
	engine.ExpectProblem(t, dir, "frame does not hold the indexed events")
	db, err := engine.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snap, err := db.Stat(ctx, "f")
	if err != nil || snap.EventCount < 8 {
		t.Fatalf("fork f: %+v, %v", snap, err)
	}
	for _, id := range []string{"p", "f"} {
		t.Run(fmt.Sprint(id), func(t *testing.T) { wantForeignRefused(t, db, dir, id, bad, evs["x"]) })
	}
}
