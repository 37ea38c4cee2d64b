package jetstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// longCampaign reports whether SEGLOG_LONG=1 asks for the long campaigns.
// (The core module's internal/testlong reads it so; this module cannot
// import it. Any other value than empty, 0 or 1 panics, so that a typo
// does not run the short campaign silently.)
func longCampaign() bool {
	switch v := os.Getenv("SEGLOG_LONG"); v {
	case "", "0":
		return false
	case "1":
		return true
	default:
		panic(fmt.Sprintf("SEGLOG_LONG=%q: want 1 (the long campaigns) or 0", v))
	}
}

// stallProxy forwards TCP connections to a server of a cluster (target
// names one when a connection comes): stall stops forwarding, both ways,
// as a hung network path does (the connection stays open, nothing
// passes); resume forwards again; cut closes every connection, as the
// death of the server behind does.
type stallProxy struct {
	ln     net.Listener
	target func() string
	mu     sync.Mutex
	gate   chan struct{} // closed while forwarding
	conns  map[net.Conn]struct{}
}

func newStallProxy(t *testing.T, target func() string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target, gate: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	close(p.gate)
	go p.accept()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *stallProxy) URL() string { return "nats://" + p.ln.Addr().String() }

func (p *stallProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		addr := p.target()
		var s net.Conn
		if addr != "" {
			s, err = net.DialTimeout("tcp", addr, time.Second)
		}
		if addr == "" || err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.gate
			p.mu.Unlock()
			<-gate
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
		p.gate = make(chan struct{})
	default:
	}
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

func (p *stallProxy) cut() {
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.mu.Unlock()
	p.resume()
}

// faultCluster is a 3-node cluster whose servers a test stops and
// restarts (mu guards Servers against the proxies reading them).
type faultCluster struct {
	*embedded.Cluster
	mu sync.Mutex
}

func startFaultCluster(t *testing.T) *faultCluster {
	t.Helper()
	c, err := embedded.StartCluster(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	fc := &faultCluster{Cluster: c}
	t.Cleanup(func() {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		c.Shutdown()
	})
	return fc
}

// addr is the client address of server i if it runs, else "".
func (c *faultCluster) addr(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.Servers[i]; s.Running() {
		return s.Addr().String()
	}
	return ""
}

// url is server i's client URL (the same across restarts).
func (c *faultCluster) url(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Servers[i].ClientURL()
}

// kill shuts server i down.
func (c *faultCluster) kill(t *testing.T, i int) {
	c.mu.Lock()
	s := c.Servers[i]
	c.mu.Unlock()
	s.Shutdown()
	s.WaitForShutdown()
}

// restart starts server i again, with its storage, and waits until it
// is current again (its health check: the meta layer and every stream and
// consumer it holds caught up), so that a fault after it does not find
// one server dead and one still catching up (no quorum: on a loaded
// machine the catch-up took longer than a test's 30 s to flush).
func (c *faultCluster) restart(t *testing.T, i int) {
	c.mu.Lock()
	back, err := c.Servers[i].Restart()
	if err != nil {
		t.Errorf("restarting %s: %v", c.Servers[i].Name(), err)
		c.mu.Unlock()
		return
	}
	c.Servers[i] = back
	c.mu.Unlock()
	var st *server.HealthStatus
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if st = back.Healthz(&server.HealthzOptions{}); st.StatusCode == 200 || st.Status == "ok" {
			return
		}
	}
	t.Logf("%s restarted but not current after a minute: %+v", back.Name(), st)
}

// leaderOf is the index of the server leading stream, or -1.
func (c *faultCluster) leaderOf(stream string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.StreamLeader(stream)
}

func (c *faultCluster) consumerLeader(stream, consumer string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ConsumerLeader(stream, consumer)
}

func connectAll(t *testing.T, urls ...string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond), nats.DontRandomize()}
	nc, err := nats.Connect(joinURLs(urls), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func joinURLs(urls []string) string {
	s := ""
	for i, u := range urls {
		if i > 0 {
			s += ","
		}
		s += u
	}
	return s
}

// retryFlush appends n events to h and flushes, reopening the session
// through st after a failure, until a flush is acknowledged or the
// deadline passes; it returns the count acknowledged and when.
func retryFlush(t *testing.T, st *Store, h **Handle, id string, n int, deadline time.Duration) (uint64, time.Time) {
	t.Helper()
	ctx := context.Background()
	var last error
	for end := time.Now().Add(deadline); ; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no flush of %s acknowledged in %v; the last try: %v", id, deadline, last)
		}
		if *h == nil {
			var err error
			if *h, err = st.Open(ctx, id, store.Write); err != nil {
				last = err
				continue
			}
		}
		next := (*h).Len()
		err := (*h).Append(ctx, testgen.Events(next, n, 100)...)
		if err == nil {
			err = (*h).Flush(ctx)
		}
		if err == nil {
			return next + uint64(n), time.Now()
		}
		last = err
		(*h).Close()
		*h = nil
	}
}

