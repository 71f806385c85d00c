package faulty

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// TestConformance runs the suite through a wrapper with no rules: every
// call, attribute (content type, metadata) and error passes through.
func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket {
		fb := New(memory.New())
		t.Cleanup(fb.Reset)
		return fb
	})
}

func TestLeaseConformance(t *testing.T) {
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket {
		fb := New(memory.New())
		t.Cleanup(fb.Reset)
		return fb
	})
}

// clock is a fake time source that moves only when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

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

// TestPausedRenewLosesLease stalls an owner's renewal past its lease while
// another owner takes over: the renewal, once let through, reports the loss.
func TestPausedRenewLosesLease(t *testing.T) {
	ctx := guard(t)
	clk := &clock{now: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	fb := New(memory.New(memory.WithClock(clk.Now)))
	t.Cleanup(fb.Reset)

	owner, err := fb.AcquireLease(ctx, "_leases/shard-0", leaseFor)
	if err != nil {
		t.Fatal(err)
	}
	gate := fb.Pause(OpRenewLease, Before, Key("_leases/shard-0"))
	done := make(chan error, 1)
	go func() { done <- owner.Renew(ctx) }()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	pending(t, done)

	clk.Advance(leaseFor + time.Second)
	next, err := fb.AcquireLease(ctx, "_leases/shard-0", leaseFor)
	if err != nil {
		t.Fatalf("take-over after expiry: %v", err)
	}
	gate.Release()
	if err := recv(t, ctx, done); !errors.Is(err, objstore.ErrLeaseLost) {
		t.Fatalf("stalled Renew = %v, want ErrLeaseLost", err)
	}
	if err := next.Renew(ctx); err != nil {
		t.Errorf("new owner's Renew: %v", err)
	}
	if n := fb.Calls(OpRenewLease); n != 2 {
		t.Errorf("Calls(OpRenewLease) = %d, want 2", n)
	}
	if n := fb.Calls(OpAcquireLease); n != 2 {
		t.Errorf("Calls(OpAcquireLease) = %d, want 2", n)
	}
}

// TestFailLeaseCalls: rules fail lease calls before they reach the inner
// bucket, or lose their responses after.
func TestFailLeaseCalls(t *testing.T) {
	ctx := t.Context()
	fb, mem := setup(t)
	l, err := fb.AcquireLease(ctx, "lease", leaseFor)
	if err != nil {
		t.Fatal(err)
	}

	fb.Fail(OpRenewLease, Key("lease"), objstore.ErrThrottled)
	if err := l.Renew(ctx); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("failed Renew = %v, want ErrThrottled", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew after the one-shot fault: %v", err)
	}

	fb.Fail(OpReleaseLease, AnyKey, objstore.ErrThrottled)
	if err := l.Release(ctx); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("failed Release = %v, want ErrThrottled", err)
	}
	if _, err := mem.AcquireLease(ctx, "lease", leaseFor); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("a Release failed before the inner call released the lease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A lost response to an acquisition leaves the lease held, by nobody
	// who knows it.
	fb.LoseResponse(OpAcquireLease, Key("lease"), objstore.ErrThrottled)
	if _, err := fb.AcquireLease(ctx, "lease", leaseFor); !errors.Is(err, objstore.ErrThrottled) {
		t.Fatalf("AcquireLease with a lost response = %v, want ErrThrottled", err)
	}
	if _, err := fb.AcquireLease(ctx, "lease", leaseFor); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("AcquireLease after a lost response = %v, want ErrLeased", err)
	}
}

// TestLeaseUnsupported: over a bucket without leases, AcquireLease says so.
func TestLeaseUnsupported(t *testing.T) {
	fb := New(struct{ objstore.Bucket }{memory.New()})
	_, err := fb.AcquireLease(t.Context(), "lease", leaseFor)
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("AcquireLease over a bucket without leases = %v, want errors.ErrUnsupported", err)
	}
}
