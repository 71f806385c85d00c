package metered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/metered"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// wrap wraps b with fresh metrics and an observer that sees every call, so
// the suites exercise every path of the wrapper.
func wrap(t *testing.T, b objstore.Bucket) objstore.Bucket {
	t.Helper()
	m := metered.NewMetrics()
	if err := prometheus.NewRegistry().Register(m); err != nil {
		t.Fatal(err)
	}
	return metered.Wrap(b, metered.Options{Metrics: m, Observe: func(_ context.Context, c *metered.Call) {
		if c.Op == "" {
			t.Errorf("call without an operation: %+v", c)
		}
	}})
}

func TestConformanceMemory(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return wrap(t, memory.New()) })
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket { return wrap(t, memory.New()) })
}

func TestConformanceLocal(t *testing.T) {
	open := func(t *testing.T) objstore.Bucket {
		b, err := local.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return wrap(t, b)
	}
	objstoretest.Run(t, open, objstoretest.PathKeys())
	objstoretest.RunLeases(t, open, objstoretest.PathKeys())
}

// TestConformanceAzure runs against Azurite (skipped without one).
func TestConformanceAzure(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return wrap(t, azuritetest.Bucket(t)) })
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket { return wrap(t, azuritetest.Bucket(t)) })
}

// TestCapabilities: the wrapper leases exactly when its inner bucket does.
func TestCapabilities(t *testing.T) {
	if _, ok := metered.Wrap(memory.New(), metered.Options{}).(objstore.Leaser); !ok {
		t.Fatal("the wrapper of a Leaser hides AcquireLease")
	}
	plain := struct{ objstore.Bucket }{memory.New()}
	if _, ok := metered.Wrap(plain, metered.Options{}).(objstore.Leaser); ok {
		t.Fatal("the wrapper of a bucket that cannot lease claims it can")
	}
}

