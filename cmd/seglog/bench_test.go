package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/search"
	"github.com/seglog/seglog/store"
)

func TestBenchSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"bench", "-dir", t.TempDir(), "-events", "3000", "-durable", "20", "-sessions", "4", "-procs", "0", "-follow", "0",
		"-agent-sessions", "3", "-agent-turns", "2", "-kill-rounds", "0", "-search-sessions", "0"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String(), "process") || strings.Contains(out.String(), "follow") {
		t.Errorf("-procs 0 -follow 0 still ran the multi-process rows:\n%s", out.String())
	}
	for _, want := range []string{"raw write+fdatasync", "durable append+flush, 1 session", "4 sessions", "bulk append", "replay", "bytes on disk per event", "the raw limit",
		"agent host, 3 sessions x 2 turns ", "agent host, 3 sessions x 2 turns, jsonl reference", "turn-end Flush", "written/raw", "heap B/session"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The replay row reports every bulk event back.
	ref := false
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "replay") && !strings.Contains(line, " 3000 ") {
			t.Errorf("replay row does not show 3000 events: %q", line)
		}
		// The JSONL reference writes its lines as they are: written/raw
		// is 1, give or take its header lines.
		if f := strings.Fields(line); len(f) == 8 && f[0] == "jsonl" && f[1] == "reference" {
			ref = true
			if !strings.HasPrefix(f[5], "1.0") {
				t.Errorf("jsonl reference's written/raw is not about 1: %q", line)
			}
		}
	}
	if !ref {
		t.Errorf("no jsonl reference row in the agent-host table:\n%s", out.String())
	}
	out.Reset()
	if code := run([]string{"bench", "-dir", t.TempDir(), "-events", "3000", "-durable", "20", "-sessions", "4", "-procs", "0", "-follow", "0", "-agent-turns", "0", "-kill-rounds", "0", "-search-sessions", "0"}, &out, &errOut); code != 0 {
		t.Fatalf("-agent-turns 0: exit %d: %s", code, errOut.String())
	}
	if strings.Contains(out.String(), "agent host") {
		t.Errorf("-agent-turns 0 still ran the agent-host rows:\n%s", out.String())
	}
}

