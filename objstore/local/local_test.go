package local_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Bucket { return open(t, t.TempDir()) }, objstoretest.PathKeys())
}

func open(t *testing.T, dir string) *local.Bucket {
	t.Helper()
	b, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// readObject reads a whole object through b.
func readObject(t *testing.T, b objstore.Bucket, key string) ([]byte, objstore.Attrs, error) {
	t.Helper()
	rc, a, err := b.Get(t.Context(), key)
	if err != nil {
		return nil, a, err
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	return data, a, err
}

// tempFiles lists the reserved directory, where nothing may linger once
// every Put has returned.
func tempFiles(t *testing.T, root string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, ".rollstore", "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestCreateRaceAcrossBuckets races creators through two Buckets over one
// folder, as two processes would: link(2) must leave exactly one winner.
func TestCreateRaceAcrossBuckets(t *testing.T) {
	root := t.TempDir()
	buckets := []*local.Bucket{open(t, root), open(t, root)}
	const (
		keys   = 20
		racers = 16
	)
	for k := range keys {
		key := fmt.Sprintf("gen/%03d/manifest.json", k)
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				body := strings.Repeat(strconv.Itoa(i), i+1)
				_, errs[i] = buckets[i%2].Put(t.Context(), key, strings.NewReader(body), objstore.PutOptions{IfNotExists: true})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("%s: racers %d and %d both won", key, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, objstore.ErrPrecondition):
				t.Fatalf("%s: racer %d: %v, want ErrPrecondition", key, i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("%s: nobody won", key)
		}
		got, _, err := readObject(t, buckets[1-winner%2], key)
		if want := strings.Repeat(strconv.Itoa(winner), winner+1); err != nil || string(got) != want {
			t.Fatalf("%s: read %q, %v; want the winner's %q", key, got, err, want)
		}
	}
	if names := tempFiles(t, root); len(names) != 0 {
		t.Errorf("temporary files left: %q", names)
	}
}

// TestIfMatchAcrossBuckets increments a counter with If-Match from many
// goroutines on two Buckets over one folder: within a process, no
// increment may be lost.
func TestIfMatchAcrossBuckets(t *testing.T) {
	root := t.TempDir()
	buckets := []*local.Bucket{open(t, root), open(t, root)}
	const key = "counter"
	if _, err := buckets[0].Put(t.Context(), key, strings.NewReader("0"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			b := buckets[i%2]
			for range 25 {
				data, a, err := readObject(t, b, key)
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(string(data))
				_, err = b.Put(t.Context(), key, strings.NewReader(strconv.Itoa(n+1)), objstore.PutOptions{IfMatch: a.ETag})
				switch {
				case err == nil:
					wins.Add(1)
				case !errors.Is(err, objstore.ErrPrecondition):
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	data, _, err := readObject(t, buckets[0], key)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != strconv.FormatInt(wins.Load(), 10) {
		t.Errorf("counter = %s after %d successful If-Match Puts", got, wins.Load())
	}
}

// TestNoTornReads replaces a 4 MiB object over and over while readers
// check every body they get against the checksum stored in its metadata:
// content and metadata must always come from one and the same Put.
func TestNoTornReads(t *testing.T) {
	b := open(t, t.TempDir())
	ctx := t.Context()
	const (
		key      = "torn/object"
		size     = 4 << 20
		versions = 16
	)
	// Version v starts with v, and lengths differ too, so that neither a
	// mix of two versions nor a torn one passes.
	version := func(v int) []byte {
		data := bytes.Repeat([]byte{byte(v)}, size-v*1000)
		binary.BigEndian.PutUint64(data, uint64(v))
		return data
	}
	sums := make([]string, versions+1)
	for v := range sums {
		sum := sha256.Sum256(version(v))
		sums[v] = hex.EncodeToString(sum[:])
	}
	put := func(v int, opts objstore.PutOptions) (objstore.Attrs, error) {
		opts.Metadata = map[string]string{"sum": sums[v]}
		return b.Put(ctx, key, bytes.NewReader(version(v)), opts)
	}
	a, err := put(0, objstore.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var done atomic.Bool
	var rg sync.WaitGroup
	var reads atomic.Int64
	for r := range 2 {
		rg.Go(func() {
			// A pause between reads leaves the writer some CPU under the
			// race detector, which makes big reads slow.
			for ; !done.Load(); time.Sleep(time.Millisecond) {
				var (
					rc       io.ReadCloser
					a        objstore.Attrs
					err      error
					sum      string
					attrSize int64 = -1
				)
				if r%2 == 0 {
					rc, a, err = b.Get(ctx, key)
					sum, attrSize = a.Metadata["sum"], a.Size
				} else {
					// A ranged read has no metadata: its whole body must
					// still be one version.
					rc, err = b.GetRange(ctx, key, 0, -1)
				}
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				// Into a buffer of the right size: io.ReadAll's growing is
				// slow under the race detector.
				buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
				_, err = buf.ReadFrom(rc)
				rc.Close()
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				data := buf.Bytes()
				v := -1
				if len(data) >= 8 {
					v = int(binary.BigEndian.Uint64(data))
				}
				got := sha256.Sum256(data)
				switch {
				case v < 0 || v > versions || hex.EncodeToString(got[:]) != sums[v]:
					t.Errorf("reader %d: %d bytes that are no complete version", r, len(data))
					return
				case attrSize >= 0 && (attrSize != int64(len(data)) || sum != sums[v]):
					t.Errorf("reader %d: version %d came with Size %d and the checksum of another", r, v, attrSize)
					return
				}
				reads.Add(1)
			}
		})
	}
	for v := 1; v <= versions; v++ {
		opts := objstore.PutOptions{}
		if v%2 == 0 {
			opts.IfMatch = a.ETag
		}
		if a, err = put(v, opts); err != nil {
			t.Errorf("Put version %d: %v", v, err)
			break
		}
	}
	done.Store(true)
	rg.Wait()
	t.Logf("%d full reads during %d replacements", reads.Load(), versions)
}

// TestKeysStayInsideRoot tries to reach outside root: by key, and through
// symbolic links planted under root; and the backend's own names, which no
// key may reach.
func TestKeysStayInsideRoot(t *testing.T) {
	ctx := t.Context()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	outside := filepath.Join(parent, "outside")
	b := open(t, root)
	ob := open(t, outside)
	if _, err := ob.Put(ctx, "secret", strings.NewReader("secret"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	for _, key := range []string{
		"../outside/secret", "a/../../outside/secret", "/etc/passwd",
		".rollstore/tmp/x", ".rollstore", "a/.rollstore-meta/x.1.json", ".rollstore-meta/x",
		"a/.rollstore", "a/b/.rollstorex",
	} {
		if _, err := b.Put(ctx, key, strings.NewReader("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Put(%q): %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := readObject(t, b, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Get(%q): %v, want ErrInvalidKey", key, err)
		}
		if err := b.Delete(ctx, key); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Delete(%q): %v, want ErrInvalidKey", key, err)
		}
	}
	// Only names starting with the reserved prefix are reserved, and the
	// old format's suffix means nothing any more.
	for _, key := range []string{"x.rso", "a/x.rso", "y.rso/y", "a/x.rollstore", "a/_rollstore"} {
		if _, err := b.Put(ctx, key, strings.NewReader(key), objstore.PutOptions{}); err != nil {
			t.Errorf("Put(%q): %v", key, err)
		}
		if got, _, err := readObject(t, b, key); err != nil || string(got) != key {
			t.Errorf("Get(%q) = %q, %v", key, got, err)
		}
	}

	// A directory link and a file link to the outside, one absolute and
	// one relative.
	if err := os.Symlink(outside, filepath.Join(root, "dirlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "outside", "secret"), filepath.Join(root, "filelink")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"dirlink/secret", "filelink"} {
		if got, _, err := readObject(t, b, key); err == nil || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(%q) through a link out of root = %q, %v; want an error other than ErrNotFound", key, got, err)
		}
		if _, err := b.Head(ctx, key); err == nil {
			t.Errorf("Head(%q) through a link out of root succeeded", key)
		}
		b.Delete(ctx, key) // must not reach through
	}
	if _, err := b.Put(ctx, "dirlink/planted", strings.NewReader("x"), objstore.PutOptions{}); err == nil {
		t.Error("Put through a link out of root succeeded")
	}
	if _, err := b.Put(ctx, "filelink", strings.NewReader("x"), objstore.PutOptions{IfMatch: `"any"`}); err == nil {
		t.Error("If-Match Put through a link out of root succeeded")
	}
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{".rollstore", ".rollstore-meta", "secret"}; !slices.Equal(names, want) {
		t.Errorf("outside root: %q, want %q untouched", names, want)
	}
	if got, _, err := readObject(t, ob, "secret"); err != nil || string(got) != "secret" {
		t.Errorf("outside object: %q, %v", got, err)
	}
	if listed, want := listAll(t, b), []string{"a/_rollstore", "a/x.rollstore", "a/x.rso", "x.rso", "y.rso/y"}; !slices.Equal(listed, want) {
		t.Errorf("List = %q, want %q (links and the backend's files are not listed)", listed, want)
	}

	// A link inside root is no object of its own: it has no sidecar.
	if err := os.Symlink("x.rso", filepath.Join(root, "alias")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := readObject(t, b, "alias"); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(alias), a link inside root = %q, %v; want an error other than ErrNotFound", got, err)
	}
}

// listAll lists every key of b.
func listAll(t *testing.T, b objstore.Bucket) []string {
	t.Helper()
	var listed []string
	if err := b.List(t.Context(), "", objstore.ListOptions{}, func(e objstore.Entry) error {
		listed = append(listed, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return listed
}

// failingReader yields n bytes and then fails.
type failingReader struct {
	n   int
	err error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, r.err
	}
	p = p[:min(len(p), r.n)]
	clear(p)
	r.n -= len(p)
	return len(p), nil
}

// TestFailedPutsLeaveNothing fails Puts in each way they can fail after the
// temporary file exists: no object, no temporary file, no directory.
func TestFailedPutsLeaveNothing(t *testing.T) {
	root := t.TempDir()
	b := open(t, root)
	ctx := t.Context()
	errBody := errors.New("client went away")
	if _, err := b.Put(ctx, "exists/x", strings.NewReader("v1"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	cancelCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	for _, c := range []struct {
		name string
		ctx  context.Context
		key  string
		r    io.Reader
		opts objstore.PutOptions
		want error
	}{
		{"body fails", ctx, "new/a/b", &failingReader{n: 1 << 20, err: errBody}, objstore.PutOptions{}, errBody},
		{"body fails, IfNotExists", ctx, "new/a/b", &failingReader{n: 100, err: errBody}, objstore.PutOptions{IfNotExists: true}, errBody},
		{"cancelled mid-body", cancelCtx, "new/a/b", io.MultiReader(
			strings.NewReader("some bytes"),
			readerFunc(func([]byte) (int, error) { cancel(); return 0, nil }),
			strings.NewReader("never read"),
		), objstore.PutOptions{}, context.Canceled},
		{"short body", ctx, "new/a/b", strings.NewReader("short"), objstore.PutOptions{Size: 10}, nil},
		{"lost create", ctx, "exists/x", strings.NewReader("v2"), objstore.PutOptions{IfNotExists: true}, objstore.ErrPrecondition},
		{"stale If-Match", ctx, "exists/x", strings.NewReader("v2"), objstore.PutOptions{IfMatch: `"stale"`}, objstore.ErrPrecondition},
		{"If-Match on nothing", ctx, "new/a/b", strings.NewReader("v2"), objstore.PutOptions{IfMatch: `"stale"`}, objstore.ErrPrecondition},
	} {
		_, err := b.Put(c.ctx, c.key, c.r, c.opts)
		if err == nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: Put: %v, want %v", c.name, err, c.want)
		}
		if names := tempFiles(t, root); len(names) != 0 {
			t.Errorf("%s: temporary files left: %q", c.name, names)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "new")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Puts left directory new/: %v", err)
	}
	if got, _, err := readObject(t, b, "exists/x"); err != nil || string(got) != "v1" {
		t.Errorf("exists/x = %q, %v; want v1 untouched", got, err)
	}
	if got := sidecars(t, root, "exists"); len(got) != 1 {
		t.Errorf("sidecars of exists/: %q, want only the one of exists/x", got)
	}
}

// sidecars lists the sidecar directory of the key directory dir.
func sidecars(t *testing.T, root, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir), ".rollstore-meta"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// TestDeletePrunesEmptyDirs checks that Delete removes the directories it
// empties, sidecar directories included, and only those.
func TestDeletePrunesEmptyDirs(t *testing.T) {
	root := t.TempDir()
	b := open(t, root)
	ctx := t.Context()
	for _, k := range []string{"a/b/c/d", "a/x", "p/x", "p/y/z", "top"} {
		if _, err := b.Put(ctx, k, strings.NewReader(k), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(rel string) bool {
		_, err := os.Lstat(filepath.Join(root, filepath.FromSlash(rel)))
		return err == nil
	}
	del := func(k string) {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatalf("Delete(%q): %v", k, err)
		}
	}

	del("a/b/c/d")
	if exists("a/b") || !exists("a") || !exists("a/.rollstore-meta") {
		t.Errorf("after Delete(a/b/c/d): a/b exists %v, a exists %v, a/.rollstore-meta exists %v; want false, true, true",
			exists("a/b"), exists("a"), exists("a/.rollstore-meta"))
	}
	del("a/x")
	if exists("a") {
		t.Error("after Delete(a/x): a still exists")
	}
	del("p/y/z") // p/x stays, so p does
	if exists("p/y") || !exists("p/x") {
		t.Errorf("after Delete(p/y/z): p/y exists %v, p/x exists %v; want false, true", exists("p/y"), exists("p/x"))
	}
	del("p/x")
	if exists("p") {
		t.Error("after Delete(p/x): p still exists")
	}
	del("top")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != ".rollstore" {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("root after deleting everything: %q, want only .rollstore", names)
	}
	// A key whose directory was pruned can take its place as a file.
	if _, err := b.Put(ctx, "a", strings.NewReader("a"), objstore.PutOptions{IfNotExists: true}); err != nil {
		t.Errorf("Put(a) after its directory was pruned: %v", err)
	}
}

// TestListMatchesReference lists a random tree at every prefix, flat and
// delimited, against the definition: sorted keys, folded at the next '/'.
// The alphabet holds the bytes that sort around '/' and the object suffix.
func TestListMatchesReference(t *testing.T) {
	b := open(t, t.TempDir())
	ctx := t.Context()
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", "b", "-", ".", "0", "_", "~", ".rso", "ab", ".r"}
	seen := map[string]bool{}
	for len(seen) < 200 {
		segs := make([]string, 1+r.IntN(3))
		for i := range segs {
			for range 1 + r.IntN(3) {
				segs[i] += pieces[r.IntN(len(pieces))]
			}
		}
		key := strings.Join(segs, "/")
		if _, err := b.Put(ctx, key, strings.NewReader(key), objstore.PutOptions{}); err != nil {
			// Invalid keys, and nested keys, which this backend refuses,
			// are dropped.
			if !errors.Is(err, objstore.ErrKeyConflict) && !errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("Put(%q): %v", key, err)
			}
			continue
		}
		seen[key] = true
	}
	keys := slices.Sorted(maps.Keys(seen))

	reference := func(prefix string, delimited bool) []string {
		var out []string
		for _, k := range keys {
			rest, ok := strings.CutPrefix(k, prefix)
			if !ok {
				continue
			}
			if i := strings.IndexByte(rest, '/'); delimited && i >= 0 {
				if p := k[:len(prefix)+i+1]; len(out) == 0 || out[len(out)-1] != p {
					out = append(out, p)
				}
				continue
			}
			out = append(out, k)
		}
		return out
	}
	prefixes := map[string]bool{"": true}
	for _, k := range keys {
		for i := range len(k) {
			prefixes[k[:i]] = true
		}
	}
	checked := 0
	for prefix := range prefixes {
		if objstore.ValidatePrefix(prefix) != nil {
			continue
		}
		for _, delimited := range []bool{false, true} {
			var got []string
			err := b.List(ctx, prefix, objstore.ListOptions{Delimited: delimited}, func(e objstore.Entry) error {
				if !e.IsPrefix && e.Size != int64(len(e.Key)) {
					t.Errorf("List(%q): %s has Size %d, want %d", prefix, e.Key, e.Size, len(e.Key))
				}
				got = append(got, e.Key)
				return nil
			})
			if err != nil {
				t.Fatalf("List(%q, delimited %v): %v", prefix, delimited, err)
			}
			if want := reference(prefix, delimited); !slices.Equal(got, want) {
				t.Fatalf("List(%q, delimited %v):\n got %q\nwant %q", prefix, delimited, got, want)
			}
			checked++
		}
	}
	t.Logf("%d keys, %d listings", len(keys), checked)
}

// TestForeignAndDamagedFiles checks how files the store did not write are
// seen: a file without a sidecar is an error to read but not listed, and
// an object changed or damaged outside the store is an error to read,
// never a missing object nor bytes with another version's attributes.
func TestForeignAndDamagedFiles(t *testing.T) {
	root := t.TempDir()
	b := open(t, root)
	ctx := t.Context()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("junk", "not written by the store")
	write("empty", "")
	for _, k := range []string{"good", "truncated", "garbled"} {
		if _, err := b.Put(ctx, k, strings.NewReader(k+" object"), objstore.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	for _, key := range []string{"junk", "empty"} {
		if _, _, err := readObject(t, b, key); err == nil || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(%q) of a foreign file: %v; want an error other than ErrNotFound", key, err)
		}
		if _, err := b.Head(ctx, key); err == nil || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Head(%q) of a foreign file: %v; want an error other than ErrNotFound", key, err)
		}
	}
	if got, want := listAll(t, b), []string{"garbled", "good", "truncated"}; !slices.Equal(got, want) {
		t.Errorf("List = %q; want %q", got, want)
	}

	// Cut the object short, and garble another's sidecar.
	if err := os.Truncate(filepath.Join(root, "truncated"), 5); err != nil {
		t.Fatal(err)
	}
	for _, name := range sidecars(t, root, "") {
		if strings.HasPrefix(name, "garbled.") {
			write(filepath.Join(".rollstore-meta", name), `{"etag":`)
		}
	}
	for _, key := range []string{"truncated", "garbled"} {
		if _, _, err := readObject(t, b, key); err == nil || errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("Get(%q) of a damaged object: %v; want an error other than ErrNotFound", key, err)
		}
		if rc, err := b.GetRange(ctx, key, 0, 1); err == nil || errors.Is(err, objstore.ErrNotFound) {
			if err == nil {
				rc.Close()
			}
			t.Errorf("GetRange(%q) of a damaged object: %v; want an error other than ErrNotFound", key, err)
		}
	}
	if got, _, err := readObject(t, b, "good"); err != nil || string(got) != "good object" {
		t.Errorf("Get(good) = %q, %v", got, err)
	}
	// A damaged object can be replaced, and a foreign file overwritten.
	for _, key := range []string{"truncated", "junk"} {
		if _, err := b.Put(ctx, key, strings.NewReader("fixed"), objstore.PutOptions{}); err != nil {
			t.Errorf("Put over %s: %v", key, err)
		}
		if got, _, err := readObject(t, b, key); err != nil || string(got) != "fixed" {
			t.Errorf("Get(%q) after a Put over it = %q, %v", key, got, err)
		}
	}
}

// TestFilesAreVerbatim pins the documented layout: the object's bytes alone
// in the file named by its key, and its attributes in one sidecar named by
// the file's inode.
func TestFilesAreVerbatim(t *testing.T) {
	root := t.TempDir()
	b := open(t, root)
	payload := []byte("ARROW1\x00payload\x00bytes")
	a, err := b.Put(t.Context(), "dir/obj.arrow", bytes.NewReader(payload), objstore.PutOptions{
		Metadata: map[string]string{"commit_id": "c1"}, ContentType: "application/vnd.apache.arrow.file",
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "dir", "obj.arrow")
	raw, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(raw, payload) {
		t.Fatalf("file holds %q, %v; want exactly %q", raw, err, payload)
	}
	names := sidecars(t, root, "dir")
	if len(names) != 1 {
		t.Fatalf("sidecars %q, want one", names)
	}
	if ino, ok := inode(t, file); ok {
		if want := fmt.Sprintf("obj.arrow.%x.json", ino); names[0] != want {
			t.Errorf("sidecar %q, want %q", names[0], want)
		}
	}
	data, err := os.ReadFile(filepath.Join(root, "dir", ".rollstore-meta", names[0]))
	if err != nil {
		t.Fatal(err)
	}
	var sc struct {
		ETag        string            `json:"etag"`
		Size        int64             `json:"size"`
		ContentType string            `json:"content_type"`
		Metadata    map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(data, &sc); err != nil {
		t.Fatalf("sidecar %s: %v", data, err)
	}
	if sc.ETag != a.ETag || sc.Size != int64(len(payload)) || sc.ContentType != a.ContentType || sc.Metadata["commit_id"] != "c1" {
		t.Errorf("sidecar %s; want ETag %s, size %d, the content type and the metadata", data, a.ETag, len(payload))
	}
	ents, err := os.ReadDir(filepath.Join(root, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 {
		t.Errorf("dir holds %d entries, want the file and the sidecar directory", len(ents))
	}
}

// TestOldFormatRefused checks that a folder of the RSO1 format is refused
// by Open, not read as an empty store, and left as it was.
func TestOldFormatRefused(t *testing.T) {
	root := t.TempDir()
	for _, dir := range []string{".rollstore-tmp", "t"} {
		if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "t", "_table.json.rso"), []byte("RSO1"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := local.Open(root)
	if !errors.Is(err, local.ErrOldFormat) {
		if b != nil {
			b.Close()
		}
		t.Fatalf("Open of an RSO1 folder: %v, want ErrOldFormat", err)
	}
	if _, err := os.Stat(filepath.Join(root, ".rollstore")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of an RSO1 folder wrote to it: %v", err)
	}
}

// TestRootRemoved checks that a vanished folder is ErrContainerNotFound,
// which the read path does not retry, and never ErrNotFound.
func TestRootRemoved(t *testing.T) {
	for _, how := range []string{"removed", "replaced"} {
		t.Run(how, func(t *testing.T) {
			root := filepath.Join(t.TempDir(), "root")
			b := open(t, root)
			ctx := t.Context()
			if _, err := b.Put(ctx, "k", strings.NewReader("v"), objstore.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(root); err != nil {
				t.Fatal(err)
			}
			if how == "replaced" {
				if err := os.Mkdir(root, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, objstore.ErrContainerNotFound) || errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("%s: %v, want ErrContainerNotFound only", what, err)
				}
			}
			_, _, err := readObject(t, b, "k")
			check("Get", err)
			_, err = b.Head(ctx, "k")
			check("Head", err)
			_, err = b.GetRange(ctx, "k", 0, 1)
			check("GetRange", err)
			_, err = b.Put(ctx, "k2", strings.NewReader("v"), objstore.PutOptions{})
			check("Put", err)
			_, err = b.Put(ctx, "k2", strings.NewReader("v"), objstore.PutOptions{IfNotExists: true})
			check("Put(IfNotExists)", err)
			check("Delete", b.Delete(ctx, "k"))
			check("List", b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil }))
		})
	}
}

// TestOpenSweepsStaleTempFiles checks that Open removes what crashed
// writers left, and not what live ones are writing.
func TestOpenSweepsStaleTempFiles(t *testing.T) {
	root := t.TempDir()
	open(t, root)
	tmp := filepath.Join(root, ".rollstore", "tmp")
	for _, name := range []string{"stale", "live"} {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(tmp, "stale"), old, old); err != nil {
		t.Fatal(err)
	}
	open(t, root)
	if names := tempFiles(t, root); !slices.Equal(names, []string{"live"}) {
		t.Errorf("after Open: %q, want only live", names)
	}
}

func TestLeaseConformance(t *testing.T) {
	objstoretest.RunLeases(t, func(t *testing.T) objstore.Bucket { return open(t, t.TempDir()) }, objstoretest.PathKeys())
}
