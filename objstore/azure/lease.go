package azure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/rollstore/rollstore/objstore"
)

// acquireAttempts bounds how often AcquireLease creates the blob and tries
// again, should a concurrent Delete keep removing it in between.
const acquireAttempts = 3

var _ objstore.Leaser = (*Bucket)(nil)

// AcquireLease takes a blob lease on key for d, which must be a whole
// number of seconds from 15 to 60, creating an empty blob at key first if
// there is none.
//
// While the lease is held the service refuses to write or delete the blob
// (objstore.ErrLeased): the object API sends no lease id, so not even the
// holder can. Keys used for leases are therefore best kept for nothing else.
func (b *Bucket) AcquireLease(ctx context.Context, key string, d time.Duration) (objstore.Lease, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := objstore.ValidateLeaseDuration(d); err != nil {
		return nil, fmt.Errorf("azure %s %s: %w", opAcquireLease, key, err)
	}
	// The lease client fixes a random lease id here, so the SDK's retry of
	// a request whose response was lost proposes the same id again, which
	// the service accepts from the holder.
	client, err := lease.NewBlobClient(b.client.NewBlobClient(key), nil)
	if err != nil {
		return nil, fmt.Errorf("azure %s %s: %w", opAcquireLease, key, err)
	}
	for attempt := 1; ; attempt++ {
		_, err := client.AcquireLease(ctx, int32(d/time.Second), nil)
		if err == nil {
			return &blobLease{client: client, key: key, d: d}, nil
		}
		err = mapError(opAcquireLease, key, err)
		if !errors.Is(err, objstore.ErrNotFound) || attempt == acquireAttempts {
			return nil, err
		}
		// The blob is missing: create it empty, unless someone else just
		// did. Over a blob that exists and is leased, Azure answers the
		// create-if-absent with LeaseIdMissing (ErrLeased) and Azurite with
		// BlobAlreadyExists (ErrPrecondition); either way the next attempt
		// meets the blob and reports the lease.
		_, err = b.Put(ctx, key, nil, objstore.PutOptions{IfNotExists: true})
		if err != nil && !errors.Is(err, objstore.ErrPrecondition) && !errors.Is(err, objstore.ErrLeased) {
			return nil, fmt.Errorf("azure %s %s: creating the blob: %w", opAcquireLease, key, err)
		}
	}
}

// blobLease is a held blob lease.
type blobLease struct {
	client *lease.BlobClient
	key    string
	d      time.Duration
}

// Renew extends the lease by its duration from now. The service renews a
// lease that expired as long as nobody acquired it and the blob was not
// written or deleted since; otherwise, or once the lease was released or
// broken, Renew reports objstore.ErrLeaseLost.
func (l *blobLease) Renew(ctx context.Context) error {
	_, err := l.client.RenewLease(ctx, nil)
	return mapError(opRenewLease, l.key, err)
}

// Release gives the lease up. A lease that is no longer held (released
// already, broken, or expired and taken or written over) is released too:
// Release then returns nil, since what it was asked for is true.
func (l *blobLease) Release(ctx context.Context) error {
	_, err := l.client.ReleaseLease(ctx, nil)
	if err = mapError(opReleaseLease, l.key, err); errors.Is(err, objstore.ErrLeaseLost) {
		return nil
	}
	return err
}

// Duration is the lease period.
func (l *blobLease) Duration() time.Duration { return l.d }
