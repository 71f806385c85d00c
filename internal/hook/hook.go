// Package hook lets tests stop, fail or observe production code at named
// points, so that races and crashes can be reproduced deterministically
// instead of hoped for with sleeps.
//
// Production code holds a Func (nil in production) and calls it at each step
// whose interleaving matters:
//
//	if err := e.hook.Call(ctx, "merge.committed"); err != nil {
//		return err
//	}
//
// A test builds a Set, hands its Func to the code under test, and arranges
// what happens at each point: Pause blocks the caller at a Gate until the test
// releases it, Fail makes the point return an error (a simulated crash at that
// step), Do runs arbitrary code there.
//
// Every rule fires on the first matching call only unless given Skip, Times
// or Always; a one-shot fault is what a crash-and-recover test wants, since
// the recovery run must get past the same point.
package hook

import (
	"context"
	"sync"
)

// Func is called by production code at named points. A nil Func does
// nothing, so production code can call it unconditionally.
type Func func(ctx context.Context, point string) error

// Call invokes f at point; on a nil f it returns nil.
func (f Func) Call(ctx context.Context, point string) error {
	if f == nil {
		return nil
	}
	return f(ctx, point)
}

// Gate holds back the calls that reach it until it is released, and tells
// the test when the first one arrived. The zero Gate is not usable; create
// one with NewGate.
type Gate struct {
	reached  chan struct{}
	released chan struct{}

	mu       sync.Mutex
	arrivals int
	closed   bool // released is closed
}

// NewGate returns a gate that holds every call entering it until Release.
func NewGate() *Gate {
	return &Gate{reached: make(chan struct{}), released: make(chan struct{})}
}

// Enter is called by the code being held back. It records the arrival and
// blocks until the gate is released or ctx is done, returning ctx.Err() in
// the latter case so that a cancelled caller is never stranded.
func (g *Gate) Enter(ctx context.Context) error {
	g.mu.Lock()
	g.arrivals++
	if g.arrivals == 1 {
		close(g.reached)
	}
	g.mu.Unlock()

	// Check release first: a released gate lets even a cancelled caller
	// through, so the outcome does not depend on select's random choice.
	select {
	case <-g.released:
		return nil
	default:
	}
	select {
	case <-g.released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Reached returns a channel closed when the first call arrives at the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Wait blocks until a call has arrived at the gate or ctx is done.
func (g *Gate) Wait(ctx context.Context) error {
	select {
	case <-g.reached:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release lets every held call through, and every later one. It may be
// called more than once.
func (g *Gate) Release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		close(g.released)
	}
}

// Arrivals reports how many calls have entered the gate so far, held or not.
func (g *Gate) Arrivals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrivals
}

// A Trigger decides which of the matching calls a rule fires on: by default
// the first only. Options change that. A Trigger is not safe for concurrent
// use; the rule sets that own one serialise access to it.
type Trigger struct {
	skip  int
	times int // < 0: no limit
	seen  int
	fired int
}

// An Option shapes a Trigger.
type Option func(*Trigger)

// Skip lets the first n matching calls pass untouched; the rule fires from
// call n+1 on.
func Skip(n int) Option {
	if n < 0 {
		panic("hook: negative Skip")
	}
	return func(t *Trigger) { t.skip = n }
}

// Times makes the rule fire on n matching calls (after any skipped ones)
// instead of one.
func Times(n int) Option {
	if n < 1 {
		panic("hook: Times needs n >= 1")
	}
	return func(t *Trigger) { t.times = n }
}

// Always makes the rule fire on every matching call (after any skipped ones)
// until it is removed.
func Always() Option {
	return func(t *Trigger) { t.times = -1 }
}

// NewTrigger returns a Trigger shaped by opts.
func NewTrigger(opts ...Option) *Trigger {
	t := &Trigger{times: 1}
	for _, o := range opts {
		o(t)
	}
	return t
}

// Next counts one matching call and reports whether the rule fires on it.
func (t *Trigger) Next() bool {
	if t.Done() {
		return false
	}
	t.seen++
	if t.seen <= t.skip {
		return false
	}
	t.fired++
	return true
}

// Fired reports how many calls the rule has fired on.
func (t *Trigger) Fired() int { return t.fired }

// Done reports whether the rule can fire no more.
func (t *Trigger) Done() bool { return t.times >= 0 && t.fired >= t.times }

// Set is a test's collection of rules for named points. It is safe for
// concurrent use.
type Set struct {
	mu     sync.Mutex
	rules  []*setRule
	gates  []*Gate
	counts map[string]int
}

type setRule struct {
	point string
	trig  *Trigger
	fn    func(context.Context) error
}

// NewSet returns an empty Set: every point is a no-op until a rule is added.
func NewSet() *Set {
	return &Set{counts: make(map[string]int)}
}

// Func returns the Func to hand to the code under test.
func (s *Set) Func() Func { return s.call }

// call runs, in registration order, every rule that fires on this call, and
// returns the first error. All firing rules run even after an error so that
// each one observably acts (a Pause registered after a Fail still holds the
// call) and none is silently used up.
func (s *Set) call(ctx context.Context, point string) error {
	s.mu.Lock()
	s.counts[point]++
	var fns []func(context.Context) error
	live := s.rules[:0]
	for _, r := range s.rules {
		if r.point == point && r.trig.Next() {
			fns = append(fns, r.fn)
		}
		if !r.trig.Done() {
			live = append(live, r)
		}
	}
	clear(s.rules[len(live):])
	s.rules = live
	s.mu.Unlock()

	var first error
	for _, fn := range fns {
		if err := fn(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Do runs fn when a call reaches point; a non-nil error from fn is returned
// to the caller.
func (s *Set) Do(point string, fn func(ctx context.Context) error, opts ...Option) {
	s.add(point, fn, nil, opts)
}

func (s *Set) add(point string, fn func(context.Context) error, g *Gate, opts []Option) {
	t := NewTrigger(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if g != nil {
		s.gates = append(s.gates, g)
	}
	s.rules = append(s.rules, &setRule{point: point, trig: t, fn: fn})
}

// Pause holds the matching calls at point until the returned Gate is
// released (or the caller's context is done). With Times or Always, every
// call it fires on waits at the same Gate.
func (s *Set) Pause(point string, opts ...Option) *Gate {
	g := NewGate()
	s.add(point, g.Enter, g, opts)
	return g
}

// Fail makes the matching calls at point return err, simulating a crash at
// that step.
func (s *Set) Fail(point string, err error, opts ...Option) {
	if err == nil {
		panic("hook: Fail with a nil error")
	}
	s.add(point, func(context.Context) error { return err }, nil, opts)
}

// Count reports how many times point has been called, whether or not a rule
// fired.
func (s *Set) Count(point string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[point]
}

// Reset removes every rule and releases every Gate the Set created, so that
// no call stays held after a test ends; tests can defer it or pass it to
// t.Cleanup. Counts are kept.
func (s *Set) Reset() {
	s.mu.Lock()
	gates := s.gates
	s.rules, s.gates = nil, nil
	s.mu.Unlock()
	for _, g := range gates {
		g.Release()
	}
}
