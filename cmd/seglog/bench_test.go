package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchSmall(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"bench", "-dir", t.TempDir(), "-events", "3000", "-durable", "20", "-sessions", "4"}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"raw write+fdatasync", "durable append+flush, 1 session", "4 sessions", "bulk append", "replay", "bytes on disk per event", "the raw limit"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// The replay row reports every bulk event back.
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.Contains(line, "replay") && !strings.Contains(line, " 3000 ") {
			t.Errorf("replay row does not show 3000 events: %q", line)
		}
	}
}

func TestBenchRejectsBadFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"bench", "-events", "0"}, &out, &errOut); code != 2 {
		t.Errorf("bench -events 0: exit %d, want 2", code)
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
