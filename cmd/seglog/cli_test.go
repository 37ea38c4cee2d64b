package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/segment"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

var update = flag.Bool("update", false, "rewrite the fixture stores and golden files under testdata/")

const (
	cleanStore   = "testdata/store-clean"
	damagedStore = "testdata/store-damaged"
	damagedAt    = 700 // offset (rounded to the frame holding it) of the flipped byte in segment 1
)

// fixtureOptions make small, unpreallocated segments so the fixtures stay small.
var fixtureOptions = &engine.Options{SegmentSize: 8 << 10, FrameBytes: 1 << 10, NoPreallocate: true}

func writeFixtures(t *testing.T) {
	ctx := context.Background()
	for _, d := range []string{cleanStore, damagedStore} {
		os.RemoveAll(d)
	}
	db, err := enginetest.OpenStore(t, cleanStore, fixtureOptions)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"alpha", "beta"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1_700_000_000_000, Cwd: "/work"})
		if err != nil {
			t.Fatal(err)
		}
		evs := testgen.Events(0, 30+20*i, 200)
		for j := 0; j < len(evs); j += 10 {
			if err := h.Append(ctx, evs[j:min(j+10, len(evs))]...); err != nil {
				t.Fatal(err)
			}
			if err := h.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		h.Close()
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(damagedStore, 0o755)
	entries, _ := os.ReadDir(cleanStore)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(cleanStore, e.Name()))
		if e.Name() == segment.Name(1) {
			b[damagedAt] ^= 0x20 // inside a synced frame of a sealed segment
		}
		os.WriteFile(filepath.Join(damagedStore, e.Name()), b, 0o644)
	}
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(m.Run())
}

func cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	checkStoresMade(t, args)
	return out.String() + errOut.String(), code
}

// writeFile writes b to path, making its directory first: a session log
// under an import root.
func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkStoresMade registers the end-of-test store check
// (enginetest.CheckAtEnd) of each store a command's --dir or --to names
// in a fresh directory (one under os.TempDir: the fixtures under
// testdata are not the test's), once the command has left one there (a
// segment or LOCK file).
func checkStoresMade(t *testing.T, args []string) {
	t.Helper()
	for i, a := range args {
		var dir string
		switch {
		case (a == "--dir" || a == "--to") && i+1 < len(args):
			dir = args[i+1]
		case strings.HasPrefix(a, "--dir="), strings.HasPrefix(a, "--to="):
			dir = a[strings.Index(a, "=")+1:]
		default:
			continue
		}
		if !strings.HasPrefix(filepath.Clean(dir), filepath.Clean(os.TempDir())+string(filepath.Separator)) {
			continue
		}
		segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		if _, err := os.Stat(filepath.Join(dir, "LOCK")); err == nil || len(segs) > 0 {
			enginetest.CheckAtEnd(t, dir)
		}
	}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		os.WriteFile(path, []byte(got), 0o644)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s mismatch:\n--- want\n%s--- got\n%s", name, want, got)
	}
}

// copyStore copies a fixture to a temporary directory (commands that
// repair must not touch the checked-in files).
func copyStore(t *testing.T, src string) string {
	dst := t.TempDir()
	if src == damagedStore {
		// Its damage is the fixture's: the end-of-test check must find it.
		enginetest.ExpectProblem(t, dst, "frame checksum mismatch")
	}
	if filepath.Base(src) == "golden" {
		// Its v2 session predates issue 38: the reference's v2 admission
		// refuses it, so the end-of-test check's read of it does.
		enginetest.ExpectProblem(t, dst, "user/message data lacks required field role")
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(src, e.Name()))
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	return dst
}

func TestFixtures(t *testing.T) {
	if *update {
		writeFixtures(t)
	}
	for _, d := range []string{cleanStore, damagedStore} {
		if _, err := os.Stat(filepath.Join(d, segment.Name(1))); err != nil {
			t.Fatalf("fixture %s missing: go test ./cmd/seglog -run TestFixtures -update", d)
		}
	}
}

