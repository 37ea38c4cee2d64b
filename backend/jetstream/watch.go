package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// watcher wakes a store's Waits when their sessions change, so that a
// Wait sends no request while nothing happens. It runs one pull consumer
// per store on the stream's session subjects (<prefix>.s.*), headers
// only, delivering every message stored after it started; each message
// wakes the Waits on its subject, which then load the session (one
// request to the stream's leader). The consumer is made when a Wait first
// has to wait and stopped (and deleted) watchLinger after the last Wait
// returned, so a store that follows a session from one Wait to the next
// keeps it.
//
// One consumer per store however many sessions wait: its cost is one
// headers-only delivery per message stored in the stream while any Wait
// of the store waits, whichever session it is on. (A consumer per waiting
// session would deliver only those, but hundreds of waiting handles would
// make hundreds of consumers, each made through the cluster's meta
// leader.)
//
// The consumer is the store's own, not nats.go's ordered consumer, which
// noticed a dead server only after two missed heartbeats of 5 s and made
// itself again 1 to 10 s apart while the Waits trusted it: it has a
// heartbeat of watchHeartbeat, and the store makes it again, from the
// message after the last it delivered, as soon as it breaks (missed
// heartbeats, deleted, not found, no responders, a gap in its delivery
// sequence, the connection lost: the watcher listens to the connection's
// status).
//
// A Wait does not rely on the consumer alone: until the consumer is
// running (it is being made, or made again; it could not be made, e.g.
// the host lacks the permission; or the connection was lost in the last
// watchDegraded), a Wait polls the session as it did before the consumer
// came (every waitMin to waitMax); and a running consumer's Wait still
// looks every waitIdle, against anything that stores no message (an
// operator's purge).
type watcher struct {
	st *Store

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{} // by subject (none empty: no Wait waits when it is)
	state   watchState
	gen     uint64 // counts the consumers started: a late result or message of an earlier one is dropped
	cc      natsjs.ConsumeContext
	cons    natsjs.Consumer
	retryAt time.Time // watchFailed: when the consumer is made again (at the next Wait, or by retry)
	retry   *time.Timer
	errAt   time.Time // when the connection last reported a loss (Waits poll for watchDegraded)
	linger  *time.Timer
	closed  bool
	// What the consumers delivered: next is the stream sequence the next
	// consumer starts at (0: the stream's end, when first made), dseq the
	// running one's last delivery sequence (a gap makes it again).
	next, dseq uint64
	// broke: a consumer that ran broke, and is being made again (retried
	// soon, backoff apart, not watchRetry); ranAt: when the running one
	// was made.
	broke   bool
	backoff time.Duration
	ranAt   time.Time
	status  chan nats.Status // the connection's status changes, while listened to
	// remade counts the consumers made again after one broke (tests).
	remade atomic.Int64
	// pinging: the connection's check (ping) runs; stalls counts the
	// reconnects it forced (tests).
	pinging bool
	stalls  atomic.Int64

	// Tests: makeHook, if set, runs before the consumer is made; an error
	// it returns fails the making (as if the server refused it).
	makeHook atomic.Pointer[func() error]
}

type watchState int

const (
	watchIdle     watchState = iota // no consumer
	watchStarting                   // being made
	watchRunning                    // running
	watchFailed                     // making it failed, or it broke: made again at retryAt
)

// waiter is one Wait's registration.
type waiter struct {
	subj string
	ch   chan struct{} // a change: a message on subj, the watcher's state, a close
	seen uint64        // the newest stream sequence the consumer delivered on subj; guarded by watcher.mu
}

const (
	// watchLinger keeps the consumer after the last Wait returned.
	watchLinger = 10 * time.Second
	// watchRetry is how long after a failure to make the consumer Waits
	// poll before one tries to make it again.
	watchRetry = time.Minute
	// watchDegraded is how long after the connection reported a loss
	// Waits poll as well (the consumer is made again at once).
	watchDegraded = 10 * time.Second
	// watchInactive is the consumer's inactive threshold: the server
	// deletes it this long after its store stopped pulling (a store that
	// died, or could not delete it).
	watchInactive = time.Minute
	// watchHeartbeat is the consumer's idle heartbeat: two missed (its
	// server died, or the connection stalled) and it is made again.
	watchHeartbeat = 500 * time.Millisecond
	// watchBackoff bounds the wait between makings of a consumer that
	// keeps breaking (Waits poll meanwhile); watchStable is how long one
	// must have run for the next break to start from no wait again.
	watchBackoff = 2 * time.Second
	watchStable  = 5 * time.Second
	// waitIdle is how often a Wait looks at its session while the
	// consumer runs and says nothing.
	waitIdle = 10 * time.Second
	// connPing is how often, while Waits wait, the store checks that the
	// connection's server still answers (a PING, answered by a PONG
	// within Options.Timeout; else the store makes the connection
	// reconnect): a server that stops answering without closing the
	// connection (a paused process, a hung machine) is left within
	// Options.Timeout plus connPing, not at nats.go's pings (every 2
	// minutes by default).
	connPing = watchHeartbeat
)

