// Taking a shard over: fencing the previous writer by sealing its
// generation at the head's count, making sure the seal record exists, and
// claiming the next generation (doc.go, step 2); the merger does the
// same for a shard whose writer is gone.

package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/rollstore/rollstore/objstore"
)

// takeOver takes the shard over (doc.go, steps 1 and 2): it registers the
// shard as active, fences the previous writer by sealing the generation it
// left (so nothing that writer still sends can become part of it), makes
// sure that generation's seal record exists, and claims the next
// generation, all by compare-and-swap on the head. A generation therefore
// has exactly one writer.
func (w *shardWriter) takeOver(ctx context.Context) error {
	t := w.t
	if err := setActive(ctx, t.db, t.keys, w.shard, w.id, 0, true, false); err != nil {
		return err
	}
	w.active = true
	for attempt := 0; attempt < 20; attempt++ {
		h, err := readHead(ctx, t.db, t.keys, w.shard)
		if errors.Is(err, errNoHead) {
			nh, err := casHead(ctx, t.db, t.keys, w.shard, head{}, head{Gen: 1, Owner: w.id})
			if errors.Is(err, errHeadMoved) {
				continue
			}
			if err != nil {
				return err
			}
			w.open(nh)
			return setActive(ctx, t.db, t.keys, w.shard, w.id, nh.Gen, true, true)
		}
		if err != nil {
			return err
		}
		if !h.Sealed {
			if err := t.db.point(ctx, hookBeforeFence); err != nil {
				return err
			}
			hs, err := casHead(ctx, t.db, t.keys, w.shard, h, h.sealedBy(h.Owner))
			if errors.Is(err, errHeadMoved) {
				continue
			}
			if err != nil {
				return err
			}
			h = hs
		}
		if err := t.ensureSeal(ctx, w.shard, h); err != nil {
			return err
		}
		nh, err := casHead(ctx, t.db, t.keys, w.shard, h, h.claim(w.id))
		if errors.Is(err, errHeadMoved) {
			continue
		}
		if err != nil {
			return err
		}
		w.open(nh)
		// The writers before this one can commit nothing more: they leave
		// the registry.
		return setActive(ctx, t.db, t.keys, w.shard, w.id, nh.Gen, true, true)
	}
	return fmt.Errorf("%w: %s/%s: the head kept moving", ErrShardOwned, t.Name(), w.shard)
}

// ensureSeal makes sure the seal record of a head sealed at h.Gen exists,
// unless the generation was merged already.
//
// A segment missing while the seal record is built means the generation was
// merged and reclaimed meanwhile (the newest base says so), or the table was
// dropped (then that is the answer); otherwise the file is missing, which
// is reported as ErrMissingFile, never as a bare not-found.
func (t *Table) ensureSeal(ctx context.Context, shard string, h head) error {
	_, err := t.sealOf(ctx, shard, h)
	if !errors.Is(err, objstore.ErrNotFound) {
		return err
	}
	causes := []error{err}
	for attempt := 0; attempt <= maxRetries; attempt++ {
		latest, _, lerr := t.newestVersion(ctx, t.snap.Load().version())
		if lerr != nil {
			return t.noteGone(lerr)
		}
		if latest == 0 {
			break
		}
		m, merr := t.loadManifest(ctx, latest)
		if errors.Is(merr, objstore.ErrNotFound) {
			causes = append(causes, merr) // collected since: a newer one exists
			continue
		}
		if merr != nil {
			return merr
		}
		if m.watermark(shard) >= h.Gen {
			return nil // merged and reclaimed
		}
		break
	}
	return t.missing(ctx, fmt.Errorf("%w: sealing generation %d of %s/%s: %w", ErrMissingFile, h.Gen, t.Name(), shard, errors.Join(causes...)))
}

// sealAbandoned seals the open generation of a shard whose writer is gone:
// if the merger can take the shard's lease, nobody owns the shard. Sealing
// a live writer's generation would be safe (its next head swap fails, and
// it starts a new generation), only wasteful; the lease keeps it rare.
func (t *Table) sealAbandoned(ctx context.Context, shard string, h head) (head, bool, error) {
	o, err := t.db.acquire(ctx, t.keys.ShardLease(shard), nil)
	if errors.Is(err, objstore.ErrLeased) {
		return h, false, nil // a live owner will seal it
	}
	if err != nil {
		return h, false, err
	}
	defer o.release(ctx)
	hs, err := casHead(ctx, t.db, t.keys, shard, h, h.sealedBy(h.Owner))
	if errors.Is(err, errHeadMoved) {
		return h, false, nil // its writer is alive after all
	}
	if err != nil {
		return h, false, err
	}
	if _, err := t.sealOf(ctx, shard, hs); err != nil {
		return hs, true, err
	}
	if err := setActive(ctx, t.db, t.keys, shard, h.Owner, 0, false, false); err != nil {
		return hs, true, err
	}
	return hs, true, nil
}
