package jetstream

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/internal/testgen"
)

// TestClusterLeaderKilled: on a 3-node cluster with 3 replicas, the
// stream's leader is shut down while a writer appends and flushes. The
// writer's failed flushes are reopened from what the stream kept; in the
// end every acknowledged event is there, in order, once.
func TestClusterLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and waits for a leader election")
	}
	ctx := context.Background()
	c, err := embedded.StartCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	o := freshOptions()
	o.Replicas, o.Timeout = 3, 2*time.Second
	var st *Store
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st, err = Open(ctx, nc, o); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := st.Create(ctx, engine.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	const batch = 5
	var acked atomic.Uint64 // events acknowledged
	var next uint64         // the next seq to append
	failures, reopened := 0, 0
	// The killer shuts the stream's leader down while flushes are in
	// flight, brings it back, and kills the next leader: two failovers.
	done := make(chan struct{})
	var kills []string
	go func() {
		defer close(done)
		for round := range 2 {
			for acked.Load() < uint64(200*(round+1)) {
				time.Sleep(time.Millisecond)
			}
			leader := c.StreamLeader(o.Stream)
			if leader < 0 {
				kills = append(kills, "no leader")
				return
			}
			kills = append(kills, fmt.Sprintf("%s after %d acked", c.Servers[leader].Name(), acked.Load()))
			old := c.Servers[leader]
			old.Shutdown()
			old.WaitForShutdown()
			if round == 0 {
				back, err := old.Restart()
				if err != nil {
					kills = append(kills, "restart: "+err.Error())
					return
				}
				c.Servers[leader] = back
			}
		}
	}()
	start := time.Now()
	for {
		select {
		case <-done:
		default:
			if time.Since(start) > 90*time.Second {
				t.Fatalf("stuck: %d acked, kills %v", acked.Load(), kills)
			}
		}
		if isDone(done) && acked.Load() >= 600 {
			break
		}
		err := h.Append(ctx, testgen.Events(next, batch, 200)...)
		if err == nil {
			err = h.Flush(ctx)
		}
		if err == nil {
			next += batch
			acked.Store(next)
			continue
		}
		failures++
		h.Close()
		// Reopen from what the stream kept (a leader election may take
		// a few seconds).
		for {
			if h, err = st.Open(ctx, "s", engine.Write); err == nil {
				break
			}
			if time.Since(start) > 90*time.Second {
				t.Fatalf("reopen after %d failures: %v", failures, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		reopened++
		snap, err := st.Stat(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		if snap.EventCount < acked.Load() {
			t.Fatalf("after a failed flush the stream holds %d events, but %d were acknowledged", snap.EventCount, acked.Load())
		}
		next = snap.EventCount // a publish that failed may have landed
		acked.Store(next)
	}
	t.Logf("leaders shut down: %v", kills)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	// A fresh instance (another host) reads everything back.
	o2 := *o
	o2.Host = "checker"
	var st2 *Store
	for wait := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		// The lease bucket may still be electing a leader after the
		// shutdowns (slow on a loaded machine): its Open times out until then.
		if st2, err = Open(ctx, nc, &o2); err == nil {
			break
		}
		if time.Since(wait) > 90*time.Second {
			t.Fatal(err)
		}
	}
	defer st2.Close()
	r, err := st2.Open(ctx, "s", engine.Read)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Read(ctx, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(got)) < acked.Load() {
		t.Fatalf("%d events stored, %d acknowledged", len(got), acked.Load())
	}
	want := testgen.Events(0, len(got), 200)
	for i := range got {
		if got[i].Seq != uint64(i) || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("event %d: seq %d, data differs: %v", i, got[i].Seq, string(got[i].Data) != string(want[i].Data))
		}
	}
	t.Logf("%d events acknowledged, %d stored; %d failed flushes, %d reopens across the leader's loss, %v",
		acked.Load(), len(got), failures, reopened, time.Since(start).Round(time.Millisecond))
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestContractCluster runs the contract suite on a 3-node cluster with
// every stream and bucket replicated 3 times.
func TestContractCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c, err := embedded.StartCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	nc := connect(t, c.URLs())
	enginetest.Run(t, func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		o := freshOptions()
		o.Replicas, o.AfterFunc = 3, clock.AfterFunc
		return &backend{t: t, nc: nc, opts: o}
	})
}
