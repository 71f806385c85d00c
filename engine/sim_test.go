package engine

// The engine's deterministic simulation. One seed decides everything: which
// operations run on which simulated process and when, how their steps
// interleave (one goroutine runs at a time, scheduled by the seed; see
// internal/sched), the clock (leases lapse, generations age), and the
// faults (failed calls, lost responses, frozen processes that come back as
// zombies, crashed processes replaced by new ones, a table dropped and
// created again). A checker compares every answer with what was
// acknowledged. A failing seed prints a command that replays it exactly.
//
// The table is partitioned (1 to 16 partitions, from the seed) or, for
// some seeds, a table without partitions. In a partitioned table an append
// reaching a process that does not own its partition is forwarded as the
// service does: staged there, its record committed by the owner's process,
// with the forwarding call's faults (request or answer lost, the owner gone,
// frozen or no longer the owner). Writer processes join (new names, or old
// ones coming back), leave cleanly, crash and freeze; the same id is sent
// with two contents to two processes at once, and the checker holds one
// id to one content for ever: at most one acknowledged, and every read
// returns it (or, none acknowledged, always the same one).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

var (
	simSeeds = flag.Int("sim.seeds", 0, "simulation seeds to run (default 2000; 40 under -race or -short)")
	simFirst = flag.Uint64("sim.first", 1, "first simulation seed")
	simSeed  = flag.Uint64("sim.seed", 0, "run only this simulation seed (replays it exactly)")
	simTrace = flag.Bool("sim.trace", false, "print the last scheduling steps of a failing seed")
	simLog   = flag.Bool("sim.log", false, "log every seed's steps and time")
	simSteps = flag.Int("sim.steps", 200, "scheduling steps a failing seed's trace shows (with -sim.trace)")
	simDebug = flag.String("sim.debug", "", "print the appends of this row id")
)

