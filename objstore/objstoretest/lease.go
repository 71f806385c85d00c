package objstoretest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// RunLeases runs the lease suite as subtests of t, against buckets that
// implement objstore.Leaser. It is separate from Run so that backends
// without leases still pass that. newBucket is as for Run.
//
// Leases are taken for the longest period Azure allows and no case waits
// for one to expire: expiry needs a clock the backend lets tests move, and
// is tested by each backend with its own.
func RunLeases(t *testing.T, newBucket func(t *testing.T) objstore.Bucket, opts ...Option) {
	for _, c := range leaseCases(newConfig(opts)) {
		t.Run(c.name, func(t *testing.T) {
			b := newBucket(t)
			if b == nil {
				t.Fatal("newBucket returned nil")
			}
			lb, ok := b.(leaseBucket)
			if !ok {
				t.Fatalf("%T does not implement objstore.Leaser", b)
			}
			c.fn(t, lb)
		})
	}
}

type leaseBucket interface {
	objstore.Bucket
	objstore.Leaser
}

type leaseCase struct {
	name string
	fn   func(*testing.T, leaseBucket)
}

func leaseCases(c config) []leaseCase {
	return []leaseCase{
		{"AcquireRelease", testAcquireRelease},
		{"Renew", testRenew},
		{"StaleHolder", testStaleHolder},
		{"CreatesObject", testLeaseCreatesObject},
		{"ContentUnaffected", testLeaseContentUnaffected},
		{"WritesRefused", testLeaseWritesRefused},
		{"AcquireRace", testAcquireRace},
		{"Independent", func(t *testing.T, b leaseBucket) { testLeasesIndependent(t, b, c) }},
		{"Duration", testLeaseDuration},
		{"InvalidKey", testLeaseInvalidKey},
		{"Canceled", testLeaseCanceled},
	}
}

// leaseFor is the period of every lease in the suite: Azure's longest, so
// that none expires while a case runs on a slow emulator.
const leaseFor = 60 * time.Second

func mustAcquire(t *testing.T, b leaseBucket, key string) objstore.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), key, leaseFor)
	if err != nil {
		t.Fatalf("AcquireLease(%q): %v", key, err)
	}
	if l.Duration() != leaseFor {
		t.Errorf("AcquireLease(%q).Duration() = %v, want %v", key, l.Duration(), leaseFor)
	}
	return l
}

// checkLeased asserts that acquiring key fails because someone holds it.
func checkLeased(t *testing.T, b leaseBucket, key string) {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), key, leaseFor)
	if err == nil {
		l.Release(t.Context())
		t.Errorf("AcquireLease(%q) of a held lease succeeded", key)
		return
	}
	checkOnly(t, fmt.Sprintf("AcquireLease(%q) of a held lease", key), err, objstore.ErrLeased)
}

// checkOnly asserts that err matches sentinel and no other lease or
// object sentinel.
func checkOnly(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: err = %v, want %v", what, err, sentinel)
		return
	}
	for _, s := range append([]error{objstore.ErrNotFound, objstore.ErrLeased, objstore.ErrLeaseLost}, otherSentinels...) {
		if s != sentinel && errors.Is(err, s) {
			t.Errorf("%s: err = %v matches %v as well as %v", what, err, s, sentinel)
		}
	}
}

func mustRenew(t *testing.T, l objstore.Lease, what string) {
	t.Helper()
	if err := l.Renew(t.Context()); err != nil {
		t.Fatalf("%s: Renew: %v", what, err)
	}
}

func mustRelease(t *testing.T, l objstore.Lease, what string) {
	t.Helper()
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("%s: Release: %v", what, err)
	}
}

// testAcquireRelease: a held lease excludes others until it is released,
// and releasing twice is harmless.
func testAcquireRelease(t *testing.T, b leaseBucket) {
	const key = "leases/a"
	l := mustAcquire(t, b, key)
	checkLeased(t, b, key)
	checkLeased(t, b, key) // a failed attempt changes nothing
	mustRelease(t, l, "first owner")
	mustRelease(t, l, "first owner, again")

	l2 := mustAcquire(t, b, key)
	checkLeased(t, b, key)
	mustRelease(t, l2, "second owner")
	mustRelease(t, mustAcquire(t, b, key), "third owner")
}

// testRenew: a held lease renews, as often as asked, and stays exclusive; a
// released one does not renew.
func testRenew(t *testing.T, b leaseBucket) {
	const key = "leases/renew"
	l := mustAcquire(t, b, key)
	for i := range 3 {
		mustRenew(t, l, fmt.Sprintf("renewal %d", i+1))
	}
	checkLeased(t, b, key)
	mustRelease(t, l, "owner")
	checkOnly(t, "Renew after Release", l.Renew(t.Context()), objstore.ErrLeaseLost)
	mustRelease(t, mustAcquire(t, b, key), "next owner")
}

