package cache

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// waitFor yields until cond holds. Tests use it to wait for goroutines to
// reach a point that Stats makes observable, instead of sleeping.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for !cond() {
		runtime.Gosched()
	}
}

func mustGet[K comparable, V comparable](t *testing.T, c *Cache[K, V], key K, want V) {
	t.Helper()
	got, ok := c.Get(key)
	if !ok || got != want {
		t.Fatalf("Get(%v) = %v, %v; want %v, true", key, got, ok, want)
	}
}

func mustMiss[K comparable, V any](t *testing.T, c *Cache[K, V], key K) {
	t.Helper()
	if got, ok := c.Get(key); ok {
		t.Fatalf("Get(%v) = %v, true; want a miss", key, got)
	}
}

func TestByteBound(t *testing.T) {
	const maxBytes = 1000
	c := New[int, int](maxBytes)
	var added int
	for i := range 10000 {
		size := int64(i*37%200 + 1)
		c.Add(i, i, size)
		added++
		if b := c.Bytes(); b > maxBytes {
			t.Fatalf("after Add %d: Bytes() = %d > %d", i, b, maxBytes)
		}
	}
	s := c.Stats()
	if int(s.Evictions)+s.Entries != added {
		t.Errorf("Evictions %d + Entries %d != %d added", s.Evictions, s.Entries, added)
	}
	// Bytes is exactly the sum of what is still cached.
	var sum int64
	for i := range 10000 {
		if v, ok := c.Get(i); ok {
			if v != i {
				t.Fatalf("Get(%d) = %d", i, v)
			}
			sum += int64(i*37%200 + 1)
		}
	}
	if sum != s.Bytes {
		t.Errorf("Bytes = %d; sum of cached sizes = %d", s.Bytes, sum)
	}
	// The most recent entry is always cached.
	mustGet(t, c, 9999, 9999)
}

func TestLRUOrder(t *testing.T) {
	c := New[string, int](3)
	c.Add("a", 1, 1)
	c.Add("b", 2, 1)
	c.Add("c", 3, 1)
	mustGet(t, c, "a", 1) // a is now the most recently used; b the least
	c.Add("d", 4, 1)
	mustMiss(t, c, "b")
	mustGet(t, c, "a", 1)
	mustGet(t, c, "c", 3)
	mustGet(t, c, "d", 4)

	// One large entry evicts as many of the oldest as needed, and no more.
	c.Add("e", 5, 2) // order was a, c, d (oldest first)
	mustMiss(t, c, "a")
	mustMiss(t, c, "c")
	mustGet(t, c, "d", 4)
	mustGet(t, c, "e", 5)
	if b := c.Bytes(); b != 3 {
		t.Errorf("Bytes() = %d; want 3", b)
	}
}

func TestReplace(t *testing.T) {
	var evicted []string
	c := New(10, WithOnEvict(func(k string, v int) { evicted = append(evicted, fmt.Sprint(k, v)) }))
	c.Add("a", 1, 4)
	c.Add("b", 2, 4)
	c.Add("a", 10, 7) // replaces a, then b must go to fit
	mustGet(t, c, "a", 10)
	mustMiss(t, c, "b")
	if got, want := c.Bytes(), int64(7); got != want {
		t.Errorf("Bytes() = %d; want %d", got, want)
	}
	if want := []string{"a1", "b2"}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v; want %v", evicted, want)
	}
	if s := c.Stats(); s.Evictions != 1 {
		t.Errorf("Evictions = %d; want 1 (a replacement is not an eviction)", s.Evictions)
	}
}

func TestOversized(t *testing.T) {
	var evicted []string
	c := New(10, WithOnEvict(func(k string, v int) { evicted = append(evicted, k) }))
	c.Add("a", 1, 4)
	c.Add("b", 2, 4)
	c.Add("big", 3, 11)
	mustMiss(t, c, "big")
	mustGet(t, c, "a", 1)
	mustGet(t, c, "b", 2)
	if s := c.Stats(); s.Evictions != 0 || s.Bytes != 8 || s.Entries != 2 {
		t.Errorf("after oversized Add: %+v", s)
	}
	if len(evicted) != 0 {
		t.Errorf("oversized Add evicted %v", evicted)
	}

	// An oversized value for a cached key drops the stale value only.
	c.Add("a", 100, 11)
	mustMiss(t, c, "a")
	mustGet(t, c, "b", 2)
	if want := []string{"a"}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v; want %v", evicted, want)
	}

	// Exactly the bound fits, evicting everything else.
	c.Add("full", 4, 10)
	mustGet(t, c, "full", 4)
	mustMiss(t, c, "b")
	if b := c.Bytes(); b != 10 {
		t.Errorf("Bytes() = %d; want 10", b)
	}
}

