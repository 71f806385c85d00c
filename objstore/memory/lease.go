package memory

import (
	"context"
	"fmt"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

var _ objstore.Leaser = (*Bucket)(nil)

// leaseState is the lease recorded on a key. It stays recorded after it
// expires, so that its holder can still renew it while nobody else has
// taken it, as on Azure. Only Bucket methods holding b.mu touch it.
type leaseState struct {
	id      uint64
	expires time.Time
}

// live reports whether the lease still excludes others at now.
func (l *leaseState) live(now time.Time) bool { return now.Before(l.expires) }

// leased reports objstore.ErrLeased when a lease on key is live: Azure
// refuses writes and deletes of a leased blob that do not carry the lease
// id, and the object API never carries one. A write or delete that goes
// ahead must then drop the expired lease, if any (see endLease). b.mu must
// be held.
func (b *Bucket) leased(key string) error {
	if l := b.leases[key]; l != nil && l.live(b.now()) {
		return fmt.Errorf("%w: %s is leased", objstore.ErrLeased, key)
	}
	return nil
}

// endLease drops the expired lease on key, if any, because the object was
// written or deleted: on Azure its holder can then no longer renew it.
// b.mu must be held for writing.
func (b *Bucket) endLease(key string) {
	delete(b.leases, key)
}

// AcquireLease takes a lease on key for d, which must be a whole number of
// seconds from 15 to 60 as on Azure, creating an empty object at key if
// there is none. While the lease is live, Put and Delete of key fail with
// objstore.ErrLeased, even for the holder (Azure would want the lease id,
// which the object API does not carry).
func (b *Bucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := objstore.ValidateLeaseDuration(d); err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if l := b.leases[key]; l != nil && l.live(now) {
		return nil, fmt.Errorf("%w: %s", objstore.ErrLeased, key)
	}
	if b.objects[key] == nil {
		b.store(key, nil, nil, "")
	}
	b.seq++
	b.leases[key] = &leaseState{id: b.seq, expires: now.Add(d)}
	return &lease{b: b, key: key, id: b.seq, d: d}, nil
}

// lease is a held lease. Its state lives in the bucket, keyed by id, so that
// a lease someone else has taken over is seen as lost.
type lease struct {
	b   *Bucket
	key string
	id  uint64
	d   time.Duration
}

// Renew extends the lease by its duration from now. A lease that expired is
// renewed as long as nobody took it and the object was not written or
// deleted since; otherwise, or once released, Renew reports
// objstore.ErrLeaseLost.
func (l *lease) Renew(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	s := l.b.leases[l.key]
	if s == nil || s.id != l.id {
		return fmt.Errorf("renew lease %s: %w", l.key, objstore.ErrLeaseLost)
	}
	s.expires = l.b.now().Add(l.d)
	return nil
}

// Release gives the lease up. Releasing a lease that is no longer held
// returns nil: what Release was asked for is true.
func (l *lease) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.b.mu.Lock()
	defer l.b.mu.Unlock()
	if s := l.b.leases[l.key]; s != nil && s.id == l.id {
		delete(l.b.leases, l.key)
	}
	return nil
}

// Duration is the lease period.
func (l *lease) Duration() time.Duration { return l.d }
