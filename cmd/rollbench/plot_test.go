package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// drawnSeries parses an SVG figure with encoding/xml (so it must be
// well-formed) and returns, per series (its <title>), the points drawn:
// its markers, or the vertices of its line when it has no markers. Every
// point must lie inside the plot area.
func drawnSeries(t *testing.T, svg []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	out := map[string]int{}
	var (
		in, wantTitle bool
		name          string
		markers, line int
		depth         int
	)
	inside := func(x, y string) {
		fx, err1 := strconv.ParseFloat(x, 64)
		fy, err2 := strconv.ParseFloat(y, 64)
		if err1 != nil || err2 != nil || fx < padL-0.5 || fx > plotW-padR+0.5 || fy < padT-0.5 || fy > plotH-padB+0.5 {
			t.Errorf("series %q: point (%s, %s) outside the plot area", name, x, y)
		}
	}
	attr := func(e xml.StartElement, n string) string {
		for _, a := range e.Attr {
			if a.Name.Local == n {
				return a.Value
			}
		}
		return ""
	}
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			depth++
			if root == "" {
				root = e.Name.Local
				if e.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element in namespace %q, want SVG's", e.Name.Space)
				}
			}
			switch {
			case e.Name.Local == "g" && attr(e, "class") == "series":
				in, name, markers, line = true, "", 0, 0
			case in && e.Name.Local == "title":
				wantTitle = true
			case in && e.Name.Local == "circle":
				markers++
				inside(attr(e, "cx"), attr(e, "cy"))
			case in && e.Name.Local == "polyline":
				for _, pt := range strings.Fields(attr(e, "points")) {
					x, y, _ := strings.Cut(pt, ",")
					inside(x, y)
					line++
				}
			case e.Name.Local == "script" || attr(e, "href") != "":
				t.Errorf("a figure must be self-contained: <%s href=%q>", e.Name.Local, attr(e, "href"))
			}
		case xml.CharData:
			if wantTitle {
				name += string(e)
			}
		case xml.EndElement:
			depth--
			switch {
			case e.Name.Local == "title":
				wantTitle = false
			case in && e.Name.Local == "g":
				in = false
				out[name] = max(markers, line)
			}
		}
	}
	if root != "svg" || depth != 0 {
		t.Errorf("root %q, depth at the end %d", root, depth)
	}
	return out
}

// A figure is well-formed SVG holding every series with its points,
// whatever the names hold; points a log axis cannot show are left out.
func TestPlotSVGHoldsEverySeries(t *testing.T) {
	p := &plot{
		title: `Lookups <against> "backlog" & more`, xLabel: "pending segments", yLabel: "ms",
		xLog: true, yZero: true, xTicks: []float64{10, 100, 1000, 5000},
		series: []plotSeries{
			{name: "absent id, writers idle", line: true, markers: true, points: []plotPoint{{10, 1.5}, {100, 1.6}, {1000, 1.5}, {5000, 2.2}}},
			{name: "raw GET <baseline> & co", line: true, dashed: true, points: []plotPoint{{10, 1.7}, {100, 1.7}, {1000, 1.6}, {5000, 2.6}}},
			{name: "scatter", points: []plotPoint{{0, 3}, {-1, 2}, {20, math.NaN()}, {50, 4}}},
		},
	}
	got := drawnSeries(t, p.svg())
	want := map[string]int{"absent id, writers idle": 4, "raw GET <baseline> & co": 4, "scatter": 1}
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for n, k := range want {
		if got[n] != k {
			t.Errorf("series %q: %d points drawn, want %d", n, got[n], k)
		}
	}
	for _, text := range []string{">10<", ">5000<", ">pending segments<", "stroke-dasharray"} {
		if !bytes.Contains(p.svg(), []byte(text)) {
			t.Errorf("the figure lacks %s", text)
		}
	}

	// A linear time axis, and degenerate data: one point, all zero.
	for _, q := range []*plot{
		{title: "over time", xLabel: "minutes", yLabel: "generations", yZero: true,
			series: []plotSeries{{name: "pending", line: true, points: []plotPoint{{0, 3}, {0.5, 5}, {1, 4}, {10.25, 6}}}}},
		{title: "flat", series: []plotSeries{{name: "zero", line: true, points: []plotPoint{{1, 0}, {2, 0}}}}},
		{title: "one", series: []plotSeries{{name: "one", points: []plotPoint{{7, 7}}}}},
		{title: "empty"},
	} {
		drawnSeries(t, q.svg())
	}
}

func TestTicks(t *testing.T) {
	if got := linearTicks(0, 6.2); len(got) < 4 || got[0] != 0 || got[len(got)-1] < 6.2 || got[1]-got[0] != 2 {
		t.Errorf("linearTicks(0, 6.2) = %v", got)
	}
	if got := logTicks(10, 5000); len(got) < 4 || got[0] != 10 || got[len(got)-1] != 5000 {
		t.Errorf("logTicks(10, 5000) = %v", got)
	}
	if got := logTicks(1, 16); !slices.Equal(got, []float64{1, 2, 5, 10}) {
		t.Errorf("logTicks(1, 16) = %v", got)
	}
}

// checkFigures reads the figures a report embeds, beside its file, and
// checks each holds the series named.
func checkFigures(t *testing.T, md, dir string, want map[string][]string) {
	t.Helper()
	for file, names := range want {
		if !strings.Contains(md, "]("+file+")") {
			t.Errorf("the report does not embed %s", file)
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Error(err)
			continue
		}
		got := drawnSeries(t, b)
		for _, n := range names {
			if got[n] == 0 {
				t.Errorf("%s: series %q missing or empty (series: %v)", file, n, got)
			}
		}
	}
}

// The merge run's figure has its three series, one point per sample.
func TestSustainFigure(t *testing.T) {
	s := &sustainResult{shards: 3}
	for i := range 12 {
		s.samples = append(s.samples, pendingSample{at: time.Duration(i) * 5 * time.Second, gens: 3 + i%4, sealed: i % 4, maxShard: 1 + i%2})
	}
	got := drawnSeries(t, sustainPlot(s).svg())
	for _, n := range []string{"pending (sealed + open)", "sealed, waiting for a merge", "most in one shard"} {
		if got[n] != 12 {
			t.Errorf("series %q: %d points, want 12 (series %v)", n, got[n], got)
		}
	}
}
