package main

import (
	"encoding/json"
	"io"
	"math"
	"slices"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/payloadgen"
)

// payload returns the deterministic bytes of the payload of id (see
// payloadgen): random, so nothing along the way can compress or deduplicate
// them, and reproducible, so a read is checked byte for byte without keeping
// what was written.
func payload(id string, size int) []byte { return payloadgen.Bytes(id, size) }

// newStream is a generator reader of n bytes for large payloads, cheaper
// than payload's stream. It is deliberately not an io.Seeker, so both the
// engine and the SDK take their streaming paths and the bench never holds a
// large payload in memory.
func newStream(id string, n int64) io.Reader { return payloadgen.NewCycling(id, n) }

var benchMetadata = json.RawMessage(`{"source":"rollbench","episode":17,"tags":["bench","synthetic"]}`)

// record is a realistic row around a payload.
func record(id string, seq int) engine.Record {
	reward := float64(seq%7) / 7
	return engine.Record{
		ID:            id,
		RolloutID:     "rollout-" + id[:min(len(id), 12)],
		ProblemID:     "problem-42",
		Sequence:      int64(seq),
		Role:          "assistant",
		ContentType:   "application/octet-stream",
		Reward:        &reward,
		PolicyVersion: "bench-policy-1",
		Metadata:      benchMetadata,
	}
}

// series is one kind of measurement: its latencies in the order taken.
type series struct {
	total []time.Duration // to the last byte (or to the answer, for absent ids)
	first []time.Duration // to the response headers of the payload, when there is one
	// underHuge counts samples taken while a 300 MB append was streaming.
	underHuge int
}

func (s *series) add(first, total time.Duration) {
	s.total = append(s.total, total)
	if first > 0 {
		s.first = append(s.first, first)
	}
}

type summary struct {
	n                  int
	p50, p99, max, avg time.Duration
	first50            time.Duration // 0 when not measured
}

func (s *series) summary() summary {
	if s == nil || len(s.total) == 0 {
		return summary{}
	}
	t := slices.Clone(s.total)
	slices.Sort(t)
	var sum time.Duration
	for _, d := range t {
		sum += d
	}
	out := summary{n: len(t), p50: quantile(t, 0.50), p99: quantile(t, 0.99), max: t[len(t)-1], avg: sum / time.Duration(len(t))}
	if len(s.first) > 0 {
		f := slices.Clone(s.first)
		slices.Sort(f)
		out.first50 = quantile(f, 0.50)
	}
	return out
}

// quantile is the nearest-rank quantile of sorted samples.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