// TestBenchMultiProcess runs the multi-process rows briefly: workers are
// this test binary started again (bench.go's init serves them). The
// figures are sane, the JSON has them, and every event the workers
// acknowledged is in the stores (bench's TestMultiDurable checks that in
// detail; here the row's count is compared with what the store holds).
func TestBenchMultiProcess(t *testing.T) {
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	code := run([]string{"bench", "-dir", dir, "-keep", "-events", "1000", "-durable", "10", "-sessions", "2",
		"-procs", "2", "-proc-sessions", "3", "-multi-time", "200ms", "-follow", "40", "-follow-every", "1ms", "-agent-turns", "0", "-kill-rounds", "0", "-search-sessions", "0", "-json", jsonOut}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"2 processes x 3 sessions", "1 process x 6 sessions", "jsonl+flock per session, 2 processes x 3 sessions",
		"the events/s of 1 process", "follow: flush to Wait wake-up"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var results []bench.Result
	if err := json.Unmarshal(b, &results); err != nil {
		t.Fatal(err)
	}
	var multi []bench.Result
	for _, r := range results {
		switch r.Workload {
		case bench.MultiDurable:
			multi = append(multi, r)
			if r.Events <= 0 || r.Elapsed <= 0 || r.P50 <= 0 || r.EventsPerSec() <= 0 {
				t.Errorf("multi-process result %+v", r)
			}
		case bench.Follow:
			if r.Events != 40 || r.Procs != 2 || r.P99 < r.P50 {
				t.Errorf("follow result %+v", r)
			}
		}
	}
	if len(multi) != 3 || multi[0].Procs != 2 || multi[0].Sessions != 6 || multi[1].Procs != 1 || multi[1].Sessions != 6 || multi[2].Backend != "jsonl" {
		t.Fatalf("multi-process results %+v", multi)
	}
	// The seglog runs' stores (kept: -keep) hold exactly the events the
	// rows count.
	made, _ := filepath.Glob(filepath.Join(dir, "seglog-bench-*"))
	if len(made) != 1 {
		t.Fatalf("bench -keep left %v under --dir, want one seglog-bench-* directory", made)
	}
	for i, r := range multi[:2] {
		store := filepath.Join(made[0], fmt.Sprintf("run-%d", 5+i))
		db, err := enginetest.OpenStore(t, store, nil)
		if err != nil {
			t.Fatal(err)
		}
		snaps, err := db.List(context.Background())
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, s := range snaps {
			n += s.EventCount
		}
		if len(snaps) != 6 || n != uint64(r.Events) {
			t.Errorf("%s: %d sessions with %d events stored, the row says %d", store, len(snaps), n, r.Events)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	for _, args := range [][]string{{"-events", "0"}, {"-procs", "-1"}, {"-proc-sessions", "0"}, {"-multi-time", "0s"}, {"-follow-every", "0s"}, {"-agent-turns", "-1"}, {"-agent-sessions", "0"}, {"-kill-rounds", "-1"}, {"-search-sessions", "-1"}, {"-search-queries", "0"}} {
		if code := run(append([]string{"bench"}, args...), &out, &errOut); code != 2 {
			t.Errorf("bench %v: exit %d, want 2", args, code)
		}
	}
}

func TestBenchJetStreamSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	plot, file := filepath.Join(t.TempDir(), "js.png"), filepath.Join(t.TempDir(), "js.json")
	code := run([]string{"bench", "--backend", "jetstream", "-dir", t.TempDir(), "-events", "2000", "-durable", "20", "-sessions", "4", "--json", file, "-plot", plot}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// Each workload on each backend, the jetstream rows after the local.
	var js []struct {
		Name    string `json:"name"`
		Backend string `json:"backend"`
		Events  int    `json:"events"`
	}
	if b, err := os.ReadFile(file); err != nil || json.Unmarshal(b, &js) != nil || len(js) != 10 {
		t.Errorf("--json %s: %v\n%s", file, err, b)
	}
	for i, r := range js {
		if want := [2]string{"local", "jetstream"}[i%2]; r.Backend != want || r.Events <= 0 || !strings.HasSuffix(r.Name, "("+want+")") {
			t.Errorf("row %d: %+v, want backend %s", i, r, want)
		}
	}
	checkPlot(t, plot, 10)
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "append") || strings.Contains(line, "replay ") {
			rows++
			if f := strings.Fields(line); !strings.HasSuffix(f[len(f)-1], "x") {
				t.Errorf("row without a local/jetstream ratio: %q", line)
			}
		}
	}
	if rows != 5 {
		t.Errorf("%d workload rows, want 5:\n%s", rows, out.String())
	}
	if code := run([]string{"bench", "--backend", "nope"}, &out, &errOut); code != 2 {
		t.Errorf("--backend nope: exit %d, want 2", code)
	}
}

// bench --json prints the rows on stdout (the table then on stderr),
// each with its name and the documented fields; --json FILE writes them
// to FILE; -plot draws a PNG of the bars and the latency lines.
func TestBenchJSONAndPlot(t *testing.T) {
	small := []string{"bench", "-events", "2000", "-durable", "20", "-sessions", "3", "-procs", "0", "-follow", "0", "-agent-sessions", "2", "-agent-turns", "2", "-kill-rounds", "0", "-search-sessions", "0"}
	plot := filepath.Join(t.TempDir(), "bench.png")
	var out, errOut bytes.Buffer
	code := run(append(small, "-dir", t.TempDir(), "--json", "-plot", plot), &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var rows []struct {
		Name      string `json:"name"`
		Workload  string `json:"workload"`
		Sessions  int    `json:"sessions"`
		Events    int    `json:"events"`
		Input     int64  `json:"input_bytes"`
		Disk      int64  `json:"disk_bytes"`
		ElapsedNS int64  `json:"elapsed_ns"`
		P50       int64  `json:"p50_ns"`
		P99       int64  `json:"p99_ns"`
		Latency   []struct {
			P  float64 `json:"p"`
			NS int64   `json:"ns"`
		} `json:"latency"`
		Procs    int    `json:"procs"`
		Backend  string `json:"backend"`
		Turns    int    `json:"turns"`
		Raw      int64  `json:"raw_json_bytes"`
		Written  int64  `json:"written_bytes"`
		Rest     int64  `json:"rest_bytes"`
		Heap     int64  `json:"heap_per_session"`
		IdleHeap int64  `json:"heap_per_idle_session"`
		CPU      int64  `json:"cpu_ns"`
		Corpus   string `json:"corpus"`
	}
	// The fields above are those docs/CLI.md's "CLI output" documents: a new
	// one fails here until it is documented there and added.
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("bench --json: %v\n%s", err, out.String())
	}
	names := map[string]bool{}
	for _, r := range rows {
		names[r.Name] = true
		if r.Workload == "" || r.Events <= 0 || r.ElapsedNS <= 0 {
			t.Errorf("row %+v", r)
		}
		if r.Workload == string(bench.AgentHost) && r.CPU <= 0 {
			t.Errorf("agent-host row %q without its CPU time: %+v", r.Name, r)
		}
		if r.Workload != string(bench.Bulk) && r.Workload != string(bench.Replay) &&
			(r.P50 <= 0 || r.P99 < r.P50 || len(r.Latency) != len(bench.DistributionPoints) || r.Latency[len(r.Latency)-1].NS < r.P99) {
			t.Errorf("row %q: p50 %d p99 %d latency %+v", r.Name, r.P50, r.P99, r.Latency)
		}
	}
	for _, want := range []string{"raw write+fdatasync (the limit)", "durable append+flush, 3 sessions", "replay one session, decode every event",
		"agent host, 2 sessions x 2 turns", "agent host, 2 sessions x 2 turns, jsonl reference"} {
		if !names[want] {
			t.Errorf("bench --json has no row %q: %v", want, names)
		}
	}
	if len(rows) != 7 {
		t.Errorf("%d rows, want 7", len(rows))
	}
	if !strings.Contains(errOut.String(), "workload") || !strings.Contains(errOut.String(), "bytes on disk per event") {
		t.Errorf("bench --json: the table is not on stderr:\n%s", errOut.String())
	}
	checkPlot(t, plot, 7)

	// --json FILE and --json=FILE write the file, the table on stdout.
	for _, form := range [][]string{{"--json", "F"}, {"--json=F"}, {"-json", "F"}} {
		file := filepath.Join(t.TempDir(), "rows.json")
		args := append(slices.Clone(small), "-dir", t.TempDir(), "-agent-turns", "0", "-events", "1000")
		for _, f := range form {
			args = append(args, strings.ReplaceAll(f, "F", file))
		}
		out.Reset()
		if code := run(args, &out, &errOut); code != 0 {
			t.Fatalf("%v: exit %d: %s", form, code, errOut.String())
		}
		b, err := os.ReadFile(file)
		if err != nil || json.Unmarshal(b, &rows) != nil || len(rows) != 5 || rows[0].Name == "" {
			t.Errorf("%v: %v\n%s", form, err, b)
		}
		if !strings.Contains(out.String(), "workload") {
			t.Errorf("%v: no table on stdout:\n%s", form, out.String())
		}
	}
}

// checkPlot decodes the PNG bench -plot drew: 960 pixels wide, taller as
// it has more bars, on white, with the first series' color on it (the
// bars) and the lines' colors.
func checkPlot(t *testing.T, path string, bars int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != 960 || b.Dy() < 400+bars*20 {
		t.Errorf("plot %dx%d, want 960 wide and at least %d high", b.Dx(), b.Dy(), 400+bars*20)
	}
	colors := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0xff}]++
		}
	}
	all := b.Dx() * b.Dy()
	white := colors[color.RGBA{0xff, 0xff, 0xff, 0xff}]
	bar := colors[color.RGBA{0x4e, 0x79, 0xa7, 0xff}] // the first series' and line's color
	second := colors[color.RGBA{0xf2, 0x8e, 0x2b, 0xff}]
	if white > all*98/100 || white < all/3 || bar < all/100 || second == 0 {
		t.Errorf("plot: %d of %d pixels white, %d of the bars' color, %d of the second line's", white, all, bar, second)
	}
}

