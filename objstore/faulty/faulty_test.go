package faulty

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

var errBoom = errors.New("boom")

// setup returns a faulty bucket over a fresh memory bucket, and that memory
// bucket for looking behind the faults. Every gate is released at cleanup.
func setup(t *testing.T) (*Bucket, *memory.Bucket) {
	t.Helper()
	mem := memory.New()
	fb := New(mem)
	t.Cleanup(fb.Reset)
	return fb, mem
}

// guard bounds how long a test may block on a channel, so that a broken
// gate fails the test instead of hanging it.
func guard(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

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
// be held at its gate.
func pending[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	select {
	case <-ch:
		t.Fatal("call returned while it should be paused")
	default:
	}
}

func put(t *testing.T, b objstore.Bucket, key, data string) {
	t.Helper()
	if _, err := b.Put(t.Context(), key, strings.NewReader(data), objstore.PutOptions{Size: int64(len(data))}); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func get(t *testing.T, b objstore.Bucket, key string) string {
	t.Helper()
	data, _, err := objstore.ReadAll(t.Context(), b, key, 1<<20)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(data)
}

func exists(t *testing.T, b objstore.Bucket, key string) bool {
	t.Helper()
	_, err := b.Head(t.Context(), key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

func TestPassThrough(t *testing.T) {
	ctx := t.Context()
	fb, _ := setup(t)
	put(t, fb, "a/1", "one")
	put(t, fb, "a/2", "two")
	put(t, fb, "b/3", "three")

	if got := get(t, fb, "a/1"); got != "one" {
		t.Errorf("get = %q", got)
	}
	rc, err := fb.GetRange(ctx, "b/3", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(rc)
	rc.Close()
	if string(data) != "hre" {
		t.Errorf("getrange = %q", data)
	}
	a, err := fb.Head(ctx, "a/2")
	if err != nil || a.Size != 3 || a.Key != "a/2" {
		t.Errorf("head = %+v, %v", a, err)
	}
	var keys []string
	err = fb.List(ctx, "a/", objstore.ListOptions{}, func(e objstore.Entry) error {
		keys = append(keys, e.Key)
		return nil
	})
	if err != nil || !slices.Equal(keys, []string{"a/1", "a/2"}) {
		t.Errorf("list = %v, %v", keys, err)
	}
	if err := fb.Delete(ctx, "a/1"); err != nil {
		t.Fatal(err)
	}
	if err := fb.DeleteMany(ctx, []string{"a/2", "b/3"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := fb.Get(ctx, "a/1"); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("get deleted = %v, want ErrNotFound", err)
	}
	if _, err := fb.GetRange(ctx, "b/3", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("getrange deleted = %v, want ErrNotFound", err)
	}
	// Inner errors pass through untouched.
	_, err = fb.Put(ctx, "b/3", strings.NewReader("x"), objstore.PutOptions{IfMatch: `"nope"`})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Errorf("conditional put = %v, want ErrPrecondition", err)
	}
}

func TestPauseBefore(t *testing.T) {
	ctx := guard(t)
	fb, mem := setup(t)
	gate := fb.Pause(OpPut, Before, Key("k"))

	done := make(chan error, 1)
	go func() {
		_, err := fb.Put(ctx, "k", strings.NewReader("v"), objstore.PutOptions{})
		done <- err
	}()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pending(t, done)
	if exists(t, mem, "k") {
		t.Fatal("put paused before the inner call reached it")
	}
	// Other keys are not paused.
	put(t, fb, "other", "x")

	gate.Release()
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
	if got := get(t, mem, "k"); got != "v" {
		t.Errorf("after release: %q", got)
	}
	// The rule was one-shot.
	put(t, fb, "k", "w")
	if n := gate.Arrivals(); n != 1 {
		t.Errorf("Arrivals = %d, want 1", n)
	}
}

func TestPauseAfter(t *testing.T) {
	ctx := guard(t)
	fb, mem := setup(t)
	gate := fb.Pause(OpDelete, After, KeyPrefix("gen/"))
	put(t, mem, "gen/1", "x")

	done := make(chan error, 1)
	go func() { done <- fb.Delete(ctx, "gen/1") }()
	recv(t, ctx, gate.Reached())
	pending(t, done)
	if exists(t, mem, "gen/1") {
		t.Fatal("delete paused after the inner call, yet the object is still there")
	}
	gate.Release()
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
}

func TestPauseOpened(t *testing.T) {
	ctx := guard(t)
	fb, mem := setup(t)
	put(t, mem, "seg", "0123456789")
	gate := fb.Pause(OpGetRange, Opened, Key("seg"))

	type result struct {
		data string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		rc, err := fb.GetRange(ctx, "seg", 2, 4)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer rc.Close()
		data, err := io.ReadAll(rc)
		done <- result{string(data), err}
	}()
	recv(t, ctx, gate.Reached())
	pending(t, done)
	// The body is open: a reclaim now deletes the object under it.
	if err := mem.Delete(ctx, "seg"); err != nil {
		t.Fatal(err)
	}
	gate.Release()
	r := recv(t, ctx, done)
	if r.err != nil || r.data != "2345" {
		t.Fatalf("read = %q, %v; want the snapshot %q", r.data, r.err, "2345")
	}
}

// A failed open never reaches Opened, so the pause waits for one that
// succeeds.
func TestOpenedSkipsFailedOpen(t *testing.T) {
	ctx := guard(t)
	fb, mem := setup(t)
	gate := fb.Pause(OpGet, Opened, AnyKey)
	if _, _, err := fb.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get missing = %v", err)
	}
	if gate.Arrivals() != 0 {
		t.Fatal("a failed open reached Opened")
	}
	put(t, mem, "k", "v")
	done := make(chan error, 1)
	go func() {
		rc, _, err := fb.Get(ctx, "k")
		if err == nil {
			rc.Close()
		}
		done <- err
	}()
	recv(t, ctx, gate.Reached())
	gate.Release()
	if err := recv(t, ctx, done); err != nil {
		t.Fatal(err)
	}
}

func TestPauseCancel(t *testing.T) {
	for _, pt := range []Point{Before, After} {
		t.Run(string(pt), func(t *testing.T) {
			ctx := guard(t)
			fb, mem := setup(t)
			gate := fb.Pause(OpPut, pt, AnyKey)
			cctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				_, err := fb.Put(cctx, "k", strings.NewReader("v"), objstore.PutOptions{})
				done <- err
			}()
			recv(t, ctx, gate.Reached())
			cancel()
			if err := recv(t, ctx, done); !errors.Is(err, context.Canceled) {
				t.Fatalf("got %v, want context.Canceled", err)
			}
			// Paused before, the put never happened; paused after, it did.
			if got, want := exists(t, mem, "k"), pt == After; got != want {
				t.Errorf("object exists = %v, want %v", got, want)
			}
		})
	}
}

func TestPauseOpenedCancelClosesBody(t *testing.T) {
	ctx := guard(t)
	fb, mem := setup(t)
	put(t, mem, "k", "v")
	gate := fb.Pause(OpGet, Opened, AnyKey)
	cctx, cancel := context.WithCancel(ctx)
	type result struct {
		rc  io.ReadCloser
		err error
	}
	done := make(chan result, 1)
	go func() {
		rc, _, err := fb.Get(cctx, "k")
		done <- result{rc, err}
	}()
	recv(t, ctx, gate.Reached())
	cancel()
	r := recv(t, ctx, done)
	if !errors.Is(r.err, context.Canceled) || r.rc != nil {
		t.Fatalf("got %v, %v; want nil body and context.Canceled", r.rc, r.err)
	}
}

func TestPauseTimesSharesGate(t *testing.T) {
	ctx := guard(t)
	fb, _ := setup(t)
	gate := fb.Pause(OpHead, Before, AnyKey, Times(2))
	done := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := fb.Head(ctx, "k")
			done <- err
		}()
	}
	recv(t, ctx, gate.Reached())
	pending(t, done)
	gate.Release()
	for range 2 {
		if err := recv(t, ctx, done); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("got %v, want ErrNotFound from the inner bucket", err)
		}
	}
	if n := gate.Arrivals(); n != 2 {
		t.Errorf("Arrivals = %d, want 2", n)
	}
}

