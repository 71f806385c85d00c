package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/rollstore/rollstore/objstore"
)

// Put writes the object from r.
//
// A conditional Put is one Put Blob request, so the condition and the write
// are atomic; its body is r itself when r is an io.ReadSeeker, and is
// otherwise buffered, failing with ErrTooLarge beyond Config.MaxSinglePut
// before anything is written. An unconditional Put of more than
// Config.BlockSize is streamed in blocks and never held in memory whole.
func (b *Bucket) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return objstore.Attrs{}, err
	}
	if err := objstore.ValidateMetadata(opts.Metadata); err != nil {
		return objstore.Attrs{}, err
	}
	if err := objstore.ValidateContentType(opts.ContentType); err != nil {
		return objstore.Attrs{}, err
	}
	if _, ok := opts.Metadata[commitKey]; ok {
		return objstore.Attrs{}, errorf(objstore.ErrInvalidKey, opPut, key, "metadata key %q is reserved", commitKey)
	}
	if opts.IfNotExists && opts.IfMatch != "" {
		return objstore.Attrs{}, fmt.Errorf("azure put %s: IfNotExists and IfMatch are mutually exclusive", key)
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	if opts.IfNotExists || opts.IfMatch != "" {
		return b.putConditional(ctx, key, r, opts)
	}
	return b.putUnconditional(ctx, key, r, opts)
}

func (b *Bucket) putConditional(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	body, size, err := b.singleShotBody(key, r, opts.Size)
	if err != nil {
		return objstore.Attrs{}, err
	}
	// The SDK resends a request whose response was lost; if the first try
	// had committed, the resend fails the condition although this Put won.
	// The commit id tells the two apart afterwards, while this Put's blob
	// is still there; once another write replaced or deleted it, nothing
	// can, and the answer is "outcome unknown", never ErrPrecondition
	// (which tells the caller its write did not happen: a writer would
	// refuse a row it had committed, a merger delete files a version it
	// committed still names).
	sendCtx, unanswered := withSends(ctx)
	id := newCommitID()
	md := metadata(opts.Metadata)
	md[commitKey] = &id
	cond := &blob.ModifiedAccessConditions{}
	if opts.IfNotExists {
		cond.IfNoneMatch = to.Ptr(azcore.ETagAny)
	} else {
		cond.IfMatch = to.Ptr(azcore.ETag(opts.IfMatch))
	}
	client := b.client.NewBlockBlobClient(key)
	resp, err := client.Upload(sendCtx, body, &blockblob.UploadOptions{
		Metadata:         md,
		HTTPHeaders:      headers(opts.ContentType),
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: cond},
	})
	if err == nil {
		return putAttrs(key, size, resp.ETag, resp.LastModified, opts), nil
	}
	err = mapError(opPut, key, err)
	if !errors.Is(err, objstore.ErrPrecondition) || unanswered.Load() == 0 {
		// Every earlier try was answered, and refused: nothing was written.
		return objstore.Attrs{}, err
	}
	props, perr := client.GetProperties(ctx, nil)
	switch perr = mapError(opHead, key, perr); {
	case perr == nil && commitOf(props.Metadata) == id:
		return attrs(key, props.ContentLength, props.ETag, props.LastModified, props.ContentType, props.Metadata), nil
	case perr == nil, errors.Is(perr, objstore.ErrNotFound):
		// Another write came after some try of this Put: whether an
		// earlier try landed first is unknown.
		return objstore.Attrs{}, fmt.Errorf("azure put %s: outcome unknown: the condition failed on a resend after %d tries without an answer, and the blob is not this Put's: %v", key, unanswered.Load(), err)
	default:
		// Whether an earlier attempt of this Put won is unknown; saying
		// ErrPrecondition could make the caller give up a commit it made.
		// err is kept as text only, so errors.Is(ErrPrecondition) is false.
		return objstore.Attrs{}, fmt.Errorf("azure put %s: outcome unknown: checking for an earlier attempt: %w (after: %v)", key, perr, err)
	}
}

