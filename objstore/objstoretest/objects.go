package objstoretest

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

func testNotFound(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	checkMissing(t, b, "missing/object")

	// Ranges do not get to skip the existence check: a backend that answers
	// an empty range without asking the store, or checks the offset first,
	// would turn a missing object into success or ErrInvalidRange.
	for _, r := range [][2]int64{{0, 0}, {10, 5}, {1 << 40, -1}} {
		rc, err := b.GetRange(ctx, "missing/object", r[0], r[1])
		if err == nil {
			rc.Close()
		}
		checkNotFound(t, fmt.Sprintf("GetRange(missing, %d, %d)", r[0], r[1]), err)
	}

	// Neighbours change nothing, and a key that is only a prefix of stored
	// keys (a directory, to a file-system backend) is not an object.
	mustPut(t, b, "missing/objectx", []byte("x"), objstore.PutOptions{})
	mustPut(t, b, "missing/object/child", []byte("y"), objstore.PutOptions{})
	checkMissing(t, b, "missing/object")
	checkMissing(t, b, "missing")
	checkMissing(t, b, "missing/obj")
}

func testPutGet(t *testing.T, b objstore.Bucket) {
	const key = "dir/sub/object.bin"
	data := []byte("hello, rollstore\x00\xff\n")
	pa := mustPut(t, b, key, data, objstore.PutOptions{})
	ga := checkContent(t, b, key, data)
	ha := mustHead(t, b, key)
	if ga.ETag != pa.ETag || ha.ETag != pa.ETag {
		t.Errorf("ETags: Put %q, Get %q, Head %q; want all equal", pa.ETag, ga.ETag, ha.ETag)
	}
	if ha.Size != int64(len(data)) {
		t.Errorf("Head.Size = %d, want %d", ha.Size, len(data))
	}
	if !ha.LastModified.Equal(ga.LastModified) {
		t.Errorf("LastModified: Get %v, Head %v; want equal", ga.LastModified, ha.LastModified)
	}
	if len(ha.Metadata) != 0 {
		t.Errorf("Head.Metadata = %v, want none", ha.Metadata)
	}

	// A body whose length the backend cannot learn up front.
	const key2 = "dir/sub/unknown-size"
	a, err := b.Put(t.Context(), key2, opaque{bytes.NewReader(data)}, objstore.PutOptions{Size: -1})
	if err != nil {
		t.Fatalf("Put(%q, Size -1): %v", key2, err)
	}
	if a.Size != int64(len(data)) || a.ETag == "" {
		t.Errorf("Put(%q, Size -1) = Size %d, ETag %q; want %d and an ETag", key2, a.Size, a.ETag, len(data))
	}
	checkContent(t, b, key2, data)
	checkContent(t, b, key, data)
}

func testEmpty(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	bodies := []struct {
		key  string
		put  func(key string) (objstore.Attrs, error)
		name string
	}{
		{"empty/nil", func(k string) (objstore.Attrs, error) {
			return b.Put(ctx, k, nil, objstore.PutOptions{})
		}, "nil reader, Size 0"},
		{"empty/reader", func(k string) (objstore.Attrs, error) {
			return b.Put(ctx, k, bytes.NewReader(nil), objstore.PutOptions{Size: 0})
		}, "empty reader, Size 0"},
		{"empty/unknown", func(k string) (objstore.Attrs, error) {
			return b.Put(ctx, k, opaque{strings.NewReader("")}, objstore.PutOptions{Size: -1})
		}, "empty reader, Size -1"},
		{"empty/created", func(k string) (objstore.Attrs, error) {
			return b.Put(ctx, k, nil, objstore.PutOptions{IfNotExists: true})
		}, "nil reader, IfNotExists"},
	}
	for _, c := range bodies {
		a, err := c.put(c.key)
		if err != nil {
			t.Errorf("Put(%s): %v", c.name, err)
			continue
		}
		if a.Size != 0 || a.ETag == "" {
			t.Errorf("Put(%s) = Size %d, ETag %q; want 0 and an ETag", c.name, a.Size, a.ETag)
		}
		checkContent(t, b, c.key, []byte{})
		if a := mustHead(t, b, c.key); a.Size != 0 {
			t.Errorf("Head(%s).Size = %d", c.name, a.Size)
		}
		// Azure answers 416 to any range on an empty blob, so these are
		// exactly the ones a backend must special-case.
		for _, r := range [][2]int64{{0, -1}, {0, 0}, {0, 10}} {
			rc, err := b.GetRange(ctx, c.key, r[0], r[1])
			if err != nil {
				t.Errorf("GetRange(%s, %d, %d): %v", c.name, r[0], r[1], err)
				continue
			}
			checkBytes(t, fmt.Sprintf("GetRange(%s, %d, %d)", c.name, r[0], r[1]), readAll(t, rc), nil)
		}
		rc, err := b.GetRange(ctx, c.key, 1, -1)
		if err == nil {
			rc.Close()
		}
		checkErr(t, fmt.Sprintf("GetRange(%s, 1, -1)", c.name), err, objstore.ErrInvalidRange)
	}
	for _, e := range list(t, b, "empty/", objstore.ListOptions{}) {
		if e.Size != 0 {
			t.Errorf("List: %s has Size %d, want 0", e.Key, e.Size)
		}
	}
}

