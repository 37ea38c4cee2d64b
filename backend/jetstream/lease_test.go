package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
)

// hostPair opens two stores of different Hosts over o's stream and
// bucket, with a 1 s lease TTL.
func hostPair(t *testing.T, url string, o *Options) (a, b *Store, oa, ob *Options) {
	t.Helper()
	o.LeaseTTL = time.Second
	ca, cb := *o, *o
	ca.Host, cb.Host = "host-a", "host-b"
	return openStoreAt(t, url, &ca), openStoreAt(t, url, &cb), &ca, &cb
}

// writtenOn creates session id on st with a flushed turn, and returns its
// write handle.
func writtenOn(t *testing.T, st *Store, id string) *Handle {
	t.Helper()
	ctx := context.Background()
	w, err := st.Create(ctx, enginetest.Meta(id))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, enginetest.OneTurn()...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// hostLeaseValue reads the value of st's current host lease.
func hostLeaseValue(t *testing.T, st *Store, gen string) (leaseValue, bool) {
	t.Helper()
	b, _, deleted, err := st.entry(context.Background(), liveKey(gen))
	if errors.Is(err, natsjs.ErrKeyNotFound) || (err == nil && deleted) {
		return leaseValue{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var v leaseValue
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v, true
}

// A host that renews its host lease keeps every session it writes: another
// host's write opens fail with ErrAlreadyOwned for several TTLs, and never
// mark its host lease dead.
func TestNoTakeoverFromLiveHost(t *testing.T) { onServerAndCluster(t, testNoTakeoverFromLiveHost) }

func testNoTakeoverFromLiveHost(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	a, b, _, _ := hostPair(t, url, o)
	w := writtenOn(t, a, "s")
	seq := uint64(len(enginetest.OneTurn()))
	for end := time.Now().Add(5 * a.opts.LeaseTTL / 2); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if h, err := b.Open(ctx, "s", store.Write); !errors.Is(err, store.ErrAlreadyOwned) {
			if h != nil {
				h.Close()
			}
			t.Fatalf("write open on another host while the writer's host renews: %v, want ErrAlreadyOwned", err)
		}
		e := enginetest.OneTurn()[0]
		e.Seq = seq
		seq++
		if err := w.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatalf("the writer's flush: %v", err)
		}
	}
	if v, ok := hostLeaseValue(t, a, a.live.Load().gen); !ok || v.Dead || v.Host != "host-a" {
		t.Errorf("the writer's host lease: %+v (present %t), want host-a's, alive", v, ok)
	}
}

// A host that stalls past its host lease loses every session held under
// it at once: another host takes one over once the host lease expired
// (marking it dead), a third takes the other without waiting; the stalled
// host writes neither, and when it resumes its renewal finds the host
// lease dead. It writes again under a new host lease.
func TestHostLeaseExpired(t *testing.T) { onServerAndCluster(t, testHostLeaseExpired) }

func testHostLeaseExpired(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	a, b, _, ob := hostPair(t, url, o)
	w1, w2 := writtenOn(t, a, "s1"), writtenOn(t, a, "s2")
	gen := a.live.Load().gen
	a.stopRenewing()
	var wb *Handle
	var err error
	for deadline := time.Now().Add(10 * time.Second); wb == nil; time.Sleep(100 * time.Millisecond) {
		if wb, err = b.Open(ctx, "s1", store.Write); err != nil && !errors.Is(err, store.ErrAlreadyOwned) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("host b never took over the session of the stalled host")
		}
	}
	if v, ok := hostLeaseValue(t, a, gen); ok && !v.Dead {
		t.Errorf("the stalled host's lease after the takeover: %+v, want gone or marked dead", v)
	}
	c := openStoreAt(t, url, func() *Options { c := *ob; c.Host = "host-c"; return &c }())
	wc, err := c.Open(ctx, "s2", store.Write)
	if err != nil {
		t.Fatalf("host c's write open of the dead host's other session: %v", err)
	}
	for i, w := range []*Handle{w1, w2} {
		if err := w.Append(ctx, enginetest.Turn2()...); !errors.Is(err, store.ErrOwnershipLost) {
			t.Errorf("the stalled host's append to s%d: %v, want ErrOwnershipLost", i+1, err)
		}
	}
	a.renewNow()
	if !w2.remote.live.lost.Load() {
		t.Error("the stalled host's renewal did not find its host lease lost")
	}
	for _, w := range []*Handle{w1, w2} {
		if err := w.Close(); err != nil {
			t.Errorf("close of a stale handle holding nothing: %v", err)
		}
	}
	for id, w := range map[string]*Handle{"s1": wb, "s2": wc} {
		if err := w.Append(ctx, enginetest.Turn2()...); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatalf("the new writer of %s: %v", id, err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	w3, err := a.Open(ctx, "s1", store.Write)
	if err != nil {
		t.Fatalf("the resumed host's write open: %v", err)
	}
	if g := w3.remote.live.gen; g == gen {
		t.Errorf("the resumed host writes under its dead host lease %s", g)
	}
	if err := w3.Append(ctx, enginetest.OneTurn()[:1]...); !errors.Is(err, store.ErrSeqMismatch) {
		t.Errorf("append at a taken seq: %v, want ErrSeqMismatch (the session is the new writers')", err)
	}
}

// A renewal whose response was lost but that landed leaves the host lease
// at a revision its store does not know: the next renewal, refused, reads
// the key, finds its own value and goes on from there rather than losing
// every session.
func TestRenewalLandedUnacknowledged(t *testing.T) {
	onServerAndCluster(t, testRenewalLandedUnacknowledged)
}

func testRenewalLandedUnacknowledged(t *testing.T, url string, o *Options) {
	ctx := context.Background()
	o.LeaseTTL = time.Second
	st := openStoreAt(t, url, o)
	st.stopRenewing()
	w := writtenOn(t, st, "s")
	landed := func(update func() (uint64, error)) (uint64, error) {
		if _, err := update(); err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("no response (injected): %w", context.DeadlineExceeded)
	}
	st.renewHook.Store(&landed)
	st.renewNow()
	st.renewHook.Store(nil)
	st.renewNow() // refused: the revision moved
	st.renewNow()
	if st.live.Load().lost.Load() {
		t.Fatal("the host lease was lost after a renewal that landed unacknowledged")
	}
	time.Sleep(st.opts.LeaseTTL / 2)
	st.renewNow()
	time.Sleep(st.opts.LeaseTTL / 2)
	if err := w.Append(ctx, enginetest.Turn2()...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("flush %v after the host lease was made: %v", st.opts.LeaseTTL, err)
	}
}

// A store's Close deletes its host lease: a session record it could not
// release is free at once (here: one left as a release that failed would
// leave it).
func TestCloseReleasesHostLease(t *testing.T) {
	ctx := context.Background()
	o := freshOptions()
	o.LeaseTTL = time.Minute // a takeover must not wait for it
	a := openStore(t, o)
	w := writtenOn(t, a, "s")
	rec, _, _, err := a.entry(ctx, w.remote.key)
	if err != nil {
		t.Fatal(err)
	}
	gen := a.live.Load().gen
	w.mu.Lock()
	w.remote = nil // its release fails
	w.mu.Unlock()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if v, ok := hostLeaseValue(t, a, gen); ok {
		t.Fatalf("the closed store's host lease: %+v, want it deleted", v)
	}
	if left, _, _, err := a.entry(ctx, token("s")); err != nil || string(left) != string(rec) {
		t.Fatalf("the record left: %q, %v; want the store's", left, err)
	}
	ob := *o
	ob.Host = "host-b"
	b := openStore(t, &ob)
	h, err := b.Open(ctx, "s", store.Write)
	if err != nil {
		t.Fatalf("write open of a session whose holder closed: %v", err)
	}
	h.Close()
}
