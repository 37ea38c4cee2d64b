package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestTailLastEvents(t *testing.T) {
	out, code := cli(t, "tail", "beta", "--dir", copyStore(t, cleanStore), "--n", "3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	var e event.Event
	json.Unmarshal([]byte(lines[2]), &e)
	if e.Seq != 49 {
		t.Errorf("last line seq %d, want 49", e.Seq)
	}
	// -n, as the usage line spells it, is --n.
	if out, code := cli(t, "tail", "-n", "2", "beta", "--dir", copyStore(t, cleanStore)); code != 0 || strings.Count(out, "\n") != 2 {
		t.Fatalf("tail -n 2: exit %d:\n%s", code, out)
	}
}

// tail -f follows a store another engine is writing (here in-process, on
// its own files), across segment rolls.
func TestTailFollowsAWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{SegmentSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, _ := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	h.Append(ctx, testgen.Events(0, 5, 100)...)
	h.Flush(ctx)

	var out syncBuffer
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	// n above the total: under load the first poll may come after more
	// than a last-n window of events exists.
	go func() { done <- runTail(tctx, &out, dir, "live", 1000, true) }()
	const total = 300
	for seq := 5; seq < total; seq += 5 {
		if err := h.Append(ctx, testgen.Events(uint64(seq), 5, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\n") < total && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != total {
		t.Fatalf("followed %d events, want %d", len(lines), total)
	}
	for i, l := range lines {
		var e event.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq != uint64(i) {
			t.Fatalf("line %d: seq %d, %v", i, e.Seq, err)
		}
	}
}

// TestTailMissingSession: tail of a session that is not there fails with
// a not-found error, with -f too (it used to wait forever, silently).
func TestTailMissingSession(t *testing.T) {
	dir := copyStore(t, cleanStore)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := runTail(ctx, &bytes.Buffer{}, dir, "nope", 10, true)
	if !errors.Is(err, store.ErrSessionNotFound) || ctx.Err() != nil {
		t.Fatalf("tail -f of a missing session: %v (context: %v)", err, ctx.Err())
	}
	for _, args := range [][]string{{"tail", "nope", "-f"}, {"tail", "nope"}} {
		out, code := cliGuarded(t, append(args, "--dir", dir)...)
		if code != 1 || !strings.Contains(out, `session "nope" not found`) {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
	}
	// A session deleted before the tail is not there either.
	cli(t, "delete", "alpha", "--dir", dir)
	if out, code := cliGuarded(t, "tail", "alpha", "-f", "--dir", dir); code != 1 || !strings.Contains(out, "not found") {
		t.Errorf("tail -f of a deleted session: exit %d\n%s", code, out)
	}
}
