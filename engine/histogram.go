package engine

import (
	"sync/atomic"
	"time"
)

// latencyBounds are the upper bounds, in seconds, of a Histogram's
// buckets: from a lookup answered by the resident snapshot and the
// caches (tens of microseconds) to one that waited on a slow store
// (seconds).
var latencyBounds = [...]float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// Histogram counts durations in fixed buckets with atomic counters, so the
// engine needs no metrics library and an observation takes no lock; the
// service exports it as a Prometheus histogram.
type Histogram struct {
	counts [len(latencyBounds) + 1]atomic.Uint64 // the last: above every bound
	nanos  atomic.Int64
}

func (h *Histogram) observe(d time.Duration) {
	s := d.Seconds()
	i := 0
	for i < len(latencyBounds) && s > latencyBounds[i] {
		i++
	}
	h.counts[i].Add(1)
	h.nanos.Add(int64(d))
}

// Snapshot returns the observations so far: their count, the sum of their
// seconds, and the cumulative count at or below each bound (seconds), as
// prometheus.MustNewConstHistogram takes them. Observations made during
// the call may be in the sum and not yet in the counts.
func (h *Histogram) Snapshot() (count uint64, sum float64, buckets map[float64]uint64) {
	buckets = make(map[float64]uint64, len(latencyBounds))
	for i, b := range latencyBounds {
		count += h.counts[i].Load()
		buckets[b] = count
	}
	count += h.counts[len(latencyBounds)].Load()
	return count, time.Duration(h.nanos.Load()).Seconds(), buckets
}
