package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Figures: the benchmark draws its own SVG (plain markup, no script, no
// external font or stylesheet), so a figure is regenerated from the same
// run's data as the tables beside it and renders on GitHub as an image.
// A section adds one with report.addFigure (a plot of named series of
// points, lines or markers, on linear or log axes), which returns the
// markdown that embeds it; the report's output writes the files.

// A plot is a line or scatter chart of named series sharing two axes.
type plot struct {
	title          string
	xLabel, yLabel string
	// xLog, yLog: logarithmic axes (points at or below 0 are left out).
	xLog, yLog bool
	// xTicks, when set, are the x axis's ticks (the levels a benchmark
	// measured, say); otherwise ticks are chosen from the data.
	xTicks []float64
	// yZero makes a linear y axis start at 0.
	yZero  bool
	series []plotSeries
}

// A plotSeries is one named set of points.
type plotSeries struct {
	name   string
	points []plotPoint
	// line joins the points in the order given; markers draws each.
	// Neither: markers.
	line, markers bool
	// dashed draws the line dashed: a baseline, a bound.
	dashed bool
}

type plotPoint struct{ x, y float64 }

// The figure's geometry, in SVG user units (pixels at 100%).
const (
	plotW, plotH           = 840, 400
	padL, padR, padT, padB = 70, 270, 40, 52 // the legend is in the right padding
)

// palette: distinguishable colours, also in grey scale order.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// axis maps data values to pixels along one axis.
type axis struct {
	lo, hi   float64 // data range (log10 of it for a log axis)
	log      bool
	p0, p1   float64 // pixel range
	ticks    []float64
	tickText []string
}

func (a *axis) pos(v float64) float64 {
	if a.log {
		v = math.Log10(v)
	}
	return a.p0 + (v-a.lo)/(a.hi-a.lo)*(a.p1-a.p0)
}

// usable reports whether v can be drawn on the axis.
func (a *axis) usable(v float64) bool {
	return !math.IsNaN(v) && !math.IsInf(v, 0) && (!a.log || v > 0)
}

// newAxis fits an axis to the values vs, with the given ticks if any.
func newAxis(vs []float64, log, zero bool, ticks []float64, p0, p1 float64) *axis {
	a := &axis{log: log, p0: p0, p1: p1}
	var data []float64
	for _, v := range append(slices.Clone(vs), ticks...) {
		if a.usable(v) {
			data = append(data, v)
		}
	}
	if len(data) == 0 {
		data = []float64{1}
	}
	lo, hi := slices.Min(data), slices.Max(data)
	if log {
		a.lo, a.hi = math.Log10(lo), math.Log10(hi)
		if a.hi-a.lo < 1e-9 {
			a.lo, a.hi = a.lo-0.5, a.hi+0.5
		}
		if ticks == nil {
			ticks = logTicks(lo, hi)
		}
		// A little room beyond the outermost points.
		pad := (a.hi - a.lo) * 0.04
		a.lo, a.hi = a.lo-pad, a.hi+pad
	} else {
		if zero && lo > 0 {
			lo = 0
		}
		if hi-lo < 1e-12 {
			lo, hi = lo-1, hi+1
		}
		if ticks == nil {
			ticks = linearTicks(lo, hi)
			if zero {
				// A quantity from 0 up to a round top.
				hi = max(hi, ticks[len(ticks)-1])
			} else {
				eps := (hi - lo) * 1e-9
				ticks = slices.DeleteFunc(ticks, func(t float64) bool { return t < lo-eps || t > hi+eps })
			}
		}
		a.lo, a.hi = lo, hi
		if !zero || a.lo < 0 {
			pad := (a.hi - a.lo) * 0.03
			a.lo, a.hi = a.lo-pad, a.hi+pad
		}
	}
	for _, t := range ticks {
		if a.usable(t) {
			a.ticks = append(a.ticks, t)
			a.tickText = append(a.tickText, tickLabel(t))
		}
	}
	return a
}

// linearTicks are about five round values (1, 2 or 5 × 10ⁿ apart)
// covering lo..hi.
func linearTicks(lo, hi float64) []float64 {
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for v := math.Floor(lo/step) * step; v <= hi+step*1e-9; v += step {
		out = append(out, math.Round(v/step)*step)
	}
	if out[len(out)-1] < hi {
		out = append(out, out[len(out)-1]+step)
	}
	return out
}

// logTicks are the powers of ten in lo..hi, with 2× and 5× between them
// when the range spans less than three decades.
func logTicks(lo, hi float64) []float64 {
	d0, d1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	mults := []float64{1}
	if math.Log10(hi/lo) < 3 {
		mults = []float64{1, 2, 5}
	}
	var out []float64
	for d := d0; d <= d1; d++ {
		for _, m := range mults {
			v := m * math.Pow(10, d)
			if v >= lo*0.999 && v <= hi*1.001 {
				out = append(out, v)
			}
		}
	}
	if len(out) < 2 {
		out = []float64{lo, hi}
	}
	return out
}

func tickLabel(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e9 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// svg renders the plot.
func (p *plot) svg() []byte {
	var xs, ys []float64
	for _, s := range p.series {
		for _, pt := range s.points {
			xs, ys = append(xs, pt.x), append(ys, pt.y)
		}
	}
	left, right, top, bottom := float64(padL), float64(plotW-padR), float64(padT), float64(plotH-padB)
	ax := newAxis(xs, p.xLog, false, p.xTicks, left, right)
	ay := newAxis(ys, p.yLog, p.yZero, nil, bottom, top)

	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotW, plotH, plotW, plotH)
	w(`<title>%s</title>`+"\n", esc(p.title))
	w(`<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", plotW, plotH)
	w(`<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", padL, esc(p.title))

	// Grid and ticks.
	w(`<g class="axes" stroke="#dddddd" stroke-width="1">` + "\n")
	for _, t := range ax.ticks {
		x := ax.pos(t)
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", x, top, x, bottom)
	}
	for _, t := range ay.ticks {
		y := ay.pos(t)
		w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`+"\n", left, y, right, y)
	}
	w(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444444"/>`+"\n", left, top, right-left, bottom-top)
	w("</g>\n")
	w(`<g class="ticks" fill="#222222">` + "\n")
	for i, t := range ax.ticks {
		w(`<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ax.pos(t), bottom+16, esc(ax.tickText[i]))
	}
	for i, t := range ay.ticks {
		w(`<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, ay.pos(t)+4, esc(ay.tickText[i]))
	}
	w("</g>\n")
	w(`<text class="xlabel" x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", (left+right)/2, plotH-12, esc(p.xLabel))
	w(`<text class="ylabel" x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n",
		(top+bottom)/2, (top+bottom)/2, esc(p.yLabel))

	// Series, then the legend.
	for i, s := range p.series {
		color := palette[i%len(palette)]
		w(`<g class="series" stroke="%s" fill="%s">`+"\n", color, color)
		w(`<title>%s</title>`+"\n", esc(s.name))
		var pts []string
		for _, pt := range s.points {
			if ax.usable(pt.x) && ay.usable(pt.y) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", ax.pos(pt.x), ay.pos(pt.y)))
			}
		}
		if s.line && len(pts) > 0 {
			dash := ""
			if s.dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			w(`<polyline fill="none" stroke-width="2"%s points="%s"/>`+"\n", dash, strings.Join(pts, " "))
		}
		if s.markers || !s.line {
			r := 3.0
			if len(pts) > 200 {
				r = 1.5 // a scatter of many points
			}
			for _, pt := range pts {
				x, y, _ := strings.Cut(pt, ",")
				w(`<circle cx="%s" cy="%s" r="%.1f"/>`+"\n", x, y, r)
			}
		}
		w("</g>\n")
	}
	w(`<g class="legend">` + "\n")
	for i, s := range p.series {
		color := palette[i%len(palette)]
		y := top + 8 + float64(i)*18
		lx := right + 14
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		if s.line {
			w(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, y, lx+22, y, color, dash)
		}
		if s.markers || !s.line {
			w(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", lx+11, y, color)
		}
		w(`<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, y+4, esc(s.name))
	}
	w("</g>\n</svg>\n")
	return b.Bytes()
}

// esc escapes text for SVG (XML) character data and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// A figure is a plot the report embeds: its file under the report's
// folder and its alternative text.
type figure struct {
	file string // relative to the report's folder: "bench/lookups-backlog.svg"
	alt  string
	plot *plot
}

// figureDir is where figures go, relative to the report (BENCHMARKS.md).
const figureDir = "bench"

// addFigure records p to be written as figureDir/name.svg beside -out and
// returns the markdown that embeds it (with a blank line after), or ""
// for a run that writes no report.
func (r *report) addFigure(name, alt string, p *plot) string {
	if r.o.out == "" || p == nil {
		return ""
	}
	f := figure{file: figureDir + "/" + name + ".svg", alt: alt, plot: p}
	r.figures = slices.DeleteFunc(r.figures, func(g figure) bool { return g.file == f.file })
	r.figures = append(r.figures, f)
	return fmt.Sprintf("![%s](%s)\n\n", alt, f.file)
}

// writeFigures writes the recorded figures beside -out.
func (r *report) writeFigures() error {
	if r.o.out == "" {
		return nil
	}
	dir := filepath.Dir(r.o.out)
	for _, f := range r.figures {
		path := filepath.Join(dir, filepath.FromSlash(f.file))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.plot.svg(), 0o644); err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}
