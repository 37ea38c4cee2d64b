package bench

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seglog/seglog/engine/enginetest"
	"github.com/seglog/seglog/jsonl"
	"github.com/seglog/seglog/store"
)

// TestMain lets the test binary be the workers of the multi-process
// workloads.
func TestMain(m *testing.M) {
	ServeWorker()
	os.Exit(m.Run())
}

// TestMultiDurable runs the multi-process workload briefly on both
// backends, by turns and by time, and finds every event a worker
// acknowledged in the store afterwards, and nothing more.
func TestMultiDurable(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		backend  string
		events   int
		duration time.Duration
	}{
		{"seglog", 3 * 4 * 20, 0},
		{"seglog", 0, 300 * time.Millisecond},
		{"jsonl", 0, 200 * time.Millisecond},
	} {
		t.Run(tc.backend+"-"+tc.duration.String(), func(t *testing.T) {
			dir := t.TempDir()
			r, err := Run(ctx, Config{Workload: MultiDurable, Dir: dir, Procs: 3, Sessions: 4, Events: tc.events,
				Duration: tc.duration, Backend: tc.backend})
			if err != nil {
				t.Fatal(err)
			}
			if r.Procs != 3 || r.Sessions != 12 || r.Backend != tc.backend || len(r.Acked) != 12 {
				t.Fatalf("result %+v", r)
			}
			if r.Events <= 0 || r.Elapsed <= 0 || r.InputBytes <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
				t.Fatalf("result %+v", r)
			}
			sum := 0
			for id, n := range r.Acked {
				if n == 0 {
					t.Errorf("session %s acknowledged nothing", id)
				}
				if tc.duration == 0 && n != 20 {
					t.Errorf("session %s: %d events acknowledged, want 20 turns", id, n)
				}
				sum += int(n)
			}
			if sum != r.Events {
				t.Errorf("events %d, acknowledged %d", r.Events, sum)
			}
			stored := storedSessions(t, tc.backend, dir, r.Acked)
			for id, n := range r.Acked {
				if stored[id] != n {
					t.Errorf("session %s: %d events stored, %d acknowledged", id, stored[id], n)
				}
			}
			if len(stored) != len(r.Acked) {
				t.Errorf("%d sessions stored, %d written", len(stored), len(r.Acked))
			}
		})
	}
}

// storedSessions reopens what the workers wrote and returns the events of
// each session, checking that their seqs run from 0.
func storedSessions(t *testing.T, backend, dir string, ids map[string]uint64) map[string]uint64 {
	t.Helper()
	ctx := context.Background()
	out := map[string]uint64{}
	check := func(id string, seqs []uint64) {
		for i, s := range seqs {
			if s != uint64(i) {
				t.Fatalf("session %s: event %d has seq %d", id, i, s)
			}
		}
		out[id] = uint64(len(seqs))
	}
	if backend == "jsonl" {
		for id := range ids {
			p, err := jsonl.LogPath(dir, store.Header{ID: id}, false)
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			log, err := jsonl.Parse(b, false)
			if err != nil {
				t.Fatal(err)
			}
			if log.Cut != nil || log.Header.ID != id {
				t.Fatalf("%s: header %+v, cut %+v", p, log.Header, log.Cut)
			}
			var seqs []uint64
			for _, e := range log.Events {
				seqs = append(seqs, e.Seq)
			}
			check(id, seqs)
		}
		return out
	}
	db, err := enginetest.OpenStore(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	snaps, err := db.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		h, err := db.Open(ctx, s.Header.ID, store.Read)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := h.Read(ctx, 0, -1)
		h.Close()
		if err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		check(s.Header.ID, seqs)
	}
	return out
}

// TestFollow measures the follow latency over a few events: the reader
// sees every one (Run checks it waking up and reading afterwards) and
// reports percentiles.
func TestFollow(t *testing.T) {
	r, err := Run(context.Background(), Config{Workload: Follow, Dir: t.TempDir(), Events: 50, Interval: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Events != 50 || r.Procs != 2 || r.Elapsed <= 0 || r.P99 < r.P50 {
		t.Fatalf("result %+v", r)
	}
}

// TestWorkerFailure: a worker that cannot open its store fails the run
// with an error.
func TestWorkerFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(context.Background(), Config{Workload: MultiDurable, Dir: dir, Procs: 2, Sessions: 1, Events: 2})
	if err == nil {
		t.Fatal("a run on a file instead of a directory succeeded")
	}
	t.Log(err)
}

// TestWorkerProfile: Config.CPUProfile gives each worker a CPU profile.
func TestWorkerProfile(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "w")
	if _, err := Run(context.Background(), Config{Workload: MultiDurable, Dir: t.TempDir(), Procs: 2, Sessions: 1, Events: 10, CPUProfile: prefix}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"-0.pprof", "-1.pprof"} {
		if fi, err := os.Stat(prefix + n); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s: %v", n, err)
		}
	}
}