// TestSimulation runs the seeded simulation over many seeds.
func TestSimulation(t *testing.T) {
	seeds := *simSeeds
	if seeds == 0 {
		seeds = 2000
		if raceEnabled || testing.Short() {
			seeds = 40
		}
	}
	var list []uint64
	if *simSeed != 0 {
		list = []uint64{*simSeed}
	} else {
		for i := 0; i < seeds; i++ {
			list = append(list, *simFirst+uint64(i))
		}
	}
	start := time.Now()
	var (
		mu     sync.Mutex
		next   int
		failed []string
		steps  int
	)
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= len(list) || len(failed) >= 3 {
					mu.Unlock()
					return
				}
				seed := list[next]
				next++
				mu.Unlock()
				t0 := time.Now()
				res := runSim(seed, simOptions{})
				if *simLog {
					fmt.Printf("seed %d: %d steps, %v, err=%v\n", seed, res.steps, time.Since(t0).Round(time.Millisecond), res.err != nil)
				}
				mu.Lock()
				steps += res.steps
				if res.err != nil {
					msg := fmt.Sprintf("seed %d: %v\n  replay: go test ./engine -run 'TestSimulation$' -count=1 -sim.seed=%d -sim.trace", seed, res.err, seed)
					if *simTrace {
						msg += "\n  last steps:\n    " + strings.Join(res.trace, "\n    ")
					}
					failed = append(failed, msg)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, f := range failed {
		t.Error(f)
	}
	t.Logf("%d seeds, %d scheduling steps, %v", min(next, len(list)), steps, time.Since(start).Round(time.Millisecond))
}

// simOptions select faults; the zero value is the full simulation. Tests
// that check the simulator itself (that it finds known bugs) narrow it.
type simOptions struct {
	ops int // operations per seed (default from the seed)
}

type simResult struct {
	err   error
	steps int
	trace []string
}

// errInjected marks a failure the simulation caused on purpose.
var errInjected = errors.New("sim: injected fault")

const simTable = "t"

// simMaxSteps bounds a seed: a schedule that keeps going is a livelock.
const simMaxSteps = 200_000

type simWorld struct {
	seed  uint64
	s     *sched.Sim
	rng   *rand.Rand
	mem   *memory.Bucket
	trace bool

	faults       bool
	pFail, pLose float64
	// pPoison is the chance that a ranged read's key becomes poisoned:
	// every later body of it fails midway as if the object had vanished
	// (what Azure's resumed read of a deleted blob answers).
	pPoison float64
	// pStall is the chance that a writer process freezes exactly at one of
	// its compare-and-swaps of the registry or a shard's head, and a
	// successor for its shard starts: a zombie caught between deciding and
	// writing, the schedule that fencing exists for (random freezes rarely
	// land there).
	pStall float64
	// poisoned maps a key to how many bytes its bodies give before failing.
	poisoned map[string]int64
	// partitions is the table's partition count (-1: a table without
	// partitions, each writer process with its own shard).
	partitions int
	// pForward is the chance that a forwarded append's request, or its
	// answer, is lost on the way.
	pForward float64
	// feedRetention is the processes' FeedRetention: 0 (merged
	// generations reclaimed at once, cursors expire) or an hour (longer
	// than a run: no cursor may expire).
	feedRetention time.Duration
	consumers     []*simConsumer
	members       []*simMember
	committed     map[string]simCommit // partition/offset → the row of a committed batch
	// departed are writer names whose process closed or crashed and was
	// not replaced: a join may bring one back (the same identity).
	departed   []string
	nextWriter int
	// breakBodies: a body whose object is deleted under it fails at its
	// next read, as Azure's does when it resumes the read; otherwise it
	// keeps serving what it had, as memory and a local file do. Either
	// way every read of a body is a scheduling point, so a merge can
	// commit and reclaim a generation while a payload streams from it,
	// and the read resumes from the row's new home.
	breakBodies bool

	procs    []*simProc
	driver   *sched.Proc
	rows     map[string]*simRow
	order    []string
	nextRow  int
	versions []uint64 // committed base versions of the current epoch
	// goneBelow: versions below it were collected by a merge that
	// completed (in the current epoch).
	goneBelow uint64
	epoch     int
	times     []time.Time // simulated time of each event
	dropping  bool        // a drop is running
	settling  bool        // the workload is over: what runs may finish
	dropEnd   int         // event at which the last drop completed
	events    int
	inflight  int
	opDone    sched.Event
	finished  bool
	halted    bool // set once the run is over: every store call fails
	problems  []string
}

type simProc struct {
	ops     int  // operations running on it
	fixed   bool // never frozen or crashed (a checking process)
	name    string
	p       *sched.Proc
	db      *DB
	shard   string
	dead    bool
	frozen  bool
	closing bool // shutting down cleanly: takes no new operations
}

// simItem is one row of an append and the variant of its content it sends.
type simItem struct {
	r *simRow
	v int
}

// simRow is one logical row: its id fixes its content.
type simRow struct {
	id    string
	size  int
	epoch int
	// startedBefore: the first attempt began at this event (rows whose
	// attempt straddled a drop are not checked).
	firstAttempt int
	acked        bool
	ackedAt      int
	attempts     int
	pending      int // appends of it running (a stalled process's may end long after)
	refused      int
	unknown      int
	seenAt       int

	// Variants: a row the conflict operation sends to two processes at
	// once has two contents (variant 1: another rollout_id, metadata and
	// payload). One id, one content, for ever: at most one variant is
	// acknowledged, and every read returns that one (or, none
	// acknowledged, always the same one).
	variants    int
	altSize     int    // variant 1's payload size
	varAttempts [2]int // appends of each variant
	varRefused  [2]int // of which refused
	ackedVar    int    // the variant acknowledged first (-1: none)
	seenVar     int    // the variant read first (-1: none)
}

// rec is the row's record in content variant v.
func (r *simRow) rec(v int) Record {
	rec := simRecord(r.id)
	if v == 1 {
		rec.RolloutID += "-b"
		rec.Metadata = []byte(`{"id":"` + r.id + `","variant":"b"}`)
	}
	return rec
}

// payload is the row's payload in content variant v.
func (r *simRow) payload(v int) []byte {
	if v == 1 {
		return payloadFor(r.id+"/b", r.altSize)
	}
	return payloadFor(r.id, r.size)
}

// variantOf names the variant a record read back has (-1: none).
func (r *simRow) variantOf(rec *Record) int {
	for v := 0; v < max(r.variants, 1); v++ {
		want := r.rec(v)
		pay := r.payload(v)
		if rec.RolloutID == want.RolloutID && rec.Sequence == want.Sequence && rec.PayloadSize == int64(len(pay)) &&
			rec.PayloadSHA256 == sha(pay) {
			return v
		}
	}
	return -1
}

func (w *simWorld) tick() int {
	w.events++
	w.times = append(w.times, w.s.Now())
	return w.events
}

// timeOf is the simulated time of an event.
func (w *simWorld) timeOf(event int) time.Time {
	if event <= 0 || event > len(w.times) {
		return time.Time{}
	}
	return w.times[event-1]
}

func (w *simWorld) problem(format string, args ...any) {
	if len(w.problems) < 5 {
		w.problems = append(w.problems, fmt.Sprintf("[event %d, %s] ", w.events, w.s.Now().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
	}
}

func simRecord(id string) Record {
	return Record{ID: id, RolloutID: "r-" + id, Sequence: int64(len(id)), ContentType: "application/x-sim",
		Metadata: []byte(`{"id":"` + id + `"}`)}
}

func runSim(seed uint64, opts simOptions) (res simResult) {
	start := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	s := sched.NewSim(seed, start)
	if *simTrace {
		s.TraceLen = *simSteps
	}
	w := &simWorld{seed: seed, s: s, rng: s.Rng(), rows: map[string]*simRow{}, trace: *simTrace}
	w.mem = memory.New(memory.WithClock(s.Now))
	w.pFail = []float64{0, 0.002, 0.01, 0.03}[w.rng.IntN(4)]
	w.pLose = []float64{0, 0.002, 0.01, 0.03}[w.rng.IntN(4)]
	w.pPoison = []float64{0, 0, 0.001, 0.005}[w.rng.IntN(4)]
	w.poisoned = map[string]int64{}
	w.breakBodies = w.rng.IntN(4) > 0
	w.pStall = []float64{0, 0, 0.05, 0.2}[w.rng.IntN(4)]
	// Partitioned tables by default; some seeds keep a table without
	// partitions (tables created before them must keep working).
	w.partitions = []int{-1, -1, 1, 2, 4, 4, 16, 16, 16, 16}[w.rng.IntN(10)]
	w.pForward = []float64{0, 0.01, 0.05, 0.15}[w.rng.IntN(4)]
	w.feedRetention = []time.Duration{0, time.Hour}[w.rng.IntN(2)]
	w.consumers = []*simConsumer{{}, {}}
	w.members = []*simMember{{name: "c0"}, {name: "c1"}, {name: "c2"}}
	w.committed = map[string]simCommit{}
	s.Jitter = []float64{0, 0.001, 0.01}[w.rng.IntN(3)]
	s.MaxJitter = 20 * time.Second
	ops := opts.ops
	if ops == 0 {
		ops = 30 + w.rng.IntN(50)
	}
	w.driver = s.NewProc("driver")
	w.opDone = w.driver.NewEvent()
	w.newProc("w0", "s0")
	w.newProc("w1", "s1")
	w.nextWriter = 2
	w.newProc("r0", "")
	w.newProc("m0", "")
	w.driver.GoNamed("driver", func() { w.drive(ops) })
	err := s.Run(func() bool { return w.finished || s.Steps() > simMaxSteps })
	res.steps = s.Steps()
	res.trace = s.Trace()
	blocked := s.Blocked()
	w.halted = true
	s.Halt()
	switch {
	case err != nil:
		res.err = err
	case !w.finished:
		res.err = fmt.Errorf("the simulation did not finish in %d steps (a livelock, or an operation that never returns); problems so far: %v\n  tasks not done:\n    %s",
			res.steps, w.problems, strings.Join(blocked, "\n    "))
	case len(w.problems) > 0:
		res.err = fmt.Errorf("[partitions %d] %s", w.partitions, strings.Join(w.problems, "\n  "))
	}
	return res
}

func (w *simWorld) config(p *sched.Proc, shard string) Config {
	return Config{
		Shard:               shard,
		Addr:                p.Name() + ":7070",
		Partitions:          w.partitions,
		InlineMax:           4 << 10,
		GroupCommitWindow:   time.Millisecond,
		GenMaxSegments:      1 + w.rng.IntN(4),
		GenMaxAge:           2 * time.Second,
		IdleAfter:           time.Second,
		ReclaimGrace:        0,
		RetainVersions:      2,
		RetainAge:           0,
		OrphanGrace:         30 * time.Minute,
		CompactMaxFiles:     3,
		TargetFileBytes:     64 << 10,
		WriteMaxPendingGens: 40,
		CacheBytes:          4 << 20,
		PayloadCacheBytes:   int64(w.rng.IntN(2)) * (256 << 10),
		PayloadCacheMaxItem: 16 << 10,
		LeaseDuration:       15 * time.Second,
		BaseProbeInterval:   time.Second,
		FeedRetention:       w.feedRetention,
		FeedPollInterval:    100 * time.Millisecond,
		GroupSessionTimeout: 10 * time.Second,
		Runtime:             p,
	}
}

func (w *simWorld) newProc(name, shard string) *simProc {
	p := w.s.NewProc(fmt.Sprintf("%s.%d", name, len(w.procs)))
	st := &simStore{w: w, proc: p, inner: w.mem}
	db, err := Open(st, w.config(p, shard))
	if err != nil {
		panic(err)
	}
	sp := &simProc{name: p.Name(), p: p, db: db, shard: shard}
	st.sp = sp
	w.procs = append(w.procs, sp)
	return sp
}

// live returns the processes that are not dead, optionally only writers.
func (w *simWorld) live(writers, unfrozen bool) []*simProc {
	var out []*simProc
	for _, p := range w.procs {
		if !p.dead && !p.closing && (!writers || p.shard != "") && (!unfrozen || !p.frozen) {
			out = append(out, p)
		}
	}
	return out
}

func (w *simWorld) pick(ps []*simProc) *simProc {
	if len(ps) == 0 {
		return nil
	}
	return ps[w.rng.IntN(len(ps))]
}

// drive runs the workload: ops operations, a few at a time, then the
// final check.
func (w *simWorld) drive(ops int) {
	ctx := context.Background()
	d := w.driver
	if err := w.procs[0].db.CreateTable(ctx, simTable); err != nil {
		w.problem("create table: %v", err)
		w.finished = true
		return
	}
	w.faults = true
	dropped := false
	for i := 0; i < ops; i++ {
		for w.running() >= 6 {
			// Operations may wait on frozen processes: after a while
			// one comes back.
			ev, timeout := w.opDone, d.After(500*time.Millisecond)
			i, err := d.Wait(ctx, ev, timeout)
			sched.Stop(timeout)
			if err != nil {
				return
			}
			if i == 1 {
				w.thaw()
			}
		}
		_, _ = d.Wait(ctx, d.After(time.Duration(w.rng.IntN(30))*time.Millisecond))
		r := w.rng.IntN(100)
		switch {
		case r < 24:
			w.start(w.pick(w.live(true, true)), "append", w.opAppend)
		case r < 28:
			if w.partitions > 0 {
				w.conflict()
			} else {
				w.start(w.pick(w.live(true, true)), "append", w.opAppend)
			}
		case r < 33:
			w.start(w.pick(w.live(true, true)), "batch", w.opBatch)
		case r < 38:
			w.start(w.pick(w.live(true, true)), "retry", w.opRetry)
		case r < 46:
			w.start(w.pick(w.live(false, true)), "get", w.opGet)
		case r < 49:
			w.start(w.pick(w.live(false, true)), "feed", w.opFeed)
		case r < 52:
			w.start(w.pick(w.live(false, true)), "group", w.opGroup)
		case r < 60:
			w.start(w.pick(w.live(false, true)), "payload", w.opPayload)
		case r < 63:
			w.start(w.pick(w.live(false, true)), "list", w.opList)
		case r < 66:
			w.start(w.pick(w.live(false, true)), "scan", w.opScan)
		case r < 70:
			w.start(w.pick(w.live(false, true)), "pinned", w.opPinned)
		case r < 75:
			w.start(w.pick(w.live(true, true)), "flush", w.opFlush)
		case r < 84:
			w.start(w.pick(w.live(false, true)), "merge", w.opMerge)
		case r < 86:
			w.start(w.pick(w.live(false, true)), "sweep", w.opSweep)
		case r < 88:
			w.crash()
		case r < 90:
			w.freeze()
		case r < 91:
			if p := w.pick(w.victims(true)); p != nil && len(w.live(false, true)) >= 3 {
				p.closing = true
				w.start(p, "restart", w.opRestart)
			}
		case r < 92:
			w.thaw()
		case r < 93:
			w.join()
		case r < 94:
			w.leave()
		case r < 97:
			// Time passes: leases lapse, generations age, idle writers
			// leave the active set.
			w.s.Advance(time.Duration(1+w.rng.IntN(20)) * time.Second)
		case r < 98 && !dropped && w.rng.IntN(3) == 0:
			dropped = true
			w.start(w.pick(w.live(false, true)), "drop", w.opDrop)
		default:
			w.start(w.pick(w.live(false, true)), "check", w.opFreshCheck)
		}
	}
	// Let everything alive finish, zombies included.
	w.settling = true
	for _, p := range w.procs {
		if p.frozen && !p.dead {
			p.frozen = false
			p.p.Thaw()
		}
	}
	for w.running() > 0 {
		ev := w.opDone
		if _, err := d.Wait(ctx, ev); err != nil {
			return
		}
	}
	w.faults = false
	w.final(ctx)
	w.finished = true
}

// running counts the operations of processes that are not dead (a dead
// process's operations never finish).
func (w *simWorld) running() int {
	n := 0
	for _, p := range w.procs {
		if !p.dead {
			n += p.ops
		}
	}
	return n
}

// start runs op as a task of p.
func (w *simWorld) start(p *simProc, name string, op func(context.Context, *simProc)) {
	if p == nil {
		return
	}
	w.inflight++
	p.ops++
	p.p.GoNamed(name, func() {
		defer func() {
			p.ops--
			w.inflight--
			w.opDone.Fire()
			w.opDone = w.driver.NewEvent()
		}()
		op(context.Background(), p)
	})
}

// victims are the processes that may be frozen or crashed.
func (w *simWorld) victims(unfrozen bool) []*simProc {
	var out []*simProc
	for _, p := range w.live(false, unfrozen) {
		if !p.fixed {
			out = append(out, p)
		}
	}
	return out
}

// crash kills a process for good (its calls in flight are abandoned) and,
// for a writer, starts a replacement with the same shard.
func (w *simWorld) crash() {
	p := w.pick(w.victims(false))
	if p == nil || len(w.live(false, false)) < 3 {
		return
	}
	p.dead = true
	p.p.Freeze()
	switch {
	case p.shard != "" && w.partitions > 0 && w.rng.IntN(2) == 0 && len(w.live(true, true)) >= 1:
		// Not replaced: its partitions move to the others once its
		// heartbeat is older than the member timeout.
		w.depart(p.shard)
	case p.shard != "":
		w.newProc(strings.SplitN(p.name, ".", 2)[0], p.shard)
	default:
		w.newProc("r", "")
	}
}

// depart notes that no process of writer name shard remains (a join may
// bring the name back).
func (w *simWorld) depart(shard string) {
	for _, q := range w.procs {
		if q.shard == shard && !q.dead {
			return
		}
	}
	if !slices.Contains(w.departed, shard) {
		w.departed = append(w.departed, shard)
	}
}

// join starts a writer process: a new name, or one that left or crashed
// coming back under its name (the same identity, which takes its
// partitions back at once).
func (w *simWorld) join() {
	if len(w.live(true, false)) >= 5 {
		return
	}
	if len(w.departed) > 0 && w.rng.IntN(2) == 0 {
		i := w.rng.IntN(len(w.departed))
		shard := w.departed[i]
		w.departed = slices.Delete(w.departed, i, i+1)
		w.newProc("w"+strings.TrimPrefix(shard, "s"), shard)
		return
	}
	k := w.nextWriter
	w.nextWriter++
	w.newProc(fmt.Sprintf("w%d", k), fmt.Sprintf("s%d", k))
}

// leave closes a writer process for good (a scale-down): db.Close leaves
// the members and seals its partitions; the others take them at once.
func (w *simWorld) leave() {
	var ws []*simProc
	for _, p := range w.victims(true) {
		if p.shard != "" {
			ws = append(ws, p)
		}
	}
	p := w.pick(ws)
	if p == nil || len(w.live(true, true)) < 2 || len(w.live(false, true)) < 3 {
		return
	}
	p.closing = true
	w.start(p, "leave", func(ctx context.Context, p *simProc) {
		w.closeProc(ctx, p)
		p.dead = true
		w.depart(p.shard)
	})
}

// closeProc shuts p down cleanly once its other operations finished.
func (w *simWorld) closeProc(ctx context.Context, p *simProc) {
	for p.ops > 1 {
		ev, timeout := w.opDone, p.p.After(time.Second)
		_, err := p.p.Wait(ctx, ev, timeout)
		sched.Stop(timeout)
		if err != nil {
			return
		}
	}
	_ = p.db.Close(ctx) // a failed seal is the next owner's to finish
}

// freeze pauses a process (a long GC pause, a partition): it may come back
// as a zombie after its leases lapsed and others took over.
func (w *simWorld) freeze() {
	w.freezeProc(w.pick(w.victims(true)))
}

func (w *simWorld) freezeProc(p *simProc) {
	if p == nil || p.fixed || p.dead || p.frozen || p.closing || w.settling || len(w.live(false, true)) < 3 {
		return
	}
	p.frozen = true
	p.p.Freeze()
	if p.shard != "" && w.rng.IntN(2) == 0 {
		w.newProc(strings.SplitN(p.name, ".", 2)[0]+"z", p.shard)
	}
}

// opRestart shuts p down cleanly once its other operations finished (a pod
// of a rolling restart: its writers seal and leave the registry) and starts
// its replacement.
func (w *simWorld) opRestart(ctx context.Context, p *simProc) {
	w.closeProc(ctx, p)
	p.dead = true
	if p.shard != "" {
		w.newProc(strings.SplitN(p.name, ".", 2)[0], p.shard)
	} else {
		w.newProc("r", "")
	}
}

// stall freezes writer p where it stands (at a compare-and-swap) and starts
// a successor for its shard.
func (w *simWorld) stall(p *simProc) {
	if w.settling || p.fixed || p.dead || p.frozen || len(w.live(false, true)) < 3 {
		return
	}
	p.frozen = true
	p.p.Freeze()
	w.newProc(strings.SplitN(p.name, ".", 2)[0]+"s", p.shard)
}

func (w *simWorld) thaw() {
	var frozen []*simProc
	for _, p := range w.procs {
		if p.frozen && !p.dead {
			frozen = append(frozen, p)
		}
	}
	if p := w.pick(frozen); p != nil {
		p.frozen = false
		p.p.Thaw()
	}
}

func (w *simWorld) table(ctx context.Context, p *simProc) (*Table, error) {
	return p.db.Table(ctx, simTable)
}

// The sim's forwarding answers: the request surely did not reach the
// owner (refused, retryable), or it may have (unknown outcome).
var (
	errForwardRefused = errors.New("sim: forward refused (the owner surely did not get it)")
	errForwardUnknown = errors.New("sim: forward's outcome unknown")
	// errOtherPartition: a batch item of a partition other than the one
	// that failed; partitions commit independently, so it may have landed.
	errOtherPartition = errors.New("sim: another partition of the batch failed")
)

// outcome classifies an append error.
func (w *simWorld) outcome(err error) (acked, refused bool) {
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, errInjected), errors.Is(err, ErrOutcomeUnknown), errors.Is(err, errForwardUnknown),
		errors.Is(err, errOtherPartition):
		return false, false
	case errors.Is(err, ErrOverloaded), errors.Is(err, ErrShardOwned), errors.Is(err, ErrFenced),
		errors.Is(err, ErrTooSlow), errors.Is(err, ErrTableNotFound), errors.Is(err, ErrNoWriter),
		errors.Is(err, ErrNotOwner), errors.Is(err, errForwardRefused), errors.Is(err, ErrConflict),
		errors.Is(err, ErrClosed):
		return false, true
	}
	return false, false
}

// allowedWriteErr reports errors an append may answer under the
// simulation's faults; anything else is a bug.
func allowedWriteErr(err error) bool {
	return err == nil || errors.Is(err, errInjected) || errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrOverloaded) ||
		errors.Is(err, ErrShardOwned) || errors.Is(err, ErrFenced) || errors.Is(err, ErrTooSlow) ||
		errors.Is(err, ErrTableNotFound) || errors.Is(err, sched.ErrHalted)
}

