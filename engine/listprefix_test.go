package engine

// List with Prefix and StartAfter: the same rows as filtering the whole
// listing, over base and pending rows, with small pages, other filters
// and a pinned version.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore/memory"
)

// listAll pages through a listing and returns its ids.
func listAll(t *testing.T, tb *Table, opts ListOptions) []string {
	t.Helper()
	var ids []string
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("listing does not end")
		}
		p, err := tb.List(context.Background(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			ids = append(ids, r.ID)
		}
		if p.NextPageToken == "" {
			return ids
		}
		opts.PageToken = p.NextPageToken
	}
}

func TestListPrefixAndStartAfter(t *testing.T) {
	_, tb, _ := mgOpen(t, memory.New(), "s0")
	ctx := context.Background()
	var all []string
	for _, p := range []string{"a/", "b/", "b/x/", "ba", "c/"} {
		for i := range 12 {
			all = append(all, fmt.Sprintf("%s%d", p, i))
		}
	}
	all = append(all, "b", "b/") // the prefix itself is an id under it
	// Half in the base, half pending.
	var first, second []string
	for i, id := range all {
		if i%2 == 0 {
			first = append(first, id)
		} else {
			second = append(second, id)
		}
	}
	mgPut(t, tb, first...)
	res, err := tb.Merge(ctx, MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mgPut(t, tb, second...)
	sorted := slices.Sorted(slices.Values(all))

	want := func(ids []string, prefix, after string) []string {
		out := []string{}
		for _, id := range ids {
			if strings.HasPrefix(id, prefix) && id > after {
				out = append(out, id)
			}
		}
		return out
	}
	for _, prefix := range []string{"", "b/", "b", "b/x/", "c/1", "zz", "a/11", "0"} {
		for _, after := range []string{"", "a", "b/", "b/1", "b/x/5", "b/zzz", "c/", "zz"} {
			for _, limit := range []int{1, 5, 100} {
				got := listAll(t, tb, ListOptions{Prefix: prefix, StartAfter: after, Limit: limit})
				if w := want(sorted, prefix, after); !slices.Equal(append([]string{}, got...), w) {
					t.Fatalf("prefix %q start_after %q limit %d: got %v, want %v", prefix, after, limit, got, w)
				}
			}
		}
	}

	// With another filter: rollout ids are "r-" + id.
	got := listAll(t, tb, ListOptions{Prefix: "b/", RolloutID: "r-b/x/3", Limit: 2})
	if !slices.Equal(got, []string{"b/x/3"}) {
		t.Fatalf("prefix with a rollout filter: %v", got)
	}

	// The page ends where the prefix does: no token when the rows after
	// the last one are not under the prefix.
	p, err := tb.List(ctx, ListOptions{Prefix: "a/", Limit: 12})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Records) != 12 || p.NextPageToken != "" {
		t.Fatalf("a/: %d rows, token %q; want 12 and none", len(p.Records), p.NextPageToken)
	}

	// Pinned to the first base: only the rows merged then.
	got = listAll(t, tb, ListOptions{Prefix: "b/", StartAfter: "b/1", Version: res.Version, Limit: 3})
	if w := want(slices.Sorted(slices.Values(first)), "b/", "b/1"); !slices.Equal(got, w) {
		t.Fatalf("pinned: got %v, want %v", got, w)
	}
}