// add registers a Wait on subject subj, making the consumer if none runs.
func (w *watcher) add(subj string) *waiter {
	wt := &waiter{subj: subj, ch: make(chan struct{}, 1)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters == nil {
		w.waiters = map[string]map[*waiter]struct{}{}
	}
	m := w.waiters[subj]
	if m == nil {
		m = map[*waiter]struct{}{}
		w.waiters[subj] = m
	}
	m[wt] = struct{}{}
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	if !w.closed && (w.state == watchIdle || w.state == watchFailed && !time.Now().Before(w.retryAt)) {
		w.startLocked()
	}
	if !w.closed && !w.pinging {
		w.pinging = true
		w.st.wg.Add(1) // (Close waits for it: add runs before close, under w.mu)
		go w.ping()
	}
	return wt
}

// ping checks, every connPing while Waits wait, that the connection's
// server answers: a PING whose PONG does not come within Options.Timeout
// means it stopped answering without closing the connection (a paused
// process, a hung machine: nothing else notices before nats.go's own
// pings, 2 minutes apart by default, give up), and the store makes the
// connection reconnect (to another server of its pool). The requests in
// flight on it end then (nats.go fails them), and the Waits look again
// over the new connection; the consumer is made again once it is back
// (listen).
func (w *watcher) ping() {
	st := w.st
	defer st.wg.Done()
	t := time.NewTicker(connPing)
	defer t.Stop()
	for {
		select {
		case <-st.stop:
			return
		case <-t.C:
		}
		w.mu.Lock()
		done := w.closed || len(w.waiters) == 0
		if done {
			w.pinging = false
		}
		w.mu.Unlock()
		if done {
			return
		}
		if st.nc.Status() != nats.CONNECTED {
			continue // (reconnecting: nats.go is at it)
		}
		conn := st.nc.Stats().Reconnects // (this connection, not one made since)
		err := st.nc.FlushTimeout(st.opts.Timeout)
		if !errors.Is(err, nats.ErrTimeout) || st.nc.Status() != nats.CONNECTED || st.nc.Stats().Reconnects != conn {
			continue
		}
		st.opts.Logger.Warn("jetstream: the connection's server did not answer a ping; reconnecting", "stream", st.opts.Stream, "server", st.nc.ConnectedUrlRedacted(), "timeout", st.opts.Timeout)
		w.stalls.Add(1)
		_ = st.nc.ForceReconnect()
	}
}

// startLocked makes a consumer (a new generation). Called with w.mu held.
func (w *watcher) startLocked() {
	if w.retry != nil {
		w.retry.Stop()
		w.retry = nil
	}
	w.state = watchStarting
	w.gen++
	if w.status == nil {
		// Listen to the connection: a reconnect makes the consumer again
		// at once (its server may be the one that died).
		w.status = w.st.nc.StatusChanged(nats.RECONNECTING, nats.CONNECTED)
		w.st.wg.Add(1)
		go w.listen(w.status)
	}
	w.st.wg.Add(1) // (Close waits for it: add runs before close, under w.mu)
	go w.start(w.gen, w.next)
}

// listen makes the consumer again when the connection is lost (Waits
// poll until it is back) and once it is back, until the store closes.
func (w *watcher) listen(ch chan nats.Status) {
	st := w.st
	defer st.wg.Done()
	defer st.nc.RemoveStatusListener(ch)
	for {
		select {
		case <-st.stop:
			return
		case status, ok := <-ch:
			if !ok {
				return
			}
			w.mu.Lock()
			switch {
			case w.closed:
			case status == nats.RECONNECTING:
				w.errAt = time.Now()
				if w.state == watchRunning {
					w.breakLocked(errors.New("the connection was lost"), 0)
				} else {
					w.wakeAllLocked()
				}
			case status == nats.CONNECTED && w.state == watchFailed && len(w.waiters) > 0:
				w.startLocked() // (now, not at its backoff)
			}
			w.mu.Unlock()
		}
	}
}

// breakLocked ends the running consumer, which broke (err): Waits poll
// until another is made, after delay (at once if 0 and no Wait is
// left, at the next Wait). Called with w.mu held.
func (w *watcher) breakLocked(err error, delay time.Duration) {
	w.st.opts.Logger.Warn("jetstream: the consumer that wakes Wait broke; making it again, Waits poll meanwhile", "stream", w.st.opts.Stream, "error", err)
	stop := w.stopLocked()
	go stop()
	w.state, w.broke = watchFailed, true
	w.scheduleLocked(delay)
	w.wakeAllLocked()
}

// scheduleLocked makes the consumer again after delay if Waits wait then
// (else the next Wait makes it). Called with w.mu held.
func (w *watcher) scheduleLocked(delay time.Duration) {
	w.retryAt = time.Now().Add(delay)
	gen := w.gen
	w.retry = time.AfterFunc(delay, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.gen == gen && !w.closed && w.state == watchFailed && len(w.waiters) > 0 {
			w.startLocked()
		}
	})
}

