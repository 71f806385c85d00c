package main

// Routing the appends of a partitioned table to the owner of each id's
// partition, as the service forwards them. A writer that does not own an
// id's partition stages the row (validates it and stores its payload:
// inline payloads need no request) and has the owner commit it; the owner's
// *engine.Table is called directly, the writers of a run being engines of
// this process (see startChild). rollbench runs no HTTP servers, so a
// forwarded append here costs what the service's would less its one
// intra-cluster HTTP round trip.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rollstore/rollstore/engine"
)

// router finds the engine of the run's writer named writer (nil: not one
// of this run's).
type router func(writer string) *engine.DB

// routedAppend appends one row through tb, the table handle of writer
// self: itself when the members, as self sees them (its cached view, no
// request), give it the row's partition; otherwise Stage here and Commit on
// the owner. A NotOwnerError (ownership moved: a writer joined, or a view
// was stale) sends the row where it names, a few times at most. It reports
// whether the row was committed by another writer than self.
func routedAppend(ctx context.Context, tb *engine.Table, self string, route router, rec engine.Record, data []byte) (forwarded bool, err error) {
	if route == nil || tb.Partitions() == 0 {
		_, err := tb.Append(ctx, rec, bytes.NewReader(data), int64(len(data)))
		return false, err
	}
	o, err := tb.Owner(ctx, rec.ID)
	if err != nil {
		return false, err
	}
	target := o.Writer
	for attempt := 0; ; attempt++ {
		if target == self {
			_, err = tb.Append(ctx, rec, bytes.NewReader(data), int64(len(data)))
			forwarded = false
		} else {
			err = forwardAppend(ctx, tb, route, target, rec, data)
			forwarded = true
		}
		var ne *engine.NotOwnerError
		if !errors.As(err, &ne) || attempt >= 10 || ctx.Err() != nil {
			return forwarded, err
		}
		target = ne.Owner.Writer
		if target == "" || attempt > 0 {
			time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
		}
		if target == "" {
			o, oerr := tb.Owner(ctx, rec.ID)
			if oerr != nil {
				return forwarded, oerr
			}
			target = o.Writer
		}
	}
}

// forwardAppend is the non-owner's path: Stage on tb, Commit on the
// owner's handle of the same table.
func forwardAppend(ctx context.Context, tb *engine.Table, route router, owner string, rec engine.Record, data []byte) error {
	odb := route(owner)
	if odb == nil {
		return fmt.Errorf("%w: owner %q of %q is not a writer of this run", engine.ErrNotOwner, owner, rec.ID)
	}
	st, nt, err := tb.Stage(ctx, rec, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	otb, err := odb.Table(ctx, nt.Name())
	if err != nil {
		return err
	}
	_, err = otb.Commit(ctx, []*engine.Staged{st})
	var be *engine.BatchError
	if errors.As(err, &be) {
		err = be.Err
	}
	return err
}