func testLarge(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	const size = 5 << 20
	data := noise(5, size)

	// Known size, through whatever path the backend picks for it.
	a := mustPut(t, b, "large/known", data, objstore.PutOptions{})
	checkContent(t, b, "large/known", data)

	// Unknown size, conditional: the backend must still write it in one
	// atomic shot (or refuse with ErrTooLarge, which 5 MiB must not hit).
	a2, err := b.Put(ctx, "large/unknown", opaque{bytes.NewReader(data)}, objstore.PutOptions{Size: -1, IfNotExists: true})
	if err != nil {
		t.Fatalf("Put(large/unknown, Size -1, IfNotExists): %v", err)
	}
	if a2.Size != size {
		t.Errorf("Put(large/unknown).Size = %d, want %d", a2.Size, size)
	}
	checkContent(t, b, "large/unknown", data)

	if h := mustHead(t, b, "large/known"); h.Size != size || h.ETag != a.ETag {
		t.Errorf("Head(large/known) = Size %d, ETag %q; want %d, %q", h.Size, h.ETag, size, a.ETag)
	}
	rc, err := b.GetRange(ctx, "large/unknown", size-100, -1)
	if err != nil {
		t.Fatalf("GetRange(large/unknown, size-100, -1): %v", err)
	}
	checkBytes(t, "GetRange(large/unknown, size-100, -1)", readAll(t, rc), data[size-100:])
}

// testFailedBody: a body that fails midway, past the first blocks of a
// streamed upload, leaves no object and no trace of it under its key, and
// the Put reports the reader's error.
func testFailedBody(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	errBody := errors.New("the client went away")
	for _, c := range []struct {
		name string
		opts objstore.PutOptions
	}{
		{"unknown size", objstore.PutOptions{Size: -1}},
		{"known size", objstore.PutOptions{Size: 12 << 20}},
		{"create-if-absent", objstore.PutOptions{Size: -1, IfNotExists: true}},
	} {
		key := "failed/" + strings.ReplaceAll(c.name, " ", "-")
		body := &failingReader{r: bytes.NewReader(noise(6, 12<<20)), after: 9 << 20, err: errBody}
		_, err := b.Put(ctx, key, body, c.opts)
		if !errors.Is(err, errBody) && !errors.Is(err, objstore.ErrTooLarge) {
			t.Errorf("%s: Put of a failing body: %v, want the body's error", c.name, err)
		}
		checkMissing(t, b, key)
	}
}

// failingReader returns err once it has given after bytes.
type failingReader struct {
	r     *bytes.Reader
	after int64
	read  int64
	err   error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.read >= f.after {
		return 0, f.err
	}
	if rest := f.after - f.read; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := f.r.Read(p)
	f.read += int64(n)
	return n, err
}

func testRange(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	const key = "range/object"
	data := noise(1, 1000)
	size := int64(len(data))
	mustPut(t, b, key, data, objstore.PutOptions{})

	for _, c := range []struct {
		off, n int64
		want   []byte
	}{
		{0, -1, data},
		{0, size, data},
		{0, size + 100, data}, // clipped
		{100, 200, data[100:300]},
		{100, -1, data[100:]},
		{990, 100, data[990:]}, // clipped
		{0, 1, data[:1]},
		{size - 1, -1, data[size-1:]},
		{size - 1, 1, data[size-1:]},
		{size - 1, 5, data[size-1:]},
		{100, 0, nil},
		{size, -1, nil},
		{size, 0, nil},
		{size, 10, nil},
	} {
		what := fmt.Sprintf("GetRange(%d, %d)", c.off, c.n)
		rc, err := b.GetRange(ctx, key, c.off, c.n)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		checkBytes(t, what, readAll(t, rc), c.want)
	}

	for _, r := range [][2]int64{{size + 1, -1}, {size + 1, 10}, {size + 1000, 0}, {-1, 10}, {-1, -1}} {
		rc, err := b.GetRange(ctx, key, r[0], r[1])
		if err == nil {
			rc.Close()
		}
		checkErr(t, fmt.Sprintf("GetRange(%d, %d)", r[0], r[1]), err, objstore.ErrInvalidRange)
	}
}

