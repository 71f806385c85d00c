package latency

import (
	"context"
	"io"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// Model is a latency model around one bucket: Bucket is the bucket to use,
// and the Model counts what it charged.
type Model struct {
	cfg    Config
	clock  Clock
	bucket objstore.Bucket

	// The draws. The lock is held for one draw, never while sleeping:
	// calls sleep on their own, in parallel.
	mu  sync.Mutex
	rng *rand.Rand

	calls [numOps]atomic.Int64
	slept [numOps]atomic.Int64 // nanoseconds charged (latency and transfer)
}

const numOps = 7

func opIndex(op Op) int {
	switch op {
	case OpHead:
		return 0
	case OpGet:
		return 1
	case OpPut:
		return 2
	case OpPutIf:
		return 3
	case OpDelete:
		return 4
	case OpList:
		return 5
	case OpLease:
		return 6
	}
	panic("latency: unknown op " + string(op))
}

// New returns a model of cfg around inner.
func New(inner objstore.Bucket, cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.ListPage == 0 {
		cfg.ListPage = AzureListPage
	}
	if cfg.DeleteBatch == 0 {
		cfg.DeleteBatch = AzureDeleteBatch
	}
	m := &Model{cfg: cfg, clock: cfg.Clock, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6c6174656e6379))}
	if m.clock == nil {
		m.clock = realClock{}
	}
	b := &bucket{m: m, inner: inner}
	if l, ok := inner.(objstore.Leaser); ok {
		m.bucket = &leaserBucket{bucket: b, l: l}
	} else {
		m.bucket = b
	}
	return m, nil
}

// Bucket is inner behind the model. It is an objstore.Leaser exactly when
// inner is one.
func (m *Model) Bucket() objstore.Bucket { return m.bucket }

// Config is the model's configuration (with Azure's page and batch sizes
// filled in).
func (m *Model) Config() Config { return m.cfg }

// Calls reports how many op requests the model has charged: one per Head,
// Get and GetRange, Put, Delete and DeleteIfMatch; one per batch of a
// DeleteMany and per page of a List; one per lease call. A call the
// caller's context ended while it slept is counted too.
func (m *Model) Calls(op Op) int64 { return m.calls[opIndex(op)].Load() }

// Counts reports Calls for every operation.
func (m *Model) Counts() map[Op]int64 {
	out := make(map[Op]int64, len(Ops))
	for _, op := range Ops {
		out[op] = m.Calls(op)
	}
	return out
}

// Charged reports the total time the model made op requests take:
// latencies and transfers, summed over requests (parallel requests each
// count their own).
func (m *Model) Charged(op Op) time.Duration { return time.Duration(m.slept[opIndex(op)].Load()) }

// draw counts one op request and returns its latency.
func (m *Model) draw(op Op) time.Duration {
	i := opIndex(op)
	m.calls[i].Add(1)
	d := m.cfg.For(op)
	if d.P50 <= 0 {
		return 0
	}
	if d.P99 == d.P50 {
		return d.P50
	}
	m.mu.Lock()
	z := m.rng.NormFloat64()
	m.mu.Unlock()
	return d.at(z)
}

// sleep charges d to op and waits it out (or until ctx is done).
func (m *Model) sleep(ctx context.Context, op Op, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	m.slept[opIndex(op)].Add(int64(d))
	return m.clock.Sleep(ctx, d)
}

// request counts and waits out one op request plus extra (a transfer).
func (m *Model) request(ctx context.Context, op Op, extra time.Duration) error {
	return m.sleep(ctx, op, m.draw(op)+extra)
}

// bucket is the wrapper of a Bucket; leaserBucket that of one that leases.
// Every request waits its latency before it reaches inner, so its effect
// (a Put becoming visible, a Delete) happens at the end of the wait and the
// answer returns at once.
type bucket struct {
	m     *Model
	inner objstore.Bucket
}

var (
	_ objstore.Bucket = (*bucket)(nil)
	_ objstore.Leaser = (*leaserBucket)(nil)
)

func (b *bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	if err := b.m.request(ctx, OpGet, 0); err != nil {
		return nil, objstore.Attrs{}, err
	}
	rc, a, err := b.inner.Get(ctx, key)
	if err != nil {
		return rc, a, err
	}
	return b.m.body(ctx, rc), a, nil
}

func (b *bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := b.m.request(ctx, OpGet, 0); err != nil {
		return nil, err
	}
	rc, err := b.inner.GetRange(ctx, key, offset, length)
	if err != nil {
		return rc, err
	}
	return b.m.body(ctx, rc), nil
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if err := b.m.request(ctx, OpHead, 0); err != nil {
		return objstore.Attrs{}, err
	}
	return b.inner.Head(ctx, key)
}

