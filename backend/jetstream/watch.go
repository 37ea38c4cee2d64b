package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// watcher wakes a store's Waits when their sessions change, so that a
// Wait sends no request while nothing happens. It runs one ordered
// consumer per store on the stream's session subjects (<prefix>.s.*),
// headers only, delivering every message stored after it started; each
// message wakes the Waits on its subject, which then load the session
// (one request to the stream's leader). The consumer is made when a Wait
// first has to wait and stopped (and deleted) watchLinger after the last
// Wait returned, so a store that follows a session from one Wait to the
// next keeps it.
//
// One consumer per store however many sessions wait: its cost is one
// headers-only delivery per message stored in the stream while any Wait
// of the store waits, whichever session it is on. (A consumer per waiting
// session would deliver only those, but hundreds of waiting handles would
// make hundreds of consumers, each made through the cluster's meta
// leader.)
//
// A Wait does not rely on the consumer alone: until the consumer is
// running (it is being made, it could not be made, e.g. the host lacks
// the permission, or it reported an error in the last watchDegraded), a
// Wait polls the session as it did before the consumer came (every
// waitMin to waitMax); and a running consumer's Wait still looks every
// waitIdle, against anything that stores no message (an operator's
// purge).
type watcher struct {
	st *Store

	mu      sync.Mutex
	waiters map[string]map[*waiter]struct{} // by subject (none empty: no Wait waits when it is)
	state   watchState
	gen     uint64 // counts the consumers started: a late result of an earlier one is dropped
	cc      natsjs.ConsumeContext
	cons    natsjs.Consumer
	failed  time.Time // when making the consumer last failed
	errAt   time.Time // when the running consumer last reported an error
	linger  *time.Timer
	closed  bool

	// Tests: makeHook, if set, runs before the consumer is made; an error
	// it returns fails the making (as if the server refused it).
	makeHook atomic.Pointer[func() error]
}

type watchState int

const (
	watchIdle     watchState = iota // no consumer
	watchStarting                   // being made
	watchRunning                    // running
	watchFailed                     // making it failed at failed
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
	// watchDegraded is how long after the running consumer reported an
	// error (missed heartbeats, a consumer deleted, a lost connection;
	// nats.go then makes it again, resuming after the last message it
	// delivered) Waits poll as well.
	watchDegraded = 10 * time.Second
	// watchInactive is the consumer's inactive threshold: the server
	// deletes it this long after its store stopped pulling (a store that
	// died, or could not delete it).
	watchInactive = time.Minute
	// waitIdle is how often a Wait looks at its session while the
	// consumer runs and says nothing.
	waitIdle = 10 * time.Second
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
	if !w.closed && (w.state == watchIdle || w.state == watchFailed && time.Since(w.failed) >= watchRetry) {
		w.state = watchStarting
		w.gen++
		w.st.wg.Add(1) // (Close waits for it: add runs before close, under w.mu)
		go w.start(w.gen)
	}
	return wt
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
// reported no error in the last watchDegraded), and the newest stream
// sequence it delivered on wt's subject since wt was added.
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

// start makes the consumer (generation gen): an ordered consumer on the
// session subjects, headers only, from the message after the stream's
// last (so that nats.go, making it again after an error before it
// delivered anything, resumes there and not at the stream's end then).
func (w *watcher) start(gen uint64) {
	st := w.st
	defer st.wg.Done()
	cons, cc, err := w.make()
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
		w.state, w.failed = watchFailed, time.Now()
		st.opts.Logger.Warn("jetstream: Wait polls: the consumer that wakes it could not be made", "stream", st.opts.Stream, "error", err)
		return
	}
	w.state, w.cons, w.cc, w.errAt = watchRunning, cons, cc, time.Time{}
	w.wakeAllLocked() // (polling Waits now rely on it)
	if len(w.waiters) == 0 && w.linger == nil {
		w.armLingerLocked()
	}
}

// make makes and starts the consumer.
func (w *watcher) make() (natsjs.Consumer, natsjs.ConsumeContext, error) {
	st := w.st
	if f := w.makeHook.Load(); f != nil {
		if err := (*f)(); err != nil {
			return nil, nil, err
		}
	}
	ctx, cancel := st.rctx(context.Background())
	defer cancel()
	info, err := st.stream.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("stream info: %w", err)
	}
	cons, err := st.stream.OrderedConsumer(ctx, natsjs.OrderedConsumerConfig{
		FilterSubjects:    []string{st.opts.Prefix + ".s.*"},
		DeliverPolicy:     natsjs.DeliverByStartSequencePolicy,
		OptStartSeq:       info.State.LastSeq + 1,
		HeadersOnly:       true,
		InactiveThreshold: watchInactive,
	})
	if err != nil {
		return nil, nil, err
	}
	cc, err := cons.Consume(w.deliver, natsjs.ConsumeErrHandler(w.consumeErr))
	if err != nil {
		deleteConsumer(st, cons)
		return nil, nil, err
	}
	return cons, cc, nil
}

// deliver is the consumer's handler: a message stored on a session
// subject.
func (w *watcher) deliver(m natsjs.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	w.notify(m.Subject(), md.Sequence.Stream)
}

// consumeErr is the consumer's error handler: nats.go makes the consumer
// again itself, resuming after the last message delivered; meanwhile
// Waits poll (watchDegraded).
func (w *watcher) consumeErr(_ natsjs.ConsumeContext, err error) {
	if errors.Is(err, natsjs.ErrConsumerLeadershipChanged) {
		return // (the pull is made again; nothing was missed)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state != watchRunning {
		return
	}
	w.errAt = time.Now()
	w.wakeAllLocked()
	w.st.opts.Logger.Warn("jetstream: the consumer that wakes Wait reported an error; Waits poll for a while", "stream", w.st.opts.Stream, "error", err)
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
