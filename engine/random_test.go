package engine

// Seeded, reproducible schedules of appends, merges and paused reads:
// every read answers the acknowledged row, byte-equal, whatever runs while
// it is paused.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

// TestRandomizedInterleavings runs seeded, reproducible schedules of
// appends on two shards, merges with zero grace in another process, and
// reads of present and absent ids from a third. A read may be paused at a
// random named point while a random number of appends and merges run, then
// resumed: the races of DESIGN.md, explored many ways. Every schedule must
// end with zero errors, zero false absents and byte-equal payloads. A
// failing seed replays exactly.
func TestRandomizedInterleavings(t *testing.T) {
	seeds := 24
	if testing.Short() {
		seeds = 6
	}
	for seed := 1; seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			forStores(t, func(t *testing.T, sc storeCase) { runSchedule(t, sc.open(t), uint64(seed), 120) }, false)
		})
	}
}

var pausePoints = []string{hookReadLocated, hookReadRowRead, hookPayloadOpened, hookRefreshAfterBase, hookRefreshAfterHeads}

func runSchedule(t *testing.T, store objstore.Bucket, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	cfgFor := func(shard string) Config {
		c := testConfig(shard)
		c.InlineMax = 2 << 10
		c.RetainVersions = 2
		c.CompactMaxFiles = 3
		return c
	}
	writers := []*env{newEnv(t, store, cfgFor("a")), newEnv(t, store, cfgFor("b"))}
	merger := newEnv(t, store, cfgFor(""))
	reader := newEnv(t, store, cfgFor(""))
	acked := map[string]int{}
	var ids []string
	n := 0
	ctx := context.Background()

	appendOne := func() {
		w := writers[rng.IntN(len(writers))]
		id := fmt.Sprintf("%s-%04d", w.db.cfg.Shard, n)
		size := rng.IntN(6 << 10)
		n++
		if _, err := w.tb.Append(ctx, Record{ID: id, RolloutID: "r"}, bytes.NewReader(payloadFor(id, size)), int64(size)); err != nil {
			t.Fatalf("seed %d: append %s: %v", seed, id, err)
		}
		acked[id] = size
		ids = append(ids, id)
	}
	background := func() {
		switch rng.IntN(4) {
		case 0, 1:
			appendOne()
		case 2:
			if err := writers[rng.IntN(len(writers))].tb.Flush(ctx); err != nil {
				t.Fatalf("seed %d: flush: %v", seed, err)
			}
		case 3:
			if _, err := merger.tb.Merge(ctx, MergeOptions{}); err != nil {
				t.Fatalf("seed %d: merge: %v", seed, err)
			}
		}
	}
	check := func(id string, got []byte, err error) {
		want, present := acked[id]
		switch {
		case present && err != nil:
			t.Fatalf("seed %d: read %s: %v", seed, id, err)
		case present && !bytes.Equal(got, payloadFor(id, want)):
			t.Fatalf("seed %d: read %s: wrong bytes", seed, id)
		case !present && !errors.Is(err, ErrNotFound):
			t.Fatalf("seed %d: absent %s: %v", seed, id, err)
		}
	}
	for i := 0; i < 6; i++ {
		appendOne()
	}
	for step := 0; step < steps; step++ {
		id := fmt.Sprintf("absent-%d", rng.IntN(1000))
		if rng.IntN(4) > 0 {
			id = ids[rng.IntN(len(ids))]
		}
		switch rng.IntN(3) {
		case 0:
			background()
		case 1:
			got, err := readPayload(reader.tb, id)
			check(id, got, err)
		case 2: // a read paused mid-way while the world moves on
			gate := reader.hooks.Pause(pausePoints[rng.IntN(len(pausePoints))])
			ch := goRead(reader.tb, id)
			var r readResult
			select {
			case <-gate.Reached():
				for k := rng.IntN(4); k >= 0; k-- {
					background()
				}
				gate.Release()
				r = <-ch
			case r = <-ch: // this read never passed that point
				gate.Release()
			}
			reader.hooks.Reset()
			check(id, r.data, r.err)
		}
	}
	if st := reader.db.Stats(); st.ReadMissingFile.Load() != 0 {
		t.Fatalf("seed %d: %d missing-file errors", seed, st.ReadMissingFile.Load())
	}
	if _, err := merger.tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, w := range writers {
		if err := w.tb.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := merger.tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	checkAll(t, reader.tb, acked)
}
