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

// testDeleteIfMatch: a conditional delete removes exactly the object it
// names, and answers which way it failed otherwise (a drop deletes a
// descriptor only if no create replaced it meanwhile).
func testDeleteIfMatch(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	const key = "delif/obj"
	checkErr(t, "DeleteIfMatch of a missing key", b.DeleteIfMatch(ctx, key, `"0x1"`), objstore.ErrPrecondition)
	old := mustPut(t, b, key, []byte("old"), objstore.PutOptions{})
	cur := mustPut(t, b, key, []byte("new"), objstore.PutOptions{IfMatch: old.ETag})
	checkErr(t, "DeleteIfMatch with a replaced ETag", b.DeleteIfMatch(ctx, key, old.ETag), objstore.ErrPrecondition)
	checkContent(t, b, key, []byte("new"))
	if err := b.DeleteIfMatch(ctx, key, cur.ETag); err != nil {
		t.Fatalf("DeleteIfMatch with the current ETag: %v", err)
	}
	checkMissing(t, b, key)
	checkErr(t, "second DeleteIfMatch", b.DeleteIfMatch(ctx, key, cur.ETag), objstore.ErrPrecondition)
	// Created again under the same key: the old ETag removes nothing.
	again := mustPut(t, b, key, []byte("again"), objstore.PutOptions{IfNotExists: true})
	checkErr(t, "DeleteIfMatch of a re-created key with the old ETag", b.DeleteIfMatch(ctx, key, cur.ETag), objstore.ErrPrecondition)
	checkContent(t, b, key, []byte("again"))
	if err := b.DeleteIfMatch(ctx, key, again.ETag); err != nil {
		t.Fatalf("DeleteIfMatch of the re-created key: %v", err)
	}
	checkMissing(t, b, key)
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
