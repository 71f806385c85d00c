package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure"
)

// The merge under sustained writes: writer processes append at a fixed
// offered rate, a merger process runs Merge in a loop, and this process
// samples the table's pending generations every -sustain-tick and reads
// rows the writers acknowledged (the newest, and earlier ones wherever they
// are now: WAL or base). Some merge passes are replayed with the raw SDK
// while the merger waits: a GET of every object the pass read (16 at a
// time, as the merge reads) and a PUT of one blob of the size it wrote.

const (
	kNewest  = "newest"
	kEarlier = "earlier"
)

func init() {
	kindNames[kNewest] = "newest acknowledged row"
	kindNames[kEarlier] = "earlier acknowledged row"
	kindNotes[kNewest] = "the row a writer process acknowledged last before the read began (WAL, or already merged)"
	kindNotes[kEarlier] = "a random row acknowledged earlier in the run: in the WAL, or merged into the base (its generation reclaimed)"
}

type pendingSample struct {
	at           time.Duration
	gens, sealed int
	maxShard     int
	rows         int64
	version      uint64
	acked        int
	passes       int
	backpressure string
}

type replay struct {
	pass           passReport
	rawGet, rawPut time.Duration
	err            string
	quiet          bool
}

// ratio is the merge's bandwidth over the raw SDK's for the same bytes:
// the raw time over the pass's.
func (rp replay) ratio() float64 {
	if rp.pass.Result.Duration <= 0 {
		return 0
	}
	return float64(rp.rawGet+rp.rawPut) / float64(rp.pass.Result.Duration)
}

func (rp replay) mbps(d time.Duration) float64 {
	return float64(rp.pass.InBytes+rp.pass.OutBytes) / 1e6 / d.Seconds()
}

type sustainResult struct {
	// probes are raw GETs issued every -probe-every by a goroutine of
	// their own, whatever else this process is waiting for: a stall of
	// Azurite itself shows here, one of rollstore's processes does not.
	probes   []probe
	probeErr int
	start    time.Time // when the sustained writes began
	shards   int
	rate     float64
	conc     int
	dur      time.Duration
	prebuilt int
	samples  []pendingSample
	passes   []passReport
	replays  []replay
	writers  []childMsg
	merger   childMsg
	reads    *readPhase
	final    engine.Status
	acked    int
	verified int
	statusEr int
}

