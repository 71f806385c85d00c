package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/metered"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// Each partition has one owner among the joined writers, and every
// process's cached view says so without a store call: the metrics that
// expose ownership are scraped often and must cost nothing.
func TestCachedOwnersSplitThePartitionsWithoutStoreCalls(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	var cc callCounter
	store := metered.Wrap(memory.New(memory.WithClock(clk.Now)), metered.Options{Observe: cc.observe})
	a := newEnv(t, store, partConfig("a", clk, 8))
	b := newEnv(t, store, partConfig("b", clk, 8))
	if _, ok := a.tb.CachedOwners(); ok {
		t.Fatal("a view of the members before any was read")
	}
	for _, e := range []*env{a, b, a} { // a reads again after b joined
		if _, _, err := e.tb.members(ctx, true); err != nil {
			t.Fatal(err)
		}
	}
	reader := openDB(t, store, partConfig("", clk, 8))
	rt, err := reader.Table(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Owners(ctx); err != nil {
		t.Fatal(err)
	}

	var views [3][]Owner
	calls := cc.during(func() {
		for i, tb := range []*Table{a.tb, b.tb, rt} {
			o, ok := tb.CachedOwners()
			if !ok {
				t.Fatalf("process %d has no view of the members", i)
			}
			views[i] = o
		}
	})
	if len(calls) != 0 {
		t.Fatalf("cached owners made store calls: %q", calls)
	}
	owned := map[string]int{}
	for p := range 8 {
		name := PartitionName(p)
		for i, v := range views {
			if len(v) != 8 || v[p].Partition != name {
				t.Fatalf("process %d: owners %v, want one per partition in order", i, v)
			}
			if v[p].Writer != views[0][p].Writer {
				t.Fatalf("%s: process %d sees owner %s, process 0 %s", name, i, v[p].Writer, views[0][p].Writer)
			}
		}
		switch {
		case views[0][p].Self && !views[1][p].Self && views[0][p].Writer == "a":
			owned["a"]++
		case views[1][p].Self && !views[0][p].Self && views[1][p].Writer == "b":
			owned["b"]++
		default:
			t.Fatalf("%s: a self %v, b self %v, owner %s: want exactly its owner to own it", name, views[0][p].Self, views[1][p].Self, views[0][p].Writer)
		}
		if views[2][p].Self {
			t.Fatalf("%s: the reader owns a partition", name)
		}
	}
	if owned["a"] == 0 || owned["b"] == 0 {
		t.Fatalf("owned partitions %v: both writers should own some", owned)
	}
	// The cached view is what Owners answers within the poll interval.
	fresh, err := a.tb.Owners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(fresh, views[0]) {
		t.Fatalf("Owners %v, cached %v", fresh, views[0])
	}

	// A writer gone silent past the member timeout owns nothing in the
	// others' views, without another read.
	clk.Advance(time.Minute)
	v, _ := a.tb.CachedOwners()
	for _, o := range v {
		if !o.Self {
			t.Fatalf("%s: owned by %s after b went silent, want a", o.Partition, o.Writer)
		}
	}

	names := make([]string, 0)
	for _, tb := range a.db.OpenTables() {
		names = append(names, tb.Name())
	}
	if !slices.Equal(names, []string{"t"}) {
		t.Fatalf("open tables %v, want [t]", names)
	}
}

// A table without partitions has no members: no cached owners.
func TestCachedOwnersOfATableWithoutPartitions(t *testing.T) {
	e := newEnv(t, memory.New(), testConfig("s0"))
	e.put("x", 10)
	if o, ok := e.tb.CachedOwners(); ok {
		t.Fatalf("owners %v of a table without partitions", o)
	}
}

// Every point read counted by outcome is timed under that outcome, from
// the call to the row used: a read held 3 s (fake clock) between finding
// its row and reading it lands in the (2.5 s, 5 s] bucket.
func TestReadsAreTimedByOutcome(t *testing.T) {
	ctx := context.Background()
	clk := objstoretest.NewClock()
	e := newEnv(t, memory.New(memory.WithClock(clk.Now)), leaseConfig("s0", clk))
	e.put("a", 10)
	e.hooks.Do(hookReadLocated, func(context.Context) error { clk.Advance(3 * time.Second); return nil }, hook.Always())
	if _, err := e.tb.Get(ctx, "a", ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tb.Get(ctx, "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("absent id: %v", err)
	}
	e.merge()
	e.mustRead("a", 10)
	// GetMany's lookups run in parallel on one clock: no more held reads.
	e.hooks.Reset()
	if _, err := e.tb.GetMany(ctx, []string{"a", "absent"}, GetManyOptions{}); err != nil {
		t.Fatal(err)
	}

	st := e.db.Stats()
	for _, c := range []struct {
		name  string
		n     int64
		h     *Histogram
		count uint64
	}{
		{"wal_hit", st.ReadWALHits.Load(), &st.ReadWALHitSeconds, 1},
		{"base_hit", st.ReadBaseHits.Load() + st.ReadLateBaseHits.Load(), nil, 2},
		{"absent", st.ReadAbsent.Load(), &st.ReadAbsentSeconds, 2},
	} {
		if c.n != int64(c.count) {
			t.Errorf("%s: counted %d, want %d", c.name, c.n, c.count)
		}
		if c.h == nil {
			continue
		}
		count, sum, buckets := c.h.Snapshot()
		if count != c.count {
			t.Errorf("%s: timed %d reads, counted %d", c.name, count, c.n)
		}
		if c.name == "wal_hit" && (buckets[2.5] != 0 || buckets[5] != 1 || sum != 3) {
			t.Errorf("wal_hit: sum %v, buckets ≤2.5 s %d, ≤5 s %d: want the 3 s read in (2.5, 5]", sum, buckets[2.5], buckets[5])
		}
		if c.name == "absent" && (buckets[latencyBounds[0]] != 2 || sum != 0) {
			t.Errorf("absent: sum %v, buckets %v: want both in the first (no time passed on the clock)", sum, buckets)
		}
	}
	base, _, _ := st.ReadBaseHitSeconds.Snapshot()
	late, _, _ := st.ReadLateBaseHitSeconds.Snapshot()
	if base+late != 2 || int64(base) != st.ReadBaseHits.Load() {
		t.Errorf("base hits timed %d + late %d, counted %d + %d", base, late, st.ReadBaseHits.Load(), st.ReadLateBaseHits.Load())
	}
}

func TestHistogramBucketsAreCumulative(t *testing.T) {
	var h Histogram
	for _, d := range []time.Duration{50 * time.Microsecond, 100 * time.Microsecond, 3 * time.Millisecond, time.Minute} {
		h.observe(d)
	}
	count, sum, buckets := h.Snapshot()
	if count != 4 {
		t.Fatalf("count %d, want 4", count)
	}
	if want := (50*time.Microsecond + 100*time.Microsecond + 3*time.Millisecond + time.Minute).Seconds(); sum != want {
		t.Errorf("sum %v, want %v", sum, want)
	}
	for b, want := range map[float64]uint64{.0001: 2, .0025: 2, .005: 3, 10: 3} {
		if buckets[b] != want {
			t.Errorf("bucket ≤%v s: %d, want %d", b, buckets[b], want)
		}
	}
	if len(buckets) != len(latencyBounds) {
		t.Errorf("%d buckets, want %d", len(buckets), len(latencyBounds))
	}
}
