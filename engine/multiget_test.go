package engine

// GetMany: answers in request order with absent ids as nil, one shared
// refresh for the ids the resident view lacks, pinned versions, and a
// deterministic race against a merge that reclaims the generation the
// lookups found their rows in (forced with a pause at read:located, as
// the single-read races are).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

// mgConfig is small: zero reclaim grace so a merge deletes what it merged
// at once, a 4 KiB inline limit so rows of both kinds are covered.
func mgConfig(shard string) Config {
	return Config{
		Shard:             shard,
		Partitions:        1, // one generation per flush
		InlineMax:         4 << 10,
		GroupCommitWindow: time.Millisecond,
		GenMaxAge:         time.Hour,
		ReclaimGrace:      0,
		RetainVersions:    2,
		OrphanGrace:       time.Hour,
		CacheBytes:        8 << 20,
	}
}

// mgOpen opens a process on store with table "t" and its hook set.
func mgOpen(t *testing.T, store objstore.Bucket, shard string) (*DB, *Table, *hook.Set) {
	t.Helper()
	e := newEnv(t, store, mgConfig(shard))
	return e.db, e.tb, e.hooks
}

// mgSize alternates inline and external payloads.
func mgSize(i int) int {
	if i%3 == 0 {
		return 20 << 10
	}
	return 100 + i
}

// mgPut appends ids as one batch and seals the generation (pending, not
// merged).
func mgPut(t *testing.T, tb *Table, ids ...string) {
	t.Helper()
	items := make([]BatchItem, len(ids))
	for i, id := range ids {
		items[i] = BatchItem{Record: Record{ID: id, RolloutID: "r-" + id, Sequence: int64(i)}, Payload: payloadFor(id, mgSize(i))}
	}
	if _, err := tb.AppendBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
	if err := tb.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func mgIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%03d", prefix, i)
	}
	return ids
}

// mgCheck fails unless got answers ask: present ids with their rows, the
// others nil.
func mgCheck(t *testing.T, ask []string, got []*Record, present map[string]bool) {
	t.Helper()
	if len(got) != len(ask) {
		t.Fatalf("%d answers for %d ids", len(got), len(ask))
	}
	for i, id := range ask {
		switch r := got[i]; {
		case present[id] && r == nil:
			t.Errorf("ids[%d] %q: not found, but it exists", i, id)
		case present[id] && (r.ID != id || r.RolloutID != "r-"+id):
			t.Errorf("ids[%d] %q: got row %q (rollout %q)", i, id, r.ID, r.RolloutID)
		case !present[id] && r != nil:
			t.Errorf("ids[%d] %q: got a row, but it was never written", i, id)
		}
	}
}