// Skip pauses a later call while earlier ones pass: the way to hold the
// second of two racing calls.
func TestPauseSkip(t *testing.T) {
	ctx := guard(t)
	fb, _ := setup(t)
	gate := fb.Pause(OpHead, Before, AnyKey, Skip(1))
	if _, err := fb.Head(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	pending(t, gate.Reached())
	done := make(chan error, 1)
	go func() {
		_, err := fb.Head(ctx, "k")
		done <- err
	}()
	recv(t, ctx, gate.Reached())
	gate.Release()
	recv(t, ctx, done)
}

func TestFailNth(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, fb, "unrelated", "x") // before registration: not counted
	r := fb.FailNth(OpPut, 3, KeyPrefix("m/"), errBoom)

	var errs []error
	for i := range 5 {
		put(t, fb, "other", "x") // does not match
		key := "m/" + string(rune('a'+i))
		_, err := fb.Put(ctx, key, strings.NewReader("v"), objstore.PutOptions{})
		errs = append(errs, err)
	}
	want := []error{nil, nil, errBoom, nil, nil}
	if !slices.Equal(errs, want) {
		t.Fatalf("errors = %v, want %v", errs, want)
	}
	if exists(t, mem, "m/c") {
		t.Error("the failed put reached the inner bucket")
	}
	if n := r.Fired(); n != 1 {
		t.Errorf("Fired = %d, want 1", n)
	}
}

