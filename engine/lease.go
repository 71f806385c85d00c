package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// Ownership. A writer owns its shard, and the merger its table, through a
// blob lease (objstore.Leaser); stores without leases (a local folder used
// by one process) rely on create-if-absent alone.
//
// A writer counts its lease valid from the moment it sent the acquire or
// renew request, for LeaseDuration minus a quarter: the service started its
// clock later, so the writer stops acknowledging before anyone else can
// take the shard. It checks validity after each segment put returns: a put
// that completed while the lease was valid landed before any new owner could
// seal the generation, so its rows are part of it. A put that completed
// later may have landed before or after a new owner's seal; the seal record
// decides (the writer writes it itself if there is none yet), and the answer
// follows it: acknowledged if the seal lists the segment, refused if not. So
// a refused write is never visible, and an acknowledged one always is.

// ErrShardOwned: another live process holds the shard's lease.
var ErrShardOwned = errors.New("shard is owned by another writer")

// ErrMergerBusy: another merger holds the table's merger lease.
var ErrMergerBusy = errors.New("another merger is running")

// owner holds a lease and tracks how long it may act on it.
type owner struct {
	db    *DB
	lease objstore.Lease
	key   string

	mu         sync.Mutex
	validUntil time.Time
	lost       error
	stop       chan struct{}
	done       chan struct{}
}

// acquire takes the lease on key, or returns (nil, nil) when the store has
// no leases or leases are disabled.
func (db *DB) acquire(ctx context.Context, key string) (*owner, error) {
	l, ok := db.store.(objstore.Leaser)
	if !ok || db.cfg.LeaseDuration <= 0 {
		return nil, nil
	}
	sent := db.cfg.Now()
	lease, err := l.AcquireLease(ctx, key, db.cfg.LeaseDuration)
	if errors.Is(err, errors.ErrUnsupported) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	o := &owner{db: db, lease: lease, key: key, stop: make(chan struct{}), done: make(chan struct{})}
	o.extend(sent)
	go o.renewLoop()
	return o, nil
}

func (o *owner) extend(sent time.Time) {
	d := o.db.cfg.LeaseDuration
	o.mu.Lock()
	o.validUntil = sent.Add(d - d/4)
	o.mu.Unlock()
}

// valid reports whether the owner may still act; nil owner: no leases.
func (o *owner) valid() error {
	if o == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lost != nil {
		return o.lost
	}
	if now := o.db.cfg.Now(); !now.Before(o.validUntil) {
		return fmt.Errorf("%w: lease on %s lapsed at %s", ErrFenced, o.key, o.validUntil.Format(time.RFC3339Nano))
	}
	return nil
}

func (o *owner) renewLoop() {
	defer close(o.done)
	tick := time.NewTicker(o.db.cfg.LeaseDuration / 3)
	defer tick.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-tick.C:
		}
		if err := o.renew(context.Background()); errors.Is(err, ErrFenced) {
			return
		}
	}
}

// renew extends the lease once. A renewal that fails for a transient reason
// is simply retried at the next tick; validity lapses on its own if none
// succeeds in time.
func (o *owner) renew(ctx context.Context) error {
	if err := o.db.cfg.Hooks.Call(ctx, "lease:renew"); err != nil {
		return err
	}
	sent := o.db.cfg.Now()
	ctx, cancel := context.WithTimeout(ctx, o.db.cfg.LeaseDuration/4)
	defer cancel()
	err := o.lease.Renew(ctx)
	switch {
	case err == nil:
		o.extend(sent)
		return nil
	case errors.Is(err, objstore.ErrLeaseLost):
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
	select {
	case <-o.stop:
	default:
		close(o.stop)
	}
	<-o.done
	if err := o.lease.Release(ctx); err != nil {
		o.db.cfg.Logger.Warn("releasing lease", "key", o.key, "err", err)
	}
}

// sealAbandoned seals the open generations of shards whose writer is gone:
// if the merger can take a shard's lease, nobody owns the shard, and its
// last owner stopped acknowledging before the lease could be taken. Without
// leases nothing is sealed here (a live writer could not be told apart).
func (t *Table) sealAbandoned(ctx context.Context, m *Manifest, gens []walGen) (bool, error) {
	if _, ok := t.db.store.(objstore.Leaser); !ok || t.db.cfg.LeaseDuration <= 0 {
		return false, nil
	}
	cutoff := t.db.cfg.Now().Add(-t.db.cfg.GenMaxAge)
	open := map[string][]uint64{}
	for _, g := range gens {
		if g.gen > m.watermark(g.shard) && !g.sealed && g.oldest.Before(cutoff) && g.shard != t.db.cfg.Shard {
			open[g.shard] = append(open[g.shard], g.gen)
		}
	}
	sealed := false
	for shard, list := range open {
		o, err := t.db.acquire(ctx, t.lay.ShardLease(shard))
		if errors.Is(err, objstore.ErrLeased) {
			continue // a live owner will seal it
		}
		if err != nil {
			return sealed, err
		}
		if o == nil {
			// No lease to prove the writer gone (a wrapper without leases):
			// sealing a live writer's generation would hide its later rows.
			return sealed, nil
		}
		for _, gen := range list {
			err = t.sealGeneration(ctx, shard, gen, nil)
			if errors.Is(err, ErrFenced) {
				err = nil // sealed meanwhile by its owner's successor
			}
			if err != nil {
				break
			}
			sealed = true
		}
		o.release(context.WithoutCancel(ctx))
		if err != nil {
			return sealed, err
		}
	}
	return sealed, nil
}
