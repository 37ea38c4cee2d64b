package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// TestLapseReachesTheNextCall: a host that never flushes appends and
// enqueues; its lease lapses (renewals time out) and the durability
// window's flush fails behind it. Its next Append, Enqueue and Flush
// each fail with a *store.NotDurableError naming the first seq not made
// durable (2: the flush covered 0-1) and the cause, ErrOwnershipLost
// (the rule is store.Front's, as on the engine: issue 44).
func TestLapseReachesTheNextCall(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	o.LeaseTTL = time.Second
	clock := &enginetest.Clock{}
	o.AfterFunc = clock.AfterFunc
	st := openStore(t, o)
	w, err := st.Create(ctx, enginetest.Meta("s"))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[:2]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()[2:4]...); err != nil {
		t.Fatal(err)
	}
	if err := w.Enqueue(enginetest.OneTurn()[4:5]...); err != nil {
		t.Fatal(err)
	}
	timeout := func(func() (uint64, error)) (uint64, error) {
		return 0, fmt.Errorf("renewal timed out (injected): %w", context.DeadlineExceeded)
	}
	st.renewHook.Store(&timeout)
	st.renewNow()
	time.Sleep(o.LeaseTTL + 100*time.Millisecond)
	clock.Advance(time.Second) // the window's flush fails behind the host
	for _, call := range []struct {
		name string
		err  error
	}{
		{"append", w.Append(ctx, enginetest.OneTurn()[5:6]...)},
		{"enqueue", w.Enqueue(enginetest.OneTurn()[5:6]...)},
		{"flush", w.Flush(ctx)},
	} {
		var nd *store.NotDurableError
		if !errors.As(call.err, &nd) || nd.Seq != 2 || !errors.Is(call.err, store.ErrOwnershipLost) {
			t.Fatalf("%s after the window's flush failed: %v, want seq 2 not durable, ErrOwnershipLost", call.name, call.err)
		}
	}
	if n := w.Len(); n != 5 {
		t.Fatalf("refused calls took events: length %d, want 5", n)
	}
	if err := w.Close(); !errors.Is(err, store.ErrOwnershipLost) {
		t.Fatalf("close: %v, want ErrOwnershipLost", err)
	}
}
