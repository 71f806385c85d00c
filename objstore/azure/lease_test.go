package azure_test

import (
	"errors"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestLeaseConformance(t *testing.T) {
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket {
		return azuritetest.Bucket(t)
	})
}

// breakLease breaks the lease on key from a client of its own, at once, as
// an operator or a recovery tool would.
func breakLease(t *testing.T, containerName string, key string) {
	t.Helper()
	c, err := container.NewClientFromConnectionString(azuritetest.ConnectionString(t), containerName, nil)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := lease.NewBlobClient(c.NewBlobClient(key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lc.BreakLease(t.Context(), &lease.BlobBreakOptions{BreakPeriod: to.Ptr(int32(0))}); err != nil {
		t.Fatalf("BreakLease(%q): %v", key, err)
	}
}

// TestLeaseBroken stands in for expiry, which takes 15 s on the service: a
// broken lease is lost to its holder, and a new owner can take it at once.
func TestLeaseBroken(t *testing.T) {
	ctx := t.Context()
	b := open(t, nil)
	const key = "_leases/merger"
	old, err := b.AcquireLease(ctx, key, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	breakLease(t, b.Container(), key)

	if err := old.Renew(ctx); !errors.Is(err, objstore.ErrLeaseLost) {
		t.Fatalf("Renew of a broken lease = %v, want ErrLeaseLost", err)
	}
	cur, err := b.AcquireLease(ctx, key, 15*time.Second)
	if err != nil {
		t.Fatalf("AcquireLease of a broken lease: %v", err)
	}
	if err := old.Renew(ctx); !errors.Is(err, objstore.ErrLeaseLost) {
		t.Fatalf("Renew by the old owner after a take-over = %v, want ErrLeaseLost", err)
	}
	if err := old.Release(ctx); err != nil {
		t.Fatalf("Release by the old owner: %v, want nil", err)
	}
	if err := cur.Renew(ctx); err != nil {
		t.Fatalf("new owner's Renew after the old owner's Release: %v", err)
	}

	// A broken lease its holder releases is free again too.
	breakLease(t, b.Container(), key)
	if err := cur.Release(ctx); err != nil {
		t.Fatalf("Release of a broken lease: %v", err)
	}
	l, err := b.AcquireLease(ctx, key, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseMissingContainer: a missing container is reported as such by
// every lease call, never as a lease outcome.
func TestLeaseMissingContainer(t *testing.T) {
	ctx := t.Context()
	cfg := azuritetest.Config(t)
	b := azuritetest.Open(t, cfg)
	l, err := b.AcquireLease(ctx, "lease", 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	azuritetest.DeleteContainer(t, cfg.ConnectionString, cfg.Container)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrContainerNotFound) || errors.Is(err, objstore.ErrLeaseLost) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s: %v, want ErrContainerNotFound only", what, err)
		}
	}
	check("Renew", l.Renew(ctx))
	check("Release", l.Release(ctx))
	_, err = b.AcquireLease(ctx, "lease", 15*time.Second)
	check("AcquireLease", err)
}
