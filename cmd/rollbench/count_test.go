package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine/keyspace"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

// The counting bucket counts each call once, under the bench's operation
// names and the key's class, globally and in the context's tally.
func TestCountingBucketNames(t *testing.T) {
	table, _ := keyspace.ForTable("t")
	lay, _ := table.Incarnation(keyspace.NewIncarnationName(time.Unix(1_800_000_000, 0), 7))
	all, mine := newTally(), newTally()
	b := newCountingBucket(memory.New(), all, nil)
	ctx := withTally(context.Background(), mine)
	seg := lay.Segment("s", 1, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Put(ctx, seg, strings.NewReader("x"), objstore.PutOptions{Size: 1})
	must(err)
	a, err := b.Put(ctx, lay.Registry(), strings.NewReader("{}"), objstore.PutOptions{IfNotExists: true, Size: 2})
	must(err)
	_, err = b.Head(ctx, seg)
	must(err)
	var sp span
	rc, err := b.GetRange(withSpan(ctx, &sp), seg, 0, 1)
	must(err)
	rc.Close()
	must(b.DeleteIfMatch(ctx, lay.Registry(), a.ETag))
	must(b.DeleteMany(ctx, nil))
	must(b.DeleteMany(ctx, []string{seg}))
	must(b.List(ctx, lay.WALPrefix(), objstore.ListOptions{}, func(objstore.Entry) error { return nil }))
	l, err := b.(objstore.Leaser).AcquireLease(ctx, lay.MergerLease(), 15*time.Second)
	must(err)
	must(l.Renew(ctx))
	must(l.Release(ctx))

	want := "map[Delete registry:1 DeleteMany segment:1 GetRange segment:1 Head segment:1 Lease lease:1 List wal/:1 Put segment:1 PutIfAbsent registry:1]"
	if got := fmt.Sprint(all.snap().ops); got != want {
		t.Errorf("global tally %s, want %s", got, want)
	}
	if got := fmt.Sprint(mine.snap().ops); got != want {
		t.Errorf("context's tally %s, want %s", got, want)
	}
	if sp.key != seg || sp.off != 0 || sp.n != 1 {
		t.Errorf("span %+v", sp)
	}
}
