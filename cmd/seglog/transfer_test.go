package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// makeRoot writes a reference root of n sessions: every fourth one
// compressed, one seeded fork, one torn tail; plus a v4 log and one with
// an unknown event type, which import must refuse.
func makeRoot(t testing.TB, root string, n int) map[string][]event.Event {
	t.Helper()
	want := map[string][]event.Event{}
	write := func(h store.Header, evs []event.Event, compressed bool, tail string) {
		b, err := jsonl.Encode(h, evs, compressed, nil)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, tail...)
		path, _ := jsonl.LogPath(root, h, compressed)
		writeFile(t, path, b)
	}
	for i := range n {
		h := store.Header{Version: 3, ID: fmt.Sprintf("sess/%04d", i), CreatedAt: int64(1_700_000_000_000 + i), Cwd: fmt.Sprintf("/work/p%d", i%7)}
		evs := testgen.V3Events(0, 5+i%40, 250)
		tail := ""
		if i == 3 {
			tail = `{"type":"assistant/chunk","seq":99,"ti` // torn
		}
		write(h, evs, i%4 == 1, tail)
		want[h.ID] = evs
	}
	// A seeded fork: the parent's first 3 events, the marker, its own.
	fork := store.Header{Version: 3, ID: "fork", CreatedAt: 5, ParentSession: "sess/0000", IsSeeded: true, Origin: "subagent", DelegationDepth: 1}
	evs := append(testgen.V3Events(0, 3, 100), event.Event{Seq: 3, Type: "session/end-seed", Time: 9, Data: []byte(`{"inherited":true}`)})
	evs = append(evs, testgen.V3Events(4, 4, 100)...)
	write(fork, evs, false, "")
	want["fork"] = evs
	// Refusals.
	v4 := filepath.Join(root, "_no-cwd", "future", jsonl.FileName(false))
	os.MkdirAll(filepath.Dir(v4), 0o700)
	os.WriteFile(v4, []byte(`{"type":"session","version":4,"id":"future"}`+"\n"), 0o600)
	odd := store.Header{Version: 3, ID: "odd"}
	write(odd, []event.Event{{Seq: 0, Type: "mystery/event", Time: 1, Data: []byte(`{}`)}}, false, "")
	return want
}

func readAll(t *testing.T, dir string) map[string][]event.Event {
	t.Helper()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	snaps, _ := db.List(ctx)
	out := map[string][]event.Event{}
	for _, s := range snaps {
		h, _ := db.Open(ctx, s.Header.ID, store.Read)
		evs, err := h.Read(ctx, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		out[s.Header.ID] = evs
	}
	return out
}

func TestImportExportRoundTrip(t *testing.T) {
	root := t.TempDir()
	want := makeRoot(t, root, 30)
	storeDir := t.TempDir()
	var out bytes.Buffer
	rep, err := runImport(&out, nil, storeDir, root, importOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Sessions != 31 || len(rep.Cut) != 1 || len(rep.Refused) != 2 {
		t.Fatalf("report %+v\n%s", rep, out.String())
	}
	if !strings.Contains(out.String(), "v4") || !strings.Contains(out.String(), "mystery/event") {
		t.Errorf("refusals do not name their reasons:\n%s", out.String())
	}
	got := readAll(t, storeDir)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("imported logs mismatch (-want +got):\n%s", diff)
	}
	// The fork keeps its seed shape.
	db, _ := enginetest.OpenStore(t, storeDir, &engine.Options{ReadOnly: true})
	snap, err := db.Stat(context.Background(), "fork")
	db.Close()
	if err != nil || snap.InheritedEventCount != 3 || !snap.Header.IsSeeded || snap.Header.ParentSession != "sess/0000" {
		t.Errorf("fork = %+v, %v", snap, err)
	}

	for _, compressed := range []bool{false, true} {
		exported := t.TempDir()
		args := []string{"export", "--all", exported, "--dir", storeDir}
		if compressed {
			args = append(args, "--zstd")
		}
		if msg, code := cli(t, args...); code != 0 {
			t.Fatalf("export: %s", msg)
		}
		if !compressed {
			// Untorn plain logs come back byte for byte.
			for _, id := range []string{"sess/0000", "sess/0002", "fork"} {
				h := store.Header{ID: id}
				orig, _ := os.ReadFile(mustPath(t, root, id, want))
				h = headerOf(t, orig)
				p, _ := jsonl.LogPath(exported, h, false)
				back, err := os.ReadFile(p)
				if err != nil || !bytes.Equal(orig, back) {
					t.Errorf("%s: export differs from the original (%v)", id, err)
				}
			}
		}
		store2 := t.TempDir()
		if _, err := runImport(&out, nil, store2, exported, importOptions{}); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, readAll(t, store2)); diff != "" {
			t.Fatalf("zstd=%v: import of the export mismatch (-want +got):\n%s", compressed, diff)
		}
	}
}