// TestBenchKillRows runs the window-durability rows for one round: the
// section is printed with a line per round and the sums, the promise held,
// and --json has both rows with the documented kill_window fields.
func TestBenchKillRows(t *testing.T) {
	var out, errOut bytes.Buffer
	jsonOut := filepath.Join(t.TempDir(), "bench.json")
	code := run([]string{"bench", "-dir", t.TempDir(), "-events", "1000", "-durable", "10", "-sessions", "2", "-procs", "0", "-follow", "0",
		"-agent-turns", "0", "-kill-rounds", "1", "-search-sessions", "0", "-json", jsonOut}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut.String(), out.String())
	}
	for _, want := range []string{"window durability: 8 agent-host sessions", "lost > bound", "oldest lost ms", "the promise held"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	lines := 0
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) > 3 && f[0] == "jsonl" && f[1] == "reference" {
			f = f[1:]
		}
		if len(f) > 2 && (f[0] == "seglog" || f[0] == "reference") && (f[1] == "1" || f[1] == "all") {
			lines++
		}
	}
	if lines != 4 {
		t.Errorf("%d lines of the kill section, want a round and the sums of each store:\n%s", lines, out.String())
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	type totals struct {
		Handed, Acked, Lost   int
		LostOld               int   `json:"lost_old"`
		FlushedLost           int   `json:"flushed_lost"`
		OldestLost            int64 `json:"oldest_lost_ns"`
		Bound                 int64 `json:"bound_ns"`
		Sessions, Missing     int
		Interrupted, Unclosed int
		CheckProblems         int `json:"check_problems"`
		Problems              []string
	}
	type row struct {
		Name, Workload, Backend string
		Events, Sessions        int
		ElapsedNS               int64 `json:"elapsed_ns"`
		Input                   int64 `json:"input_bytes"`
		Disk                    int64 `json:"disk_bytes"`
		Kill                    *struct {
			Window    int64 `json:"window_ns"`
			FlushOnly bool  `json:"flush_only"`
			Rounds    []struct {
				KillAfter    int64 `json:"kill_after_ns"`
				SlowestFlush int64 `json:"slowest_flush_ns"`
				totals
			}
			totals
		} `json:"kill_window"`
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(b, &raws); err != nil {
		t.Fatal(err)
	}
	var kills []string
	for _, raw := range raws {
		var r row
		if json.Unmarshal(raw, &r) != nil || r.Workload != string(bench.KillWindow) {
			continue
		}
		// The kill-window rows' fields are those docs/CLI.md's "CLI output"
		// documents.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("bench --json: %v\n%s", err, raw)
		}
		kills = append(kills, r.Backend)
		k := r.Kill
		if k == nil || len(k.Rounds) != 1 || k.Window != int64(200*time.Millisecond) || r.Events != k.Handed || k.Handed == 0 ||
			k.LostOld != 0 || k.FlushedLost != 0 || k.Unclosed != 0 || k.CheckProblems != 0 || k.Bound < k.Window || r.Sessions != 8 {
			t.Errorf("row %q: %s", r.Name, b)
		}
	}
	if !slices.Equal(kills, []string{"seglog", "jsonl"}) {
		t.Errorf("kill-window rows of %v, want seglog and jsonl: %s", kills, b)
	}
}