func testMetadata(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	md := map[string]string{"commitid": "abc", "x_y": "1"}
	mustPut(t, b, "md/with", []byte("body"), objstore.PutOptions{Metadata: md})
	md["commitid"] = "changed after Put" // the stored metadata must be a copy
	want := map[string]string{"commitid": "abc", "x_y": "1"}

	if h := mustHead(t, b, "md/with"); !maps.Equal(h.Metadata, want) {
		t.Errorf("Head.Metadata = %v, want %v", h.Metadata, want)
	}
	if _, g := mustGet(t, b, "md/with"); !maps.Equal(g.Metadata, want) {
		t.Errorf("Get Attrs.Metadata = %v, want %v", g.Metadata, want)
	}
	a, err := b.Put(ctx, "md/created", strings.NewReader("c"), objstore.PutOptions{Size: 1, IfNotExists: true, Metadata: want})
	if err != nil {
		t.Fatalf("Put(IfNotExists, Metadata): %v", err)
	}
	if h := mustHead(t, b, "md/created"); !maps.Equal(h.Metadata, want) {
		t.Errorf("Head.Metadata after a conditional Put = %v, want %v", h.Metadata, want)
	}
	if _, err := put(t, b, "md/created", []byte("d"), objstore.PutOptions{IfMatch: a.ETag, Metadata: map[string]string{"gen": "2"}}); err != nil {
		t.Fatalf("Put(IfMatch, Metadata): %v", err)
	}
	if h := mustHead(t, b, "md/created"); !maps.Equal(h.Metadata, map[string]string{"gen": "2"}) {
		t.Errorf("Head.Metadata after an If-Match Put = %v, want only gen=2", h.Metadata)
	}

	mustPut(t, b, "md/without", []byte("body"), objstore.PutOptions{})
	if h := mustHead(t, b, "md/without"); len(h.Metadata) != 0 {
		t.Errorf("Head.Metadata = %v, want none", h.Metadata)
	}

	for _, bad := range []map[string]string{
		{"CommitID": "x"}, {"a-b": "x"}, {"1a": "x"}, {"": "x"}, {"a.b": "x"},
	} {
		_, err := put(t, b, "md/bad", []byte("x"), objstore.PutOptions{Metadata: bad})
		checkErr(t, fmt.Sprintf("Put(Metadata %v)", bad), err, objstore.ErrInvalidKey)
	}
	checkMissing(t, b, "md/bad")
}

// invalidKeys are keys every backend must refuse before touching the store.
var invalidKeys = []string{
	"", "/abs", "a/../b", "a//b", "a\x00b", "..", ".", "a/./b", "a/", "a/..",
	"a\\b", "a\nb", "a\x7fb", strings.Repeat("k", 1025),
}

func testInvalidKey(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	mustPut(t, b, "ok", []byte("ok"), objstore.PutOptions{})
	for _, key := range invalidKeys {
		_, err := put(t, b, key, []byte("x"), objstore.PutOptions{})
		checkErr(t, fmt.Sprintf("Put(%.40q)", key), err, objstore.ErrInvalidKey)
		_, err = put(t, b, key, []byte("x"), objstore.PutOptions{IfNotExists: true})
		checkErr(t, fmt.Sprintf("Put(%.40q, IfNotExists)", key), err, objstore.ErrInvalidKey)
		rc, _, err := b.Get(ctx, key)
		if err == nil {
			rc.Close()
		}
		checkErr(t, fmt.Sprintf("Get(%.40q)", key), err, objstore.ErrInvalidKey)
		rc, err = b.GetRange(ctx, key, 0, 1)
		if err == nil {
			rc.Close()
		}
		checkErr(t, fmt.Sprintf("GetRange(%.40q)", key), err, objstore.ErrInvalidKey)
		_, err = b.Head(ctx, key)
		checkErr(t, fmt.Sprintf("Head(%.40q)", key), err, objstore.ErrInvalidKey)
		err = b.Delete(ctx, key)
		checkErr(t, fmt.Sprintf("Delete(%.40q)", key), err, objstore.ErrInvalidKey)
		err = b.DeleteMany(ctx, []string{"ok", key})
		checkErr(t, fmt.Sprintf("DeleteMany(ok, %.40q)", key), err, objstore.ErrInvalidKey)
	}
	for _, prefix := range []string{"/a", "a//", "../a", "a/../", "a\x00", "a\\"} {
		err := b.List(ctx, prefix, objstore.ListOptions{}, func(objstore.Entry) error { return nil })
		checkErr(t, fmt.Sprintf("List(%q)", prefix), err, objstore.ErrInvalidKey)
	}
	// Nothing was written; whether the DeleteManys above removed "ok" is
	// the backend's business.
	for _, e := range list(t, b, "", objstore.ListOptions{}) {
		if e.Key != "ok" {
			t.Errorf("List after invalid Puts: unexpected %q", e.Key)
		}
	}
}

