package engine_test

// A Handle.Wait woken by a flush of another process: the flush's notify
// must make the futex wake-up call when exactly one sleeper (this
// process's watching goroutine) waits on the shared word. With the polls
// that would otherwise end the Wait a few milliseconds later turned off
// (engine.NoWaitPolls), a lost wake-up leaves the Wait asleep until its
// context ends: the test tells a real wake from a poll without measuring
// time.

import (
	"context"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// waitOneSleeper waits until db's store counts exactly one sleeper on
// the notify word (the Wait's watcher), and fails if there are more.
func waitOneSleeper(t *testing.T, db *engine.DB, waited <-chan error) {
	t.Helper()
	for i := 0; engine.SyncWaiters(db) == 0; i++ {
		select {
		case err := <-waited:
			t.Fatalf("the Wait ended (%v) before a sleeper counted on the notify word, and before anything was flushed", err)
		default:
		}
		if i == 100000 {
			t.Fatal("the Wait never went to sleep on the notify word")
		}
		time.Sleep(50 * time.Microsecond)
	}
	if n := engine.SyncWaiters(db); n != 1 {
		t.Fatalf("%d sleepers on the notify word, want exactly the Wait's one", n)
	}
}

// wantWoken waits for the Wait's result: it must be woken, with the count.
func wantWoken(t *testing.T, waited <-chan error, got *uint64, want uint64) {
	t.Helper()
	if err := <-waited; err != nil {
		t.Fatalf("the Wait was not woken by the other process's flush (its polls are off): %v", err)
	}
	if *got != want {
		t.Fatalf("the Wait returned %d events, want %d", *got, want)
	}
}

// TestWaitWokenAcrossDBs: two DBs on one store (as two processes: each
// maps the shared memory and locks through its own files); a read handle
// of one waits, the other flushes.
func TestWaitWokenAcrossDBs(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := engine.NoWaitPolls(&engine.Options{CompactInterval: -1})
	writer, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close()
	waiter, err := engine.OpenStore(t, dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	w, err := writer.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Append(ctx, testgen.Event(0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := waiter.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for round := uint64(1); round <= 3; round++ {
		wctx, cancel := context.WithTimeout(ctx, engine.NoPollFor/2) // (only a lost wake-up meets it)
		waited := make(chan error, 1)
		var got uint64
		go func() {
			var err error
			got, err = r.Wait(wctx, round)
			waited <- err
		}()
		waitOneSleeper(t, waiter, waited)
		if err := w.Append(ctx, testgen.Event(round, 100)); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		wantWoken(t, waited, &got, round+1)
		cancel()
	}
}

// TestWaitWokenAcrossProcesses: the writer is another OS process (this
// test binary again, serving a store: enginetest.StartPeer).
func TestWaitWokenAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	peer := enginetest.StartPeer(t, dir)
	w, err := peer.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Append(ctx, testgen.Event(0, 100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waiter, err := engine.OpenStore(t, dir, engine.NoWaitPolls(&engine.Options{CompactInterval: -1}))
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	r, err := waiter.Open(ctx, "s", store.Read)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wctx, cancel := context.WithTimeout(ctx, engine.NoPollFor/2) // (only a lost wake-up meets it)
	defer cancel()
	waited := make(chan error, 1)
	var got uint64
	go func() {
		var err error
		got, err = r.Wait(wctx, 1)
		waited <- err
	}()
	waitOneSleeper(t, waiter, waited)
	if err := w.Append(ctx, []event.Event{testgen.Event(1, 100)}...); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	wantWoken(t, waited, &got, 2)
}