// allowedAppendErr adds what an append of r may answer through the
// forwarding of a partitioned table, and the conflict of a row sent with
// two contents.
func (w *simWorld) allowedAppendErr(r *simRow, err error) bool {
	// ErrClosed: the partition's writer was handed over (or its process
	// shut down) while the append waited for it; nothing of it written.
	return allowedWriteErr(err) || errors.Is(err, ErrNotOwner) || errors.Is(err, ErrClosed) || errors.Is(err, errForwardRefused) ||
		errors.Is(err, errForwardUnknown) || errors.Is(err, errOtherPartition) ||
		(r.variants > 1 && errors.Is(err, ErrConflict))
}

// allowedReadErr reports errors a read may answer under faults: injected
// store failures (a 503 from the service) and documented refusals.
func (w *simWorld) allowedReadErr(err error, start int) bool {
	return errors.Is(err, errInjected) || errors.Is(err, ErrOverloaded) || errors.Is(err, sched.ErrHalted) ||
		(errors.Is(err, ErrTableNotFound) && (w.dropping || w.dropEnd >= start))
}

func (w *simWorld) newRow() *simRow {
	w.nextRow++
	id := fmt.Sprintf("row-%04d", w.nextRow)
	size := []int{0, 10, 700, 3000, 5000, 12000}[w.rng.IntN(6)]
	r := &simRow{id: id, size: size, epoch: w.epoch, variants: 1, ackedVar: -1, seenVar: -1}
	w.rows[id] = r
	w.order = append(w.order, id)
	return r
}

