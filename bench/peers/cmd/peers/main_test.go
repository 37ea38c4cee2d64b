package main

import (
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
	"github.com/seglog/seglog/bench/peers"
)

// -plot draws the bars of every workload and a latency chart per timed
// workload: the PNG decodes, is as tall as its charts, and holds each
// peer's color; a failed run has no bar and no line.
func TestPlot(t *testing.T) {
	list := []peers.Peer{{Name: "seglog"}, {Name: "sqlite"}, {Name: "bbolt"}}
	ws := []peers.Workload{peers.S1, peers.S3, peers.S5}
	dist := func(us int) []bench.Percentile {
		ds := make([]time.Duration, 100)
		for i := range ds {
			ds[i] = time.Duration(us*(100+i)) * time.Microsecond / 100
		}
		return bench.Distribution(ds)
	}
	var rs []peers.Result
	for i, p := range list {
		for _, w := range ws {
			r := peers.Result{Peer: p.Name, Workload: w, Events: 1000 * (i + 1), Seconds: 0.5}
			if w != peers.S3 {
				r.Latency = dist(100 * (i + 1))
			}
			if p.Name == "bbolt" && w == peers.S5 {
				r = peers.Result{Peer: p.Name, Workload: w, Err: "failed"}
			}
			rs = append(rs, r)
		}
	}
	path := filepath.Join(t.TempDir(), "peers.png")
	if err := plot(path, rs, list, ws); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	// The bars (4 inches) and two latency charts (S1, S5; 4 inches each)
	// at 96 dots per inch.
	if b := img.Bounds(); b.Dx() != 960 || b.Dy() != 3*384 {
		t.Errorf("plot %v, want 960x%d", b, 3*384)
	}
	count := map[color.RGBA]int{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			count[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), 0xff}]++
		}
	}
	all := b.Dx() * b.Dy()
	if white := count[color.RGBA{0xff, 0xff, 0xff, 0xff}]; white > all*98/100 || white < all/3 {
		t.Errorf("%d of %d pixels white", white, all)
	}
	// The first three colors of bench/chart's palette: a peer's each.
	for i, c := range []color.RGBA{{0x4e, 0x79, 0xa7, 0xff}, {0xf2, 0x8e, 0x2b, 0xff}, {0xe1, 0x57, 0x59, 0xff}} {
		if count[c] < all/500 {
			t.Errorf("peer %s's color: %d pixels", list[i].Name, count[c])
		}
	}
}
