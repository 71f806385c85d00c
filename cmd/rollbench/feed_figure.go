package main

import (
	"slices"
	"time"
)

func (r *report) feedFigureName() string { return r.storeTag() + "-feed-freshness" }

func (r *report) feedFigureFile() string { return figureDir + "/" + r.feedFigureName() + ".svg" }

// freshnessPlot draws the freshness cases as distributions: for each
// latency, the share of rows delivered within it from their append's
// start, with the raw PUT + GET of the same bytes as the baseline.
func freshnessPlot(r *feedResult) *plot {
	if r == nil || len(r.fresh) == 0 {
		return nil
	}
	p := &plot{
		title:  "Feed freshness: append start → row delivered",
		xLabel: "latency, ms (log scale)", yLabel: "rows delivered within, %",
		xLog: true, yZero: true,
	}
	cdf := func(name string, s *series, dashed bool) {
		t := slices.Clone(s.total)
		slices.Sort(t)
		ps := plotSeries{name: name, line: true, dashed: dashed}
		for i, d := range t {
			ps.points = append(ps.points, plotPoint{ms(max(d, time.Microsecond)), 100 * float64(i+1) / float64(len(t))})
		}
		if len(ps.points) > 0 {
			p.series = append(p.series, ps)
		}
	}
	for _, fc := range r.fresh {
		cdf(fc.label, &fc.e2e, false)
	}
	cdf("raw PUT + GET (baseline)", &r.baseline, true)
	return p
}
