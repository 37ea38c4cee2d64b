package handle_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/handle"
	"github.com/seglog/seglog/internal/testclock"
)

// sink records batches and can be made to fail or block.
type sink struct {
	mu      sync.Mutex
	batches [][]int
	fail    error
	calls   int
	block   chan struct{}
}

func (s *sink) write(_ context.Context, b []int) error {
	s.mu.Lock()
	s.calls++
	block, fail := s.block, s.fail
	s.mu.Unlock()
	if block != nil {
		<-block
	}
	if fail != nil {
		return fail
	}
	s.mu.Lock()
	s.batches = append(s.batches, slices.Clone(b))
	s.mu.Unlock()
	return nil
}

func (s *sink) got() [][]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.batches)
}

func newWB(s *sink, c *testclock.Clock, log *slog.Logger) *handle.WriteBehind[int] {
	return handle.NewWriteBehind(handle.WriteBehindConfig[int]{Write: s.write, Name: "s-1", Logger: log, AfterFunc: c.AfterFunc})
}

func TestWindowIsFixed(t *testing.T) {
	s, c := &sink{}, &testclock.Clock{}
	w := newWB(s, c, nil)
	w.Enqueue(0)
	c.Advance(150 * time.Millisecond)
	w.Enqueue(1) // joins the batch; does not extend the window
	c.Advance(49 * time.Millisecond)
	if got := s.got(); len(got) != 0 {
		t.Fatalf("wrote %v at 199ms", got)
	}
	c.Advance(time.Millisecond)
	if got := s.got(); !slices.EqualFunc(got, [][]int{{0, 1}}, slices.Equal) {
		t.Fatalf("at 200ms wrote %v, want [[0 1]]", got)
	}
	w.Enqueue(2) // a new window
	c.Advance(handle.DefaultWindow)
	if got := s.got(); len(got) != 2 || !slices.Equal(got[1], []int{2}) {
		t.Fatalf("second window wrote %v", got)
	}
}

func TestItemsDuringWriteFormNextBatch(t *testing.T) {
	s, c := &sink{block: make(chan struct{})}, &testclock.Clock{}
	w := newWB(s, c, nil)
	w.Enqueue(0, 1)
	done := make(chan struct{})
	go func() { c.Advance(handle.DefaultWindow); close(done) }()
	for w.Pending() != 0 { // the drain has taken the batch
		time.Sleep(time.Millisecond)
	}
	w.Enqueue(2, 3)
	close(s.block)
	<-done
	if got := s.got(); !slices.EqualFunc(got, [][]int{{0, 1}, {2, 3}}, slices.Equal) {
		t.Fatalf("batches %v, want [[0 1] [2 3]]", got)
	}
}

func TestBackgroundFailureRetainsAndPauses(t *testing.T) {
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	boom := errors.New("disk on fire")
	s, c := &sink{fail: boom}, &testclock.Clock{}
	w := newWB(s, c, log)
	w.Enqueue(0)
	c.Advance(handle.DefaultWindow)
	if !w.Paused() || w.Pending() != 1 || s.calls != 1 {
		t.Fatalf("after failure: paused=%v pending=%d calls=%d", w.Paused(), w.Pending(), s.calls)
	}
	if !strings.Contains(logBuf.String(), `background write for session \"s-1\" failed (buffered events retained)`) {
		t.Errorf("warning not logged: %s", logBuf.String())
	}
	for i := 1; i <= 3; i++ { // 4 windows pass with new items: no write attempt
		w.Enqueue(i)
		c.Advance(handle.DefaultWindow)
	}
	c.Advance(handle.DefaultWindow)
	if s.calls != 1 {
		t.Fatalf("%d write attempts while paused, want 1", s.calls)
	}
	if err := w.Drain(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("explicit Drain while broken = %v, want the write's error", err)
	}
	s.mu.Lock()
	s.fail = nil
	s.mu.Unlock()
	if err := w.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.got(); !slices.EqualFunc(got, [][]int{{0, 1, 2, 3}}, slices.Equal) {
		t.Fatalf("after recovery wrote %v, want [[0 1 2 3]] once, in order", got)
	}
	if w.Paused() {
		t.Error("still paused after a successful write")
	}
	w.Enqueue(4) // automatic path resumed
	c.Advance(handle.DefaultWindow)
	if got := s.got(); len(got) != 2 {
		t.Errorf("automatic path did not resume: %v", got)
	}
}

