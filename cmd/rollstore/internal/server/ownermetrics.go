package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollstore/rollstore/engine"
)

// Ownership of partitions and point-read latency: read from the engine at
// scrape time, from what it holds in memory (no store call).

var (
	descTablePartitions = prometheus.NewDesc("rollstore_table_partitions",
		"Partitions of each partitioned table this writer has open (writers only: with rollstore_partition_owned it tells a partition no writer owns).",
		[]string{"table"}, nil)
	descPartitionOwned = prometheus.NewDesc("rollstore_partition_owned",
		"1 for each partition this writer owns, as of its last read of the table's members (its heartbeat reads them every second); partitions it does not own have no series.",
		[]string{"table", "partition"}, nil)
	descReadDuration = prometheus.NewDesc("rollstore_read_duration_seconds",
		"Point reads (a row's metadata, its payload opened, each id of a lookup) by outcome, from the call to the row found and used or the answer absent: base_hit, wal_hit, late_base_hit, absent (the outcomes of rollstore_reads_total that find an answer).",
		[]string{"outcome"}, nil)
)

// ownerCollector exports the partitions this process owns and the engine's
// point-read histograms.
type ownerCollector struct{ db *engine.DB }

func (c ownerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descTablePartitions
	ch <- descPartitionOwned
	ch <- descReadDuration
}

func (c ownerCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.db.Stats()
	for _, x := range []struct {
		outcome string
		h       *engine.Histogram
	}{
		{"base_hit", &st.ReadBaseHitSeconds},
		{"wal_hit", &st.ReadWALHitSeconds},
		{"late_base_hit", &st.ReadLateBaseHitSeconds},
		{"absent", &st.ReadAbsentSeconds},
	} {
		count, sum, buckets := x.h.Snapshot()
		ch <- prometheus.MustNewConstHistogram(descReadDuration, count, sum, buckets, x.outcome)
	}

	// Only writers own partitions; a reader's or merger's view (if it
	// has one) would add series that can only say "not mine".
	if c.db.Config().Shard == "" {
		return
	}
	for _, tb := range c.db.OpenTables() {
		if tb.Partitions() == 0 {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descTablePartitions, prometheus.GaugeValue, float64(tb.Partitions()), tb.Name())
		owners, ok := tb.CachedOwners()
		if !ok {
			continue // not joined yet: it owns nothing
		}
		for _, o := range owners {
			if o.Self {
				ch <- prometheus.MustNewConstMetric(descPartitionOwned, prometheus.GaugeValue, 1, tb.Name(), o.Partition)
			}
		}
	}
}

// registerOwnerMetrics adds ownerCollector to m and creates the forwarding
// series at zero, every result, so that they exist before a pod first
// forwards (a writer alone never does) and a rate over them starts at 0.
func registerOwnerMetrics(m *metrics, db *engine.DB) {
	m.reg.MustRegister(ownerCollector{db})
	for _, r := range []string{fwdCommitted, fwdRefused, fwdNotOwner, fwdUnreachable, fwdUnknown, fwdFailed} {
		m.forwarded.WithLabelValues(r)
		m.forwardDuration.WithLabelValues(r)
	}
}
