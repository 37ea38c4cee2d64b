package bench

import (
	"context"
	"testing"
	"time"
)

func TestRunEveryWorkload(t *testing.T) {
	for _, w := range []Workload{RawSync, Durable, Bulk, Replay} {
		t.Run(string(w), func(t *testing.T) {
			r, err := Run(context.Background(), Config{Workload: w, Dir: t.TempDir(), Events: 300, Sessions: 3, Batch: 50})
			if err != nil {
				t.Fatal(err)
			}
			if r.Events != 300 || r.Elapsed <= 0 || r.InputBytes <= 0 {
				t.Fatalf("result %+v", r)
			}
			if w != Replay && w != Bulk && r.P50 <= 0 {
				t.Errorf("%s measured no latency", w)
			}
			if w == Replay && r.Sessions != 3 {
				t.Errorf("replay read %d sessions, want 3", r.Sessions)
			}
			if w == Bulk && r.DiskBytes <= 0 {
				t.Errorf("bulk reports no disk bytes")
			}
		})
	}
	if _, err := Run(context.Background(), Config{Workload: "nope", Dir: t.TempDir()}); err == nil {
		t.Error("unknown workload accepted")
	}
	if _, err := Run(context.Background(), Config{Workload: Bulk}); err == nil {
		t.Error("missing Dir accepted")
	}
}

// Distribution's points are nearest ranks, P50 and P99 among them as
// Result has them.
func TestDistribution(t *testing.T) {
	if Distribution(nil) != nil {
		t.Error("a distribution of no latencies")
	}
	ds := make([]time.Duration, 1000)
	for i := range ds {
		ds[i] = time.Duration(i+1) * time.Microsecond
	}
	want := map[float64]time.Duration{0: 1, 1: 11, 50: 501, 99: 991, 99.9: 1000, 100: 1000}
	got := Distribution(ds)
	if len(got) != len(DistributionPoints) {
		t.Fatalf("%d points, want %d", len(got), len(DistributionPoints))
	}
	for i, p := range got {
		if p.P != DistributionPoints[i] || (i > 0 && p.Latency < got[i-1].Latency) {
			t.Errorf("point %d: %+v", i, p)
		}
		if w, ok := want[p.P]; ok && p.Latency != w*time.Microsecond {
			t.Errorf("p%v = %v, want %v", p.P, p.Latency, w*time.Microsecond)
		}
	}
	r, err := Run(context.Background(), Config{Workload: Durable, Dir: t.TempDir(), Events: 50})
	if err != nil {
		t.Fatal(err)
	}
	at := func(p float64) time.Duration {
		for _, q := range r.Latency {
			if q.P == p {
				return q.Latency
			}
		}
		return -1
	}
	if len(r.Latency) != len(DistributionPoints) || at(50) != r.P50 || at(99) != r.P99 {
		t.Errorf("durable run: p50 %v p99 %v, distribution %+v", r.P50, r.P99, r.Latency)
	}
}
