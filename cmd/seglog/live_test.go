package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// TestReadCommandsOnALiveStore: while a host has the store open and
// writes it (a DB in this process: its locks are those of another
// process), every read command works and shows what the host flushed,
// and nothing the host did not flush; compact and check --repair work
// beside it too. (The host is FlushOnly: its unflushed events stay in its
// memory, where no window's end makes them durable during the test.)
func TestReadCommandsOnALiveStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{FlushOnly: true, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
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
		{"ls"}, {"stats"}, {"segments"}, {"check"}, {"cat", "live"}, {"tail", "--n", "2", "live"}, {"changes", "--json"},
		{"compact", "--roll"}, {"check", "--repair"}, {"cat", "live"},
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
		case "changes":
			if !strings.Contains(out, `"seq":6`) || strings.Contains(out, `"seq":7`) {
				t.Errorf("changes do not end at the last flushed event:\n%s", out)
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

// deleteOnLine is export's output: once a line starting with after is
// written, it deletes session id through the host's DB (another process,
// as far as the store's locks go).
type deleteOnLine struct {
	strings.Builder
	t         *testing.T
	host      *engine.DB
	after, id string
	done      bool
}

func (d *deleteOnLine) Write(p []byte) (int, error) {
	if !d.done && strings.HasPrefix(string(p), d.after) {
		d.done = true
		if err := d.host.Delete(context.Background(), d.id); err != nil {
			d.t.Errorf("host deletes %s: %v", d.id, err)
		}
	}
	return d.Builder.Write(p)
}

// TestExportAllSkipsASessionDeletedMeanwhile: export --all lists the
// sessions, then exports them one by one; one the host deletes meanwhile
// is skipped with a line saying so, the others are exported, and the
// export succeeds.
func TestExportAllSkipsASessionDeletedMeanwhile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, id := range []string{"a", "b", "c"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		h.Append(ctx, testgen.Events(0, 2, 100)...)
		if err := h.Close(); err != nil { // flushes
			t.Fatal(err)
		}
	}
	root := filepath.Join(t.TempDir(), "export")
	out := &deleteOnLine{t: t, host: db, after: "a: ", id: "b"}
	if err := runExport(out, nil, dir, root, nil, false); err != nil {
		t.Fatalf("export --all with a session deleted meanwhile: %v\n%s", err, out.String())
	}
	if !out.done {
		t.Fatalf("a was not exported first:\n%s", out.String())
	}
	got := out.String()
	for _, line := range []string{"a: 2 events -> ", "b: deleted meanwhile, skipped\n", "c: 2 events -> "} {
		if !strings.Contains(got, line) {
			t.Errorf("export printed no %q:\n%s", line, got)
		}
	}
	files, _ := filepath.Glob(filepath.Join(root, "*", "*", "session.v3.jsonl*"))
	if len(files) != 2 {
		t.Errorf("export wrote %v, want the logs of a and c", files)
	}
}

// TestSegmentsWhileAHostSeals: a host seals the active segment while
// segments scans it, trimming the preallocated tail under the scan's
// mapping; segments neither crashes (SIGBUS) nor reports damage: it scans
// the file again at its new size.
func TestSegmentsWhileAHostSeals(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	// (PreallocateStart: the segment is zero-filled whole at creation)
	db, err := enginetest.OpenStore(t, dir, &engine.Options{SegmentSize: 256 << 10, PreallocateStart: 256 << 10, CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Append(ctx, testgen.Events(0, 1, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	first := filepath.Join(dir, segment.Name(1))
	if fi, err := os.Stat(first); err != nil || fi.Size() != 256<<10 {
		t.Fatalf("segment 1 is not preallocated: %v %v", fi, err)
	}
	sealed := false
	beforeScan = func(path string, opened bool) {
		if path != first || !opened || sealed {
			return
		}
		sealed = true
		// Incompressible events until segment 1 is sealed and trimmed.
		for i := 0; i < 64; i++ {
			b := make([]byte, 48<<10)
			rand.Read(b)
			data, _ := json.Marshal(map[string]string{"blob": base64.StdEncoding.EncodeToString(b)})
			if err := h.Append(ctx, event.Event{Seq: h.Len(), Type: "turn/start", Time: 1, Data: data}); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(first); err == nil && fi.Size() < 256<<10 {
				return
			}
		}
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			fi, _ := e.Info()
			t.Log(e.Name(), fi.Size())
		}
		t.Fatal("segment 1 was not sealed and trimmed")
	}
	defer func() { beforeScan = nil }()
	out, code := cli(t, "segments", "--json", "--dir", dir)
	if !sealed {
		t.Fatal("the host did not seal segment 1 during the scan")
	}
	var segs []struct {
		ID     uint64 `json:"id"`
		Sealed bool   `json:"sealed"`
		Events int    `json:"events"`
		Error  string `json:"error"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &segs) != nil || len(segs) == 0 || segs[0].ID != 1 || !segs[0].Sealed || segs[0].Error != "" || segs[0].Events < 2 {
		t.Errorf("segments while a host seals segment 1: exit %d\n%s", code, out)
	}
}

// TestSegmentsWhileACompactionRemoves: a segment removed between the listing
// and its scan (a compaction beside us) is left out, not reported as
// damage.
func TestSegmentsWhileACompactionRemoves(t *testing.T) {
	dir := copyStore(t, cleanStore)
	first := filepath.Join(dir, segment.Name(1))
	enginetest.ExpectProblem(t, dir, "segment missing") // the test removes it behind the index's back
	beforeScan = func(path string, opened bool) {
		if path == first && !opened {
			os.Remove(path)
		}
	}
	defer func() { beforeScan = nil }()
	out, code := cli(t, "segments", "--json", "--dir", dir)
	var segs []struct {
		ID    uint64 `json:"id"`
		Error string `json:"error"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &segs) != nil || len(segs) == 0 || segs[0].ID == 1 {
		t.Errorf("segments while segment 1 is removed: exit %d, want 0 and no segment 1\n%s", code, out)
	}
}

// TestInspectNamesALiveWriter: seglog inspect of a session a live writer
// holds (a DB in this process: its locks are another process's) says so,
// naming the writer (this process), that its turn is in progress, and
// the closers as what a resume would append if that writer died; once it
// lets go, the turn is shown interrupted, with no holder.
func TestInspectNamesALiveWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{CompactInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	open := enginetest.OneTurn()[:3] // turn/start, user/message, step/start: the turn open
	if err := h.Append(ctx, open...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := cliSplit(t, "inspect", "live", "--dir", dir)
	held := fmt.Sprintf("session \"live\" is held by a live writer (process %d on host ", os.Getpid())
	if code != 0 || strings.Count(stdout, "\n") != 5 || !strings.Contains(stderr, held) ||
		!strings.Contains(stderr, "its turn is in progress, not interrupted") ||
		!strings.Contains(stderr, "seq 3..4: closers a resume would append if that writer died (not stored)") {
		t.Errorf("inspect beside a live writer: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code = cliSplit(t, "inspect", "live", "--dir", dir)
	if code != 0 || strings.Count(stdout, "\n") != 5 || strings.Contains(stderr, "live writer") ||
		!strings.Contains(stderr, "seq 3..4: closers a resume would append to the open turn (not stored)") ||
		!strings.Contains(stderr, "seglog: turn 0 is open, in step 0\n") {
		t.Errorf("inspect once the writer let go: exit %d\n%s%s", code, stdout, stderr)
	}
}
