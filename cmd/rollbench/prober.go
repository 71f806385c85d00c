package main

import (
	"context"
	"io"
	"sync"
	"time"
)

// prober GETs one of the raw blobs every -probe-every for the whole run,
// on a goroutine of its own, whatever the phases are waiting for. Azurite
// pauses now and then (it saves its metadata every 5 s, and collects
// garbage 10 minutes after it started and every 10 minutes after that,
// which on gigabytes of data takes minutes): a pause of Azurite itself
// shows here, one of rollstore's processes does not. The report gives
// every phase's share of it.
type prober struct {
	mu     sync.Mutex
	start  time.Time
	probes []probe // at: since start
	phases []phaseMark
	stop   func()
}

type phaseMark struct {
	name string
	at   time.Duration
}

// probe is one raw GET of the prober: when it began and how long it took.
type probe struct {
	at  time.Duration
	dur time.Duration
	err bool
}

func (r *reads) startProber(ctx context.Context) {
	pr := &prober{start: time.Now()}
	r.prober = pr
	every := r.e.opts.probeEvery
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		buf := make([]byte, 64<<10)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-t.C:
			}
			id := r.raw[i%len(r.raw)]
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			t0 := time.Now()
			rc, err := r.e.base.open(pctx, r.table+"/"+id)
			if err == nil {
				_, err = io.CopyBuffer(io.Discard, rc, buf)
				rc.Close()
			}
			cancel()
			pr.mu.Lock()
			pr.probes = append(pr.probes, probe{at: t0.Sub(pr.start), dur: time.Since(t0), err: err != nil && ctx.Err() == nil})
			pr.mu.Unlock()
		}
	})
	pr.stop = func() {
		close(done)
		wg.Wait()
	}
}

// mark records that a phase begins now.
func (p *prober) mark(name string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.phases = append(p.phases, phaseMark{name: name, at: time.Since(p.start)})
}

// window returns the probes that began in [from, to), timed from from.
func (p *prober) window(from, to time.Time) ([]probe, int) {
	if p == nil {
		return nil, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	a, b := from.Sub(p.start), to.Sub(p.start)
	var out []probe
	errs := 0
	for _, x := range p.probes {
		if x.at >= a && x.at < b {
			out = append(out, probe{at: x.at - a, dur: x.dur, err: x.err})
			if x.err {
				errs++
			}
		}
	}
	return out, errs
}

// phaseStats is the prober's view of one phase.
type phaseStats struct {
	name          string
	dur           time.Duration
	n, errs       int
	p50, p99, max time.Duration
	slow          int           // probes slower than 1 s
	stalled       time.Duration // time covered by probes slower than 1 s
}

func (p *prober) perPhase(end time.Duration) []phaseStats {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []phaseStats
	for i, ph := range p.phases {
		to := end
		if i+1 < len(p.phases) {
			to = p.phases[i+1].at
		}
		st := phaseStats{name: ph.name, dur: to - ph.at}
		var d []time.Duration
		sr := &sustainResult{}
		for _, x := range p.probes {
			if x.at < ph.at || x.at >= to {
				continue
			}
			d = append(d, x.dur)
			if x.err {
				st.errs++
			}
			if x.dur >= time.Second {
				st.slow++
			}
			sr.probes = append(sr.probes, x)
		}
		sm := (&series{total: d}).summary()
		st.n, st.p50, st.p99, st.max = sm.n, sm.p50, sm.p99, sm.max
		for _, w := range sr.stalls(time.Second) {
			st.stalled += w[1] - w[0]
		}
		out = append(out, st)
	}
	return out
}
