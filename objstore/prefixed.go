package objstore

import (
	"context"
	"io"
	"strings"
	"time"
)

// Prefixed returns a Bucket that stores every key under prefix, so that a
// staging run or a second deployment can share a container with others
// without seeing their keys. Keys given to and returned by it are relative.
func Prefixed(b Bucket, prefix string) (Bucket, error) {
	prefix = strings.Trim(prefix, "/")
	if prefix == "" {
		return b, nil
	}
	if err := ValidateKey(prefix); err != nil {
		return nil, err
	}
	p := &prefixed{b: b, p: prefix + "/"}
	if l, ok := b.(Leaser); ok {
		return &prefixedLeaser{prefixed: p, l: l}, nil
	}
	return p, nil
}

// prefixedLeaser keeps the inner bucket's leases visible through the prefix.
type prefixedLeaser struct {
	*prefixed
	l Leaser
}

func (p *prefixedLeaser) AcquireLease(ctx context.Context, key string, d time.Duration) (Lease, error) {
	k, err := p.key(key)
	if err != nil {
		return nil, err
	}
	return p.l.AcquireLease(ctx, k, d)
}

type prefixed struct {
	b Bucket
	p string
}

func (p *prefixed) key(k string) (string, error) {
	if err := ValidateKey(k); err != nil {
		return "", err
	}
	return p.p + k, nil
}

func (p *prefixed) Get(ctx context.Context, key string) (io.ReadCloser, Attrs, error) {
	k, err := p.key(key)
	if err != nil {
		return nil, Attrs{}, err
	}
	rc, a, err := p.b.Get(ctx, k)
	a.Key = key
	return rc, a, err
}

func (p *prefixed) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	k, err := p.key(key)
	if err != nil {
		return nil, err
	}
	return p.b.GetRange(ctx, k, off, n)
}

func (p *prefixed) Head(ctx context.Context, key string) (Attrs, error) {
	k, err := p.key(key)
	if err != nil {
		return Attrs{}, err
	}
	a, err := p.b.Head(ctx, k)
	a.Key = key
	return a, err
}

func (p *prefixed) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (Attrs, error) {
	k, err := p.key(key)
	if err != nil {
		return Attrs{}, err
	}
	a, err := p.b.Put(ctx, k, r, opts)
	a.Key = key
	return a, err
}

func (p *prefixed) Delete(ctx context.Context, key string) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.b.Delete(ctx, k)
}

func (p *prefixed) DeleteIfMatch(ctx context.Context, key, etag string) error {
	k, err := p.key(key)
	if err != nil {
		return err
	}
	return p.b.DeleteIfMatch(ctx, k, etag)
}

func (p *prefixed) DeleteMany(ctx context.Context, keys []string) error {
	full := make([]string, len(keys))
	for i, key := range keys {
		k, err := p.key(key)
		if err != nil {
			return err
		}
		full[i] = k
	}
	return p.b.DeleteMany(ctx, full)
}

func (p *prefixed) List(ctx context.Context, prefix string, opts ListOptions, fn func(Entry) error) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	return p.b.List(ctx, p.p+prefix, opts, func(e Entry) error {
		e.Key = strings.TrimPrefix(e.Key, p.p)
		return fn(e)
	})
}

// ReadAll reads a whole object; for the small things (manifests, seals,
// indexes) that callers hold in memory anyway. limit bounds the read so a
// corrupt or hostile object cannot exhaust memory.
func ReadAll(ctx context.Context, b Bucket, key string, limit int64) ([]byte, Attrs, error) {
	rc, a, err := b.Get(ctx, key)
	if err != nil {
		return nil, a, err
	}
	defer rc.Close()
	if a.Size > limit {
		return nil, a, errorf(ErrTooLarge, "%s: %d bytes exceeds read limit %d", key, a.Size, limit)
	}
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, a, err
	}
	if int64(len(data)) > limit {
		return nil, a, errorf(ErrTooLarge, "%s: exceeds read limit %d", key, limit)
	}
	return data, a, nil
}
