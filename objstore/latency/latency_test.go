package latency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/latency"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// recorder is a Clock that never waits: Sleep records the duration and
// moves the clock on by it, so what the model charged is asserted exactly,
// whatever the machine's speed.
type recorder struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newRecorder() *recorder { return &recorder{now: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)} }

func (r *recorder) Now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

func (r *recorder) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sleeps = append(r.sleeps, d)
	r.now = r.now.Add(d)
	return nil
}

// take returns the sleeps recorded since the last take.
func (r *recorder) take() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sleeps
	r.sleeps = nil
	return s
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func newModel(t *testing.T, inner objstore.Bucket, cfg latency.Config) *latency.Model {
	t.Helper()
	m, err := latency.New(inner, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestConformance: with a zero Config every call passes through untouched,
// leases included.
func TestConformance(t *testing.T) {
	open := func(t *testing.T) objstore.Bucket { return newModel(t, memory.New(), latency.Config{}).Bucket() }
	objstoretest.Run(t, open)
	objstoretest.RunLeases(t, open)
}

// TestConformanceCharged runs the suite again with every latency and the
// bandwidth switched on, on a clock that does not wait: the paced bodies,
// paged listings and batched deletes keep the contract too.
func TestConformanceCharged(t *testing.T) {
	open := func(t *testing.T) objstore.Bucket {
		cfg := latency.DefaultConfig()
		cfg.Clock = newRecorder()
		cfg.ListPage, cfg.DeleteBatch = 3, 2
		return newModel(t, memory.New(), cfg).Bucket()
	}
	objstoretest.Run(t, open)
	objstoretest.RunLeases(t, open)
}

// TestCapabilities: the wrapper leases exactly when its inner bucket does.
func TestCapabilities(t *testing.T) {
	if _, ok := newModel(t, memory.New(), latency.Config{}).Bucket().(objstore.Leaser); !ok {
		t.Fatal("the wrapper of a Leaser hides AcquireLease")
	}
	plain := struct{ objstore.Bucket }{memory.New()}
	if _, ok := newModel(t, plain, latency.Config{}).Bucket().(objstore.Leaser); ok {
		t.Fatal("the wrapper of a bucket that cannot lease claims it can")
	}
}

func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// constant gives every operation a fixed latency of its own, so each
// sleep names the operation that was charged.
func constant(clock latency.Clock) latency.Config {
	c := latency.Config{Bandwidth: 1e6, ListPage: 2, DeleteBatch: 2, Clock: clock}
	for i, op := range latency.Ops {
		*c.For(op) = latency.Dist{P50: ms(float64(i + 1)), P99: ms(float64(i + 1))}
	}
	return c
}

// TestDelaysPerOp: each call is charged its operation's latency, bodies
// their size at the bandwidth (1 MB/s: 1,000 bytes a millisecond), pages
// and batches one latency each.
func TestDelaysPerOp(t *testing.T) {
	ctx := t.Context()
	clk := newRecorder()
	m := newModel(t, memory.New(), constant(clk))
	b := m.Bucket()
	head, get, put, putIf, del, list, lease := ms(1), ms(2), ms(3), ms(4), ms(5), ms(6), ms(7)
	expect := func(what string, want ...time.Duration) {
		t.Helper()
		if got := clk.take(); !slices.Equal(got, want) {
			t.Errorf("%s: slept %v, want %v", what, got, want)
		}
	}
	data := bytes.Repeat([]byte("0123456789"), 400) // 4,000 bytes: 4 ms at 1 MB/s
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	a, err := b.Put(ctx, "k", bytes.NewReader(data), objstore.PutOptions{Size: 4000})
	must(err)
	expect("Put of 4,000 declared bytes", put+ms(4))
	_, err = b.Put(ctx, "k2", bytes.NewReader(data), objstore.PutOptions{Size: 4000, IfNotExists: true})
	must(err)
	expect("create-if-absent Put", putIf+ms(4))
	_, err = b.Put(ctx, "k", bytes.NewReader(data[:1000]), objstore.PutOptions{Size: 1000, IfMatch: a.ETag})
	must(err)
	expect("If-Match Put", putIf+ms(1))
	// A body of unknown size is paced as the store reads it.
	_, err = b.Put(ctx, "k3", io.MultiReader(bytes.NewReader(data[:2000]), bytes.NewReader(data[2000:])), objstore.PutOptions{})
	must(err)
	if got := clk.take(); len(got) < 2 || got[0] != put || sum(got[1:]) != ms(4) {
		t.Errorf("Put of undeclared size: slept %v, want %v then 4ms of transfer", got, put)
	}

	_, err = b.Head(ctx, "k")
	must(err)
	expect("Head", head)
	_, err = b.Head(ctx, "absent")
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Head of an absent key: %v", err)
	}
	expect("Head of an absent key (a 404 takes a round trip too)", head)

	// Get: the first byte's latency when it returns; the transfer while
	// the body is read, chunk by chunk.
	rc, _, err := b.Get(ctx, "k2")
	must(err)
	expect("Get, before its body is read", get)
	chunk := make([]byte, 1000)
	for i := range 4 {
		if _, err := io.ReadFull(rc, chunk); err != nil {
			t.Fatal(err)
		}
		expect(fmt.Sprintf("chunk %d of the body", i+1), ms(1))
	}
	if n, err := rc.Read(chunk); n != 0 || err != io.EOF {
		t.Fatalf("end of body: %d, %v", n, err)
	}
	expect("end of body")
	must(rc.Close())

	rc, err = b.GetRange(ctx, "k2", 500, 2000)
	must(err)
	if got, _ := io.ReadAll(rc); !bytes.Equal(got, data[500:2500]) {
		t.Fatal("GetRange body differs")
	}
	rc.Close()
	if got := clk.take(); len(got) < 2 || got[0] != get || sum(got[1:]) != ms(2) {
		t.Errorf("GetRange of 2,000 bytes: slept %v, want %v then 2ms of transfer", got, get)
	}

	must(b.Delete(ctx, "k3"))
	expect("Delete", del)
	a2, err := b.Head(ctx, "k2")
	must(err)
	clk.take()
	must(b.DeleteIfMatch(ctx, "k2", a2.ETag))
	expect("DeleteIfMatch", del)
	for i := range 5 {
		_, err := b.Put(ctx, fmt.Sprintf("many/%d", i), strings.NewReader("x"), objstore.PutOptions{Size: 1})
		must(err)
	}
	clk.take()
	var names []string
	must(b.List(ctx, "many/", objstore.ListOptions{}, func(e objstore.Entry) error {
		names = append(names, e.Key)
		return nil
	}))
	expect("List of 5 entries, 2 a page", list, list, list)
	stop := errors.New("stop")
	if err := b.List(ctx, "many/", objstore.ListOptions{}, func(objstore.Entry) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("List stopped by fn: %v", err)
	}
	expect("List stopped at its first entry", list)
	must(b.DeleteMany(ctx, names))
	expect("DeleteMany of 5 keys, 2 a batch", del, del, del)
	must(b.DeleteMany(ctx, nil))
	expect("DeleteMany of no keys")

	l, err := b.(objstore.Leaser).AcquireLease(ctx, "lease", 15*time.Second)
	must(err)
	must(l.Renew(ctx))
	must(l.Release(ctx))
	expect("AcquireLease, Renew, Release", lease, lease, lease)

	want := map[latency.Op]int64{latency.OpHead: 3, latency.OpGet: 2, latency.OpPut: 7, latency.OpPutIf: 2,
		latency.OpDelete: 5, latency.OpList: 4, latency.OpLease: 3}
	if got := m.Counts(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Counts = %v, want %v", got, want)
	}
	if got := m.Charged(latency.OpGet); got != 2*get+ms(6) {
		t.Errorf("Charged(get) = %v, want %v", got, 2*get+ms(6))
	}
}

// TestBodyPaidWhileRead: a large body's transfer is charged as its bytes
// are read, not when Get returns; a reader slower than the bandwidth
// waits for nothing.
func TestBodyPaidWhileRead(t *testing.T) {
	ctx := t.Context()
	clk := newRecorder()
	cfg := latency.Config{Get: latency.Dist{P50: ms(5), P99: ms(5)}, Bandwidth: 1e6, Clock: clk}
	b := newModel(t, memory.New(), cfg).Bucket()
	if _, err := b.Put(ctx, "big", bytes.NewReader(make([]byte, 100_000)), objstore.PutOptions{Size: 100_000}); err != nil {
		t.Fatal(err)
	}
	clk.take()
	rc, _, err := b.Get(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got := clk.take(); !slices.Equal(got, []time.Duration{ms(5)}) {
		t.Fatalf("Get slept %v before returning, want only the first byte's 5ms (not the 100ms transfer)", got)
	}
	buf := make([]byte, 10_000)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	if got := sum(clk.take()); got != ms(10) {
		t.Fatalf("the first 10,000 bytes took %v, want 10ms", got)
	}
	// The reader dawdles 50ms (the clock moves on without the model):
	// the 50,000 bytes that arrived meanwhile are there at once.
	clk.mu.Lock()
	clk.now = clk.now.Add(ms(50))
	clk.mu.Unlock()
	for range 5 {
		if _, err := io.ReadFull(rc, buf); err != nil {
			t.Fatal(err)
		}
	}
	if got := clk.take(); len(got) != 0 {
		t.Fatalf("bytes that had already arrived were charged again: %v", got)
	}
	n, err := io.Copy(io.Discard, rc)
	if err != nil || n != 40_000 {
		t.Fatalf("rest of the body: %d, %v", n, err)
	}
	if got := sum(clk.take()); got != ms(40) {
		t.Fatalf("the last 40,000 bytes took %v, want 40ms", got)
	}
}

// TestDistribution: the draws have the configured median and 99th
// percentile, and a seed fixes them.
func TestDistribution(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		clk := newRecorder()
		cfg := latency.Config{Head: latency.Dist{P50: ms(10), P99: ms(50)}, Seed: seed, Clock: clk}
		b := newModel(t, memory.New(), cfg).Bucket()
		for range 20000 {
			_, _ = b.Head(t.Context(), "k")
		}
		return clk.take()
	}
	a := draws(7)
	if b := draws(7); !slices.Equal(a, b) {
		t.Fatal("the same seed drew different latencies")
	}
	if b := draws(8); slices.Equal(a, b) {
		t.Fatal("different seeds drew the same latencies")
	}
	s := slices.Clone(a)
	slices.Sort(s)
	p50, p99 := s[len(s)/2], s[len(s)*99/100]
	if p50 < ms(9.7) || p50 > ms(10.3) {
		t.Errorf("p50 %v, want 10ms ± 3%%", p50)
	}
	if p99 < ms(46) || p99 > ms(54) {
		t.Errorf("p99 %v, want 50ms ± 8%%", p99)
	}
	if s[0] <= 0 {
		t.Errorf("a latency of %v", s[0])
	}
}

// gate is a Clock whose sleeps block until it is opened, counting the
// sleepers: it shows how many calls wait at the same time.
type gate struct {
	mu       sync.Mutex
	sleeping int
	most     int
	changed  chan struct{} // receives after each new sleeper
	open     chan struct{}
}

func (g *gate) Now() time.Time { return time.Time{} }

func (g *gate) Sleep(ctx context.Context, d time.Duration) error {
	g.mu.Lock()
	g.sleeping++
	g.most = max(g.most, g.sleeping)
	g.mu.Unlock()
	g.changed <- struct{}{}
	defer func() {
		g.mu.Lock()
		g.sleeping--
		g.mu.Unlock()
	}()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestParallel: N calls issued together all sleep at the same time, each
// on its own (the model holds no lock while a call waits), and all reach
// the store once their waits end.
func TestParallel(t *testing.T) {
	const n = 16
	g := &gate{changed: make(chan struct{}, n), open: make(chan struct{})}
	cfg := latency.Config{Head: latency.Dist{P50: ms(5), P99: ms(25)}, Clock: g}
	mem := memory.New()
	if _, err := mem.Put(t.Context(), "k", strings.NewReader("v"), objstore.PutOptions{Size: 1}); err != nil {
		t.Fatal(err)
	}
	m := newModel(t, mem, cfg)
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := m.Bucket().Head(t.Context(), "k")
			errs <- err
		}()
	}
	// Wait until all n are asleep at once. A model that serialised its
	// calls would stop at one; the deadline only turns that hang into a
	// failure.
	deadline := time.After(30 * time.Second)
	for i := range n {
		select {
		case <-g.changed:
		case <-deadline:
			t.Fatalf("only %d of %d calls reached their sleep: calls wait for each other", i, n)
		}
	}
	g.mu.Lock()
	most := g.most
	g.mu.Unlock()
	if most != n {
		t.Fatalf("at most %d calls slept at once, want %d", most, n)
	}
	close(g.open)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := m.Calls(latency.OpHead); got != n {
		t.Fatalf("Calls(head) = %d, want %d", got, n)
	}
}