func TestMinimumSize(t *testing.T) {
	c := New[int, int](5)
	for i := range 100 {
		c.Add(i, i, 0) // charged one byte each, so at most 5 entries
	}
	c.Add(100, 100, -7)
	if n, b := c.Len(), c.Bytes(); n != 5 || b != 5 {
		t.Errorf("Len() = %d, Bytes() = %d; want 5, 5", n, b)
	}
	mustGet(t, c, 100, 100)
}

func TestRemove(t *testing.T) {
	var evicted []string
	c := New(10, WithOnEvict(func(k string, v int) { evicted = append(evicted, k) }))
	c.Add("a", 1, 3)
	c.Add("b", 2, 3)
	c.Remove("a")
	mustMiss(t, c, "a")
	mustGet(t, c, "b", 2)
	c.Remove("absent")
	if n, b := c.Len(), c.Bytes(); n != 1 || b != 3 {
		t.Errorf("Len() = %d, Bytes() = %d; want 1, 3", n, b)
	}
	if want := []string{"a"}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v; want %v", evicted, want)
	}
	if s := c.Stats(); s.Evictions != 0 {
		t.Errorf("Evictions = %d; Remove is not an eviction", s.Evictions)
	}
}

func TestPurge(t *testing.T) {
	var evicted []string
	c := New(10, WithOnEvict(func(k string, v int) { evicted = append(evicted, k) }))
	c.Add("a", 1, 3)
	c.Add("b", 2, 3)
	c.Purge()
	if n, b := c.Len(), c.Bytes(); n != 0 || b != 0 {
		t.Errorf("Len() = %d, Bytes() = %d after Purge", n, b)
	}
	slices.Sort(evicted)
	if want := []string{"a", "b"}; !slices.Equal(evicted, want) {
		t.Errorf("evicted %v; want %v", evicted, want)
	}
	c.Add("c", 3, 10)
	mustGet(t, c, "c", 3)
}

// The eviction callback runs outside the lock, so it may use the cache.
func TestOnEvictReentrant(t *testing.T) {
	var c *Cache[string, int]
	c = New(2, WithOnEvict(func(k string, v int) {
		if k != "graveyard" {
			c.Remove("graveyard")
			c.Stats()
		}
	}))
	c.Add("graveyard", 0, 1)
	c.Add("a", 1, 1)
	c.Add("b", 2, 1) // evicts graveyard
	c.Remove("a")
	mustGet(t, c, "b", 2)
}

func TestDisabled(t *testing.T) {
	for _, maxBytes := range []int64{0, -1} {
		t.Run(fmt.Sprint(maxBytes), func(t *testing.T) {
			evictions := 0
			c := New(maxBytes, WithOnEvict(func(string, int) { evictions++ }))
			c.Add("a", 1, 1)
			mustMiss(t, c, "a")
			var loads int
			load := func(context.Context) (int, int64, error) { loads++; return 7, 1, nil }
			for range 2 {
				v, err := c.GetOrLoad(t.Context(), "a", load)
				if v != 7 || err != nil {
					t.Fatalf("GetOrLoad = %d, %v", v, err)
				}
			}
			if loads != 2 {
				t.Errorf("load called %d times; want 2 (nothing is cached)", loads)
			}
			want := Stats{Misses: 3, Loads: 2}
			if s := c.Stats(); s != want {
				t.Errorf("Stats() = %+v; want %+v", s, want)
			}
			if evictions != 0 {
				t.Errorf("onEvict called %d times for values never held", evictions)
			}
		})
	}
}

// dedup starts n concurrent GetOrLoad calls for one key whose load blocks
// until release is closed, and waits until all of them have joined the load.
func dedup(t *testing.T, c *Cache[string, int], n int, load func(context.Context) (int, int64, error)) <-chan result {
	t.Helper()
	results := make(chan result, n)
	before := c.Stats().Misses
	for range n {
		go func() {
			v, err := c.GetOrLoad(t.Context(), "k", load)
			results <- result{v, err}
		}()
	}
	// Each caller counts its miss under the same lock with which it joins
	// the load, so once all misses are counted all callers share the load.
	waitFor(t, func() bool { return c.Stats().Misses == before+uint64(n) })
	return results
}

type result struct {
	v   int
	err error
}

