package local_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/local"
)

// version is one Put of the test key: bytes, metadata and content type
// that all say which Put they came from.
type version struct {
	body string
	md   map[string]string
	ct   string
}

var (
	v1 = version{"version one", map[string]string{"v": "1"}, "text/v1"}
	v2 = version{"version two, a little longer", map[string]string{"v": "2"}, "text/v2"}
	v3 = version{"version three", map[string]string{"v": "3"}, "text/v3"}
)

func (v version) put(t *testing.T, b objstore.Bucket, key string, opts objstore.PutOptions) objstore.Attrs {
	t.Helper()
	opts.Metadata, opts.ContentType = v.md, v.ct
	a, err := b.Put(t.Context(), key, strings.NewReader(v.body), opts)
	if err != nil {
		t.Fatalf("Put(%q, %q): %v", key, v.body, err)
	}
	return a
}

// check asserts that key holds v, bytes and attributes together, through
// Get, Head and GetRange.
func (v version) check(t *testing.T, b objstore.Bucket, key string) objstore.Attrs {
	t.Helper()
	got, a, err := readObject(t, b, key)
	if err != nil {
		t.Fatalf("Get(%q): %v, want %q", key, err, v.body)
	}
	if string(got) != v.body || !maps.Equal(a.Metadata, v.md) || a.ContentType != v.ct || a.Size != int64(len(v.body)) {
		t.Errorf("Get(%q) = %q with Size %d, metadata %v, type %q; want %q with its own attributes %v, %q",
			key, got, a.Size, a.Metadata, a.ContentType, v.body, v.md, v.ct)
	}
	h, err := b.Head(t.Context(), key)
	if err != nil || h.ETag != a.ETag || !maps.Equal(h.Metadata, v.md) || h.ContentType != v.ct {
		t.Errorf("Head(%q) = %+v, %v; want the attributes Get gave, %+v", key, h, err, a)
	}
	rc, err := b.GetRange(t.Context(), key, 0, -1)
	if err != nil {
		t.Fatalf("GetRange(%q): %v", key, err)
	}
	defer rc.Close()
	if got, err := io.ReadAll(rc); err != nil || string(got) != v.body {
		t.Errorf("GetRange(%q) = %q, %v; want %q", key, got, err, v.body)
	}
	return a
}

func checkGone(t *testing.T, b objstore.Bucket, key string) {
	t.Helper()
	if _, err := b.Head(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Head(%q): %v, want ErrNotFound", key, err)
	}
	if _, _, err := readObject(t, b, key); !errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(%q): %v, want ErrNotFound", key, err)
	}
}

func checkListed(t *testing.T, b objstore.Bucket, want ...string) {
	t.Helper()
	if got := listAll(t, b); !slices.Equal(got, want) && (len(got) > 0 || len(want) > 0) {
		t.Errorf("List = %q, want %q", got, want)
	}
}

const (
	crashEnv     = "ROLLSTORE_LOCAL_CRASH"
	crashRootEnv = "ROLLSTORE_LOCAL_CRASH_ROOT"
	crashKey     = "t/wal/s/00000000000000000001/00000000000000000001.arrow"
	crashed      = 3 // the child's exit code when it died at its point
)

// crashCases are the steps of a Put and a Delete at which TestCrash kills a
// process, with what the folder must show afterwards.
type crashCase struct {
	name  string
	seed  bool // v1 is stored first
	op    func(t *testing.T, b objstore.Bucket)
	point string
	after *version // what the key holds after the crash; nil: nothing
}

