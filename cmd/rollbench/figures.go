package main

import (
	"fmt"
	"time"
)

// The report's figures, each built from the data of the table beside it.

// storeTag names the store in a figure's file name: the Azurite run and
// the latency model's run write figures of the same kinds.
func (r *report) storeTag() string {
	if r.e != nil && r.e.lat != nil {
		return "model"
	}
	return "azurite"
}

// scalingPlot draws a scaling table's p50 lookup latencies against its
// levels, writers idle and active, with the raw GET and HEAD of the same
// rows as the baseline; nil for a table of several dimensions.
func scalingPlot(sc *scaling, store string) *plot {
	spec := sc.spec
	if len(spec.dims) != 1 || len(sc.rows) == 0 {
		return nil
	}
	p := &plot{
		title:  fmt.Sprintf("Lookups against %s (%s), p50", spec.what, store),
		xLabel: spec.dims[0] + " (log scale)", yLabel: "p50 latency, ms",
		xLog: true, yZero: true,
	}
	for _, l := range spec.levels {
		p.xTicks = append(p.xTicks, float64(l.coords[0]))
	}
	for _, c := range []struct {
		name   string
		kind   string
		active bool
		raw    bool
	}{
		{"absent id, writers idle", kAbsent, false, false},
		{"absent id, writers active", kAbsent, true, false},
		{"WAL hit, writers idle", kWAL, false, false},
		{"base hit, writers idle", kWarm, false, false},
		{"just acknowledged, active", kFresh, true, false},
		{"raw GET, writers idle", kRaw, false, true},
		{"raw HEAD, writers idle", kRawHead, false, true},
	} {
		s := plotSeries{name: c.name, line: true, markers: true, dashed: c.raw}
		for _, row := range scaleRows(sc, c.active) {
			if d := qOf(row.phase.series[c.kind], 0.5); d > 0 {
				s.points = append(s.points, plotPoint{float64(row.coords[0]), ms(d)})
			}
		}
		if len(s.points) > 0 {
			p.series = append(p.series, s)
		}
	}
	return p
}

// minutes is a duration on a figure's time axis.
func minutes(d time.Duration) float64 { return d.Minutes() }

// sustainPlot draws the merge run's pending generations over time.
func sustainPlot(s *sustainResult) *plot {
	p := &plot{
		title:  fmt.Sprintf("Pending generations under sustained writes (%d writers, Azurite)", s.shards),
		xLabel: "minutes since the writes began", yLabel: "generations",
		yZero: true,
	}
	gens := plotSeries{name: "pending (sealed + open)", line: true}
	sealed := plotSeries{name: "sealed, waiting for a merge", line: true}
	shard := plotSeries{name: "most in one shard", line: true, dashed: true}
	for _, x := range s.samples {
		t := minutes(x.at)
		gens.points = append(gens.points, plotPoint{t, float64(x.gens)})
		sealed.points = append(sealed.points, plotPoint{t, float64(x.sealed)})
		shard.points = append(shard.points, plotPoint{t, float64(x.maxShard)})
	}
	p.series = []plotSeries{gens, sealed, shard}
	return p
}

// partSustainPlot draws the pending generations of the partitions phase's
// sustained-write runs over time, one pair of lines per run.
func partSustainPlot(runs []*partSustain) *plot {
	p := &plot{
		title:  "Pending generations under sustained writes, partitioned table (latency model)",
		xLabel: "minutes since the writes began", yLabel: "generations",
		yZero: true,
	}
	for _, s := range runs {
		gens := plotSeries{name: fmt.Sprintf("%d writers: pending", s.writers), line: true}
		part := plotSeries{name: fmt.Sprintf("%d writers: max in a partition", s.writers), line: true, dashed: true}
		for _, pt := range s.points {
			t := minutes(pt.at)
			gens.points = append(gens.points, plotPoint{t, float64(pt.gens)})
			part.points = append(part.points, plotPoint{t, float64(pt.maxPart)})
		}
		p.series = append(p.series, gens, part)
	}
	return p
}
