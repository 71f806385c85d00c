package sched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"sync"
	"time"
)

// ErrHalted is what a simulated goroutine gets from a wait once its
// simulation was halted: it is unwinding, not running.
var ErrHalted = errors.New("sched: simulation halted")

// Sim is a deterministic runtime for simulation tests. Exactly one of its
// goroutines (tasks) runs at a time: a task runs until it reaches a Point,
// a Wait or its end, and then the scheduler, driven by a seeded random
// source, picks the next runnable task. Time stands still while tasks run;
// when none is runnable the clock jumps to the next timer. With the same
// seed and the same code, every run takes exactly the same steps.
//
// Tasks belong to processes (Proc), each a Runtime: a process can be
// frozen (its tasks are not scheduled, as for a paused or partitioned
// process) and thawed again, which is how zombies are made.
type Sim struct {
	mu     sync.Mutex
	rng    *rand.Rand
	now    time.Time
	runq   []*task
	timers []*simTimer
	seq    int
	cur    *task
	back   chan struct{}
	halted bool
	live   map[*task]bool
	steps  int
	trace  []string
	// Jitter is the chance, at each step, that the clock moves forward by
	// up to MaxJitter even though tasks are runnable (slow calls, GC
	// pauses): leases can then lapse in the middle of an operation.
	Jitter    float64
	MaxJitter time.Duration
	// Watchdog bounds how long a task may run without reaching a
	// scheduling point (a task blocked outside the scheduler is a bug).
	Watchdog time.Duration
}

type task struct {
	id     int
	proc   *Proc
	label  string
	wake   chan struct{}
	queued bool // in runq
	waits  []*simEvent
}

type simTimer struct {
	when time.Time
	seq  int
	ev   *simEvent
}

// NewSim returns a simulation seeded with seed, its clock at start.
func NewSim(seed uint64, start time.Time) *Sim {
	return &Sim{
		rng:      rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		now:      start,
		back:     make(chan struct{}),
		live:     map[*task]bool{},
		Watchdog: 20 * time.Second,
	}
}

// Proc is a simulated process: a Runtime whose tasks can be frozen.
type Proc struct {
	s      *Sim
	name   string
	frozen bool
}

// NewProc returns a new process of the simulation.
func (s *Sim) NewProc(name string) *Proc { return &Proc{s: s, name: name} }

// Name is the process's name.
func (p *Proc) Name() string { return p.name }

// Freeze stops scheduling p's tasks; Thaw resumes them.
func (p *Proc) Freeze() { p.s.mu.Lock(); p.frozen = true; p.s.mu.Unlock() }

// Thaw resumes a frozen process.
func (p *Proc) Thaw() { p.s.mu.Lock(); p.frozen = false; p.s.mu.Unlock() }

// Frozen reports whether p is frozen.
func (p *Proc) Frozen() bool { p.s.mu.Lock(); defer p.s.mu.Unlock(); return p.frozen }

// Rng returns the simulation's random source. Use it only from a task or
// from the goroutine that runs the simulation, never concurrently.
func (s *Sim) Rng() *rand.Rand { return s.rng }

// Now is the simulated time.
func (s *Sim) Now() time.Time { s.mu.Lock(); defer s.mu.Unlock(); return s.now }

// Advance moves the clock forward by d, firing due timers. It may be
// called from a task or before Run.
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	s.advanceTo(s.now.Add(d))
	s.mu.Unlock()
}

// Steps reports how many scheduling decisions were made.
func (s *Sim) Steps() int { s.mu.Lock(); defer s.mu.Unlock(); return s.steps }

// Trace returns the last scheduling decisions, oldest first.
func (s *Sim) Trace() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

const traceLen = 200

