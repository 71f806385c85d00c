package main

// Writer and merger processes. The scaling and merge phases need writers
// and a merger that are processes of their own, as in production (a
// StatefulSet of writer pods, one merger), so that the reader being timed
// shares no Go runtime, cache or connection pool with them. rollbench
// starts copies of itself (`rollbench child ...`) and drives them over
// stdin/stdout, one JSON object per line: every request gets exactly one
// reply; events (an acknowledged append, a finished merge pass) arrive in
// between, marked by their "event" field.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
)

// childReq is a request to a child process.
type childReq struct {
	Op     string `json:"op"`
	Table  string `json:"table,omitempty"`
	Prefix string `json:"prefix,omitempty"`
	From   int    `json:"from,omitempty"`
	To     int    `json:"to,omitempty"`
	Size   int    `json:"size,omitempty"`
	Conc   int    `json:"conc,omitempty"`
	// Interval between trickled appends.
	Interval time.Duration `json:"interval,omitempty"`
	// Rate of a sustained write, rows per second.
	Rate float64 `json:"rate,omitempty"`
}

// childMsg is a reply or an event.
type childMsg struct {
	Event string `json:"event,omitempty"` // "" for a reply; "acked"; "pass"
	Err   string `json:"err,omitempty"`

	ID  string        `json:"id,omitempty"` // acked
	N   int           `json:"n,omitempty"`
	Dur time.Duration `json:"dur,omitempty"`
	// Ops counts the child's objstore calls during the request (during
	// the job, for a stopped trickle or sustained write).
	Ops map[string]int64 `json:"ops,omitempty"`
	// Append latencies and refusals of a trickle or a sustained write.
	Lat          []time.Duration `json:"lat,omitempty"`
	Backpressure int             `json:"backpressure,omitempty"`
	Errors       int             `json:"errors,omitempty"`
	// Forwarded counts the appends committed by another writer (the
	// owner of their partition).
	Forwarded int              `json:"forwarded,omitempty"`
	ErrSample []string         `json:"err_sample,omitempty"`
	Stats     map[string]int64 `json:"stats,omitempty"`

	Pass *passReport `json:"pass,omitempty"`
}

// passReport is one merge pass and what it moved, as the merger's own
// counting bucket saw it: the objects it read whole (WAL segments, and base
// files it compacted) and the bytes of the data files it wrote.
type passReport struct {
	Result   engine.MergeResult `json:"result"`
	Err      string             `json:"err,omitempty"`
	Inputs   []string           `json:"inputs,omitempty"`
	InBytes  int64              `json:"in_bytes"`
	OutBytes int64              `json:"out_bytes"`
	OutFiles int                `json:"out_files"`
	Started  time.Time          `json:"started"`
}

// ---- The child side. ----
//
// A writer is not a process but goroutines of this one (with -store
// latency the merger too: a memory bucket cannot be shared between
// processes): the same child, with its own engine.DB over its own counting
// bucket (its own connection pool on Azurite), driven by direct calls
// instead of JSON lines (see startChild). Writers of a partitioned table
// forward the rows of partitions they do not own to the owner's engine
// (routedAppend), which needs the owners in reach; rollbench runs no HTTP
// servers to forward through.

type childOpts struct {
	role          string
	container     string
	shard         string
	idleAfter     time.Duration
	segMaxRows    int
	reclaimGrace  time.Duration
	mergeMaxBytes int64
}

func childMain(args []string) int {
	o, err := parseChildFlags(args)
	if err != nil {
		return 2
	}
	name := o.shard
	if name == "" {
		name = o.role
	}
	out := json.NewEncoder(os.Stdout)
	var mu sync.Mutex // serialises writes to out
	c := &child{o: o, name: name, tally: newTally(), send: func(m childMsg) {
		mu.Lock()
		defer mu.Unlock()
		_ = out.Encode(m)
	}}
	if err := c.run(); err != nil {
		fmt.Fprintf(os.Stderr, "rollbench child %s: %v\n", name, err)
		return 1
	}
	return 0
}

