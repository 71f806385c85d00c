package local_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

const leaseFor = 15 * time.Second

// openClocked opens n Buckets over one new folder, all on clk, as n
// processes sharing the folder and the machine's clock would be.
func openClocked(t *testing.T, clk *objstoretest.Clock, n int) []*local.Bucket {
	t.Helper()
	root := t.TempDir()
	var bs []*local.Bucket
	for range n {
		b, err := local.Open(root, local.WithClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		bs = append(bs, b)
	}
	return bs
}

func acquire(t *testing.T, b *local.Bucket, key string) objstore.Lease {
	t.Helper()
	l, err := b.AcquireLease(t.Context(), key, leaseFor)
	if err != nil {
		t.Fatalf("AcquireLease(%q): %v", key, err)
	}
	return l
}

func wantErr(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: err = %v, want %v", what, err, sentinel)
	}
}

func TestLeaseExpiry(t *testing.T) {
	objstoretest.RunLeaseExpiry(t, func(t *testing.T, now func() time.Time) (a, b objstore.Bucket) {
		root := t.TempDir()
		for _, p := range []*objstore.Bucket{&a, &b} {
			lb, err := local.Open(root, local.WithClock(now))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { lb.Close() })
			*p = lb
		}
		return a, b
	})
}

// TestLeaseRaceAcrossBuckets races acquirers through several Buckets over
// one folder, as processes would: the flock must leave exactly one owner.
func TestLeaseRaceAcrossBuckets(t *testing.T) {
	clk := objstoretest.NewClock()
	bs := openClocked(t, clk, 4)
	const racers = 16
	for round := range 10 {
		key := fmt.Sprintf("leases/%02d", round)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				_, errs[i] = bs[i%len(bs)].AcquireLease(t.Context(), key, leaseFor)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, objstore.ErrLeased):
				t.Fatalf("%s: racer %d: %v, want ErrLeased", key, i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%s: %d racers acquired the lease, want 1", key, won)
		}
	}
}

// helperEnv names the folder a re-executed test binary leases in; see
// TestLeaseAcrossProcesses.
const helperEnv = "ROLLSTORE_LOCAL_LEASE_HELPER"

// TestLeaseHelperProcess is not a test: TestLeaseAcrossProcesses runs the
// test binary with it as a child process that takes a lease and exits
// without releasing it, as a crashed owner would.
func TestLeaseHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("helper for TestLeaseAcrossProcesses")
	}
	b, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.AcquireLease(t.Context(), "shard/0", 60*time.Second)
	switch {
	case err == nil:
		fmt.Println("RESULT won")
	case errors.Is(err, objstore.ErrLeased):
		fmt.Println("RESULT leased")
	default:
		t.Fatal(err)
	}
}

// TestLeaseAcrossProcesses races processes for one lease: exactly one wins.
// They all exit without releasing it, and it stays held until it expires.
func TestLeaseAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const procs = 6
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperEnv+"="+dir)
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()
	var results []string
	for i := range procs {
		if errs[i] != nil {
			t.Fatalf("helper %d: %v\n%s", i, errs[i], outs[i])
		}
		for line := range strings.Lines(string(outs[i])) {
			if r, ok := strings.CutPrefix(strings.TrimSpace(line), "RESULT "); ok {
				results = append(results, r)
			}
		}
	}
	slices.Sort(results)
	want := append(slices.Repeat([]string{"leased"}, procs-1), "won")
	if !slices.Equal(results, want) {
		t.Fatalf("helpers reported %q, want one won and the rest leased", results)
	}

	// The dead owner's lease is held until it expires.
	ctx := t.Context()
	b := open(t, dir)
	_, err := b.AcquireLease(ctx, "shard/0", leaseFor)
	wantErr(t, "AcquireLease of the dead owner's lease", err, objstore.ErrLeased)
	later, err := local.Open(dir, local.WithClock(func() time.Time { return time.Now().Add(61 * time.Second) }))
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if _, err := later.AcquireLease(ctx, "shard/0", leaseFor); err != nil {
		t.Fatalf("AcquireLease once the dead owner's lease expired: %v", err)
	}
}

// TestLeaseFiles checks where leases live: in the reserved directory,
// never listed, not addressable by key, and a damaged lease file counts as
// no lease.
func TestLeaseFiles(t *testing.T) {
	ctx := t.Context()
	root := t.TempDir()
	b := open(t, root)
	if _, err := b.Put(ctx, "data/x", strings.NewReader("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l := acquire(t, b, "leases/merger")

	var listed []string
	if err := b.List(ctx, "", objstore.ListOptions{}, func(e objstore.Entry) error {
		listed = append(listed, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"data/x", "leases/merger"}; !slices.Equal(listed, want) {
		t.Errorf("List = %q, want %q (the lease object, not the lease files)", listed, want)
	}
	if _, err := b.Put(ctx, ".rollstore/leases/x", strings.NewReader("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("Put under the lease directory: %v, want ErrInvalidKey", err)
	}
	if _, err := b.AcquireLease(ctx, ".rollstore/leases/x", leaseFor); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("AcquireLease under the lease directory: %v, want ErrInvalidKey", err)
	}

	files, err := filepath.Glob(filepath.Join(root, ".rollstore", "leases", "*.lease"))
	if err != nil || len(files) != 1 {
		t.Fatalf("lease files: %q, %v; want one", files, err)
	}
	if err := os.WriteFile(files[0], []byte("{torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Renew after its lease file was damaged", l.Renew(ctx), objstore.ErrLeaseLost)
	acquire(t, b, "leases/merger")
	if names := tempFiles(t, root); len(names) != 0 {
		t.Errorf("temporary files left: %q", names)
	}
}
