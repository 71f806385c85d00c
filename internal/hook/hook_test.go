package hook

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// guard bounds how long a test may block on a channel, so that a broken
// gate fails the test instead of hanging it.
func guard(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// recv waits for ch or fails the test when ctx expires first.
func recv[T any](t *testing.T, ctx context.Context, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatal("timed out waiting")
		panic("unreachable")
	}
}

// pending fails the test if ch is ready: the call it stands for must still
// be held.
func pending[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("call returned while it should be held")
	default:
	}
}

func TestNilFunc(t *testing.T) {
	var f Func
	if err := f.Call(t.Context(), "x"); err != nil {
		t.Fatalf("nil Func: %v", err)
	}
}

func TestTrigger(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want []bool
	}{
		{"default", nil, []bool{true, false, false}},
		{"skip", []Option{Skip(2)}, []bool{false, false, true, false}},
		{"times", []Option{Times(2)}, []bool{true, true, false, false}},
		{"skip times", []Option{Skip(1), Times(2)}, []bool{false, true, true, false}},
		{"always", []Option{Always()}, []bool{true, true, true, true}},
		{"skip always", []Option{Skip(1), Always()}, []bool{false, true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := NewTrigger(tt.opts...)
			var got []bool
			for range tt.want {
				got = append(got, tr.Next())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("fired %v, want %v", got, tt.want)
			}
			n := 0
			for _, f := range tt.want {
				if f {
					n++
				}
			}
			if tr.Fired() != n {
				t.Errorf("Fired() = %d, want %d", tr.Fired(), n)
			}
		})
	}
}

func TestOptionPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"Times(0)": func() { Times(0) },
		"Skip(-1)": func() { Skip(-1) },
		"Fail nil": func() { NewSet().Fail("p", nil) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("did not panic")
				}
			}()
			f()
		})
	}
}

func TestGate(t *testing.T) {
	ctx := guard(t)
	g := NewGate()
	pending(t, g.Reached())

	done := make(chan error, 1)
	go func() { done <- g.Enter(ctx) }()
	if err := g.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pending(t, done)
	if n := g.Arrivals(); n != 1 {
		t.Errorf("Arrivals() = %d, want 1", n)
	}
	g.Release()
	g.Release() // idempotent
	if err := recv(t, ctx, done); err != nil {
		t.Fatalf("released Enter: %v", err)
	}

	// A released gate lets later calls through, even cancelled ones.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := g.Enter(cctx); err != nil {
		t.Fatalf("Enter on released gate: %v", err)
	}
	if n := g.Arrivals(); n != 2 {
		t.Errorf("Arrivals() = %d, want 2", n)
	}
}

func TestGateCancel(t *testing.T) {
	ctx := guard(t)
	g := NewGate()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Enter(cctx) }()
	recv(t, ctx, g.Reached())
	cancel()
	if err := recv(t, ctx, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Enter = %v, want context.Canceled", err)
	}
}

func TestGateWaitCancel(t *testing.T) {
	g := NewGate()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := g.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

func TestSetPause(t *testing.T) {
	ctx := guard(t)
	s := NewSet()
	f := s.Func()
	g := s.Pause("merge.committed")

	done := make(chan error, 1)
	go func() { done <- f.Call(ctx, "merge.committed") }()
	recv(t, ctx, g.Reached())
	pending(t, done)

	// Other points and, the rule being one-shot, later calls pass.
	if err := f.Call(ctx, "other"); err != nil {
		t.Fatal(err)
	}
	if err := f.Call(ctx, "merge.committed"); err != nil {
		t.Fatal(err)
	}
	pending(t, done)

	g.Release()
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
	if n := s.Count("merge.committed"); n != 2 {
		t.Errorf("Count = %d, want 2", n)
	}
	if n := g.Arrivals(); n != 1 {
		t.Errorf("Arrivals = %d, want 1", n)
	}
}

func TestSetPauseTimes(t *testing.T) {
	ctx := guard(t)
	s := NewSet()
	f := s.Func()
	g := s.Pause("p", Times(2))
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- f.Call(ctx, "p") }()
	}
	recv(t, ctx, g.Reached())
	g.Release()
	for range 2 {
		if err := recv(t, ctx, done); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.Arrivals(); n != 2 {
		t.Errorf("Arrivals = %d, want 2", n)
	}
}