func parseChildFlags(args []string) (childOpts, error) {
	o := childOpts{}
	fs := flag.NewFlagSet("rollbench child", flag.ContinueOnError)
	fs.StringVar(&o.role, "role", "writer", "writer or merger")
	fs.StringVar(&o.container, "container", "", "the rollstore container")
	fs.StringVar(&o.shard, "shard", "", "writer shard")
	fs.DurationVar(&o.idleAfter, "idle-after", 0, "engine.Config.IdleAfter (0: default)")
	fs.IntVar(&o.segMaxRows, "segment-max-rows", 0, "engine.Config.SegmentMaxRows (0: default)")
	fs.DurationVar(&o.reclaimGrace, "reclaim-grace", -1, "engine.Config.ReclaimGrace (negative: default)")
	fs.Int64Var(&o.mergeMaxBytes, "merge-max-bytes", 0, "engine.Config.MergeMaxBytes (0: default)")
	err := fs.Parse(args)
	return o, err
}

type child struct {
	o    childOpts
	name string
	// send delivers a reply or an event: a JSON line on stdout in a child
	// process; in-process, events to the proc's handler (replies are
	// returned by handle).
	send  func(childMsg)
	db    *engine.DB
	tally *tally
	rec   *ioRecorder
	// route finds the other writers of the run (local children only);
	// closeStore closes a store the child opened for itself.
	route      router
	closeStore func() error

	// The background job (trickle, sustained write, merge loop) and its
	// stop function, which returns the job's summary.
	job  func() childMsg
	gate chan bool // merge loop: true = next pass, false = stop
}

