package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/metered"
)

// A tally counts requests at two levels: the objstore calls the engine makes
// (by operation and by what the key is: manifest, seal record, WAL segment,
// ...), and the HTTP requests that reach Azurite (by REST operation), with
// the response body bytes read. The second level shows what the first
// hides: a 64 MiB Put is 16 Put Block requests and a Put Block List.
//
// Every request is counted in the global tally of its side and, when its
// context carries one (withTally), in that tally too, so a read kind's
// requests are attributed to it even while writes and merges run in the same
// store. The engine keeps context values through its detached refreshes and
// cache loads (context.WithoutCancel), so a refresh shared by two readers is
// counted once, under the reader that started it.
type tally struct {
	mu    sync.Mutex
	ops   map[string]int64
	http  map[string]int64
	bytes atomic.Int64
}

func newTally() *tally { return &tally{ops: map[string]int64{}, http: map[string]int64{}} }

func (t *tally) addOp(k string) {
	t.mu.Lock()
	t.ops[k]++
	t.mu.Unlock()
}

func (t *tally) addHTTP(k string) {
	t.mu.Lock()
	t.http[k]++
	t.mu.Unlock()
}

// snap is a copy of a tally at one moment; differences of snaps measure a
// phase.
type snap struct {
	ops, http map[string]int64
	bytes     int64
}

func (t *tally) snap() snap {
	t.mu.Lock()
	defer t.mu.Unlock()
	return snap{ops: maps.Clone(t.ops), http: maps.Clone(t.http), bytes: t.bytes.Load()}
}