func TestMetrics(t *testing.T) {
	ctx := context.Background()
	m := metered.NewMetrics()
	var seen []string
	b := metered.Wrap(memory.New(), metered.Options{Metrics: m, Observe: func(_ context.Context, c *metered.Call) {
		seen = append(seen, string(c.Op)+" "+c.Key)
	}})
	ops := func(op metered.Op) float64 {
		return testutil.ToFloat64(collectorOf(t, m, "rollstore_store_operations_total", "operation", string(op)))
	}
	failures := func(op metered.Op, kind string) float64 {
		return testutil.ToFloat64(collectorOf(t, m, "rollstore_store_operation_failures_total", "operation", string(op), "kind", kind))
	}

	if _, err := b.Put(ctx, "a", strings.NewReader("hello"), objstore.PutOptions{Size: 5}); err != nil {
		t.Fatal(err)
	}
	// A body of unknown size that cannot seek is counted as it is read.
	if _, err := b.Put(ctx, "b", io.MultiReader(strings.NewReader("abc")), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "a", strings.NewReader("x"), objstore.PutOptions{IfNotExists: true, Size: 1}); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("create-if-absent over a key: %v", err)
	}
	data, _, err := objstore.ReadAll(ctx, b, "a", 100)
	if err != nil || string(data) != "hello" {
		t.Fatalf("read back %q, %v", data, err)
	}
	rc, err := b.GetRange(ctx, "a", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(rc); string(got) != "el" {
		t.Fatalf("range read %q", got)
	}
	rc.Close()
	if _, err := b.Head(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("head of a missing key: %v", err)
	}
	if _, _, err := b.Get(ctx, "missing"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("get of a missing key: %v", err)
	}
	if err := b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteIfMatch(ctx, "a", "no-such-etag"); !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("delete-if-match with a stale etag: %v", err)
	}
	if err := b.DeleteMany(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	l, err := b.(objstore.Leaser).AcquireLease(ctx, "lease", 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.(objstore.Leaser).AcquireLease(ctx, "lease", 15*time.Second); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("second acquire: %v", err)
	}
	if l.Duration() != 15*time.Second {
		t.Fatalf("lease duration %v", l.Duration())
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for op, want := range map[metered.Op]float64{
		metered.OpPut: 3, metered.OpGet: 2, metered.OpGetRange: 1, metered.OpHead: 1, metered.OpList: 1,
		metered.OpDeleteIfMatch: 1, metered.OpDeleteMany: 1, metered.OpDelete: 1,
		metered.OpAcquireLease: 2, metered.OpRenewLease: 1, metered.OpReleaseLease: 1,
	} {
		if got := ops(op); got != want {
			t.Errorf("%s: %v calls counted, want %v", op, got, want)
		}
	}
	for _, f := range []struct {
		op   metered.Op
		kind string
		want float64
	}{
		{metered.OpPut, metered.KindPrecondition, 1},
		{metered.OpHead, metered.KindNotFound, 1},
		{metered.OpGet, metered.KindNotFound, 1},
		{metered.OpDeleteIfMatch, metered.KindPrecondition, 1},
		{metered.OpAcquireLease, metered.KindLeased, 1},
		{metered.OpGet, metered.KindOther, 0},
	} {
		if got := failures(f.op, f.kind); got != f.want {
			t.Errorf("%s %s: %v failures, want %v", f.op, f.kind, got, f.want)
		}
	}
	if got := testutil.ToFloat64(collectorOf(t, m, "rollstore_store_written_bytes_total", "operation", "put")); got != 8 {
		t.Errorf("written bytes %v, want 8 (5 declared, 3 counted)", got)
	}
	if got := testutil.ToFloat64(collectorOf(t, m, "rollstore_store_read_bytes_total", "operation", "get")); got != 5 {
		t.Errorf("bytes read by get %v, want 5", got)
	}
	if got := testutil.ToFloat64(collectorOf(t, m, "rollstore_store_read_bytes_total", "operation", "get_range")); got != 2 {
		t.Errorf("bytes read by get_range %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(registry(t, m), "rollstore_store_operation_duration_seconds"); err != nil || n != len(metered.Ops) {
		t.Errorf("%d duration series (%v), want one per operation", n, err)
	}
	if len(seen) != 15 || seen[0] != "put a" || seen[len(seen)-1] != "release_lease lease" {
		t.Errorf("observer saw %d calls: %q", len(seen), seen)
	}
}

func TestKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("get x: %w", objstore.ErrNotFound), metered.KindNotFound},
		{objstore.ErrPrecondition, metered.KindPrecondition},
		{objstore.ErrLeased, metered.KindLeased},
		{objstore.ErrLeaseLost, metered.KindLeased},
		{fmt.Errorf("put: %w", context.Canceled), metered.KindCanceled},
		{objstore.ErrThrottled, metered.KindOther},
		{context.DeadlineExceeded, metered.KindOther},
	} {
		if got := metered.Kind(c.err); got != c.want {
			t.Errorf("Kind(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestObserverWraps: an observer may replace a Put's body and wrap a read's.
func TestObserverWraps(t *testing.T) {
	ctx := context.Background()
	b := metered.Wrap(memory.New(), metered.Options{Observe: func(_ context.Context, c *metered.Call) {
		switch c.Op {
		case metered.OpPut:
			c.Body = io.MultiReader(c.Body, strings.NewReader("!"))
		case metered.OpGet:
			c.WrapBody = func(rc io.ReadCloser) io.ReadCloser {
				return struct {
					io.Reader
					io.Closer
				}{io.MultiReader(rc, strings.NewReader("?")), rc}
			}
		}
	}})
	if _, err := b.Put(ctx, "k", bytes.NewReader([]byte("hi")), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	data, _, err := objstore.ReadAll(ctx, b, "k", 100)
	if err != nil || string(data) != "hi!?" {
		t.Fatalf("read %q, %v; want the observer's additions", data, err)
	}
}

func registry(t *testing.T, c prometheus.Collector) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	return reg
}

// collectorOf returns the series of name with the given labels, as a
// collector testutil can read.
func collectorOf(t *testing.T, m *metered.Metrics, name string, labels ...string) prometheus.Collector {
	t.Helper()
	mfs, err := registry(t, m).Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range s.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if len(got) != len(want) {
				continue
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			v := s.GetCounter().GetValue()
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return v })
		}
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "x", Help: "x"}, func() float64 { return 0 })
}