func (c *child) run() error {
	cs := os.Getenv(EnvConnectionString)
	if cs == "" {
		return fmt.Errorf("%s is not set", EnvConnectionString)
	}
	ctx := context.Background()
	az, err := azure.New(ctx, azure.Config{
		Auth:             azure.AuthConnectionString,
		ConnectionString: cs,
		Container:        c.o.container,
		HTTPClient:       newHTTPClient(azure.DefaultMaxConnsPerHost, c.tally),
	})
	if err != nil {
		return err
	}
	defer func() {
		if err := az.Close(); err != nil {
			logf("child: closing the store: %v", err)
		}
	}()
	if err := c.open(az); err != nil {
		return err
	}
	dec := json.NewDecoder(bufio.NewReader(os.Stdin))
	for {
		var req childReq
		if err := dec.Decode(&req); err != nil {
			// The parent went away (EOF) or spoke nonsense: stop cleanly.
			_ = c.close(ctx)
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if req.Op == "close" {
			c.send(replyErr(c.close(ctx)))
			return nil
		}
		c.send(c.handle(ctx, req))
	}
}

// open opens the child's engine over store, counted into its tally (and
// its merge passes recorded, for a merger).
func (c *child) open(store objstore.Bucket) error {
	cfg := engine.DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("child", c.name)
	switch c.o.role {
	case "writer":
		cfg.Shard = c.o.shard
		if c.o.idleAfter > 0 {
			cfg.IdleAfter = c.o.idleAfter
		}
		if c.o.segMaxRows > 0 {
			cfg.SegmentMaxRows = c.o.segMaxRows
		}
	case "merger":
		c.rec = &ioRecorder{}
		if c.o.reclaimGrace >= 0 {
			cfg.ReclaimGrace = c.o.reclaimGrace
		}
		if c.o.mergeMaxBytes > 0 {
			cfg.MergeMaxBytes = c.o.mergeMaxBytes
		}
	default:
		return fmt.Errorf("unknown role %q", c.o.role)
	}
	var err error
	c.db, err = engine.Open(newCountingBucket(store, c.tally, c.rec), cfg)
	return err
}

// close stops the background job and closes the engine (a writer seals
// and leaves the registry).
func (c *child) close(ctx context.Context) error {
	c.stopJob()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := c.db.Close(cctx)
	if c.closeStore != nil {
		err = errors.Join(err, c.closeStore())
	}
	return err
}

func replyErr(err error) childMsg {
	if err != nil {
		return childMsg{Err: err.Error()}
	}
	return childMsg{}
}

func (c *child) stopJob() childMsg {
	if c.job == nil {
		return childMsg{}
	}
	m := c.job()
	c.job = nil
	return m
}

func (c *child) handle(ctx context.Context, req childReq) childMsg {
	switch req.Op {
	case "append":
		return c.appendRange(ctx, req)
	case "flush":
		tb, err := c.db.Table(ctx, req.Table)
		if err == nil {
			err = tb.Flush(ctx)
		}
		return replyErr(err)
	case "trickle", "sustain":
		if c.job != nil {
			return childMsg{Err: "a job is already running"}
		}
		tb, err := c.db.Table(ctx, req.Table)
		if err != nil {
			return replyErr(err)
		}
		c.job = c.writeJob(tb, req)
		return childMsg{}
	case "loop":
		if c.job != nil {
			return childMsg{Err: "a job is already running"}
		}
		tb, err := c.db.Table(ctx, req.Table)
		if err != nil {
			return replyErr(err)
		}
		c.job = c.mergeLoop(tb)
		return childMsg{}
	case "go":
		if c.gate == nil {
			return childMsg{Err: "no merge loop"}
		}
		c.gate <- true
		return childMsg{}
	case "stop":
		return c.stopJob()
	case "stats":
		return childMsg{Stats: statsMap(c.db.Stats())}
	}
	return childMsg{Err: fmt.Sprintf("unknown op %q", req.Op)}
}

// appendRange appends rows [From, To) with Conc goroutines (1: one after
// the other, so each row is its own group commit and its own segment).
func (c *child) appendRange(ctx context.Context, req childReq) childMsg {
	tb, err := c.db.Table(ctx, req.Table)
	if err != nil {
		return replyErr(err)
	}
	before := c.tally.snap()
	var mu sync.Mutex
	var nerr int
	var errs []string
	var fwd atomic.Int64
	// A failed append is retried (an identical retry is answered from what
	// landed, so it cannot duplicate a row), twice at most; every failure
	// is reported, so the parent can say what went wrong and still build
	// its backlog.
	d, err := runPool(ctx, req.To-req.From, max(req.Conc, 1), func(ctx context.Context, i int) error {
		id := fmt.Sprintf("%s%06d", req.Prefix, req.From+i)
		for attempt := 0; ; attempt++ {
			f, err := routedAppend(ctx, tb, c.o.shard, c.route, record(id, req.From+i), payload(id, req.Size))
			if err == nil {
				if f {
					fwd.Add(1)
				}
				return nil
			}
			mu.Lock()
			nerr++
			if len(errs) < 5 {
				errs = append(errs, fmt.Sprintf("%s: %v", id, firstLine(err.Error())))
			}
			mu.Unlock()
			if attempt == 2 || ctx.Err() != nil {
				return fmt.Errorf("append %s: %w", id, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	m := childMsg{N: req.To - req.From, Dur: d, Ops: c.tally.snap().sub(before).ops, Errors: nerr, ErrSample: errs, Forwarded: int(fwd.Load())}
	if err != nil {
		m.Err = err.Error()
	}
	return m
}

// writeJob appends rows in the background until stopped: "trickle" one at
// a time, one per Interval; "sustain" with Conc goroutines at Rate rows
// per second in total. Each acknowledged id is reported as an event as
// soon as Append returns, so the parent can read it at once from another
// process (read-after-write across processes).
func (c *child) writeJob(tb *engine.Table, req childReq) func() childMsg {
	ctx, cancel := context.WithCancel(context.Background())
	before := c.tally.snap()
	var (
		mu    sync.Mutex
		lat   []time.Duration
		bp    int
		nerr  int
		fwd   int
		errs  []string
		seq   atomic.Int64
		wg    sync.WaitGroup
		conc  = 1
		every = req.Interval
	)
	if req.Op == "sustain" {
		conc = max(req.Conc, 1)
		every = time.Duration(float64(time.Second) / req.Rate)
	}
	// One token per interval; a token not taken (the writers are behind)
	// is not saved up beyond one per goroutine, so the offered rate is
	// honest and a slow store is seen as a lower achieved rate.
	tokens := make(chan struct{}, conc)
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				select {
				case tokens <- struct{}{}:
				default:
				}
			}
		}
	})
	for range conc {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-tokens:
				}
				i := int(seq.Add(1) - 1)
				id := fmt.Sprintf("%s%07d", req.Prefix, i)
				t0 := time.Now()
				f, err := routedAppend(ctx, tb, c.o.shard, c.route, record(id, i), payload(id, req.Size))
				d := time.Since(t0)
				if ctx.Err() != nil {
					return // stopped mid-append: neither acknowledged nor an error
				}
				mu.Lock()
				switch {
				case err == nil:
					lat = append(lat, d)
					if f {
						fwd++
					}
				case errors.Is(err, engine.ErrBackpressure):
					bp++
				default:
					nerr++
					if len(errs) < 5 {
						errs = append(errs, fmt.Sprintf("%s: %v", id, err))
					}
				}
				mu.Unlock()
				if err == nil {
					c.send(childMsg{Event: "acked", ID: id, Dur: d})
				} else if errors.Is(err, engine.ErrBackpressure) {
					time.Sleep(200 * time.Millisecond) // what a client does with Retry-After
				}
			}
		})
	}
	return func() childMsg {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return childMsg{N: len(lat), Lat: lat, Backpressure: bp, Errors: nerr, ErrSample: errs, Forwarded: fwd, Stats: statsMap(c.db.Stats()),
			Ops: c.tally.snap().sub(before).ops}
	}
}