func (s snap) sub(o snap) snap {
	d := snap{ops: map[string]int64{}, http: map[string]int64{}, bytes: s.bytes - o.bytes}
	for k, v := range s.ops {
		if n := v - o.ops[k]; n != 0 {
			d.ops[k] = n
		}
	}
	for k, v := range s.http {
		if n := v - o.http[k]; n != 0 {
			d.http[k] = n
		}
	}
	return d
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// perUnit renders counts divided by n, largest first: "1.00 GetRange
// payload, 1.00 Head manifest".
func perUnit(m map[string]int64, n int) string {
	if n <= 0 || len(m) == 0 {
		return "—"
	}
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return int(m[b] - m[a])
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := float64(m[k]) / float64(n)
		f := trimFloat(v)
		if v < 0.005 {
			f = "<0.01"
		}
		parts = append(parts, fmt.Sprintf("%s %s", f, k))
	}
	return strings.Join(parts, " + ")
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

type tallyKey struct{}

func withTally(ctx context.Context, t *tally) context.Context {
	return context.WithValue(ctx, tallyKey{}, t)
}

func tallyOf(ctx context.Context) *tally {
	t, _ := ctx.Value(tallyKey{}).(*tally)
	return t
}

// newCountingBucket wraps b so that every objstore call is counted into
// all and into the tally of the call's context, by operation and by what
// its key is. Leases pass through (and are counted when acquired), so the
// bench's engines own their shards and the merger lease as the service's
// do. rec, when not nil (the merger process), records what merge passes
// read and write.
func newCountingBucket(b objstore.Bucket, all *tally, rec *ioRecorder) objstore.Bucket {
	c := &callCounter{all: all, rec: rec}
	return metered.Wrap(b, metered.Options{Observe: c.observe})
}

// callCounter is the observer of a counting bucket.
type callCounter struct {
	all *tally
	rec *ioRecorder
}

// observe counts a call under the bench's names: Put and PutIfAbsent
// apart, a conditional delete as a Delete, a DeleteMany under its first
// key's class; the renewals and releases of leases are not counted.
func (c *callCounter) observe(ctx context.Context, call *metered.Call) {
	var op, class string
	switch call.Op {
	case metered.OpGet:
		op, class = "Get", keyClass(call.Key)
		if c.rec != nil && (class == "segment" || class == "data-file") {
			key := call.Key
			call.WrapBody = func(rc io.ReadCloser) io.ReadCloser { return c.rec.input(key, rc) }
		}
	case metered.OpGetRange:
		op, class = "GetRange", keyClass(call.Key)
		if sp, ok := ctx.Value(spanKey{}).(*span); ok {
			*sp = span{key: call.Key, off: call.Offset, n: call.Length}
		}
	case metered.OpHead:
		op, class = "Head", keyClass(call.Key)
	case metered.OpPut:
		op, class = "Put", keyClass(call.Key)
		if call.PutOptions.IfNotExists {
			op = "PutIfAbsent"
		}
		if c.rec != nil && (class == "data-file" || class == "data-index") {
			call.Body = c.rec.output(call.Body, call.PutOptions.Size)
		}
	case metered.OpDelete, metered.OpDeleteIfMatch:
		op, class = "Delete", keyClass(call.Key)
	case metered.OpDeleteMany:
		if len(call.Keys) == 0 {
			return
		}
		op, class = "DeleteMany", keyClass(call.Keys[0])
	case metered.OpList:
		op, class = "List", prefixClass(call.Key)
	case metered.OpAcquireLease:
		op, class = "Lease", keyClass(call.Key)
	default:
		return
	}
	c.note(ctx, op, class)
}

func (c *callCounter) note(ctx context.Context, op, class string) {
	k := op + " " + class
	c.all.addOp(k)
	if t := tallyOf(ctx); t != nil {
		t.addOp(k)
	}
}

// span is the last ranged GET of a read made with withSpan: for a payload
// read, where its bytes are in the store.
type span struct {
	key    string
	off, n int64
}

type spanKey struct{}

func withSpan(ctx context.Context, sp *span) context.Context {
	return context.WithValue(ctx, spanKey{}, sp)
}

// keyClass names what a key is in a table's key space, using the engine's
// own keyspace package (the one place keys are built).
func keyClass(key string) string {
	name, ok := keyspace.TableFromKey(key)
	if !ok {
		return "other"
	}
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return "other"
	}
	if key == lay.Descriptor() {
		return "descriptor"
	}
	incName, ok := lay.ParseIncarnation(key)
	if !ok {
		return "other"
	}
	inc, err := lay.Incarnation(incName)
	if err != nil {
		return "other"
	}
	if _, ok := inc.ParseVersion(key); ok {
		return "manifest"
	}
	if _, isIndex, ok := inc.ParseDataObject(key); ok {
		if isIndex {
			return "data-index"
		}
		return "data-file"
	}
	if key == inc.Members() {
		return "members"
	}
	if k, ok := inc.ParseWAL(key); ok {
		switch {
		case k.Registry:
			return "registry"
		case k.IsHead:
			return "head"
		case k.IsSeal:
			return "seal"
		case k.IsOther:
			return "wal-other"
		}
		return "segment"
	}
	if inc.IsPayload(key) {
		return "payload-object"
	}
	if strings.HasPrefix(key, inc.LeasesPrefix()) {
		return "lease"
	}
	return "other"
}

func prefixClass(prefix string) string {
	name, ok := keyspace.TableFromKey(prefix)
	if !ok {
		return "root"
	}
	lay, err := keyspace.ForTable(name)
	if err != nil {
		return "other"
	}
	if prefix == lay.Root() {
		return "table/"
	}
	incName, ok := lay.ParseIncarnation(prefix)
	if !ok {
		return "other/"
	}
	inc, _ := lay.Incarnation(incName)
	switch {
	case prefix == inc.WALPrefix():
		return "wal/"
	case strings.HasPrefix(prefix, inc.WALPrefix()):
		return "generation/"
	case prefix == inc.VersionsPrefix():
		return "versions/"
	case prefix == inc.DataPrefix():
		return "data/"
	case prefix == inc.PayloadsPrefix():
		return "payloads/"
	case prefix == inc.Root():
		return "incarnation/"
	}
	return "other/"
}