func TestFailTimesAlwaysRemove(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, mem, "k", "v")
	head := func() error { _, err := fb.Head(ctx, "k"); return err }

	fb.Fail(OpHead, AnyKey, errBoom)
	if err := head(); err != errBoom {
		t.Fatalf("first = %v", err)
	}
	if err := head(); err != nil {
		t.Fatalf("default is one-shot, got %v", err)
	}

	fb.Fail(OpHead, AnyKey, errBoom, Times(2))
	for i := range 2 {
		if err := head(); err != errBoom {
			t.Fatalf("Times(2) call %d = %v", i, err)
		}
	}
	if err := head(); err != nil {
		t.Fatalf("after Times(2): %v", err)
	}

	r := fb.Fail(OpAny, AnyKey, objstore.ErrThrottled, Always())
	for range 3 {
		if err := head(); !errors.Is(err, objstore.ErrThrottled) {
			t.Fatalf("Always = %v", err)
		}
	}
	if err := fb.Delete(ctx, "k"); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("OpAny did not match delete: %v", err)
	}
	if n := r.Fired(); n != 4 {
		t.Errorf("Fired = %d, want 4", n)
	}
	r.Remove()
	r.Remove()
	if err := head(); err != nil {
		t.Fatalf("after Remove: %v", err)
	}
}

