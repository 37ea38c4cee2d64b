package engine

// The undo of a dead placer's write, across a power cut. A process that
// died in the middle of its placement left bytes past the tail (shm's
// placing past tail): here a whole, valid frame of session a, events a's
// writer never acknowledged. Another process's fdatasync of the segment
// made those bytes durable (it syncs the file, whatever lies past the
// tail). The next placement zeroes them (undoDead) and writes its own
// frames there; the zeros must be durable before anything is written
// after them: a power cut before that placement's own sync must never
// give the dead write back, as events a read returns or as a frame that
// makes the reopen refuse the store.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/seglog/seglog/engine/internal/coord"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

func TestUndoDeadPlacerPowerCut(t *testing.T) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := func(fsys vfs.FS) *Options {
		return &Options{FS: fsys, NoPreallocate: true, CompactInterval: -1}
	}
	db, err := openStore(t, "/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	acked := testgen.Events(0, 3, 100)
	if err := a.Append(ctx, acked...); err != nil {
		t.Fatal(err)
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	// The dead placer's write at the tail: a frame of a's next events
	// (its lease holder's, who died before it moved the tail), made
	// durable by a sync of the segment.
	seg, off := coord.SplitPosition(db.shared.Word(coord.Tail).Load())
	deadEvs := testgen.Events(3, 3, 140)
	e, err := db.encoder(false).Events("a", 3, deadEvs)
	if err != nil {
		t.Fatal(err)
	}
	dead := e.AppendFrame(nil, off)
	f, err := mem.OpenReadWrite(filepath.Join("/db", segment.Name(seg)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(dead, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	db.shared.Word(coord.Placing).Store(coord.Position(seg, off+int64(len(dead))))

	// The next placement (b's first frames, shorter than the dead write)
	// undoes it and places; the power is cut after it placed, before its
	// sync.
	var cuts []*vfs.MemFS
	db.knobs.appended = func() {
		if cuts != nil {
			return
		}
		cuts = append(cuts, mem.CrashClone(vfs.CrashConfig{}))
		for k := range 8 {
			cuts = append(cuts, mem.CrashClone(vfs.CrashConfig{Rand: rand.New(rand.NewPCG(uint64(k), 3)), Garble: true}))
		}
	}
	defer func() { db.knobs.appended = nil }()
	b, err := db.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	bevs := []event.Event{testgen.Event(0, 10)}
	if err := b.Append(ctx, bevs...); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	db.knobs.appended = nil
	if cuts == nil {
		t.Fatal("no placement after the dead write")
	}
	if s := db.mu.sessions["b"]; s == nil || len(s.frames) == 0 || s.frames[0].seg != seg || s.frames[0].off >= off+int64(len(dead)) {
		t.Fatalf("b's frame is not where the dead write was (%d/%d)", seg, off)
	}

	for i, cut := range cuts {
		label := fmt.Sprintf("power cut %d before the placement after the undo was synced", i)
		re, err := openStore(t, "/db", opts(cut))
		if err != nil {
			t.Fatalf("%s: reopen: %v", label, err)
		}
		sameEvents(t, label+": a", readAll(t, re, "a"), acked)
		if h, err := re.Open(ctx, "b", store.Read); err == nil {
			got, err := h.Read(ctx, 0, -1)
			h.Close()
			if err != nil || len(got) > 1 {
				t.Fatalf("%s: b (never acknowledged) reads %d events, %v", label, len(got), err)
			}
		}
		if err := re.Close(); err != nil {
			t.Fatal(err)
		}
		if rep, err := Check("/db", opts(cut)); err != nil || len(rep.Problems) != 0 {
			t.Fatalf("%s: check: %v %v", label, rep.Problems, err)
		}
	}
}
