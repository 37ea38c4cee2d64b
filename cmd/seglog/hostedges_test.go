package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// seglog inspect <id> (the seed's name) is the balanced view: the log and
// the closers of its open turn, flagged on stderr, stored nowhere; the
// same output as cat --balanced, --from and --n included.
func TestInspectCommand(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	open := []event.Event{
		{Seq: 0, Type: "turn/start", Time: 1, Data: []byte(`{"turn":0}`)},
		{Seq: 1, Type: "step/start", Time: 1, Data: []byte(`{"turn":0,"step":0}`)},
		{Seq: 2, Type: "assistant/message", Time: 1, Data: []byte(`{"turn":0,"step":0,"message":{"id":"m1","role":"assistant","content":[{"type":"tool-call","id":"c1","name":"ls","arguments":{}}]}}`)},
		{Seq: 3, Type: "tool/call", Time: 1, Data: []byte(`{"turn":0,"step":0,"callId":"c1","name":"ls","arguments":{}}`)},
	}
	if err := h.Append(ctx, open...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cliSplit(t, "inspect", "s", "--dir", dir)
	// 4 stored, then a tool/result for c1, step/end, turn/end.
	if code != 0 || strings.Count(out, "\n") != 7 || !strings.Contains(out, `"kind":"interrupted"`) ||
		!strings.Contains(out, `TOOL_OUTCOME_UNKNOWN`) || !strings.Contains(errOut, "seq 4..6") {
		t.Fatalf("inspect: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, args := range [][]string{nil, {"--from", "2", "--n", "2"}, {"-n", "1"}} {
		in, inErr, inCode := cliSplit(t, append([]string{"inspect", "s", "--dir", dir}, args...)...)
		cat, catErr, catCode := cliSplit(t, append([]string{"cat", "--balanced", "s", "--dir", dir}, args...)...)
		if in != cat || inErr != catErr || inCode != catCode || inCode != 0 {
			t.Errorf("inspect %v differs from cat --balanced:\n%s%s(exit %d)\n--\n%s%s(exit %d)", args, in, inErr, inCode, cat, catErr, catCode)
		}
	}
	if out, code := cli(t, "cat", "s", "--dir", dir); code != 0 || strings.Count(out, "\n") != 4 {
		t.Errorf("cat after inspect: exit %d, the closers were stored?\n%s", code, out)
	}
	if _, code := cli(t, "inspect", "--dir", dir); code != 2 {
		t.Errorf("inspect without an id: exit %d, want 2", code)
	}
	if out, code := cli(t, "inspect", "nope", "--dir", dir); code != 1 || !strings.Contains(out, `session "nope" not found`) {
		t.Errorf("inspect of a missing session: exit %d\n%s", code, out)
	}
}

// help import says how a session's ID is encoded in its directory name,
// and its examples are what import expects; a log under another name is
// refused naming the directory it should be in.
func TestHelpImportEncodedID(t *testing.T) {
	out, code := cli(t, "help", "import")
	if code != 0 {
		t.Fatalf("help import: exit %d\n%s", code, out)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for id, enc := range map[string]string{"agent/7 ü": "agent~002F7~0020~00FC", "😀": "~D83D~DE00", ".": "~002E", "..": "~002E~002E"} {
		got, err := jsonl.EncodeID(id)
		if err != nil || got != enc {
			t.Errorf("EncodeID(%q) = %q, %v; help import says %q", id, got, err, enc)
		}
		if !strings.Contains(flat, enc) {
			t.Errorf("help import does not show %q's encoding %s:\n%s", id, enc, out)
		}
	}
	for _, want := range []string{`letters, digits, '.', '_' and '-' stay`, "four upper-case hex digits", "_no-cwd"} {
		if !strings.Contains(flat, want) {
			t.Errorf("help import lacks %q:\n%s", want, out)
		}
	}

	// The example imports under its encoded name, and is refused under
	// the raw one, naming the right directory.
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	put := func(name string) string {
		b, err := jsonl.Encode(store.Header{Version: 3, ID: "agent/7 ü", CreatedAt: 1}, testgen.V3Events(0, 2, 50), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, "_no-cwd", name, "session.v3.jsonl")
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	put("agent~002F7~0020~00FC")
	if out, code := cli(t, "import", root, "--dir", dir); code != 0 {
		t.Fatalf("import of the help's example: exit %d\n%s", code, out)
	}
	os.RemoveAll(root)
	put("agent_7")
	out, code = cli(t, "import", root, "--dir", dir)
	if code != 1 || !strings.Contains(out, "its directory is named agent~002F7~0020~00FC") {
		t.Errorf("import under a wrong name: exit %d\n%s", code, out)
	}
}

// A session a host holds is refused naming the holder: its pid, its
// machine and since when, not only "already owned".
func TestHeldSessionNamesItsHolder(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "held", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Append(ctx, testgen.Events(0, 2, 50)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	for _, args := range [][]string{{"delete", "held"}, {"migrate", "held"}} {
		_, errOut, code := cliSplit(t, append(args, "--dir", dir)...)
		want := fmt.Sprintf(`seglog: session "held" already owned by an active write handle (process %d on host %q since `, os.Getpid(), host)
		if code != 1 || !strings.HasPrefix(errOut, want) || !strings.HasSuffix(errOut, "Z)\n") {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant it to start %s", args, code, errOut, want)
		}
	}
}

// tail -f prints its backlog at once, before it waits for anything: here
// the writer holds the session open and writes nothing more, so a tail
// that waited for a write, a window or a poll of the writer before its
// first print would print nothing (the deadline only bounds the hang).
// Then it follows what is flushed.
func TestTailFollowPrintsBacklogFirst(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, err := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Append(ctx, testgen.Events(0, 50, 100)...); err != nil {
		t.Fatal(err)
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// And one enqueued, in a window that has not ended: not durable, not
	// shown (tail prints only what is flushed), and not waited for.
	if err := h.Enqueue(testgen.Events(50, 1, 100)...); err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runTail(tctx, &out, dir, "live", 10, true) }()
	waitLines := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for strings.Count(out.String(), "\n") < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := strings.Count(out.String(), "\n"); got < n {
			t.Fatalf("tail -f printed %d lines, want %d:\n%s", got, n, out.String())
		}
	}
	waitLines(10)
	if !strings.HasPrefix(out.String(), `{"seq":40,`) {
		t.Errorf("backlog does not start at seq 40:\n%s", out.String())
	}
	if err := h.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	waitLines(11)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 11 || !strings.HasPrefix(lines[10], `{"seq":50,`) {
		t.Errorf("tail -f after the flush:\n%s", out.String())
	}
}