func TestCloseDrains(t *testing.T) {
	s, c := &sink{}, &testclock.Clock{}
	w := newWB(s, c, nil)
	w.Enqueue(7, 8)
	if err := w.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.got(); !slices.EqualFunc(got, [][]int{{7, 8}}, slices.Equal) {
		t.Fatalf("Close wrote %v", got)
	}
	if err := w.Enqueue(9); !errors.Is(err, handle.ErrClosed) {
		t.Errorf("Enqueue after Close = %v", err)
	}
	if err := w.Close(context.Background()); err != nil {
		t.Errorf("second Close = %v", err)
	}
	c.Advance(time.Hour)
	if len(s.got()) != 1 {
		t.Error("a timer fired after Close")
	}
}

func TestLeases(t *testing.T) {
	var o handle.Owners
	l, err := o.Acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Acquire("a"); !errors.Is(err, handle.ErrAlreadyOwned) {
		t.Errorf("second Acquire = %v", err)
	}
	l2, err := o.Acquire("b")
	if err != nil || l2.Generation() <= l.Generation() {
		t.Fatalf("Acquire b = %v, gen %d after %d", err, l2.Generation(), l.Generation())
	}
	l.Release()
	l.Release()
	if err := l.Check(); !errors.Is(err, handle.ErrReleased) {
		t.Errorf("Check after Release = %v", err)
	}
	l3, err := o.Acquire("a")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	o.RevokeAll()
	for _, x := range []*handle.Lease{l2, l3} {
		if err := x.Check(); !errors.Is(err, handle.ErrOwnershipLost) {
			t.Errorf("Check after RevokeAll = %v", err)
		}
	}
	l3.Release() // releasing a revoked lease must not free a newer one
	l4, _ := o.Acquire("a")
	l3.Release()
	if !o.Held("a") || l4.Check() != nil {
		t.Error("a stale Release freed a newer lease")
	}
	if err := l.Check(); !errors.Is(err, handle.ErrReleased) {
		t.Error("a released lease became valid again")
	}
}

// Behind checks each Enqueue from the seq after the stored log and what it
// buffered, buffers copies, and moves on only when the batch is taken.
func TestFront(t *testing.T) {
	var written []event.Event
	cfg := handle.WriteBehindConfig[event.Event]{
		Write: func(_ context.Context, b []event.Event) error {
			written = append(written, b...)
			return nil
		},
		AfterFunc: (&testclock.Clock{}).AfterFunc,
	}
	var nexts []uint64
	check := func(evs []event.Event, next uint64) error {
		nexts = append(nexts, next)
		if evs[0].Seq != next {
			return errors.New("seq gap")
		}
		return nil
	}
	var f handle.Behind
	if f.Buffer() != nil {
		t.Fatal("a buffer before the first Enqueue")
	}
	ev := func(seq uint64) event.Event {
		return event.Event{Seq: seq, Type: "t", Data: []byte(`{"a":1}`)}
	}
	e5 := ev(5)
	if err := f.Enqueue(cfg, 5, []event.Event{e5}, check); err != nil {
		t.Fatal(err)
	}
	e5.Data[1] = 'X' // the caller reuses its bytes
	if err := f.Enqueue(cfg, 5, []event.Event{ev(7)}, check); err == nil {
		t.Error("a gap after the buffered seq 5 was accepted")
	}
	if err := f.Enqueue(cfg, 5, []event.Event{ev(6)}, check); err != nil {
		t.Fatal(err)
	}
	if err := f.Enqueue(cfg, 9, []event.Event{ev(9)}, check); err != nil { // appended past the buffer meanwhile
		t.Fatal(err)
	}
	if want := []uint64{5, 6, 6, 9}; !slices.Equal(nexts, want) {
		t.Errorf("checked from %v, want %v", nexts, want)
	}
	if err := handle.DrainPending(context.Background(), f.Buffer()); err != nil {
		t.Fatal(err)
	}
	if len(written) != 3 || string(written[0].Data) != `{"a":1}` {
		t.Errorf("written %d events, first %s; want 3, the original bytes", len(written), written[0].Data)
	}
	if err := handle.DrainPending(context.Background(), nil); err != nil {
		t.Error(err)
	}
}

