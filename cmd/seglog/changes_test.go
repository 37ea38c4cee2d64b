package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/backend/jetstream/embedded"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// changeLines parses the JSON lines of seglog changes --json.
func changeLines(t *testing.T, out string) []store.Change {
	t.Helper()
	var cs []store.Change
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var c store.Change
		if err := json.Unmarshal([]byte(l), &c); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		cs = append(cs, c)
	}
	return cs
}

// TestChangesPrintsAndResumes: seglog changes --json prints every change,
// one JSON line each with its cursor, and --from a printed cursor prints
// the changes after it, in this run or the next.
func TestChangesPrintsAndResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := db.Create(ctx, store.Header{ID: "a", CreatedAt: 1})
	a.Append(ctx, testgen.Events(0, 5, 100)...)
	a.Flush(ctx)
	b, _ := db.Create(ctx, store.Header{ID: "b", CreatedAt: 1})
	b.Flush(ctx)
	b.Close()
	if _, err := db.Fork(ctx, "a", 3, store.Header{ID: "c", CreatedAt: 2}); err != nil {
		t.Fatal(err)
	}
	if err := db.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, code := cli(t, "changes", "--json", "--dir", dir)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	cs := changeLines(t, out)
	var got []string
	for _, c := range cs {
		got = append(got, c.Kind.String()+" "+c.Session)
	}
	want := "create a,append a,create b,fork c,append c,delete b"
	if strings.Join(got, ",") != want {
		t.Fatalf("changes: %v, want %s", got, want)
	}
	if cs[3].Parent != "a" || cs[3].N != 3 || cs[1].Seq != 0 || len(cs[1].Events) != 5 || cs[4].Seq != 3 {
		t.Errorf("fork %+v, append %+v", cs[3], cs[1])
	}
	out, code = cli(t, "changes", "--json", "--from", string(cs[2].Cursor), "--dir", dir)
	if rest := changeLines(t, out); code != 0 || len(rest) != 3 || rest[0].Kind != store.ChangeFork {
		t.Fatalf("--from the third change's cursor: exit %d\n%s", code, out)
	}
	// Without --json: a line per change, its cursor first.
	out, code = cli(t, "changes", "--dir", dir)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[3], string(cs[3].Cursor)+"\tfork\t\"c\"\tparent=\"a\" n=3") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	// A bad cursor is refused, naming the problem.
	out, code = cli(t, "changes", "--from", "e1-nonsense", "--dir", dir)
	if code != 1 || !strings.Contains(out, "invalid change cursor") {
		t.Errorf("a bad cursor: exit %d\n%s", code, out)
	}
}

// TestChangesFollowsAWriter: changes --follow prints what another engine
// writes (here in-process, on its own files), across segment rolls.
func TestChangesFollowsAWriter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{SegmentSize: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	h, _ := db.Create(ctx, store.Header{ID: "live", CreatedAt: 1})
	h.Flush(ctx)
	var out syncBuffer
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runChanges(tctx, &out, dir, "", &natsFlags{}, "", true, true) }()
	const total = 300
	for seq := 0; seq < total; seq += 5 {
		if err := h.Append(ctx, testgen.Events(uint64(seq), 5, 300)...); err != nil {
			t.Fatal(err)
		}
		if err := h.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for strings.Count(out.String(), "\n") < 1+total/5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	next := uint64(0)
	for i, c := range changeLines(t, out.String()) {
		if i == 0 {
			if c.Kind != store.ChangeCreate {
				t.Fatalf("first change %v", c.Kind)
			}
			continue
		}
		if c.Kind != store.ChangeAppend || c.Seq != next {
			t.Fatalf("change %d: %v at %d, want an append at %d", i, c.Kind, c.Seq, next)
		}
		next += uint64(len(c.Events))
	}
	if next != total {
		t.Fatalf("followed %d events, want %d", next, total)
	}
}

// TestChangesJetStream: seglog changes --nats prints a stream's feed as
// --dir prints the same store's (the cursors aside), and resumes from a
// printed cursor.
func TestChangesJetStream(t *testing.T) {
	srv, err := embedded.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	stream := srv.ClientURL() + "?stream=S&prefix=s&leases=S_LEASES"
	local := copyStore(t, cleanStore)
	if out, code := cli(t, "copy", "--from", local, "--to", stream, "--create"); code != 0 {
		t.Fatalf("copy: %d %s", code, out)
	}
	if out, code := cli(t, "changes", "--nats", "/not/nats"); code != exitUsage || !strings.Contains(out, "not a NATS address") {
		t.Errorf("--nats of a directory: %d %s", code, out)
	}
	want, code := cli(t, "changes", "--json", "--dir", local)
	if code != 0 {
		t.Fatal(want)
	}
	out, code := cli(t, "changes", "--json", "--nats", stream)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	got, exp := changeLines(t, out), changeLines(t, want)
	// The same store: the same creates, forks and deletes in order and
	// the same events per session (the stream's appends are batched as
	// they were published, not as the engine's frames).
	strip := func(cs []store.Change) string {
		var b strings.Builder
		evs := map[string][]string{}
		for _, c := range cs {
			if c.Kind != store.ChangeAppend {
				c.Cursor, c.Events = "", nil
				j, _ := json.Marshal(c)
				b.Write(j)
				b.WriteByte('\n')
				continue
			}
			for _, e := range c.Events {
				j, _ := json.Marshal(e)
				evs[c.Session] = append(evs[c.Session], string(j))
			}
		}
		j, _ := json.Marshal(evs)
		b.Write(j)
		return b.String()
	}
	if len(got) == 0 || strip(got) != strip(exp) {
		t.Fatalf("over the stream:\n%.2000s\nover the directory:\n%.2000s", strip(got), strip(exp))
	}
	for i, c := range got {
		if !strings.HasPrefix(string(c.Cursor), "j1-") {
			t.Fatalf("change %d: cursor %q is not a stream's", i, c.Cursor)
		}
	}
	mid := len(got) / 2
	out, code = cli(t, "changes", "--json", "--nats", stream, "--from", string(got[mid].Cursor))
	if code != 0 {
		t.Fatalf("--from: exit %d:\n%s", code, out)
	}
	if rest := changeLines(t, out); strip(rest) != strip(got[mid+1:]) {
		t.Fatalf("--from change %d:\n%s\nwant:\n%s", mid, strip(rest), strip(got[mid+1:]))
	}
}