func headerOf(t *testing.T, b []byte) store.Header {
	h, err := jsonl.ParseHeader(b[:bytes.IndexByte(b, '\n')])
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// mustPath finds the original file of id in root.
func mustPath(t *testing.T, root, id string, _ map[string][]event.Event) string {
	enc, _ := jsonl.EncodeID(id)
	m, _ := filepath.Glob(filepath.Join(root, "*", enc, jsonl.FileName(false)))
	if len(m) != 1 {
		t.Fatalf("no plain log for %s", id)
	}
	return m[0]
}

// BenchmarkImport1000 imports a generated 1,000-session reference root.
func BenchmarkImport1000(b *testing.B) {
	root := b.TempDir()
	makeRoot(b, root, 1000)
	files, _, _ := findLogs(root)
	var size int64
	for _, f := range files {
		fi, _ := os.Stat(f)
		size += fi.Size()
	}
	b.SetBytes(size)
	var rep *importReport
	for b.Loop() {
		b.StopTimer()
		storeDir := b.TempDir()
		b.StartTimer()
		var err error
		if rep, err = runImport(io.Discard, nil, storeDir, root, importOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(rep.Sessions)*float64(b.N)/b.Elapsed().Seconds(), "sessions/s")
}

// TestImportRefusalsExitNonZero: import brings in the good logs, says how
// many it refused and exits 1.
func TestImportRefusalsExitNonZero(t *testing.T) {
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	makeRoot(t, root, 4) // 4 sessions and a fork; a v4 log and an unknown type refused
	stdout, stderr, code := cliSplit(t, "import", root, "--dir", dir)
	if code != 1 || !strings.Contains(stdout, "imported 5 sessions") || !strings.Contains(stderr, "2 of 7 session logs refused") {
		t.Fatalf("import with refusals: exit %d\n%s%s", code, stdout, stderr)
	}
	if out, _ := cli(t, "ls", "--dir", dir); strings.Count(out, "\n") != 6 {
		t.Errorf("the good logs were not imported:\n%s", out)
	}
}

// TestExportAllGoesOn: export --all writes every session it can; one
// whose path the file system cannot hold (a valid 1,024-byte id) is
// reported by name with the reason, and export exits 1 at the end.
func TestExportAllGoesOn(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{SegmentSize: 64 << 10, NoPreallocate: true})
	if err != nil {
		t.Fatal(err)
	}
	long := "m" + strings.Repeat("x", store.MaxIDLen-1)
	ids := []string{"a", long, "z"} // the long one in the middle, as List orders them
	for _, id := range ids {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, testgen.Events(0, 4, 100)...); err != nil {
			t.Fatal(err)
		}
		h.Close()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	stdout, stderr, code := cliSplit(t, "export", "--all", root, "--dir", dir)
	if code != 1 || !strings.Contains(stdout, `"`+long+`"`) || !strings.Contains(stdout, "too long") ||
		!strings.Contains(stderr, "1 of 3 sessions not exported") {
		t.Errorf("export --all: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, id := range []string{"a", "z"} {
		path, _ := jsonl.LogPath(root, store.Header{ID: id}, false)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%s not exported: %v", id, err)
			continue
		}
		if log, err := jsonl.Parse(b, false); err != nil || len(log.Events) != 4 {
			t.Errorf("%s exported wrong: %v", id, err)
		}
	}
	// Nothing was left behind for the refused one.
	entries, _ := os.ReadDir(filepath.Join(root, jsonl.ProjectDir("")))
	if len(entries) != 2 {
		t.Errorf("%d session directories, want 2", len(entries))
	}
	// One id asked for by name: the same refusal, exit 1.
	if out, code := cli(t, "export", long, t.TempDir(), "--dir", dir); code != 1 || !strings.Contains(out, "too long") {
		t.Errorf("export of the long id: exit %d\n%s", code, out)
	}
	// A session that does not read (damage) is left out the same way.
	out, code := cli(t, "export", "--all", t.TempDir(), "--dir", copyStore(t, damagedStore))
	if code != 1 || !strings.Contains(out, `not exported: session "alpha"`) || !strings.Contains(out, "corruption in ") ||
		!strings.Contains(out, "beta: 50 events") || !strings.Contains(out, "1 of 2 sessions not exported") {
		t.Errorf("export --all of the damaged store: exit %d\n%s", code, out)
	}
}

// TestInspectorShowsUnregisteredTypes: a host that registered its own
// event type wrote it; the CLI, whose catalog does not know it, still
// lists the session, prints the event as stored (flagging it on stderr)
// and exports it losslessly.
func TestInspectorShowsUnregisteredTypes(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{Catalog: event.NewCatalog("acme/deploy")})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := append(testgen.Events(0, 2, 80), event.Event{Seq: 2, Type: "acme/deploy", Time: 5, Data: []byte(`{"env":"prod"}`)})
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cliSplit(t, "cat", "s", "--dir", dir)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, `"type":"acme/deploy"`) {
		t.Fatalf("cat: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "seq 2") || !strings.Contains(errOut, "acme/deploy") || strings.Contains(errOut, "seq 0") {
		t.Errorf("cat flags %q, want only seq 2 (acme/deploy)", errOut)
	}
	if out, code := cli(t, "ls", "--dir", dir); code != 0 || !strings.Contains(out, "s ") {
		t.Errorf("ls: exit %d:\n%s", code, out)
	}
	root := t.TempDir()
	if out, code := cli(t, "export", "s", root, "--dir", dir); code != 0 {
		t.Fatalf("export: exit %d:\n%s", code, out)
	}
	path, _ := jsonl.LogPath(root, store.Header{Version: 3, ID: "s"}, false)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log, err := jsonl.Parse(b, false)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(evs, log.Events); diff != "" {
		t.Errorf("export is not lossless (-stored +exported):\n%s", diff)
	}
}

