package memory_test

import (
	"bytes"
	"errors"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return memory.New() })
}

func TestConformancePrefixed(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket {
		b, err := objstore.Prefixed(memory.New(), "staging/run1")
		if err != nil {
			t.Fatal(err)
		}
		return b
	})
}

func put(t *testing.T, b *memory.Bucket, key, data string) objstore.Attrs {
	t.Helper()
	a, err := b.Put(t.Context(), key, strings.NewReader(data), objstore.PutOptions{Size: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestKeysLen(t *testing.T) {
	b := memory.New()
	if b.Len() != 0 || len(b.Keys()) != 0 {
		t.Fatalf("new bucket: Len %d, Keys %q", b.Len(), b.Keys())
	}
	for _, k := range []string{"b", "a/2", "a/10"} {
		put(t, b, k, k)
	}
	if want := []string{"a/10", "a/2", "b"}; !slices.Equal(b.Keys(), want) {
		t.Errorf("Keys = %q, want %q", b.Keys(), want)
	}
	if err := b.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 2 {
		t.Errorf("Len after Delete = %d, want 2", b.Len())
	}
}

func TestETagShape(t *testing.T) {
	b := memory.New()
	shape := regexp.MustCompile(`^"0x[0-9A-F]+"$`)
	seen := map[string]bool{}
	for range 3 {
		a := put(t, b, "k", "v")
		if !shape.MatchString(a.ETag) || seen[a.ETag] {
			t.Errorf("ETag %s: want a fresh quoted hex ETag like Azure's", a.ETag)
		}
		seen[a.ETag] = true
	}
	// Deleting and recreating must not bring an old ETag back, or a stale
	// If-Match could win.
	if err := b.Delete(t.Context(), "k"); err != nil {
		t.Fatal(err)
	}
	if a := put(t, b, "k", "v"); seen[a.ETag] {
		t.Errorf("recreated object reuses ETag %s", a.ETag)
	}
}

// TestSnapshot: an open body keeps reading the bytes it was opened on, across
// an overwrite as across a delete.
func TestSnapshot(t *testing.T) {
	ctx := t.Context()
	b := memory.New()
	put(t, b, "k", "old contents")
	rc, _, err := b.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	put(t, b, "k", "new")
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != "old contents" {
		t.Errorf("body opened before overwrite read %q, %v", got, err)
	}
}

func TestReadAfterClose(t *testing.T) {
	b := memory.New()
	put(t, b, "k", "data")
	rc, err := b.GetRange(t.Context(), "k", 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if n, err := rc.Read(make([]byte, 4)); err == nil {
		t.Errorf("Read after Close = %d, nil; want an error", n)
	}
}

// TestAliasing: neither the caller's inputs nor the returned attributes are
// shared with what is stored.
func TestAliasing(t *testing.T) {
	ctx := t.Context()
	b := memory.New()
	md := map[string]string{"k": "v"}
	data := []byte("data")
	if _, err := b.Put(ctx, "o", bytes.NewReader(data), objstore.PutOptions{Metadata: md}); err != nil {
		t.Fatal(err)
	}
	md["k"] = "changed"
	data[0] = 'X'
	a, err := b.Head(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	a.Metadata["k"] = "changed via attrs"
	rc, a, err := b.Get(ctx, "o")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	if string(got) != "data" || a.Metadata["k"] != "v" {
		t.Errorf("stored object changed through aliases: %q, %v", got, a.Metadata)
	}
}

func TestSizeMismatch(t *testing.T) {
	b := memory.New()
	for _, size := range []int64{3, 5} {
		_, err := b.Put(t.Context(), "k", strings.NewReader("four"), objstore.PutOptions{Size: size})
		if err == nil {
			t.Errorf("Put of 4 bytes declared as %d succeeded", size)
		}
	}
	if b.Len() != 0 {
		t.Errorf("a refused Put stored %q", b.Keys())
	}
	// -1 and 0 both mean "not declared".
	for _, size := range []int64{-1, 0} {
		if _, err := b.Put(t.Context(), "k", strings.NewReader("four"), objstore.PutOptions{Size: size}); err != nil {
			t.Errorf("Put with Size %d: %v", size, err)
		}
	}
}

func TestHugeLength(t *testing.T) {
	b := memory.New()
	put(t, b, "k", "0123456789")
	rc, err := b.GetRange(t.Context(), "k", 4, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := io.ReadAll(rc); string(got) != "456789" {
		t.Errorf("GetRange(4, MaxInt64) = %q", got)
	}
}

func TestBodyError(t *testing.T) {
	b := memory.New()
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("part"), errReader{boom})
	if _, err := b.Put(t.Context(), "k", r, objstore.PutOptions{Size: -1}); !errors.Is(err, boom) {
		t.Errorf("Put with a failing body: err = %v, want it wrapped", err)
	}
	if b.Len() != 0 {
		t.Errorf("a failed Put stored %q", b.Keys())
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func TestLeaseConformance(t *testing.T) {
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket { return memory.New() })
}
