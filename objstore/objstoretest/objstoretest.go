// Package objstoretest is the conformance suite every objstore.Bucket must
// pass.
//
// It has no backend of its own. A backend's test calls Run with a constructor,
// in the manner of testing/fstest.TestFS and thanos-io/objstore's acceptance
// tests, so that the memory, local and Azure backends are held to one
// contract by one body of code:
//
//	func TestConformance(t *testing.T) {
//		objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return memory.New() })
//	}
//
// Backends that implement objstore.Leaser also call RunLeases, the suite of
// the lease contract.
//
// Each case asserts bytes, counts and error sentinels (with errors.Is), not
// merely the absence of errors, and keeps its data small: the Azure run goes
// through a single-threaded Azurite.
package objstoretest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

// Run runs the suite as subtests of t. Each subtest calls newBucket with its
// own *testing.T and must get a fresh, empty bucket; newBucket may register
// cleanups on that t, and should call t.Fatal (or t.Skip) when it cannot
// provide one. Options describe what the backend may refuse.
func Run(t *testing.T, newBucket func(t *testing.T) objstore.Bucket, opts ...Option) {
	for _, c := range cases(newConfig(opts)) {
		t.Run(c.name, func(t *testing.T) {
			b := newBucket(t)
			if b == nil {
				t.Fatal("newBucket returned nil")
			}
			c.fn(t, b)
		})
	}
}

// An Option adapts the suite to a backend's documented limits.
type Option func(*config)

type config struct {
	// pathKeys: the backend refuses nested keys; see PathKeys.
	pathKeys bool
}

func newConfig(opts []Option) config {
	var c config
	for _, opt := range opts {
		opt(&c)
	}
	return c
}

// PathKeys declares a backend that stores keys as file paths and so cannot
// hold a key and keys below it ("a/b" and "a/b/c"): it refuses the second
// with objstore.ErrKeyConflict. The cases about such keys then check that
// refusal instead — it changes nothing, whatever the Put's conditions, and
// is never ErrPrecondition, which would tell a committer that someone else
// won — and the other cases use keys that do not nest.
func PathKeys() Option {
	return func(c *config) { c.pathKeys = true }
}

type testCase struct {
	name string
	fn   func(*testing.T, objstore.Bucket)
}

// cases are the subtests, in the order Run runs them. The names are stable:
// a backend that must skip one can say so with -skip.
func cases(c config) []testCase {
	with := func(fn func(*testing.T, objstore.Bucket, config)) func(*testing.T, objstore.Bucket) {
		return func(t *testing.T, b objstore.Bucket) { fn(t, b, c) }
	}
	return []testCase{
		{"NotFound", testNotFound},
		{"PutGet", testPutGet},
		{"Empty", testEmpty},
		{"Large", testLarge},
		{"FailedBody", testFailedBody},
		{"Range", testRange},
		{"Metadata", testMetadata},
		{"ContentType", testContentType},
		{"InvalidKey", testInvalidKey},
		{"KeyIsAlsoPrefix", with(testKeyIsAlsoPrefix)},
		{"Overwrite", testOverwrite},
		{"CreateIfAbsent", testCreateIfAbsent},
		{"CreateIfAbsentRace", testCreateIfAbsentRace},
		{"IfMatch", testIfMatch},
		{"ExclusiveConditions", testExclusiveConditions},
		{"Delete", with(testDelete)},
		{"DeleteIfMatch", testDeleteIfMatch},
		{"DeleteMany", with(testDeleteMany)},
		{"DeleteManyBatch", testDeleteManyBatch},
		{"List", testList},
		{"ListDelimited", testListDelimited},
		{"ListOrder", testListOrder},
		{"ListStop", testListStop},
		{"ListCancel", testListCancel},
		{"ListMutate", testListMutate},
		{"Concurrent", testConcurrent},
		{"DeleteDuringRead", testDeleteDuringRead},
		{"Canceled", testCanceled},
	}
}

// otherSentinels are the sentinels an ErrNotFound must never also match: the
// read path retries on ErrNotFound, and must not retry (or answer 404) for
// a missing container, refused credentials or throttling.
var otherSentinels = []error{
	objstore.ErrPrecondition,
	objstore.ErrInvalidRange,
	objstore.ErrContainerNotFound,
	objstore.ErrAuth,
	objstore.ErrThrottled,
	objstore.ErrInvalidKey,
	objstore.ErrTooLarge,
}

// put writes data under key, declaring its size unless opts already does.
func put(t *testing.T, b objstore.Bucket, key string, data []byte, opts objstore.PutOptions) (objstore.Attrs, error) {
	t.Helper()
	if opts.Size == 0 {
		opts.Size = int64(len(data))
	}
	return b.Put(t.Context(), key, bytes.NewReader(data), opts)
}

// mustPut writes data under key and checks what Put reports.
func mustPut(t *testing.T, b objstore.Bucket, key string, data []byte, opts objstore.PutOptions) objstore.Attrs {
	t.Helper()
	a, err := put(t, b, key, data, opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	if a.Key != key || a.Size != int64(len(data)) || a.ETag == "" {
		t.Fatalf("Put(%q) = Key %q, Size %d, ETag %q; want Key %q, Size %d, an ETag",
			key, a.Key, a.Size, a.ETag, key, len(data))
	}
	return a
}

// readAll reads rc to the end and closes it.
func readAll(t *testing.T, rc io.ReadCloser) []byte {
	t.Helper()
	data, err := io.ReadAll(rc)
	if cerr := rc.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("close: %w", cerr)
	}
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return data
}