// cat --balanced shows a session cut mid-turn with the closers a resume
// would append, flagged on stderr and stored nowhere.
func TestCatBalanced(t *testing.T) {
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
	}
	if err := h.Append(ctx, open...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cliSplit(t, "cat", "--balanced", "s", "--dir", dir)
	if code != 0 || strings.Count(out, "\n") != 4 || !strings.Contains(out, `"kind":"interrupted"`) || !strings.Contains(errOut, "seq 2..3") {
		t.Fatalf("cat --balanced: exit %d, stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if out, code := cli(t, "cat", "s", "--dir", dir); code != 0 || strings.Count(out, "\n") != 2 {
		t.Errorf("cat after cat --balanced: exit %d, the closers were stored?\n%s", code, out)
	}
}

// Files named like logs that this build does not read are listed as
// refused, never skipped in silence; a session that also has a newer log
// than this build reads is refused whole; import exits 1.
func TestImportRefusesUnsupportedNames(t *testing.T) {
	root, dir := t.TempDir(), filepath.Join(t.TempDir(), "store")
	put := func(id, name string, h store.Header) {
		b, err := jsonl.Encode(h, testgen.V3Events(0, 2, 50), false, nil)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, "_no-cwd", id, name)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	put("good", "session.v3.jsonl", store.Header{Version: 3, ID: "good", CreatedAt: 1})
	// v0's log is session.jsonl: a ".v0" name is none the reference writes.
	put("flat", "session.v0.jsonl", store.Header{Version: 3, ID: "flat", CreatedAt: 1})
	put("newer", "session.v3.jsonl", store.Header{Version: 3, ID: "newer", CreatedAt: 1})
	put("newer", "session.v4.jsonl", store.Header{Version: 3, ID: "newer", CreatedAt: 1})
	out, code := cli(t, "--dir", dir, "import", root)
	for _, want := range []string{"imported 1 sessions", "flat/session.v0.jsonl: unsupported log file name", "newer/session.v4.jsonl: log format v4 is newer",
		"newer/session.v3.jsonl: the session also has a newer log", "3 of 4 session logs refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("import output lacks %q", want)
		}
	}
	if code != 1 {
		t.Errorf("import exit %d, want 1", code)
	}
	if t.Failed() {
		t.Log(out)
	}
	if ls, _ := cli(t, "--dir", dir, "ls"); strings.Contains(ls, "newer") || !strings.Contains(ls, "good") {
		t.Errorf("ls after import:\n%s", ls)
	}
}