// mergeLoop runs merge passes back to back (a second's pause after a pass
// that found nothing to merge), reporting each pass and then waiting for
// the parent's "go", so the parent can replay a pass's reads and writes
// with the raw SDK while nothing else of the merger runs.
func (c *child) mergeLoop(tb *engine.Table) func() childMsg {
	c.gate = make(chan bool)
	done := make(chan struct{})
	stopping := make(chan struct{})
	var passes, failed int
	m := engine.NewMaintainer(c.db, engine.MaintainOptions{
		Tables: []string{tb.Name()},
		Wait: func(ctx context.Context, prev *engine.MaintenancePass) bool {
			if prev == nil {
				return true
			}
			select {
			case <-stopping:
				return false
			case ok := <-c.gate:
				if !ok {
					return false
				}
			}
			if t := passTable(prev); t.Merge.Version == 0 || t.OpenErr != nil || t.MergeErr != nil {
				select {
				case <-stopping:
					return false
				case <-time.After(time.Second):
				}
			}
			return true
		},
		OnStart: func(int, time.Time) { c.rec.reset() },
		OnPass: func(p engine.MaintenancePass) {
			t := passTable(&p)
			pr := c.rec.report(t.Merge, p.Start)
			if err := cmp.Or(t.OpenErr, t.MergeErr); err != nil {
				pr.Err = err.Error()
				failed++
			}
			passes++
			c.send(childMsg{Event: "pass", Pass: pr})
		},
	})
	go func() {
		defer close(done)
		m.Run(context.Background())
	}()
	return func() childMsg {
		close(stopping)
		<-done
		c.gate = nil
		return childMsg{N: passes, Errors: failed, Stats: statsMap(c.db.Stats())}
	}
}

// passTable is what a pass of the merge loop, which has one table, did.
func passTable(p *engine.MaintenancePass) engine.TableMaintenance {
	if len(p.Tables) == 0 {
		return engine.TableMaintenance{}
	}
	return p.Tables[0]
}

func statsMap(s *engine.Stats) map[string]int64 {
	out := map[string]int64{}
	for _, c := range append(readCounters(s), writerCounters(s)...) {
		out[c.name] = c.v
	}
	out["append backpressure"] = s.AppendBackpressure.Load()
	out["merge ms"] = s.MergeNanos.Load() / 1e6
	return out
}

// ---- The parent side. ----

// proc is a running child process, or with -store latency a child
// running in this process (local).
type proc struct {
	name string
	cmd  *exec.Cmd
	in   *json.Encoder

	local   *child
	stopped bool // local: closed

	call    sync.Mutex // one request at a time
	replies chan childMsg
	exited  chan struct{} // closed when its stdout ends

	evMu    sync.Mutex
	onEvent func(childMsg)

	tail *tailBuffer
}

// startChild starts `rollbench child` with args and waits for nothing: the
// first request's reply shows it is up. A writer, and with -store latency
// any child, it starts in this process instead (startLocalChild).
func startChild(e *env, name string, args ...string) (*proc, error) {
	if co, err := parseChildFlags(args); err != nil {
		return nil, err
	} else if e.lat != nil || co.role == "writer" {
		return startLocalChild(e, name, args...)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, append([]string{"child", "-container", e.rsContainer}, args...)...)
	cmd.Env = os.Environ()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: cmd, in: json.NewEncoder(stdin), replies: make(chan childMsg, 1), exited: make(chan struct{}), tail: &tailBuffer{name: name}}
	cmd.Stderr = p.tail
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m childMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				logf("%s: bad line from child: %.200s", name, sc.Text())
				continue
			}
			if m.Event == "" {
				p.replies <- m
				continue
			}
			p.event(m)
		}
	}()
	e.procs = append(e.procs, p)
	return p, nil
}

