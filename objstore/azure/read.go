package azure

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"

	"github.com/rollstore/rollstore/objstore"
)

// commitKey is the metadata key holding a conditional Put's commit id. It is
// internal bookkeeping, so it is removed from every Attrs returned.
const commitKey = "rollstorecommit"

// Get opens the whole object. A connection broken mid-body is resumed at the
// same ETag; if the blob was deleted or replaced meanwhile, Read fails with
// ErrNotFound rather than return bytes of another object.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, objstore.Attrs{}, err
	}
	resp, err := b.client.NewBlobClient(key).DownloadStream(ctx, nil)
	if err != nil {
		return nil, objstore.Attrs{}, mapError(opGet, key, err)
	}
	a := attrs(key, resp.ContentLength, resp.ETag, resp.LastModified, resp.ContentType, resp.Metadata)
	return b.body(ctx, key, &resp), a, nil
}

// GetRange opens length bytes from offset (to the end if length < 0).
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, errorf(objstore.ErrInvalidRange, opGet, key, "negative offset %d", offset)
	}
	if length == 0 {
		// HTTP cannot express an empty range, so confirm the object and
		// the offset with a HEAD instead.
		return b.emptyRange(ctx, key, offset)
	}
	rng := blob.HTTPRange{Offset: offset} // Count 0 reads to the end
	if length > 0 {
		rng.Count = length
	}
	client := b.client.NewBlobClient(key)
	for attempt := 0; ; attempt++ {
		resp, err := client.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: rng})
		if err == nil {
			return b.body(ctx, key, &resp), nil
		}
		err = mapError(opGet, key, err)
		if !errors.Is(err, objstore.ErrInvalidRange) {
			return nil, err
		}
		// The service answers 416 for any range starting at or past the
		// end, including the empty one at the end that the contract
		// allows; the size tells them apart.
		a, herr := b.Head(ctx, key)
		switch {
		case herr != nil:
			return nil, herr
		case offset == a.Size:
			return emptyBody(), nil
		case offset > a.Size || attempt > 0:
			return nil, err
		}
		// The object grew between the two requests; ask again, once.
	}
}

// emptyRange returns an empty body when offset is within or at the end of
// the object, and ErrInvalidRange when it is past it.
func (b *Bucket) emptyRange(ctx context.Context, key string, offset int64) (io.ReadCloser, error) {
	a, err := b.Head(ctx, key)
	if err != nil {
		return nil, err
	}
	if offset > a.Size {
		return nil, errorf(objstore.ErrInvalidRange, opGet, key, "offset %d past size %d", offset, a.Size)
	}
	return emptyBody(), nil
}

func emptyBody() io.ReadCloser { return io.NopCloser(strings.NewReader("")) }

// body wraps a download so a broken connection is resumed (bounded) and
// every error is mapped.
func (b *Bucket) body(ctx context.Context, key string, resp *blob.DownloadStreamResponse) io.ReadCloser {
	r := &reader{key: key, rc: resp.Body}
	if b.maxReadRetries > 0 {
		r.rc = resp.NewRetryReader(ctx, &blob.RetryReaderOptions{
			MaxRetries: int32(b.maxReadRetries),
			// A Close from another goroutine ends the read; it must not
			// be taken as a broken connection and re-open the blob.
			EarlyCloseAsError: true,
		})
	}
	return r
}

var errClosed = errors.New("azure: read on closed body")

// reader is a download body whose errors are mapped.
type reader struct {
	key    string
	rc     io.ReadCloser
	closed atomic.Bool
}

func (r *reader) Read(p []byte) (int, error) {
	if r.closed.Load() {
		// The retry reader would otherwise open a fresh download that
		// nobody closes.
		return 0, errClosed
	}
	n, err := r.rc.Read(p)
	if err != nil && err != io.EOF {
		err = mapError(opRead, r.key, err)
	}
	return n, err
}

func (r *reader) Close() error {
	r.closed.Store(true)
	return r.rc.Close()
}

// Head returns the object's attributes.
func (b *Bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.Attrs{}, err
	}
	resp, err := b.client.NewBlobClient(key).GetProperties(ctx, nil)
	if err != nil {
		return objstore.Attrs{}, mapError(opHead, key, err)
	}
	return attrs(key, resp.ContentLength, resp.ETag, resp.LastModified, resp.ContentType, resp.Metadata), nil
}

// attrs builds Attrs from response headers. Metadata keys are lower-cased:
// the service echoes them header-style ("Commitid"), whatever was stored. A
// blob without a Content-Type (written by another tool) reports the default.
func attrs(key string, size *int64, etag *azcore.ETag, mod *time.Time, ct *string, md map[string]*string) objstore.Attrs {
	a := objstore.Attrs{Key: key, ContentType: objstore.DefaultContentType}
	if ct != nil && *ct != "" {
		a.ContentType = *ct
	}
	if size != nil {
		a.Size = *size
	}
	if etag != nil {
		a.ETag = string(*etag)
	}
	if mod != nil {
		a.LastModified = *mod
	}
	for k, v := range md {
		k = strings.ToLower(k)
		if k == commitKey || v == nil {
			continue
		}
		if a.Metadata == nil {
			a.Metadata = make(map[string]string, len(md))
		}
		a.Metadata[k] = *v
	}
	return a
}

// commitOf returns the commit id stored in md, matching the key without
// regard to case.
func commitOf(md map[string]*string) string {
	for k, v := range md {
		if strings.EqualFold(k, commitKey) && v != nil {
			return *v
		}
	}
	return ""
}