func TestGetManyOrderAbsentAndDuplicates(t *testing.T) {
	_, tb, _ := mgOpen(t, memory.New(), "s0")
	ctx := context.Background()
	base := mgIDs("b", 10)
	mgPut(t, tb, base...)
	if _, err := tb.Merge(ctx, MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	wal := mgIDs("w", 10)
	mgPut(t, tb, wal...)
	present := map[string]bool{}
	for _, id := range append(append([]string{}, base...), wal...) {
		present[id] = true
	}
	ask := []string{"w003", "nope", "b009", "b000", "w003", "zzz", "w009", "b005", "a"}
	got, err := tb.GetMany(ctx, ask, GetManyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgCheck(t, ask, got, present)
	if got[0] != got[4] {
		t.Errorf("a repeated id should be answered by its one lookup")
	}

	// Nothing to look up: an empty answer.
	if got, err := tb.GetMany(ctx, nil, GetManyOptions{}); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
	// An invalid id fails the call, naming its index.
	_, err = tb.GetMany(ctx, []string{"b000", ""}, GetManyOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ids[1]") {
		t.Fatalf("invalid id: %v", err)
	}
}

// Ids the resident view does not hold share one refresh: a call for many
// absent ids costs at most one refresh per lookup running at once, not one
// per id.
func TestGetManyAbsentIDsShareARefresh(t *testing.T) {
	db, tb, _ := mgOpen(t, memory.New(), "s0")
	ctx := context.Background()
	mgPut(t, tb, mgIDs("k", 5)...)
	ask := mgIDs("absent-", 300)
	const par = 8
	before := db.Stats().Refreshes.Load()
	got, err := tb.GetMany(ctx, ask, GetManyOptions{Parallelism: par})
	if err != nil {
		t.Fatal(err)
	}
	mgCheck(t, ask, got, nil)
	if n := db.Stats().Refreshes.Load() - before; n < 1 || n > par {
		t.Fatalf("%d refreshes for %d absent ids (parallelism %d)", n, len(ask), par)
	}
}

// The race: every lookup is held after it located its row in a pending
// generation; another process merges that generation and reclaims it;
// released, the lookups find their files gone and recover through the
// bounded retries. Every row is found, absent ids stay absent.
func TestGetManyRacingMergeAndReclaimFindsEveryRow(t *testing.T) {
	for _, par := range []int{1, 4} {
		t.Run(fmt.Sprint("parallelism=", par), func(t *testing.T) {
			store := memory.New()
			db, tb, hs := mgOpen(t, store, "s0")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ids := mgIDs("x", 24)
			mgPut(t, tb, ids[:12]...)
			mgPut(t, tb, ids[12:]...) // two generations
			present := map[string]bool{}
			for _, id := range ids {
				present[id] = true
			}
			ask := []string{"x023", "gone-1", "x000", "x011", "x012", "gone-2"}
			ask = append(ask, ids...)

			gate := hs.Pause("read:located", hook.Always())
			type result struct {
				recs []*Record
				err  error
			}
			ch := make(chan result, 1)
			go func() {
				recs, err := tb.GetMany(ctx, ask, GetManyOptions{Parallelism: par})
				ch <- result{recs, err}
			}()
			if err := gate.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			// Another process merges and reclaims both generations: this
			// process learns of it only through what it reads.
			_, other, _ := mgOpen(t, store, "")
			res, err := other.Merge(ctx, MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Reclaimed) != 2 {
				t.Fatalf("merge reclaimed %v, want both generations", res.Reclaimed)
			}
			gate.Release()
			r := <-ch
			if r.err != nil {
				t.Fatalf("GetMany racing a reclaim: %v", r.err)
			}
			mgCheck(t, ask, r.recs, present)
			st := db.Stats()
			if st.ReadRetries.Load() == 0 {
				t.Fatalf("no lookup met a reclaimed file: the race was not exercised")
			}
			if st.ReadMissingFile.Load() != 0 {
				t.Fatalf("%d reads reported a missing file", st.ReadMissingFile.Load())
			}
		})
	}
}

func TestGetManyPinnedVersion(t *testing.T) {
	_, tb, _ := mgOpen(t, memory.New(), "s0")
	ctx := context.Background()
	mgPut(t, tb, "a", "b")
	r1, err := tb.Merge(ctx, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgPut(t, tb, "c")
	// Version 1 holds a and b only; c is pending, outside any base.
	got, err := tb.GetMany(ctx, []string{"c", "a", "b", "zz"}, GetManyOptions{ReadOptions: ReadOptions{Version: r1.Version}})
	if err != nil {
		t.Fatal(err)
	}
	mgCheck(t, []string{"c", "a", "b", "zz"}, got, map[string]bool{"a": true, "b": true})
	// A version never committed, and one collected.
	if _, err := tb.GetMany(ctx, []string{"a"}, GetManyOptions{ReadOptions: ReadOptions{Version: 99}}); !errors.Is(err, ErrNoVersion) {
		t.Fatalf("version 99: %v", err)
	}
	for i := range 3 {
		mgPut(t, tb, fmt.Sprint("later-", i))
		if _, err := tb.Merge(ctx, MergeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tb.GetMany(ctx, []string{"a", "zz"}, GetManyOptions{ReadOptions: ReadOptions{Version: r1.Version}}); !errors.Is(err, ErrVersionGone) {
		t.Fatalf("collected version: %v", err)
	}
}
