package azure_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket {
		return azuritetest.Bucket(t)
	})
}

// open returns a bucket on a fresh container, with cfg adjusted by tweak.
func open(t *testing.T, tweak func(*azure.Config)) *azure.Bucket {
	t.Helper()
	cfg := azuritetest.Config(t)
	if tweak != nil {
		tweak(&cfg)
	}
	return azuritetest.Open(t, cfg)
}

// interceptor is an HTTP client whose round trips pass through fn, which
// may call next to reach Azurite.
func interceptor(t *testing.T, fn func(req *http.Request, next http.RoundTripper) (*http.Response, error)) *http.Client {
	next := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(next.CloseIdleConnections)
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return fn(req, next)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// isBlob reports whether req addresses key (the last segments of its path).
func isBlob(req *http.Request, key string) bool {
	return strings.HasSuffix(req.URL.Path, "/"+key)
}

func mustPut(t *testing.T, b objstore.Bucket, key string, data []byte, opts objstore.PutOptions) objstore.Attrs {
	t.Helper()
	a, err := b.Put(t.Context(), key, bytes.NewReader(data), opts)
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return a
}

func mustRead(t *testing.T, b objstore.Bucket, key string) ([]byte, objstore.Attrs) {
	t.Helper()
	rc, a, err := b.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%q): reading: %v", key, err)
	}
	return data, a
}

func randomBytes(seed uint64, n int) []byte {
	data := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}).Read(data)
	return data
}

// opaque hides everything but Read, forcing Put's unknown-size path.
type opaque struct{ r io.Reader }

func (o opaque) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestCreateIfAbsentLostResponse lets the first Put Blob reach Azurite and
// then loses its response, so the SDK's retry policy resends it and gets
// 409. The Put must still succeed: it won, and its commit id says so.
func TestCreateIfAbsentLostResponse(t *testing.T) {
	const key = "wal/0/00000000000000000001/00000000000000000001.arrow"
	var puts, lost atomic.Int32
	var busyHead atomic.Bool
	b := open(t, func(c *azure.Config) {
		c.HTTPClient = interceptor(t, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
			if busyHead.Load() && req.Method == http.MethodHead {
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
			}
			resp, err := next.RoundTrip(req)
			if err != nil || req.Method != http.MethodPut || !isBlob(req, key) {
				return resp, err
			}
			puts.Add(1)
			if resp.StatusCode == http.StatusCreated && lost.Add(1) == 1 {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return nil, errors.New("simulated connection reset after the write")
			}
			return resp, nil
		})
	})

	data := []byte("first and only write")
	md := map[string]string{"commitid": "c-1", "rows": "3"}
	a, err := b.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{IfNotExists: true, Metadata: md})
	if err != nil {
		t.Fatalf("create-if-absent with a lost response: %v (want success)", err)
	}
	if n := puts.Load(); n != 2 {
		t.Fatalf("saw %d PUTs, want 2 (the write and the SDK's resend)", n)
	}
	got, ga := mustRead(t, b, key)
	if !bytes.Equal(got, data) {
		t.Errorf("content = %q, want %q", got, data)
	}
	if !maps.Equal(ga.Metadata, md) || !maps.Equal(a.Metadata, md) {
		t.Errorf("metadata: Put %v, Get %v; want %v (and no internal keys)", a.Metadata, ga.Metadata, md)
	}
	if a.ETag != ga.ETag || a.Size != int64(len(data)) {
		t.Errorf("Put attrs = %+v; Get attrs = %+v", a, ga)
	}

	// The same for If-Match: the resend fails 412 against the new ETag.
	lost.Store(0)
	puts.Store(0)
	data2 := []byte("second version")
	a2, err := b.Put(t.Context(), key, bytes.NewReader(data2), objstore.PutOptions{IfMatch: a.ETag})
	if err != nil {
		t.Fatalf("if-match with a lost response: %v (want success)", err)
	}
	if got, _ := mustRead(t, b, key); !bytes.Equal(got, data2) || a2.ETag == a.ETag || puts.Load() != 2 {
		t.Errorf("after if-match: content %q, ETag %s (was %s), %d PUTs", got, a2.ETag, a.ETag, puts.Load())
	}

	// When the check itself fails, the outcome is unknown, and the Put
	// must not claim to have lost.
	lost.Store(0)
	busyHead.Store(true)
	_, err = b.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{IfMatch: a2.ETag})
	busyHead.Store(false)
	if err == nil || errors.Is(err, objstore.ErrPrecondition) || !errors.Is(err, objstore.ErrThrottled) {
		t.Errorf("lost response, then a failing check: err = %v; want ErrThrottled and not ErrPrecondition", err)
	}
}

