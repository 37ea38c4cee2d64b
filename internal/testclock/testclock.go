// Package testclock is a fake clock for write-behind windows in tests:
// timers fire only when the test calls Advance, in the calling goroutine.
//
// testclock imports only handle (for its Timer interface) and does no I/O.
package testclock

import (
	"sync"
	"time"

	"github.com/seglog/seglog/handle"
)

// Clock is a fake clock. The zero value is ready at time zero.
type Clock struct {
	mu     sync.Mutex
	now    time.Duration
	timers []*timer
}

type timer struct {
	c       *Clock
	at      time.Duration
	f       func()
	stopped bool
}

// AfterFunc arms f to run when the clock has advanced by d. It has the
// signature of handle.WriteBehindConfig.AfterFunc and engine.Options.AfterFunc.
func (c *Clock) AfterFunc(d time.Duration, f func()) handle.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, at: c.now + d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// Advance moves the clock forward by d and runs the timers that became
// due, in the calling goroutine.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += d
	var due, keep []*timer
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case t.at <= c.now:
			t.stopped = true
			due = append(due, t)
		default:
			keep = append(keep, t)
		}
	}
	c.timers = keep
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}
