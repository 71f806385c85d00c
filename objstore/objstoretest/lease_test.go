package objstoretest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// TestLeaseMutants is TestMutants for RunLeases.

const leaseMutantEnv = "OBJSTORETEST_LEASE_MUTANT"

// leaseMutant is the memory backend with a bug in its leases.
type leaseMutant struct {
	*memory.Bucket
	acquire func(ctx context.Context, key string, d time.Duration) (objstore.Lease, error)
	renew   func(ctx context.Context, l objstore.Lease) error
	release func(ctx context.Context, l objstore.Lease) error
}

func (m *leaseMutant) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	acquire := m.Bucket.AcquireLease
	if m.acquire != nil {
		acquire = m.acquire
	}
	l, err := acquire(ctx, key, d)
	if err != nil {
		return nil, err
	}
	return &mutantLease{Lease: l, m: m}, nil
}

type mutantLease struct {
	objstore.Lease
	m *leaseMutant
}

func (l *mutantLease) Renew(ctx context.Context) error {
	if l.m.renew != nil {
		return l.m.renew(ctx, l.Lease)
	}
	return l.Lease.Renew(ctx)
}

func (l *mutantLease) Release(ctx context.Context) error {
	if l.m.release != nil {
		return l.m.release(ctx, l.Lease)
	}
	return l.Lease.Release(ctx)
}

// phantom is a lease nobody holds.
type phantom struct{ d time.Duration }

func (phantom) Renew(context.Context) error   { return nil }
func (phantom) Release(context.Context) error { return nil }
func (p phantom) Duration() time.Duration     { return p.d }

var leaseMutants = map[string]struct {
	make  func() objstore.Bucket
	catch []string
}{
	"held lease granted again": {func() objstore.Bucket {
		m := &leaseMutant{Bucket: memory.New()}
		m.acquire = func(ctx context.Context, k string, d time.Duration) (objstore.Lease, error) {
			l, err := m.Bucket.AcquireLease(ctx, k, d)
			if errors.Is(err, objstore.ErrLeased) {
				return phantom{d}, nil
			}
			return l, err
		}
		return m
	}, []string{"AcquireRelease", "Renew", "StaleHolder", "AcquireRace", "Independent"}},

	"lost lease renews": {func() objstore.Bucket {
		return &leaseMutant{Bucket: memory.New(), renew: func(ctx context.Context, l objstore.Lease) error {
			if err := l.Renew(ctx); !errors.Is(err, objstore.ErrLeaseLost) {
				return err
			}
			return nil
		}}
	}, []string{"Renew", "StaleHolder"}},

	"release does nothing": {func() objstore.Bucket {
		return &leaseMutant{Bucket: memory.New(), release: func(context.Context, objstore.Lease) error { return nil }}
	}, []string{"AcquireRelease", "Renew", "StaleHolder", "WritesRefused", "AcquireRace"}},

	"durations unchecked": {func() objstore.Bucket {
		m := &leaseMutant{Bucket: memory.New()}
		m.acquire = func(ctx context.Context, k string, d time.Duration) (objstore.Lease, error) {
			return m.Bucket.AcquireLease(ctx, k, min(max(d.Round(time.Second), 15*time.Second), 60*time.Second))
		}
		return m
	}, []string{"Duration"}},

	"context ignored": {func() objstore.Bucket {
		m := &leaseMutant{Bucket: memory.New()}
		m.acquire = func(ctx context.Context, k string, d time.Duration) (objstore.Lease, error) {
			return m.Bucket.AcquireLease(context.WithoutCancel(ctx), k, d)
		}
		m.renew = func(ctx context.Context, l objstore.Lease) error { return l.Renew(context.WithoutCancel(ctx)) }
		m.release = func(ctx context.Context, l objstore.Lease) error { return l.Release(context.WithoutCancel(ctx)) }
		return m
	}, []string{"Canceled"}},
}

func TestLeaseMutants(t *testing.T) {
	if name := os.Getenv(leaseMutantEnv); name != "" {
		m, ok := leaseMutants[name]
		if !ok {
			t.Fatalf("no lease mutant %q", name)
		}
		objstoretest.RunLeases(t, func(*testing.T) objstore.Bucket { return m.make() })
		return
	}
	if testing.Short() {
		t.Skip("re-runs the suite once per mutant")
	}
	for name, m := range leaseMutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkCaught(t, "TestLeaseMutants", leaseMutantEnv, name, m.catch)
		})
	}
}

// TestLeaseSuiteNeedsLeaser: RunLeases fails, rather than passes, a bucket
// without leases.
func TestLeaseSuiteNeedsLeaser(t *testing.T) {
	if os.Getenv(leaseMutantEnv) == "no leases" {
		objstoretest.RunLeases(t, func(*testing.T) objstore.Bucket { return struct{ objstore.Bucket }{memory.New()} })
		return
	}
	if testing.Short() {
		t.Skip("runs the suite in a child process")
	}
	checkCaught(t, "TestLeaseSuiteNeedsLeaser", leaseMutantEnv, "no leases", []string{"AcquireRelease"})
}