func TestLoseResponse(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, mem, "manifest/1", "old")
	r := fb.LoseResponse(OpPut, KeyPrefix("manifest/"), objstore.ErrThrottled)

	// A put the inner bucket refuses is not the one whose response is lost.
	_, err := fb.Put(ctx, "manifest/1", strings.NewReader("new"), objstore.PutOptions{IfNotExists: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("conflicting put = %v, want ErrPrecondition", err)
	}
	if r.Fired() != 0 {
		t.Fatal("rule fired on a failed put")
	}

	a, err := fb.Put(ctx, "manifest/2", strings.NewReader("v2"), objstore.PutOptions{IfNotExists: true})
	if !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("put = %v, want the lost-response error", err)
	}
	if a.ETag != "" {
		t.Errorf("caller saw attrs %+v along with the error", a)
	}
	if got := get(t, mem, "manifest/2"); got != "v2" {
		t.Fatalf("inner object = %q, want it written", got)
	}
	// The retry of a create-if-absent then finds its own object.
	_, err = fb.Put(ctx, "manifest/2", strings.NewReader("v2"), objstore.PutOptions{IfNotExists: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("retry = %v, want ErrPrecondition", err)
	}
	if r.Fired() != 1 {
		t.Fatalf("Fired = %d, want 1", r.Fired())
	}
}

func TestLoseResponseGetClosesBody(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, mem, "k", "v")
	fb.LoseResponse(OpGet, AnyKey, errBoom)
	rc, a, err := fb.Get(ctx, "k")
	if err != errBoom || rc != nil || a.Size != 0 {
		t.Fatalf("got %v, %+v, %v; want nil, zero, errBoom", rc, a, err)
	}
}

