package store

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/internal/testclock"
)

// fakeWriter is a backend's side of a write handle whose storage a test
// controls: Cut writes the staged events out (and, with no sync of its
// own, makes them durable) unless failing is set; Writable returns gone.
type fakeWriter struct {
	mu      sync.Mutex
	staged  []event.Event
	durable int
	failing error
	gone    error
	cuts    int
}

func (w *fakeWriter) Writable() error           { w.mu.Lock(); defer w.mu.Unlock(); return w.gone }
func (w *fakeWriter) Next() uint64              { w.mu.Lock(); defer w.mu.Unlock(); return uint64(len(w.staged)) }
func (w *fakeWriter) Check([]event.Event) error { return nil }
func (w *fakeWriter) Stage(evs []event.Event) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.staged = append(w.staged, evs...)
	return false, nil
}
func (w *fakeWriter) Cut(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.cuts++
	if w.failing != nil {
		return w.failing
	}
	w.durable = len(w.staged)
	return nil
}

func (w *fakeWriter) set(f func(w *fakeWriter)) { w.mu.Lock(); f(w); w.mu.Unlock() }

func evs(from, n int) []event.Event {
	out := make([]event.Event, n)
	for i := range out {
		out[i] = event.Event{Seq: uint64(from + i), Type: "x/y", Time: 1, Data: json.RawMessage(`{}`)}
	}
	return out
}

// newFront returns a write handle's Front on w whose windows run on clock.
func newFront(w *fakeWriter, clock *testclock.Clock) *Front {
	f := &Front{}
	var flush func(ctx context.Context) error
	flush = func(ctx context.Context) error { return f.WriteOut(ctx, "flush", nil) }
	f.Init("s", Header{ID: "s"}, 0, Write, w, FrontConfig{Flush: flush, Window: 200 * time.Millisecond, AfterFunc: clock.AfterFunc})
	return f
}

// TestFlushBeforeAFailureKeepsIt: a flush that began before a window's
// flush failed and succeeds after it made durable only what was handed
// over when it began: the failure, which covers events handed over
// since, stays until a flush that began after it succeeds.
func TestFlushBeforeAFailureKeepsIt(t *testing.T) {
	ctx := context.Background()
	w := &fakeWriter{}
	clock := &testclock.Clock{}
	f := newFront(w, clock)
	if err := f.Append(ctx, evs(0, 5)...); err != nil {
		t.Fatal(err)
	}
	clock.Advance(200 * time.Millisecond) // the window makes 0-4 durable
	if err := f.Append(ctx, evs(5, 3)...); err != nil {
		t.Fatal(err)
	}
	err := f.Flush(ctx, func(ctx context.Context) error {
		// Meanwhile seq 8 is handed over and its window's flush fails.
		if err := f.Append(ctx, evs(8, 1)...); err != nil {
			t.Fatal(err)
		}
		w.set(func(w *fakeWriter) { w.failing = syscall.ENOSPC })
		clock.Advance(200 * time.Millisecond)
		w.set(func(w *fakeWriter) { w.failing = nil })
		return nil // the host's flush made 5-7 durable
	})
	if err != nil {
		t.Fatal(err)
	}
	var nd *NotDurableError
	if err := f.Append(ctx, evs(9, 1)...); !errors.As(err, &nd) || !errors.Is(err, syscall.ENOSPC) || nd.Seq != 8 {
		t.Fatalf("append after a flush that began before the failure: %v, want seq 8 not durable (ENOSPC)", err)
	}
	if err := f.Flush(ctx, func(ctx context.Context) error { return f.WriteOut(ctx, "flush", nil) }); err != nil {
		t.Fatal(err)
	}
	if err := f.Append(ctx, evs(9, 1)...); err != nil {
		t.Fatalf("append after a flush that began after the failure: %v", err)
	}
}

// TestWindowRetriesBackOff: a window's flush that fails is tried again,
// the wait doubling from the window up to maxRetry, while the writer can
// still write; once the writer cannot (a lost lease, a poisoned store),
// no retry is armed, and every call names the first seq not durable.
func TestWindowRetriesBackOff(t *testing.T) {
	ctx := context.Background()
	w := &fakeWriter{failing: syscall.ENOSPC}
	clock := &testclock.Clock{}
	f := newFront(w, clock)
	if err := f.Append(ctx, evs(0, 2)...); err != nil {
		t.Fatal(err)
	}
	// The window ends at 200 ms, then retries follow at +200, +400,
	// +800, +1600, +3200, +5000: 7 cuts by 11.4 s.
	var at []int
	for ms := 0; ms < 16000; ms += 100 {
		before := w.cuts
		clock.Advance(100 * time.Millisecond)
		if w.cuts != before {
			at = append(at, ms+100)
		}
	}
	want := []int{200, 400, 800, 1600, 3200, 6400, 11400}
	if len(at) != len(want) {
		t.Fatalf("cuts at %v ms, want %v", at, want)
	}
	for i := range at {
		if at[i] != want[i] {
			t.Fatalf("cuts at %v ms, want %v", at, want)
		}
	}
	w.set(func(w *fakeWriter) { w.gone = ErrOwnershipLost })
	clock.Advance(5 * time.Second) // the retry due at 16.4 s finds the lease lost
	cuts := w.cuts
	clock.Advance(time.Minute)
	if w.cuts != cuts {
		t.Fatalf("%d retries after the lease was lost", w.cuts-cuts)
	}
	var nd *NotDurableError
	for _, err := range []error{
		f.Append(ctx, evs(2, 1)...),
		f.Enqueue(evs(2, 1)...),
		f.Flush(ctx, func(ctx context.Context) error { return f.WriteOut(ctx, "flush", nil) }),
	} {
		if !errors.As(err, &nd) || nd.Seq != 0 || !errors.Is(err, ErrOwnershipLost) {
			t.Fatalf("a call after the lease was lost: %v, want seq 0 not durable, ErrOwnershipLost", err)
		}
	}
}

// TestNothingHeldNothingNamed: a lost lease on a handle that holds
// nothing beyond what a flush made durable is the plain error: no event
// is at risk, so none is named.
func TestNothingHeldNothingNamed(t *testing.T) {
	ctx := context.Background()
	w := &fakeWriter{}
	clock := &testclock.Clock{}
	f := newFront(w, clock)
	if err := f.Append(ctx, evs(0, 2)...); err != nil {
		t.Fatal(err)
	}
	if err := f.Flush(ctx, func(ctx context.Context) error { return f.WriteOut(ctx, "flush", nil) }); err != nil {
		t.Fatal(err)
	}
	w.set(func(w *fakeWriter) { w.gone = ErrOwnershipLost })
	err := f.Append(ctx, evs(2, 1)...)
	if !errors.Is(err, ErrOwnershipLost) || errors.Is(err, ErrNotDurable) {
		t.Fatalf("append after the lease was lost, nothing held: %v, want ErrOwnershipLost alone", err)
	}
}
