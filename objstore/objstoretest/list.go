package objstoretest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

var (
	flat      = objstore.ListOptions{}
	delimited = objstore.ListOptions{Delimited: true}
)

func testList(t *testing.T, b objstore.Bucket) {
	keys := []string{"a/1", "a/2", "a/10", "ab", "b/x"}
	sizes := map[string]int{}
	for i, k := range keys {
		data := make([]byte, 10*i+1) // distinct sizes
		sizes[k] = len(data)
		mustPut(t, b, k, data, objstore.PutOptions{})
	}

	for _, c := range []struct {
		prefix string
		want   []string
	}{
		{"", []string{"a/1", "a/10", "a/2", "ab", "b/x"}},
		{"a/", []string{"a/1", "a/10", "a/2"}},
		// A prefix is a string prefix, not a directory.
		{"a", []string{"a/1", "a/10", "a/2", "ab"}},
		{"a/1", []string{"a/1", "a/10"}},
		{"ab", []string{"ab"}},
		{"b/x", []string{"b/x"}},
		{"c/", nil},
		{"a/3", nil},
	} {
		checkKeys(t, fmt.Sprintf("List(%q)", c.prefix), listKeys(t, b, c.prefix, flat), c.want)
	}

	for _, e := range list(t, b, "", flat) {
		if e.IsPrefix || e.Size != int64(sizes[e.Key]) || e.LastModified.IsZero() {
			t.Errorf("List entry %+v; want IsPrefix false, Size %d, a LastModified", e, sizes[e.Key])
		}
	}
}

func testListDelimited(t *testing.T, b objstore.Bucket) {
	keys := []string{
		"a/1", "a/10", "a/2", "a/sub/1", "a/sub/2", "a/sub/deep/x",
		"a/sub2/x", "a/sub-x", "ab", "b/x",
	}
	putMany(t, b, keys)

	for _, c := range []struct {
		prefix string
		want   []string
	}{
		// Objects and folded prefixes interleave in lexical order:
		// '-' < '/' < '2'.
		{"a/", []string{"a/1", "a/10", "a/2", "a/sub-x", "a/sub/", "a/sub2/"}},
		{"", []string{"a/", "ab", "b/"}},
		{"a/sub/", []string{"a/sub/1", "a/sub/2", "a/sub/deep/"}},
		{"a/sub/deep/", []string{"a/sub/deep/x"}},
		// Without a trailing slash the fold is still at the next '/'.
		{"a", []string{"a/", "ab"}},
		{"a/sub", []string{"a/sub-x", "a/sub/", "a/sub2/"}},
		{"c/", nil},
	} {
		checkKeys(t, fmt.Sprintf("List(%q, Delimited)", c.prefix), listKeys(t, b, c.prefix, delimited), c.want)
	}

	for _, e := range list(t, b, "a/", delimited) {
		if !e.IsPrefix && e.Size != int64(len(content(e.Key))) {
			t.Errorf("List(a/, Delimited): %s has Size %d, want %d", e.Key, e.Size, len(content(e.Key)))
		}
	}
}

// testListOrder checks lexical order where a file-system walk or a numeric
// sort would differ: zero-padded numbers, and the bytes that sort around '/'.
func testListOrder(t *testing.T, b objstore.Bucket) {
	nums := []int{12345, 1, 100, 10, 9, 2, 11}
	var keys []string
	for _, n := range nums {
		keys = append(keys, fmt.Sprintf("n/%020d", n))
	}
	// '-' 0x2d and '.' 0x2e sort before '/' 0x2f; '0' and '_' after.
	keys = append(keys, "o/a_d", "o/a/1", "o/a0", "o/a.c", "o/a-b", "o/a/0/z")
	rand.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	putMany(t, b, keys)

	slices.Sort(nums)
	var wantN []string
	for _, n := range nums {
		wantN = append(wantN, fmt.Sprintf("n/%020d", n))
	}
	checkKeys(t, `List("n/")`, listKeys(t, b, "n/", flat), wantN)
	checkKeys(t, `List("o/")`, listKeys(t, b, "o/", flat),
		[]string{"o/a-b", "o/a.c", "o/a/0/z", "o/a/1", "o/a0", "o/a_d"})
	checkKeys(t, `List("o/", Delimited)`, listKeys(t, b, "o/", delimited),
		[]string{"o/a-b", "o/a.c", "o/a/", "o/a0", "o/a_d"})
	checkKeys(t, `List("", Delimited)`, listKeys(t, b, "", delimited), []string{"n/", "o/"})
}

func testListStop(t *testing.T, b objstore.Bucket) {
	putMany(t, b, []string{"s/1", "s/2", "s/3", "s/4/x", "s/5/x"})
	errStop := errors.New("stop here")
	for _, c := range []struct {
		opts    objstore.ListOptions
		stopAt  int
		stopKey string
	}{
		{flat, 2, "s/2"},
		{delimited, 4, "s/4/"}, // stopping on a folded prefix
	} {
		var seen []string
		err := b.List(t.Context(), "s/", c.opts, func(e objstore.Entry) error {
			seen = append(seen, e.Key)
			if len(seen) == c.stopAt {
				return fmt.Errorf("at %s: %w", e.Key, errStop)
			}
			return nil
		})
		what := fmt.Sprintf("List(%+v) stopped at entry %d", c.opts, c.stopAt)
		checkErr(t, what, err, errStop)
		if len(seen) != c.stopAt || seen[len(seen)-1] != c.stopKey {
			t.Errorf("%s: fn saw %q, want it to stop at %q", what, seen, c.stopKey)
		}
	}
}

// testListCancel cancels the context from inside fn: List must stop before
// the next entry, even when the rest of the page is already in hand.
func testListCancel(t *testing.T, b objstore.Bucket) {
	putMany(t, b, []string{"lc/1", "lc/2", "lc/3", "lc/4", "lc/5"})
	for _, opts := range []objstore.ListOptions{flat, delimited} {
		ctx, cancel := context.WithCancel(t.Context())
		calls := 0
		err := b.List(ctx, "lc/", opts, func(objstore.Entry) error {
			calls++
			cancel()
			return nil
		})
		cancel()
		checkErr(t, fmt.Sprintf("List(%+v) cancelled in fn", opts), err, context.Canceled)
		if calls != 1 {
			t.Errorf("List(%+v) cancelled in fn: fn called %d times, want 1", opts, calls)
		}
	}
}

// testListMutate deletes each key from inside fn, as a reclaim does. Every
// key is still listed exactly once, and List must not hold a lock that the
// Delete needs.
func testListMutate(t *testing.T, b objstore.Bucket) {
	const n = 20
	var keys []string
	for i := range n {
		keys = append(keys, fmt.Sprintf("lm/%02d", i))
	}
	putMany(t, b, append(keys, "other"))

	type result struct {
		seen []string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		ctx := t.Context()
		r.err = b.List(ctx, "lm/", flat, func(e objstore.Entry) error {
			r.seen = append(r.seen, e.Key)
			return b.Delete(ctx, e.Key)
		})
		done <- r
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("List whose fn calls Delete did not return in 30s; does List hold a lock while calling fn?")
	}
	if r.err != nil {
		t.Fatalf("List deleting as it goes: %v", r.err)
	}
	checkKeys(t, "keys seen while deleting", r.seen, keys)
	checkKeys(t, "List after", listKeys(t, b, "", flat), []string{"other"})
}