// TestLostResponseOvertaken: a conditional Put lands, its answer is lost,
// and another write replaces or deletes the blob before the SDK's resend is
// answered. Whether this Put won is then unknown, and it must not say
// ErrPrecondition, which promises that it wrote nothing: the engine would
// refuse a row its head swap counted, or delete files of a version it
// committed. (A condition failing on the only try still is ErrPrecondition:
// TestConditionalCompetitor.)
func TestLostResponseOvertaken(t *testing.T) {
	const key = "wal/s0/_head.json"
	cfg := azuritetest.Config(t)
	other := azuritetest.Open(t, cfg) // the competitor, on the same container
	var lose atomic.Bool
	var compete func()
	var puts atomic.Int32
	cfg.HTTPClient = interceptor(t, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || req.Method != http.MethodPut || !isBlob(req, key) || !lose.Load() {
			return resp, err
		}
		switch puts.Add(1) {
		case 1: // this Put's write landed; its answer is lost
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return nil, errors.New("simulated connection reset after the write")
		case 2: // the resend's answer: the competitor acts before it arrives
			compete()
		}
		return resp, nil
	})
	b := azuritetest.Open(t, cfg)
	ctx := t.Context()

	for _, tc := range []struct {
		name    string
		opts    func(etag string) objstore.PutOptions
		compete func(t *testing.T)
	}{
		{"if-match, then replaced", func(etag string) objstore.PutOptions { return objstore.PutOptions{IfMatch: etag} },
			func(t *testing.T) { mustPut(t, other, key, []byte("competitor"), objstore.PutOptions{}) }},
		{"create-if-absent, then deleted", func(string) objstore.PutOptions { return objstore.PutOptions{IfNotExists: true} },
			func(t *testing.T) {
				if err := other.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var etag string
			if !tc.opts("").IfNotExists {
				etag = mustPut(t, other, key, []byte("before"), objstore.PutOptions{}).ETag
			} else if err := other.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			puts.Store(0)
			compete = func() { tc.compete(t) }
			lose.Store(true)
			_, err := b.Put(ctx, key, bytes.NewReader([]byte("mine")), tc.opts(etag))
			lose.Store(false)
			if n := puts.Load(); n != 2 {
				t.Fatalf("saw %d PUTs, want 2 (the write and the SDK's resend)", n)
			}
			if err == nil || errors.Is(err, objstore.ErrPrecondition) {
				t.Fatalf("a write that landed, then was overtaken: err = %v; want an error that is not ErrPrecondition", err)
			}
		})
	}
}

func TestConditionalCompetitor(t *testing.T) {
	b := open(t, nil)
	ctx := t.Context()
	const key = "base/_versions/00000000000000000002.json"
	mustPut(t, b, key, []byte("winner"), objstore.PutOptions{IfNotExists: true})
	_, err := b.Put(ctx, key, bytes.NewReader([]byte("loser")), objstore.PutOptions{IfNotExists: true})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("second create-if-absent: err = %v, want ErrPrecondition", err)
	}
	_, err = b.Put(ctx, key, opaque{strings.NewReader("stale")}, objstore.PutOptions{IfMatch: `"0x1234"`})
	if !errors.Is(err, objstore.ErrPrecondition) {
		t.Fatalf("if-match with a stale ETag: err = %v, want ErrPrecondition", err)
	}
	if got, _ := mustRead(t, b, key); string(got) != "winner" {
		t.Errorf("content = %q, want the winner's", got)
	}
}