// singleShotBody returns r as a rewindable body of at most MaxSinglePut
// bytes, which the SDK needs to resend the request on a retry.
func (b *Bucket) singleShotBody(key string, r io.Reader, hint int64) (io.ReadSeekCloser, int64, error) {
	if s, err := asSection(r); err != nil {
		return nil, 0, fmt.Errorf("azure put %s: body: %w", key, err)
	} else if s != nil {
		if s.size > b.maxSinglePut {
			return nil, 0, b.tooLarge(key)
		}
		return s, s.size, nil
	}
	if hint > b.maxSinglePut {
		return nil, 0, b.tooLarge(key)
	}
	data, more, err := readUpTo(r, b.maxSinglePut, hint)
	if err != nil {
		return nil, 0, fmt.Errorf("azure put %s: reading body: %w", key, err)
	}
	if more {
		return nil, 0, b.tooLarge(key)
	}
	return nopCloser{bytes.NewReader(data)}, int64(len(data)), nil
}

func (b *Bucket) tooLarge(key string) error {
	return errorf(objstore.ErrTooLarge, opPut, key, "body exceeds %d bytes", b.maxSinglePut)
}

func (b *Bucket) putUnconditional(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	client := b.client.NewBlockBlobClient(key)
	md := metadata(opts.Metadata)

	// Bodies of up to one block go out in one request, from memory or a
	// seekable reader: streaming them would allocate a whole block buffer.
	single := func(body io.ReadSeekCloser, size int64) (objstore.Attrs, error) {
		resp, err := client.Upload(ctx, body, &blockblob.UploadOptions{Metadata: md, HTTPHeaders: headers(opts.ContentType)})
		if err != nil {
			return objstore.Attrs{}, mapError(opPut, key, err)
		}
		return putAttrs(key, size, resp.ETag, resp.LastModified, opts), nil
	}
	if s, err := asSection(r); err != nil {
		return objstore.Attrs{}, fmt.Errorf("azure put %s: body: %w", key, err)
	} else if s != nil {
		if s.size <= b.blockSize {
			return single(s, s.size)
		}
		r = s
	} else if opts.Size >= 0 && opts.Size <= b.blockSize {
		// Size is a hint: a body that turns out longer is streamed.
		data, more, err := readUpTo(r, b.blockSize, opts.Size)
		if err != nil {
			return objstore.Attrs{}, fmt.Errorf("azure put %s: reading body: %w", key, err)
		}
		if !more {
			return single(nopCloser{bytes.NewReader(data)}, int64(len(data)))
		}
		r = io.MultiReader(bytes.NewReader(data), r)
	}

	ids, size, err := b.stageBlocks(ctx, client, r)
	if err != nil {
		return objstore.Attrs{}, mapError(opPut, key, err)
	}
	resp, err := client.CommitBlockList(ctx, ids, &blockblob.CommitBlockListOptions{Metadata: md, HTTPHeaders: headers(opts.ContentType)})
	if err != nil {
		return objstore.Attrs{}, mapError(opPut, key, err)
	}
	return putAttrs(key, size, resp.ETag, resp.LastModified, opts), nil
}

