// Package objstore is the object-store abstraction every layer of rollstore
// uses. A Bucket holds immutable-ish objects addressed by slash-separated keys;
// backends (azure, local, memory) satisfy it, and wrappers (Prefixed, the
// faulty package) compose with it.
//
// Errors are sentinels: callers branch with errors.Is. ErrNotFound is the one
// the read path retries on: it means a concurrent reclaim removed an object,
// and is never used for a missing container, refused credentials or
// throttling, which have their own sentinels.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Sentinel errors. Backends map their native failures onto these in exactly
// one place each, and wrap the native error so its detail is kept.
var (
	// ErrNotFound: the object does not exist (Azure BlobNotFound, including a
	// 404 while a ranged read resumes). Retryable on the read path.
	ErrNotFound = errors.New("objstore: object not found")
	// ErrPrecondition: a conditional Put lost (create-if-absent on an existing
	// key, or If-Match with a stale ETag).
	ErrPrecondition = errors.New("objstore: precondition failed")
	// ErrInvalidRange: a ranged read starting past the end of the object.
	ErrInvalidRange = errors.New("objstore: invalid range")
	// ErrContainerNotFound: the bucket itself is missing. Not retryable and
	// never confused with a missing object.
	ErrContainerNotFound = errors.New("objstore: container not found")
	// ErrAuth: the store refused our credentials or permissions.
	ErrAuth = errors.New("objstore: access refused")
	// ErrThrottled: the store kept answering 429/503 after the client's own
	// retries. Callers surface it as "retry later".
	ErrThrottled = errors.New("objstore: throttled")
	// ErrUnavailable: the store could not be reached or did not answer in
	// time after the client's own retries (connection refused or reset,
	// no route, a DNS failure, a transport timeout, a gateway's 502/504).
	// Callers surface it as "retry later"; it never means a missing object.
	ErrUnavailable = errors.New("objstore: store unavailable")
	// ErrInvalidKey: the key is malformed (empty, absolute, "..", NUL, ...),
	// or so are a metadata key or the content type of a Put.
	ErrInvalidKey = errors.New("objstore: invalid key")
	// ErrKeyConflict: on a backend that stores keys as file paths (local),
	// the key names a directory of stored keys ("a/b" while "a/b/c" exists)
	// or lies below a stored key ("a/b/c" while "a/b" exists): a file cannot
	// also be a directory. Azure and memory never return it; rollstore's
	// layout never makes such keys.
	ErrKeyConflict = errors.New("objstore: key conflicts with a stored key (one would be the other's directory)")
	// ErrTooLarge: a conditional Put body exceeds what the backend can write
	// atomically in one shot.
	ErrTooLarge = errors.New("objstore: object too large for a conditional put")
)

// Attrs describes a stored object.
type Attrs struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
	// Metadata keys are always lower-case, whatever the backend returned
	// (Azure capitalises them header-style).
	Metadata map[string]string
	// ContentType is the media type stored with the object:
	// DefaultContentType when the Put set none.
	ContentType string
}

// DefaultContentType is the content type of an object whose Put set none,
// as on Azure.
const DefaultContentType = "application/octet-stream"

// PutOptions are the conditions and metadata of a Put. At most one of
// IfNotExists and IfMatch may be set.
type PutOptions struct {
	// IfNotExists makes the Put a create-if-absent: it fails with
	// ErrPrecondition when the key exists. This is how manifests and WAL
	// segments are committed.
	IfNotExists bool
	// IfMatch makes the Put succeed only while the object has this ETag.
	IfMatch string
	// Metadata is stored with the object. Keys must be lower-case ASCII
	// letters, digits and '_' (the intersection every backend accepts).
	Metadata map[string]string
	// ContentType is the object's media type (Azure's Content-Type
	// property); empty means DefaultContentType. See ValidateContentType.
	ContentType string
	// Size is the body length when known and > 0; 0 or -1 mean unknown.
	// Backends use it to choose single-shot or streamed uploads.
	Size int64
}

// ListOptions shape a listing.
type ListOptions struct {
	// Delimited lists one level below the prefix: keys with a further '/' are
	// folded into a single entry whose Key ends in '/' and IsPrefix is set.
	Delimited bool
}

