package objstore

import (
	"context"
	"errors"
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

// Leaser is implemented by backends that can lease an object, the way
// Azure leases a blob: while a lease is held, no one else can acquire it
// until it expires (or is released). rollstore uses leases for shard
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
