package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// silentFollow runs a writer host flushing one event every few ms on
// session id and a follower's Waits on it, and records what each saw:
// the writer's acknowledgements and the follower's wakes.
type silentFollow struct {
	mu    sync.Mutex
	acks  []silentAck
	wakes []silentAck
	errs  int // the follower's Waits that ended with an error
	stop  chan struct{}
	wg    sync.WaitGroup
}

type silentAck struct {
	n  uint64
	at time.Time
}

func startSilentFollow(t *testing.T, w, f *Store, id string) *silentFollow {
	t.Helper()
	ctx := context.Background()
	sf := &silentFollow{stop: make(chan struct{})}
	r, err := f.Open(ctx, id, store.Read)
	if err != nil {
		t.Fatal(err)
	}
	stopped := func() bool {
		select {
		case <-sf.stop:
			return true
		default:
			return false
		}
	}
	sf.wg.Add(2)
	go func() { // the writer
		defer sf.wg.Done()
		var h *Handle
		defer func() {
			if h != nil {
				h.Close()
			}
		}()
		for !stopped() {
			time.Sleep(20 * time.Millisecond)
			if h == nil {
				if h, err = w.Open(ctx, id, store.Write); err != nil {
					h = nil
					continue
				}
			}
			next := h.Len()
			err := h.Append(ctx, testgen.Events(next, 1, 100)...)
			if err == nil {
				err = h.Flush(ctx)
			}
			if err != nil {
				h.Close()
				h = nil
				continue
			}
			sf.mu.Lock()
			sf.acks = append(sf.acks, silentAck{next + 1, time.Now()})
			sf.mu.Unlock()
		}
	}()
	go func() { // the follower
		defer sf.wg.Done()
		var n uint64
		for !stopped() {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // (a caller's deadline, far past Options.Timeout)
			got, err := r.Wait(wctx, n)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					sf.mu.Lock()
					sf.errs++
					sf.mu.Unlock()
					t.Logf("the follower's Wait: %v", err)
					time.Sleep(20 * time.Millisecond)
				}
				continue
			}
			sf.mu.Lock()
			sf.wakes = append(sf.wakes, silentAck{got, time.Now()})
			sf.mu.Unlock()
			n = got
		}
	}()
	return sf
}

// lag is the longest time from an acknowledgement made in [from, to) to
// the follower's first wake at or past it, and how many there were.
func (sf *silentFollow) lag(from, to time.Time) (time.Duration, time.Time, int) {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	var worst time.Duration
	var worstAt time.Time
	n := 0
	for _, a := range sf.acks {
		if a.at.Before(from) || !a.at.Before(to) {
			continue
		}
		n++
		lag := time.Duration(1<<63 - 1)
		for _, wk := range sf.wakes {
			if wk.n >= a.n {
				lag = max(wk.at.Sub(a.at), 0)
				break
			}
		}
		if lag > worst {
			worst, worstAt = lag, a.at
		}
	}
	return worst, worstAt, n
}

func (sf *silentFollow) last() uint64 {
	sf.mu.Lock()
	defer sf.mu.Unlock()
	if len(sf.acks) == 0 {
		return 0
	}
	return sf.acks[len(sf.acks)-1].n
}

// waitBound is how long after an acknowledgement a Wait may wake when a
// server went silent (issue 44): Options.Timeout plus one heartbeat check
// (the consumer's two missed heartbeats, 1 s; the connection's ping comes
// every connPing), with 3 s of slack for a loaded machine.
func waitBound(o *Options) time.Duration {
	return o.Timeout + 2*watchHeartbeat + 3*time.Second
}

