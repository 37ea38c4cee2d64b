package coord

import (
	"cmp"
	"sync"
	"time"
)

// durableWatch turns the shm word every sync moves (syncSeq, see
// Notify) into a channel for the goroutines of this process that wait for
// another process's flush (Handle.Wait): one goroutine of the process
// sleeps on the word for all of them, and only while some wait.
type durableWatch struct {
	sh *Shared

	mu      sync.Mutex
	ch      chan struct{} // closed once the word moves past seq; nil: no one waits
	seq     uint32
	running bool
	closed  bool
	done    chan struct{} // closed when the running goroutine returns
}

// watchPoll bounds one sleep of the watching goroutine: a notify it missed
// (its notifier died between its move and its wake-up call) is seen then.
// (A test turns the poll off in its Knobs, so that only a wake-up
// ends the sleep.)
const watchPoll = 50 * time.Millisecond

// Changed returns a channel closed once a sync of any process published
// after the call (or LockSync was released), and nil if this process
// cannot watch (no shared memory, or closed). One goroutine of the
// process sleeps on the word for all the channels, while some wait; Close
// stops it.
func (sh *Shared) Changed() <-chan struct{} { return sh.watch.changed() }

// changed is Changed.
func (w *durableWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.sh == nil || w.sh.shm == nil || w.sh.shm.Lost() {
		return nil
	}
	s := w.sh.SyncSeq()
	if w.ch != nil && w.seq != s {
		close(w.ch) // the word moved before the watcher saw it
		w.ch = nil
	}
	if w.ch == nil {
		w.ch, w.seq = make(chan struct{}), s
	}
	if !w.running {
		w.running, w.done = true, make(chan struct{})
		go w.run(w.done)
	}
	return w.ch
}

func (w *durableWatch) run(done chan struct{}) {
	defer close(done)
	for {
		w.mu.Lock()
		if w.closed || w.ch == nil {
			w.running = false
			w.mu.Unlock()
			return
		}
		s := w.seq
		w.mu.Unlock()
		w.sh.WaitSync(s, cmp.Or(w.sh.Knobs.WatchPoll, watchPoll))
		w.mu.Lock()
		if w.ch != nil && (w.sh.SyncSeq() != w.seq || w.sh.shm.Lost()) {
			// (A lost shm's Wait returns at once: its waiters learn of it
			// from their catch-up.)
			close(w.ch)
			w.ch = nil
		}
		w.mu.Unlock()
	}
}

// stop ends the watching goroutine, before the shared memory is unmapped.
func (w *durableWatch) stop() {
	w.mu.Lock()
	w.closed = true
	running, done := w.running, w.done
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	w.mu.Unlock()
	if running {
		w.sh.shm.Wake(syncSeq) // (wakes the other processes' waiters too: they look again)
		<-done
	}
}
