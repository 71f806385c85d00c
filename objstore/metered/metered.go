// Package metered wraps an objstore.Bucket to count and time its calls in
// Prometheus metrics, in the manner of thanos-io/objstore's metrics bucket,
// and to let an Observer see each call (a benchmark's per-key tally, say).
//
// The wrapper is transparent: every call, its arguments, results and errors
// pass through unchanged, and a Bucket that can lease (objstore.Leaser)
// stays one, so the engine finds the same capabilities through it.
package metered

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rollstore/rollstore/objstore"
)

// Op names a call in the metrics' operation label.
type Op string

// The operations: one per method of objstore.Bucket, objstore.Leaser and
// objstore.Lease.
const (
	OpGet           Op = "get"
	OpGetRange      Op = "get_range"
	OpHead          Op = "head"
	OpPut           Op = "put"
	OpDelete        Op = "delete"
	OpDeleteIfMatch Op = "delete_if_match"
	OpDeleteMany    Op = "delete_many"
	OpList          Op = "list"
	OpAcquireLease  Op = "acquire_lease"
	OpRenewLease    Op = "renew_lease"
	OpReleaseLease  Op = "release_lease"
)

// Ops lists every operation.
var Ops = []Op{OpGet, OpGetRange, OpHead, OpPut, OpDelete, OpDeleteIfMatch, OpDeleteMany, OpList,
	OpAcquireLease, OpRenewLease, OpReleaseLease}

// Failure kinds, the kind label of failed calls. Some are the normal
// course of things and must not page anyone by themselves: a read of an
// object a concurrent reclaim removed (not_found, which the read path
// retries), a lost create-if-absent or compare-and-swap (precondition), a
// lease another owner holds (leased), a caller that gave up (canceled).
const (
	KindNotFound     = "not_found"
	KindPrecondition = "precondition"
	KindLeased       = "leased"
	KindCanceled     = "canceled"
	KindOther        = "other"
)

// Kind classifies a call's error into a failure kind; "" for nil.
func Kind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, objstore.ErrNotFound):
		return KindNotFound
	case errors.Is(err, objstore.ErrPrecondition):
		return KindPrecondition
	case errors.Is(err, objstore.ErrLeased), errors.Is(err, objstore.ErrLeaseLost):
		return KindLeased
	case errors.Is(err, context.Canceled):
		return KindCanceled
	}
	return KindOther
}

// Metrics are the store metrics. One Metrics may serve several wrapped
// Buckets; it is a prometheus.Collector, to be registered once.
type Metrics struct {
	ops      *prometheus.CounterVec
	failures *prometheus.CounterVec
	duration *prometheus.HistogramVec
	read     *prometheus.CounterVec
	written  *prometheus.CounterVec
}

// NewMetrics returns store metrics, registered nowhere.
func NewMetrics() *Metrics {
	m := &Metrics{
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_store_operations_total",
			Help: "Object store calls, by operation.",
		}, []string{"operation"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_store_operation_failures_total",
			Help: "Object store calls that failed, by operation and kind: not_found, precondition (a lost conditional write), " +
				"leased and canceled are expected in normal operation; other is not.",
		}, []string{"operation", "kind"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rollstore_store_operation_duration_seconds",
			Help:    "Time an object store call took to return (for reads, until the body was opened, not read), by operation.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"operation"}),
		read: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_store_read_bytes_total",
			Help: "Bytes read from object bodies, by operation (get or get_range).",
		}, []string{"operation"}),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rollstore_store_written_bytes_total",
			Help: "Bytes of objects written by successful puts (the size the caller declared, else the bytes its body gave).",
		}, []string{"operation"}),
	}
	// Every operation's series exist from the start, at zero, so a rate
	// over them is defined before the first call.
	for _, op := range Ops {
		m.ops.WithLabelValues(string(op))
		m.duration.WithLabelValues(string(op))
	}
	m.read.WithLabelValues(string(OpGet))
	m.read.WithLabelValues(string(OpGetRange))
	m.written.WithLabelValues(string(OpPut))
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.ops.Describe(ch)
	m.failures.Describe(ch)
	m.duration.Describe(ch)
	m.read.Describe(ch)
	m.written.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.ops.Collect(ch)
	m.failures.Collect(ch)
	m.duration.Collect(ch)
	m.read.Collect(ch)
	m.written.Collect(ch)
}

func (m *Metrics) done(op Op, start time.Time, err error) {
	if m == nil {
		return
	}
	m.ops.WithLabelValues(string(op)).Inc()
	m.duration.WithLabelValues(string(op)).Observe(time.Since(start).Seconds())
	if k := Kind(err); k != "" {
		m.failures.WithLabelValues(string(op), k).Inc()
	}
}

// Call describes a call as it is passed on. An Observer may set Body and
// WrapBody; the other fields are for reading.
type Call struct {
	Op Op
	// Key is the key; List's prefix; DeleteMany's first key ("" for none);
	// the leased key for the lease operations.
	Key  string
	Keys []string // DeleteMany
	// Offset and Length are GetRange's.
	Offset, Length int64
	// PutOptions are Put's.
	PutOptions objstore.PutOptions
	// Body is Put's body. An Observer may replace it with a reader giving
	// the same bytes; backends upload an io.ReadSeeker without buffering
	// it, so a replacement should keep that when the original had it.
	Body io.Reader
	// WrapBody, when an Observer sets it on a Get or GetRange, wraps the
	// body of a successful call.
	WrapBody func(io.ReadCloser) io.ReadCloser
}

// An Observer is told of every call before it is passed on.
type Observer func(ctx context.Context, c *Call)

