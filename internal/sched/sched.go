// Package sched is the engine's view of concurrency and time: the clock,
// goroutines, one-shot events and timers, and named scheduling points.
//
// Production code runs on Real, which is the Go runtime with nothing added.
// The engine's deterministic simulator runs it on a Sim instead: one
// goroutine at a time, in an order a seed decides, on a clock that moves
// only when the simulator says. For that to be exact, the engine follows
// three rules, which Sim checks where it can:
//
//   - every goroutine is started with Runtime.Go;
//   - every wait for another goroutine is a Wait on Events (never a bare
//     channel, WaitGroup or condition variable), and no mutex is held
//     across a Wait, a Point or a store call;
//   - time comes from Now and After, randomness from Rand, and anything
//     done in sequence over a map is done in sorted order.
package sched

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"reflect"
	"sync"
	"time"
)

// Runtime supplies the engine's clock, goroutines and waits.
type Runtime interface {
	// Now is the current time.
	Now() time.Time
	// Go runs f on a new goroutine.
	Go(f func())
	// NewEvent returns an event that has not fired.
	NewEvent() Event
	// After returns an event that fires once d has passed.
	After(d time.Duration) Event
	// Wait blocks until one of evs has fired or ctx is done, and returns
	// the index of the first fired event in evs order. On a Sim a
	// context's cancellation is only seen when Wait is entered.
	Wait(ctx context.Context, evs ...Event) (int, error)
	// Point is a named scheduling point: a Sim may run other goroutines
	// here. Real does nothing.
	Point(name string)
	// Rand returns 64 random bits (seeded on a Sim).
	Rand() uint64
	// WithTimeout is context.WithTimeout on this runtime's clock.
	WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc)
}

// Event is a one-shot latch: it fires once and stays fired.
type Event interface {
	Fire()
	Fired() bool
}

// Real is the Go runtime.
var Real Runtime = realRuntime{}

type realRuntime struct{}

func (realRuntime) Now() time.Time { return time.Now() }
func (realRuntime) Go(f func())    { go f() }
func (realRuntime) Point(string)   {}

func (realRuntime) Rand() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

func (realRuntime) WithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

type realEvent struct {
	once sync.Once
	ch   chan struct{}
}

func (realRuntime) NewEvent() Event { return &realEvent{ch: make(chan struct{})} }

func (e *realEvent) Fire() { e.once.Do(func() { close(e.ch) }) }

func (e *realEvent) Fired() bool {
	select {
	case <-e.ch:
		return true
	default:
		return false
	}
}

func (r realRuntime) After(d time.Duration) Event {
	e := r.NewEvent()
	time.AfterFunc(d, e.Fire)
	return e
}

func (realRuntime) Wait(ctx context.Context, evs ...Event) (int, error) {
	for i, e := range evs {
		if e.Fired() {
			return i, nil
		}
	}
	switch len(evs) {
	case 1:
		select {
		case <-evs[0].(*realEvent).ch:
			return 0, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	case 2:
		select {
		case <-evs[0].(*realEvent).ch:
			return 0, nil
		case <-evs[1].(*realEvent).ch:
			return 1, nil
		case <-ctx.Done():
			return -1, ctx.Err()
		}
	}
	cases := make([]reflect.SelectCase, 0, len(evs)+1)
	for _, e := range evs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(e.(*realEvent).ch)})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	i, _, _ := reflect.Select(cases)
	if i == len(evs) {
		return -1, ctx.Err()
	}
	for j, e := range evs { // the lowest fired index, as documented
		if e.Fired() {
			return j, nil
		}
	}
	return i, nil
}

// Parallel calls fn(i) for i in [0, n) on at most limit goroutines and
// returns the first error. After an error no new calls start.
func Parallel(ctx context.Context, rt Runtime, n, limit int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return nil
	}
	if n == 1 {
		return fn(ctx, 0)
	}
	workers := min(max(limit, 1), n)
	var (
		mu    sync.Mutex
		next  int
		first error
	)
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if first != nil || next >= n {
			return 0, false
		}
		next++
		return next - 1, true
	}
	done := make([]Event, workers)
	for w := range done {
		done[w] = rt.NewEvent()
		rt.Go(func() {
			defer done[w].Fire()
			for {
				i, ok := take()
				if !ok {
					return
				}
				if err := fn(ctx, i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	for _, e := range done {
		// The workers stop on their own; waiting without ctx keeps their
		// results from outliving the call.
		if _, err := rt.Wait(context.WithoutCancel(ctx), e); err != nil {
			return err
		}
	}
	return first
}

// WithClock returns the Go runtime with its clock replaced by now (timers
// still run on real time): tests that expire leases on a fake clock use it.
func WithClock(now func() time.Time) Runtime { return clockRuntime{now: now} }

type clockRuntime struct {
	realRuntime
	now func() time.Time
}

func (c clockRuntime) Now() time.Time { return c.now() }

// Lock is a mutual-exclusion lock that may be held across waits and store
// calls: waiting for it is a Wait, so a Sim can schedule around it. The
// zero Lock is not usable; use NewLock.
type Lock struct {
	rt   Runtime
	mu   sync.Mutex
	held bool
	free Event // fired when the lock is released; replaced on each hold
}

// NewLock returns an unlocked Lock on rt.
func NewLock(rt Runtime) *Lock { return &Lock{rt: rt} }

// Lock takes the lock, waiting while another holder has it.
func (l *Lock) Lock(ctx context.Context) error {
	for {
		l.mu.Lock()
		if !l.held {
			l.held = true
			l.free = l.rt.NewEvent()
			l.mu.Unlock()
			return nil
		}
		free := l.free
		l.mu.Unlock()
		if _, err := l.rt.Wait(ctx, free); err != nil {
			return err
		}
	}
}

// TryLock takes the lock if it is free.
func (l *Lock) TryLock() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held {
		return false
	}
	l.held = true
	l.free = l.rt.NewEvent()
	return true
}

// Unlock releases the lock.
func (l *Lock) Unlock() {
	l.mu.Lock()
	l.held = false
	free := l.free
	l.mu.Unlock()
	free.Fire()
}
