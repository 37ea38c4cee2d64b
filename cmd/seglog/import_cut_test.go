package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/seglog/seglog/event"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
	"github.com/seglog/seglog/testgen"
)

// importCutOut is import --json's output, with the documented fields.
type importCutOut struct {
	Files    int `json:"files"`
	Sessions int `json:"sessions"`
	Events   int `json:"events"`
	Cut      []struct {
		Path       string `json:"path"`
		ID         string `json:"id"`
		Events     int    `json:"events"`
		Line       int    `json:"line"`
		Rows       int    `json:"rows"`
		Bytes      int    `json:"bytes"`
		Kind       string `json:"kind"`
		Reason     string `json:"reason"`
		FrameAt    int    `json:"frameAt"`
		FrameBytes int    `json:"frameBytes"`
	} `json:"cut"`
	Refused []struct {
		Path   string `json:"path"`
		Reason string `json:"reason"`
	} `json:"refused"`
}

// TestImportNamesTheLogsItCuts: import keeps the reference's torn-tail
// rule (a bad row drops the rows after it too) and names every session
// it cut: the file, the line the dropped rows begin at, how many, and the
// problem, in the text output and in --json; exit 0. With --strict a log
// the rule cuts is refused instead (exit 1), and the others imported.
func TestImportNamesTheLogsItCuts(t *testing.T) {
	root := t.TempDir()
	evs := testgen.V3Events(0, 4, 80)
	lines := func(id string) []string { // the header line and a line per event
		b, err := jsonl.Encode(store.Header{Version: 3, ID: id, CreatedAt: 1}, evs, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		return strings.SplitAfter(string(b), "\n")[:5]
	}
	put := func(id string, b []byte, compressed bool) string {
		p, _ := jsonl.LogPath(root, store.Header{ID: id}, compressed)
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	l := lines("garbage")
	garbage := put("garbage", []byte(l[0]+l[1]+"garbage\n"+l[2]+l[3]+l[4]), false)
	l = lines("repeat")
	repeat := put("repeat", []byte(l[0]+l[1]+l[2]+l[2]+l[3]+l[4]), false)
	l = lines("torn")
	torn := put("torn", []byte(l[0]+l[1]+l[2]+l[3]+l[4]+`{"type":"step/start","se`), false)
	l = lines("clean")
	put("clean", []byte(strings.Join(l, "")), false)
	// A .zstd log of a frame per batch whose last frame lost its end.
	fh := store.Header{Version: 3, ID: "frame", CreatedAt: 1}
	z, err := jsonl.Encode(fh, evs, true, []int{3, 1})
	z3, err3 := jsonl.Encode(fh, evs[:3], true, []int{3})
	if err != nil || err3 != nil || !bytes.HasPrefix(z, z3) {
		t.Fatal(err, err3)
	}
	frameAt, frameBytes := len(z3), len(z)-4-len(z3)
	frame := put("frame", z[:len(z)-4], true)

	dir := filepath.Join(t.TempDir(), "store")
	stdout, stderr, code := cliSplit(t, "import", root, "--dir", dir)
	if code != 0 || stderr != "" {
		t.Fatalf("import: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"cut: " + garbage + `: session "garbage" imported with 1 event; dropped from line 3 on: 4 rows (a bad row: not a JSON object)` + "\n",
		"cut: " + repeat + `: session "repeat" imported with 2 events; dropped from line 4 on: 3 rows (a bad row: seq 1 repeats: 2 events before it, so seq 2 was next)` + "\n",
		"cut: " + torn + `: session "torn" imported with 4 events; dropped from line 6 on: 1 row (the last line has no newline: a write cut short)` + "\n",
		"cut: " + frame + fmt.Sprintf(`: session "frame" imported with 3 events; dropped from line 5 on: 0 rows (the last %d bytes of the file, from byte %d, are no whole Zstandard frame: a damaged or incomplete last frame)`, frameBytes, frameAt) + "\n",
		"imported 5 sessions, 14 events (4 cut, 0 refused) in ",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("import output lacks %q", want)
		}
	}
	if strings.Count(stdout, "cut: ") != 4 {
		t.Errorf("import lists %d cuts, want 4", strings.Count(stdout, "cut: "))
	}
	if t.Failed() {
		t.Logf("import output:\n%s", stdout)
	}
	got := readAll(t, dir)
	want := map[string][]event.Event{"garbage": evs[:1], "repeat": evs[:2], "torn": evs, "clean": evs, "frame": evs[:3]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("imported sessions (-want +got):\n%s", diff)
	}

	// --json: the same, as documented.
	stdout, stderr, code = cliSplit(t, "import", root, "--dir", filepath.Join(t.TempDir(), "store"), "--json")
	if code != 0 || stderr != "" {
		t.Fatalf("import --json: exit %d\n%s%s", code, stdout, stderr)
	}
	var out importCutOut
	decodeStrict(t, stdout, &out)
	type cut struct {
		Path, ID, Kind, Reason                      string
		Events, Line, Rows, Bytes, FrameAt, FrameBy int
	}
	var cuts []cut
	for _, c := range out.Cut {
		cuts = append(cuts, cut{c.Path, c.ID, c.Kind, c.Reason, c.Events, c.Line, c.Rows, c.Bytes, c.FrameAt, c.FrameBytes})
	}
	l = lines("x")
	wantCuts := []cut{
		{frame, "frame", "torn-frame", fmt.Sprintf("the last %d bytes of the file, from byte %d, are no whole Zstandard frame: a damaged or incomplete last frame", frameBytes, frameAt), 3, 5, 0, 0, frameAt, frameBytes},
		{garbage, "garbage", "bad-row", "not a JSON object", 1, 3, 4, len("garbage\n" + l[2] + l[3] + l[4]), 0, 0},
		{repeat, "repeat", "bad-row", "seq 1 repeats: 2 events before it, so seq 2 was next", 2, 4, 3, len(l[2] + l[3] + l[4]), 0, 0},
		{torn, "torn", "incomplete-line", "the last line has no newline: a write cut short", 4, 6, 1, len(`{"type":"step/start","se`), 0, 0},
	}
	if out.Files != 5 || out.Sessions != 5 || out.Events != 14 || len(out.Refused) != 0 || !cmp.Equal(cuts, wantCuts) {
		t.Errorf("import --json: %+v\ncuts (-want +got):\n%s", out, cmp.Diff(wantCuts, cuts))
	}

	// --strict: the cut logs refused, with their cut; the clean one taken.
	dir = filepath.Join(t.TempDir(), "store")
	stdout, stderr, code = cliSplit(t, "import", root, "--dir", dir, "--strict", "--json")
	out = importCutOut{}
	decodeStrict(t, stdout, &out)
	refused := map[string]string{}
	for _, r := range out.Refused {
		refused[r.Path] = r.Reason
	}
	if code != 1 || !strings.Contains(stderr, "4 of 5 session logs refused") || out.Sessions != 1 || len(out.Cut) != 0 || len(refused) != 4 ||
		refused[garbage] != "--strict: the torn-tail rule cuts it: dropped from line 3 on: 4 rows (a bad row: not a JSON object)" ||
		!strings.Contains(refused[torn], "dropped from line 6 on: 1 row") || refused[repeat] == "" || refused[frame] == "" {
		t.Errorf("import --strict: exit %d, %+v\n%s", code, out, stderr)
	}
	if got := readAll(t, dir); len(got) != 1 || got["clean"] == nil {
		t.Errorf("import --strict imported %v, want the clean log alone", got)
	}
}
