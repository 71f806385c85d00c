// Package cache provides bounded least-recently-used caches of immutable
// things: resident snapshots, id indexes of sealed generations, data-file
// footers and indexes, small hot batches.
//
// A Cache is bounded in bytes, not in entries, because the things it holds
// differ in size by orders of magnitude: a thousand footers and one resident
// snapshot can weigh the same. The caller states each value's size when it is
// added; the cache evicts least recently used entries until the total is
// within the bound again, so the bound holds at every moment (the design's
// "every cost is capped"). Every entry is charged at least one byte, so the
// number of entries is bounded too.
//
// Values are assumed immutable, typically keyed by the object-store key of
// an immutable object, so the cache never needs invalidating for staleness;
// Remove exists for objects that are deleted, such as reclaimed generations.
//
// GetOrLoad deduplicates concurrent loads of the same key, so a burst of
// reads of a cold object costs one fetch. A caller that gives up does not
// cancel the fetch for the others.
package cache

import (
	"context"
	"errors"
	"math"
	"sync"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/rollstore/rollstore/internal/sched"
)

// errLoadAborted is what waiters receive if a load function never returns
// normally (it panicked or called runtime.Goexit), so that they do not wait
// forever.
var errLoadAborted = errors.New("cache: load function did not return")

// Stats is a snapshot of a cache's counters and occupancy.
type Stats struct {
	Hits       uint64 // lookups by Get or GetOrLoad that found the key
	Misses     uint64 // lookups by Get or GetOrLoad that did not
	Loads      uint64 // load functions started by GetOrLoad
	LoadErrors uint64 // load functions that returned an error
	Evictions  uint64 // entries dropped to stay within MaxBytes
	Bytes      int64  // total size of the cached entries
	Entries    int    // number of cached entries
	MaxBytes   int64  // the bound; 0 means caching is disabled
}

// An Option configures a Cache in New.
type Option[K comparable, V any] func(*Cache[K, V])

// WithOnEvict sets a function called with every key and value the cache stops
// holding: evicted to stay within the bound, removed by Remove or Purge, or
// replaced by a later Add or load of the same key. It is called after the
// cache's lock is released, so it may use the cache, and it is the place to
// release resources the cache owned, such as reference-counted Arrow memory.
// A value the cache never held (too large, or caching disabled) is not passed
// to it.
func WithOnEvict[K comparable, V any](f func(key K, value V)) Option[K, V] {
	return func(c *Cache[K, V]) { c.onEvict = f }
}

// WithRuntime makes loads run and be waited for on rt (the engine's
// deterministic simulator needs every goroutine and wait to go through it).
// The default is sched.Real.
func WithRuntime[K comparable, V any](rt sched.Runtime) Option[K, V] {
	return func(c *Cache[K, V]) { c.rt = rt }
}

// A Cache is a byte-bounded LRU cache. It is safe for concurrent use.
type Cache[K comparable, V any] struct {
	maxBytes int64
	onEvict  func(K, V)
	rt       sched.Runtime

	mu    sync.Mutex
	lru   *simplelru.LRU[K, entry[K, V]] // entry-unbounded; bytes bound it
	bytes int64
	calls map[K]*call[V] // loads in flight
	stats Stats          // counters only; occupancy is filled in by Stats
}

type entry[K comparable, V any] struct {
	key  K
	val  V
	size int64
}

// A call is one load in flight. val and err are written once, before done
// is closed, and only read after.
type call[V any] struct {
	done sched.Event
	val  V
	err  error
}