func TestDeleteWhileOpen(t *testing.T) {
	ctx := t.Context()
	for _, op := range []Op{OpGet, OpGetRange} {
		t.Run(string(op), func(t *testing.T) {
			fb, mem := setup(t)
			put(t, mem, "wal/0/seg", "payload")
			r := fb.DeleteWhileOpen(op, KeyContains("/seg"))

			var rc io.ReadCloser
			var err error
			if op == OpGet {
				rc, _, err = fb.Get(ctx, "wal/0/seg")
			} else {
				rc, err = fb.GetRange(ctx, "wal/0/seg", 0, -1)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if exists(t, mem, "wal/0/seg") {
				t.Fatal("object still there after the open")
			}
			// Later reads of the key find it gone...
			if _, err := fb.GetRange(ctx, "wal/0/seg", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("later getrange = %v, want ErrNotFound", err)
			}
			// ...while the open body still reads its snapshot.
			data, err := io.ReadAll(rc)
			if err != nil || string(data) != "payload" {
				t.Fatalf("open body = %q, %v", data, err)
			}
			if r.Fired() != 1 {
				t.Errorf("Fired = %d, want 1", r.Fired())
			}
		})
	}
}

func TestFailRead(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, mem, "payload", "0123456789")
	fb.FailRead(OpGetRange, AnyKey, 4, objstore.ErrNotFound)

	rc, err := fb.GetRange(ctx, "payload", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if string(data) != "0123" || !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("read %q, %v; want %q then ErrNotFound", data, err, "0123")
	}

	// One-shot: the next body reads in full.
	rc, err = fb.GetRange(ctx, "payload", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	data, err = io.ReadAll(rc)
	rc.Close()
	if string(data) != "0123456789" || err != nil {
		t.Fatalf("read %q, %v", data, err)
	}
}

// A body shorter than the failure offset ends normally.
func TestFailReadShortBody(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	put(t, mem, "k", "abc")
	fb.FailRead(OpGet, AnyKey, 10, errBoom)
	rc, _, err := fb.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if data, err := io.ReadAll(rc); string(data) != "abc" || err != nil {
		t.Fatalf("read %q, %v", data, err)
	}
}

func TestLatencyDeadline(t *testing.T) {
	fb, mem := setup(t)
	r := fb.Latency(OpPut, AnyKey, time.Hour)
	ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
	defer cancel()
	_, err := fb.Put(ctx, "k", strings.NewReader("v"), objstore.PutOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if exists(t, mem, "k") {
		t.Error("the delayed put reached the inner bucket")
	}
	if r.Fired() != 1 {
		t.Errorf("Fired = %d, want 1", r.Fired())
	}
}

func TestLatencyElapses(t *testing.T) {
	fb, mem := setup(t)
	fb.Latency(OpPut, AnyKey, time.Nanosecond)
	put(t, fb, "k", "v")
	if !exists(t, mem, "k") {
		t.Error("put did not happen after its latency")
	}
}

func TestHook(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)

	// At Before, an error keeps the inner bucket from being called.
	var seen []string
	fb.Hook(OpPut, Before, KeyPrefix("a/"), func(_ context.Context, key string) error {
		seen = append(seen, key)
		return errBoom
	})
	if _, err := fb.Put(ctx, "a/1", strings.NewReader("v"), objstore.PutOptions{}); err != errBoom {
		t.Fatalf("put = %v", err)
	}
	if exists(t, mem, "a/1") {
		t.Error("inner put ran despite a Before error")
	}

	// At After, the inner effect stands.
	fb.Hook(OpDelete, After, AnyKey, func(_ context.Context, key string) error {
		seen = append(seen, key)
		return errBoom
	})
	put(t, mem, "b/1", "v")
	if err := fb.Delete(ctx, "b/1"); err != errBoom {
		t.Fatalf("delete = %v", err)
	}
	if exists(t, mem, "b/1") {
		t.Error("inner delete did not run")
	}

	// DeleteMany matches on any key and is given the first that matched;
	// List matches on its prefix.
	fb.Hook(OpDeleteMany, Before, KeyPrefix("c/"), func(_ context.Context, key string) error {
		seen = append(seen, key)
		return nil
	})
	fb.Hook(OpList, After, KeyPrefix("d/"), func(_ context.Context, key string) error {
		seen = append(seen, key)
		return nil
	})
	if err := fb.DeleteMany(ctx, []string{"x/1", "c/2", "c/3"}); err != nil {
		t.Fatal(err)
	}
	if err := fb.List(ctx, "x/", objstore.ListOptions{}, func(objstore.Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := fb.List(ctx, "d/e/", objstore.ListOptions{}, func(objstore.Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/1", "b/1", "c/2", "d/e/"}; !slices.Equal(seen, want) {
		t.Errorf("hooks saw %v, want %v", seen, want)
	}
}

// Rules firing on the same call run in registration order and the first
// error wins; each counts the calls it matches from its own registration.
func TestRuleOrder(t *testing.T) {
	ctx := t.Context()
	fb, _ := setup(t)
	var ran []string
	hook := func(name string, err error) func(context.Context, string) error {
		return func(context.Context, string) error {
			ran = append(ran, name)
			return err
		}
	}
	errA := errors.New("a")
	fb.Hook(OpHead, Before, AnyKey, hook("1", nil))
	fb.Hook(OpHead, Before, AnyKey, hook("2", errA))
	fb.Hook(OpHead, Before, AnyKey, hook("3", errBoom))
	fb.Hook(OpHead, After, AnyKey, hook("after", nil))
	if _, err := fb.Head(ctx, "k"); err != errA {
		t.Fatalf("head = %v, want %v", err, errA)
	}
	if want := []string{"1", "2", "3"}; !slices.Equal(ran, want) {
		t.Fatalf("ran %v, want %v", ran, want)
	}

	// Two FailNth rules each count every matching call.
	fb.FailNth(OpHead, 1, AnyKey, errA)
	fb.FailNth(OpHead, 2, AnyKey, errBoom)
	var errs []error
	for range 3 {
		_, err := fb.Head(ctx, "k")
		errs = append(errs, err)
	}
	if errs[0] != errA || errs[1] != errBoom || !errors.Is(errs[2], objstore.ErrNotFound) {
		t.Fatalf("errors = %v", errs)
	}
}

func TestCalls(t *testing.T) {
	ctx := t.Context()
	fb, _ := setup(t)
	fb.Fail(OpPut, Key("p/2"), errBoom)
	put(t, fb, "p/1", "v")
	fb.Put(ctx, "p/2", strings.NewReader("v"), objstore.PutOptions{}) // fails, still counted
	put(t, fb, "q/1", "v")
	fb.Head(ctx, "p/1")
	fb.DeleteMany(ctx, []string{"p/1", "p/2", "q/1"})
	fb.DeleteMany(ctx, nil)
	fb.List(ctx, "p/", objstore.ListOptions{}, func(objstore.Entry) error { return nil })

	tests := []struct {
		op   Op
		m    Match
		want int
	}{
		{OpPut, AnyKey, 3},
		{OpPut, KeyPrefix("p/"), 2},
		{OpPut, Key("p/2"), 1},
		{OpPut, KeyFunc(func(k string) bool { return strings.HasSuffix(k, "/1") }), 2},
		{OpHead, AnyKey, 1},
		{OpGet, AnyKey, 0},
		{OpDeleteMany, AnyKey, 2}, // calls, not keys
		{OpDeleteMany, KeyPrefix("p/"), 1},
		{OpDeleteMany, KeyContains("q"), 1},
		{OpList, KeyPrefix("p"), 1},
		{OpAny, AnyKey, 7},
		{OpAny, KeyPrefix("q/"), 2},
	}
	for _, tt := range tests {
		if got := fb.CallsMatching(tt.op, tt.m); got != tt.want {
			t.Errorf("CallsMatching(%s, ...) = %d, want %d", tt.op, got, tt.want)
		}
	}
	if got := fb.Calls(OpPut); got != 3 {
		t.Errorf("Calls(put) = %d, want 3", got)
	}
	fb.Reset()
	if got := fb.Calls(OpAny); got != 7 {
		t.Errorf("after Reset Calls = %d, want 7 (counts are kept)", got)
	}
}

func TestReset(t *testing.T) {
	ctx := guard(t)
	fb, _ := setup(t)
	fb.Fail(OpHead, AnyKey, errBoom, Always())
	fb.Latency(OpDelete, AnyKey, time.Hour, Always())
	gate := fb.Pause(OpPut, Before, AnyKey)
	done := make(chan error, 1)
	go func() {
		_, err := fb.Put(ctx, "k", strings.NewReader("v"), objstore.PutOptions{})
		done <- err
	}()
	recv(t, ctx, gate.Reached())

	fb.Reset()
	if err := recv(t, ctx, done); err != nil {
		t.Fatalf("paused put after Reset: %v", err)
	}
	if _, err := fb.Head(ctx, "k"); err != nil {
		t.Fatalf("head after Reset: %v", err)
	}
	if err := fb.Delete(ctx, "k"); err != nil {
		t.Fatalf("delete after Reset: %v", err)
	}
}

func TestOpenedPanicsForOtherOps(t *testing.T) {
	fb, _ := setup(t)
	defer func() {
		if recover() == nil {
			t.Error("Pause(put, Opened) did not panic")
		}
	}()
	fb.Pause(OpPut, Opened, AnyKey)
}

// Concurrent calls, registrations and removals, for the race detector.
func TestConcurrent(t *testing.T) {
	ctx := guard(t)
	fb, _ := setup(t)
	fb.Fail(OpPut, KeyPrefix("k"), errBoom, Times(10))
	const n = 64
	errs := make(chan error, n)
	for i := range n {
		go func() {
			if i%8 == 0 {
				fb.Hook(OpHead, Before, AnyKey, func(context.Context, string) error { return nil }).Remove()
			}
			_, err := fb.Put(ctx, "k"+string(rune('a'+i%26)), strings.NewReader("v"), objstore.PutOptions{})
			errs <- err
		}()
	}
	failed := 0
	for range n {
		switch err := recv(t, ctx, errs); err {
		case nil:
		case errBoom:
			failed++
		default:
			t.Fatal(err)
		}
	}
	if failed != 10 {
		t.Errorf("%d puts failed, want 10", failed)
	}
	if got := fb.Calls(OpPut); got != n {
		t.Errorf("Calls = %d, want %d", got, n)
	}
}