// stageBlocks uploads r as blocks of blockSize, up to concurrency at a
// time, and returns their ids in order and the bytes read; nothing is
// visible until the ids are committed. Memory is concurrency blocks,
// reused from block to block.
//
// Not the SDK's UploadStream: it stages from buffers it unmaps when it
// returns, while net/http may still be writing a request body whose answer
// came early (a 404 for a missing container), which crashes the process.
// Blocks here are Go memory, alive as long as anything reads them; a block
// is reused only after its stage succeeded (the service had read all of
// it), and one whose stage failed is left to the garbage collector.
func (b *Bucket) stageBlocks(ctx context.Context, client *blockblob.Client, r io.Reader) ([]string, int64, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	prefix := newCommitID() // ids of one blob must all have the same length
	var (
		ids  []string
		size int64
		wg   sync.WaitGroup
		// free holds one token per block in flight: a buffer to reuse, or
		// nil for one not allocated yet.
		free = make(chan []byte, max(1, b.concurrency))
	)
	for range cap(free) {
		free <- nil
	}
	for n := 0; ; n++ {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		if buf == nil {
			buf = make([]byte, b.blockSize)
		}
		got, err := io.ReadFull(r, buf)
		if got > 0 {
			id := base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s-%08d", prefix, n))
			ids = append(ids, id)
			size += int64(got)
			wg.Add(1)
			go func(block []byte) {
				defer wg.Done()
				if _, err := client.StageBlock(ctx, id, nopCloser{bytes.NewReader(block)}, nil); err != nil {
					cancel(err)
					free <- nil
					return
				}
				free <- block[:cap(block)]
			}(buf[:got])
		} else {
			free <- buf
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			cancel(fmt.Errorf("reading body: %w", err))
			break
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	return ids, size, nil
}

func putAttrs(key string, size int64, etag *azcore.ETag, mod *time.Time, opts objstore.PutOptions) objstore.Attrs {
	a := attrs(key, &size, etag, mod, headers(opts.ContentType).BlobContentType, nil)
	if len(opts.Metadata) > 0 {
		a.Metadata = maps.Clone(opts.Metadata)
	}
	return a
}

// headers sets the blob's Content-Type, the default one included: the
// service's own default is the same, but saying it keeps a blob's type
// independent of how it was uploaded.
func headers(ct string) *blob.HTTPHeaders {
	if ct == "" {
		ct = objstore.DefaultContentType
	}
	return &blob.HTTPHeaders{BlobContentType: &ct}
}

func metadata(md map[string]string) map[string]*string {
	out := make(map[string]*string, len(md)+1)
	for k, v := range md {
		out[k] = to.Ptr(v)
	}
	return out
}

func newCommitID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails
	return hex.EncodeToString(b[:])
}

// readUpTo reads r to its end or to n bytes, whichever is first, and
// reports whether r had more. hint, when not negative, is the expected
// length and sizes the buffer.
func readUpTo(r io.Reader, n, hint int64) (data []byte, more bool, err error) {
	c := int64(512)
	if hint >= 0 {
		c = min(hint, n) + 1 // +1: the read that sees EOF
	}
	buf := make([]byte, 0, c)
	lr := io.LimitReader(r, n+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		m, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, false, err
		}
	}
	return buf, int64(len(buf)) > n, nil
}

// section presents the rest of a seekable reader, from its current offset,
// as a body starting at 0: the SDK measures and rewinds bodies with
// absolute seeks, which would otherwise resend bytes the caller had
// already consumed.
type section struct {
	r               io.ReadSeeker
	base, size, off int64
}

// asSection returns the rest of r as a section, or nil and no error when r
// cannot seek: not only when it lacks the method, but also when it is, say,
// an *os.File on a pipe, which then takes the path of plain readers.
func asSection(r io.Reader) (*section, error) {
	rs, ok := r.(io.ReadSeeker)
	if !ok {
		return nil, nil
	}
	base, err := rs.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, nil
	}
	end, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, nil
	}
	if _, err := rs.Seek(base, io.SeekStart); err != nil {
		return nil, err
	}
	return &section{r: rs, base: base, size: max(end-base, 0)}, nil
}

func (s *section) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), s.size-s.off)]
	n, err := s.r.Read(p)
	s.off += int64(n)
	return n, err
}

func (s *section) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += s.off
	case io.SeekEnd:
		offset += s.size
	}
	if offset < 0 {
		return 0, errors.New("azure: seek before start of body")
	}
	if _, err := s.r.Seek(s.base+offset, io.SeekStart); err != nil {
		return 0, err
	}
	s.off = offset
	return offset, nil
}

// Close does nothing: the caller owns r.
func (s *section) Close() error { return nil }

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }

