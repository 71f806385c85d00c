package objstoretest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

func testDelete(t *testing.T, b objstore.Bucket, c config) {
	ctx := t.Context()
	if err := b.Delete(ctx, "del/never-existed"); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}

	// A key below the deleted one must survive it, where keys can nest.
	below := "del/a/b"
	if c.pathKeys {
		below = "del/c/b"
	}
	for _, k := range []string{"del/a", "del/ab", below} {
		mustPut(t, b, k, content(k), objstore.PutOptions{})
	}
	if err := b.Delete(ctx, "del/a"); err != nil {
		t.Fatalf("Delete(del/a): %v", err)
	}
	checkMissing(t, b, "del/a")
	if err := b.Delete(ctx, "del/a"); err != nil {
		t.Errorf("second Delete(del/a): %v, want nil", err)
	}
	// Deleting a key that is only a prefix (a directory, to a file-system
	// backend) deletes nothing.
	if err := b.Delete(ctx, "del"); err != nil {
		t.Errorf("Delete(del), a prefix only: %v, want nil", err)
	}
	left := []string{"del/ab", below}
	for _, k := range left {
		checkContent(t, b, k, content(k))
	}
	checkKeys(t, "List after Delete", listKeys(t, b, "", objstore.ListOptions{}), slices.Sorted(slices.Values(left)))
}

func testDeleteMany(t *testing.T, b objstore.Bucket, c config) {
	ctx := t.Context()
	if err := b.DeleteMany(ctx, nil); err != nil {
		t.Errorf("DeleteMany(nil): %v", err)
	}
	keep := []string{"dm/keep", "dm/x1/keep"} // dm/x1 is deleted
	if c.pathKeys {
		keep[1] = "dm/x0/keep"
	}
	gone := []string{"dm/x1", "dm/x2", "dm/x3/y"}
	putMany(t, b, append(append([]string{}, keep...), gone...))

	mixed := append(append([]string{}, gone...), "dm/missing", "dm/x3/missing", "dm/x3")
	if err := b.DeleteMany(ctx, mixed); err != nil {
		t.Fatalf("DeleteMany(existing and missing): %v", err)
	}
	for _, k := range gone {
		checkMissing(t, b, k)
	}
	for _, k := range keep {
		checkContent(t, b, k, content(k))
	}
	checkKeys(t, "List after DeleteMany", listKeys(t, b, "dm/", objstore.ListOptions{}), keep)
	// All missing now: still success.
	if err := b.DeleteMany(ctx, gone); err != nil {
		t.Errorf("DeleteMany of deleted keys: %v", err)
	}
}

// testDeleteManyBatch deletes more keys than one Azure batch carries (256).
func testDeleteManyBatch(t *testing.T, b objstore.Bucket) {
	const n = 300
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("batch/%05d", i)
	}
	putMany(t, b, append(keys, "keeper"))
	if got := len(list(t, b, "batch/", objstore.ListOptions{})); got != n {
		t.Fatalf("List before DeleteMany: %d entries, want %d", got, n)
	}
	if err := b.DeleteMany(t.Context(), keys); err != nil {
		t.Fatalf("DeleteMany(%d keys): %v", n, err)
	}
	if left := listKeys(t, b, "batch/", objstore.ListOptions{}); len(left) != 0 {
		t.Errorf("after DeleteMany(%d keys), %d remain, first %q", n, len(left), left[0])
	}
	checkMissing(t, b, keys[0])
	checkMissing(t, b, keys[n-1])
	checkContent(t, b, "keeper", content("keeper"))
}