// writeAtomic replaces a file whole and leaves no temporary behind.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "session.v3.jsonl")
	if err := os.WriteFile(path, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(path, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "new\n" {
		t.Errorf("content %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d files in the directory, want 1 (a temporary left behind?)", len(ents))
	}
	if err := writeAtomic(filepath.Join(dir, "missing", "x"), []byte("x")); err == nil {
		t.Error("writeAtomic into a missing directory succeeded")
	}
}

// A store with a host's own types exports losslessly and imports again
// with --register; a file beside a log that is no log (.lock, .bak) is
// left alone; a re-export in the other form leaves no stale sibling.
func TestExportImportHostTypes(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, &engine.Options{Catalog: event.NewCatalog("acme/*")})
	if err != nil {
		t.Fatal(err)
	}
	h, err := db.Create(ctx, store.Header{ID: "s", CreatedAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	evs := append(testgen.V3Events(0, 2, 80), event.Event{Seq: 2, Type: "acme/deploy", Time: 5, Data: []byte(`{}`)})
	if err := h.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if out, code := cli(t, "export", "s", root, "--dir", dir); code != 0 {
		t.Fatalf("export: %d\n%s", code, out)
	}
	if out, code := cli(t, "export", "s", root, "--dir", dir, "--zstd"); code != 0 {
		t.Fatalf("export --zstd: %d\n%s", code, out)
	}
	plain, _ := jsonl.LogPath(root, store.Header{Version: 3, ID: "s"}, false)
	if _, err := os.Stat(plain); !os.IsNotExist(err) {
		t.Errorf("the uncompressed export is still beside the compressed one: %v", err)
	}
	os.WriteFile(plain+".lock", nil, 0o600)
	if out, code := cli(t, "import", root, "--dir", t.TempDir()); code != 1 || !strings.Contains(out, "all 1 session logs refused") {
		t.Errorf("import without --register: exit %d\n%s", code, out)
	}
	store2 := t.TempDir()
	if out, code := cli(t, "import", root, "--dir", store2, "--register", "acme/*"); code != 0 || !strings.Contains(out, "imported 1 sessions") {
		t.Fatalf("import --register: exit %d\n%s", code, out)
	}
	out, errOut, code := cliSplit(t, "cat", "s", "--dir", store2)
	if code != 0 || !strings.Contains(out, `"acme/deploy"`) || errOut != "" {
		t.Errorf("cat after the round trip (the store records acme/*: nothing flagged): %d\n%s%s", code, out, errOut)
	}
	if out, _ := cli(t, "types", "--dir", store2); !strings.Contains(out, "acme/*\n") {
		t.Errorf("types --dir does not list the recorded acme/*:\n%s", out)
	}
}

// TestImportRegisterChecksFirst: a bad --register is a usage error (exit
// 2) that creates no store; a damaged types.json in the store is the
// store's fault (exit 1), not a usage error.
func TestImportRegisterChecksFirst(t *testing.T) {
	root := t.TempDir()
	makeRoot(t, root, 1)
	dir := filepath.Join(t.TempDir(), "store")
	if out, code := cli(t, "import", root, "--dir", dir, "--register", "bad type"); code != 2 || !strings.Contains(out, `"bad type"`) {
		t.Errorf("import --register 'bad type': exit %d, want 2\n%s", code, out)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("import with a bad --register created %s: %v", dir, err)
	}
	storeDir := copyStore(t, cleanStore)
	if err := os.WriteFile(filepath.Join(storeDir, "types.json"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := cli(t, "import", root, "--dir", storeDir, "--register", "acme/*"); code != 1 || !strings.Contains(out, "damaged types.json") {
		t.Errorf("import --register into a store with a damaged types.json: exit %d, want 1\n%s", code, out)
	}
}
