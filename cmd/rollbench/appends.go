package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure"
)

// side is one side's totals over the rounds of a payload size.
type side struct {
	rows  int
	bytes int64
	dur   time.Duration
	reqs  snap // requests made during the side's rounds
}

func (s side) rowsPerSec() float64 { return float64(s.rows) / s.dur.Seconds() }
func (s side) mbPerSec() float64   { return float64(s.bytes) / 1e6 / s.dur.Seconds() }

type appendResult struct {
	label string
	size  int64
	conc  int
	rs    side
	raw   side
}

// runPool runs fn for i in [0, n) on conc goroutines and returns the wall
// time; the first error stops the pool.
func runPool(ctx context.Context, n, conc int, fn func(ctx context.Context, i int) error) (time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	d := time.Since(start)
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return d, err
	}
	return d, ctx.Err()
}

// benchAppends measures one payload size: rollstore Append against raw SDK
// uploads of the same bytes at the same concurrency, in two rounds ordered
// raw, rollstore, rollstore, raw so a drift in the machine's load (it is
// shared) falls on both sides alike.
func benchAppends(ctx context.Context, e *env, wdb *engine.DB, label string, size int64, n, conc int) (appendResult, error) {
	res := appendResult{label: label, size: size, conc: conc}
	table := "append-" + label
	if err := wdb.CreateTable(ctx, table); err != nil {
		return res, err
	}
	tb, err := wdb.Table(ctx, table)
	if err != nil {
		return res, err
	}
	streamed := size > 1<<20 // inline payloads are passed as buffers, large ones as streams

	rsOne := func(ctx context.Context, id string, i int) error {
		var r io.Reader
		if streamed {
			r = newStream(id, size)
		} else {
			r = bytes.NewReader(payload(id, int(size)))
		}
		_, err := tb.Append(ctx, record(id, i), r, size)
		return err
	}
	rawOne := func(ctx context.Context, id string) error {
		var err error
		if streamed {
			// What objstore/azure does with an unconditional body larger
			// than one block: UploadStream with its block size and
			// concurrency.
			_, err = e.raw.UploadStream(ctx, e.rawContainer, table+"/"+id, newStream(id, size), &azblob.UploadStreamOptions{
				BlockSize: azure.DefaultBlockSize, Concurrency: azure.DefaultUploadConcurrency,
			})
		} else {
			_, err = e.raw.UploadBuffer(ctx, e.rawContainer, table+"/"+id, payload(id, int(size)), nil)
		}
		return err
	}

	// Warm up both sides (connections, the shard writer's recovery).
	if !streamed {
		if _, err := runPool(ctx, conc, conc, func(ctx context.Context, i int) error {
			id := fmt.Sprintf("warm-%s-%03d", label, i)
			if err := rawOne(ctx, id); err != nil {
				return fmt.Errorf("raw warm-up: %w", err)
			}
			return rsOne(ctx, id, i)
		}); err != nil {
			return res, err
		}
	}

	measure := func(s *side, rows, round int, raw bool) error {
		tl := e.rs
		if raw {
			tl = e.rawT
		}
		before := tl.snap()
		d, err := runPool(ctx, rows, conc, func(ctx context.Context, i int) error {
			id := fmt.Sprintf("%s-r%d-%06d", label, round, i)
			if raw {
				return rawOne(ctx, id)
			}
			return rsOne(ctx, id, i)
		})
		if err != nil {
			who := "rollstore"
			if raw {
				who = "raw SDK"
			}
			return fmt.Errorf("%s %s append: %w", who, label, err)
		}
		d1 := tl.snap().sub(before)
		s.rows += rows
		s.bytes += int64(rows) * size
		s.dur += d
		s.reqs = addSnap(s.reqs, d1)
		return nil
	}
	half := n / 2
	rounds := []struct {
		rows int
		raw  []bool
	}{{half, []bool{true, false}}, {n - half, []bool{false, true}}}
	for r, rd := range rounds {
		if rd.rows == 0 {
			continue
		}
		for _, raw := range rd.raw {
			s := &res.rs
			if raw {
				s = &res.raw
			}
			if err := measure(s, rd.rows, r, raw); err != nil {
				return res, err
			}
		}
	}
	if err := tb.Flush(ctx); err != nil {
		return res, fmt.Errorf("flush %s: %w", table, err)
	}
	logf("append %-7s rollstore %8.1f rows/s %8.2f MB/s | raw %8.1f rows/s %8.2f MB/s", label,
		res.rs.rowsPerSec(), res.rs.mbPerSec(), res.raw.rowsPerSec(), res.raw.mbPerSec())
	return res, nil
}

func addSnap(a, b snap) snap {
	out := snap{ops: map[string]int64{}, http: map[string]int64{}, bytes: a.bytes + b.bytes}
	for _, m := range []snap{a, b} {
		for k, v := range m.ops {
			out.ops[k] += v
		}
		for k, v := range m.http {
			out.http[k] += v
		}
	}
	return out
}