// remove unregisters wt; once no Wait is left, the consumer stops after
// watchLinger.
func (w *watcher) remove(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.waiters[wt.subj]
	if _, ok := m[wt]; !ok {
		return
	}
	delete(m, wt)
	if len(m) == 0 {
		delete(w.waiters, wt.subj)
	}
	if len(w.waiters) == 0 && w.state == watchRunning && w.linger == nil {
		w.armLingerLocked()
	}
}

// armLingerLocked stops the consumer watchLinger from now unless a Wait
// comes. Called with w.mu held.
func (w *watcher) armLingerLocked() {
	gen := w.gen
	w.linger = time.AfterFunc(watchLinger, func() {
		w.mu.Lock()
		var stop func()
		if w.gen == gen && len(w.waiters) == 0 && w.state == watchRunning {
			stop = w.stopLocked()
		}
		w.mu.Unlock()
		if stop != nil {
			stop()
		}
	})
}

// live reports whether wt's Wait can rely on the consumer (it runs, and
// the connection reported no loss in the last watchDegraded), and the
// newest stream sequence it delivered on wt's subject since wt was added.
func (w *watcher) live(wt *waiter) (bool, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := w.state == watchRunning && (w.errAt.IsZero() || time.Since(w.errAt) >= watchDegraded)
	return ok, wt.seen
}

// notify wakes the Waits on subject subj: a message at stream sequence
// seq was stored on it (seq 0: events appended or a handle closed in this
// store).
func (w *watcher) notify(subj string, seq uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notifyLocked(subj, seq)
}

func (w *watcher) notifyLocked(subj string, seq uint64) {
	for wt := range w.waiters[subj] {
		wt.seen = max(wt.seen, seq)
		wake(wt)
	}
}

// wakeAllLocked wakes every Wait (the watcher's state changed). Called
// with w.mu held.
func (w *watcher) wakeAllLocked() {
	for _, m := range w.waiters {
		for wt := range m {
			wake(wt)
		}
	}
}

func wake(wt *waiter) {
	select {
	case wt.ch <- struct{}{}:
	default: // (a wake-up is pending already)
	}
}

// start makes the consumer (generation gen): a pull consumer on the
// session subjects, headers only, not acknowledged, held in memory on one
// server, from stream sequence from (0: the message after the stream's
// last).
func (w *watcher) start(gen, from uint64) {
	st := w.st
	defer st.wg.Done()
	cons, cc, from, err := w.make(gen, from)
	w.mu.Lock()
	if w.gen != gen || w.closed || w.state != watchStarting {
		w.mu.Unlock()
		if cc != nil {
			stopConsumer(st, cons, cc) // (stopped or closed meanwhile)
		}
		return
	}
	defer w.mu.Unlock()
	if err != nil {
		w.state = watchFailed
		if !w.broke && !st.lookAgain(err) {
			// Refused (a host without the permission): Waits poll, and
			// the next Wait after watchRetry tries again.
			st.opts.Logger.Warn("jetstream: Wait polls: the consumer that wakes it could not be made", "stream", st.opts.Stream, "error", err)
			w.scheduleLocked(watchRetry)
			return
		}
		// No answer (the cluster may be electing a leader, the
		// connection coming back), or it ran before: again soon.
		st.opts.Logger.Warn("jetstream: Wait polls: the consumer that wakes it could not be made; trying again", "stream", st.opts.Stream, "error", err)
		w.backoff = min(max(2*w.backoff, 100*time.Millisecond), watchBackoff)
		w.scheduleLocked(w.backoff)
		return
	}
	if w.broke {
		w.remade.Add(1)
	}
	w.state, w.cons, w.cc, w.errAt = watchRunning, cons, cc, time.Time{}
	w.next, w.dseq, w.ranAt, w.broke = from, 0, time.Now(), false
	w.wakeAllLocked() // (polling Waits now rely on it)
	if len(w.waiters) == 0 && w.linger == nil {
		w.armLingerLocked()
	}
}