// testKeyIsAlsoPrefix stores a key and keys below it, which Azure allows and
// a file-system backend must take care to (a file cannot also be a directory).
func testKeyIsAlsoPrefix(t *testing.T, b objstore.Bucket, c config) {
	if c.pathKeys {
		testKeyConflict(t, b)
		return
	}
	ctx := t.Context()
	// Both orders: the parent first, and the child first.
	for _, keys := range [][2]string{{"p/x", "p/x/y"}, {"q/x/y", "q/x"}} {
		for _, k := range keys {
			mustPut(t, b, k, content(k), objstore.PutOptions{})
		}
		for _, k := range keys {
			checkContent(t, b, k, content(k))
		}
	}
	checkKeys(t, `List("p/")`, listKeys(t, b, "p/", objstore.ListOptions{}), []string{"p/x", "p/x/y"})
	checkKeys(t, `List("p/", Delimited)`, listKeys(t, b, "p/", objstore.ListOptions{Delimited: true}), []string{"p/x", "p/x/"})

	// Deleting either leaves the other.
	if err := b.Delete(ctx, "p/x"); err != nil {
		t.Fatalf("Delete(p/x): %v", err)
	}
	checkMissing(t, b, "p/x")
	checkContent(t, b, "p/x/y", content("p/x/y"))
	if err := b.Delete(ctx, "q/x/y"); err != nil {
		t.Fatalf("Delete(q/x/y): %v", err)
	}
	checkMissing(t, b, "q/x/y")
	checkContent(t, b, "q/x", content("q/x"))
	checkKeys(t, `List("")`, listKeys(t, b, "", objstore.ListOptions{}), []string{"p/x/y", "q/x"})
}

func testOverwrite(t *testing.T, b objstore.Bucket) {
	const key = "over/write"
	long := bytes.Repeat([]byte("long "), 200)
	a1 := mustPut(t, b, key, long, objstore.PutOptions{Metadata: map[string]string{"v": "1"}})
	// Shorter, and without metadata: nothing of the old object may survive.
	short := []byte("short")
	a2 := mustPut(t, b, key, short, objstore.PutOptions{})
	if a2.ETag == a1.ETag {
		t.Errorf("overwrite kept ETag %q", a1.ETag)
	}
	got := checkContent(t, b, key, short)
	if got.ETag != a2.ETag {
		t.Errorf("Get ETag = %q, want the overwrite's %q", got.ETag, a2.ETag)
	}
	h := mustHead(t, b, key)
	if h.Size != int64(len(short)) || len(h.Metadata) != 0 {
		t.Errorf("Head after overwrite = Size %d, Metadata %v; want %d and none", h.Size, h.Metadata, len(short))
	}
	rc, err := b.GetRange(t.Context(), key, 0, -1)
	if err != nil {
		t.Fatalf("GetRange: %v", err)
	}
	checkBytes(t, "GetRange after overwrite", readAll(t, rc), short)
}