// testStaleHolder: once a lease has passed to a new owner, the old handle
// can neither renew it nor, by releasing, take it from the new owner.
func testStaleHolder(t *testing.T, b leaseBucket) {
	const key = "leases/stale"
	old := mustAcquire(t, b, key)
	mustRelease(t, old, "old owner")
	cur := mustAcquire(t, b, key)

	checkOnly(t, "Renew by the old owner", old.Renew(t.Context()), objstore.ErrLeaseLost)
	if err := old.Release(t.Context()); err != nil {
		t.Errorf("Release by the old owner: %v, want nil (the lease is not held)", err)
	}
	checkLeased(t, b, key)
	mustRenew(t, cur, "new owner, after the old one's Release")
	mustRelease(t, cur, "new owner")
}

// testLeaseCreatesObject: leasing a key that does not exist creates an
// empty object there, which stays when the lease is released.
func testLeaseCreatesObject(t *testing.T, b leaseBucket) {
	const key = "leases/created"
	checkMissing(t, b, key)
	l := mustAcquire(t, b, key)
	if a := mustHead(t, b, key); a.Size != 0 {
		t.Errorf("Head(%q) after AcquireLease: Size %d, want 0", key, a.Size)
	}
	checkContent(t, b, key, nil)
	checkKeys(t, "List(leases/)", listKeys(t, b, "leases/", flat), []string{key})
	mustRelease(t, l, "owner")
	checkContent(t, b, key, nil)
}

// testLeaseContentUnaffected: leasing an existing object changes nothing
// about it, not even its ETag, so that If-Match conditions taken before
// still hold.
func testLeaseContentUnaffected(t *testing.T, b leaseBucket) {
	const key = "leases/existing"
	data := content(key)
	md := map[string]string{"owner": "writer-0", "epoch": "7"}
	before := mustPut(t, b, key, data, objstore.PutOptions{Metadata: md})
	check := func(when string) {
		t.Helper()
		a := checkContent(t, b, key, data)
		if a.ETag != before.ETag || !maps.Equal(a.Metadata, md) {
			t.Errorf("%s: ETag %s, metadata %v; want %s, %v as before the lease", when, a.ETag, a.Metadata, before.ETag, md)
		}
	}
	l := mustAcquire(t, b, key)
	check("after AcquireLease")
	mustRenew(t, l, "owner")
	check("after Renew")
	mustRelease(t, l, "owner")
	check("after Release")
}

// testLeaseWritesRefused: a leased object cannot be written or deleted (on
// Azure that takes the lease id, which the object API never sends), and
// can be again once the lease is released.
func testLeaseWritesRefused(t *testing.T, b leaseBucket) {
	const (
		key   = "leases/guarded"
		other = "leases/unguarded"
	)
	ctx := t.Context()
	data := []byte("lock object")
	a := mustPut(t, b, key, data, objstore.PutOptions{})
	mustPut(t, b, other, data, objstore.PutOptions{})
	l := mustAcquire(t, b, key)

	_, err := put(t, b, key, []byte("overwrite"), objstore.PutOptions{})
	checkOnly(t, "Put over a leased object", err, objstore.ErrLeased)
	// Whether the lease or the condition is checked first differs (Azure
	// and Azurite disagree); either way, nothing is written.
	for _, opts := range []objstore.PutOptions{{IfMatch: a.ETag}, {IfNotExists: true}} {
		if _, err := put(t, b, key, []byte("overwrite"), opts); !errors.Is(err, objstore.ErrLeased) && !errors.Is(err, objstore.ErrPrecondition) {
			t.Errorf("Put(%+v) over a leased object: err = %v, want ErrLeased or ErrPrecondition", opts, err)
		}
	}
	checkOnly(t, "Delete of a leased object", b.Delete(ctx, key), objstore.ErrLeased)
	err = b.DeleteMany(ctx, []string{other, key})
	checkErr(t, "DeleteMany including a leased object", err, objstore.ErrLeased)
	checkMissing(t, b, other) // the unleased one is deleted regardless
	checkContent(t, b, key, data)
	mustRenew(t, l, "owner, after the refused writes")

	mustRelease(t, l, "owner")
	mustPut(t, b, key, []byte("after release"), objstore.PutOptions{})
	if err := b.Delete(ctx, key); err != nil {
		t.Fatalf("Delete after Release: %v", err)
	}
	checkMissing(t, b, key)
	// The object is gone, and with it the lease: a new one recreates it.
	mustRelease(t, mustAcquire(t, b, key), "next owner")
	checkContent(t, b, key, nil)
}