// variantRules reports whether the one-content rule applies to r now: not
// to a row whose appends straddled a drop (each incarnation may hold its
// own content).
func (w *simWorld) variantRules(r *simRow) bool {
	return r.epoch >= 0 && r.epoch == w.epoch && !w.dropping && r.firstAttempt > w.dropEnd
}

func (w *simWorld) record(it simItem, err error, start, end int) {
	r, v := it.r, it.v
	straddled := w.dropping || w.dropEnd > start
	// A process learns of a drop elsewhere within ResidentMaxAge (1 s).
	if *simDebug != "" && r.id == *simDebug {
		fmt.Printf("DEBUG record %s v%d start %d end %d: %v\n", r.id, v, start, w.events, err)
	}
	afterDrop := w.dropping || w.dropEnd > 0
	if afterDrop && errors.Is(err, ErrInvalid) && strings.Contains(err.Error(), "is not one of") {
		// Staged in one incarnation, committed by an owner whose handle
		// is of the other (one of them has not noticed the drop yet):
		// refused before anything is written. (The client gets a 400
		// for a valid append that met a drop; see the report.)
		err = fmt.Errorf("%w: %w", errForwardRefused, err)
	}
	if !w.allowedAppendErr(r, err) {
		w.problem("append %s (variant %d): unexpected error %v (began at event %d; the last drop ended at event %d, dropping: %v)",
			r.id, v, err, start, w.dropEnd, w.dropping)
	}
	if straddled {
		r.epoch = -1 // straddled a drop: which incarnation it reached is unknown
	}
	acked, refused := w.outcome(err)
	switch {
	case acked:
		if w.variantRules(r) {
			if r.ackedVar >= 0 && r.ackedVar != v {
				w.problem("append %s: variant %d acknowledged, but variant %d was acknowledged before (event %d): two contents for one id",
					r.id, v, r.ackedVar, r.ackedAt)
			}
			if r.seenVar >= 0 && r.seenVar != v {
				w.problem("append %s: variant %d acknowledged, but variant %d was read before", r.id, v, r.seenVar)
			}
		}
		if !r.acked {
			r.acked, r.ackedAt, r.ackedVar = true, end, v
		}
	case refused:
		r.refused++
		r.varRefused[v]++
	default:
		r.unknown++
	}
}

func (w *simWorld) opAppend(ctx context.Context, p *simProc) {
	r := w.newRow()
	w.appendRows(ctx, p, []simItem{{r, 0}})
}

func (w *simWorld) opRetry(ctx context.Context, p *simProc) {
	if len(w.order) == 0 {
		return
	}
	r := w.rows[w.order[w.rng.IntN(len(w.order))]]
	if r.epoch != w.epoch {
		return
	}
	w.appendRows(ctx, p, []simItem{{r, w.rng.IntN(r.variants)}})
}

func (w *simWorld) opBatch(ctx context.Context, p *simProc) {
	n := 2 + w.rng.IntN(3)
	var items []simItem
	for i := 0; i < n; i++ {
		items = append(items, simItem{w.newRow(), 0})
	}
	w.appendRows(ctx, p, items)
}

// conflict sends one new id with two different contents to two writer
// processes at once (two pods receiving the same id): at most one may be
// acknowledged, and every read agrees with it.
func (w *simWorld) conflict() {
	ws := w.live(true, true)
	if len(ws) == 0 {
		return
	}
	p1 := w.pick(ws)
	p2 := w.pick(ws)
	if len(ws) > 1 {
		for p2 == p1 {
			p2 = w.pick(ws)
		}
	}
	r := w.newRow()
	r.variants = 2
	r.altSize = []int{0, 10, 700, 3000, 5000, 12000}[w.rng.IntN(6)]
	w.start(p1, "conflict-a", func(ctx context.Context, p *simProc) { w.appendRows(ctx, p, []simItem{{r, 0}}) })
	w.start(p2, "conflict-b", func(ctx context.Context, p *simProc) { w.appendRows(ctx, p, []simItem{{r, 1}}) })
}

func (w *simWorld) appendRows(ctx context.Context, p *simProc, items []simItem) {
	start := w.tick()
	for _, it := range items {
		r := it.r
		r.attempts++
		r.varAttempts[it.v]++
		r.pending++
		if r.firstAttempt == 0 {
			r.firstAttempt = start
		}
	}
	errs := make([]error, len(items))
	tb, err := w.table(ctx, p)
	var noe *NotOwnerError
	switch {
	case err != nil:
	case len(items) == 1:
		it := items[0]
		pay := it.r.payload(it.v)
		_, err = tb.Append(ctx, it.r.rec(it.v), bytes.NewReader(pay), int64(len(pay)))
		if errors.As(err, &noe) {
			// The service forwards: it stages the payload here and sends
			// the record to the owner the error names.
			errs = w.forwardAppend(ctx, p, tb, items, noe.Owner.Writer)
			err = nil
		}
	case w.partitions > 0 && !w.ownsAll(ctx, tb, items):
		// Some item's partition is another's: the service stages them
		// all here, commits this process's group and forwards the
		// others' to their owners.
		errs = w.forwardAppend(ctx, p, tb, items, "")
	default:
		batch := make([]BatchItem, len(items))
		for i, it := range items {
			batch[i] = BatchItem{Record: it.r.rec(it.v), Payload: it.r.payload(it.v)}
		}
		// A NotOwnerError here (ownership moved since the check) may
		// come from Commit after other partitions committed: per
		// partition, like any batch error.
		_, err = tb.AppendBatch(ctx, batch)
		errs = splitOutcome(tb, itemIDs(items), err)
		err = nil
	}
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
	}
	end := w.tick()
	for i, it := range items {
		it.r.pending--
		w.record(it, errs[i], start, end)
	}
}

