package engine

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// A failing index checkpoint (here: the index's file is gone from under
// it, as after ENOSPC or an I/O error) is off the flush path: flushes still
// succeed, the frames stay pending for the next checkpoint, a warning is
// logged, and a reopen (which re-reads everything after the index's last
// good checkpoint) loses nothing.
func TestIndexCheckpointFailure(t *testing.T) {
	ctx := context.Background()
	dir := checkedDir(t)
	var logs bytes.Buffer
	db, err := openStore(t, dir, &Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.Append(ctx, testgen.Events(0, 50, 200)...)
	h.Flush(ctx)
	if err := db.checkpoint(); err != nil {
		t.Fatal(err)
	}
	db.index.fail = errors.New("the index fails") // every later use fails
	h.Append(ctx, testgen.Events(50, 50, 200)...)
	if err := h.Flush(ctx); err != nil {
		t.Fatalf("flush with a failing index: %v", err)
	}
	if err := db.checkpoint(); err == nil {
		t.Fatal("checkpoint succeeded on a closed index")
	}
	db.mu.Lock()
	pending := len(db.mu.pend)
	db.mu.Unlock()
	if pending == 0 {
		t.Fatal("the frames of the failed checkpoint were dropped")
	}
	db.indexLoopOnce() // the background loop logs the failure
	if !strings.Contains(logs.String(), "index checkpoint failed") {
		t.Errorf("no warning logged: %s", logs.String())
	}
	h.Close()
	db.Close()
	db, err = openStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, _ := db.Open(ctx, "s", store.Read)
	got, err := r.Read(ctx, 0, -1)
	if err != nil || len(got) != 100 {
		t.Fatalf("after reopen %d events, %v", len(got), err)
	}
}
