package engine_test

// DB.Close racing every kind of operation: each call either succeeds or
// fails with ErrClosed (ErrHandleClosed), nothing panics or races, and
// the store, reopened after a power cut right after Close, holds every
// event an Append returned for, every session a Delete returned for gone
// and every other one whole.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/internal/testlong"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
	"github.com/seglog/seglog/vfs"
)

// TestDBCloseRacesOperations: goroutines create sessions and append to
// them (bulk batches written behind, and small ones), write through open
// handles and through handles they open and close again, flush handles
// and the DB, read, list, stat, wait, fork, delete, compact, measure
// usage and register types, each until a call fails with ErrClosed,
// while DB.Close is called after a random number of calls. Run it with
// -race. 60 rounds (15 with -short, 600 with SEGLOG_LONG=1).
func TestDBCloseRacesOperations(t *testing.T) {
	rounds := testlong.Pick(15, 60, 600)
	for round := range rounds {
		t.Run(fmt.Sprint(round), func(t *testing.T) { closeRaceRound(t, round) })
	}
}

// closeRace is one round's bookkeeping.
type closeRace struct {
	t      *testing.T
	calls  atomic.Int64 // calls made, to place Close among them
	mu     sync.Mutex
	errs   []error
	want   map[string]int // session -> events appended (an Append returned nil)
	gone   map[string]bool
	forks  map[string]bool
	opened []*engine.Handle // write handles left open for DB.Close
}

// ok reports whether err is nil; ErrClosed (or ErrHandleClosed) is no
// failure, but ends the caller's loop; anything else is recorded.
func (r *closeRace) ok(op string, err error) bool {
	r.calls.Add(1)
	if err == nil {
		return true
	}
	if !errors.Is(err, store.ErrClosed) && !errors.Is(err, store.ErrHandleClosed) {
		r.fail(fmt.Errorf("%s: %w", op, err))
	}
	return false
}

func (r *closeRace) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

func (r *closeRace) appended(id string, n int) {
	r.mu.Lock()
	r.want[id] = n
	r.mu.Unlock()
}

const (
	raceParentLen = 40 // events of session p, forked and read
	raceVictims   = 6  // sessions v0.. with 10 events each, deleted
)