func TestSetPauseCancel(t *testing.T) {
	ctx := guard(t)
	s := NewSet()
	g := s.Pause("p")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Func().Call(cctx, "p") }()
	recv(t, ctx, g.Reached())
	cancel()
	if err := recv(t, ctx, done); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestSetFail(t *testing.T) {
	ctx := t.Context()
	errCrash := errors.New("crash")
	s := NewSet()
	f := s.Func()
	s.Fail("seal", errCrash, Skip(1))

	var got []error
	for range 3 {
		got = append(got, f.Call(ctx, "seal"))
	}
	want := []error{nil, errCrash, nil}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if n := s.Count("seal"); n != 3 {
		t.Errorf("Count = %d, want 3", n)
	}
	if n := s.Count("never"); n != 0 {
		t.Errorf("Count(never) = %d, want 0", n)
	}
}

// All rules firing on a call run in registration order, and the first error
// is returned.
func TestSetOrder(t *testing.T) {
	ctx := t.Context()
	errA, errB := errors.New("a"), errors.New("b")
	s := NewSet()
	var ran []string
	s.Do("p", func(context.Context) error { ran = append(ran, "1"); return nil })
	s.Do("p", func(context.Context) error { ran = append(ran, "2"); return errA })
	s.Do("p", func(context.Context) error { ran = append(ran, "3"); return errB })
	s.Do("q", func(context.Context) error { ran = append(ran, "q"); return nil })

	if err := s.Func().Call(ctx, "p"); err != errA {
		t.Fatalf("got %v, want %v", err, errA)
	}
	if want := []string{"1", "2", "3"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}
	if err := s.Func().Call(ctx, "p"); err != nil {
		t.Fatalf("one-shot rules fired again: %v", err)
	}
}

func TestSetAlwaysAndReset(t *testing.T) {
	ctx := guard(t)
	errCrash := errors.New("crash")
	s := NewSet()
	f := s.Func()
	s.Fail("p", errCrash, Always())
	for range 3 {
		if err := f.Call(ctx, "p"); err != errCrash {
			t.Fatalf("got %v, want %v", err, errCrash)
		}
	}

	g := s.Pause("q")
	done := make(chan error, 1)
	go func() { done <- f.Call(ctx, "q") }()
	recv(t, ctx, g.Reached())

	s.Reset() // removes the Fail rule and releases the held call
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
	if err := f.Call(ctx, "p"); err != nil {
		t.Fatalf("after Reset: %v", err)
	}
	if n := s.Count("p"); n != 4 {
		t.Errorf("Count = %d, want 4 (Reset keeps counts)", n)
	}
}

// Concurrent calls and registrations, for the race detector.
func TestSetConcurrent(t *testing.T) {
	ctx := guard(t)
	s := NewSet()
	f := s.Func()
	errX := errors.New("x")
	s.Fail("p", errX, Times(10))
	const n = 50
	errs := make(chan error, n)
	for i := range n {
		go func() {
			if i%5 == 0 {
				s.Do("q", func(context.Context) error { return nil })
			}
			errs <- f.Call(ctx, "p")
		}()
	}
	failed := 0
	for range n {
		if err := recv(t, ctx, errs); err == errX {
			failed++
		}
	}
	if failed != 10 {
		t.Errorf("%d calls failed, want 10", failed)
	}
	if c := s.Count("p"); c != n {
		t.Errorf("Count = %d, want %d", c, n)
	}
}
