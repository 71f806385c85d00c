package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/internal/sched"
	"github.com/rollstore/rollstore/objstore"
)

// Ownership. A writer owns its shard, and the merger its table, through a
// blob lease (objstore.Leaser) on a key of the table's incarnation. Leases
// keep two live processes from doing the same work; they are not what keeps
// data correct. That is the shard head's compare-and-swap chain (see
// head.go): a writer whose lease lapsed, or that never had one, can write
// objects but cannot make them part of a generation once another writer
// moved the head.

// owner holds a lease and keeps renewing it.
type owner struct {
	db    *DB
	lease objstore.Lease
	key   string

	mu   sync.Mutex
	lost error
	stop sched.Event
	done sched.Event
	// check runs with each renewal; an error ends ownership (a writer
	// checks that its table was not dropped).
	check func(ctx context.Context) error
}

// acquire takes the lease on key, or returns (nil, nil) when the store has
// no leases or leases are disabled.
func (db *DB) acquire(ctx context.Context, key string, check func(context.Context) error) (*owner, error) {
	l, ok := db.store.(objstore.Leaser)
	if !ok || db.cfg.LeaseDuration <= 0 {
		return nil, nil
	}
	lease, err := l.AcquireLease(ctx, key, db.cfg.LeaseDuration)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o := &owner{db: db, lease: lease, key: key, stop: db.rt.NewEvent(), done: db.rt.NewEvent(), check: check}
	db.rt.Go(o.renewLoop)
	return o, nil
}

// valid reports whether the owner may still act; nil owner: no leases.
func (o *owner) valid() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lost
}

func (o *owner) renewLoop() {
	defer o.done.Fire()
	ctx := context.Background()
	for {
		tick := o.db.rt.After(o.db.cfg.LeaseDuration / 3)
		i, err := o.db.rt.Wait(ctx, o.stop, tick)
		sched.Stop(tick)
		if i == 0 || err != nil {
			return
		}
		if err := o.renew(ctx); errors.Is(err, ErrFenced) {
			return
		}
	}
}

// renew extends the lease once. A renewal that fails for a transient
// reason is retried at the next tick.
func (o *owner) renew(ctx context.Context) error {
	if err := o.db.point(ctx, hookLeaseRenew); err != nil {
		return err
	}
	rctx, cancel := o.db.rt.WithTimeout(ctx, o.db.cfg.LeaseDuration/4)
	defer cancel()
	err := o.lease.Renew(rctx)
	if err == nil && o.check != nil {
		err = o.check(rctx)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, objstore.ErrLeaseLost), errors.Is(err, ErrTableNotFound):
		o.mu.Lock()
		o.lost = fmt.Errorf("%w: lease on %s: %w", ErrFenced, o.key, err)
		o.mu.Unlock()
		return o.lost
	default:
		o.db.cfg.Logger.Warn("lease renewal failed", "key", o.key, "err", err)
		return err
	}
}

// release stops renewing and gives the lease up.
func (o *owner) release(ctx context.Context) {
	if o == nil {
		return
	}
	o.stop.Fire()
	_, _ = o.db.rt.Wait(context.WithoutCancel(ctx), o.done)
	rctx, cancel := o.db.rt.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := o.lease.Release(rctx); err != nil && !errors.Is(err, objstore.ErrNotFound) {
		o.db.cfg.Logger.Warn("releasing lease", "key", o.key, "err", err)
	}
}