// bench --dir writes its stores in a directory of its own under it and
// removes it at the end: a --dir that is a store (or anything else) is
// left as it was.
func TestBenchLeavesDirAsItWas(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"bench", "-dir", dir, "-events", "200", "-durable", "10", "-sessions", "2",
		"-procs", "0", "-follow", "0", "-agent-turns", "0", "-kill-rounds", "0", "-search-sessions", "3", "-search-queries", "2"}, &out, &errOut); code != 0 {
		t.Fatalf("bench: exit %d\n%s%s", code, out.String(), errOut.String())
	}
	names, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0].Name() != "mine" {
		t.Errorf("bench left %v in --dir, want only the file that was there", names)
	}
}

// bench --tmpfs DIR runs the agent-host rows a second time with their
// stores in a seglog-bench-* directory made in DIR (a tmpfs in use:
// /dev/shm), which it removes, and says the ratio to the reference there;
// without agent-host rows it is a usage error.
func TestBenchTmpfsRows(t *testing.T) {
	tmpfs := t.TempDir()
	var out, errOut bytes.Buffer
	code := run([]string{"bench", "-dir", t.TempDir(), "-tmpfs", tmpfs, "-events", "1000", "-durable", "10", "-sessions", "2", "-procs", "0", "-follow", "0",
		"-agent-sessions", "2", "-agent-turns", "2", "-kill-rounds", "0", "-search-sessions", "0"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"agent host, 2 sessions x 2 turns, on tmpfs ", "agent host, 2 sessions x 2 turns, jsonl reference, on tmpfs ", "the reference's events/s on tmpfs"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if ents, err := os.ReadDir(tmpfs); err != nil || len(ents) != 0 {
		t.Errorf("--tmpfs left %d entries in its directory (%v)", len(ents), err)
	}
	out.Reset()
	if code := run([]string{"bench", "-dir", t.TempDir(), "-tmpfs", tmpfs, "-agent-turns", "0"}, &out, &errOut); code != 2 {
		t.Errorf("--tmpfs with --agent-turns 0: exit %d, want 2", code)
	}
}

// TestBenchSearchRow runs the search row (issue 46's S6, the search
// package alone) on a small store: its section prints each figure beside
// its goal, and --json has its row, with exactly the fields README's "CLI
// output" documents, counting the events the agent turns made, those the
// index takes (search.DocOf) and their raw JSON, and query latencies in
// order; -plot draws with it. The index the row built holds each
// indexed event once, and the queries found what the index, searched
// again, finds.
func TestBenchSearchRow(t *testing.T) {
	const sessions, queries = 12, 6
	var out, errOut bytes.Buffer
	dir := t.TempDir()
	jsonOut, plot := filepath.Join(t.TempDir(), "bench.json"), filepath.Join(t.TempDir(), "bench.png")
	code := run([]string{"bench", "-dir", dir, "-keep", "-events", "200", "-durable", "10", "-sessions", "2", "-procs", "0", "-follow", "0",
		"-agent-turns", "0", "-kill-rounds", "0", "-search-sessions", fmt.Sprint(sessions), "-search-queries", fmt.Sprint(queries), "-json", jsonOut, "-plot", plot}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, errOut.String(), out.String())
	}
	for _, want := range []string{"search (issue 46's S6, the search package alone): 12 sessions x 2 agent turns", "build from the change feed, events/s",
		"index bytes / raw JSON of the indexed events", "two words (6 queries), p50 / p99 ms", "phrase, p50 / p99 ms", ">= 30000", "<= 5 / <= 50", "BenchmarkS6"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	checkPlot(t, plot, 6)
	// What the row must count, made again here from the same turns.
	c, err := bench.LoadCorpus("")
	if err != nil {
		t.Fatal(err)
	}
	events, indexed := 0, 0
	var raw int64
	for i := range sessions {
		var seq uint64
		for turn := range 2 {
			evs := bench.AgentTurn(c, i, turn, seq)
			seq += uint64(len(evs))
			events += len(evs)
			for _, e := range evs {
				if _, ok := search.DocOf(e, 0); ok {
					b, _ := json.Marshal(e)
					indexed++
					raw += int64(len(b))
				}
			}
		}
	}
	b, err := os.ReadFile(jsonOut)
	if err != nil {
		t.Fatal(err)
	}
	var rows []json.RawMessage
	if err := json.Unmarshal(b, &rows); err != nil || len(rows) != 6 {
		t.Fatalf("%d rows (%v), want the 5 of the table and the search row:\n%s", len(rows), err, b)
	}
	var r struct {
		Name      string `json:"name"`
		Workload  string `json:"workload"`
		Sessions  int    `json:"sessions"`
		Events    int    `json:"events"`
		Input     int64  `json:"input_bytes"`
		Disk      int64  `json:"disk_bytes"`
		ElapsedNS int64  `json:"elapsed_ns"`
		P50       int64  `json:"p50_ns"`
		P99       int64  `json:"p99_ns"`
		Latency   []struct {
			P  float64 `json:"p"`
			NS int64   `json:"ns"`
		} `json:"latency"`
		Turns  int    `json:"turns"`
		Raw    int64  `json:"raw_json_bytes"`
		Corpus string `json:"corpus"`
		Search struct {
			Indexed    int   `json:"indexed_events"`
			IndexBytes int64 `json:"index_bytes"`
			Queries    int   `json:"queries"`
			Hits       int   `json:"two_word_hits"`
			PhraseP50  int64 `json:"phrase_p50_ns"`
			PhraseP99  int64 `json:"phrase_p99_ns"`
		} `json:"search"`
	}
	dec := json.NewDecoder(bytes.NewReader(rows[5]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("search row: %v\n%s", err, rows[5])
	}
	s := r.Search
	if r.Workload != "search" || r.Sessions != sessions || r.Turns != 2 || r.Events != events || r.Input <= 0 || r.ElapsedNS <= 0 || r.Corpus == "" ||
		r.Raw != raw || s.Indexed != indexed || indexed == 0 || s.IndexBytes <= 0 || s.Queries != queries {
		t.Errorf("search row %+v; want %d events, %d indexed, %d raw JSON bytes", r, events, indexed, raw)
	}
	if r.P50 <= 0 || r.P99 < r.P50 || len(r.Latency) != len(bench.DistributionPoints) || r.Latency[len(r.Latency)-1].NS < r.P99 ||
		s.PhraseP50 <= 0 || s.PhraseP99 < s.PhraseP50 {
		t.Errorf("search row's latencies: p50 %d p99 %d %+v, phrase %d %d", r.P50, r.P99, r.Latency, s.PhraseP50, s.PhraseP99)
	}
	// The index the row built (kept: -keep) holds every indexed event
	// once, and its two-word queries find the hits the row counted.
	made, _ := filepath.Glob(filepath.Join(dir, "seglog-bench-*", "search"))
	if len(made) != 1 {
		t.Fatalf("bench -keep: %v, want one search directory", made)
	}
	db, err := enginetest.OpenStore(t, filepath.Join(made[0], "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ix, err := search.Open(store.Wrap[*engine.Handle](db), filepath.Join(made[0], "index"), search.Options{Fresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	sq, err := sql.Open("sqlite", filepath.Join(made[0], "index", search.FileName))
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	var docs, distinct int
	if err := sq.QueryRow(`SELECT count(*), count(DISTINCT sid || ':' || seq) FROM docs`).Scan(&docs, &distinct); err != nil {
		t.Fatal(err)
	}
	if docs != indexed || distinct != indexed {
		t.Errorf("the index holds %d rows of %d events, want %d once each", docs, distinct, indexed)
	}
	two, _ := searchQueries(c, queries)
	hits := 0
	for _, q := range two {
		res, err := ix.Search(context.Background(), search.Query{Text: q, Roles: []string{"*"}, Limit: 50, PerSess: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range res.Sessions {
			hits += len(s.Hits)
		}
	}
	if hits != s.Hits || hits == 0 {
		t.Errorf("the row's two-word queries found %d hits, the index it built finds %d", s.Hits, hits)
	}
}

// The search row's queries come from the corpus's .md files, or from all
// of its files if it has none (a binary run outside the source tree has
// the embedded .go files only: it used to panic there).
func TestSearchQueriesWithoutMarkdown(t *testing.T) {
	for _, c := range []*bench.Corpus{
		{Files: []bench.CorpusFile{{Path: "bench/a.go", Text: "package bench // measures durable appends against peers"}}},
		{Files: []bench.CorpusFile{{Path: "bench/b.go", Text: "x y"}}},
		{},
	} {
		two, phrase := searchQueries(c, 5)
		if len(two) != 5 || len(phrase) != 5 {
			t.Fatalf("%d two-word queries and %d phrases, want 5 each", len(two), len(phrase))
		}
		for _, q := range two {
			if len(strings.Fields(q)) != 2 {
				t.Errorf("query %q is not two words", q)
			}
		}
	}
	two, _ := searchQueries(&bench.Corpus{Files: []bench.CorpusFile{{Path: "bench/a.go", Text: "measures durable appends"}}}, 3)
	for _, q := range two {
		for _, w := range strings.Fields(q) {
			if w != "measures" && w != "durable" && w != "appends" {
				t.Errorf("query %q: %q is not a word of the corpus", q, w)
			}
		}
	}
}