// Put charges a conditional Put as OpPutIf. A declared size is charged
// with the latency, before the body is passed on unchanged (a seekable
// body stays seekable); a body of unknown size is paced as inner reads it.
func (b *bucket) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	op := OpPut
	if opts.IfNotExists || opts.IfMatch != "" {
		op = OpPutIf
	}
	var upload time.Duration
	if opts.Size > 0 {
		upload = b.m.cfg.transfer(opts.Size)
	}
	if err := b.m.request(ctx, op, upload); err != nil {
		return objstore.Attrs{}, err
	}
	if opts.Size <= 0 && r != nil && b.m.cfg.Bandwidth > 0 {
		r = &paced{m: b.m, ctx: ctx, op: op, r: r, start: b.m.clock.Now()}
	}
	return b.inner.Put(ctx, key, r, opts)
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	if err := b.m.request(ctx, OpDelete, 0); err != nil {
		return err
	}
	return b.inner.Delete(ctx, key)
}

func (b *bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := b.m.request(ctx, OpDelete, 0); err != nil {
		return err
	}
	return b.inner.DeleteIfMatch(ctx, key, etag)
}

// DeleteMany charges one OpDelete per batch, the batches one after
// another, and passes the keys on in one call once all are charged: a
// partial deletion is not modelled.
func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	for i := 0; i < len(keys); i += b.m.cfg.DeleteBatch {
		if err := b.m.request(ctx, OpDelete, 0); err != nil {
			return err
		}
	}
	return b.inner.DeleteMany(ctx, keys)
}

// List charges one OpList before the first page and one before each
// further page's first entry.
func (b *bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := b.m.request(ctx, OpList, 0); err != nil {
		return err
	}
	n := 0
	return b.inner.List(ctx, prefix, opts, func(e objstore.Entry) error {
		if n > 0 && n%b.m.cfg.ListPage == 0 {
			if err := b.m.request(ctx, OpList, 0); err != nil {
				return err
			}
		}
		n++
		return fn(e)
	})
}

type leaserBucket struct {
	*bucket
	l objstore.Leaser
}

func (b *leaserBucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	if err := b.m.request(ctx, OpLease, 0); err != nil {
		return nil, err
	}
	l, err := b.l.AcquireLease(ctx, key, d)
	if err != nil {
		return l, err
	}
	return &lease{m: b.m, l: l}, nil
}

// lease charges a held lease's calls.
type lease struct {
	m *Model
	l objstore.Lease
}

func (l *lease) Renew(ctx context.Context) error {
	if err := l.m.request(ctx, OpLease, 0); err != nil {
		return err
	}
	return l.l.Renew(ctx)
}

func (l *lease) Release(ctx context.Context) error {
	if err := l.m.request(ctx, OpLease, 0); err != nil {
		return err
	}
	return l.l.Release(ctx)
}

func (l *lease) Duration() time.Duration { return l.l.Duration() }

// paceQuantum: a transfer owing less than this waits for the next read
// (or the end of the body) rather than sleeping now, so small reads do not
// each pay a timer's overshoot.
const paceQuantum = 500 * time.Microsecond

// body delivers a Get's bytes at the model's bandwidth, counted from when
// the first byte arrived: after n bytes, Read returns no earlier than
// start + n/bandwidth. A reader slower than the bandwidth waits for nothing
// (the bytes were already there, as in a socket's buffer).
func (m *Model) body(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	if m.cfg.Bandwidth <= 0 {
		return rc
	}
	return &pacedBody{paced: paced{m: m, ctx: ctx, op: OpGet, r: rc, start: m.clock.Now()}, c: rc}
}

type pacedBody struct {
	paced
	c io.Closer
}

func (b *pacedBody) Close() error { return b.c.Close() }

// paced is a reader delivering its bytes at the model's bandwidth from
// start; its waits are charged to op.
type paced struct {
	m     *Model
	ctx   context.Context
	op    Op
	r     io.Reader
	start time.Time
	n     int64 // bytes delivered so far
}

func (p *paced) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	if n == 0 && err == nil {
		return n, err
	}
	due := p.start.Add(p.m.cfg.transfer(p.n))
	if d := due.Sub(p.m.clock.Now()); d >= paceQuantum || (d > 0 && err != nil) {
		if serr := p.m.sleep(p.ctx, p.op, d); serr != nil {
			return n, serr
		}
	}
	return n, err
}
