package objstoretest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// Clock is a fake time source that moves only when told to, for backends
// (and their users' tests) that take an injectable clock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock at a fixed instant.
func NewClock() *Clock { return &Clock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// expiryLease is the period of the expiry cases: Azure's shortest.
const expiryLease = 15 * time.Second

// RunLeaseExpiry runs the clock-driven lease cases: expiry, renewal after
// expiry, and the end of a lease by a write. open returns two views of one
// fresh store (two processes sharing it, or the same bucket twice) whose
// leases run on now.
func RunLeaseExpiry(t *testing.T, open func(t *testing.T, now func() time.Time) (a, b objstore.Bucket)) {
	views := func(t *testing.T) (*Clock, leaseBucket, leaseBucket) {
		clk := NewClock()
		a, b := open(t, clk.Now)
		la, okA := a.(leaseBucket)
		lb, okB := b.(leaseBucket)
		if !okA || !okB {
			t.Fatalf("%T does not implement objstore.Leaser", a)
		}
		return clk, la, lb
	}
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, views) })
	t.Run("RenewAfterExpiry", func(t *testing.T) { testRenewAfterExpiry(t, views) })
	t.Run("EndedByWrite", func(t *testing.T) { testEndedByWrite(t, views) })
}

type viewsFunc func(t *testing.T) (*Clock, leaseBucket, leaseBucket)

func acquireFor(t *testing.T, b leaseBucket, key string) objstore.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), key, expiryLease)
	if err != nil {
		t.Fatalf("AcquireLease(%q): %v", key, err)
	}
	return l
}

func wantErr(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: err = %v, want %v", what, err, sentinel)
	}
}

// testExpiry: a lease excludes others until exactly its period has passed;
// then a new owner can take it, and the old one has lost it.
func testExpiry(t *testing.T, views viewsFunc) {
	ctx := t.Context()
	clk, a, b := views(t)
	old := acquireFor(t, a, "lease")

	clk.Advance(expiryLease - time.Nanosecond)
	_, err := b.AcquireLease(ctx, "lease", expiryLease)
	wantErr(t, "AcquireLease just before expiry", err, objstore.ErrLeased)

	clk.Advance(time.Nanosecond)
	cur := acquireFor(t, b, "lease")
	wantErr(t, "Renew by the expired owner", old.Renew(ctx), objstore.ErrLeaseLost)
	if err := old.Release(ctx); err != nil {
		t.Fatalf("Release by the expired owner: %v", err)
	}
	_, err = a.AcquireLease(ctx, "lease", expiryLease)
	wantErr(t, "AcquireLease after the expired owner's Release", err, objstore.ErrLeased)
	if err := cur.Renew(ctx); err != nil {
		t.Fatalf("Renew by the new owner: %v", err)
	}
}

// testRenewAfterExpiry: as on Azure, a lease that expired but that nobody
// took renews, for a full period from the renewal.
func testRenewAfterExpiry(t *testing.T, views viewsFunc) {
	ctx := t.Context()
	clk, a, b := views(t)
	l := acquireFor(t, a, "lease")
	clk.Advance(time.Hour)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew of an expired lease nobody took: %v", err)
	}
	clk.Advance(expiryLease - time.Nanosecond)
	_, err := b.AcquireLease(ctx, "lease", expiryLease)
	wantErr(t, "AcquireLease before the renewed period ends", err, objstore.ErrLeased)
	clk.Advance(time.Nanosecond)
	acquireFor(t, b, "lease")
}

// testEndedByWrite: as on Azure, writing or deleting an object whose lease
// has expired ends the lease, so its holder cannot renew it; a write refused
// by its condition does not.
func testEndedByWrite(t *testing.T, views viewsFunc) {
	for _, write := range []struct {
		name  string
		fn    func(t *testing.T, b leaseBucket) error
		ended bool
	}{
		{"Put", func(t *testing.T, b leaseBucket) error {
			_, err := b.Put(t.Context(), "lease", strings.NewReader("x"), objstore.PutOptions{})
			return err
		}, true},
		{"Delete", func(t *testing.T, b leaseBucket) error { return b.Delete(t.Context(), "lease") }, true},
		{"DeleteMany", func(t *testing.T, b leaseBucket) error { return b.DeleteMany(t.Context(), []string{"lease"}) }, true},
		{"refused create", func(t *testing.T, b leaseBucket) error {
			_, err := b.Put(t.Context(), "lease", strings.NewReader("x"), objstore.PutOptions{IfNotExists: true})
			if errors.Is(err, objstore.ErrPrecondition) {
				return nil
			}
			return fmt.Errorf("create-if-absent over the leased object: %v, want ErrPrecondition", err)
		}, false},
	} {
		t.Run(write.name, func(t *testing.T) {
			clk, a, b := views(t)
			l := acquireFor(t, a, "lease")
			if err := write.fn(t, b); write.ended {
				wantErr(t, write.name+" while leased", err, objstore.ErrLeased)
			}
			clk.Advance(expiryLease)
			if err := write.fn(t, b); err != nil {
				t.Fatalf("%s after expiry: %v", write.name, err)
			}
			if err := l.Renew(t.Context()); write.ended {
				wantErr(t, "Renew after the object was written", err, objstore.ErrLeaseLost)
			} else if err != nil {
				t.Fatalf("Renew after a refused write: %v", err)
			}
		})
	}
}
