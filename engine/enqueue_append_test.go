package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// spinSink is where the rounds' busy waits count (kept, so that the loop stays).
var spinSink int

type firedTimer struct{}

func (firedTimer) Stop() bool { return false }

// TestAppendAfterEnqueueAsTheWindowCloses: an Append right after an
// Enqueue, while the write-behind window closes, follows the enqueued
// events. The background write takes its batch out of the buffer before
// it appends it; the Append's drain took the empty buffer for nothing in
// flight and checked its seqs against the log without the batch
// (TestSIGKILLMix's child: "append seq mismatch for ...: expected 0 at
// index 0, got 12"). The window's timer is the test's: each round fires
// it on another goroutine as the Append starts, at a varying distance
// (the race is a few instructions wide: about 1 round in 10,000 hit it on
// a 2-core machine, so the rounds fail it all but about 1 run in 1,000).
func TestAppendAfterEnqueueAsTheWindowCloses(t *testing.T) {
	ctx := context.Background()
	// The test fires the write-behind's window itself; FlushOnly arms no
	// durability window beside it.
	fires := make(chan func(), 1)
	db, err := engine.OpenStore(t, t.TempDir(), &engine.Options{FlushOnly: true, NoIndex: true, AfterFunc: func(_ time.Duration, f func()) handle.Timer {
		fires <- f
		return firedTimer{}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 100000
	next := uint64(0)
	for i := range rounds {
		if err := h.Enqueue(testgen.Event(next, 40)); err != nil {
			t.Fatal(err)
		}
		next++
		fire := <-fires
		fired := make(chan struct{})
		go func() { fire(); close(fired) }()
		for range i % 512 * 16 {
			spinSink++
		}
		err := h.Append(ctx, testgen.Event(next, 40))
		<-fired
		if err != nil {
			t.Fatalf("round %d: Append of seq %d after the Enqueue of seq %d: %v", i, next, next-1, err)
		}
		next++
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := db.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	evs, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(evs)) != next {
		t.Fatalf("read %d events, want %d", len(evs), next)
	}
	for i, e := range evs {
		if e.Seq != uint64(i) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}