// New returns a cache holding at most maxBytes bytes of values. If maxBytes
// is zero or negative, caching is disabled: every lookup misses and Add does
// nothing, but GetOrLoad still deduplicates concurrent loads.
func New[K comparable, V any](maxBytes int64, opts ...Option[K, V]) *Cache[K, V] {
	// The LRU's own entry limit is effectively infinite: we evict by bytes.
	lru, err := simplelru.NewLRU[K, entry[K, V]](math.MaxInt, nil)
	if err != nil {
		panic(err) // unreachable: the size is positive
	}
	c := &Cache[K, V]{
		maxBytes: max(maxBytes, 0),
		lru:      lru,
		calls:    make(map[K]*call[V]),
		rt:       sched.Real,
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// Get returns the value cached for key, marking it most recently used.
func (c *Cache[K, V]) Get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.get(key)
}

func (c *Cache[K, V]) get(key K) (V, bool) {
	e, ok := c.lru.Get(key)
	if !ok {
		c.stats.Misses++
		return e.val, false
	}
	c.stats.Hits++
	return e.val, true
}

// Add caches value under key, charged size bytes (at least one), replacing
// any value already cached for key, and evicts least recently used entries
// until the cache is within its bound. A value larger than the bound is not
// cached, and evicts nothing but a previous value for the same key.
func (c *Cache[K, V]) Add(key K, value V, size int64) {
	c.mu.Lock()
	gone := c.add(key, value, size)
	c.mu.Unlock()
	c.release(gone)
}

// add does the work of Add with c.mu held, returning the entries to pass to
// onEvict once the lock is released.
func (c *Cache[K, V]) add(key K, value V, size int64) (gone []entry[K, V]) {
	gone = c.remove(key, gone)
	size = max(size, 1)
	if size > c.maxBytes {
		return gone
	}
	c.lru.Add(key, entry[K, V]{key: key, val: value, size: size})
	c.bytes += size
	// The new entry is the most recent and fits on its own, so the loop stops
	// before reaching it.
	for c.bytes > c.maxBytes {
		_, e, _ := c.lru.RemoveOldest()
		c.bytes -= e.size
		c.stats.Evictions++
		if c.onEvict != nil {
			gone = append(gone, e)
		}
	}
	return gone
}

// remove drops key's entry, if any, with c.mu held, appending it to gone.
func (c *Cache[K, V]) remove(key K, gone []entry[K, V]) []entry[K, V] {
	e, ok := c.lru.Peek(key)
	if !ok {
		return gone
	}
	c.lru.Remove(key)
	c.bytes -= e.size
	if c.onEvict != nil {
		gone = append(gone, e)
	}
	return gone
}

// release passes entries the cache no longer holds to onEvict. It must be
// called without c.mu held.
func (c *Cache[K, V]) release(gone []entry[K, V]) {
	for _, e := range gone {
		c.onEvict(e.key, e.val)
	}
}

// Remove drops the value cached for key, if any. A load for key already in
// flight will not cache its result (its waiters still receive it), so that a
// value removed because its object was deleted is not cached again by a read
// that began before the deletion; a later GetOrLoad starts a fresh load.
func (c *Cache[K, V]) Remove(key K) {
	c.mu.Lock()
	gone := c.remove(key, nil)
	delete(c.calls, key)
	c.mu.Unlock()
	c.release(gone)
}

// Purge drops every cached value, passing each to the WithOnEvict function.
// Loads in flight are unaffected and may cache their results afterwards.
func (c *Cache[K, V]) Purge() {
	c.mu.Lock()
	var gone []entry[K, V]
	if c.onEvict != nil {
		gone = c.lru.Values()
	}
	c.lru.Purge()
	c.bytes = 0
	c.mu.Unlock()
	c.release(gone)
}

// GetOrLoad returns the value cached for key or, on a miss, the result of
// load, caching it if load succeeds; errors are not cached. Concurrent
// callers for the same key share one call of load.
//
// load runs in its own goroutine with a context that carries the values of
// the ctx of the caller that started it but not its cancellation or deadline
// (context.WithoutCancel), because the result is shared: a caller whose ctx
// is done returns ctx.Err() at once while the load continues for the others
// and, if it succeeds, still fills the cache. load should therefore bound
// its own running time. A caller whose ctx is already done on a miss returns
// ctx.Err() without starting a load.
//
// load returns the value and its size in bytes, as for Add.
func (c *Cache[K, V]) GetOrLoad(ctx context.Context, key K, load func(ctx context.Context) (V, int64, error)) (V, error) {
	c.mu.Lock()
	if v, ok := c.get(key); ok {
		c.mu.Unlock()
		return v, nil
	}
	cl, ok := c.calls[key]
	if !ok {
		if err := ctx.Err(); err != nil {
			c.mu.Unlock()
			var zero V
			return zero, err
		}
		cl = &call[V]{done: c.rt.NewEvent()}
		c.calls[key] = cl
		c.stats.Loads++
		lctx := context.WithoutCancel(ctx)
		c.rt.Go(func() { c.load(lctx, key, cl, load) })
	}
	c.mu.Unlock()

	if _, err := c.rt.Wait(ctx, cl.done); err != nil {
		// Prefer a result that is already there.
		if cl.done.Fired() {
			return cl.val, cl.err
		}
		var zero V
		return zero, err
	}
	return cl.val, cl.err
}

// load runs f for cl and publishes its result.
func (c *Cache[K, V]) load(ctx context.Context, key K, cl *call[V], f func(context.Context) (V, int64, error)) {
	var (
		val  V
		size int64
		err  = errLoadAborted
	)
	// Deferred so that waiters are released even if f panics or exits the
	// goroutine; a panic still crashes the program, as in any goroutine.
	defer func() {
		var gone []entry[K, V]
		c.mu.Lock()
		if err != nil {
			c.stats.LoadErrors++
		}
		// The call is no longer registered if Remove forgot it.
		if c.calls[key] == cl {
			delete(c.calls, key)
			if err == nil {
				gone = c.add(key, val, size)
			}
		}
		c.mu.Unlock()
		cl.val, cl.err = val, err
		cl.done.Fire()
		c.release(gone)
	}()
	val, size, err = f(ctx)
}

// Stats returns a consistent snapshot of the cache's counters and occupancy.
func (c *Cache[K, V]) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Bytes = c.bytes
	s.Entries = c.lru.Len()
	s.MaxBytes = c.maxBytes
	return s
}

// Len returns the number of cached entries.
func (c *Cache[K, V]) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// Bytes returns the total size of the cached entries, never more than the
// bound given to New.
func (c *Cache[K, V]) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}
