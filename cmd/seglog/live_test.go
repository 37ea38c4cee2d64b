package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/internal/testgen"
)

// TestReadCommandsOnALiveStore: while a host has the store open and
// writes it (a DB in this process: its locks are those of another
// process), every read command works and shows what the host flushed,
// and nothing the host did not flush.
func TestReadCommandsOnALiveStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := engine.Open(dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, engine.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	h.Append(ctx, testgen.Events(0, 7, 100)...)
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	h.Append(ctx, testgen.Events(7, 3, 100)...) // not flushed

	for _, args := range [][]string{
		{"ls"}, {"stats"}, {"segments"}, {"check"}, {"cat", "live"}, {"tail", "--n", "2", "live"},
	} {
		out, code := cli(t, append(args, "--dir", dir)...)
		if code != 0 {
			t.Fatalf("seglog %s on a live store: exit %d: %s", strings.Join(args, " "), code, out)
		}
		switch args[0] {
		case "ls":
			if !strings.Contains(out, "live") || !strings.Contains(out, " 7 ") {
				t.Errorf("ls shows no session of 7 flushed events:\n%s", out)
			}
		case "cat":
			if n := strings.Count(out, "\n"); n != 7 {
				t.Errorf("cat printed %d events, the host flushed 7:\n%s", n, out)
			}
		case "tail":
			if !strings.Contains(out, `"seq":6`) || strings.Contains(out, `"seq":7`) {
				t.Errorf("tail does not end at the last flushed event:\n%s", out)
			}
		}
	}
	root := filepath.Join(t.TempDir(), "export")
	if out, code := cli(t, "export", "live", root, "--dir", dir); code != 0 {
		t.Fatalf("export on a live store: exit %d: %s", code, out)
	}
	files, _ := filepath.Glob(filepath.Join(root, "*", "*", "session.v3.jsonl*"))
	if len(files) != 1 {
		t.Fatalf("export wrote %v", files)
	}
	if b, err := os.ReadFile(files[0]); err == nil && strings.Count(string(b), "\n") != 8 { // the header and 7 events
		t.Errorf("export holds %d lines, want the header and 7 events:\n%s", strings.Count(string(b), "\n"), b)
	}
}