// Options configure Wrap.
type Options struct {
	// Metrics, when set, count and time the calls.
	Metrics *Metrics
	// Observe, when set, is told of every call.
	Observe Observer
}

// Wrap returns b with its calls metered. The result is an objstore.Leaser
// exactly when b is one.
func Wrap(b objstore.Bucket, o Options) objstore.Bucket {
	w := &bucket{b: b, m: o.Metrics, obs: o.Observe}
	if l, ok := b.(objstore.Leaser); ok {
		return &leaserBucket{bucket: w, l: l}
	}
	return w
}

type bucket struct {
	b   objstore.Bucket
	m   *Metrics
	obs Observer
}

var (
	_ objstore.Bucket = (*bucket)(nil)
	_ objstore.Leaser = (*leaserBucket)(nil)
)

// begin tells the observer of c and returns the time the call starts.
func (w *bucket) begin(ctx context.Context, c *Call) time.Time {
	if w.obs != nil {
		w.obs(ctx, c)
	}
	return time.Now()
}

// body wraps a successful read's body: the observer's wrapper, then the
// byte count.
func (w *bucket) body(c *Call, rc io.ReadCloser) io.ReadCloser {
	if c.WrapBody != nil {
		rc = c.WrapBody(rc)
	}
	if w.m != nil {
		rc = &countingBody{ReadCloser: rc, c: w.m.read.WithLabelValues(string(c.Op))}
	}
	return rc
}

func (w *bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	c := &Call{Op: OpGet, Key: key}
	start := w.begin(ctx, c)
	rc, a, err := w.b.Get(ctx, key)
	w.m.done(c.Op, start, err)
	if err == nil {
		rc = w.body(c, rc)
	}
	return rc, a, err
}

func (w *bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	c := &Call{Op: OpGetRange, Key: key, Offset: offset, Length: length}
	start := w.begin(ctx, c)
	rc, err := w.b.GetRange(ctx, key, offset, length)
	w.m.done(c.Op, start, err)
	if err == nil {
		rc = w.body(c, rc)
	}
	return rc, err
}

func (w *bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	c := &Call{Op: OpHead, Key: key}
	start := w.begin(ctx, c)
	a, err := w.b.Head(ctx, key)
	w.m.done(c.Op, start, err)
	return a, err
}

func (w *bucket) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	c := &Call{Op: OpPut, Key: key, PutOptions: opts, Body: r}
	start := w.begin(ctx, c)
	body := c.Body
	// The declared size is what is written; a body of unknown size that
	// cannot seek is counted as it is read (one that can seek is passed
	// on as it is, keeping the backend's unbuffered path, and not
	// counted).
	var counted *countingReader
	if _, seeks := body.(io.Seeker); w.m != nil && opts.Size <= 0 && !seeks && body != nil {
		counted = &countingReader{r: body}
		body = counted
	}
	a, err := w.b.Put(ctx, key, body, opts)
	w.m.done(c.Op, start, err)
	if w.m != nil && err == nil {
		n := opts.Size
		if counted != nil {
			n = counted.n
		}
		if n > 0 {
			w.m.written.WithLabelValues(string(c.Op)).Add(float64(n))
		}
	}
	return a, err
}

func (w *bucket) Delete(ctx context.Context, key string) error {
	c := &Call{Op: OpDelete, Key: key}
	start := w.begin(ctx, c)
	err := w.b.Delete(ctx, key)
	w.m.done(c.Op, start, err)
	return err
}

func (w *bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	c := &Call{Op: OpDeleteIfMatch, Key: key}
	start := w.begin(ctx, c)
	err := w.b.DeleteIfMatch(ctx, key, etag)
	w.m.done(c.Op, start, err)
	return err
}

func (w *bucket) DeleteMany(ctx context.Context, keys []string) error {
	c := &Call{Op: OpDeleteMany, Keys: keys}
	if len(keys) > 0 {
		c.Key = keys[0]
	}
	start := w.begin(ctx, c)
	err := w.b.DeleteMany(ctx, keys)
	w.m.done(c.Op, start, err)
	return err
}

// List counts one call per listing, however many pages the backend
// fetched; its duration includes the time fn took.
func (w *bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	c := &Call{Op: OpList, Key: prefix}
	start := w.begin(ctx, c)
	err := w.b.List(ctx, prefix, opts, fn)
	w.m.done(c.Op, start, err)
	return err
}

// leaserBucket is the wrapper of a Bucket that leases.
type leaserBucket struct {
	*bucket
	l objstore.Leaser
}

func (w *leaserBucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	c := &Call{Op: OpAcquireLease, Key: key}
	start := w.begin(ctx, c)
	l, err := w.l.AcquireLease(ctx, key, d)
	w.m.done(c.Op, start, err)
	if err != nil {
		return l, err
	}
	return &lease{l: l, w: w.bucket, key: key}, nil
}

// lease meters a held lease's calls.
type lease struct {
	l   objstore.Lease
	w   *bucket
	key string
}

func (l *lease) Renew(ctx context.Context) error {
	c := &Call{Op: OpRenewLease, Key: l.key}
	start := l.w.begin(ctx, c)
	err := l.l.Renew(ctx)
	l.w.m.done(c.Op, start, err)
	return err
}

func (l *lease) Release(ctx context.Context) error {
	c := &Call{Op: OpReleaseLease, Key: l.key}
	start := l.w.begin(ctx, c)
	err := l.l.Release(ctx)
	l.w.m.done(c.Op, start, err)
	return err
}

func (l *lease) Duration() time.Duration { return l.l.Duration() }

type countingBody struct {
	io.ReadCloser
	c prometheus.Counter
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.c.Add(float64(n))
	}
	return n, err
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