// mustGet reads a whole object and checks its attributes agree with it.
func mustGet(t *testing.T, b objstore.Bucket, key string) ([]byte, objstore.Attrs) {
	t.Helper()
	rc, a, err := b.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	data := readAll(t, rc)
	if a.Key != key || a.Size != int64(len(data)) || a.ETag == "" || a.LastModified.IsZero() {
		t.Errorf("Get(%q) attrs = Key %q, Size %d, ETag %q, LastModified %v; want the key, Size %d, an ETag and a time",
			key, a.Key, a.Size, a.ETag, a.LastModified, len(data))
	}
	return data, a
}

// mustHead returns the attributes of an object that must exist.
func mustHead(t *testing.T, b objstore.Bucket, key string) objstore.Attrs {
	t.Helper()
	a, err := b.Head(t.Context(), key)
	if err != nil {
		t.Fatalf("Head(%q): %v", key, err)
	}
	if a.Key != key {
		t.Errorf("Head(%q).Key = %q", key, a.Key)
	}
	return a
}

// checkContent asserts that key holds exactly want.
func checkContent(t *testing.T, b objstore.Bucket, key string, want []byte) objstore.Attrs {
	t.Helper()
	got, a := mustGet(t, b, key)
	checkBytes(t, fmt.Sprintf("Get(%q)", key), got, want)
	return a
}

// checkBytes compares without printing megabytes.
func checkBytes(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("%s: got %d bytes, want %d; first difference at offset %d", what, len(got), len(want), i)
}

// checkErr asserts that err matches sentinel.
func checkErr(t *testing.T, what string, err, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: err = %v, want %v", what, err, sentinel)
	}
}

// checkNotFound asserts that err is ErrNotFound and no other sentinel.
func checkNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("%s: err = %v, want ErrNotFound", what, err)
		return
	}
	for _, s := range otherSentinels {
		if errors.Is(err, s) {
			t.Errorf("%s: err = %v matches %v as well as ErrNotFound", what, err, s)
		}
	}
}

// checkMissing asserts that every read of key reports ErrNotFound.
func checkMissing(t *testing.T, b objstore.Bucket, key string) {
	t.Helper()
	ctx := t.Context()
	_, err := b.Head(ctx, key)
	checkNotFound(t, fmt.Sprintf("Head(%q)", key), err)
	rc, _, err := b.Get(ctx, key)
	if err == nil {
		rc.Close()
	}
	checkNotFound(t, fmt.Sprintf("Get(%q)", key), err)
	rc, err = b.GetRange(ctx, key, 0, -1)
	if err == nil {
		rc.Close()
	}
	checkNotFound(t, fmt.Sprintf("GetRange(%q, 0, -1)", key), err)
}

// list collects a listing.
func list(t *testing.T, b objstore.Bucket, prefix string, opts objstore.ListOptions) []objstore.Entry {
	t.Helper()
	var out []objstore.Entry
	err := b.List(t.Context(), prefix, opts, func(e objstore.Entry) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q, %+v): %v", prefix, opts, err)
	}
	return out
}

// listKeys collects a listing's keys, with prefixes shown as they are listed
// (ending in '/') and checked to carry IsPrefix.
func listKeys(t *testing.T, b objstore.Bucket, prefix string, opts objstore.ListOptions) []string {
	t.Helper()
	var keys []string
	for _, e := range list(t, b, prefix, opts) {
		if e.IsPrefix != strings.HasSuffix(e.Key, "/") {
			t.Errorf("List(%q, %+v): entry %q has IsPrefix %v", prefix, opts, e.Key, e.IsPrefix)
		}
		keys = append(keys, e.Key)
	}
	return keys
}

// checkKeys compares a listing against want, treating nil and empty alike.
func checkKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s:\n got %q\nwant %q", what, got, want)
	}
}

// putMany writes content(key) under every key with a few writers at once,
// which keeps the setup of larger cases quick on a remote store.
func putMany(t *testing.T, b objstore.Bucket, keys []string) {
	t.Helper()
	const writers = 8
	work := make(chan string)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for key := range work {
				data := content(key)
				if _, err := put(t, b, key, data, objstore.PutOptions{}); err != nil {
					t.Errorf("Put(%q): %v", key, err)
				}
			}
		})
	}
	for _, key := range keys {
		work <- key
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// content is the self-describing body stored under key: the key, then
// 256..2303 bytes of noise seeded by the key, so a reader that knows only the
// key can tell a complete, correct body from a torn, short or foreign one.
func content(key string) []byte {
	h := fnv.New64a()
	h.Write([]byte(key))
	seed := h.Sum64()
	n := 256 + int(seed%2048)
	return append([]byte(key+"\n"), noise(seed, n)...)
}

// noise returns n reproducible pseudo-random bytes.
func noise(seed uint64, n int) []byte {
	var s [32]byte
	binary.LittleEndian.PutUint64(s[:], seed)
	data := make([]byte, n)
	rand.NewChaCha8(s).Read(data)
	return data
}

// opaque hides every method but Read, so a backend cannot learn the body's
// length by seeking or type assertion and must take its unknown-size path.
type opaque struct{ r io.Reader }

func (o opaque) Read(p []byte) (int, error) { return o.r.Read(p) }

// canceled returns a context that is already cancelled.
func canceled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}