// testAcquireRace: of racing acquirers of a key that does not exist yet,
// exactly one wins, and the others see ErrLeased (not a failed create).
func testAcquireRace(t *testing.T, b leaseBucket) {
	const (
		key     = "leases/race"
		racers  = 8
		attempt = 3 // rounds, each on a free lease
	)
	for round := range attempt {
		leases := make([]objstore.Lease, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				leases[i], errs[i] = b.AcquireLease(t.Context(), key, leaseFor)
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: racers %d and %d both acquired the lease", round, winner, i)
			case err == nil:
				winner = i
			default:
				checkOnly(t, fmt.Sprintf("round %d: racer %d", round, i), err, objstore.ErrLeased)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody acquired the lease", round)
		}
		checkLeased(t, b, key)
		mustRelease(t, leases[winner], fmt.Sprintf("round %d winner", round))
	}
	checkContent(t, b, key, nil)
}

// testLeasesIndependent: leases on different keys, including a key and a
// key below it (a key extending it, where keys cannot nest), do not exclude
// each other.
func testLeasesIndependent(t *testing.T, b leaseBucket, c config) {
	keys := []string{"leases/k", "leases/k/sub", "leases/k2", "other/k"}
	if c.pathKeys {
		keys[1] = "leases/k-sub"
	}
	var held []objstore.Lease
	for _, k := range keys {
		held = append(held, mustAcquire(t, b, k))
	}
	for _, k := range keys {
		checkLeased(t, b, k)
	}
	mustRelease(t, held[0], keys[0])
	for i, k := range keys[1:] {
		checkLeased(t, b, k)
		mustRenew(t, held[i+1], k)
	}
	mustRelease(t, mustAcquire(t, b, keys[0]), keys[0])
}

// testLeaseDuration: periods Azure refuses are refused everywhere, before
// anything is created; its shortest and longest are accepted.
func testLeaseDuration(t *testing.T, b leaseBucket) {
	ctx := t.Context()
	for _, d := range []time.Duration{0, -time.Second, 14 * time.Second, 61 * time.Second, 15*time.Second + time.Millisecond, time.Hour} {
		key := "leases/bad-" + strings.NewReplacer(".", "_", "-", "m").Replace(d.String())
		l, err := b.AcquireLease(ctx, key, d)
		if err == nil {
			l.Release(ctx)
			t.Errorf("AcquireLease(%q, %v) succeeded, want an error", key, d)
			continue
		}
		if errors.Is(err, objstore.ErrLeased) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("AcquireLease(%q, %v): err = %v, want a plain error", key, d, err)
		}
		checkMissing(t, b, key)
	}
	for _, d := range []time.Duration{15 * time.Second, 60 * time.Second} {
		key := fmt.Sprintf("leases/good-%d", d/time.Second)
		l, err := b.AcquireLease(ctx, key, d)
		if err != nil {
			t.Errorf("AcquireLease(%q, %v): %v", key, d, err)
			continue
		}
		if l.Duration() != d {
			t.Errorf("AcquireLease(%q, %v).Duration() = %v", key, d, l.Duration())
		}
		mustRelease(t, l, key)
	}
}

func testLeaseInvalidKey(t *testing.T, b leaseBucket) {
	for _, key := range invalidKeys {
		l, err := b.AcquireLease(t.Context(), key, leaseFor)
		if err == nil {
			l.Release(t.Context())
		}
		checkErr(t, fmt.Sprintf("AcquireLease(%.40q)", key), err, objstore.ErrInvalidKey)
	}
	checkKeys(t, "List after refused leases", listKeys(t, b, "", flat), nil)
}

// testLeaseCanceled: with a context cancelled beforehand, every lease call
// reports context.Canceled and has no effect.
func testLeaseCanceled(t *testing.T, b leaseBucket) {
	const (
		fresh = "leases/cancel-new"
		held  = "leases/cancel-held"
	)
	ctx := canceled(t)
	l, err := b.AcquireLease(ctx, fresh, leaseFor)
	if err == nil {
		l.Release(t.Context())
	}
	checkErr(t, "AcquireLease", err, context.Canceled)
	checkMissing(t, b, fresh)

	l = mustAcquire(t, b, held)
	checkErr(t, "Renew", l.Renew(ctx), context.Canceled)
	checkErr(t, "Release", l.Release(ctx), context.Canceled)
	checkLeased(t, b, held)
	mustRenew(t, l, "owner, after cancelled calls")
	mustRelease(t, l, "owner")
}