func startLocalChild(e *env, name string, args ...string) (*proc, error) {
	o, err := parseChildFlags(args)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name}
	c := &child{o: o, name: name, tally: newTally(), send: p.event, route: e.writer}
	var store objstore.Bucket
	if e.lat != nil {
		store = e.lat.Bucket()
	} else {
		// Its own client and connection pool, as a process of its own has.
		az, err := azure.New(context.Background(), azure.Config{
			Auth:             azure.AuthConnectionString,
			ConnectionString: os.Getenv(EnvConnectionString),
			Container:        e.rsContainer,
			HTTPClient:       newHTTPClient(azure.DefaultMaxConnsPerHost, c.tally),
		})
		if err != nil {
			return nil, err
		}
		store, c.closeStore = az, az.Close
	}
	if err := c.open(store); err != nil {
		return nil, err
	}
	if o.role == "writer" {
		e.addWriter(o.shard, c.db)
	}
	p.local = c
	e.procs = append(e.procs, p)
	return p, nil
}

// event hands a child's event to the handler set by setOnEvent.
func (p *proc) event(m childMsg) {
	p.evMu.Lock()
	fn := p.onEvent
	p.evMu.Unlock()
	if fn != nil {
		fn(m)
	}
}

func (p *proc) setOnEvent(fn func(childMsg)) {
	p.evMu.Lock()
	p.onEvent = fn
	p.evMu.Unlock()
}

// do sends req and waits for its reply; a reply with an error is an error.
func (p *proc) do(ctx context.Context, req childReq) (childMsg, error) {
	p.call.Lock()
	defer p.call.Unlock()
	if p.local != nil {
		if p.stopped {
			return childMsg{}, fmt.Errorf("%s: %s: the child was closed", p.name, req.Op)
		}
		var m childMsg
		if req.Op == "close" {
			p.stopped = true
			m = replyErr(p.local.close(ctx))
		} else {
			m = p.local.handle(ctx, req)
		}
		if m.Err != "" {
			return m, fmt.Errorf("%s: %s: %s", p.name, req.Op, m.Err)
		}
		return m, nil
	}
	if err := p.in.Encode(req); err != nil {
		return childMsg{}, fmt.Errorf("%s: sending %s: %w (stderr: %s)", p.name, req.Op, err, p.tail.last())
	}
	select {
	case m := <-p.replies:
		if m.Err != "" {
			return m, fmt.Errorf("%s: %s: %s", p.name, req.Op, m.Err)
		}
		return m, nil
	case <-p.exited:
		return childMsg{}, fmt.Errorf("%s exited during %s (stderr: %s)", p.name, req.Op, p.tail.last())
	case <-ctx.Done():
		return childMsg{}, fmt.Errorf("%s: %s: %w", p.name, req.Op, ctx.Err())
	}
}

// stop closes the child (its DB seals and leaves the registry) and waits
// for it to exit; one that does not within a minute is killed.
func (p *proc) stop() error {
	if p.local != nil {
		p.call.Lock()
		stopped := p.stopped
		p.call.Unlock()
		if stopped {
			return nil
		}
		_, err := p.do(context.Background(), childReq{Op: "close"})
		return err
	}
	if p.cmd.ProcessState != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := p.do(ctx, childReq{Op: "close"})
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case werr := <-done:
		return errors.Join(err, werr)
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		werr := <-done // killed: its exit status says only that
		return fmt.Errorf("%s did not exit; killed (%v): %w", p.name, werr, errors.Join(err, context.DeadlineExceeded))
	}
}

func stopAll(ps []*proc) error {
	var errs []error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			if err := p.stop(); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tailBuffer forwards a child's stderr to ours, prefixed, and keeps its
// last lines for error messages.
type tailBuffer struct {
	name  string
	mu    sync.Mutex
	buf   []byte
	lines []string
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	for {
		i := bytes.IndexByte(t.buf, '\n')
		if i < 0 {
			break
		}
		line := string(t.buf[:i])
		t.buf = t.buf[i+1:]
		fmt.Fprintf(os.Stderr, "  [%s] %s\n", t.name, line)
		t.lines = append(t.lines, line)
		if len(t.lines) > 5 {
			t.lines = slices.Delete(t.lines, 0, len(t.lines)-5)
		}
	}
	return len(b), nil
}

func (t *tailBuffer) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.lines) == 0 {
		return "(nothing)"
	}
	return strings.Join(t.lines, " | ")
}