var crashCases = []crashCase{
	{"replace before publish", true, func(t *testing.T, b objstore.Bucket) {
		v2.put(t, b, crashKey, objstore.PutOptions{})
	}, local.HookPutSidecar, &v1},
	{"replace after publish", true, func(t *testing.T, b objstore.Bucket) {
		v2.put(t, b, crashKey, objstore.PutOptions{})
	}, local.HookPutPublished, &v2},
	{"if-match replace after publish", true, func(t *testing.T, b objstore.Bucket) {
		a, err := b.Head(t.Context(), crashKey)
		if err != nil {
			t.Fatal(err)
		}
		v2.put(t, b, crashKey, objstore.PutOptions{IfMatch: a.ETag})
	}, local.HookPutPublished, &v2},
	{"create before publish", false, func(t *testing.T, b objstore.Bucket) {
		v2.put(t, b, crashKey, objstore.PutOptions{IfNotExists: true})
	}, local.HookPutSidecar, nil},
	{"create after publish", false, func(t *testing.T, b objstore.Bucket) {
		v2.put(t, b, crashKey, objstore.PutOptions{IfNotExists: true})
	}, local.HookPutPublished, &v2},
	{"delete after unlink", true, func(t *testing.T, b objstore.Bucket) {
		if err := b.Delete(t.Context(), crashKey); err != nil {
			t.Fatal(err)
		}
	}, local.HookDeleteUnlinked, nil},
}

// TestCrash kills a process (for real, in a child process) between the
// steps of a Put or a Delete, and checks what another process then finds:
// the old object or the new one, each with its own attributes, or nothing;
// never bytes without their metadata or with another version's. After
// each crash the key can be written, read and deleted as usual.
func TestCrash(t *testing.T) {
	if name := os.Getenv(crashEnv); name != "" {
		crashChild(t, name, os.Getenv(crashRootEnv))
		return
	}
	for _, c := range crashCases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if c.seed {
				b := open(t, root)
				v1.put(t, b, crashKey, objstore.PutOptions{IfNotExists: true})
				b.Close()
			}
			cmd := exec.Command(os.Args[0], "-test.run=^TestCrash$", "-test.timeout=1m")
			cmd.Env = append(os.Environ(), crashEnv+"="+c.name, crashRootEnv+"="+root)
			out, err := cmd.CombinedOutput()
			if exit, ok := errors.AsType[*exec.ExitError](err); !ok || exit.ExitCode() != crashed {
				t.Fatalf("the child did not die at %s (%v):\n%s", c.point, err, out)
			}

			b := open(t, root)
			if c.after == nil {
				checkGone(t, b, crashKey)
				checkListed(t, b)
				v3.put(t, b, crashKey, objstore.PutOptions{IfNotExists: true})
			} else {
				c.after.check(t, b, crashKey)
				checkListed(t, b, crashKey)
				v3.put(t, b, crashKey, objstore.PutOptions{})
			}
			v3.check(t, b, crashKey)
			checkListed(t, b, crashKey)
			if err := b.Delete(t.Context(), crashKey); err != nil {
				t.Fatal(err)
			}
			checkGone(t, b, crashKey)
			checkListed(t, b)
			v1.put(t, b, crashKey, objstore.PutOptions{IfNotExists: true})
			v1.check(t, b, crashKey)
		})
	}
}

