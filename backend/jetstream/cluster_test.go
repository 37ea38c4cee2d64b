package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
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
	h, err := st.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
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
			if h, err = st.Open(ctx, "s", store.Write); err == nil {
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
	r, err := st2.Open(ctx, "s", store.Read)
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
	_, nc := startCluster(t)
	enginetest.Run(t, func(t *testing.T, clock *enginetest.Clock) enginetest.Backend {
		o := freshOptions()
		o.Replicas, o.AfterFunc = 3, clock.AfterFunc
		return &backend{t: t, nc: nc, opts: o}
	})
}

// A 3-node cluster the tests that do not stop its servers share, started
// by the first of them (TestMain shuts it down).
var (
	clusterOnce sync.Once
	cluster     *embedded.Cluster
	clusterDir  string
	clusterErr  error
)

// startCluster returns the shared 3-node cluster and a connection to it.
func startCluster(t *testing.T) (*embedded.Cluster, *nats.Conn) {
	t.Helper()
	if _, err := startClusterOnce(); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(cluster.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return cluster, nc
}

// startClusterOnce starts the shared cluster if it is not running.
func startClusterOnce() (*embedded.Cluster, error) {
	clusterOnce.Do(func() {
		if clusterDir, clusterErr = os.MkdirTemp("", "seglog-nats-cluster-"); clusterErr == nil {
			cluster, clusterErr = embedded.StartCluster(clusterDir, 3)
		}
	})
	return cluster, clusterErr
}

// stopCluster shuts the shared cluster down, if it was started.
func stopCluster() {
	if cluster != nil {
		cluster.Shutdown()
	}
	if clusterDir != "" {
		os.RemoveAll(clusterDir)
	}
}

// openCluster opens a store on a new cluster, retrying while the cluster
// places the stream and the bucket.
func openCluster(t *testing.T, nc *nats.Conn, o *Options) *Store {
	t.Helper()
	var st *Store
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if st, err = Open(context.Background(), nc, o); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// latePublish is a publish that the store was told timed out, held back
// to land later (a Raft proposal still in flight across a leader change,
// or the client's reconnect buffer).
type latePublish struct {
	msg    *nats.Msg
	id     string
	expect uint64
}

// land publishes it as the client would have: same message, same id,
// same expected last subject sequence.
func (p *latePublish) land(ctx context.Context, st *Store) error {
	_, err := st.js.PublishMsg(ctx, p.msg, natsjs.WithMsgID(p.id), natsjs.WithExpectLastSequencePerSubject(p.expect))
	return err
}

// TestClusterLatePublish: on a 3-node cluster with 3 replicas (where the
// server checks a message id before the expected last subject sequence),
// a writer's publish times out and lands later, after the next writer
// opened the session. The next writer's Flush returns nil only if its
// events are the ones stored; whatever it acknowledged, a reader on
// another host reads back, and the log is never damaged.
func TestClusterLatePublish(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx := context.Background()
	_, nc := startCluster(t)
	o := freshOptions()
	o.Replicas, o.Timeout = 3, 5*time.Second
	oa, ob, oc := *o, *o, *o
	oa.Host, ob.Host, oc.Host = "host-a", "host-b", "checker"
	a := openCluster(t, nc, &oa)
	b := openCluster(t, nc, &ob)
	checker := openCluster(t, nc, &oc)

	// run writes 8 events through host a, then 2 more whose publish "times
	// out" and is held back; host b opens the session for write (land runs
	// the held publish at the point the case chooses), appends 4 events of
	// its own and flushes.
	run := func(t *testing.T, id string, landAfterOpen bool) {
		wa, err := a.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := wa.Append(ctx, testgen.Events(0, 8, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := wa.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		var late *latePublish
		hold := publishFunc(func(_ context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error) {
			late = &latePublish{msg: msg, id: msgID, expect: expect}
			return nil, context.DeadlineExceeded
		})
		a.publishHook.Store(&hold)
		if err := wa.Append(ctx, testgen.Events(8, 2, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := wa.Flush(ctx); err == nil {
			t.Fatal("host a's held publish: Flush returned nil")
		}
		a.publishHook.Store(nil)
		wa.Close()
		if late == nil {
			t.Fatal("nothing was held")
		}
		landed := func() {
			err := late.land(ctx, a)
			t.Logf("host a's late publish (id %s, expecting %d): %v", late.id, late.expect, err)
		}
		if !landAfterOpen {
			f := func() { b.afterOpenLoad.Store(nil); landed() }
			b.afterOpenLoad.Store(&f)
		}
		wb, err := b.Open(ctx, id, store.Write)
		b.afterOpenLoad.Store(nil)
		if err != nil {
			t.Fatal(err)
		}
		if landAfterOpen {
			landed()
		}
		next := wb.Len()
		errB := wb.Append(ctx, testgen.Events(next, 4, 300)...)
		if errB == nil {
			errB = wb.Flush(ctx)
		}
		t.Logf("host b opened at %d events; its flush of 4 more: %v", next, errB)
		wb.Close()

		r, err := checker.Open(ctx, id, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.Read(ctx, 0, -1)
		r.Close()
		if err != nil {
			t.Fatalf("reading the log back: %v", err)
		}
		if errB == nil {
			if uint64(len(got)) != next+4 {
				t.Fatalf("host b's flush of events %d..%d returned nil, but the stream holds %d events", next, next+3, len(got))
			}
			want := testgen.Events(next, 4, 300)
			for i, e := range got[next:] {
				if string(e.Data) != string(want[i].Data) {
					t.Fatalf("host b's flush returned nil, but event %d is not the one it appended", e.Seq)
				}
			}
		} else if !errors.Is(errB, store.ErrOwnershipLost) {
			t.Fatalf("host b's flush: %v, want nil or ErrOwnershipLost", errB)
		}
		for i, e := range got[:8] {
			if string(e.Data) != string(testgen.Event(uint64(i), 100).Data) {
				t.Fatalf("event %d is not host a's acknowledged one", e.Seq)
			}
		}
	}
	t.Run("lands after the open", func(t *testing.T) { run(t, "after", true) })
	t.Run("lands during the open", func(t *testing.T) { run(t, "during", false) })

	// A message that carries the id of host b's next publish but other
	// events (what a reused id looks like to the server) must not make
	// b's publish "succeed" as its duplicate.
	t.Run("forged duplicate", func(t *testing.T) {
		wb, err := b.Create(ctx, store.Header{ID: "forged", CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := wb.Append(ctx, testgen.Events(0, 8, 100)...); err != nil {
			t.Fatal(err)
		}
		if err := wb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		forge := publishFunc(func(ctx context.Context, msg *nats.Msg, msgID string, expect uint64) (*natsjs.PubAck, error) {
			e, err := b.enc.Events("forged", 8, testgen.Events(8, 2, 100))
			if err != nil {
				return nil, err
			}
			other := natsMsg(msg.Subject, segment.MarshalFrame(e), 8, 2)
			if _, err := b.js.PublishMsg(ctx, other, natsjs.WithMsgID(msgID), natsjs.WithExpectLastSequencePerSubject(expect)); err != nil {
				return nil, err
			}
			return b.js.PublishMsg(ctx, msg, natsjs.WithMsgID(msgID), natsjs.WithExpectLastSequencePerSubject(expect))
		})
		b.publishHook.Store(&forge)
		defer b.publishHook.Store(nil)
		if err := wb.Append(ctx, testgen.Events(8, 4, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := wb.Flush(ctx); !errors.Is(err, store.ErrOwnershipLost) {
			t.Fatalf("flush whose id another message carries: %v, want ErrOwnershipLost", err)
		}
	})
}

// A host whose options name other replicas than the shared stream's and
// bucket's cannot open the store, and leaves them as they are (it used to
// turn a stream of 3 replicas into one of 1).
func TestClusterReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	ctx := context.Background()
	_, nc := startCluster(t)
	o := freshOptions()
	o.Replicas, o.Timeout = 3, 5*time.Second
	openCluster(t, nc, o)
	o1 := *o
	o1.Replicas, o1.Host = 1, "left-on-one"
	_, err := Open(ctx, nc, &o1)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Kind != "stream" || len(ce.Mismatches) != 1 || ce.Mismatches[0].Field != "replicas" {
		t.Fatalf("Open with 1 replica on a stream of 3: %v, want a *ConfigError on the stream's replicas", err)
	}
	t.Logf("reported: %v", err)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{o.Stream, "KV_" + o.LeaseBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("%s has %d replicas after the refused Open, want 3", name, r)
		}
	}
	// A host that leaves Replicas zero takes what the stream has.
	o0 := *o
	o0.Replicas, o0.Host = 0, "any"
	openCluster(t, nc, &o0)
}
