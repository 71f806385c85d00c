package objstoretest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

func testCreateIfAbsent(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	const key = "commit/00000000000000000001.json"
	v1 := []byte(`{"version":1}`)
	a1 := mustPut(t, b, key, v1, objstore.PutOptions{IfNotExists: true})

	_, err := put(t, b, key, []byte(`{"version":1,"loser":true}`), objstore.PutOptions{IfNotExists: true})
	checkErr(t, "second create-if-absent Put", err, objstore.ErrPrecondition)
	if errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("second create-if-absent Put: err %v also matches ErrNotFound", err)
	}
	if got := checkContent(t, b, key, v1); got.ETag != a1.ETag {
		t.Errorf("ETag after a lost create = %q, want %q", got.ETag, a1.ETag)
	}

	// A create over a deleted key is a create.
	if err := b.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	v2 := []byte(`{"version":1,"again":true}`)
	mustPut(t, b, key, v2, objstore.PutOptions{IfNotExists: true})
	checkContent(t, b, key, v2)
}

func testCreateIfAbsentRace(t *testing.T, b objstore.Bucket) {
	const (
		key    = "race/manifest"
		racers = 16
	)
	body := func(i int) []byte {
		// Different lengths too, so a mix of two bodies cannot pass.
		return []byte(fmt.Sprintf("racer %02d %s", i, strings.Repeat("*", 10*i)))
	}
	attrs := make([]objstore.Attrs, racers)
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			<-start
			attrs[i], errs[i] = put(t, b, key, body(i), objstore.PutOptions{IfNotExists: true})
		})
	}
	close(start)
	wg.Wait()

	var winners []int
	for i, err := range errs {
		switch {
		case err == nil:
			winners = append(winners, i)
		case !errors.Is(err, objstore.ErrPrecondition):
			t.Errorf("racer %d: err = %v, want ErrPrecondition", i, err)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d of %d racers won (%v), want exactly 1", len(winners), racers, winners)
	}
	winner := winners[0]
	if got := checkContent(t, b, key, body(winner)); got.ETag != attrs[winner].ETag {
		t.Errorf("stored ETag %q, the winner's Put returned %q", got.ETag, attrs[winner].ETag)
	}
}

func testIfMatch(t *testing.T, b objstore.Bucket) {
	const key = "match/object"
	a1 := mustPut(t, b, key, []byte("v1"), objstore.PutOptions{})

	v2 := []byte("v2, a little longer")
	a2 := mustPut(t, b, key, v2, objstore.PutOptions{IfMatch: a1.ETag})
	if a2.ETag == a1.ETag {
		t.Errorf("If-Match Put kept ETag %q", a1.ETag)
	}
	if got := checkContent(t, b, key, v2); got.ETag != a2.ETag {
		t.Errorf("ETag after If-Match Put = %q, Put returned %q", got.ETag, a2.ETag)
	}

	// The stale ETag loses, and changes nothing.
	_, err := put(t, b, key, []byte("v3"), objstore.PutOptions{IfMatch: a1.ETag})
	checkErr(t, "Put with a stale ETag", err, objstore.ErrPrecondition)
	if got := checkContent(t, b, key, v2); got.ETag != a2.ETag {
		t.Errorf("ETag after a lost If-Match = %q, want %q", got.ETag, a2.ETag)
	}

	// An ETag of another object does not match either.
	other := mustPut(t, b, "match/other", []byte("v2, a little longer"), objstore.PutOptions{})
	_, err = put(t, b, key, []byte("v4"), objstore.PutOptions{IfMatch: other.ETag})
	checkErr(t, "Put with another object's ETag", err, objstore.ErrPrecondition)
	checkContent(t, b, key, v2)

	// On a missing key, Azure answers 404 and HTTP says 412; either will do,
	// as long as nothing is created.
	_, err = put(t, b, "match/missing", []byte("v1"), objstore.PutOptions{IfMatch: a2.ETag})
	if !errors.Is(err, objstore.ErrPrecondition) && !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("If-Match Put on a missing key: err = %v, want ErrPrecondition or ErrNotFound", err)
	}
	checkMissing(t, b, "match/missing")
}

// testExclusiveConditions checks that a Put setting both IfNotExists and
// IfMatch is refused rather than quietly honouring only one of them. Each
// half catches one of the two ways to get it wrong.
func testExclusiveConditions(t *testing.T, b objstore.Bucket) {
	a := mustPut(t, b, "both/existing", []byte("v1"), objstore.PutOptions{})
	// IfMatch alone would succeed here.
	if _, err := put(t, b, "both/existing", []byte("v2"), objstore.PutOptions{IfNotExists: true, IfMatch: a.ETag}); err == nil {
		t.Error("Put(IfNotExists and IfMatch) on an existing key succeeded")
	}
	checkContent(t, b, "both/existing", []byte("v1"))

	// IfNotExists alone would succeed here.
	if _, err := put(t, b, "both/missing", []byte("v1"), objstore.PutOptions{IfNotExists: true, IfMatch: a.ETag}); err == nil {
		t.Error("Put(IfNotExists and IfMatch) on a missing key succeeded")
	}
	checkMissing(t, b, "both/missing")
}