// sustainedMerge runs the phase.
func sustainedMerge(ctx context.Context, r *reads) (*sustainResult, error) {
	o := r.e.opts
	const table = "sustain"
	res := &sustainResult{shards: o.sustainShards, rate: o.sustainRate, conc: o.sustainConc}
	if err := r.wdb.CreateTable(ctx, table); err != nil {
		return nil, err
	}
	var ws []*proc
	for i := range o.sustainShards {
		name := fmt.Sprintf("sw-%d", i)
		w, err := startChild(r.e, name, "-role", "writer", "-shard", name)
		if err != nil {
			return nil, err
		}
		ws = append(ws, w)
	}
	merger, err := startChild(r.e, "merger", "-role", "merger")
	if err != nil {
		return nil, err
	}
	defer func() { _ = stopAll(append(ws, merger)) }()
	t, err := r.target(ctx, table, nil, nil)
	if err != nil {
		return nil, err
	}
	// The writers of a partitioned table agree on the owners before they
	// write (see settleOwners).
	if n := t.tb.Partitions(); n > 0 {
		var tbs []namedTable
		for _, w := range ws {
			db := r.e.writer(w.name)
			if db == nil {
				return nil, fmt.Errorf("writer %s has no engine in this process", w.name)
			}
			tb, err := db.Table(ctx, table)
			if err != nil {
				return nil, err
			}
			tbs = append(tbs, namedTable{w.name, tb})
		}
		if err := settleOwners(ctx, table, tbs, n); err != nil {
			return nil, err
		}
	}

	// A backlog for the first pass, replayed on a quiet store.
	if _, err := runPool(ctx, len(ws), len(ws), func(ctx context.Context, i int) error {
		m, err := ws[i].do(ctx, childReq{Op: "append", Table: table, Prefix: ws[i].name + "-pre-", From: 0, To: o.mergePrebuild, Size: r.size, Conc: 8})
		r.buildErrors("sustain", "prebuild", ws[i].name, m)
		if err != nil {
			return err
		}
		_, err = ws[i].do(ctx, childReq{Op: "flush", Table: table})
		return err
	}); err != nil {
		return nil, err
	}
	res.prebuilt = o.mergePrebuild * len(ws)
	var acked []string
	for _, w := range ws {
		acked = append(acked, childIDs(w.name+"-pre-", 0, o.mergePrebuild)...)
	}

	passes := make(chan passReport, 1024)
	merger.setOnEvent(func(m childMsg) {
		if m.Event == "pass" && m.Pass != nil {
			passes <- *m.Pass
		}
	})
	if _, err := merger.do(ctx, childReq{Op: "loop", Table: table}); err != nil {
		return nil, err
	}
	var first passReport
	select {
	case first = <-passes:
	case <-time.After(5 * time.Minute):
		return nil, fmt.Errorf("the merger reported no pass in 5 minutes")
	}
	if first.Err != "" {
		r.e.warn("merge pass: " + first.Err)
	}
	rp := r.replay(ctx, first, 0)
	rp.quiet = true
	res.replays = append(res.replays, rp)
	res.passes = append(res.passes, first)
	logf("merge: quiet pass of %d generations, %.1f MB in + %.1f MB out in %v; raw GET %v + PUT %v: %.2f×",
		len(first.Result.Merged), float64(first.InBytes)/1e6, float64(first.OutBytes)/1e6, first.Result.Duration.Round(time.Millisecond),
		rp.rawGet.Round(time.Millisecond), rp.rawPut.Round(time.Millisecond), rp.ratio())

	// The sustained writes.
	var mu sync.Mutex // guards acked, res.passes, res.replays
	newest := ""
	for _, w := range ws {
		w.setOnEvent(func(m childMsg) {
			if m.Event == "acked" {
				mu.Lock()
				acked = append(acked, m.ID)
				newest = m.ID
				mu.Unlock()
			}
		})
	}
	perShard := o.sustainRate
	for _, w := range ws {
		if _, err := w.do(ctx, childReq{Op: "sustain", Table: table, Prefix: w.name + "-s-", Size: r.size, Conc: o.sustainConc, Rate: perShard}); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	res.start = start
	if _, err := merger.do(ctx, childReq{Op: "go"}); err != nil {
		return nil, err
	}

	// Passes: replay one now and then, let the merger go on.
	passDone := make(chan struct{})
	stopPasses := make(chan struct{})
	go func() {
		defer close(passDone)
		lastReplay := time.Now()
		for {
			var pr passReport
			select {
			case <-stopPasses:
				return
			case pr = <-passes:
			}
			if pr.Err != "" {
				r.e.warn("merge pass: " + pr.Err)
			}
			mu.Lock()
			res.passes = append(res.passes, pr)
			mu.Unlock()
			if pr.Result.Version > 0 && pr.InBytes > 0 && time.Since(lastReplay) >= o.passSampleEvery {
				rp := r.replay(ctx, pr, len(res.replays))
				mu.Lock()
				res.replays = append(res.replays, rp)
				mu.Unlock()
				lastReplay = time.Now()
			}
			select {
			case <-stopPasses:
				return
			default:
			}
			if _, err := merger.do(ctx, childReq{Op: "go"}); err != nil {
				r.e.problem("merger: " + err.Error())
				return
			}
		}
	}()

	res.reads = newReadPhase("sustained writes", []string{kNewest, kEarlier, kRaw})
	tick := time.NewTicker(o.sustainTick)
	defer tick.Stop()
	for time.Since(start) < o.sustainDur && ctx.Err() == nil {
		<-tick.C
		st, err := t.tb.Status(ctx)
		mu.Lock()
		s := pendingSample{at: time.Since(start), acked: len(acked), passes: len(res.passes)}
		ids := []string{newest}
		for range 3 {
			if len(acked) > 0 {
				ids = append(ids, acked[r.rng.IntN(len(acked))])
			}
		}
		mu.Unlock()
		if err != nil {
			res.statusEr++
			r.e.warn("status during the sustained writes: " + err.Error())
			continue
		}
		per := map[string]int{}
		for _, g := range st.Pending {
			s.gens++
			if g.Sealed {
				s.sealed++
			}
			per[g.Shard]++
		}
		for _, n := range per {
			s.maxShard = max(s.maxShard, n)
		}
		s.rows, s.version, s.backpressure = st.PendingRows, st.Version, st.Backpressure
		res.samples = append(res.samples, s)
		// Reads, each beginning after the acknowledgement of its row.
		for i, id := range ids {
			if id == "" {
				continue
			}
			k := kEarlier
			if i == 0 {
				k = kNewest
			}
			r.sampleOn(ctx, res.reads, k, t, id)
			r.sampleOn(ctx, res.reads, kRaw, t, "")
		}
		if len(res.samples)%max(1, int(30*time.Second/o.sustainTick)) == 0 {
			logf("merge: t=%v pending %d generations (%d sealed, max %d in a shard), %d rows; base v%d; %d acknowledged, %d passes",
				s.at.Round(time.Second), s.gens, s.sealed, s.maxShard, s.rows, s.version, s.acked, s.passes)
		}
	}
	res.dur = time.Since(start)
	res.probes, res.probeErr = r.prober.window(start, start.Add(res.dur))
	for _, w := range ws {
		m, err := w.do(ctx, childReq{Op: "stop"})
		if err != nil {
			return res, err
		}
		res.writers = append(res.writers, m)
		if m.Errors > 0 {
			r.e.warn(fmt.Sprintf("sustained writer %s: %d appends failed: %v", w.name, m.Errors, m.ErrSample))
		}
		w.setOnEvent(nil)
	}
	close(stopPasses)
	<-passDone
	m, err := merger.do(ctx, childReq{Op: "stop"})
	if err != nil {
		return res, err
	}
	res.merger = m
	if res.final, err = t.tb.Status(ctx); err != nil {
		return res, err
	}
	// Every acknowledged row is there, byte for byte: a sample of them.
	mu.Lock()
	res.acked = len(acked)
	check := slices.Clone(acked)
	mu.Unlock()
	r.rng.Shuffle(len(check), func(i, j int) { check[i], check[j] = check[j], check[i] })
	check = check[:min(len(check), o.sustainVerify)]
	for _, id := range check {
		if _, _, _, err := r.engineRead(ctx, t.tb, id); err != nil {
			r.e.problem(fmt.Sprintf("sustained writes: acknowledged row %s: %v", id, err))
			continue
		}
		res.verified++
	}
	logf("merge: %v of sustained writes: %d rows acknowledged, %d passes, %d replayed; %d of %d sampled rows read back byte-equal",
		res.dur.Round(time.Second), res.acked, len(res.passes), len(res.replays), res.verified, len(check))
	return res, nil
}

// replay reads every object the pass read, 16 at a time (as the merge
// does), then writes one blob of the size the pass wrote, as objstore/azure
// would upload a data file of that size.
func (r *reads) replay(ctx context.Context, pr passReport, n int) replay {
	e := r.e
	rp := replay{pass: pr}
	start := time.Now()
	var got int64
	var mu sync.Mutex
	_, err := runPool(ctx, len(pr.Inputs), 16, func(ctx context.Context, i int) error {
		resp, err := e.raw.DownloadStream(ctx, e.rsContainer, pr.Inputs[i], nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		c, err := io.Copy(io.Discard, resp.Body)
		mu.Lock()
		got += c
		mu.Unlock()
		return err
	})
	rp.rawGet = time.Since(start)
	if err != nil {
		rp.err = firstLine(err.Error())
		return rp
	}
	if got != pr.InBytes {
		rp.err = fmt.Sprintf("raw GETs read %d bytes, the pass %d", got, pr.InBytes)
	}
	key := fmt.Sprintf("replay/%04d", n)
	start = time.Now()
	if pr.OutBytes > azure.DefaultBlockSize {
		_, err = e.raw.UploadStream(ctx, e.rawContainer, key, newStream(key, pr.OutBytes), &azblob.UploadStreamOptions{
			BlockSize: azure.DefaultBlockSize, Concurrency: azure.DefaultUploadConcurrency,
		})
	} else {
		_, err = e.raw.UploadBuffer(ctx, e.rawContainer, key, payload(key, int(pr.OutBytes)), nil)
	}
	rp.rawPut = time.Since(start)
	if err != nil {
		rp.err = firstLine(err.Error())
	}
	// The replayed blob is not needed again.
	_, _ = e.raw.DeleteBlob(ctx, e.rawContainer, key, nil)
	return rp
}

// probeMax is the slowest probe that began within [from, to), or overlapped it.
func (s *sustainResult) probeMax(from, to time.Duration) time.Duration {
	var m time.Duration
	for _, p := range s.probes {
		if p.at < to && p.at+p.dur > from {
			m = max(m, p.dur)
		}
	}
	return m
}

// stalls returns the periods in which raw probes took longer than limit,
// merged when they overlap.
func (s *sustainResult) stalls(limit time.Duration) [][2]time.Duration {
	var out [][2]time.Duration
	for _, p := range s.probes {
		if p.dur < limit {
			continue
		}
		a, b := p.at, p.at+p.dur
		if n := len(out); n > 0 && a <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], b)
			continue
		}
		out = append(out, [2]time.Duration{a, b})
	}
	return out
}