// TestClusterServerDies (issue 39, items 1 and 2): on a 3-node cluster,
//
//   - a follower host's connection stalls with a Stat, a Read, a List, a
//     Wait and a Flush in flight, each under a caller's deadline of a
//     minute, and then its server dies: each returns (the Wait moves on
//     and wakes on the writer's next flush) within about Options.Timeout
//     plus the reconnect, not at the caller's deadline;
//   - the server running the Wait consumer dies: the consumer is made
//     again, and the Wait wakes on the next flush within a second or so
//     of its acknowledgement (it used to wait for two missed heartbeats
//     of 5 s, or the 10 s idle look); again once the server is back.
func TestClusterServerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and kills its servers")
	}
	ctx := context.Background()
	c := startFaultCluster(t)
	p := newStallProxy(t, func() string { return c.addr(0) })
	ncF := connectAll(t, p.URL(), c.url(1), c.url(2))
	ncW := connectAll(t, c.url(1), c.url(2))
	o := freshOptions()
	o.Replicas, o.FlushOnly = 3, true
	ow, of := *o, *o
	ow.Host, of.Host = "writer", "follower"
	of.Timeout = 2 * time.Second // (the writer keeps the tests' 30 s)
	of.Logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	w := openCluster(t, ncW, &ow)
	f := openCluster(t, ncF, &of)
	hw, err := w.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	count, _ := retryFlush(t, w, &hw, "s", 4, 30*time.Second)
	hf, err := f.Create(ctx, store.Header{ID: "f", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.Append(ctx, testgen.Events(0, 2, 100)...); err != nil {
		t.Fatal(err)
	}
	rf, err := f.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	count, _ = retryFlush(t, w, &hw, "s", 2, 30*time.Second) // (the Read has something new to load)

	// The follower's connection stalls with calls in flight, each under
	// a deadline of a minute; then its server dies.
	p.stall()
	callCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	type result struct {
		call string
		err  error
		at   time.Time
	}
	results := make(chan result, 5)
	run := func(call string, f func() error) {
		go func() { err := f(); results <- result{call, err, time.Now()} }()
	}
	run("Stat", func() error { _, err := f.Stat(callCtx, "s"); return err })
	run("Read", func() error { _, err := rf.Read(callCtx, 0, -1); return err })
	run("List", func() error { _, err := f.List(callCtx); return err })
	run("Flush", func() error { return hf.Flush(callCtx) })
	waitFrom := count
	run("Wait", func() error {
		n, err := rf.Wait(callCtx, waitFrom)
		if err == nil && n <= waitFrom {
			err = fmt.Errorf("woke at %d events, waiting past %d", n, waitFrom)
		}
		return err
	})
	time.Sleep(300 * time.Millisecond) // (the requests are sent into the stall)
	c.kill(t, 0)
	p.cut()
	killed := time.Now()
	count, acked := retryFlush(t, w, &hw, "s", 2, 30*time.Second)
	t.Logf("server 0 killed under the stalled connection; the writer's next flush acknowledged %v later", acked.Sub(killed).Round(time.Millisecond))
	var worst time.Duration
	for range 5 {
		r := <-results
		took := r.at.Sub(killed)
		worst = max(worst, took)
		t.Logf("%s returned %v after the kill: %v", r.call, took.Round(time.Millisecond), r.err)
		if r.call == "Wait" && r.err != nil {
			t.Errorf("the Wait did not move on to the writer's flush: %v", r.err)
		}
		// Options.Timeout (2 s) plus the reconnect, with room for a
		// loaded machine; the caller's deadline was a minute away.
		if took > 20*time.Second {
			t.Errorf("%s returned %v after its server died (Options.Timeout %v): bounded by the caller's deadline, not the request's", r.call, took, of.Timeout)
		}
	}
	t.Logf("the slowest call returned %v after the kill (Options.Timeout %v)", worst.Round(time.Millisecond), of.Timeout)
	hf.Close()
	c.restart(t, 0)

	// The server running the Wait consumer dies (kill), or has come back:
	// a Wait waits, the consumer runs, and the writer flushes.
	waitLag := func(what string, kill bool) int {
		t.Helper()
		from := count
		woke := make(chan result, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			n, err := rf.Wait(wctx, from)
			if err == nil && n <= from {
				err = fmt.Errorf("woke at %d events, waiting past %d", n, from)
			}
			woke <- result{"Wait", err, time.Now()}
		}()
		idx, consumer := -1, ""
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no server runs the Wait consumer (%q)", what, consumer)
			}
			f.watch.mu.Lock()
			if f.watch.state == watchRunning && f.watch.cons != nil {
				consumer = f.watch.cons.CachedInfo().Name
			}
			f.watch.mu.Unlock()
			if consumer != "" {
				if idx = c.consumerLeader(o.Stream, consumer); idx >= 0 {
					break
				}
			}
		}
		killedAt := time.Now()
		if kill {
			c.kill(t, idx)
		}
		var acked time.Time
		count, acked = retryFlush(t, w, &hw, "s", 2, 30*time.Second)
		r := <-woke
		if r.err != nil {
			t.Fatalf("%s: Wait: %v", what, r.err)
		}
		lag := max(r.at.Sub(acked), 0)
		t.Logf("%s (server %d runs the consumer): the writer's flush acknowledged %v after, the Wait woke %v after that",
			what, idx, acked.Sub(killedAt).Round(time.Millisecond), lag.Round(time.Millisecond))
		// A second or so; it used to take two missed heartbeats of 5 s
		// (or the idle look of waitIdle).
		if lag > 3*time.Second {
			t.Errorf("%s: the Wait woke %v after the flush was acknowledged", what, lag)
		}
		return idx
	}
	remade := f.watch.remade.Load()
	idx := waitLag("the consumer's server killed", true)
	c.restart(t, idx)
	waitLag("the server back", false)
	if f.watch.remade.Load() == remade {
		t.Error("the consumer was not made again after its server died")
	}
	if err := hw.Close(); err != nil && !errors.Is(err, store.ErrOwnershipLost) {
		t.Fatal(err)
	}
}