// ownsAll reports whether p owns the partitions of all items (as it sees
// the members now).
func (w *simWorld) ownsAll(ctx context.Context, tb *Table, items []simItem) bool {
	for _, it := range items {
		if o, err := tb.Owner(ctx, it.r.id); err != nil || !o.Self {
			return false
		}
	}
	return true
}

func itemIDs(items []simItem) []string {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.r.id
	}
	return ids
}

// splitOutcome spreads a batch's answer (of AppendBatch or Commit) over
// its items: a BatchError decides the items of the failing item's
// partition, which commit all or none; the other partitions' commit
// independently, so their items may have landed.
func splitOutcome(tb *Table, ids []string, err error) []error {
	out := make([]error, len(ids))
	if err == nil {
		return out
	}
	var be *BatchError
	if tb == nil || !errors.As(err, &be) || be.Index < 0 || be.Index >= len(ids) {
		for i := range out {
			out[i] = err
		}
		return out
	}
	failed := tb.PartitionOf(ids[be.Index])
	for i, id := range ids {
		if tb.PartitionOf(id) == failed {
			out[i] = err
		} else {
			out[i] = fmt.Errorf("%w: %w", errOtherPartition, err)
		}
	}
	return out
}

// forwardAppend does what the service does with an append that reached a
// process not owning its partition: it stages the items here (payloads
// stored by this process), groups them by owner (owner, when given, is the
// one a single append's NotOwnerError named), commits its own group and
// sends each other group's records to their owner. Per item it returns the
// answer the client gets.
func (w *simWorld) forwardAppend(ctx context.Context, p *simProc, tb *Table, items []simItem, owner string) []error {
	errs := make([]error, len(items))
	fill := func(idx []int, err error) {
		for _, i := range idx {
			errs[i] = err
		}
	}
	all := make([]int, len(items))
	for i := range all {
		all[i] = i
	}
	staged := make([]*Staged, len(items))
	nt := tb
	for i, it := range items {
		pay := it.r.payload(it.v)
		st, at, err := nt.Stage(ctx, it.r.rec(it.v), bytes.NewReader(pay), int64(len(pay)))
		if err == nil && i > 0 && at != nt {
			err = fmt.Errorf("%w: the table was dropped and created again while staging", errForwardRefused)
		}
		if err != nil {
			nt.discard(ctx, staged[:i])
			fill(all, err)
			return errs
		}
		nt, staged[i] = at, st
	}
	const self = "\x00self"
	var owners []string
	groups := map[string][]int{}
	for i, it := range items {
		name := owner
		if name == "" {
			o, err := nt.Owner(ctx, it.r.id)
			if err != nil {
				errs[i] = err
				continue
			}
			name = o.Writer
			if o.Self {
				name = self
			}
		}
		if _, ok := groups[name]; !ok {
			owners = append(owners, name)
		}
		groups[name] = append(groups[name], i)
	}
	for _, name := range owners {
		idx := groups[name]
		sts := make([]*Staged, len(idx))
		ids := make([]string, len(idx))
		for k, i := range idx {
			sts[k], ids[k] = staged[i], items[i].r.id
		}
		var res []error
		switch name {
		case self:
			_, err := nt.Commit(ctx, sts)
			res = splitOutcome(nt, ids, err)
		case "":
			nt.discard(ctx, sts)
			res = make([]error, len(idx))
			for k := range res {
				res[k] = fmt.Errorf("%w: no live owner", errForwardRefused)
			}
		default:
			grp := make([]simItem, len(idx))
			for k, i := range idx {
				grp[k] = items[i]
			}
			res = w.forward(ctx, p, name, grp, sts)
		}
		for k, i := range idx {
			errs[i] = res[k]
		}
	}
	return errs
}

// forward sends staged records to the process of writer owner, which
// commits them (the service's forwarding RPC), with the RPC's faults: the
// request lost before it arrives (refused), no process of that name alive
// (refused), the owner frozen or dying with the request (no answer in
// time: unknown), the answer lost after the owner committed (unknown).
func (w *simWorld) forward(ctx context.Context, from *simProc, owner string, items []simItem, sts []*Staged) []error {
	out := make([]error, len(items))
	all := func(err error) []error {
		for i := range out {
			out[i] = err
		}
		return out
	}
	var target *simProc
	for _, q := range w.procs {
		if q.shard == owner && !q.dead {
			target = q // the newest process of that name has its address
		}
	}
	switch {
	case target == nil:
		return all(fmt.Errorf("%w: no process of %s is alive", errForwardRefused, owner))
	case target.closing:
		return all(fmt.Errorf("%w: %s is shutting down", errForwardRefused, owner))
	case w.faults && w.rng.Float64() < w.pForward:
		return all(fmt.Errorf("%w: the request to %s was lost", errForwardRefused, owner))
	}
	loseAnswer := w.faults && w.rng.Float64() < w.pForward
	// Only the records travel: each a copy, as over the wire.
	wire := make([]*Staged, len(sts))
	ids := make([]string, len(sts))
	for i, st := range sts {
		c := *st
		c.Record.Payload = bytes.Clone(st.Record.Payload)
		c.Record.Metadata = bytes.Clone(st.Record.Metadata)
		wire[i], ids[i] = &c, st.Record.ID
	}
	for _, it := range items {
		it.r.pending++ // until the owner's commit ends, however late
	}
	done := from.p.NewEvent()
	var res []error
	task := "forwarded"
	if w.faults && w.rng.Float64() < w.pForward/2 {
		task = "forwarded (its owner freezes)"
	}
	w.start(target, task, func(ctx context.Context, tp *simProc) {
		if task != "forwarded" {
			// The owner freezes with the request in hand, before or
			// while committing it: the sender's wait runs out.
			w.freezeProc(tp)
			tp.p.Point("")
		}
		defer func() {
			for _, it := range items {
				it.r.pending--
			}
			done.Fire()
		}()
		tb, err := w.table(ctx, tp)
		if err == nil {
			_, err = tb.Commit(ctx, wire)
		}
		res = splitOutcome(tb, ids, err)
	})
	timeout := from.p.After(30 * time.Second)
	i, err := from.p.Wait(ctx, done, timeout)
	sched.Stop(timeout)
	switch {
	case err != nil:
		return all(err)
	case i != 0:
		return all(fmt.Errorf("%w: no answer from %s in time", errForwardUnknown, owner))
	case loseAnswer:
		return all(fmt.Errorf("%w: the answer from %s was lost", errForwardUnknown, owner))
	}
	return res
}

// checkFound checks a row read back: its content, and that it may exist.
func (w *simWorld) checkFound(what string, id string, rec *Record, start, end int) {
	r := w.rows[id]
	if r == nil {
		w.problem("%s: %q was never written", what, id)
		return
	}
	v := r.variantOf(rec)
	if v < 0 {
		w.problem("%s: %q read back as %+v", what, id, rec)
		return
	}
	w.noteVariant(what, r, v)
	// Another process learns of a drop at its next refresh, within
	// ResidentMaxAge.
	noticed := w.timeOf(w.dropEnd).Add(time.Second)
	if r.epoch >= 0 && r.epoch != w.epoch && !w.dropping && start > w.dropEnd && w.timeOf(start).After(noticed) {
		w.problem("%s: %q of a dropped incarnation is visible (read began at event %d, the drop ended at event %d)", what, id, start, w.dropEnd)
	}
	if r.seenAt == 0 || end < r.seenAt {
		r.seenAt = end
	}
}

