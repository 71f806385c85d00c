package engine

// The cost model of the read path (doc.go, "Reads"): the store requests
// each kind of lookup makes on a reader process, on every backend.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/faulty"
)

// TestRequestsPerLookup counts the store requests of each kind of lookup
// on a reader process: the cost model the read path is built for. A
// payload's bytes are the only request of a hit (base or WAL, inline or
// external); describing a payload costs none; a hot payload in the payload
// cache costs none; a miss costs probes of the shards' heads, never a
// listing.
//
// It runs on every backend: the cost model must hold on each (the layout a
// head carries travels in the store's metadata).
func TestRequestsPerLookup(t *testing.T) { forStores(t, testRequestsPerLookup, true) }

func testRequestsPerLookup(t *testing.T, sc storeCase) {
	ctx := context.Background()
	store := sc.open(t)
	w := newEnv(t, store, testConfig("s1"))
	w.put("base-inline", 1000)
	w.put("base-external", 8<<10) // above InlineMax: its own object
	w.merge()
	w.put("wal-inline", 1000)
	w.put("wal-external", 8<<10)

	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("payload-cache=%v", cached), func(t *testing.T) {
			fb := faulty.New(store)
			cfg := testConfig("")
			cfg.ResidentMaxAge = time.Hour // no refresh but the ones a miss needs
			cfg.BaseProbeInterval = time.Hour
			if cached {
				cfg.PayloadCacheBytes, cfg.PayloadCacheMaxItem = 1<<20, 16<<10
			}
			db, err := Open(fb, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close(ctx)
			tb, err := db.Table(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			calls := func() map[faulty.Op]int {
				m := map[faulty.Op]int{}
				for _, op := range []faulty.Op{faulty.OpGet, faulty.OpGetRange, faulty.OpHead, faulty.OpList, faulty.OpPut, faulty.OpDelete} {
					m[op] = fb.Calls(op)
				}
				return m
			}
			cost := func(what string, fn func() error) map[faulty.Op]int {
				t.Helper()
				before := calls()
				if err := fn(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				d := calls()
				for op := range d {
					d[op] -= before[op]
					if d[op] == 0 {
						delete(d, op)
					}
				}
				return d
			}
			total := func(d map[faulty.Op]int) int {
				n := 0
				for _, v := range d {
					n += v
				}
				return n
			}
			read := func(id string, size int) func() error {
				return func() error {
					p, err := tb.OpenPayload(ctx, id, 0, -1, ReadOptions{})
					if err != nil {
						return err
					}
					defer p.Close()
					got, err := io.ReadAll(p)
					if err != nil {
						return err
					}
					if !bytes.Equal(got, payloadFor(id, size)) {
						return fmt.Errorf("%d bytes, wrong content", len(got))
					}
					return nil
				}
			}
			// The first lookup builds the view: the registry, the base's
			// manifest and index, the heads and the pending segments'
			// layouts. From the registry's hint, not from a listing.
			if d := cost("first lookup", func() error {
				_, err := tb.Stat(ctx, "absent", ReadOptions{})
				if !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("stat of an absent id: %v, want ErrNotFound", err)
				}
				return nil
			}); d[faulty.OpList] != 0 || d[faulty.OpPut]+d[faulty.OpDelete] != 0 {
				t.Errorf("opening the view: %v, want no listing and no write", d)
			} else {
				t.Logf("opening the view: %v", d)
			}
			ids := []struct {
				id   string
				size int
			}{{"base-inline", 1000}, {"base-external", 8 << 10}, {"wal-inline", 1000}, {"wal-external", 8 << 10}}
			for _, c := range ids {
				if d := cost("stat "+c.id, func() error {
					rec, err := tb.Stat(ctx, c.id, ReadOptions{})
					if err == nil && rec.PayloadSize != int64(c.size) {
						err = fmt.Errorf("size %d, want %d", rec.PayloadSize, c.size)
					}
					return err
				}); total(d) != 0 {
					t.Errorf("stat %s: %v, want no request", c.id, d)
				}
				if d := cost("read "+c.id, read(c.id, c.size)); total(d) != 1 || d[faulty.OpGetRange]+d[faulty.OpGet] != 1 {
					t.Errorf("first read of %s: %v, want one GET", c.id, d)
				}
				d := cost("read "+c.id+" again", read(c.id, c.size))
				if cached && total(d) != 0 {
					t.Errorf("hot read of %s with a payload cache: %v, want no request", c.id, d)
				}
				if !cached && (total(d) != 1 || d[faulty.OpGetRange]+d[faulty.OpGet] != 1) {
					t.Errorf("second read of %s without a payload cache: %v, want one GET", c.id, d)
				}
			}
			d := cost("absent", func() error {
				if _, err := tb.Stat(ctx, "absent", ReadOptions{}); !errors.Is(err, ErrNotFound) {
					return fmt.Errorf("stat of an absent id: %v, want ErrNotFound", err)
				}
				return nil
			})
			// A miss refreshes: the registry (conditional) and the one
			// active shard's head, in one round of parallel requests.
			if d[faulty.OpList] != 0 || d[faulty.OpPut]+d[faulty.OpDelete] != 0 || total(d) > 2 {
				t.Errorf("absent id: %v, want at most the registry and one head, no listing", d)
			}
			// A row another process acknowledged since: the head that counts
			// its segment carries the segment's layout, so finding the row
			// costs the same round as a miss, and reading it one GET more.
			fresh := fmt.Sprintf("fresh-%v", cached)
			w.put(fresh, 1000)
			if d := cost("stat "+fresh, func() error {
				rec, err := tb.Stat(ctx, fresh, ReadOptions{})
				if err == nil && rec.PayloadSize != 1000 {
					err = fmt.Errorf("size %d, want 1000", rec.PayloadSize)
				}
				return err
			}); d[faulty.OpGetRange] != 0 || d[faulty.OpList] != 0 || total(d) > 2 {
				t.Errorf("stat of a row one segment ahead of the view: %v, want the registry and the head only", d)
			}
			if d := cost("read "+fresh, read(fresh, 1000)); total(d) != 1 {
				t.Errorf("read of the fresh row: %v, want one GET", d)
			}
		})
	}
}