func TestMetadataCase(t *testing.T) {
	b := open(t, nil)
	md := map[string]string{"commitid": "abc", "row_count": "12", "x9": "Mixed Case Value"}
	for _, opts := range []objstore.PutOptions{
		{Metadata: md},
		{Metadata: md, IfNotExists: true},
	} {
		key := "md/" + map[bool]string{false: "plain", true: "cond"}[opts.IfNotExists]
		mustPut(t, b, key, []byte("x"), opts)
		h, err := b.Head(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		_, g := mustRead(t, b, key)
		if !maps.Equal(h.Metadata, md) || !maps.Equal(g.Metadata, md) {
			t.Errorf("%s: Head %v, Get %v; want %v", key, h.Metadata, g.Metadata, md)
		}
	}
	_, err := b.Put(t.Context(), "md/reserved", strings.NewReader("x"), objstore.PutOptions{
		Metadata: map[string]string{"rollstorecommit": "mine"},
	})
	if !errors.Is(err, objstore.ErrInvalidKey) {
		t.Errorf("Put with the reserved metadata key: err = %v, want ErrInvalidKey", err)
	}
}

// TestMissingContainer checks that a missing container is never reported
// as a missing object: the read path retries the latter.
func TestMissingContainer(t *testing.T) {
	b := open(t, func(c *azure.Config) { c.CreateContainer = false })
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrContainerNotFound) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrContainerNotFound only", what, err)
		}
	}
	check("Check", b.Check(ctx))
	_, _, err := b.Get(ctx, "a/b")
	check("Get", err)
	_, err = b.GetRange(ctx, "a/b", 1, 2)
	check("GetRange", err)
	_, err = b.GetRange(ctx, "a/b", 0, 0)
	check("GetRange empty", err)
	_, err = b.Head(ctx, "a/b")
	check("Head", err)
	_, err = b.Put(ctx, "a/b", strings.NewReader("x"), objstore.PutOptions{})
	check("Put", err)
	_, err = b.Put(ctx, "a/b", strings.NewReader("x"), objstore.PutOptions{IfNotExists: true})
	check("Put if-absent", err)
	_, err = b.Put(ctx, "a/b", opaque{bytes.NewReader(make([]byte, 5<<20))}, objstore.PutOptions{Size: -1})
	check("Put streamed", err)
	check("Delete", b.Delete(ctx, "a/b"))
	check("DeleteMany", b.DeleteMany(ctx, []string{"a/b", "a/c"}))
	check("List", b.List(ctx, "a/", objstore.ListOptions{}, func(objstore.Entry) error { return nil }))
	check("List delimited", b.List(ctx, "", objstore.ListOptions{Delimited: true}, func(objstore.Entry) error { return nil }))
}

func TestWrongKey(t *testing.T) {
	good := azuritetest.Bucket(t) // the container exists; only the key is wrong
	key := base64.StdEncoding.EncodeToString(randomBytes(7, 64))
	var parts []string
	for p := range strings.SplitSeq(azuritetest.ConnectionString(t), ";") {
		if strings.HasPrefix(p, "AccountKey=") {
			p = "AccountKey=" + key
		}
		parts = append(parts, p)
	}
	b, err := azure.New(t.Context(), azure.Config{
		Container:        good.Container(),
		Auth:             azure.AuthConnectionString,
		ConnectionString: strings.Join(parts, ";"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := t.Context()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, objstore.ErrAuth) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrAuth only", what, err)
		}
	}
	check("Check", b.Check(ctx))
	_, _, err = b.Get(ctx, "k")
	check("Get", err)
	_, err = b.Head(ctx, "k")
	check("Head", err)
	_, err = b.Put(ctx, "k", strings.NewReader("x"), objstore.PutOptions{IfNotExists: true})
	check("Put", err)
	check("List", b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil }))
	check("DeleteMany", b.DeleteMany(ctx, []string{"a", "b"}))
}

