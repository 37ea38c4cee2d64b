package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Bar is one labelled value of a chart.
type Bar struct {
	Label string
	Value float64
}

// Panel is one chart: a title, a unit and its bars.
type Panel struct {
	Title string
	Unit  string
	Log   bool // log10 scale (for values spanning decades)
	Bars  []Bar
}

// PlotPNG draws the panels one under the other as horizontal bar charts
// and writes a PNG.
func PlotPNG(w io.Writer, panels []Panel) error {
	const width, rowH, top, labelW, pad = 960, 22, 30, 330, 12
	height := pad
	for _, p := range panels {
		height += top + rowH*len(p.Bars) + pad
	}
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text := func(x, y int, s string, c color.Color) {
		d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
		d.DrawString(s)
	}
	colors := []color.RGBA{{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff}, {0x94, 0x67, 0xbd, 0xff}}
	y := pad
	for _, p := range panels {
		text(pad, y+16, fmt.Sprintf("%s (%s%s)", p.Title, p.Unit, map[bool]string{true: ", log scale", false: ""}[p.Log]), color.Black)
		y += top
		maxV := 0.0
		for _, b := range p.Bars {
			maxV = math.Max(maxV, scale(b.Value, p.Log))
		}
		for i, b := range p.Bars {
			text(pad, y+15, b.Label, color.Black)
			bw := 0
			if maxV > 0 {
				bw = int(float64(width-labelW-140) * scale(b.Value, p.Log) / maxV)
			}
			draw.Draw(img, image.Rect(labelW, y+3, labelW+max(bw, 1), y+rowH-3), image.NewUniform(colors[i%len(colors)]), image.Point{}, draw.Src)
			text(labelW+bw+6, y+15, humanize(b.Value), color.Black)
			y += rowH
		}
		y += pad
	}
	return png.Encode(w, img)
}

func scale(v float64, log bool) float64 {
	if !log {
		return v
	}
	return math.Log10(math.Max(v, 1))
}

func humanize(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.1f", v)
}
