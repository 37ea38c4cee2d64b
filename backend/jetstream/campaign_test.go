package jetstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// campaignEvent is the event a writer appends at seq: testgen's, with the
// name of the write open that appended it in its data, so that the check
// tells whose it is.
func campaignEvent(seq uint64, tag string) event.Event {
	e := testgen.Event(seq, 80)
	e.Data = json.RawMessage(fmt.Sprintf(`{"turn":%d,"w":%q}`, seq, tag))
	return e
}

// campaignAck is one acknowledged flush: events from..to-1 of session id,
// appended by write open tag.
type campaignAck struct {
	id       string
	from, to uint64
	tag      string
	at       time.Time
}

// raftElection is the longest a nats-server stream goes without a leader
// after its leader went silent: its Raft election timeout is 4 to 9 s.
const raftElection = 9 * time.Second

// campaignFault is one fault: its kind, when it started and ended.
type campaignFault struct {
	kind       string
	start, end time.Time
}

// TestClusterFaults is the fault campaign of issue 39, on a 3-node cluster
// of nats-server processes with 3 replicas: two writer hosts (A through a proxy that can stall its
// connection, B) open, append to and flush 4 sessions, taking them from
// each other, each call under a caller's deadline of a minute; a follower
// host waits on every session. Faults, in turn: the stream's leader
// killed, the lease bucket's leader killed, a node that leads neither
// stopped (each killed with SIGKILL, back after a second), A's connection
// stalled past its lease, A's renewals stopped past its lease, and two
// silent deaths (issue 44): the follower's server, and the stream's
// leader, stop answering without closing a connection (SIGSTOP, for
// 2*Options.Timeout+2 s, then SIGCONT). While the follower's server or
// the stream leader is silent, the follower's Wait lag after an
// acknowledgement stays within Options.Timeout plus a heartbeat check
// (waitBound, with its slack). At the end, a checker host
// reads every session: every acknowledged flush is there once, in order,
// with the events its write open appended (no two writers acknowledged
// for the same events, nothing an earlier writer sent landed after a
// later one's); the follower's Waits reached every session's last
// acknowledged event; the sessions are deleted and stay deleted on every
// host, and the follower's Waits end with ErrSessionNotFound. It logs the
// figures: faults, acknowledged flushes, events checked, the slowest call
// after a kill, the Wait lag after each acknowledgement.
//
// About 25 s of faults by default, 3 minutes with SEGLOG_LONG=1.
func TestClusterFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster and kills its servers")
	}
	run := 25 * time.Second
	if longCampaign() {
		run = 3 * time.Minute
	}
	ctx := context.Background()
	c := startProcCluster(t)
	urls := c.urls()
	ncL := connectAll(t, c.url(2), c.url(1), c.url(0)) // (asks the cluster who leads what)
	// A goes through the proxy only, to whichever server runs.
	p := newStallProxy(t, func() string {
		for i := range 3 {
			if a := c.addr(i); a != "" {
				return a
			}
		}
		return ""
	})
	ncA, err := nats.Connect(p.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.IgnoreDiscoveredServers())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ncA.Close)
	o := freshOptions()
	o.Replicas, o.FlushOnly = 3, true
	o.LeaseTTL, o.Timeout = 3*time.Second, 2*time.Second
	oa, ob, of, oc := *o, *o, *o, *o
	oa.Host, ob.Host, of.Host, oc.Host = "host-a", "host-b", "follower", "checker"
	// The follower's warnings (its looks again, reconnects, consumers
	// made again), shown if the test fails.
	flog := &lockedBuffer{}
	of.Logger = slog.New(slog.NewTextHandler(flog, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.String("t", a.Value.Time().Format("15:04:05.000"))
		}
		return a
	}}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the follower's warnings:\n%s", flog.tail(200))
		}
	})
	ncB := connectAll(t, c.url(1), c.url(2), c.url(0))
	b := openCluster(t, ncB, &ob)
	a := openCluster(t, ncA, &oa)
	ncF := connectAll(t, urls...)
	f := openCluster(t, ncF, &of)
	ids := []string{"s0", "s1", "s2", "s3"}
	for _, id := range ids {
		h, err := b.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, campaignEvent(0, "create")); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu     sync.Mutex
		acks   []campaignAck
		faults []campaignFault
		calls  []struct { // every writer call: when it started and ended
			start, end time.Time
			op         string
		}
		wakes = map[string][]struct { // the follower's Waits: count, when
			n  uint64
			at time.Time
		}{}
		opens    atomic.Int64
		waitErrs = map[string]string{} // the follower's last Wait error on each session, and when
	)
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	call := func(op string, start time.Time) {
		mu.Lock()
		calls = append(calls, struct {
			start, end time.Time
			op         string
		}{start, time.Now(), op})
		mu.Unlock()
	}
	var writers sync.WaitGroup
	writer := func(name string, st *Store, seed uint64) {
		defer writers.Done()
		r := rand.New(rand.NewPCG(seed, 39))
		for n := 0; !stopped(); n++ {
			id := ids[r.IntN(len(ids))]
			cctx, cancel := context.WithTimeout(ctx, time.Minute) // (a caller's deadline, far past Options.Timeout)
			t0 := time.Now()
			h, err := st.Open(cctx, id, store.Write)
			call("open", t0)
			if err != nil {
				cancel()
				time.Sleep(20 * time.Millisecond)
				continue
			}
			opens.Add(1)
			tag := fmt.Sprintf("%s-%d", name, n)
			for k := 1 + r.IntN(6); k > 0 && !stopped(); k-- {
				from := h.Len()
				evs := make([]event.Event, 1+r.IntN(4))
				for i := range evs {
					evs[i] = campaignEvent(from+uint64(i), tag)
				}
				t0 = time.Now()
				err := h.Append(cctx, evs...)
				if err == nil {
					err = h.Flush(cctx)
				}
				call("flush", t0)
				if err != nil {
					break
				}
				mu.Lock()
				acks = append(acks, campaignAck{id: id, from: from, to: from + uint64(len(evs)), tag: tag, at: time.Now()})
				mu.Unlock()
			}
			t0 = time.Now()
			h.Close()
			call("close", t0)
			cancel()
		}
	}
	writers.Add(2)
	go writer("a", a, 1)
	go writer("b", b, 2)

	// The follower waits on every session until it is deleted.
	var followers sync.WaitGroup
	endErrs := make(chan error, len(ids))
	for _, id := range ids {
		followers.Add(1)
		go func() {
			defer followers.Done()
			r, err := f.Open(ctx, id, store.Read)
			for err != nil {
				time.Sleep(50 * time.Millisecond)
				r, err = f.Open(ctx, id, store.Read)
			}
			var n uint64
			for {
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				got, err := r.Wait(wctx, n)
				cancel()
				if errors.Is(err, store.ErrSessionNotFound) {
					endErrs <- nil
					return
				}
				if err != nil {
					if errors.Is(err, store.ErrClosed) || errors.Is(err, store.ErrHandleClosed) {
						endErrs <- fmt.Errorf("session %s: Wait: %w", id, err)
						return
					}
					mu.Lock()
					waitErrs[id] = fmt.Sprintf("%v (at %s)", err, time.Now().Format("15:04:05.000"))
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				mu.Lock()
				wakes[id] = append(wakes[id], struct {
					n  uint64
					at time.Time
				}{got, time.Now()})
				mu.Unlock()
				n = got
			}
		}()
	}

	// The faults, in turn, each followed by a second of calm.
	kinds := []string{"stream leader killed", "lease leader killed", "node stopped", "A's connection stalled", "A's renewals stopped", "follower's server silent", "stream leader silent"}
	begin := time.Now()
	for i := 0; i < len(kinds) || time.Since(begin) < run; i++ {
		kind := kinds[i%len(kinds)]
		ft := campaignFault{kind: kind, start: time.Now()}
		switch kind {
		case "stream leader killed", "lease leader killed", "node stopped":
			sl, ll := leaderOf(ncL, o.Stream), leaderOf(ncL, "KV_"+o.LeaseBucket)
			idx := map[string]int{"stream leader killed": sl, "lease leader killed": ll}[kind]
			if kind == "node stopped" {
				idx = -1
				for j := range 3 {
					if j != sl && j != ll {
						idx = j
					}
				}
			}
			if idx < 0 {
				ft.kind += " (none found)"
				break
			}
			ft.kind += fmt.Sprintf(" (server %d)", idx)
			c.kill(t, idx)
			time.Sleep(time.Second)
			c.restart(t, idx)
		case "follower's server silent", "stream leader silent":
			idx := connectedIndex(c, ncF)
			if kind == "stream leader silent" {
				idx = leaderOf(ncL, o.Stream)
			}
			if idx < 0 {
				ft.kind += " (none found)"
				break
			}
			ft.kind += fmt.Sprintf(" (server %d)", idx)
			// B, and the leader queries, move off it first, and (the
			// follower's server) so do the stream's and the lease
			// bucket's leaders, so that flushes are acknowledged while it
			// is silent.
			for _, nc := range []*nats.Conn{ncB, ncL} {
				for tries := 0; connectedIndex(c, nc) == idx && tries < 50; tries++ {
					nc.ForceReconnect()
					time.Sleep(100 * time.Millisecond)
				}
			}
			for _, stream := range []string{o.Stream, "KV_" + o.LeaseBucket} {
				for tries := 0; kind == "follower's server silent" && leaderOf(ncL, stream) == idx && tries < 10; tries++ {
					ncL.Request(natsjs.DefaultAPIPrefix+"STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
					time.Sleep(500 * time.Millisecond)
				}
			}
			ft.start = time.Now()
			c.stop(t, idx)
			time.Sleep(10 * time.Second)
			c.cont(t, idx)
		case "A's connection stalled":
			p.stall()
			time.Sleep(o.LeaseTTL + time.Second)
			p.resume()
		case "A's renewals stopped":
			timeout := func(func() (uint64, error)) (uint64, error) {
				return 0, fmt.Errorf("renewal timed out (injected): %w", context.DeadlineExceeded)
			}
			a.renewHook.Store(&timeout)
			time.Sleep(o.LeaseTTL + time.Second)
			a.renewHook.Store(nil)
		}
		ft.end = time.Now()
		mu.Lock()
		faults = append(faults, ft)
		mu.Unlock()
		time.Sleep(time.Second)
	}
	close(stop)
	writers.Wait()

	// The follower reaches every session's last acknowledged event.
	mu.Lock()
	last := map[string]uint64{}
	for _, k := range acks {
		last[k.id] = max(last[k.id], k.to)
	}
	mu.Unlock()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		behind := ""
		mu.Lock()
		for _, id := range ids {
			if w := wakes[id]; last[id] > 0 && (len(w) == 0 || w[len(w)-1].n < last[id]) {
				behind = id
			}
		}
		mu.Unlock()
		if behind == "" {
			break
		}
		if time.Now().After(deadline) {
			// What is there to reach: a store that took part in nothing
			// reads the session.
			mu.Lock()
			w, werr := wakes[behind], waitErrs[behind]
			mu.Unlock()
			var seen uint64
			if len(w) > 0 {
				seen = w[len(w)-1].n
			}
			held := "unread"
			fresh := openCluster(t, connectAll(t, urls...), &oc)
			if r, err := fresh.Open(ctx, behind, store.Read); err != nil {
				held = err.Error()
			} else {
				held = fmt.Sprint(r.Len(), " events")
				r.Close()
			}
			for _, ft := range faults {
				t.Logf("fault %s: %s .. %s", ft.kind, ft.start.Format("15:04:05.000"), ft.end.Format("15:04:05.000"))
			}
			t.Fatalf("the follower's Wait on %s did not reach its last acknowledged event %d: it woke last at %d; its last error: %q; a fresh store reads %s", behind, last[behind], seen, werr, held)
		}
	}

	// The check: a host that took part in nothing reads every session.
	checker := openCluster(t, connectAll(t, urls...), &oc)
	checks := 0
	slices.SortStableFunc(acks, func(x, y campaignAck) int {
		if x.id != y.id {
			return map[bool]int{true: -1, false: 1}[x.id < y.id]
		}
		return int(x.from) - int(y.from)
	})
	for _, id := range ids {
		var got []event.Event
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			r, err := checker.Open(ctx, id, store.Read)
			if err == nil {
				got, err = r.Read(ctx, 0, -1)
				r.Close()
			}
			if err == nil {
				break
			}
			if errors.Is(err, store.ErrCorrupt) || time.Now().After(deadline) {
				t.Fatalf("reading %s back: %v", id, err)
			}
		}
		// Every event is one a write open appended at its seq.
		tags := make([]string, len(got))
		for i, e := range got {
			var d struct {
				Turn uint64 `json:"turn"`
				W    string `json:"w"`
			}
			if e.Seq != uint64(i) || json.Unmarshal(e.Data, &d) != nil || d.Turn != e.Seq {
				t.Fatalf("%s: event %d is not one the writers appended (seq %d): %s", id, i, e.Seq, e.Data)
			}
			tags[i] = d.W
		}
		// Every acknowledged flush, once, in order: its events, by its
		// write open; no two acknowledged flushes cover the same event.
		var next uint64
		for _, k := range acks {
			if k.id != id {
				continue
			}
			if k.from < next {
				t.Fatalf("%s: two writers acknowledged for events %d..%d (%s, and one before it up to %d)", id, k.from, k.to-1, k.tag, next-1)
			}
			if k.to > uint64(len(got)) {
				t.Fatalf("%s: events %d..%d were acknowledged (%s), the stream holds %d", id, k.from, k.to-1, k.tag, len(got))
			}
			for s := k.from; s < k.to; s++ {
				if tags[s] != k.tag {
					t.Fatalf("%s: event %d was acknowledged to %s, the stream holds %s's", id, s, k.tag, tags[s])
				}
				checks++
			}
			next = k.to
		}
	}

	// The deletes: every session, through B; then gone on every host.
	// A's store is closed and opened again first: a writer's Close whose
	// lease release got no answer (A's server silent, or just back) leaves
	// the session's ownership record naming A's host lease, held while that
	// lives (lease.go, releaseLease); A's Close deletes the host lease,
	// which frees such a record at once, and the store opened again under
	// the same Host takes part in the checks.
	if err := a.Close(); err != nil {
		t.Logf("closing A: %v", err)
	}
	a = openCluster(t, ncA, &oa)
	for _, id := range ids {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			err := b.Delete(ctx, id)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("deleting %s: %v", id, err)
			}
		}
	}
	for _, st := range []*Store{a, checker, f} {
		for _, id := range ids {
			if _, err := st.Stat(ctx, id); !errors.Is(err, store.ErrSessionNotFound) {
				t.Fatalf("%s after the delete, on %s: %v, want ErrSessionNotFound", id, st.opts.Host, err)
			}
		}
		if l, err := st.List(ctx); err != nil || len(l) != 0 {
			t.Fatalf("List after the deletes, on %s: %d sessions, %v", st.opts.Host, len(l), err)
		}
	}
	followers.Wait()
	close(endErrs)
	for err := range endErrs {
		if err != nil {
			t.Error(err)
		}
	}

	// The figures.
	var kills []campaignFault
	for _, ft := range faults {
		if ft.kind[0] != 'A' {
			kills = append(kills, ft)
		}
	}
	var slowest, slowestAfterKill time.Duration
	for _, cl := range calls {
		d := cl.end.Sub(cl.start)
		slowest = max(slowest, d)
		for _, k := range kills {
			if cl.end.After(k.start) && cl.start.Before(k.end.Add(5*time.Second)) {
				slowestAfterKill = max(slowestAfterKill, d)
			}
		}
	}
	// The lags: lagSilent of the acknowledgements made while the
	// follower's server was silent; lagLeader of those made while the
	// stream's leader was silent or killed (one it made just before is
	// seen only once another is elected: what must be current is asked of
	// the leader; a SIGKILL, unlike an embedded server's shutdown, hands
	// the leadership to no one); lagMax of every other.
	var lagMax, lagAfter, lagSilent, lagLeader time.Duration
	var lagMaxAck string    // the acknowledgement of lagMax: its session, events, and when, from the start
	var lagSilentAck string // and of lagSilent
	ackWoken := func(k campaignAck, at time.Time) string {
		return fmt.Sprintf("%s %d..%d by %s acknowledged at %v, woken at %v", k.id, k.from, k.to, k.tag, k.at.Sub(begin).Round(time.Millisecond), at.Sub(begin).Round(time.Millisecond))
	}
	var lags []time.Duration
	silentAcks := 0
	for _, k := range acks {
		for _, w := range wakes[k.id] {
			if w.n >= k.to {
				lag := max(w.at.Sub(k.at), 0)
				lags = append(lags, lag)
				leader := false
				for _, ft := range faults {
					if k.at.After(ft.start) && k.at.Before(ft.end.Add(5*time.Second)) {
						lagAfter = max(lagAfter, lag)
					}
					// The fault's own bound applies to an acknowledgement
					// made during it, and to one made before it whose
					// Wait had not woken yet when it began (that Wait
					// then waits out the fault as one begun in it does),
					// counted from the fault's start.
					if !k.at.Before(ft.end.Add(time.Second)) || !w.at.After(ft.start) {
						continue
					}
					flag := w.at.Sub(laterOf(k.at, ft.start))
					switch {
					case strings.HasPrefix(ft.kind, "stream leader") && !strings.Contains(ft.kind, "none found"):
						lagLeader, leader = max(lagLeader, flag), true
					case strings.HasPrefix(ft.kind, "follower's server silent ("):
						if flag > lagSilent {
							lagSilent = flag
							lagSilentAck = ackWoken(k, w.at)
						}
						if k.at.After(ft.start) {
							silentAcks++
						}
					}
				}
				if !leader && lag > lagMax {
					lagMax = lag
					lagMaxAck = ackWoken(k, w.at)
				}
				break
			}
		}
	}
	slices.Sort(lags)
	p99 := time.Duration(0)
	if len(lags) > 0 {
		p99 = lags[len(lags)*99/100]
	}
	for _, ft := range faults {
		t.Logf("fault at %v: %s, %v", ft.start.Sub(begin).Round(time.Millisecond), ft.kind, ft.end.Sub(ft.start).Round(time.Millisecond))
	}
	t.Logf("%d faults in %v; %d write opens; %d acknowledged flushes; %d events checked; %d calls, the slowest %v, the slowest around a kill %v (Options.Timeout %v; callers' deadlines 1 min); Wait lag after an acknowledgement: p99 %v, max %v, max around a fault %v, max while the follower's server was silent %v (%d acknowledgements; bound %v), max while the stream leader was silent or killed %v (bound %v); the follower's connection check forced %d reconnects",
		len(faults), time.Since(begin).Round(time.Second), opens.Load(), len(acks), checks, len(calls), slowest.Round(time.Millisecond), slowestAfterKill.Round(time.Millisecond), o.Timeout, p99.Round(time.Millisecond), lagMax.Round(time.Millisecond), lagAfter.Round(time.Millisecond), lagSilent.Round(time.Millisecond), silentAcks, waitBound(o), lagLeader.Round(time.Millisecond), raftElection+waitBound(o), f.watch.stalls.Load())
	if len(acks) == 0 || checks == 0 {
		t.Fatal("no flush was acknowledged")
	}
	// Every call returns or moves on within a few Options.Timeout (a write
	// open makes several requests, each bounded), far from its caller's
	// minute; a Wait wakes within a few seconds of an acknowledgement,
	// faults or not (it used to wait for the consumer's heartbeats, or
	// the 10 s idle look).
	if slowest > 30*time.Second {
		t.Errorf("a call took %v (Options.Timeout %v)", slowest, o.Timeout)
	}
	if lagMax > 2*o.Timeout+5*time.Second {
		t.Errorf("a Wait woke %v after the acknowledgement (%s)", lagMax, lagMaxAck)
	}
	// A silent server (issue 44): Options.Timeout plus a heartbeat check
	// (it used to be as long as the server stayed silent); the stream's
	// leader: after the election, likewise.
	if lagSilent > waitBound(o) {
		t.Errorf("a Wait woke %v after an acknowledgement made while the follower's server was silent (bound %v; %s; the test began at %s)", lagSilent, waitBound(o), lagSilentAck, begin.Format("15:04:05.000"))
	}
	if lagLeader > raftElection+waitBound(o) {
		t.Errorf("a Wait woke %v after an acknowledgement made while the stream's leader was silent or killed (bound %v)", lagLeader, raftElection+waitBound(o))
	}
	if silentAcks == 0 {
		t.Error("no flush was acknowledged while the follower's server was silent: the silent fault tested nothing")
	}
}

// laterOf returns the later of two times.
func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lockedBuffer is an io.Writer safe for concurrent use that keeps what
// was written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// tail returns the last n lines written.
func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.b.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