// noteVariant checks the content variant v a read returned for r: the
// acknowledged one, and always the same one.
func (w *simWorld) noteVariant(what string, r *simRow, v int) {
	if r.variants < 2 || !w.variantRules(r) {
		return
	}
	if r.ackedVar >= 0 && v != r.ackedVar {
		w.problem("%s: %q read back as variant %d, but variant %d was acknowledged (event %d)", what, r.id, v, r.ackedVar, r.ackedAt)
	}
	if r.seenVar >= 0 && v != r.seenVar {
		w.problem("%s: %q read back as variant %d, after variant %d was read (event %d)", what, r.id, v, r.seenVar, r.seenAt)
	}
	if r.seenVar < 0 {
		r.seenVar = v
	}
}

// mustExist reports whether a read that began at start must find r.
func (w *simWorld) mustExist(r *simRow, start int) bool {
	if r.epoch != w.epoch || w.dropping || w.dropEnd >= start || r.firstAttempt <= w.dropEnd {
		return false
	}
	return (r.acked && r.ackedAt < start) || (r.seenAt > 0 && r.seenAt < start)
}

func (w *simWorld) someRow() *simRow {
	if len(w.order) == 0 || w.rng.IntN(8) == 0 {
		return &simRow{id: fmt.Sprintf("absent-%d", w.rng.IntN(1000))}
	}
	return w.rows[w.order[w.rng.IntN(len(w.order))]]
}

func (w *simWorld) opGet(ctx context.Context, p *simProc) {
	r := w.someRow()
	start := w.tick()
	tb, err := w.table(ctx, p)
	var rec *Record
	if err == nil {
		rec, err = tb.Get(ctx, r.id, ReadOptions{})
	}
	end := w.tick()
	w.checkRead("get", r, rec, err, start, end)
}

func (w *simWorld) checkRead(what string, r *simRow, rec *Record, err error, start, end int) {
	switch {
	case err == nil:
		w.checkFound(what, r.id, rec, start, end)
	case errors.Is(err, ErrNotFound):
		if w.rows[r.id] != nil && w.mustExist(r, start) {
			w.problem("%s: %q answered not found, but it was acknowledged (event %d) or seen (event %d) before the read began (event %d)", what, r.id, r.ackedAt, r.seenAt, start)
		}
	case !w.allowedReadErr(err, start):
		w.problem("%s %q: %v", what, r.id, err)
	}
}

func (w *simWorld) opPayload(ctx context.Context, p *simProc) {
	r := w.someRow()
	if len(w.order) > 0 && w.rng.IntN(2) == 0 {
		// A recent row: likely still in a WAL generation, which a merge
		// may reclaim while the payload streams from it.
		r = w.rows[w.order[max(0, len(w.order)-1-w.rng.IntN(8))]]
	}
	off, n := int64(0), int64(-1)
	size := r.size // a range that fits every variant's payload
	if r.variants > 1 {
		size = min(size, r.altSize)
	}
	if size > 0 && w.rng.IntN(2) == 0 {
		off = int64(w.rng.IntN(size))
		n = int64(w.rng.IntN(size - int(off) + 1))
	}
	start := w.tick()
	tb, err := w.table(ctx, p)
	var data []byte
	var pl *Payload
	if err == nil {
		pl, err = tb.OpenPayload(ctx, r.id, off, n, ReadOptions{})
	}
	if err == nil {
		// In small reads of random sizes, each a scheduling point of the
		// body, by a client that may read slowly: merges commit and
		// reclaim the file the payload streams from between its reads.
		slow := w.rng.IntN(2) == 0
		for {
			chunk := make([]byte, 1+w.rng.IntN(1024))
			var k int
			k, err = pl.ReadContext(ctx, chunk)
			data = append(data, chunk[:k]...)
			if err != nil {
				break
			}
			if slow && w.rng.IntN(3) == 0 {
				if _, err = p.p.Wait(ctx, p.p.After(time.Duration(w.rng.IntN(1500))*time.Millisecond)); err != nil {
					break
				}
			}
		}
		if err == io.EOF {
			err = nil
		}
		pl.Close()
	}
	end := w.tick()
	if err == nil {
		if w.rows[r.id] == nil {
			w.problem("payload %q: was never written", r.id)
			return
		}
		// Which content it is: the description's size and checksum (two
		// empty payloads do not tell).
		v, matches := -1, 0
		for i := 0; i < r.variants; i++ {
			if pl.Record.PayloadSize == int64(len(r.payload(i))) && pl.Record.PayloadSHA256 == sha(r.payload(i)) {
				v, matches = i, matches+1
			}
		}
		if v < 0 {
			w.problem("payload %q: wrong size or checksum in its description", r.id)
			return
		}
		want := r.payload(v)
		if n < 0 {
			n = int64(len(want)) - off
		}
		if int64(len(want)) < off+n || !bytes.Equal(data, want[off:off+n]) {
			w.problem("payload %q [%d,+%d): %d wrong bytes", r.id, off, n, len(data))
			return
		}
		if ct := r.rec(v).ContentType; pl.Record.ContentType != ct {
			w.problem("payload %q: described with content type %q, not %q", r.id, pl.Record.ContentType, ct)
		}
		if matches == 1 {
			w.noteVariant("payload", r, v)
		}
		if r.seenAt == 0 || end < r.seenAt {
			r.seenAt = end
		}
		return
	}
	w.checkRead("payload", r, nil, err, start, end)
}

