// Package memory is an in-memory objstore.Bucket for tests.
//
// It keeps every promise of the objstore contract — key validation, error
// sentinels, conditional Puts, range clipping, lexical and delimited listing —
// so that code tested against it behaves the same on the local and Azure
// backends. Where the contract is silent it errs on the strict side: a body
// read after Close fails, and a Put whose body disagrees with a declared Size
// is refused.
//
// It also implements objstore.Leaser the way Azure leases blobs, on a clock
// that tests can replace (WithClock) to expire leases without waiting.
package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// errExclusive is returned for a Put that sets both conditions; no sentinel
// fits, since it is a caller bug rather than a store outcome.
var errExclusive = errors.New("objstore: IfNotExists and IfMatch are exclusive")

// object is one stored version. Nothing in it is modified after Put, so
// readers may keep pointers to it (and to data) without holding the lock:
// that is what makes an open body a snapshot, as on Azure.
type object struct {
	data     []byte
	etag     string
	modified time.Time
	metadata map[string]string
	ctype    string
}

// Bucket is an in-memory objstore.Bucket. The zero value is not usable; call
// New.
type Bucket struct {
	now func() time.Time

	mu      sync.RWMutex
	objects map[string]*object
	leases  map[string]*leaseState // by key; see lease.go
	seq     uint64                 // last ETag or lease id issued; never reused
}

var _ objstore.Bucket = (*Bucket)(nil)

// An Option configures a Bucket made by New.
type Option func(*Bucket)

// WithClock makes the bucket read the time from now instead of time.Now:
// for lease expiry and for the LastModified of the objects it stores. Tests
// pass a fake clock to expire leases without waiting. now must be safe for
// concurrent use.
func WithClock(now func() time.Time) Option {
	return func(b *Bucket) { b.now = now }
}

// New returns an empty bucket.
func New(opts ...Option) *Bucket {
	b := &Bucket{
		now:     time.Now,
		objects: make(map[string]*object),
		leases:  make(map[string]*leaseState),
	}
	for _, opt := range opts {
		opt(b)
	}
	return b
}

// Len reports how many objects the bucket holds.
func (b *Bucket) Len() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.objects)
}

// Keys returns every key in the bucket in lexical order.
func (b *Bucket) Keys() []string {
	b.mu.RLock()
	keys := slices.Collect(maps.Keys(b.objects))
	b.mu.RUnlock()
	slices.Sort(keys)
	return keys
}

// lookup validates the key, honours ctx and returns the current object.
func (b *Bucket) lookup(ctx context.Context, key string) (*object, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.RLock()
	o := b.objects[key]
	b.mu.RUnlock()
	if o == nil {
		return nil, fmt.Errorf("%w: %s", objstore.ErrNotFound, key)
	}
	return o, nil
}

// Get opens the whole object.
func (b *Bucket) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	o, err := b.lookup(ctx, key)
	if err != nil {
		return nil, objstore.Attrs{}, err
	}
	return newBody(o.data), o.attrs(key), nil
}

// GetRange opens length bytes from offset; length < 0 reads to the end.
func (b *Bucket) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := objstore.ValidateKey(key); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, fmt.Errorf("%w: %s: negative offset %d", objstore.ErrInvalidRange, key, offset)
	}
	o, err := b.lookup(ctx, key)
	if err != nil {
		return nil, err
	}
	size := int64(len(o.data))
	if offset > size {
		return nil, fmt.Errorf("%w: %s: offset %d past size %d", objstore.ErrInvalidRange, key, offset, size)
	}
	end := size
	// Compare against the remaining length rather than offset+length, which
	// can overflow for a caller passing math.MaxInt64.
	if length >= 0 && length < size-offset {
		end = offset + length
	}
	return newBody(o.data[offset:end]), nil
}

// Head returns the attributes without the body.
func (b *Bucket) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	o, err := b.lookup(ctx, key)
	if err != nil {
		return objstore.Attrs{}, err
	}
	return o.attrs(key), nil
}

// Put stores the body read from r (nil is an empty body). The body is read in
// full before the lock is taken, so a slow reader never blocks other calls,
// and the condition check and the store happen under one lock, which makes
// conditional Puts atomic.
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
	if opts.IfNotExists && opts.IfMatch != "" {
		return objstore.Attrs{}, fmt.Errorf("put %s: %w", key, errExclusive)
	}
	if err := ctx.Err(); err != nil {
		return objstore.Attrs{}, err
	}
	var data []byte
	if r != nil {
		var err error
		if data, err = io.ReadAll(r); err != nil {
			return objstore.Attrs{}, fmt.Errorf("put %s: reading body: %w", key, err)
		}
	}
	// A declared size that disagrees with the body is a caller bug Azure would
	// reject (Content-Length mismatch). 0 is not checked: it is also the zero
	// value of an options struct that did not declare a size.
	if opts.Size > 0 && int64(len(data)) != opts.Size {
		return objstore.Attrs{}, fmt.Errorf("put %s: body is %d bytes, PutOptions.Size is %d", key, len(data), opts.Size)
	}
	// Reading the body took time; a network backend would notice a
	// cancellation that arrived meanwhile, so this one does too.
	if err := ctx.Err(); err != nil {
		return objstore.Attrs{}, err
	}
	var md map[string]string
	if len(opts.Metadata) > 0 {
		md = maps.Clone(opts.Metadata) // the caller may reuse its map
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	// A live lease is reported before any condition, as by Azure (Azurite
	// checks create-if-absent first).
	if err := b.leased(key); err != nil {
		return objstore.Attrs{}, fmt.Errorf("put %s: %w", key, err)
	}
	cur := b.objects[key]
	switch {
	case opts.IfNotExists && cur != nil:
		return objstore.Attrs{}, fmt.Errorf("%w: %s already exists", objstore.ErrPrecondition, key)
	case opts.IfMatch != "" && cur == nil:
		return objstore.Attrs{}, fmt.Errorf("%w: %s does not exist (If-Match %s)", objstore.ErrPrecondition, key, opts.IfMatch)
	case opts.IfMatch != "" && cur.etag != opts.IfMatch:
		return objstore.Attrs{}, fmt.Errorf("%w: %s has ETag %s, not %s", objstore.ErrPrecondition, key, cur.etag, opts.IfMatch)
	}
	b.endLease(key)
	o := b.store(key, data, md, opts.ContentType)
	return o.attrs(key), nil
}