func TestSharedKeyAuth(t *testing.T) {
	cs := azuritetest.ConnectionString(t)
	fields := map[string]string{}
	for p := range strings.SplitSeq(cs, ";") {
		if k, v, ok := strings.Cut(p, "="); ok {
			fields[k] = v
		}
	}
	cfg := azure.Config{
		Container:       azuritetest.ContainerName(),
		Auth:            azure.AuthSharedKey,
		AccountName:     fields["AccountName"],
		AccountKey:      fields["AccountKey"],
		Endpoint:        fields["BlobEndpoint"],
		CreateContainer: true,
	}
	b, err := azure.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		azuritetest.DeleteContainer(t, cs, cfg.Container)
	})
	if err := b.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	mustPut(t, b, "k", []byte("v"), objstore.PutOptions{})
	if got, _ := mustRead(t, b, "k"); string(got) != "v" {
		t.Errorf("got %q", got)
	}
}

// TestStreamedUpload writes 20 MiB of unknown size; it must go out in
// blocks (the SDK's UploadStream) and read back intact.
func TestStreamedUpload(t *testing.T) {
	var blocks atomic.Int32
	b := open(t, func(c *azure.Config) {
		c.HTTPClient = interceptor(t, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
			if req.URL.Query().Get("comp") == "block" {
				blocks.Add(1)
			}
			return next.RoundTrip(req)
		})
	})
	const size = 20 << 20
	data := randomBytes(1, size)
	a, err := b.Put(t.Context(), "payloads/big", opaque{bytes.NewReader(data)}, objstore.PutOptions{Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if a.Size != size || a.ETag == "" {
		t.Errorf("Put attrs = %+v, want Size %d and an ETag", a, size)
	}
	if n := blocks.Load(); n != size/azure.DefaultBlockSize {
		t.Errorf("staged %d blocks, want %d", n, size/azure.DefaultBlockSize)
	}
	rc, ga, err := b.Get(t.Context(), "payloads/big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) || ga.Size != size {
		t.Errorf("read back %d bytes with a different hash", ga.Size)
	}
}

func TestConditionalTooLarge(t *testing.T) {
	const limit = 1024
	b := open(t, func(c *azure.Config) { c.MaxSinglePut = limit })
	ctx := t.Context()
	big := randomBytes(2, limit+1)
	for _, tc := range []struct {
		name string
		r    io.Reader
		opts objstore.PutOptions
	}{
		{"opaque", opaque{bytes.NewReader(big)}, objstore.PutOptions{IfNotExists: true, Size: -1}},
		{"opaque-size", opaque{bytes.NewReader(big)}, objstore.PutOptions{IfNotExists: true, Size: limit + 1}},
		{"lying-size", opaque{bytes.NewReader(big)}, objstore.PutOptions{IfNotExists: true, Size: 10}},
		{"seeker", bytes.NewReader(big), objstore.PutOptions{IfNotExists: true}},
		{"if-match", opaque{bytes.NewReader(big)}, objstore.PutOptions{IfMatch: `"x"`, Size: -1}},
	} {
		key := "big/" + tc.name
		if _, err := b.Put(ctx, key, tc.r, tc.opts); !errors.Is(err, objstore.ErrTooLarge) {
			t.Errorf("%s: err = %v, want ErrTooLarge", tc.name, err)
		}
		if _, err := b.Head(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s: Head after refused Put: err = %v, want ErrNotFound", tc.name, err)
		}
	}
	// At the limit it fits, and an unconditional Put has no limit.
	mustPut(t, b, "big/fits", big[:limit], objstore.PutOptions{IfNotExists: true})
	if _, err := b.Put(ctx, "big/plain", opaque{bytes.NewReader(big)}, objstore.PutOptions{Size: -1}); err != nil {
		t.Errorf("unconditional Put above MaxSinglePut: %v", err)
	}
}

// TestPartlyReadBody checks that a body is taken from the reader's current
// offset, not rewound to its start.
func TestPartlyReadBody(t *testing.T) {
	b := open(t, nil)
	for _, opts := range []objstore.PutOptions{{}, {IfNotExists: true}} {
		key := "partly/" + map[bool]string{false: "plain", true: "cond"}[opts.IfNotExists]
		r := strings.NewReader("skipped|stored")
		io.CopyN(io.Discard, r, int64(len("skipped|")))
		a, err := b.Put(t.Context(), key, r, opts)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := mustRead(t, b, key); string(got) != "stored" || a.Size != 6 {
			t.Errorf("%s: stored %q (Size %d), want %q", key, got, a.Size, "stored")
		}
	}
	// A wrong size hint changes the upload path, never the content.
	data := randomBytes(3, 3000)
	if _, err := b.Put(t.Context(), "partly/hint", opaque{bytes.NewReader(data)}, objstore.PutOptions{Size: 10}); err != nil {
		t.Fatal(err)
	}
	if got, _ := mustRead(t, b, "partly/hint"); !bytes.Equal(got, data) {
		t.Errorf("with a short size hint: stored %d bytes, want %d", len(got), len(data))
	}
}

func TestGetRangeEdges(t *testing.T) {
	b := open(t, nil)
	ctx := t.Context()
	mustPut(t, b, "r/ten", []byte("0123456789"), objstore.PutOptions{})
	mustPut(t, b, "r/empty", nil, objstore.PutOptions{})
	for _, tc := range []struct {
		key       string
		off, n    int64
		want      string
		sentinel  error
		zeroBytes bool
	}{
		{key: "r/ten", off: 3, n: 4, want: "3456"},
		{key: "r/ten", off: 8, n: 10, want: "89"},
		{key: "r/ten", off: 2, n: -1, want: "23456789"},
		{key: "r/ten", off: 0, n: 0, want: ""},
		{key: "r/ten", off: 10, n: 0, want: ""},
		{key: "r/ten", off: 10, n: 5, want: ""},  // 416 from Azure, at the end
		{key: "r/ten", off: 10, n: -1, want: ""}, // likewise
		{key: "r/ten", off: 11, n: 1, sentinel: objstore.ErrInvalidRange},
		{key: "r/ten", off: 11, n: 0, sentinel: objstore.ErrInvalidRange},
		{key: "r/ten", off: 11, n: -1, sentinel: objstore.ErrInvalidRange},
		{key: "r/ten", off: -1, n: 2, sentinel: objstore.ErrInvalidRange},
		{key: "r/empty", off: 0, n: -1, want: ""},
		{key: "r/empty", off: 0, n: 1, want: ""},
		{key: "r/empty", off: 1, n: 1, sentinel: objstore.ErrInvalidRange},
		{key: "r/missing", off: 0, n: 1, sentinel: objstore.ErrNotFound},
		{key: "r/missing", off: 0, n: 0, sentinel: objstore.ErrNotFound},
	} {
		rc, err := b.GetRange(ctx, tc.key, tc.off, tc.n)
		if tc.sentinel != nil {
			if !errors.Is(err, tc.sentinel) {
				t.Errorf("GetRange(%s, %d, %d): err = %v, want %v", tc.key, tc.off, tc.n, err, tc.sentinel)
			}
			if err == nil {
				rc.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("GetRange(%s, %d, %d): %v", tc.key, tc.off, tc.n, err)
			continue
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != tc.want {
			t.Errorf("GetRange(%s, %d, %d) = %q, %v; want %q", tc.key, tc.off, tc.n, got, err, tc.want)
		}
	}
}

// TestReadResume breaks the connection of a download part-way, after the
// blob was left alone, deleted or replaced. The resumed read must return
// the original bytes or fail with ErrNotFound; never anything else.
func TestReadResume(t *testing.T) {
	const key = "wal/0/gen/seg"
	const size = 2 << 20
	var breakAfter atomic.Int64 // bytes of the next GET body to deliver; 0: don't break
	b := open(t, func(c *azure.Config) {
		c.HTTPClient = interceptor(t, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
			resp, err := next.RoundTrip(req)
			if err == nil && req.Method == http.MethodGet && isBlob(req, key) {
				if n := breakAfter.Swap(0); n > 0 {
					resp.Body = &breakingBody{rc: resp.Body, left: n}
				}
			}
			return resp, err
		})
	})
	data := randomBytes(4, size)
	for _, tc := range []struct {
		name   string
		meddle func()
		ranged bool
		want   error // nil: the full, original bytes
	}{
		{name: "intact"},
		{name: "intact-ranged", ranged: true},
		{name: "deleted", meddle: func() {
			if err := b.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		}, want: objstore.ErrNotFound},
		{name: "deleted-ranged", ranged: true, meddle: func() {
			if err := b.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		}, want: objstore.ErrNotFound},
		{name: "replaced", meddle: func() {
			mustPut(t, b, key, randomBytes(5, size), objstore.PutOptions{})
		}, want: objstore.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustPut(t, b, key, data, objstore.PutOptions{})
			breakAfter.Store(size / 2)
			var rc io.ReadCloser
			var err error
			want := data
			if tc.ranged {
				want = data[1000 : size-1000]
				rc, err = b.GetRange(t.Context(), key, 1000, int64(len(want)))
			} else {
				rc, _, err = b.Get(t.Context(), key)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			head := make([]byte, 1<<10)
			if _, err := io.ReadFull(rc, head); err != nil {
				t.Fatal(err)
			}
			if tc.meddle != nil {
				tc.meddle()
			}
			rest, err := io.ReadAll(rc)
			got := append(head, rest...)
			if breakAfter.Load() != 0 {
				t.Fatal("the download was not broken; the test did not exercise a resume")
			}
			if re, ok := errors.AsType[*azcore.ResponseError](err); ok {
				t.Logf("read %d bytes, then %d %s", len(got), re.StatusCode, re.ErrorCode)
			}
			if !bytes.Equal(got, want[:min(len(got), len(want))]) {
				t.Fatalf("read %d bytes that differ from the object opened", len(got))
			}
			switch {
			case tc.want == nil && (err != nil || len(got) != len(want)):
				t.Errorf("read %d of %d bytes, err %v; want all", len(got), len(want), err)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("read %d of %d bytes, err %v; want %v", len(got), len(want), err, tc.want)
			}
		})
	}
}

type breakingBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *breakingBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("simulated connection reset mid-body")
	}
	n, err := b.rc.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	return n, err
}