// TestLeasesPassThrough: a lease taken through the model is the inner
// bucket's lease, and its calls are charged as lease requests.
func TestLeasesPassThrough(t *testing.T) {
	ctx := t.Context()
	clk := newRecorder()
	mem := memory.New()
	m := newModel(t, mem, constant(clk))
	lb := m.Bucket().(objstore.Leaser)
	l, err := lb.AcquireLease(ctx, "_leases/shard-0", 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.AcquireLease(ctx, "_leases/shard-0", 15*time.Second); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("the inner bucket does not see the lease taken through the model: %v", err)
	}
	if _, err := lb.AcquireLease(ctx, "_leases/shard-0", 15*time.Second); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("a second acquisition through the model: %v, want ErrLeased", err)
	}
	if l.Duration() != 15*time.Second {
		t.Fatalf("Duration = %v", l.Duration())
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := mem.AcquireLease(ctx, "_leases/shard-0", 15*time.Second); err != nil {
		t.Fatalf("Release through the model did not release the inner lease: %v", err)
	}
	if got := m.Calls(latency.OpLease); got != 4 {
		t.Fatalf("Calls(lease) = %d, want 4 (two acquisitions, a renewal, a release)", got)
	}
}

// TestContextEndsWait: a call whose context ends while it waits returns
// the context's error and never reaches the store.
func TestContextEndsWait(t *testing.T) {
	mem := memory.New()
	cfg := latency.Config{Put: latency.Dist{P50: time.Hour, P99: time.Hour}}
	b := newModel(t, mem, cfg).Bucket()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := b.Put(ctx, "k", strings.NewReader("v"), objstore.PutOptions{Size: 1}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a cancelled context: %v", err)
	}
	if mem.Len() != 0 {
		t.Fatal("a Put whose wait was cut short reached the store")
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []latency.Config{
		{Head: latency.Dist{P50: ms(5), P99: ms(1)}},
		{Get: latency.Dist{P50: -1}},
		{List: latency.Dist{P99: ms(3)}},
		{Bandwidth: -1},
	} {
		if _, err := latency.New(memory.New(), c); err == nil {
			t.Errorf("New accepted %+v", c)
		}
	}
	for _, c := range []latency.Config{latency.DefaultConfig(), latency.PremiumConfig(), {}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	// Premium is single-digit milliseconds, p50 and p99, every operation.
	p := latency.PremiumConfig()
	for _, op := range latency.Ops {
		if d := p.For(op); d.P99 >= 10*time.Millisecond || d.P50 > d.P99 {
			t.Errorf("premium %s: %+v", op, *d)
		}
	}
}