func closeRaceRound(t *testing.T, round int) {
	ctx := context.Background()
	mem := vfs.NewMem()
	opts := func(fs vfs.FS) *engine.Options {
		return &engine.Options{FS: fs, SegmentSize: 128 << 10, FrameBytes: 4 << 10, CompactInterval: -1}
	}
	db, err := engine.OpenStore(t, "/db", opts(mem))
	if err != nil {
		t.Fatal(err)
	}
	r := &closeRace{t: t, want: map[string]int{}, gone: map[string]bool{}, forks: map[string]bool{}}
	seed := func(id string, n int) {
		h, err := db.Create(ctx, enginetest.Meta(id))
		if err == nil {
			err = h.Append(ctx, testgen.Events(0, n, behindSize)...)
		}
		if err == nil {
			err = h.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		r.want[id] = n
	}
	seed("p", raceParentLen)
	for i := range raceVictims {
		seed(fmt.Sprintf("v%d", i), 10)
	}
	seed("w0", 10)
	seed("w1", 10)
	w0, err := db.Open(ctx, "w0", store.Write)
	if err != nil {
		t.Fatal(err)
	}
	wait, err := db.Open(ctx, "p", store.Read)
	if err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	// Creators: new sessions, bulk or small appends, flushed or not,
	// closed or left open.
	for g := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("c%d-%d", g, i)
				h, err := db.Create(ctx, enginetest.Meta(id))
				if !r.ok("create", err) {
					return
				}
				n, per := 0, 5
				if i%2 == 0 {
					per = 60 // fills frames: written behind the Append
				}
				closed := false
				for b := range 3 {
					if !r.ok("append", h.Append(ctx, testgen.Events(uint64(n), per, behindSize)...)) {
						closed = true
						break
					}
					n += per
					r.appended(id, n)
					if b == 1 && !r.ok("flush", h.Flush(ctx)) {
						closed = true
						break
					}
				}
				if i%3 == 2 {
					r.mu.Lock()
					r.opened = append(r.opened, h) // for DB.Close to flush
					r.mu.Unlock()
				} else if err := h.Close(); err != nil {
					r.fail(fmt.Errorf("close of %s: %w", id, err))
				}
				if closed {
					return
				}
			}
		})
	}
	// A write handle opened before, appending and enqueuing.
	wg.Go(func() {
		defer func() {
			if err := w0.Close(); err != nil {
				r.fail(fmt.Errorf("close of w0: %w", err))
			}
		}()
		for n := 10; ; n += 4 {
			if !r.ok("append w0", w0.Append(ctx, testgen.Events(uint64(n), 2, behindSize)...)) {
				return
			}
			r.appended("w0", n+2)
			if !r.ok("enqueue w0", w0.Enqueue(testgen.Events(uint64(n+2), 2, behindSize)...)) {
				return
			}
			r.appended("w0", n+4) // (an Enqueue that returned nil is written by DB.Close at the latest)
			if n%8 == 2 && !r.ok("flush w0", w0.Flush(ctx)) {
				return
			}
		}
	})
	// Write opens: each checks the log, appends and closes.
	wg.Go(func() {
		for n := 10; ; n += 3 {
			h, err := db.Open(ctx, "w1", store.Write)
			if !r.ok("open w1", err) {
				return
			}
			err = h.Append(ctx, testgen.Events(uint64(n), 3, behindSize)...)
			if err == nil {
				r.appended("w1", n+3)
			}
			cerr := h.Close()
			if cerr != nil {
				r.fail(fmt.Errorf("close of w1: %w", cerr))
			}
			if !r.ok("append w1", err) {
				return
			}
		}
	})
	// Readers: read opens, Read, List, Stat, Usage; and RegisterTypes.
	wg.Go(func() {
		for {
			h, err := db.Open(ctx, "p", store.Read)
			if !r.ok("open p", err) {
				return
			}
			got, err := h.Read(ctx, 0, -1)
			h.Close()
			if !r.ok("read p", err) {
				return
			}
			if len(got) != raceParentLen || samePrefix(got) != "" {
				r.fail(fmt.Errorf("read p: %d events, not the %d stored", len(got), raceParentLen))
				return
			}
			if _, err := db.List(ctx); !r.ok("list", err) {
				return
			}
			if _, err := db.Stat(ctx, "p"); !r.ok("stat", err) {
				return
			}
			if _, err := db.Usage(ctx); !r.ok("usage", err) {
				return
			}
			if !r.ok("register types", db.RegisterTypes(ctx, "acme/*")) {
				return
			}
		}
	})
	// A Wait for events that never come: Close ends it.
	wg.Go(func() {
		n, err := wait.Wait(ctx, raceParentLen+1000)
		if err == nil {
			r.fail(fmt.Errorf("wait returned %d events", n))
		} else {
			r.ok("wait", err)
		}
		wait.Close()
	})
	// Forks of p.
	wg.Go(func() {
		for i := 0; ; i++ {
			id := fmt.Sprintf("f%d", i)
			c, err := db.Fork(ctx, "p", 20, enginetest.Meta(id))
			if !r.ok("fork", err) {
				return
			}
			r.mu.Lock()
			r.forks[id] = true
			r.mu.Unlock()
			if err := c.Close(); err != nil {
				r.fail(fmt.Errorf("close of fork %s: %w", id, err))
			}
		}
	})
	// Deletes, each of another session.
	wg.Go(func() {
		for i := range raceVictims {
			id := fmt.Sprintf("v%d", i)
			if !r.ok("delete", db.Delete(ctx, id)) {
				return
			}
			r.mu.Lock()
			r.gone[id] = true
			r.mu.Unlock()
		}
	})
	// Compactions (rolling the active segment) and DB flushes.
	wg.Go(func() {
		for {
			if _, err := db.Compact(ctx, engine.CompactOptions{Roll: true}); !r.ok("compact", err) {
				return
			}
		}
	})
	wg.Go(func() {
		for {
			if !r.ok("DB.Flush", db.Flush(ctx)) {
				return
			}
		}
	})

	rng := rand.New(rand.NewPCG(uint64(round), 11))
	for goal := int64(rng.IntN(300)); r.calls.Load() < goal; {
		// let them get going
	}
	if err := db.Close(); err != nil {
		t.Fatalf("DB.Close: %v", err)
	}
	wg.Wait()
	for _, h := range r.opened {
		if err := h.Close(); err != nil {
			r.fail(fmt.Errorf("close of %s after DB.Close: %w", h.ID(), err))
		}
	}
	// A call after Close fails with ErrClosed.
	if _, err := db.Create(ctx, enginetest.Meta("late")); !errors.Is(err, store.ErrClosed) {
		r.fail(fmt.Errorf("create after Close: %v", err))
	}
	for _, err := range r.errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// A power cut right after Close: everything is there.
	db2, err := engine.OpenStore(t, "/db", opts(mem.CrashClone(vfs.CrashConfig{})))
	if err != nil {
		t.Fatalf("reopen after Close and a power cut: %v", err)
	}
	defer db2.Close()
	for id, n := range r.want {
		got := readBehindLog(t, db2, id)
		switch {
		case r.gone[id]:
			if got != nil {
				t.Errorf("%s: deleted, but %d events after reopen", id, len(got))
			}
		case len(got) != n:
			t.Errorf("%s: %d events after reopen, want the %d appended", id, len(got), n)
		case samePrefix(got) != "":
			t.Errorf("%s: not the events appended", id)
		}
	}
	for id := range r.forks {
		got := readBehindLog(t, db2, id)
		if len(got) != 21 || samePrefix(got[:20]) != "" {
			t.Errorf("fork %s: %d events after reopen, want p's first 20 and the marker", id, len(got))
		}
	}
	t.Logf("%d calls, %d sessions, %d forks, %d deleted", r.calls.Load(), len(r.want), len(r.forks), len(r.gone))
}