func (w *simWorld) opList(ctx context.Context, p *simProc) {
	start := w.tick()
	tb, err := w.table(ctx, p)
	seen := map[string]bool{}
	tok := ""
	for err == nil {
		var page ListPage
		page, err = tb.List(ctx, ListOptions{Limit: 1 + w.rng.IntN(20), PageToken: tok})
		if err != nil {
			break
		}
		for _, rec := range page.Records {
			if seen[rec.ID] {
				w.problem("list: %q twice", rec.ID)
			}
			seen[rec.ID] = true
			w.checkFound("list", rec.ID, rec, start, w.events)
		}
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	end := w.tick()
	w.checkComplete("list", seen, err, start, end)
}

func (w *simWorld) checkComplete(what string, seen map[string]bool, err error, start, end int) {
	if err != nil {
		if !w.allowedReadErr(err, start) {
			w.problem("%s: %v", what, err)
		}
		return
	}
	for _, id := range w.order {
		if r := w.rows[id]; !seen[id] && w.mustExist(r, start) {
			w.problem("%s: %q missing (acknowledged at event %d, seen at %d, %s began at %d)", what, id, r.ackedAt, r.seenAt, what, start)
		}
	}
}

func (w *simWorld) opScan(ctx context.Context, p *simProc) {
	withPayloads := w.rng.IntN(2) == 0
	start := w.tick()
	tb, err := w.table(ctx, p)
	var buf bytes.Buffer
	if err == nil {
		err = tb.Scan(ctx, &buf, ScanOptions{WithPayloads: withPayloads})
	}
	end := w.tick()
	seen := map[string]bool{}
	if err == nil {
		rd, rerr := ipc.NewReader(bytes.NewReader(buf.Bytes()))
		if rerr != nil {
			w.problem("scan: %v", rerr)
			return
		}
		for rd.Next() {
			b := rd.RecordBatch()
			ids := b.Column(b.Schema().FieldIndices("id")[0]).(*array.String)
			rollouts := b.Column(b.Schema().FieldIndices("rollout_id")[0]).(*array.String)
			seqs := b.Column(b.Schema().FieldIndices("sequence")[0]).(*array.Int64)
			sizes := b.Column(b.Schema().FieldIndices("payload_size")[0]).(*array.Int64)
			sums := b.Column(b.Schema().FieldIndices("payload_sha256")[0]).(*array.FixedSizeBinary)
			pay := b.Column(b.Schema().FieldIndices("payload")[0]).(*array.Binary)
			for i := 0; i < int(b.NumRows()); i++ {
				id := ids.Value(i)
				seen[id] = true
				r := w.rows[id]
				if r == nil {
					w.problem("scan: %q was never written", id)
					continue
				}
				rec := Record{ID: id, RolloutID: rollouts.Value(i), Sequence: seqs.Value(i), PayloadSize: sizes.Value(i)}
				copy(rec.PayloadSHA256[:], sums.Value(i))
				v := r.variantOf(&rec)
				if v < 0 {
					w.problem("scan: %q read back as %+v", id, rec)
					continue
				}
				w.noteVariant("scan", r, v)
				if withPayloads && (!pay.IsValid(i) || !bytes.Equal(pay.Value(i), r.payload(v))) {
					w.problem("scan: payload of %q wrong", id)
				}
				if !withPayloads && pay.IsValid(i) {
					w.problem("scan without payloads: payload of %q not null", id)
				}
				if r.seenAt == 0 || end < r.seenAt {
					r.seenAt = end
				}
			}
		}
		if rerr := rd.Err(); rerr != nil {
			w.problem("scan stream: %v", rerr)
		}
		rd.Release()
	}
	w.checkComplete("scan", seen, err, start, end)
}

func (w *simWorld) opPinned(ctx context.Context, p *simProc) {
	if len(w.versions) == 0 {
		return
	}
	v := w.versions[w.rng.IntN(len(w.versions))]
	r := w.someRow()
	epoch := w.epoch
	start := w.tick()
	mustBeGone := v < w.goneBelow
	tb, err := w.table(ctx, p)
	var rec *Record
	if err == nil {
		rec, err = tb.Get(ctx, r.id, ReadOptions{Version: v})
	}
	end := w.tick()
	if epoch != w.epoch || w.dropping {
		return
	}
	switch {
	case err == nil:
		if mustBeGone {
			w.problem("pinned read of version %d, collected before the read began, answered a row", v)
		}
		w.checkFound("pinned", r.id, rec, start, end)
	case errors.Is(err, ErrNotFound):
		if mustBeGone {
			w.problem("pinned read of version %d, collected before the read began, answered not found instead of gone", v)
		}
	case errors.Is(err, ErrVersionGone):
	case errors.Is(err, ErrNoVersion):
		w.problem("pinned read: committed version %d does not exist: %v", v, err)
	case !w.allowedReadErr(err, start):
		w.problem("pinned %q at %d: %v", r.id, v, err)
	}
}

func (w *simWorld) opFlush(ctx context.Context, p *simProc) {
	tb, err := w.table(ctx, p)
	if err == nil {
		err = tb.Flush(ctx)
	}
	if err != nil && !allowedWriteErr(err) && !errors.Is(err, ErrClosed) {
		w.problem("flush: %v", err)
	}
}

func (w *simWorld) opMerge(ctx context.Context, p *simProc) {
	epoch := w.epoch
	// The merge's retention lists the versions after this point, so its
	// newest listed version is at least the newest committed by now (or
	// the one it commits itself). A version committed by another merge
	// meanwhile may not be in its listing: it bounds nothing.
	var known uint64
	if len(w.versions) > 0 {
		known = slices.Max(w.versions)
	}
	tb, err := w.table(ctx, p)
	var res MergeResult
	if err == nil {
		res, err = tb.Merge(ctx, MergeOptions{MaxBytes: int64(1+w.rng.IntN(4)) * (32 << 10)})
	}
	if err != nil && !errors.Is(err, ErrMergerBusy) && !w.allowedReadErr(err, 0) && !errors.Is(err, ErrTableNotFound) &&
		!errors.Is(err, ErrOutcomeUnknown) {
		w.problem("merge: %v", err)
	}
	if epoch != w.epoch || w.dropping {
		return
	}
	if res.Version > 0 {
		w.versions = append(w.versions, res.Version)
	}
	if err == nil && res.VersionsCollected > 0 {
		latest := max(known, res.Version)
		if latest+1 > uint64(p.db.cfg.RetainVersions) {
			w.goneBelow = max(w.goneBelow, latest+1-uint64(p.db.cfg.RetainVersions))
		}
	}
}

func (w *simWorld) opSweep(ctx context.Context, p *simProc) {
	tb, err := w.table(ctx, p)
	if err == nil {
		_, err = tb.Sweep(ctx, p.db.cfg.OrphanGrace)
	}
	if err != nil && !errors.Is(err, ErrMergerBusy) && !w.allowedReadErr(err, 0) && !errors.Is(err, ErrTableNotFound) &&
		!strings.Contains(err.Error(), "gave up") {
		w.problem("sweep: %v", err)
	}
}

func (w *simWorld) opDrop(ctx context.Context, p *simProc) {
	w.dropping = true
	// A drop that fails midway is retried as a client would: once the
	// descriptor is gone the table is, and the retry answers not found.
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = p.db.DropTable(ctx, simTable); err == nil || !errors.Is(err, errInjected) {
			break
		}
	}
	if errors.Is(err, ErrTableNotFound) {
		err = nil
	}
	if err == nil {
		for attempt := 0; attempt < 20; attempt++ {
			if err = p.db.CreateTable(ctx, simTable); err == nil || !errors.Is(err, errInjected) {
				break
			}
		}
	}
	if err != nil {
		w.problem("drop and create: %v", err)
		w.dropping = false
		return
	}
	w.epoch++
	for _, r := range w.rows {
		if r.pending > 0 {
			r.epoch = -1 // an append begun before the drop may land in either incarnation
		}
	}
	w.versions, w.goneBelow = nil, 0
	w.dropEnd = w.tick()
	w.dropping = false
}

// opFreshCheck reads rows through a new process that shares nothing with
// the others but the store.
func (w *simWorld) opFreshCheck(ctx context.Context, _ *simProc) {
	fresh := w.newProc("fresh", "")
	fresh.fixed = true
	defer func() { fresh.dead = true }()
	for i := 0; i < 5 && len(w.order) > 0; i++ {
		r := w.rows[w.order[w.rng.IntN(len(w.order))]]
		start := w.tick()
		tb, err := w.table(ctx, fresh)
		var rec *Record
		if err == nil {
			rec, err = tb.Get(ctx, r.id, ReadOptions{})
		}
		w.checkRead("fresh get", r, rec, err, start, w.tick())
	}
}

// final checks what the store holds once the workload is over, from a
// fresh process without faults: before any further merge, after merging
// everything, and after a sweep with no grace.
func (w *simWorld) final(ctx context.Context) {
	if w.dropping {
		return
	}
	// Writers seal; dead ones' leases lapse, so the merger seals theirs.
	for _, p := range w.live(true, true) {
		if tb, err := w.table(ctx, p); err == nil {
			_ = tb.Flush(ctx)
		}
	}
	w.s.Advance(time.Minute)
	fresh := w.newProc("final", "")
	w.finalRead(ctx, fresh, "final")
	tb, err := w.table(ctx, fresh)
	if err != nil {
		w.problem("final: open: %v", err)
		return
	}
	for pass := 0; pass < 50; pass++ {
		res, err := tb.Merge(ctx, MergeOptions{})
		if err != nil {
			w.problem("final merge: %v", err)
			return
		}
		if res.Version == 0 && !res.Leftover {
			break
		}
	}
	w.finalFeed(ctx, fresh, "final feed")
	w.finalGroup(ctx, fresh)
	w.finalRead(ctx, w.newProc("final2", ""), "after merging everything")
	w.finalFeed(ctx, w.newProc("final4", ""), "final feed after merging everything")
	if _, err := tb.Sweep(ctx, 0); err != nil {
		w.problem("final sweep: %v", err)
	}
	w.finalRead(ctx, w.newProc("final3", ""), "after a sweep")
}

