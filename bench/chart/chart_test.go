package chart

import (
	"bytes"
	"flag"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/seglog/seglog/bench"
)

var keep = flag.String("keep", "", "also write each test's PNG to this file prefix (to look at)")

// decode decodes a PNG and returns it, failing the test if it does not
// decode or is not width pixels wide.
func decode(t *testing.T, name string, b []byte) image.Image {
	t.Helper()
	if *keep != "" {
		os.WriteFile(*keep+strings.ReplaceAll(t.Name(), "/", "-")+"-"+name+".png", b, 0o644)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Bounds().Dx(); got != 960 {
		t.Errorf("image %d pixels wide, want 960", got)
	}
	return img
}

// colorShare is the share of img's pixels that are close to c.
func colorShare(img image.Image, c color.Color) float64 {
	r0, g0, b0, _ := c.RGBA()
	near := func(a, b uint32) bool { return math.Abs(float64(a)-float64(b)) < 0x1000 }
	n, all := 0, 0
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y++ {
		for x := bd.Min.X; x < bd.Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(r, r0) && near(g, g0) && near(b, b0) {
				n++
			}
			all++
		}
	}
	return float64(n) / float64(all)
}

// Grouped bars: every series is drawn (its color covers part of the
// image), the image grows with the bars of a horizontal chart, and the
// background is white.
func TestBars(t *testing.T) {
	var buf bytes.Buffer
	peers := &Bars{Title: "events/s", Unit: "events/s", Log: true,
		Groups: []string{"S1", "S2", "S3"},
		Series: []Series{{"seglog", []float64{900, 30_000, 2e6}}, {"sqlite", []float64{500, 0, 4e5}}, {"pebble", []float64{700, 9000, 0}}}}
	if err := WritePNG(&buf, peers); err != nil {
		t.Fatal(err)
	}
	img := decode(t, "vertical", buf.Bytes())
	if h := img.Bounds().Dy(); h != 384 {
		t.Errorf("vertical bars: %d pixels high, want 384 (4 inches)", h)
	}
	if white := colorShare(img, color.White); white < 0.3 || white > 0.98 {
		t.Errorf("%.2f of the image is white: blank or not drawn", white)
	}
	for i := range peers.Series {
		if s := colorShare(img, palette[i]); s < 0.002 {
			t.Errorf("series %d's color covers %.4f of the image: its bars are missing", i, s)
		}
	}

	buf.Reset()
	rows := &Bars{Title: "throughput", Unit: "events/s", Log: true, Horizontal: true,
		Groups: []string{"raw write+fdatasync (the limit)", "durable append+flush, 1 session", "bulk append", "replay"},
		Series: []Series{{"", []float64{1200, 1000, 900_000, 3e6}}}}
	if err := WritePNG(&buf, rows); err != nil {
		t.Fatal(err)
	}
	img = decode(t, "horizontal", buf.Bytes())
	want := int(math.Round(float64(chartMargin+4*barRow) / 72 * dpi))
	if h := img.Bounds().Dy(); h < want-1 || h > want+1 {
		t.Errorf("horizontal bars: %d pixels high, want %d", h, want)
	}
	if s := colorShare(img, palette[0]); s < 0.01 {
		t.Errorf("the bars cover %.4f of the image", s)
	}
	if err := WritePNG(&buf, &Bars{Groups: []string{"a"}, Series: []Series{{"x", []float64{1, 2}}}}); err == nil {
		t.Error("a series with more values than groups drew")
	}
	if err := WritePNG(&buf, &Bars{Groups: []string{"a", "b"}, Series: []Series{{"x", []float64{1, math.NaN()}}}}); err == nil {
		t.Error("a NaN drew")
	}
}

// Distributions: a line per run, in its color; charts stack.
func TestDistributions(t *testing.T) {
	var buf bytes.Buffer
	lat := func(scale time.Duration) []bench.Percentile {
		var ds []time.Duration
		for i := range 1000 {
			ds = append(ds, scale+time.Duration(i*i)*scale/10_000)
		}
		return bench.Distribution(ds)
	}
	d := &Distributions{Title: "flush latency", Lines: []Distribution{{"raw", lat(time.Millisecond)}, {"follow", lat(60 * time.Microsecond)}, {"none", nil}}}
	b := &Bars{Title: "t", Horizontal: true, Groups: []string{"a"}, Series: []Series{{"", []float64{5}}}}
	if err := WritePNG(&buf, d, b); err != nil {
		t.Fatal(err)
	}
	img := decode(t, "lines", buf.Bytes())
	want := int(math.Round(float64(lineHeight+chartMargin+barRow) / 72 * dpi))
	if h := img.Bounds().Dy(); h < want-1 || h > want+1 {
		t.Errorf("%d pixels high, want %d", h, want)
	}
	for i := range 2 {
		if s := colorShare(img, palette[i]); s < 0.0005 {
			t.Errorf("line %d's color covers %.5f of the image", i, s)
		}
	}
}

// Nothing to draw is an error, not a blank image.
func TestNothingToDraw(t *testing.T) {
	var buf bytes.Buffer
	if err := WritePNG(&buf, &Distributions{Title: "x"}, &Bars{Title: "y"}); err == nil || buf.Len() > 0 {
		t.Errorf("empty charts: err %v, %d bytes", err, buf.Len())
	}
}
