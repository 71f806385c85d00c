//go:build !unix

package local

import (
	"hash/maphash"
	"os"
	"sync"
)

// Without flock(2), lease locks are mutexes of this process: leases are
// then exclusive among the Buckets of one process only, as the package
// documentation says. They are apart from keyLocks, which are taken while
// a lease lock is held.
var leaseLocks [64]sync.Mutex

func lockFile(f *os.File) (release func(), err error) {
	mu := &leaseLocks[maphash.String(keyLockSeed, f.Name())%uint64(len(leaseLocks))]
	mu.Lock()
	return mu.Unlock, nil
}