// Delete removes the object; a missing object is success.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	// No x-ms-delete-snapshots: rollstore never snapshots, and in a blob
	// batch "include" on a blob without snapshots has been reported to fail
	// with 404, which DeleteMany would take for an already missing blob.
	_, err := b.client.NewBlobClient(key).Delete(ctx, nil)
	if err = mapError(opDelete, key, err); errors.Is(err, objstore.ErrNotFound) {
		return nil
	}
	return err
}

// DeleteIfMatch removes the blob if its ETag is etag (Delete Blob with
// If-Match). A resend after a lost answer finds the blob gone or created
// again: 412 either way, as the interface allows.
func (b *Bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if etag == "" {
		return errorf(objstore.ErrPrecondition, opDelete, key, "no ETag to match")
	}
	_, err := b.client.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(azcore.ETag(etag))}}})
	if err = mapError(opDelete, key, err); errors.Is(err, objstore.ErrNotFound) {
		err = errorf(objstore.ErrPrecondition, opDelete, key, "no such blob")
	}
	return err
}

// maxBatch is the service's limit of sub-requests in one blob batch.
const maxBatch = 256

// deleteConcurrency bounds individual deletes when batches are unavailable.
const deleteConcurrency = 16

// DeleteMany removes keys in blob batches of up to 256, falling back to
// individual deletes where the service refuses batches. Missing objects
// are success.
func (b *Bucket) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		if err := objstore.ValidateKey(k); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(keys, maxBatch) {
		if err := b.deleteBatch(ctx, chunk); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bucket) deleteBatch(ctx context.Context, keys []string) error {
	if len(keys) == 1 || b.noBatch.Load() {
		return b.deleteEach(ctx, keys)
	}
	bb, err := b.client.NewBatchBuilder()
	if err != nil {
		return fmt.Errorf("azure delete batch: %w", err)
	}
	for _, k := range keys {
		if err := bb.Delete(k, nil); err != nil {
			return fmt.Errorf("azure delete batch %s: %w", k, err)
		}
	}
	resp, err := b.client.SubmitBatch(ctx, bb, nil)
	if err != nil {
		if ctx.Err() != nil {
			return mapError(opDeleteBatch, "", err)
		}
		if classify(opDeleteBatch, err) != nil {
			// Missing container, refused credentials, throttling: the
			// same would happen to individual deletes.
			return mapError(opDeleteBatch, "", err)
		}
		if batchUnsupported(err) {
			b.noBatch.Store(true)
		}
		// Deletes are idempotent, so redoing the whole chunk one by one
		// is safe whatever part of the batch was applied.
		return b.deleteEach(ctx, keys)
	}
	var errs []error
	for i, item := range resp.Responses {
		if item.Error == nil {
			continue
		}
		k := "?"
		if item.ContentID != nil && *item.ContentID >= 0 && *item.ContentID < len(keys) {
			k = keys[*item.ContentID]
		} else if i < len(keys) {
			k = keys[i]
		}
		if err := mapError(opDelete, k, item.Error); !errors.Is(err, objstore.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	return firstOf(errs)
}

// batchUnsupported reports whether the service rejected the batch request
// itself, as accounts and emulators without blob batch support do.
func batchUnsupported(err error) bool {
	re, ok := errors.AsType[*azcore.ResponseError](err)
	if !ok {
		return false
	}
	switch re.StatusCode {
	case 400, 405, 501:
		return true
	}
	return false
}

// deleteEach deletes keys individually, a bounded number at a time.
func (b *Bucket) deleteEach(ctx context.Context, keys []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, deleteConcurrency)
	)
	for _, k := range keys {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return fmt.Errorf("azure delete: %w", ctx.Err())
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := b.Delete(ctx, k); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return firstOf(errs)
}

// firstOf returns the first of errs, noting how many more there were; the
// full set would repeat one service error hundreds of times.
func firstOf(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return fmt.Errorf("%w (and %d more failed deletes)", errs[0], len(errs)-1)
}