func TestGetOrLoadDedup(t *testing.T) {
	for _, maxBytes := range []int64{100, 0} {
		t.Run(fmt.Sprint("maxBytes=", maxBytes), func(t *testing.T) {
			const n = 32
			c := New[string, int](maxBytes)
			release := make(chan struct{})
			var loads atomic.Int32
			load := func(context.Context) (int, int64, error) {
				loads.Add(1)
				<-release
				return 42, 8, nil
			}
			results := dedup(t, c, n, load)
			close(release)
			for range n {
				if r := <-results; r.v != 42 || r.err != nil {
					t.Errorf("GetOrLoad = %d, %v; want 42, nil", r.v, r.err)
				}
			}
			if got := loads.Load(); got != 1 {
				t.Errorf("load called %d times; want 1", got)
			}
			want := Stats{Misses: n, Loads: 1, Bytes: 8, Entries: 1, MaxBytes: maxBytes}
			if maxBytes == 0 {
				want.Bytes, want.Entries = 0, 0
			}
			if s := c.Stats(); s != want {
				t.Errorf("Stats() = %+v; want %+v", s, want)
			}
		})
	}
}

func TestGetOrLoadErrorNotCached(t *testing.T) {
	c := New[string, int](100)
	errBoom := errors.New("boom")
	release := make(chan struct{})
	var loads atomic.Int32
	results := dedup(t, c, 4, func(context.Context) (int, int64, error) {
		loads.Add(1)
		<-release
		return 0, 0, errBoom
	})
	close(release)
	for range 4 {
		if r := <-results; !errors.Is(r.err, errBoom) {
			t.Errorf("GetOrLoad error = %v; want %v", r.err, errBoom)
		}
	}
	mustMiss(t, c, "k")

	v, err := c.GetOrLoad(t.Context(), "k", func(context.Context) (int, int64, error) {
		loads.Add(1)
		return 5, 1, nil
	})
	if v != 5 || err != nil {
		t.Fatalf("GetOrLoad after error = %d, %v; want 5, nil", v, err)
	}
	if got := loads.Load(); got != 2 {
		t.Errorf("load called %d times; want 2", got)
	}
	want := Stats{Misses: 6, Loads: 2, LoadErrors: 1, Bytes: 1, Entries: 1, MaxBytes: 100}
	if s := c.Stats(); s != want {
		t.Errorf("Stats() = %+v; want %+v", s, want)
	}
}

type ctxKey struct{}

func TestGetOrLoadCancelledCaller(t *testing.T) {
	c := New[string, int](100)
	release := make(chan struct{})
	started := make(chan struct{})
	loadDone := make(chan error, 1)
	load := func(ctx context.Context) (int, int64, error) {
		close(started)
		<-release
		if ctx.Value(ctxKey{}) != "first" {
			loadDone <- errors.New("load context lost the first caller's values")
		} else {
			loadDone <- ctx.Err()
		}
		return 42, 1, nil
	}

	// The first caller starts the load, then gives up.
	first, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "first"))
	firstResult := make(chan result, 1)
	go func() {
		v, err := c.GetOrLoad(first, "k", load)
		firstResult <- result{v, err}
	}()
	<-started
	others := dedup(t, c, 3, load)

	cancel()
	// The load is still blocked, so the first caller can only be returning
	// because of its own cancellation.
	if r := <-firstResult; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled caller: GetOrLoad = %d, %v; want context.Canceled", r.v, r.err)
	}

	close(release)
	for range 3 {
		if r := <-others; r.v != 42 || r.err != nil {
			t.Errorf("other caller: GetOrLoad = %d, %v; want 42, nil", r.v, r.err)
		}
	}
	if err := <-loadDone; err != nil {
		t.Errorf("load context: %v", err)
	}
	mustGet(t, c, "k", 42)
	want := Stats{Hits: 1, Misses: 4, Loads: 1, Bytes: 1, Entries: 1, MaxBytes: 100}
	if s := c.Stats(); s != want {
		t.Errorf("Stats() = %+v; want %+v", s, want)
	}
}

func TestGetOrLoadDoneContext(t *testing.T) {
	c := New[string, int](100)
	c.Add("cached", 1, 1)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	load := func(context.Context) (int, int64, error) {
		t.Error("load called for a caller whose context is done")
		return 0, 0, nil
	}
	// A hit costs nothing, so it is answered.
	if v, err := c.GetOrLoad(ctx, "cached", load); v != 1 || err != nil {
		t.Errorf("GetOrLoad hit = %d, %v; want 1, nil", v, err)
	}
	// A miss does not start a load.
	if _, err := c.GetOrLoad(ctx, "k", load); !errors.Is(err, context.Canceled) {
		t.Errorf("GetOrLoad miss = %v; want context.Canceled", err)
	}
	want := Stats{Hits: 1, Misses: 1, Bytes: 1, Entries: 1, MaxBytes: 100}
	if s := c.Stats(); s != want {
		t.Errorf("Stats() = %+v; want %+v", s, want)
	}
}

