package engine

import (
	"context"
	"errors"
	"fmt"
	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/engine/internal/wal"
	"testing"

	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// deadForkHeader is what a process that died in the middle of a fork by
// copy of id leaves in the store in dir: the fork's header (counting 3
// events) durable, and nothing after it.
func deadForkHeader(t *testing.T, dir, id string) {
	t.Helper()
	dead := liveOpen(t, dir, besideOpts())
	defer dead.Close()
	rec := store.HeaderRecord{Header: store.Header{ID: id, CreatedAt: 2}, UID: store.NewIncarnation(), Events: 3}
	he, err := dead.encoder(false).Header(id, store.MarshalHeaderRecord(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.log.Place(&wal.Placement{Frames: []*segment.Encoded{he}}); err != nil {
		t.Fatal(err)
	}
	if err := dead.sync(); err != nil {
		t.Fatal(err)
	}
}

// TestDeadForkDoesNotHoldTheCheckpoint: a process dies after the header
// of a fork by copy (a group: header, copied events, marker) is durable
// and before the rest is: a roll split the group, and the roll's sync
// published the first part. The processes still open follow the header
// and wait for the rest, which never comes; the store stays open (another
// process has it open all along, so no first opener abandons the fork).
// The index checkpoint must not stop before that header for good: the
// checkpointer abandons the fork (a tombstone, under the fork's lease,
// which its dead writer no longer holds), as the next first opener would.
func TestDeadForkDoesNotHoldTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	defer w1.Close()
	h, err := w1.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	appendFlushed(t, h, testgen.Events(0, 8, 300)...)
	deadForkHeader(t, dir, "f")

	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		appendFlushed(t, h, testgen.Events(uint64(8+8*i), 8, 300)...)
	}
	if err := w1.checkpoint(); err != nil {
		t.Fatal(err)
	}
	cp, err := w1.index.checkpoint()
	if err != nil {
		t.Fatal(err)
	}
	tseg, toff := coord.SplitPosition(w1.shared.Word(coord.Durable).Load())
	if cp.Segment != tseg || cp.Offset != toff {
		t.Fatalf("checkpoint at segment %d @%d, the log durable to segment %d @%d: it stopped at the dead fork's header", cp.Segment, cp.Offset, tseg, toff)
	}
	if _, err := w1.Stat(ctx, "f"); err == nil {
		t.Fatal("the fork a dead process left half-written is a session")
	}
	w1.Close()
	h.Close()
	checkClean(t, dir, besideOpts())
}

// TestCreateOverADeadFork: after a process died with the header of a fork
// "f" durable and the rest of it never written, another process creates
// "f" (its lease is free). A third process, which followed the header,
// must read the new "f": the creator ends the dead fork with a tombstone
// first, else its header would be a second header of "f" inside the
// unfinished fork, which every follower reports as corruption.
func TestCreateOverADeadFork(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	w1 := liveOpen(t, dir, besideOpts())
	defer w1.Close()
	w3 := liveOpen(t, dir, besideOpts())
	defer w3.Close()
	deadForkHeader(t, dir, "f")
	if _, err := w3.Stat(ctx, "f"); !errors.Is(err, store.ErrSessionNotFound) {
		t.Fatalf("stat of a fork not whole: %v, want ErrSessionNotFound", err)
	}
	h, err := w1.Create(ctx, store.Header{ID: "f", CreatedAt: 5})
	if err != nil {
		t.Fatal(err)
	}
	evs := testgen.Events(0, 5, 200)
	appendFlushed(t, h, evs...)
	h.Close()
	for n, db := range []*DB{w3, w1} {
		r, err := db.Open(ctx, "f", store.Read)
		if err != nil {
			t.Fatalf("writer %d: open f: %v", n, err)
		}
		readsAll(t, fmt.Sprintf("writer %d reads f", n), r, evs)
		r.Close()
	}
	w1.Close()
	w3.Close()
	checkClean(t, dir, besideOpts())
}