// countingTransport counts HTTP requests and response body bytes, globally
// and per context tally.
type countingTransport struct {
	next http.RoundTripper
	all  *tally
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	k := restOp(req)
	c.all.addHTTP(k)
	t := tallyOf(req.Context())
	if t != nil {
		t.addHTTP(k)
	}
	resp, err := c.next.RoundTrip(req)
	if err == nil && resp.Body != nil {
		resp.Body = &countingBody{rc: resp.Body, all: c.all, t: t}
	}
	return resp, err
}

// restOp names a Blob service REST operation from its method and query.
func restOp(r *http.Request) string {
	q := r.URL.Query()
	comp, restype := q.Get("comp"), q.Get("restype")
	ranged := r.Header.Get("x-ms-range") != "" || r.Header.Get("Range") != ""
	switch r.Method {
	case http.MethodGet:
		switch {
		case comp == "list":
			return "List Blobs"
		case restype == "container":
			return "Get Container Properties"
		case comp != "":
			return "GET ?comp=" + comp
		case ranged:
			return "Get Blob (range)"
		}
		return "Get Blob"
	case http.MethodHead:
		if restype == "container" {
			return "Get Container Properties"
		}
		return "Get Blob Properties"
	case http.MethodPut:
		switch {
		case restype == "container":
			return "Create Container"
		case comp == "block":
			return "Put Block"
		case comp == "blocklist":
			return "Put Block List"
		case comp != "":
			return "PUT ?comp=" + comp
		}
		return "Put Blob"
	case http.MethodDelete:
		if restype == "container" {
			return "Delete Container"
		}
		return "Delete Blob"
	case http.MethodPost:
		if comp == "batch" {
			return "Blob Batch"
		}
	}
	return r.Method + " ?comp=" + comp
}

type countingBody struct {
	rc  io.ReadCloser
	all *tally
	t   *tally
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if n > 0 {
		b.all.bytes.Add(int64(n))
		if b.t != nil {
			b.t.bytes.Add(int64(n))
		}
	}
	return n, err
}

func (b *countingBody) Close() error { return b.rc.Close() }

// ioRecorder records the data a merge pass moves: the objects it reads
// whole (WAL segments; base files it compacts) and the bytes of the data
// files and indexes it writes. The merger process is the only user of its
// store, so between reset and report everything recorded is the pass's.
type ioRecorder struct {
	mu       sync.Mutex
	inputs   []string
	inBytes  atomic.Int64
	outBytes int64
	outFiles int
}

func (r *ioRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inputs, r.outBytes, r.outFiles = nil, 0, 0
	r.inBytes.Store(0)
}

func (r *ioRecorder) input(key string, rc io.ReadCloser) io.ReadCloser {
	r.mu.Lock()
	r.inputs = append(r.inputs, key)
	r.mu.Unlock()
	return &countedBody{rc: rc, n: &r.inBytes}
}

// output counts a data object's bytes: its declared size when known (the
// reader is passed through unchanged, so the store takes the same upload
// path), else as they are read.
func (r *ioRecorder) output(body io.Reader, size int64) io.Reader {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outFiles++
	if size >= 0 {
		r.outBytes += size
		return body
	}
	return &countedReader{r: body, add: func(n int) {
		r.mu.Lock()
		r.outBytes += int64(n)
		r.mu.Unlock()
	}}
}

func (r *ioRecorder) report(res engine.MergeResult, started time.Time) *passReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &passReport{Result: res, Inputs: slices.Clone(r.inputs), InBytes: r.inBytes.Load(), OutBytes: r.outBytes,
		OutFiles: r.outFiles, Started: started}
}

type countedBody struct {
	rc io.ReadCloser
	n  *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countedBody) Close() error { return b.rc.Close() }

type countedReader struct {
	r   io.Reader
	add func(int)
}

func (c *countedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.add(n)
	return n, err
}