func (s *Sim) record(format string, args ...any) {
	if len(s.trace) == traceLen {
		copy(s.trace, s.trace[1:])
		s.trace = s.trace[:traceLen-1]
	}
	s.trace = append(s.trace, fmt.Sprintf("%d %s ", s.steps, s.now.Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

// Run schedules tasks until none is runnable and no timer is pending (or
// only frozen processes have work), or until stop returns true (checked
// between steps). It returns the number of steps taken.
func (s *Sim) Run(stop func() bool) error {
	for {
		if stop != nil && stop() {
			return nil
		}
		s.mu.Lock()
		t := s.pick()
		if t == nil {
			if !s.fireNextTimer() {
				s.mu.Unlock()
				return nil
			}
			s.mu.Unlock()
			continue
		}
		s.cur = t
		s.steps++
		s.record("run %s", t.label)
		s.mu.Unlock()
		t.wake <- struct{}{}
		select {
		case <-s.back:
		case <-time.After(s.Watchdog):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			return fmt.Errorf("sched: task %s ran %v without reaching a scheduling point (blocked outside the scheduler?)\n%s", t.label, s.Watchdog, buf[:n])
		}
	}
}

// pick removes and returns a runnable task of an unfrozen process, or nil.
func (s *Sim) pick() *task {
	if s.Jitter > 0 && s.MaxJitter > 0 && s.rng.Float64() < s.Jitter {
		s.advanceTo(s.now.Add(time.Duration(s.rng.Int64N(int64(s.MaxJitter)) + 1)))
	}
	var eligible []int
	for i, t := range s.runq {
		if !t.proc.frozen {
			eligible = append(eligible, i)
		}
	}
	if len(eligible) == 0 {
		return nil
	}
	i := eligible[s.rng.IntN(len(eligible))]
	t := s.runq[i]
	s.runq = append(s.runq[:i], s.runq[i+1:]...)
	t.queued = false
	return t
}

// fireNextTimer jumps the clock to the earliest timer whose firing can
// wake something, and fires it. Timers of a frozen process still fire
// (their tasks stay unscheduled until it thaws).
func (s *Sim) fireNextTimer() bool {
	if len(s.timers) == 0 {
		return false
	}
	// Jumping the clock only helps if a runnable task can result; a
	// simulation with only frozen work left has ended.
	anyUnfrozen := false
	for t := range s.live {
		if !t.proc.frozen {
			anyUnfrozen = true
			break
		}
	}
	if !anyUnfrozen {
		return false
	}
	s.advanceTo(s.timers[0].when)
	return true
}

func (s *Sim) advanceTo(when time.Time) {
	if when.After(s.now) {
		s.now = when
	}
	for len(s.timers) > 0 && !s.timers[0].when.After(s.now) {
		tm := s.timers[0]
		s.timers = s.timers[1:]
		s.fireLocked(tm.ev)
	}
}

// Halt stops the simulation for good: every task is released and each of
// its later waits returns ErrHalted, so tasks unwind on their own.
func (s *Sim) Halt() {
	s.mu.Lock()
	if s.halted {
		s.mu.Unlock()
		return
	}
	s.halted = true
	tasks := make([]*task, 0, len(s.live))
	for t := range s.live {
		tasks = append(tasks, t)
	}
	s.mu.Unlock()
	for _, t := range tasks {
		close(t.wake)
	}
}

// Go starts f as a task of p.
func (p *Proc) Go(f func()) { p.s.spawn(p, "", f) }

// GoNamed starts f as a task of p with a label for the trace.
func (p *Proc) GoNamed(label string, f func()) { p.s.spawn(p, label, f) }

func (s *Sim) spawn(p *Proc, label string, f func()) {
	s.mu.Lock()
	s.seq++
	t := &task{id: s.seq, proc: p, wake: make(chan struct{})}
	if label == "" {
		label = "task"
	}
	t.label = fmt.Sprintf("%s/%s#%d", p.name, label, t.id)
	if s.halted {
		s.mu.Unlock()
		close(t.wake)
		go func() {
			defer func() { _ = recover() }()
			f()
		}()
		return
	}
	s.live[t] = true
	s.runq = append(s.runq, t)
	t.queued = true
	s.mu.Unlock()
	go func() {
		<-t.wake
		defer s.exit(t)
		if s.isHalted() {
			return
		}
		f()
	}()
}

func (s *Sim) isHalted() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.halted }

func (s *Sim) exit(t *task) {
	s.mu.Lock()
	delete(s.live, t)
	halted := s.halted
	if !halted {
		s.cur = nil
	}
	s.mu.Unlock()
	if !halted {
		s.back <- struct{}{}
	}
}

// block gives the baton back and waits to be scheduled again. The caller
// holds s.mu, which block releases.
func (s *Sim) block(t *task) error {
	if s.halted {
		s.mu.Unlock()
		return ErrHalted
	}
	s.cur = nil
	s.mu.Unlock()
	s.back <- struct{}{}
	<-t.wake
	if s.isHalted() {
		return ErrHalted
	}
	return nil
}

// current returns the running task; the caller holds s.mu.
func (s *Sim) current() *task {
	if s.cur == nil && !s.halted {
		panic("sched: a simulated runtime was used outside its tasks")
	}
	return s.cur
}

// Point lets the scheduler run others before the caller continues.
func (p *Proc) Point(name string) {
	s := p.s
	s.mu.Lock()
	if s.halted {
		s.mu.Unlock()
		return
	}
	t := s.current()
	t.queued = true
	s.runq = append(s.runq, t)
	if name != "" {
		s.record("point %s at %s", t.label, name)
	}
	_ = s.block(t)
}

// Now is the simulated time.
func (p *Proc) Now() time.Time { return p.s.Now() }

// Rand returns seeded random bits.
func (p *Proc) Rand() uint64 {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.rng.Uint64()
}

// WithTimeout returns a cancellable context; simulated deadlines are not
// enforced (a Sim sees cancellation only when a Wait begins).
func (p *Proc) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithCancel(ctx)
}

type simEvent struct {
	s       *Sim
	fired   bool
	waiters []*task
}

// NewEvent returns an unfired event.
func (p *Proc) NewEvent() Event { return &simEvent{s: p.s} }

// After returns an event that fires when the simulated clock reaches now+d.
func (p *Proc) After(d time.Duration) Event {
	s := p.s
	e := &simEvent{s: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	tm := &simTimer{when: s.now.Add(d), seq: s.seq, ev: e}
	i := sort.Search(len(s.timers), func(i int) bool {
		a := s.timers[i]
		return a.when.After(tm.when) || (a.when.Equal(tm.when) && a.seq > tm.seq)
	})
	s.timers = append(s.timers, nil)
	copy(s.timers[i+1:], s.timers[i:])
	s.timers[i] = tm
	if d <= 0 {
		s.advanceTo(s.now)
	}
	return e
}

func (e *simEvent) Fire() {
	e.s.mu.Lock()
	e.s.fireLocked(e)
	e.s.mu.Unlock()
}

func (s *Sim) fireLocked(e *simEvent) {
	if e.fired {
		return
	}
	e.fired = true
	for _, t := range e.waiters {
		if !t.queued {
			t.queued = true
			s.runq = append(s.runq, t)
		}
	}
	e.waiters = nil
}

func (e *simEvent) Fired() bool {
	e.s.mu.Lock()
	defer e.s.mu.Unlock()
	return e.fired
}

// Wait blocks the task until one of evs fires. A Wait is also a
// scheduling point, fired or not.
func (p *Proc) Wait(ctx context.Context, evs ...Event) (int, error) {
	s := p.s
	if err := ctx.Err(); err != nil {
		return -1, err
	}
	s.mu.Lock()
	if s.halted {
		s.mu.Unlock()
		return -1, ErrHalted
	}
	t := s.current()
	firstFired := func() int {
		for i, e := range evs {
			if e.(*simEvent).fired {
				return i
			}
		}
		return -1
	}
	if firstFired() >= 0 {
		t.queued = true
		s.runq = append(s.runq, t)
	} else {
		for _, e := range evs {
			se := e.(*simEvent)
			se.waiters = append(se.waiters, t)
		}
	}
	if err := s.block(t); err != nil {
		return -1, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range evs { // forget this wait on the events that did not fire
		se := e.(*simEvent)
		for i, w := range se.waiters {
			if w == t {
				se.waiters = append(se.waiters[:i], se.waiters[i+1:]...)
				break
			}
		}
	}
	if i := firstFired(); i >= 0 {
		return i, nil
	}
	// Woken without a fired event cannot happen; treat it as halted.
	return -1, ErrHalted
}