func (w *simWorld) finalRead(ctx context.Context, p *simProc, when string) {
	tb, err := w.table(ctx, p)
	if err != nil {
		w.problem("%s: open: %v", when, err)
		return
	}
	for _, id := range w.order {
		r := w.rows[id]
		if r.epoch != w.epoch || r.firstAttempt <= w.dropEnd {
			continue
		}
		rec, err := tb.Get(ctx, id, ReadOptions{})
		switch {
		case err == nil:
			t := w.tick()
			w.checkFound(when, id, rec, t, t)
			v := max(r.variantOf(rec), 0)
			if r.varAttempts[v] > 0 && r.varRefused[v] == r.varAttempts[v] {
				w.problem("%s: %q is visible (variant %d), but every attempt to write it was refused", when, id, v)
			}
			data, err := readPayload(tb, id)
			if err != nil || !bytes.Equal(data, r.payload(v)) {
				w.problem("%s: payload of %q: %v (%d bytes)", when, id, err, len(data))
			}
		case errors.Is(err, ErrNotFound):
			if r.acked || r.seenAt > 0 {
				w.problem("%s: %q lost (acknowledged: %v at event %d, seen at event %d)", when, id, r.acked, r.ackedAt, r.seenAt)
			}
		default:
			w.problem("%s: get %q: %v", when, id, err)
		}
	}
}

// simStore is one simulated process's view of the shared store: every
// call is a scheduling point, and may fail before it happens or lose its
// answer after.
type simStore struct {
	w     *simWorld
	sp    *simProc
	proc  *sched.Proc
	inner *memory.Bucket
}

func (s *simStore) enter(op, key string) error {
	if s.w.halted {
		return sched.ErrHalted
	}
	if s.w.faults && op == "put" && s.sp.shard != "" && (strings.HasSuffix(key, "/_registry.json") || strings.HasSuffix(key, "/_head.json")) &&
		s.w.rng.Float64() < s.w.pStall {
		s.w.stall(s.sp)
	}
	if s.w.trace {
		s.proc.Point(op + " " + key)
	} else {
		s.proc.Point("")
	}
	if s.w.faults && s.w.rng.Float64() < s.w.pFail {
		return fmt.Errorf("%s %s: %w: %w", op, key, objstore.ErrThrottled, errInjected)
	}
	return nil
}

func (s *simStore) leave(op, key string, err error) error {
	if err == nil && s.w.faults && s.w.rng.Float64() < s.w.pLose {
		return fmt.Errorf("%s %s: response lost: %w", op, key, errInjected)
	}
	return err
}

func (s *simStore) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	if err := s.enter("get", key); err != nil {
		return nil, objstore.Attrs{}, err
	}
	return s.inner.Get(ctx, key)
}

func (s *simStore) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := s.enter("getrange", key); err != nil {
		return nil, err
	}
	rc, err := s.inner.GetRange(ctx, key, off, n)
	if err != nil || !s.w.faults {
		return rc, err
	}
	p := s.w.pPoison
	if strings.Contains(key, "/payloads/") {
		p *= 20 // payload objects are read by range more rarely than segments
	}
	left, poisoned := s.w.poisoned[key]
	if !poisoned && s.w.rng.Float64() < p {
		// Half the keys give nothing at all: a reader that reopens such a
		// body without counting makes no progress.
		left, poisoned = 0, true
		if s.w.rng.IntN(2) == 0 {
			left = int64(s.w.rng.IntN(64))
		}
		s.w.poisoned[key] = left
	}
	if poisoned {
		rc = faulty.FailAfter(rc, left, fmt.Errorf("%s: %w: %w", key, objstore.ErrNotFound, errInjected))
	}
	return &simBody{s: s, key: key, rc: rc}, nil
}

// simBody is an open body of a ranged read (see simWorld.breakBodies).
type simBody struct {
	s   *simStore
	key string
	rc  io.ReadCloser
}

func (b *simBody) Read(p []byte) (int, error) {
	if b.s.w.halted {
		return 0, sched.ErrHalted
	}
	if b.s.w.trace {
		b.s.proc.Point("read " + b.key)
	} else {
		b.s.proc.Point("")
	}
	if b.s.w.breakBodies {
		if _, err := b.s.inner.Head(context.Background(), b.key); errors.Is(err, objstore.ErrNotFound) {
			return 0, fmt.Errorf("%s: deleted while its body was read: %w", b.key, err)
		}
	}
	return b.rc.Read(p)
}

func (b *simBody) Close() error { return b.rc.Close() }

func (s *simStore) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if err := s.enter("head", key); err != nil {
		return objstore.Attrs{}, err
	}
	return s.inner.Head(ctx, key)
}

func (s *simStore) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	if err := s.enter("put", key); err != nil {
		return objstore.Attrs{}, err
	}
	if *simDebug != "" && strings.Contains(key, "/wal/") && !strings.HasSuffix(key, ".json") {
		data, _ := io.ReadAll(r)
		r = bytes.NewReader(data)
		if recs, derr := rowfile.Decode(data, false); derr == nil {
			for _, rec := range recs {
				if rec.ID == *simDebug {
					fmt.Printf("DEBUG %s: segment %s by %s (event %d)\n", rec.ID, key, s.sp.name, s.w.events)
				}
			}
		}
	}
	a, err := s.inner.Put(ctx, key, r, opts)
	if err == nil && strings.HasSuffix(key, "/_head.json") {
		s.w.checkRegistered(ctx, key)
	}
	return a, s.leave("put", key, err)
}

// checkRegistered checks, as a head swap lands, what read-after-write across
// processes rests on: a head that counts a segment of an open generation is
// swapped by a writer the registry lists for that shard (a reader probes
// only the heads of active shards and of shards that changed; a writer
// leaves only when idle, registers again before it acknowledges, and only
// an owner that fenced it may remove it). Checked at the swap rather than
// at a later read, which would need an unlikely schedule to notice.
func (w *simWorld) checkRegistered(ctx context.Context, headKey string) {
	a, err := w.mem.Head(ctx, headKey)
	if err != nil {
		return
	}
	h, err := headFromAttrs(a)
	if err != nil || h.Sealed || h.Dropped || h.Segs == 0 {
		return
	}
	shard := path.Base(path.Dir(headKey))
	data, _, err := objstore.ReadAll(ctx, w.mem, path.Dir(path.Dir(headKey))+"/_registry.json", 1<<20)
	if err != nil {
		return // dropped
	}
	var reg registry
	if err := json.Unmarshal(data, &reg); err != nil {
		w.problem("registry: %v", err)
		return
	}
	if reg.Dropped {
		return
	}
	if !slices.ContainsFunc(reg.Shards[shard].Writers, func(e regEntry) bool { return e.Name == h.Owner }) {
		w.problem("%s's head counts segment %d of generation %d for writer %s, whom the registry does not list (%+v): readers may stop probing it",
			shard, h.Segs, h.Gen, h.Owner, reg.Shards[shard])
	}
}

func (s *simStore) Delete(ctx context.Context, key string) error {
	if err := s.enter("delete", key); err != nil {
		return err
	}
	return s.leave("delete", key, s.inner.Delete(ctx, key))
}

func (s *simStore) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := s.enter("deleteif", key); err != nil {
		return err
	}
	return s.leave("deleteif", key, s.inner.DeleteIfMatch(ctx, key, etag))
}

func (s *simStore) DeleteMany(ctx context.Context, keys []string) error {
	if err := s.enter("deletemany", strings.Join(keys, ",")); err != nil {
		return err
	}
	return s.leave("deletemany", "", s.inner.DeleteMany(ctx, keys))
}

func (s *simStore) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := s.enter("list", prefix); err != nil {
		return err
	}
	return s.inner.List(ctx, prefix, opts, fn)
}

func (s *simStore) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	if err := s.enter("acquire", key); err != nil {
		return nil, err
	}
	l, err := s.inner.AcquireLease(ctx, key, d)
	if err != nil {
		return nil, err
	}
	return &simLease{s: s, key: key, inner: l}, nil
}

type simLease struct {
	s     *simStore
	key   string
	inner objstore.Lease
}

func (l *simLease) Renew(ctx context.Context) error {
	if err := l.s.enter("renew", l.key); err != nil {
		return err
	}
	return l.inner.Renew(ctx)
}

func (l *simLease) Release(ctx context.Context) error {
	if err := l.s.enter("release", l.key); err != nil {
		return err
	}
	return l.inner.Release(ctx)
}

func (l *simLease) Duration() time.Duration { return l.inner.Duration() }

func sha(b []byte) [32]byte { return sha256.Sum256(b) }