func TestCheck(t *testing.T) {
	out, code := cli(t, "check", "--dir", copyStore(t, cleanStore))
	if code != 0 || !strings.HasSuffix(out, "OK\n") {
		t.Errorf("check of the clean store: exit %d\n%s", code, out)
	}
	out, code = cli(t, "check", "-dir", copyStore(t, damagedStore))
	if code != 1 || !strings.Contains(out, "1 problems") || !strings.Contains(out, segment.Name(1)+" @") || !strings.Contains(out, "checksum mismatch") {
		t.Errorf("check of the damaged store: exit %d\n%s", code, out)
	}
}

func TestCheckRepairRebuildsIndex(t *testing.T) {
	dir := copyStore(t, cleanStore)
	os.Remove(filepath.Join(dir, "index.db"))
	out, code := cli(t, "check", "--dir", dir, "--repair")
	if code != 0 || !strings.Contains(out, "index rebuilt") {
		t.Fatalf("check --repair: exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.db")); err != nil {
		t.Fatal("no index after repair")
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 || strings.Contains(out, "note: no index") {
		t.Errorf("check after repair: exit %d\n%s", code, out)
	}
}

func TestLs(t *testing.T) {
	out, code := cli(t, "ls", "--dir", copyStore(t, cleanStore))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	golden(t, "ls.golden", out)
}

func TestStatsAndSegments(t *testing.T) {
	dir := copyStore(t, cleanStore)
	out, code := cli(t, "stats", "--dir", dir)
	if code != 0 || !strings.Contains(out, "sessions  2") || !strings.Contains(out, "events    80") {
		t.Errorf("stats: exit %d\n%s", code, out)
	}
	out, code = cli(t, "segments", "--dir", dir)
	if code != 0 || !strings.Contains(out, "SEALED") || !strings.Contains(out, "true") || !strings.Contains(out, "x\n") {
		t.Errorf("segments: exit %d\n%s", code, out)
	}
}

// TestSegmentsDamagedExits1: a segment that does not scan is listed with
// its error, and segments exits 1 (the store is damaged), with --json too,
// whose array still parses; a clean store exits 0.
func TestSegmentsDamagedExits1(t *testing.T) {
	dir := copyStore(t, damagedStore)
	out, code := cli(t, "segments", "--dir", dir)
	if code != 1 || !strings.Contains(out, "corruption in ") || !strings.Contains(out, "did not open or scan") {
		t.Errorf("segments of a damaged store: exit %d, want 1\n%s", code, out)
	}
	stdout, stderr, code := cliSplit(t, "segments", "--json", "--dir", dir)
	var segs []struct {
		ID    uint64 `json:"id"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(stdout), &segs); err != nil {
		t.Fatalf("segments --json of a damaged store: %v\n%s", err, stdout)
	}
	if code != 1 || len(segs) == 0 || segs[0].ID != 1 || !strings.Contains(segs[0].Error, "corruption in ") || !strings.HasPrefix(stderr, "seglog: segments: 1 of ") {
		t.Errorf("segments --json of a damaged store: exit %d, want 1; %+v\nstderr: %s", code, segs, stderr)
	}
	if out, code := cli(t, "segments", "--json", "--dir", copyStore(t, cleanStore)); code != 0 {
		t.Errorf("segments --json of a clean store: exit %d\n%s", code, out)
	}
}

func TestCat(t *testing.T) {
	out, code := cli(t, "cat", "beta", "--dir", copyStore(t, cleanStore), "--from", "5", "--n", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for i, l := range lines {
		var e event.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq != uint64(5+i) {
			t.Errorf("line %d = %s (%v)", i, l, err)
		}
		if want := testgen.Event(uint64(5+i), 200); string(e.Data) != string(want.Data) {
			t.Errorf("line %d data differs from what was written", i)
		}
	}
	if _, code := cli(t, "cat", "nope", "--dir", copyStore(t, cleanStore)); code != 1 {
		t.Errorf("cat of a missing session exit %d", code)
	}
}

func TestUsageErrors(t *testing.T) {
	if _, code := cli(t, "nope"); code != 2 {
		t.Errorf("unknown command exit %d, want 2", code)
	}
	if _, code := cli(t, "cat"); code == 0 {
		t.Error("cat without an id succeeded")
	}
}

func TestDeleteCommand(t *testing.T) {
	dir := copyStore(t, cleanStore)
	if out, code := cli(t, "delete", "alpha", "--dir", dir); code != 0 || !strings.Contains(out, "deleted alpha") {
		t.Fatalf("delete: exit %d\n%s", code, out)
	}
	out, _ := cli(t, "ls", "--dir", dir)
	if strings.Contains(out, "alpha") || !strings.Contains(out, "beta") {
		t.Errorf("ls after delete:\n%s", out)
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 {
		t.Errorf("check after delete: exit %d\n%s", code, out)
	}
	if _, code := cli(t, "delete", "alpha", "--dir", dir); code != 1 {
		t.Errorf("second delete exit %d, want 1", code)
	}
}

func TestCompactCommand(t *testing.T) {
	dir := copyStore(t, cleanStore)
	cli(t, "delete", "alpha", "beta", "--dir", dir)
	out, code := cli(t, "compact", "--dir", dir)
	if code != 0 || !strings.Contains(out, "removed 2") {
		t.Fatalf("compact: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 {
		t.Errorf("check after compact: exit %d\n%s", code, out)
	}
}

// TestCompactRewriteCommand: deleting one of two sessions that share a
// segment leaves it partly live; compact rewrites (generation 1) and
// the other session reads as before.
func TestCompactRewriteCommand(t *testing.T) {
	dir := copyStore(t, cleanStore)
	before, _ := cli(t, "cat", "beta", "--dir", dir)
	cli(t, "delete", "alpha", "--dir", dir)
	liveOf := func(seg int) int { // the LIVE column, in percent
		t.Helper()
		out, _ := cli(t, "segments", "--dir", dir)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var pct int
		if len(lines) <= seg || strings.Fields(lines[0])[8] != "LIVE" {
			t.Fatalf("segments:\n%s", out)
		}
		fmt.Sscanf(strings.Fields(lines[seg])[7], "%d%%", &pct) // "FILE BYTES" is two fields of the header
		return pct
	}
	if pct := liveOf(1); pct < 30 || pct > 80 {
		t.Errorf("segment 1 is %d%% live with alpha deleted; alpha held about half of it", pct)
	}
	out, code := cli(t, "compact", "--live-ratio", "0.99", "--dir", dir)
	if code != 0 || !strings.Contains(out, "rewrote ") || strings.Contains(out, "rewrote 0") {
		t.Fatalf("compact: exit %d\n%s", code, out)
	}
	if out, code := cli(t, "check", "--dir", dir); code != 0 {
		t.Errorf("check after compact: exit %d\n%s", code, out)
	}
	if after, _ := cli(t, "cat", "beta", "--dir", dir); after != before || !strings.Contains(after, `"seq":49`) {
		t.Errorf("beta after compaction:\n%s\nwant:\n%s", after, before)
	}
	segs, _ := cli(t, "segments", "--dir", dir)
	lines := strings.Split(strings.TrimSpace(segs), "\n")
	if len(lines) < 2 || strings.Fields(lines[1])[1] != "1" {
		t.Errorf("segments after a rewrite, want generation 1 on the first:\n%s", segs)
	}
	if pct := liveOf(1); pct < 90 {
		t.Errorf("segment 1 is %d%% live after its rewrite", pct)
	}
}

// cliSplit runs the CLI and returns stdout and stderr apart.
func cliSplit(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// TestErrorsPrintOnce: an error is printed once, with the one prefix
// "seglog: ", not each layer's ("seglog: engine: ... seglog: corruption").
func TestErrorsPrintOnce(t *testing.T) {
	_, stderr, code := cliSplit(t, "cat", "alpha", "--dir", copyStore(t, damagedStore))
	if code != 1 || !strings.HasPrefix(stderr, "seglog: ") || strings.Count(stderr, "seglog: ") != 1 ||
		strings.Contains(stderr, "engine: ") || !strings.Contains(stderr, "corruption in ") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr:\n%s", code, stderr)
	}
	for _, c := range []struct{ in, want string }{
		{"engine: session \"a\": read: seglog: corruption in x at offset 1: bad", "session \"a\": read: corruption in x at offset 1: bad"},
		{"engine: open d: open d: no such file", "open d: open d: no such file"},
		// A tag inside a quoted session id is the id's, and stays.
		{`engine: session "x: engine: y" not found`, `session "x: engine: y" not found`},
		{`engine: session "q\": seglog: " not found`, `session "q\": seglog: " not found`},
		{"repair: engine: the store has no index", "repair: the store has no index"},
	} {
		if got := untag(c.in); got != c.want {
			t.Errorf("untag(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestExitCodes: 0 ok, 1 failed or did only part of its work, 2 usage
// error, as seglog help says.
func TestExitCodes(t *testing.T) {
	dir := copyStore(t, cleanStore)
	root := t.TempDir()
	makeRoot(t, root, 2)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"ls", "--dir", dir}, 0},
		{[]string{"cat", "beta", "--dir", dir}, 0},
		{[]string{"help"}, 0},
		{[]string{"check", "--dir", copyStore(t, damagedStore)}, 1},
		{[]string{"cat", "nope", "--dir", dir}, 1},
		{[]string{"delete", "nope", "--dir", dir}, 1},
		{[]string{"import", root, "--dir", t.TempDir()}, 1},
		{[]string{"ls", "--dir", t.TempDir()}, 1},
		{[]string{"nope"}, 2},
		{[]string{"ls", "--nope"}, 2},
		{[]string{"ls", "extra", "--dir", dir}, 2},
		{[]string{"cat", "--dir", dir}, 2},
		{[]string{"cat", "beta", "--n", "many", "--dir", dir}, 2},
		{[]string{"tail", "a", "b", "--dir", dir}, 2},
		{[]string{"delete", "--dir", dir}, 2},
		{[]string{"export", "a", "b", "c", "--dir", dir}, 2},
		{[]string{"export", "--all", "--dir", dir}, 2},
		{[]string{"migrate", "--dir", dir}, 2},
		{[]string{"import", "--dir", dir}, 2},
		{[]string{"cat", "beta", "--from", "-1", "--dir", dir}, 2},
		{[]string{"compact", "--live-ratio", "2", "--dir", dir}, 2},
		{[]string{"compact", "--live-ratio", "NaN", "--dir", dir}, 2},
		{[]string{"check", "--dir", dir}, 0},
		{[]string{"stats", "--dir", dir}, 0},
		{[]string{"types"}, 0},
		{[]string{"stats", "--dir", t.TempDir()}, 1},
		{[]string{"segments", "--dir", t.TempDir()}, 1},
		{[]string{"compact", "--dir", t.TempDir()}, 1},
		{[]string{"tail", "nope", "--dir", dir}, 1},
		{[]string{"export", "nope", t.TempDir(), "--dir", dir}, 1},
		{[]string{"migrate", "nope", "--dir", dir}, 1},
		{[]string{"types", "--dir", t.TempDir()}, 1},
		{[]string{"stats", "extra", "--dir", dir}, 2},
		{[]string{"check", "extra", "--dir", dir}, 2},
		{[]string{"segments", "extra", "--dir", dir}, 2},
		{[]string{"types", "extra"}, 2},
		{[]string{"ls", "--sort", "size", "--dir", dir}, 2},
		{[]string{"import", root, "--register", "bad type", "--dir", t.TempDir()}, 2},
		{[]string{"migrate", "a", "--all", "--dir", dir}, 2},
		{[]string{"bench", "--size", "10"}, 2},
		{[]string{"bench", "extra"}, 2},
		{[]string{"copy", "--dir", dir}, 2},
		{[]string{"copy", "--from", dir, "--to", dir}, 2},
		{[]string{"copy", "--from", dir, "--to", "nats://127.0.0.1:1?bogus=1"}, 2},
		{[]string{"copy", "--from", t.TempDir(), "--to", t.TempDir()}, 1},
		{[]string{"copy", "--from", dir, "--to", t.TempDir()}, 0},
		{[]string{"retain", "--dir", dir}, 2},
		{[]string{"retain", "--keep", "-1", "--dir", dir}, 2},
		{[]string{"retain", "--keep", "1", "extra", "--dir", dir}, 2},
		{[]string{"retain", "--keep", "1", "--nats", "/tmp/x", "--dir", dir}, 2},
		{[]string{"retain", "--older-than", "1h", "--dry-run", "--dir", dir}, 0},
		{[]string{"retain", "--keep", "1", "--dir", t.TempDir()}, 1},
	} {
		if out, code := cli(t, c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d\n%s", c.args, code, c.code, out)
		}
	}
	help, _ := cli(t, "help")
	for _, want := range []string{"Exit codes", "0 ", "1 ", "2 ", "import"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
}

// Every command has its help (commandHelp): a description and its exit
// codes in seglog help COMMAND, and doc.go and docs/CLI.md name it.
func TestHelpDescribesEveryCommand(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	cliDoc, err := os.ReadFile("../../docs/CLI.md") // the CLI reference moved out of README.md (issue 48)
	if err != nil {
		t.Fatal(err)
	}
	root := newRoot(io.Discard, io.Discard)
	names := map[string]bool{}
	for _, c := range root.Commands() {
		name := c.Name()
		names[name] = true
		if _, ok := commandHelp[name]; !ok {
			t.Errorf("%s: no entry in commandHelp", name)
			continue
		}
		out, code := cli(t, "help", name)
		if code != 0 || c.Short == "" || !strings.Contains(out, c.Short) && !strings.Contains(out, commandHelp[name].long[:40]) {
			t.Errorf("help %s: exit %d\n%s", name, code, out)
		}
		for _, want := range []string{"Exit codes:\n  0  ", "\n  1  ", "\n  2  ", "Usage:"} {
			if !strings.Contains(out, want) {
				t.Errorf("help %s lacks %q:\n%s", name, want, out)
			}
		}
		if !strings.Contains(string(doc), "seglog "+name) {
			t.Errorf("doc.go does not describe %s", name)
		}
		if !strings.Contains(string(cliDoc), "| `"+name+"` |") {
			t.Errorf("docs/CLI.md's exit codes table has no row for %s", name)
		}
	}
	for name := range commandHelp {
		if !names[name] {
			t.Errorf("commandHelp describes %s, which is no command", name)
		}
	}
	for _, name := range []string{"help", "completion"} {
		if !strings.Contains(string(doc), "seglog "+name) {
			t.Errorf("doc.go does not describe %s", name)
		}
	}
}

// `seglog types` lists the default catalog, sorted, families as prefix/*.
func TestTypesCommand(t *testing.T) {
	out, code := cli(t, "types")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || !slices.Contains(lines, "turn/start") || !slices.Contains(lines, "approval/*") || !slices.IsSorted(lines) {
		t.Fatalf("types: exit %d:\n%s", code, out)
	}
}

// Every --json output parses into its documented fields and agrees with
// the store; the live share of a fully live active segment is of the
// bytes it uses, not of its preallocated size.
func TestJSONOutputs(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 7, Cwd: "/w"})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Append(ctx, testgen.Events(0, 10, 200)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	parse := func(v any, args ...string) {
		t.Helper()
		out, errOut, code := cliSplit(t, append(args, "--json", "--dir", dir)...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, code, out, errOut)
		}
		// The structs below have every field docs/CLI.md's "CLI output"
		// documents: a field that is not there fails here.
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	var page struct {
		Sessions []struct {
			ID              string `json:"id"`
			Events          uint64 `json:"events"`
			Bytes           int64  `json:"bytes"`
			Revision        string `json:"revision"`
			Format          string `json:"format"`
			CreatedAt       int64  `json:"createdAt"`
			UpdatedAt       int64  `json:"updatedAt"`
			Title           string `json:"title"`
			Cwd             string `json:"cwd"`
			ParentSession   string `json:"parentSession"`
			IsSeeded        bool   `json:"isSeeded"`
			InheritedEvents uint64 `json:"inheritedEvents"`
		} `json:"sessions"`
		Next string `json:"next"`
	}
	parse(&page, "ls")
	ls := page.Sessions
	if len(ls) != 2 || ls[0].ID != "a" || ls[0].Events != 10 || ls[0].Bytes <= 0 || ls[0].Revision == "" || ls[0].Format != "current" || ls[0].CreatedAt != 7 || ls[0].Cwd != "/w" || page.Next != "" {
		t.Errorf("ls --json: %+v", page)
	}
	parse(&page, "ls", "--limit", "1")
	if len(page.Sessions) != 1 || page.Next != "a" {
		t.Errorf("ls --json --limit 1: %+v, want a and next a", page)
	}
	var st struct {
		Sessions int      `json:"sessions"`
		Events   uint64   `json:"events"`
		Bytes    int64    `json:"bytes"`
		Segments int      `json:"segments"`
		Disk     diskJSON `json:"disk"`
	}
	parse(&st, "stats")
	if st.Sessions != 2 || st.Events != 20 || st.Bytes <= 0 || st.Segments < 1 || st.Disk.Segments < st.Bytes || st.Disk.Total <= st.Disk.Segments {
		t.Errorf("stats --json: %+v", st)
	}
	var segs []struct {
		ID          uint64  `json:"id"`
		Generation  uint64  `json:"generation"`
		FileBytes   int64   `json:"fileBytes"`
		UsedBytes   int64   `json:"usedBytes"`
		Sealed      bool    `json:"sealed"`
		Frames      int     `json:"frames"`
		Events      int     `json:"events"`
		LiveBytes   int64   `json:"liveBytes"`
		RawBytes    int64   `json:"rawBytes"`
		StoredBytes int64   `json:"storedBytes"`
		Compression float64 `json:"compression"`
		Error       string  `json:"error"`
	}
	parse(&segs, "segments")
	events := 0
	for _, s := range segs {
		events += s.Events
		if s.Events > 0 && (s.LiveBytes*2 < s.UsedBytes || s.LiveBytes > s.UsedBytes) {
			t.Errorf("segment %d: %d live of %d used bytes (file %d): the live share is not of the used bytes", s.ID, s.LiveBytes, s.UsedBytes, s.FileBytes)
		}
	}
	if events != 20 || segs[0].Frames < 1 || segs[0].RawBytes <= segs[0].StoredBytes || segs[0].Compression <= 1 || segs[0].Error != "" {
		t.Errorf("segments --json: %d events in all, want 20: %+v", events, segs)
	}
	var ck struct {
		OK       bool     `json:"ok"`
		Problems []string `json:"problems"`
		Notes    []string `json:"notes"`
		Segments int      `json:"segments"`
		Frames   int      `json:"frames"`
		Sessions int      `json:"sessions"`
		Events   uint64   `json:"events"`
		Repaired bool     `json:"repaired"`
	}
	parse(&ck, "check")
	if !ck.OK || len(ck.Problems) != 0 || ck.Sessions != 2 || ck.Events != 20 || ck.Segments < 1 || ck.Frames < 4 || ck.Repaired {
		t.Errorf("check --json: %+v", ck)
	}
	parse(&ck, "check", "--repair")
	if !ck.OK || !ck.Repaired {
		t.Errorf("check --json --repair: %+v", ck)
	}
}

// ls --sort updated lists the most recently updated first, with their
// titles and update times, and pages with its own cursor.
func TestLsByUpdated(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, id := range []string{"old", "new", "mid"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		at := map[string]int64{"old": 1_000_000, "new": 3_000_000, "mid": 2_000_000}[id]
		err = h.Append(ctx,
			event.Event{Seq: 0, Type: "session/title", Time: at - 1, Data: json.RawMessage(`{"title":"the ` + id + "\\tone" + `"}`)},
			event.Event{Seq: 1, Type: "turn/start", Time: at, Data: json.RawMessage(fmt.Sprintf(`{"turn":%d}`, i))})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := cliSplit(t, "ls", "--sort", "updated", "--limit", "2", "--dir", dir)
	want := `ID   EVENTS  BYTES  UPDATED               REVISION`
	lines := strings.Split(out, "\n")
	if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], want) || !strings.HasSuffix(lines[0], "TITLE") ||
		!strings.HasPrefix(lines[1], "new ") || !strings.Contains(lines[1], "1970-01-01T00:50:00Z") || !strings.HasSuffix(lines[1], "the new one") ||
		!strings.HasPrefix(lines[2], "mid ") || errOut != "seglog: more sessions follow: --after '2000000:mid'\n" {
		t.Fatalf("ls --sort updated --limit 2: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = cliSplit(t, "ls", "--sort", "updated", "--after", "2000000:mid", "--json", "--dir", dir)
	var page struct {
		Sessions []struct {
			ID        string `json:"id"`
			Title     string `json:"title"`
			UpdatedAt int64  `json:"updatedAt"`
		} `json:"sessions"`
		Next string `json:"next"`
	}
	if err := json.Unmarshal([]byte(out), &page); err != nil || code != 0 || len(page.Sessions) != 1 || page.Sessions[0].ID != "old" ||
		page.Sessions[0].Title != "the old\tone" || page.Sessions[0].UpdatedAt != 1_000_000 || page.Next != "" {
		t.Fatalf("ls --sort updated --json, second page: exit %d, %v\n%s%s", code, err, out, errOut)
	}
	for _, args := range [][]string{{"--sort", "title"}, {"--sort", "updated", "--after", "mid"}} {
		if _, code := cli(t, append([]string{"ls", "--dir", dir}, args...)...); code != 2 {
			t.Errorf("ls %v: exit %d, want 2", args, code)
		}
	}
}

// ls pages: --prefix and --limit give a page and the --after of the next
// on stderr; the last page says nothing more.
func TestLsPages(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a/1", "a/2", "a/3", "b/1"} {
		h, err := db.Create(ctx, store.Header{ID: id, CreatedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		h.Append(ctx, testgen.Events(0, 1, 50)...)
	}
	db.Close()
	out, errOut, code := cliSplit(t, "ls", "--prefix", "a/", "--limit", "2", "--dir", dir)
	if code != 0 || !strings.Contains(out, "a/1") || !strings.Contains(out, "a/2") || strings.Contains(out, "a/3") || !strings.Contains(errOut, `--after 'a/2'`) {
		t.Fatalf("first page: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = cliSplit(t, "ls", "--prefix", "a/", "--limit", "2", "--after", "a/2", "--dir", dir)
	if code != 0 || !strings.Contains(out, "a/3") || strings.Contains(out, "b/1") || errOut != "" {
		t.Fatalf("last page: exit %d\n%s%s", code, out, errOut)
	}
	if _, code := cli(t, "ls", "--limit", "-1", "--dir", dir); code != 2 {
		t.Errorf("ls --limit -1: exit %d, want 2", code)
	}
	if q := shellQuote("it's $HOME`x`"); q != `'it'\''s $HOME`+"`x`"+`'` {
		t.Errorf("shellQuote: %s", q)
	}
	if out, code := cli(t, "types", "--dir", filepath.Join(dir, "nope")); code != 1 {
		t.Errorf("types --dir of no store: exit %d, want 1\n%s", code, out)
	}
}
