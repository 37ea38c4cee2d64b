package bench

import (
	"bytes"
	"context"
	"image/png"
	"testing"
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

func TestPlotPNG(t *testing.T) {
	var buf bytes.Buffer
	err := PlotPNG(&buf, []Panel{
		{Title: "throughput", Unit: "events/s", Log: true, Bars: []Bar{{"a", 10}, {"b", 1e6}}},
		{Title: "latency", Unit: "µs", Bars: []Bar{{"a", 150}, {"b", 0}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 960 || b.Dy() < 100 {
		t.Errorf("image %v", b)
	}
}
