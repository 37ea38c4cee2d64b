package engine_test

import (
	"context"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// scribble overwrites, in place, every byte and source seq a caller could
// reach through evs.
func scribble(evs []event.Event) {
	for i := range evs {
		for j := range evs[i].Data {
			evs[i].Data[j] = 'X'
		}
		for j := range evs[i].SurfaceOp {
			evs[i].SurfaceOp[j] = 'X'
		}
		for j := range evs[i].SourceEventSeqs {
			evs[i].SourceEventSeqs[j] = 1 << 40
		}
	}
}

// The events Append takes and Read returns are the caller's: writing to
// them, before the events are framed (a small batch, not yet flushed) or
// after, never changes the log, in memory or on disk (issue 15: a Read
// that returned the store's own copy of open events went unnoticed).
func TestReadAndAppendShareNothingWithTheCaller(t *testing.T) {
	ctx := context.Background()
	dir := engine.CheckedDir(t)
	db, err := engine.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	in := testgen.Events(0, 8, 80) // seqs 2 and 6 have source seqs and a surfaceOp
	want := make([]event.Event, len(in))
	for i := range in {
		want[i] = in[i].Clone()
	}
	h, err := db.Create(ctx, store.Header{ID: "c", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, in...); err != nil {
		t.Fatal(err)
	}
	scribble(in) // the caller reuses its buffers after Append returns
	check := func(label string, h *engine.Handle) {
		t.Helper()
		for range 2 {
			got, err := h.Read(ctx, 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			engine.SameEvents(t, label, got, want)
			scribble(got)
			part, err := h.Read(ctx, 2, 5)
			if err != nil {
				t.Fatal(err)
			}
			engine.SameEvents(t, label+" (part)", part, want[2:7])
			scribble(part)
		}
	}
	if snap, err := db.Stat(ctx, "c"); err != nil || snap.SizeBytes != 0 || snap.EventCount != 8 {
		t.Fatalf("before the flush: Stat = %+v, %v; want 8 events, none framed", snap, err)
	}
	check("open events", h)
	r, err := db.Open(ctx, "c", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	check("open events, read handle", r)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("after the flush", h)
	check("after the flush, read handle", r)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, o := range []*engine.Options{nil, {NoIndex: true}} {
		db, err := engine.OpenStore(t, dir, o)
		if err != nil {
			t.Fatal(err)
		}
		r, err := db.Open(ctx, "c", store.Read)
		if err != nil {
			t.Fatal(err)
		}
		check("after reopen", r)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// Enqueue takes copies too: a caller that reuses its buffers once Enqueue
// returns changes nothing the write-behind buffer holds, nor what its
// drain appends.
func TestEnqueueSharesNothingWithTheCaller(t *testing.T) {
	ctx := context.Background()
	db, err := engine.OpenStore(t, engine.CheckedDir(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	in := testgen.Events(0, 8, 80)
	want := make([]event.Event, len(in))
	for i := range in {
		want[i] = in[i].Clone()
	}
	h, err := db.Create(ctx, store.Header{ID: "q", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Enqueue(in[:4]...); err != nil {
		t.Fatal(err)
	}
	if err := h.Enqueue(in[4:]...); err != nil {
		t.Fatal(err)
	}
	scribble(in)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := h.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	engine.SameEvents(t, "enqueued, then the caller's buffers reused", got, want)
}