// testKeyConflict is testKeyIsAlsoPrefix for a backend declared with
// PathKeys: the second of a key and a key below it is refused with
// ErrKeyConflict, whatever the Put's conditions, and changes nothing; once
// the first is deleted, the second can be stored.
func testKeyConflict(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	for _, keys := range [][2]string{{"p/x", "p/x/y"}, {"q/x/y", "q/x"}} {
		first, second := keys[0], keys[1]
		a := mustPut(t, b, first, content(first), objstore.PutOptions{})
		for _, opts := range []objstore.PutOptions{
			{},
			{IfNotExists: true},
			{Metadata: map[string]string{"m": "1"}, ContentType: "text/plain"},
		} {
			what := fmt.Sprintf("Put(%q, %+v) while %q is stored", second, opts, first)
			_, err := put(t, b, second, content(second), opts)
			checkErr(t, what, err, objstore.ErrKeyConflict)
			if errors.Is(err, objstore.ErrPrecondition) || errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("%s: err = %v also matches ErrPrecondition or ErrNotFound", what, err)
			}
			checkMissing(t, b, second)
			if got := checkContent(t, b, first, content(first)); got.ETag != a.ETag {
				t.Errorf("%s changed %q: ETag %q, was %q", what, first, got.ETag, a.ETag)
			}
		}
	}
	checkKeys(t, `List("")`, listKeys(t, b, "", objstore.ListOptions{}), []string{"p/x", "q/x/y"})
	checkKeys(t, `List("q/", Delimited)`, listKeys(t, b, "q/", objstore.ListOptions{Delimited: true}), []string{"q/x/"})

	// Deleting the first frees the second.
	for _, keys := range [][2]string{{"p/x", "p/x/y"}, {"q/x/y", "q/x"}} {
		if err := b.Delete(ctx, keys[0]); err != nil {
			t.Fatalf("Delete(%q): %v", keys[0], err)
		}
		mustPut(t, b, keys[1], content(keys[1]), objstore.PutOptions{IfNotExists: true})
		checkContent(t, b, keys[1], content(keys[1]))
		checkMissing(t, b, keys[0])
	}
	checkKeys(t, `List("")`, listKeys(t, b, "", objstore.ListOptions{}), []string{"p/x/y", "q/x"})
}

// testContentType: a Put's content type comes back from Put, Head and Get,
// on every upload path; none means DefaultContentType; an overwrite keeps
// nothing of the old one; and types no backend can carry are refused.
func testContentType(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	check := func(what string, a objstore.Attrs, want string) {
		t.Helper()
		if a.ContentType != want {
			t.Errorf("%s: ContentType = %q, want %q", what, a.ContentType, want)
		}
	}
	checkStored := func(key, want string) {
		t.Helper()
		check(fmt.Sprintf("Head(%q)", key), mustHead(t, b, key), want)
		_, g := mustGet(t, b, key)
		check(fmt.Sprintf("Get(%q)", key), g, want)
	}

	a := mustPut(t, b, "ct/default", []byte("x"), objstore.PutOptions{})
	check("Put without a type", a, objstore.DefaultContentType)
	checkStored("ct/default", objstore.DefaultContentType)

	small := []byte(`{"a":1}`)
	large := noise(3, 5<<20) // streamed in blocks where the backend does
	for _, c := range []struct {
		key, ct string
		put     func(key, ct string) (objstore.Attrs, error)
	}{
		{"ct/plain", "application/json", func(k, ct string) (objstore.Attrs, error) {
			return put(t, b, k, small, objstore.PutOptions{ContentType: ct})
		}},
		{"ct/created", "application/vnd.apache.arrow.file", func(k, ct string) (objstore.Attrs, error) {
			return put(t, b, k, small, objstore.PutOptions{ContentType: ct, IfNotExists: true})
		}},
		{"ct/unknown-size", "text/plain; charset=utf-8", func(k, ct string) (objstore.Attrs, error) {
			return b.Put(ctx, k, opaque{bytes.NewReader(small)}, objstore.PutOptions{ContentType: ct, Size: -1})
		}},
		{"ct/large", "application/x-ndjson", func(k, ct string) (objstore.Attrs, error) {
			return b.Put(ctx, k, opaque{bytes.NewReader(large)}, objstore.PutOptions{ContentType: ct, Size: -1})
		}},
	} {
		a, err := c.put(c.key, c.ct)
		if err != nil {
			t.Fatalf("Put(%q, ContentType %q): %v", c.key, c.ct, err)
		}
		check(fmt.Sprintf("Put(%q)", c.key), a, c.ct)
		checkStored(c.key, c.ct)
	}

	// Nothing of the old type survives an overwrite, conditional or not.
	mustPut(t, b, "ct/plain", small, objstore.PutOptions{})
	checkStored("ct/plain", objstore.DefaultContentType)
	h := mustHead(t, b, "ct/created")
	mustPut(t, b, "ct/created", small, objstore.PutOptions{IfMatch: h.ETag, ContentType: "image/png"})
	checkStored("ct/created", "image/png")

	for _, bad := range []string{"text/plain\n", "a\x00b", "\ttext/plain", " text/plain", "text/plain ", "caf\u00e9/x", strings.Repeat("a", 1025)} {
		_, err := put(t, b, "ct/bad", small, objstore.PutOptions{ContentType: bad})
		checkErr(t, fmt.Sprintf("Put(ContentType %.20q)", bad), err, objstore.ErrInvalidKey)
	}
	checkMissing(t, b, "ct/bad")
}
