package objstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestPrefixedConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket {
		b, err := objstore.Prefixed(memory.New(), "staging/run-1")
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket {
		b, err := objstore.Prefixed(memory.New(), "staging")
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func TestPrefixedIsolation(t *testing.T) {
	ctx := context.Background()
	inner := memory.New()
	a, _ := objstore.Prefixed(inner, "a")
	b, _ := objstore.Prefixed(inner, "b/")
	if _, err := a.Put(ctx, "k", nil, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("prefix b sees a's key: %v", err)
	}
	if _, err := inner.Head(ctx, "a/k"); err != nil {
		t.Fatalf("key not under its prefix: %v", err)
	}
	if _, err := a.(objstore.Leaser).AcquireLease(ctx, "l", 15*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := inner.AcquireLease(ctx, "a/l", 15*time.Second); !errors.Is(err, objstore.ErrLeased) {
		t.Fatalf("lease not taken under the prefix: %v", err)
	}
	if _, err := objstore.Prefixed(inner, "../x"); err == nil {
		t.Fatal("escaping prefix accepted")
	}
}
