package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/engine"
)

func TestBenchSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"bench", "-dir", t.TempDir(), "-events", "3000", "-durable", "20", "-sessions", "4", "-procs", "0", "-follow", "0",
		"-agent-sessions", "3", "-agent-turns", "2"}, &out, &errOut)
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
	if code := run([]string{"bench", "-dir", t.TempDir(), "-events", "3000", "-durable", "20", "-sessions", "4", "-procs", "0", "-follow", "0", "-agent-turns", "0"}, &out, &errOut); code != 0 {
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
	code := run([]string{"bench", "-dir", dir, "-events", "1000", "-durable", "10", "-sessions", "2",
		"-procs", "2", "-proc-sessions", "3", "-multi-time", "200ms", "-follow", "40", "-follow-every", "1ms", "-agent-turns", "0", "-json", jsonOut}, &out, &errOut)
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
	// The seglog runs' stores hold exactly the events the rows count.
	for i, r := range multi[:2] {
		store := filepath.Join(dir, fmt.Sprintf("run-%d", 5+i))
		db, err := engine.Open(store, nil)
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
	for _, args := range [][]string{{"-events", "0"}, {"-procs", "-1"}, {"-proc-sessions", "0"}, {"-multi-time", "0s"}, {"-follow-every", "0s"}, {"-agent-turns", "-1"}, {"-agent-sessions", "0"}} {
		if code := run(append([]string{"bench"}, args...), &out, &errOut); code != 2 {
			t.Errorf("bench %v: exit %d, want 2", args, code)
		}
	}
}

func TestBenchJetStreamSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"bench", "--backend", "jetstream", "-dir", t.TempDir(), "-events", "2000", "-durable", "20", "-sessions", "4"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	rows := 0
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "append") || strings.Contains(line, "replay one session") {
			rows++
			if f := strings.Fields(line); !strings.HasSuffix(f[len(f)-1], "x") {
				t.Errorf("row without a local/jetstream ratio: %q", line)
			}
		}
	}
	if rows != 4 {
		t.Errorf("%d workload rows, want 4:\n%s", rows, out.String())
	}
	if code := run([]string{"bench", "--backend", "nope"}, &out, &errOut); code != 2 {
		t.Errorf("--backend nope: exit %d, want 2", code)
	}
}
