package objstore

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Lease errors.
var (
	// ErrLeased: another owner holds an unexpired lease on the object.
	ErrLeased = errors.New("objstore: leased by another owner")
	// ErrLeaseLost: the lease expired or was broken; the holder must stop
	// acting as owner.
	ErrLeaseLost = errors.New("objstore: lease lost")
)

// Lease durations every backend accepts: Azure's range, in whole seconds.
const (
	MinLeaseDuration = 15 * time.Second
	MaxLeaseDuration = 60 * time.Second
)

// ValidateLeaseDuration rejects durations Azure would refuse, on every
// backend, so tests cannot rely on a lease production cannot have.
func ValidateLeaseDuration(d time.Duration) error {
	if d < MinLeaseDuration || d > MaxLeaseDuration || d%time.Second != 0 {
		return fmt.Errorf("lease duration %v: want whole seconds from %v to %v", d, MinLeaseDuration, MaxLeaseDuration)
	}
	return nil
}

// Leaser is implemented by backends that can lease an object, the way
// Azure leases a blob: while a lease is held, no one else can acquire it
// until it expires (or is released). A leased object cannot be written or
// deleted through Bucket (no lease id is sent), so leases live on dedicated
// keys. An expired lease nobody took can still be renewed; Release of a lost
// lease is not an error and never frees a newer owner's lease. Wrappers
// whose inner bucket cannot lease return an error matching
// errors.ErrUnsupported.
//
// A holder counts its lease as valid from the moment it *sent* the acquire
// or renew request, for d minus a margin, and stops acting as owner after
// that: the service's clock started later, so no one else can hold the
// lease before the holder stops. rollstore uses leases for shard
// ownership of writers and for the singleton merger; correctness of the
// data never depends on them alone (commits are create-if-absent), they keep
// two owners from doing the same work and let a writer stop acknowledging
// before anyone else could own its shard.
type Leaser interface {
	// AcquireLease takes a lease on key for d (Azure allows 15–60 s),
	// creating an empty object at key if there is none. ErrLeased when
	// someone else holds it.
	AcquireLease(ctx context.Context, key string, d time.Duration) (Lease, error)
}

// Lease is a held lease.
type Lease interface {
	// Renew extends the lease by its duration from now; ErrLeaseLost if it
	// had expired and someone else took it (or it was broken).
	Renew(ctx context.Context) error
	// Release gives the lease up so another owner can take it at once.
	Release(ctx context.Context) error
	// Duration is the lease period.
	Duration() time.Duration
}