// TestDrainPendingWaitsForTheWriteInFlight: the drain before an Append
// returns only once a background write that has taken its batch is done.
// The buffer is empty then, but the batch is not yet in the log, and the
// Append's events follow it: returning at once let the Append check its
// seqs against the log without the batch (TestSIGKILLMix's child: "append
// seq mismatch for ...: expected 0 at index 0, got 12" after an Enqueue of
// seqs 0..11 whose window had just closed).
func TestDrainPendingWaitsForTheWriteInFlight(t *testing.T) {
	c := &testclock.Clock{}
	entered, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	wrote := false
	w := handle.NewWriteBehind(handle.WriteBehindConfig[event.Event]{
		Write: func(context.Context, []event.Event) error {
			close(entered)
			<-release
			mu.Lock()
			wrote = true
			mu.Unlock()
			return nil
		},
		AfterFunc: c.AfterFunc,
	})
	if err := w.Enqueue(event.Event{Seq: 0, Type: "t", Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	fired := make(chan struct{})
	go func() { c.Advance(handle.DefaultWindow); close(fired) }()
	<-entered // the background write has taken the batch: nothing is buffered
	if n := w.Pending(); n != 0 {
		t.Fatalf("%d items still buffered while the write is in flight", n)
	}
	returned := make(chan struct{})
	go func() {
		// The write ends once DrainPending has returned, or, as it must
		// wait for the write, after a while.
		select {
		case <-returned:
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
	}()
	err := handle.DrainPending(context.Background(), w)
	mu.Lock()
	done := wrote
	mu.Unlock()
	close(returned)
	<-fired
	if err != nil {
		t.Fatal(err)
	}
	if !done {
		t.Fatal("DrainPending returned while the background write of the buffered batch was still in flight")
	}
}

// TestStats: the buffers sharing a Stats count the items they hold (a
// write in flight too) and their failed background writes; a buffer whose
// Close could not write its items drops them from the gauge.
func TestStats(t *testing.T) {
	var st handle.Stats
	boom := errors.New("disk on fire")
	s1, s2, c := &sink{block: make(chan struct{})}, &sink{fail: boom}, &testclock.Clock{}
	w1 := handle.NewWriteBehind(handle.WriteBehindConfig[int]{Write: s1.write, AfterFunc: c.AfterFunc, Stats: &st})
	w2 := handle.NewWriteBehind(handle.WriteBehindConfig[int]{Write: s2.write, AfterFunc: c.AfterFunc, Stats: &st})
	w1.Enqueue(0, 1, 2)
	w2.Enqueue(0, 1)
	if n := st.Buffered.Load(); n != 5 {
		t.Fatalf("Buffered = %d after enqueueing 5, want 5", n)
	}
	done := make(chan struct{})
	go func() { c.Advance(handle.DefaultWindow); close(done) }() // w1's write blocks, w2's fails
	for w1.Pending() != 0 {
		time.Sleep(time.Millisecond)
	}
	w1.Enqueue(3)
	if n := st.Buffered.Load(); n != 6 {
		t.Errorf("Buffered = %d with 3 items in flight and 3 buffered, want 6", n)
	}
	close(s1.block)
	<-done
	if n, f := st.Buffered.Load(), st.Failures.Load(); n != 2 || f != 1 {
		t.Errorf("after the window: Buffered = %d, Failures = %d; want 2 (w1's drain wrote its last item too; w2's two), 1", n, f)
	}
	if err := w1.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := w2.Drain(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Drain = %v, want the write's error", err)
	}
	if n, f := st.Buffered.Load(), st.Failures.Load(); n != 2 || f != 1 {
		t.Errorf("after the drains: Buffered = %d, Failures = %d; want 2, 1 (an explicit drain's failure is its caller's)", n, f)
	}
	if err := w2.Close(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Close = %v, want the write's error", err)
	}
	if n := st.Buffered.Load(); n != 0 {
		t.Errorf("Buffered = %d after the failed Close dropped its items, want 0", n)
	}
}
