package handle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultWindow is the write-behind batching window: the reference
// harness's LIVE_WRITE_BATCH_MAX_DELAY_MS.
const DefaultWindow = 200 * time.Millisecond

// ErrClosed is returned by Enqueue after Close.
var ErrClosed = errors.New("handle: write-behind closed")

// WriteBehindConfig configures a WriteBehind.
type WriteBehindConfig[T any] struct {
	// Write stores one batch, in order. It must not retain the slice.
	Write func(ctx context.Context, batch []T) error
	// Window is how long the first pending item waits before a background
	// write; later items join without extending it. Default DefaultWindow.
	Window time.Duration
	// Name labels log lines (the session id).
	Name string
	// Logger receives the background-failure warning; default discards.
	Logger *slog.Logger
	// AfterFunc arms the window timer; default time.AfterFunc. Tests pass a
	// fake clock.
	AfterFunc func(d time.Duration, f func()) Timer
	// Stats, if set, counts what this buffer does, with every other
	// buffer given the same Stats.
	Stats *Stats
}

// Stats counts what the WriteBehinds that share it do: a store gives one
// to all of its buffers and reports them as a whole. Its fields are
// atomics, updated as the buffers work.
type Stats struct {
	// Buffered is the number of items enqueued and not yet written: in a
	// buffer, or in a write in flight. A gauge. A buffer whose Close
	// failed to write them no longer counts them (it drops them).
	Buffered atomic.Int64
	// Failures counts the background writes that failed (each pauses its
	// buffer until the next explicit Drain). A counter.
	Failures atomic.Uint64
}

// Timer is the part of *time.Timer a WriteBehind uses.
type Timer interface{ Stop() bool }

// WriteBehind batches items enqueued synchronously and writes them in the
// background: the first item of an idle buffer arms one timer of Window,
// and when it fires the whole buffer is written as one batch, in order. A
// failed background write keeps its batch and stops the timer until the
// next Drain, which returns its error; each item is written exactly once.
// Close drains what is left (docs/DURABILITY.md, What a flush does). It is
// safe for concurrent use.
type WriteBehind[T any] struct {
	cfg WriteBehindConfig[T]

	mu       sync.Mutex
	buf      []T
	timer    Timer
	paused   bool
	draining bool          // a write is in flight
	done     chan struct{} // closed when the write in flight ends
	closed   bool
	bg       sync.WaitGroup // background drains

	// For cfg.Stats: the items of the write in flight, this buffer's
	// share of Stats.Buffered, and whether Close is over (the share is 0
	// from then on).
	inflight, counted int
	released          bool
}

// NewWriteBehind returns a WriteBehind; cfg.Write must be set.
func NewWriteBehind[T any](cfg WriteBehindConfig[T]) *WriteBehind[T] {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.AfterFunc == nil {
		cfg.AfterFunc = func(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
	}
	return &WriteBehind[T]{cfg: cfg}
}

// Enqueue adds items to the buffer without blocking on I/O.
func (w *WriteBehind[T]) Enqueue(items ...T) error {
	if len(items) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.buf = append(w.buf, items...)
	w.account()
	if !w.paused && w.timer == nil {
		w.bg.Add(1)
		w.timer = w.cfg.AfterFunc(w.cfg.Window, w.fire)
	}
	return nil
}

// Pending returns the number of buffered items not yet written.
func (w *WriteBehind[T]) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.buf)
}

// Paused reports whether a background failure paused the automatic path.
func (w *WriteBehind[T]) Paused() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.paused
}

func (w *WriteBehind[T]) fire() {
	defer w.bg.Done()
	w.mu.Lock()
	w.timer = nil
	w.mu.Unlock()
	if err := w.drain(context.Background(), false); err != nil {
		if w.cfg.Stats != nil {
			w.cfg.Stats.Failures.Add(1)
		}
		w.cfg.Logger.Warn("background write for session \""+w.cfg.Name+"\" failed (buffered events retained)",
			slog.String("session", w.cfg.Name), slog.Any("error", err))
	}
}

// Drain writes everything buffered, waiting for a write in flight first,
// until a pass finds the buffer empty. It returns the first write error;
// the failed batch stays buffered for the next Drain.
func (w *WriteBehind[T]) Drain(ctx context.Context) error { return w.drain(ctx, true) }

func (w *WriteBehind[T]) drain(ctx context.Context, explicit bool) error {
	for {
		w.mu.Lock()
		for w.draining {
			done := w.done
			w.mu.Unlock()
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
			w.mu.Lock()
		}
		if len(w.buf) == 0 || (!explicit && w.paused) {
			w.mu.Unlock()
			return nil
		}
		batch := w.buf
		w.buf = nil
		w.inflight = len(batch)
		w.draining, w.done = true, make(chan struct{})
		w.mu.Unlock()

		err := w.cfg.Write(ctx, batch)

		w.mu.Lock()
		w.draining = false
		w.inflight = 0
		close(w.done)
		if err != nil {
			w.buf = append(batch, w.buf...)
			if !explicit {
				w.paused = true
			}
			w.account()
			w.mu.Unlock()
			return err
		}
		w.paused = false
		w.account()
		w.mu.Unlock()
	}
}

// Close drains the buffer and stops the automatic path; later Enqueues
// fail with ErrClosed. It returns the drain's error; the items it could not
// write are dropped with the WriteBehind. It is idempotent (a second Close
// returns nil).
func (w *WriteBehind[T]) Close(ctx context.Context) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	if w.timer != nil && w.timer.Stop() {
		w.timer = nil
		w.bg.Done()
	}
	w.mu.Unlock()
	err := w.drain(ctx, true)
	w.bg.Wait()
	if err == nil {
		err = w.drain(ctx, true) // a background drain may have failed meanwhile
	}
	w.mu.Lock()
	w.released = true
	w.account()
	w.mu.Unlock()
	return err
}

// account brings this buffer's share of Stats.Buffered up to date. Called
// with w.mu held.
func (w *WriteBehind[T]) account() {
	s := w.cfg.Stats
	if s == nil {
		return
	}
	n := len(w.buf) + w.inflight
	if w.released {
		n = 0
	}
	if n != w.counted {
		s.Buffered.Add(int64(n - w.counted))
		w.counted = n
	}
}
