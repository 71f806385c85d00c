package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// Notes on the scaling tables and the merge run, computed from the counts.

func (r *report) interpretScaling(add func(string, ...any), sc *scaling) {
	idle, active := scaleRows(sc, false), scaleRows(sc, true)
	if len(idle) == 0 {
		return
	}
	unit, what := sc.spec.unit, sc.spec.label
	first, last := idle[0], idle[len(idle)-1]
	same := func(rows []*scaleRow, k string) bool {
		ref := rows[0].phase.tallies[k].snap().ops
		n0 := len(rows[0].phase.series[k].total)
		for _, row := range rows[1:] {
			ops := row.phase.tallies[k].snap().ops
			n := len(row.phase.series[k].total)
			if perUnit(ops, n) != perUnit(ref, n0) {
				return false
			}
		}
		return true
	}
	desc := func(row *scaleRow, k string) string { return perLookup(row.phase, k) }
	if same(idle, kAbsent) && same(idle, kWAL) {
		add("**%s, writers idle:** from %s to %s %s an absent lookup made %s and a WAL hit %s, at every level: the cost of a "+
			"lookup does not depend on the backlog. Absent p50 went %s → %s of the raw GET, WAL hit p50 %s → %s.",
			what, first.label, last.label, unit, desc(first, kAbsent), desc(first, kWAL),
			fx(ratioOf(first.phase, kAbsent, 0.5)), fx(ratioOf(last.phase, kAbsent, 0.5)), fx(ratioOf(first.phase, kWAL, 0.5)), fx(ratioOf(last.phase, kWAL, 0.5)))
	} else {
		add("**%s, writers idle:** an absent lookup made %s at %s %s and %s at %s; a WAL hit %s and %s.", what,
			desc(first, kAbsent), first.label, unit, desc(last, kAbsent), last.label, desc(first, kWAL), desc(last, kWAL))
	}
	if len(active) > 0 {
		a := active[len(active)-1]
		heads := float64(a.phase.tallies[kAbsent].snap().ops["Head head"]) / float64(max(1, len(a.phase.series[kAbsent].total)))
		served := "issued in parallel but served one after another by Azurite's single thread"
		if r.e != nil && r.e.lat != nil {
			served = "issued in parallel and served in parallel by the model, so the lookup waits for the slowest of them"
		}
		add("**%s, writers active** (%d writer(s) appending one row per %v each): at %s %s an absent lookup made %s — %.1f shard-head "+
			"HEADs per lookup, %s — and took %s of the raw GET at p50 (%s with the writers idle).", what, a.shards, r.o.activeInterval,
			a.label, unit, desc(a, kAbsent), heads, served, fx(ratioOf(a.phase, kAbsent, 0.5)), fx(ratioOf(idleOf(idle, a.label).phase, kAbsent, 0.5)))
		var fresh []string
		for _, row := range active {
			if n := len(row.phase.series[kFresh].total); n > 0 {
				fresh = append(fresh, fmt.Sprintf("%s: %d rows, p50 %s ms (%s), %s", row.label, n, fms(qOf(row.phase.series[kFresh], 0.5)),
					fx(ratioOf(row.phase, kFresh, 0.5)), desc(row, kFresh)))
			}
		}
		if len(fresh) > 0 {
			who := "by a writer process and read at once by this one (read-after-write across processes)"
			if r.e != nil && r.e.lat != nil {
				who = "by a writer's engine and read at once by the reader's (read-after-write across engines)"
			}
			add("Rows acknowledged %s, per level: %s. None was missing: a missing one fails the run.", who, strings.Join(fresh, "; "))
		}
	}
	// The writers' own cost per append while building.
	b := idle[len(idle)-1]
	if b.built > 0 {
		probes := float64(b.buildOps["Head head"]) / float64(b.built)
		segGets := float64(b.buildOps["GetRange segment"]) / float64(b.built)
		if probes > 1.5 || segGets > 0.5 {
			add("**Writers pay for each other:** building the %s level, each append (one row, one segment) cost the writer %s. Before it "+
				"commits, an append checks that its id is new; the id is not in the writer's snapshot, so the check waits for a refresh, "+
				"and that refresh probes the head of every active shard (%.1f per append) and reads the layout of every segment the "+
				"other writers committed since (%.2f per append). With N writers active each append costs O(N) requests, and the "+
				"writers' refreshes together O(N²) per unit of time, on the same store the readers use.",
				b.label, perUnit(b.buildOps, b.built), probes, segGets)
		}
	}
	// The catch-up refresh after the largest build.
	if last.catchupOps != nil {
		add("The reader's first refresh after the %s level was built (not in the latencies above) took %s ms: %s.",
			last.label, fms(last.catchup), perUnit(last.catchupOps, 1))
	}
}

func idleOf(rows []*scaleRow, label string) *scaleRow {
	for _, r := range rows {
		if r.label == label {
			return r
		}
	}
	return rows[len(rows)-1]
}

func (r *report) interpretSustain(add func(string, ...any)) {
	s := r.sustain
	if len(s.samples) == 0 {
		return
	}
	h1, h2, peak, peakShard := s.halves()
	acked, bp := 0, 0
	for _, w := range s.writers {
		acked += w.N
		bp += w.Backpressure
	}
	add("**Merge under sustained writes:** %d writers offered %.0f rows/s in all and got %.1f rows/s acknowledged over %v; pending "+
		"generations peaked at %d (%d in one shard; first half %d, second half %d), %d appends were refused for back-pressure.",
		s.shards, s.rate*float64(s.shards), float64(acked)/s.dur.Seconds(), s.dur.Round(time.Second), peak, peakShard, h1, h2, bp)
	var ratios []float64
	for _, rp := range s.replays {
		if rp.err == "" && !rp.quiet {
			ratios = append(ratios, rp.ratio())
		}
	}
	if len(ratios) > 0 {
		slices.Sort(ratios)
		add("Replayed passes moved their bytes at %.0f%% (median; %.0f–%.0f%%) of the raw SDK's GET+PUT bandwidth for the same bytes.",
			100*ratios[len(ratios)/2], 100*ratios[0], 100*ratios[len(ratios)-1])
	}
	if st := s.reads.stats[kEarlier]; st != nil {
		add("Earlier acknowledged rows read during the run: %d from the base, %d from the WAL, %d from a base newer than the reader "+
			"knew, %d retries after a reclaimed file; newest rows: %s per read.",
			st.get("base hits"), st.get("WAL hits"), st.get("late base hits"), st.get("retries"), perLookup(s.reads, kNewest))
	}
}