// TestSilentServerWait (issue 44, point 4): real nats-server processes;
// a writer host flushes one event every 20 ms and a follower host's
// Waits follow the session, while
//
//   - the server of the follower's own connection stops answering
//     without closing it (SIGSTOP) for 12 s: the follower's Waits see the
//     writer's flushes within Options.Timeout plus a heartbeat of them
//     (they used to see nothing for as long as the stop lasted: the
//     consumer's remake and the polls went over the stalled connection,
//     which nats.go pings every 2 minutes);
//   - the server running the follower's consumer, not the follower's
//     own, stops answering for 12 s: likewise;
//
// and every acknowledged event is read back afterwards.
func TestSilentServerWait(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 3 nats-server processes and stops them")
	}
	ctx := context.Background()
	c := startProcCluster(t)
	ncW := connectAll(t, c.url(1), c.url(2), c.url(0))
	ncF := connectAll(t, c.url(0), c.url(1), c.url(2))
	o := freshOptions()
	o.Replicas, o.FlushOnly = 3, true
	o.Timeout = 2 * time.Second
	ow, of := *o, *o
	ow.Host, of.Host = "writer", "follower"
	of.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	w := openCluster(t, ncW, &ow)
	f := openCluster(t, ncF, &of)
	h, err := w.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Append(ctx, testgen.Events(0, 1, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	sf := startSilentFollow(t, w, f, "s")
	defer func() {
		select {
		case <-sf.stop:
		default:
			close(sf.stop)
		}
		sf.wg.Wait()
	}()
	running := func() string {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the follower's consumer does not run")
			}
			f.watch.mu.Lock()
			name := ""
			if f.watch.state == watchRunning && f.watch.cons != nil {
				name = f.watch.cons.CachedInfo().Name
			}
			f.watch.mu.Unlock()
			if name != "" {
				return name
			}
		}
	}
	running()
	time.Sleep(time.Second)
	silence := func(what string, i int) {
		t.Helper()
		// The stream's and the lease bucket's leaders move off the
		// server first: a silent leader holds every Wait until another is
		// elected (what must be current is asked of the leader; its Raft
		// elects one 4 to 9 s later), the campaign's case.
		for _, stream := range []string{o.Stream, "KV_" + o.LeaseBucket} {
			for tries := 0; leaderOf(ncW, stream) == i && tries < 10; tries++ {
				ncW.Request(natsjs.DefaultAPIPrefix+"STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
				time.Sleep(500 * time.Millisecond)
			}
		}
		stopAt := time.Now()
		c.stop(t, i)
		time.Sleep(12 * time.Second)
		c.cont(t, i)
		contAt := time.Now()
		time.Sleep(3 * time.Second)
		lag, at, n := sf.lag(stopAt, contAt)
		t.Logf("%s (server %d stopped 12 s): %d flushes acknowledged meanwhile, the Wait's longest lag after one %v (the one %v after the stop; bound %v: Options.Timeout %v + a heartbeat check %v + slack)",
			what, i, n, lag.Round(time.Millisecond), at.Sub(stopAt).Round(time.Millisecond), waitBound(o), o.Timeout, 2*watchHeartbeat)
		if lag > waitBound(o) {
			t.Errorf("%s: the follower's Wait woke %v after an acknowledgement", what, lag.Round(time.Millisecond))
		}
	}

	// The follower's own server goes silent.
	silence("the follower's server silent", connectedIndex(c, ncF))

	// The consumer's server goes silent, the follower connected elsewhere
	// (and the writer too): make the consumer again until the cluster
	// places it on the third server.
	cons := ""
	idx := -1
	for range 20 {
		cons = running()
		idx = consumerServer(ncW, o.Stream, cons)
		if idx >= 0 && idx != connectedIndex(c, ncF) && idx != connectedIndex(c, ncW) {
			break
		}
		f.watch.mu.Lock()
		if f.watch.state == watchRunning {
			f.watch.breakLocked(errors.New("the test moves the consumer"), 0)
		}
		f.watch.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		idx = -1
	}
	if idx < 0 {
		t.Logf("the consumer %s stayed on the follower's or the writer's server; not stopping it", cons)
	} else {
		silence(fmt.Sprintf("the consumer's server silent, the follower on server %d", connectedIndex(c, ncF)), idx)
	}

	close(sf.stop)
	sf.wg.Wait()
	// Every acknowledged event is there, and the follower reaches it.
	last := sf.last()
	if last == 0 {
		t.Fatal("no flush was acknowledged")
	}
	r, err := f.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if got, err := r.Wait(rctx, last-1); err != nil || got < last {
		t.Fatalf("the follower's Wait after the faults: %d, %v; %d acknowledged", got, err, last)
	}
	evs, err := r.Read(rctx, 0, -1)
	if err != nil || uint64(len(evs)) < last {
		t.Fatalf("read back %d events (%v); %d acknowledged", len(evs), err, last)
	}
	sf.mu.Lock()
	t.Logf("%d flushes acknowledged, %d wakes, %d Waits ended with an error; %d reconnects forced by the connection's check", len(sf.acks), len(sf.wakes), sf.errs, f.watch.stalls.Load())
	if sf.errs > 0 {
		t.Errorf("%d of the follower's Waits ended with an error (a Wait looks again through an election, a 503, a lost connection)", sf.errs)
	}
	sf.mu.Unlock()
}