// A Remove during a load keeps the load's result out of the cache; the
// waiting callers still get it.
func TestRemoveDuringLoad(t *testing.T) {
	c := New[string, int](100)
	release := make(chan struct{})
	results := dedup(t, c, 2, func(context.Context) (int, int64, error) {
		<-release
		return 42, 1, nil
	})
	c.Remove("k")
	close(release)
	for range 2 {
		if r := <-results; r.v != 42 || r.err != nil {
			t.Errorf("GetOrLoad = %d, %v; want 42, nil", r.v, r.err)
		}
	}
	mustMiss(t, c, "k")

	// The next caller loads afresh.
	v, err := c.GetOrLoad(t.Context(), "k", func(context.Context) (int, int64, error) { return 43, 1, nil })
	if v != 43 || err != nil {
		t.Errorf("GetOrLoad after Remove = %d, %v; want 43, nil", v, err)
	}
	mustGet(t, c, "k", 43)
}

// A load that never returns normally releases its waiters with an error.
func TestGetOrLoadGoexit(t *testing.T) {
	c := New[string, int](100)
	_, err := c.GetOrLoad(t.Context(), "k", func(context.Context) (int, int64, error) {
		runtime.Goexit()
		return 0, 0, nil
	})
	if !errors.Is(err, errLoadAborted) {
		t.Errorf("GetOrLoad = %v; want %v", err, errLoadAborted)
	}
	mustMiss(t, c, "k")
}

func TestStats(t *testing.T) {
	c := New[string, int](10)
	c.Get("a") // miss
	c.Add("a", 1, 6)
	c.Get("a")                         // hit
	c.Add("b", 2, 6)                   // evicts a
	c.Get("a")                         // miss
	c.GetOrLoad(t.Context(), "b", nil) // hit
	c.GetOrLoad(t.Context(), "c", func(context.Context) (int, int64, error) {
		return 3, 3, nil
	}) // miss, load
	c.GetOrLoad(t.Context(), "d", func(context.Context) (int, int64, error) {
		return 0, 0, errors.New("x")
	}) // miss, load error
	want := Stats{
		Hits: 2, Misses: 4, Loads: 2, LoadErrors: 1, Evictions: 1,
		Bytes: 9, Entries: 2, MaxBytes: 10,
	}
	if s := c.Stats(); s != want {
		t.Errorf("Stats() = %+v; want %+v", s, want)
	}
	if c.Len() != want.Entries || c.Bytes() != want.Bytes {
		t.Errorf("Len() = %d, Bytes() = %d; want %d, %d", c.Len(), c.Bytes(), want.Entries, want.Bytes)
	}
}

// TestConcurrent mixes every operation from many goroutines, for the race
// detector and for the bound.
func TestConcurrent(t *testing.T) {
	const maxBytes = 64
	var evicted atomic.Int64
	var c *Cache[int, int]
	c = New(maxBytes, WithOnEvict(func(k int, v int) {
		if v != k%9+1 {
			t.Errorf("onEvict(%d, %d): value does not belong to key", k, v)
		}
		evicted.Add(1)
		c.Bytes() // the callback may use the cache
	}))
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := (g*7 + i) % 50
				size := int64(k%9 + 1)
				switch i % 4 {
				case 0:
					c.Get(k)
				case 1:
					c.Remove(k)
				case 2:
					c.Add(k, int(size), size)
				default:
					c.GetOrLoad(t.Context(), k, func(context.Context) (int, int64, error) {
						return int(size), size, nil
					})
				}
				if b := c.Bytes(); b > maxBytes {
					t.Errorf("Bytes() = %d > %d", b, maxBytes)
					return
				}
			}
		})
	}
	wg.Wait()
	c.Purge()
	if n, b := c.Len(), c.Bytes(); n != 0 || b != 0 {
		t.Errorf("after Purge: Len() = %d, Bytes() = %d", n, b)
	}
	if evicted.Load() == 0 {
		t.Error("onEvict never called")
	}
}

func BenchmarkGetHit(b *testing.B) {
	c := New[string, int](1 << 20)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("tables/t/gen/%08d/footer", i)
		c.Add(keys[i], i, 64)
	}
	b.Run("serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			c.Get(keys[i%len(keys)])
			i++
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Get(keys[i%len(keys)])
				i++
			}
		})
	})
}