// Entry is one listing result.
type Entry struct {
	Key          string
	Size         int64
	LastModified time.Time
	IsPrefix     bool
}

// Bucket is the object store. Every method is safe for concurrent use.
type Bucket interface {
	// Get opens the whole object.
	Get(ctx context.Context, key string) (io.ReadCloser, Attrs, error)
	// GetRange opens length bytes from offset; length < 0 reads to the end.
	// A range running past the end is clipped; an offset past the end is
	// ErrInvalidRange; an offset equal to the size yields an empty body.
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Head returns the attributes without the body.
	Head(ctx context.Context, key string) (Attrs, error)
	// Put writes the object from r. A conditional Put (IfNotExists, IfMatch)
	// is atomic: readers see the old object or the new one, never a mix, and
	// two racing create-if-absent Puts have exactly one winner.
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (Attrs, error)
	// Delete removes the object; a missing object is success.
	Delete(ctx context.Context, key string) error
	// DeleteIfMatch removes the object only if its ETag is etag, atomically
	// as a conditional Put: ErrPrecondition when it has another ETag or
	// there is none (as HTTP's If-Match). After a lost answer,
	// ErrPrecondition may follow an attempt of this call that did remove
	// it; it never means another object was removed.
	DeleteIfMatch(ctx context.Context, key, etag string) error
	// DeleteMany removes many objects, missing ones included, as cheaply as
	// the backend allows.
	DeleteMany(ctx context.Context, keys []string) error
	// List calls fn for every key under prefix in lexical order, stopping at
	// the first error fn returns (which List then returns).
	List(ctx context.Context, prefix string, opts ListOptions, fn func(Entry) error) error
}

// ValidateKey rejects keys that no backend may accept: empty, absolute,
// with empty, "." or ".." segments, NUL or other control characters, or a
// backslash. Backends call it first; it is exported so wrappers can too.
func ValidateKey(key string) error {
	if key == "" || len(key) > 1024 {
		return errorf(ErrInvalidKey, "%q: length must be 1..1024", key)
	}
	if strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return errorf(ErrInvalidKey, "%q: leading or trailing slash", key)
	}
	for _, c := range key {
		if c < 0x20 || c == 0x7f || c == '\\' {
			return errorf(ErrInvalidKey, "%q: control character or backslash", key)
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errorf(ErrInvalidKey, "%q: empty, '.' or '..' segment", key)
		}
	}
	return nil
}

// ValidatePrefix accepts "" or a key-like prefix (which may end in '/').
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(strings.TrimSuffix(prefix, "/"))
}

// ValidateMetadata checks metadata keys against the portable alphabet.
func ValidateMetadata(md map[string]string) error {
	for k := range md {
		if k == "" || len(k) > 64 {
			return errorf(ErrInvalidKey, "metadata key %q: length must be 1..64", k)
		}
		for i, c := range k {
			ok := c >= 'a' && c <= 'z' || c == '_' || (i > 0 && c >= '0' && c <= '9')
			if !ok {
				return errorf(ErrInvalidKey, "metadata key %q: want [a-z_][a-z0-9_]*", k)
			}
		}
	}
	return nil
}

// maxContentType bounds a content type; it matches the engine's limit on
// the record field the payload's type comes from.
const maxContentType = 1024

// ValidateContentType accepts "" (the default) or up to 1024 bytes of
// printable ASCII without leading or trailing space: what every backend can
// carry, Azure as an HTTP header value. It does not parse media types, so
// that whatever a client declared is kept as declared.
func ValidateContentType(ct string) error {
	if len(ct) > maxContentType {
		return errorf(ErrInvalidKey, "content type of %d bytes: the limit is %d", len(ct), maxContentType)
	}
	if ct != strings.TrimSpace(ct) {
		return errorf(ErrInvalidKey, "content type %q: leading or trailing space", ct)
	}
	for i := 0; i < len(ct); i++ {
		if c := ct[i]; c < 0x20 || c > 0x7e {
			return errorf(ErrInvalidKey, "content type %q: want printable ASCII", ct)
		}
	}
	return nil
}

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}