func (b *breakingBody) Close() error { return b.rc.Close() }

// TestDeleteManyUsesBatches checks that 300 keys, some missing, go out as
// two blob batches and no individual deletes.
func TestDeleteManyUsesBatches(t *testing.T) {
	var batches, deletes atomic.Int32
	b := open(t, func(c *azure.Config) {
		c.HTTPClient = interceptor(t, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
			switch {
			case req.Method == http.MethodPost && req.URL.Query().Get("comp") == "batch":
				batches.Add(1)
			case req.Method == http.MethodDelete:
				deletes.Add(1)
			}
			return next.RoundTrip(req)
		})
	})
	ctx := t.Context()
	var keys []string
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range 300 {
		// Slashes, spaces and punctuation: batch sub-requests escape names.
		key := fmt.Sprintf("t/wal/%d/seg %s+%%20&=/%03d", i%7, strings.Repeat("x", i%5), i)
		keys = append(keys, key)
		if i%6 == 0 { // every sixth is missing
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := b.Put(ctx, key, strings.NewReader(key), objstore.PutOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := b.DeleteMany(ctx, keys); err != nil {
		t.Fatal(err)
	}
	if batches.Load() != 2 || deletes.Load() != 0 {
		t.Errorf("%d batches and %d single deletes, want 2 and 0", batches.Load(), deletes.Load())
	}
	var left []string
	if err := b.List(ctx, "", objstore.ListOptions{}, func(e objstore.Entry) error {
		left = append(left, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err) // else an empty listing would pass
	}
	if len(left) != 0 {
		t.Errorf("%d keys left after DeleteMany, e.g. %q", len(left), left[0])
	}
}

func TestListDelimitedMerge(t *testing.T) {
	b := open(t, nil)
	for _, k := range []string{"p/a", "p/b/x", "p/b0", "p/c", "p/b/y/z", "p/a.", "q"} {
		mustPut(t, b, k, []byte(k), objstore.PutOptions{})
	}
	var got []string
	err := b.List(t.Context(), "p/", objstore.ListOptions{Delimited: true}, func(e objstore.Entry) error {
		if e.IsPrefix != strings.HasSuffix(e.Key, "/") {
			t.Errorf("entry %+v", e)
		}
		got = append(got, e.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"p/a", "p/a.", "p/b/", "p/b0", "p/c"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestCheck(t *testing.T) {
	b := azuritetest.Bucket(t)
	if err := b.Check(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Check(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Check with a cancelled context: %v", err)
	}
}

// TestConfig needs no Azurite.
func TestConfig(t *testing.T) {
	const cs = "DefaultEndpointsProtocol=http;AccountName=a;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:1/a;"
	for _, tc := range []struct {
		name string
		cfg  azure.Config
		ok   bool
	}{
		{"connection string", azure.Config{Container: "abc", Auth: azure.AuthConnectionString, ConnectionString: cs}, true},
		{"shared key", azure.Config{Container: "abc", Auth: azure.AuthSharedKey, AccountName: "a", AccountKey: "a2V5"}, true},
		{"no auth", azure.Config{Container: "abc", ConnectionString: cs}, false},
		{"unknown auth", azure.Config{Container: "abc", Auth: "magic", ConnectionString: cs}, false},
		{"connection string and key", azure.Config{Container: "abc", Auth: azure.AuthConnectionString, ConnectionString: cs, AccountKey: "a2V5"}, false},
		{"connection string missing", azure.Config{Container: "abc", Auth: azure.AuthConnectionString}, false},
		{"shared key missing", azure.Config{Container: "abc", Auth: azure.AuthSharedKey, AccountName: "a"}, false},
		{"identity with key", azure.Config{Container: "abc", Auth: azure.AuthDefault, AccountName: "a", AccountKey: "a2V5"}, false},
		{"identity without account", azure.Config{Container: "abc", Auth: azure.AuthWorkloadIdentity}, false},
		{"bad endpoint", azure.Config{Container: "abc", Auth: azure.AuthSharedKey, AccountName: "a", AccountKey: "a2V5", Endpoint: "acct.blob.core.windows.net"}, false},
		{"bad container", azure.Config{Container: "Bad_Name", Auth: azure.AuthConnectionString, ConnectionString: cs}, false},
		{"double hyphen", azure.Config{Container: "a--b", Auth: azure.AuthConnectionString, ConnectionString: cs}, false},
		{"single put too big", azure.Config{Container: "abc", Auth: azure.AuthConnectionString, ConnectionString: cs, MaxSinglePut: azure.MaxSinglePutLimit + 1}, false},
		{"block too small", azure.Config{Container: "abc", Auth: azure.AuthConnectionString, ConnectionString: cs, BlockSize: 1000}, false},
	} {
		b, err := azure.New(t.Context(), tc.cfg)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v, want ok %v", tc.name, err, tc.ok)
		}
		if b != nil {
			b.Close()
		}
	}
}

// TestThrottled answers every request with 503 ServerBusy or a code-less
// 429; after the SDK's retries the error must be ErrThrottled, never
// ErrNotFound.
func TestThrottled(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   string
	}{{http.StatusServiceUnavailable, "ServerBusy"}, {http.StatusTooManyRequests, ""}} {
		var tries atomic.Int32
		b := open(t, func(c *azure.Config) {
			c.CreateContainer = false
			c.Retry.MaxRetries = 2
			c.Retry.RetryDelay = time.Millisecond
			c.HTTPClient = interceptor(t, func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
				tries.Add(1)
				h := http.Header{}
				if tc.code != "" {
					h.Set("x-ms-error-code", tc.code)
				}
				return &http.Response{
					StatusCode: tc.status, Status: http.StatusText(tc.status),
					Header: h, Body: http.NoBody, Request: req,
				}, nil
			})
		})
		ctx := t.Context()
		_, err := b.Head(ctx, "k")
		if !errors.Is(err, objstore.ErrThrottled) || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%d %s: Head: err = %v, want ErrThrottled", tc.status, tc.code, err)
		}
		if n := tries.Load(); n != 3 {
			t.Errorf("%d %s: %d tries, want 3", tc.status, tc.code, n)
		}
		_, _, err = b.Get(ctx, "k")
		if !errors.Is(err, objstore.ErrThrottled) {
			t.Errorf("%d %s: Get: err = %v, want ErrThrottled", tc.status, tc.code, err)
		}
		err = b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil })
		if !errors.Is(err, objstore.ErrThrottled) {
			t.Errorf("%d %s: List: err = %v, want ErrThrottled", tc.status, tc.code, err)
		}
	}
}