// make makes and starts the consumer of generation gen from stream
// sequence from (0: the stream's end), and returns where it starts.
func (w *watcher) make(gen, from uint64) (natsjs.Consumer, natsjs.ConsumeContext, uint64, error) {
	st := w.st
	if f := w.makeHook.Load(); f != nil {
		if err := (*f)(); err != nil {
			return nil, nil, 0, err
		}
	}
	ctx, cancel := st.req(context.Background(), natsjs.DefaultAPIPrefix+"STREAM.INFO."+st.opts.Stream, natsjs.DefaultAPIPrefix+"CONSUMER.CREATE."+st.opts.Stream+".")
	defer cancel()
	if from == 0 {
		info, err := st.stream.Info(ctx)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("stream info: %w", st.refused(ctx, err))
		}
		from = info.State.LastSeq + 1
	}
	cons, err := st.stream.CreateConsumer(ctx, natsjs.ConsumerConfig{
		FilterSubjects:    []string{st.opts.Prefix + ".s.*"},
		DeliverPolicy:     natsjs.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         natsjs.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: watchInactive,
	})
	if err != nil {
		return nil, nil, 0, st.refused(ctx, err)
	}
	cc, err := cons.Consume(func(m natsjs.Msg) { w.deliver(gen, m) },
		natsjs.PullHeartbeat(watchHeartbeat),
		natsjs.ConsumeErrHandler(func(_ natsjs.ConsumeContext, err error) { w.consumeErr(gen, err) }))
	if err != nil {
		deleteConsumer(st, cons)
		return nil, nil, 0, err
	}
	return cons, cc, from, nil
}

// deliver is the handler of consumer gen: a message stored on a session
// subject. A gap in its deliveries (one lost on the way) makes it again
// from the message after the last delivered.
func (w *watcher) deliver(gen uint64, m natsjs.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen || w.state != watchRunning {
		return
	}
	if md.Sequence.Consumer != w.dseq+1 {
		w.breakLocked(fmt.Errorf("delivery %d after %d", md.Sequence.Consumer, w.dseq), 0)
		return
	}
	w.dseq, w.next = md.Sequence.Consumer, md.Sequence.Stream+1
	w.notifyLocked(m.Subject(), md.Sequence.Stream)
}

// consumeErr is the error handler of consumer gen: missed heartbeats (its
// server died, the connection stalled), the consumer deleted or not
// found, no responders, the connection closed. The consumer is made
// again, from the message after the last delivered (at once, or backoff
// apart if it keeps breaking); meanwhile Waits poll.
func (w *watcher) consumeErr(gen uint64, err error) {
	if errors.Is(err, natsjs.ErrConsumerLeadershipChanged) {
		return // (the pull is made again; nothing was missed)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen || w.state != watchRunning || w.closed {
		return
	}
	if time.Since(w.ranAt) >= watchStable {
		w.backoff = 0
	}
	delay := w.backoff
	w.backoff = min(max(2*w.backoff, 100*time.Millisecond), watchBackoff)
	w.breakLocked(err, delay)
}

// stopLocked ends the consumer's use and returns the function that stops
// and deletes it, to call once w.mu is released. Called with w.mu held.
func (w *watcher) stopLocked() func() {
	cons, cc := w.cons, w.cc
	w.cons, w.cc, w.state = nil, nil, watchIdle
	w.gen++
	if w.linger != nil {
		w.linger.Stop()
		w.linger = nil
	}
	if w.retry != nil {
		w.retry.Stop()
		w.retry = nil
	}
	return func() {
		if cc != nil {
			stopConsumer(w.st, cons, cc)
		}
	}
}

// close stops the consumer and wakes every Wait (the store is closing).
func (w *watcher) close() {
	w.mu.Lock()
	w.closed = true
	stop := w.stopLocked()
	w.wakeAllLocked()
	w.mu.Unlock()
	stop()
}

// stopConsumer stops cc and deletes its consumer from the server (a host
// without the permission leaves it to the server's inactive threshold).
func stopConsumer(st *Store, cons natsjs.Consumer, cc natsjs.ConsumeContext) {
	cc.Stop()
	deleteConsumer(st, cons)
}

func deleteConsumer(st *Store, cons natsjs.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), st.opts.Timeout)
	defer cancel()
	_ = st.js.DeleteConsumer(ctx, st.opts.Stream, info.Name)
}

// running reports whether the consumer runs and Waits rely on it (tests).
func (w *watcher) running() bool {
	ok, _ := w.live(&waiter{})
	return ok
}