// crashChild runs case name against root in this process and exits with
// code crashed at its point, leaving the folder as the step left it.
func crashChild(t *testing.T, name, root string) {
	i := slices.IndexFunc(crashCases, func(c crashCase) bool { return c.name == name })
	if i < 0 {
		t.Fatalf("no crash case %q", name)
	}
	c := crashCases[i]
	b, err := local.Open(root, local.WithHooks(func(_ context.Context, point string) error {
		if point == c.point {
			os.Exit(crashed)
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	c.op(t, b)
	t.Fatalf("%s: never reached %s", name, c.point)
}

// TestReadsBetweenSteps holds a Put and a Delete at each of their steps and
// reads the key through another Bucket meanwhile: old or new, but always
// with its own attributes. A body opened before the replace reads the old
// object to its end.
func TestReadsBetweenSteps(t *testing.T) {
	root := t.TempDir()
	hs := hook.NewSet()
	t.Cleanup(hs.Reset)
	w, err := local.Open(root, local.WithHooks(hs.Func()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r := open(t, root)
	const key = "dir/object"
	v1.put(t, r, key, objstore.PutOptions{})

	old, _, err := r.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	head := make([]byte, 3)
	if _, err := io.ReadFull(old, head); err != nil {
		t.Fatal(err)
	}

	written := hs.Pause(local.HookPutSidecar)
	published := hs.Pause(local.HookPutPublished)
	done := make(chan error, 1)
	go func() {
		_, err := w.Put(t.Context(), key, strings.NewReader(v2.body), objstore.PutOptions{Metadata: v2.md, ContentType: v2.ct})
		done <- err
	}()
	<-written.Reached()
	v1.check(t, r, key)
	checkListed(t, r, key)
	written.Release()
	<-published.Reached()
	v2.check(t, r, key)
	checkListed(t, r, key)
	published.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	v2.check(t, r, key)
	if got := sidecars(t, root, "dir"); len(got) != 1 {
		t.Errorf("sidecars after the replace: %q, want one", got)
	}
	rest, err := io.ReadAll(old)
	if got := string(head) + string(rest); err != nil || got != v1.body {
		t.Errorf("a body opened before the replace read %q, %v; want %q", got, err, v1.body)
	}

	unlinked := hs.Pause(local.HookDeleteUnlinked)
	go func() { done <- w.Delete(t.Context(), key) }()
	<-unlinked.Reached()
	checkGone(t, r, key)
	checkListed(t, r)
	unlinked.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkGone(t, r, key)
	if _, err := os.Stat(filepath.Join(root, "dir")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the emptied directory was not pruned: %v", err)
	}
}

// TestCopiedFolder copies a store folder file by file, which gives every
// file a new inode, and checks that the copy reads, lists, replaces and
// deletes its objects as the original did; and that a copy in which a key
// has two sidecars that could both be its file's is an error to read, not
// a guess.
func TestCopiedFolder(t *testing.T) {
	ctx := t.Context()
	src := t.TempDir()
	b := open(t, src)
	keys := map[string]version{"t/a": v1, "t/b/c": v2, "t/d": v3, "top": v1}
	attrs := map[string]objstore.Attrs{}
	for k, v := range keys {
		attrs[k] = v.put(t, b, k, objstore.PutOptions{IfNotExists: k == "t/d"})
	}
	dst := filepath.Join(t.TempDir(), "copy")
	copyTree(t, src, dst)
	if a, ok := inode(t, filepath.Join(src, "t", "a")); ok {
		if c, _ := inode(t, filepath.Join(dst, "t", "a")); a == c {
			t.Fatal("the copy kept the inode number; the test proves nothing here")
		}
	}

	c := open(t, dst)
	for k, v := range keys {
		if a := v.check(t, c, k); a.ETag != attrs[k].ETag {
			t.Errorf("%s: ETag %q in the copy, %q in the original", k, a.ETag, attrs[k].ETag)
		}
	}
	checkListed(t, c, "t/a", "t/b/c", "t/d", "top")

	v2.put(t, c, "t/a", objstore.PutOptions{})
	v2.check(t, c, "t/a")
	if got := slices.DeleteFunc(sidecars(t, dst, "t"), func(n string) bool { return !strings.HasPrefix(n, "a.") }); len(got) != 1 {
		t.Errorf("sidecars of t/a after a replace in the copy: %q, want one", got)
	}
	if err := c.Delete(ctx, "t/b/c"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, c, "t/b/c")
	if _, err := os.Stat(filepath.Join(dst, "t", "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("t/b not pruned in the copy: %v", err)
	}

	// A second sidecar of t/d that records the same size: which one is the
	// file's cannot be told.
	metaDir := filepath.Join(dst, "t", ".rollstore-meta")
	names := slices.DeleteFunc(sidecars(t, dst, "t"), func(n string) bool { return !strings.HasPrefix(n, "d.") })
	if len(names) != 1 {
		t.Fatalf("sidecars of t/d: %q", names)
	}
	data, err := os.ReadFile(filepath.Join(metaDir, names[0]))
	if err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(data), attrs["t/d"].ETag[1:len(attrs["t/d"].ETag)-1], "SOMEOTHERPUT", 1)
	if err := os.WriteFile(filepath.Join(metaDir, "d.ffffffff.json"), []byte(other), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, a, err := readObject(t, c, "t/d"); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Errorf("Get(t/d) with two candidate sidecars = %q, ETag %q, %v; want an error other than ErrNotFound", got, a.ETag, err)
	}
	// The original is unaffected by all of this.
	for k, v := range keys {
		v.check(t, b, k)
	}
}

// copyTree copies the folder src to dst file by file, as cp -r does.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
