package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

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
	go func() { done <- runChanges(tctx, &out, dir, "", true, true) }()
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
