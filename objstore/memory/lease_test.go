package memory_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

// clock is a fake time source that moves only when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const leaseFor = 15 * time.Second

func acquire(t *testing.T, b *memory.Bucket, key string) objstore.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), key, leaseFor)
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

// TestLeaseExpiry: a lease excludes others until exactly its period has
// passed; then a new owner can take it, and the old one has lost it.
func TestLeaseExpiry(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	b := memory.New(memory.WithClock(clk.Now))
	old := acquire(t, b, "lease")

	clk.Advance(leaseFor - time.Nanosecond)
	_, err := b.AcquireLease(ctx, "lease", leaseFor)
	wantErr(t, "AcquireLease just before expiry", err, objstore.ErrLeased)

	clk.Advance(time.Nanosecond)
	cur := acquire(t, b, "lease")
	wantErr(t, "Renew by the expired owner", old.Renew(ctx), objstore.ErrLeaseLost)
	if err := old.Release(ctx); err != nil {
		t.Fatalf("Release by the expired owner: %v", err)
	}
	_, err = b.AcquireLease(ctx, "lease", leaseFor)
	wantErr(t, "AcquireLease after the expired owner's Release", err, objstore.ErrLeased)
	if err := cur.Renew(ctx); err != nil {
		t.Fatalf("Renew by the new owner: %v", err)
	}
}

// TestLeaseRenewAfterExpiry: as on Azure, a lease that expired but that
// nobody took renews, for a full period from the renewal.
func TestLeaseRenewAfterExpiry(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	b := memory.New(memory.WithClock(clk.Now))
	l := acquire(t, b, "lease")
	clk.Advance(time.Hour)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew of an expired lease nobody took: %v", err)
	}
	clk.Advance(leaseFor - time.Nanosecond)
	_, err := b.AcquireLease(ctx, "lease", leaseFor)
	wantErr(t, "AcquireLease before the renewed period ends", err, objstore.ErrLeased)
	clk.Advance(time.Nanosecond)
	acquire(t, b, "lease")
}

// TestLeaseEndedByWrite: as on Azure, writing or deleting an object whose
// lease has expired ends the lease, so its holder cannot renew it.
func TestLeaseEndedByWrite(t *testing.T) {
	ctx := t.Context()
	for _, write := range []struct {
		name string
		fn   func(b *memory.Bucket) error
	}{
		{"Put", func(b *memory.Bucket) error {
			_, err := b.Put(ctx, "lease", strings.NewReader("x"), objstore.PutOptions{})
			return err
		}},
		{"Delete", func(b *memory.Bucket) error { return b.Delete(ctx, "lease") }},
		{"DeleteMany", func(b *memory.Bucket) error { return b.DeleteMany(ctx, []string{"lease"}) }},
	} {
		t.Run(write.name, func(t *testing.T) {
			clk := newClock()
			b := memory.New(memory.WithClock(clk.Now))
			l := acquire(t, b, "lease")
			wantErr(t, write.name+" while leased", write.fn(b), objstore.ErrLeased)
			clk.Advance(leaseFor)
			if err := write.fn(b); err != nil {
				t.Fatalf("%s after expiry: %v", write.name, err)
			}
			wantErr(t, "Renew after the object was written", l.Renew(ctx), objstore.ErrLeaseLost)
		})
	}
}

// TestLeaseFailedWriteKeepsLease: a write refused by its condition does
// not touch the object, so an expired lease on it still renews.
func TestLeaseFailedWriteKeepsLease(t *testing.T) {
	ctx := t.Context()
	clk := newClock()
	b := memory.New(memory.WithClock(clk.Now))
	l := acquire(t, b, "lease")
	clk.Advance(leaseFor)
	_, err := b.Put(ctx, "lease", strings.NewReader("x"), objstore.PutOptions{IfNotExists: true})
	wantErr(t, "create-if-absent over the leased object", err, objstore.ErrPrecondition)
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew after a refused write: %v", err)
	}
}

// TestClockStampsObjects: WithClock also sets LastModified.
func TestClockStampsObjects(t *testing.T) {
	clk := newClock()
	b := memory.New(memory.WithClock(clk.Now))
	clk.Advance(time.Minute)
	a, err := b.Put(t.Context(), "k", strings.NewReader("v"), objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now(); !a.LastModified.Equal(want) {
		t.Errorf("LastModified = %v, want the clock's %v", a.LastModified, want)
	}
}