// store replaces the object at key. b.mu must be held.
func (b *Bucket) store(key string, data []byte, md map[string]string, ctype string) *object {
	if ctype == "" {
		ctype = objstore.DefaultContentType
	}
	b.seq++
	o := &object{
		data: data,
		// Quoted and hex like Azure's, so code that compares or forwards
		// ETags sees the same shape in tests.
		etag:     fmt.Sprintf(`"0x%X"`, b.seq),
		modified: b.now().UTC(),
		metadata: md,
		ctype:    ctype,
	}
	b.objects[key] = o
	return o
}

// Delete removes the object; a missing object is success.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	return b.DeleteMany(ctx, []string{key})
}

// DeleteIfMatch removes the object if its ETag is etag.
func (b *Bucket) DeleteIfMatch(ctx context.Context, key, etag string) error {
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objects[key]
	switch {
	case !ok:
		return fmt.Errorf("delete %s: %w: no such object", key, objstore.ErrPrecondition)
	case o.etag != etag:
		return fmt.Errorf("delete %s: %w: etag is %s, want %s", key, objstore.ErrPrecondition, o.etag, etag)
	}
	if err := b.leased(key); err != nil {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	b.endLease(key)
	delete(b.objects, key)
	return nil
}

// DeleteMany removes the objects. Every key is validated before any is
// removed, so a bad key deletes nothing. Objects under a lease are kept and
// reported with objstore.ErrLeased, as Azure reports them, while the others
// are removed.
func (b *Bucket) DeleteMany(ctx context.Context, keys []string) error {
	for _, key := range keys {
		if err := objstore.ValidateKey(key); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, key := range keys {
		if err := b.leased(key); err != nil {
			errs = append(errs, fmt.Errorf("delete %s: %w", key, err))
			continue
		}
		b.endLease(key)
		delete(b.objects, key)
	}
	return errors.Join(errs...)
}

// List calls fn for every key under prefix in lexical order. It lists a
// snapshot taken when it starts and calls fn without holding the lock, so fn
// may call back into the bucket (a reclaim lists and deletes).
func (b *Bucket) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if err := objstore.ValidatePrefix(prefix); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, e := range b.entries(prefix, opts.Delimited) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// entries returns the listing of prefix in lexical order. In delimited mode
// every key with a '/' after the prefix folds into the entry for its first
// level; since keys sharing a prefix are contiguous in lexical order, and
// the folded key sorts before all of them, emitting it where its first
// member would be keeps the whole listing in lexical order.
func (b *Bucket) entries(prefix string, delimited bool) []objstore.Entry {
	type kv struct {
		key string
		o   *object
	}
	b.mu.RLock()
	var matched []kv
	for key, o := range b.objects {
		if strings.HasPrefix(key, prefix) {
			matched = append(matched, kv{key, o})
		}
	}
	b.mu.RUnlock()
	slices.SortFunc(matched, func(a, b kv) int { return strings.Compare(a.key, b.key) })

	entries := make([]objstore.Entry, 0, len(matched))
	for _, m := range matched {
		if delimited {
			if i := strings.IndexByte(m.key[len(prefix):], '/'); i >= 0 {
				dir := m.key[:len(prefix)+i+1]
				if n := len(entries); n > 0 && entries[n-1].Key == dir {
					continue
				}
				entries = append(entries, objstore.Entry{Key: dir, IsPrefix: true})
				continue
			}
		}
		entries = append(entries, objstore.Entry{
			Key:          m.key,
			Size:         int64(len(m.o.data)),
			LastModified: m.o.modified,
		})
	}
	return entries
}

func (o *object) attrs(key string) objstore.Attrs {
	return objstore.Attrs{
		Key:          key,
		Size:         int64(len(o.data)),
		ETag:         o.etag,
		LastModified: o.modified,
		Metadata:     maps.Clone(o.metadata), // callers may modify theirs
		ContentType:  o.ctype,
	}
}

// body reads a stored slice. Unlike io.NopCloser it fails after Close, so a
// caller that reads a body it already closed is caught in tests, as it would
// be on a network backend.
type body struct {
	r      *bytes.Reader
	closed bool
}

func newBody(data []byte) *body { return &body{r: bytes.NewReader(data)} }

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, errors.New("memory: read after Close")
	}
	return b.r.Read(p)
}

func (b *body) Close() error {
	b.closed = true
	return nil
}
