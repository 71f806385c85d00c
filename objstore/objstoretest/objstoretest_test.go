package objstoretest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/objstoretest"
)

// A suite that cannot fail proves nothing. TestMutants runs it against
// backends with one deliberate bug each and checks that the cases meant to
// catch that bug fail. A failing subtest fails its parent, so each mutant
// runs in a child process (this test binary, re-executed) whose output is
// read back.

const mutantEnv = "OBJSTORETEST_MUTANT"

// mutant is the memory backend with a bug; base methods pass through.
type mutant struct {
	objstore.Bucket
	get      func(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error)
	getRange func(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
	head     func(ctx context.Context, key string) (objstore.Attrs, error)
	put      func(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error)
	delete   func(ctx context.Context, key string) error
	many     func(ctx context.Context, keys []string) error
	list     func(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error
}

func (m *mutant) Get(ctx context.Context, key string) (io.ReadCloser, objstore.Attrs, error) {
	if m.get != nil {
		return m.get(ctx, key)
	}
	return m.Bucket.Get(ctx, key)
}

func (m *mutant) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if m.getRange != nil {
		return m.getRange(ctx, key, off, n)
	}
	return m.Bucket.GetRange(ctx, key, off, n)
}

func (m *mutant) Head(ctx context.Context, key string) (objstore.Attrs, error) {
	if m.head != nil {
		return m.head(ctx, key)
	}
	return m.Bucket.Head(ctx, key)
}

func (m *mutant) Put(ctx context.Context, key string, r io.Reader, opts objstore.PutOptions) (objstore.Attrs, error) {
	if m.put != nil {
		return m.put(ctx, key, r, opts)
	}
	return m.Bucket.Put(ctx, key, r, opts)
}

func (m *mutant) Delete(ctx context.Context, key string) error {
	if m.delete != nil {
		return m.delete(ctx, key)
	}
	return m.Bucket.Delete(ctx, key)
}

func (m *mutant) DeleteMany(ctx context.Context, keys []string) error {
	if m.many != nil {
		return m.many(ctx, keys)
	}
	return m.Bucket.DeleteMany(ctx, keys)
}

func (m *mutant) List(ctx context.Context, prefix string, opts objstore.ListOptions, fn func(objstore.Entry) error) error {
	if m.list != nil {
		return m.list(ctx, prefix, opts, fn)
	}
	return m.Bucket.List(ctx, prefix, opts, fn)
}

// mutants maps each bug to the subtests that must catch it (others may too).
var mutants = map[string]struct {
	make  func() objstore.Bucket
	catch []string
	opts  []objstoretest.Option
}{
	"create-if-absent ignored": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
			o.IfNotExists = false
			return b.Put(ctx, k, r, o)
		}}
	}, []string{"CreateIfAbsent", "CreateIfAbsentRace", "ExclusiveConditions"}, nil},

	"if-match ignored": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
			o.IfMatch = ""
			return b.Put(ctx, k, r, o)
		}}
	}, []string{"IfMatch", "ExclusiveConditions"}, nil},

	"range shifted by one": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, getRange: func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
			if off > 0 {
				off++
			}
			return b.GetRange(ctx, k, off, n)
		}}
	}, []string{"Range", "Large"}, nil},

	"range at end refused": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, getRange: func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
			if a, err := b.Head(ctx, k); err == nil && off == a.Size {
				return nil, objstore.ErrInvalidRange
			}
			return b.GetRange(ctx, k, off, n)
		}}
	}, []string{"Range", "Empty"}, nil},

	"zero-length range shortcut": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, getRange: func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
			if n == 0 {
				return io.NopCloser(bytes.NewReader(nil)), nil
			}
			return b.GetRange(ctx, k, off, n)
		}}
	}, []string{"NotFound"}, nil},

	"not-found is also container-not-found": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, head: func(ctx context.Context, k string) (objstore.Attrs, error) {
			a, err := b.Head(ctx, k)
			if errors.Is(err, objstore.ErrNotFound) {
				err = errors.Join(err, objstore.ErrContainerNotFound)
			}
			return a, err
		}}
	}, []string{"NotFound", "Delete"}, nil},

	"invalid key untyped": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, get: func(ctx context.Context, k string) (io.ReadCloser, objstore.Attrs, error) {
			rc, a, err := b.Get(ctx, k)
			if errors.Is(err, objstore.ErrInvalidKey) {
				err = errors.New(err.Error())
			}
			return rc, a, err
		}}
	}, []string{"InvalidKey"}, nil},

	"last byte dropped": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, get: func(ctx context.Context, k string) (io.ReadCloser, objstore.Attrs, error) {
			rc, a, err := b.Get(ctx, k)
			if err != nil || a.Size == 0 {
				return rc, a, err
			}
			return struct {
				io.Reader
				io.Closer
			}{io.LimitReader(rc, a.Size-1), rc}, a, nil
		}}
	}, []string{"PutGet", "Large", "Overwrite"}, nil},

	"metadata dropped": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
			o.Metadata = nil
			return b.Put(ctx, k, r, o)
		}}
	}, []string{"Metadata"}, nil},

	"content type dropped": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
			o.ContentType = ""
			return b.Put(ctx, k, r, o)
		}}
	}, []string{"ContentType"}, nil},

	"key conflict reported as a lost create": {func() objstore.Bucket {
		return pathKeyed(memory.New(), objstore.ErrPrecondition)
	}, []string{"KeyIsAlsoPrefix"}, []objstoretest.Option{objstoretest.PathKeys()}},

	"delete of missing fails": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, delete: func(ctx context.Context, k string) error {
			if _, err := b.Head(ctx, k); err != nil {
				return err
			}
			return b.Delete(ctx, k)
		}}
	}, []string{"Delete"}, nil},

	"delete-many stops at 256": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, many: func(ctx context.Context, keys []string) error {
			return b.DeleteMany(ctx, keys[:min(len(keys), 256)])
		}}
	}, []string{"DeleteManyBatch"}, nil},

	"list unsorted": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, list: func(ctx context.Context, p string, o objstore.ListOptions, fn func(objstore.Entry) error) error {
			var all []objstore.Entry
			if err := b.List(ctx, p, o, func(e objstore.Entry) error { all = append(all, e); return nil }); err != nil {
				return err
			}
			slices.Reverse(all)
			for _, e := range all {
				if err := fn(e); err != nil {
					return err
				}
			}
			return nil
		}}
	}, []string{"List", "ListDelimited", "ListOrder"}, nil},

	"list delimiter ignored": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, list: func(ctx context.Context, p string, o objstore.ListOptions, fn func(objstore.Entry) error) error {
			o.Delimited = false
			return b.List(ctx, p, o, fn)
		}}
	}, []string{"ListDelimited", "ListOrder", "KeyIsAlsoPrefix"}, nil},

	"list swallows fn error": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, list: func(ctx context.Context, p string, o objstore.ListOptions, fn func(objstore.Entry) error) error {
			b.List(ctx, p, o, func(e objstore.Entry) error { fn(e); return nil })
			return nil
		}}
	}, []string{"ListStop", "ListCancel"}, nil},

	"context ignored": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{
			Bucket: b,
			get: func(ctx context.Context, k string) (io.ReadCloser, objstore.Attrs, error) {
				return b.Get(context.WithoutCancel(ctx), k)
			},
			put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
				return b.Put(context.WithoutCancel(ctx), k, r, o)
			},
			list: func(ctx context.Context, p string, o objstore.ListOptions, fn func(objstore.Entry) error) error {
				return b.List(context.WithoutCancel(ctx), p, o, fn)
			},
		}
	}, []string{"Canceled", "ListCancel"}, nil},

	"acknowledged write lost": {func() objstore.Bucket {
		b := memory.New()
		var n atomic.Int64
		return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
			a, err := b.Put(ctx, k, r, o)
			if err == nil && n.Add(1)%37 == 0 {
				b.Delete(ctx, k)
			}
			return a, err
		}}
	}, []string{"Concurrent"}, nil},

	"short read when deleted": {func() objstore.Bucket {
		b := memory.New()
		return &mutant{Bucket: b, getRange: func(ctx context.Context, k string, off, n int64) (io.ReadCloser, error) {
			rc, err := b.GetRange(ctx, k, off, n)
			if err != nil {
				return nil, err
			}
			return &vanishing{rc: rc, gone: func() bool { _, err := b.Head(ctx, k); return err != nil }}, nil
		}}
	}, []string{"DeleteDuringRead"}, nil},
}

// pathKeyed is the memory backend refusing, with refusal, a key below a
// stored key or above one, as a file-system backend must.
func pathKeyed(b *memory.Bucket, refusal error) objstore.Bucket {
	return &mutant{Bucket: b, put: func(ctx context.Context, k string, r io.Reader, o objstore.PutOptions) (objstore.Attrs, error) {
		for _, key := range b.Keys() {
			if strings.HasPrefix(key, k+"/") || strings.HasPrefix(k, key+"/") {
				return objstore.Attrs{}, fmt.Errorf("%w: %s nests with %s", refusal, k, key)
			}
		}
		return b.Put(ctx, k, r, o)
	}}
}

// TestPathKeys runs the suite in PathKeys mode against a backend that
// refuses nested keys correctly: the mode must hold such a backend to the
// rest of the contract without failing it for the refusal.
func TestPathKeys(t *testing.T) {
	objstoretest.Run(t, func(*testing.T) objstore.Bucket {
		return pathKeyed(memory.New(), objstore.ErrKeyConflict)
	}, objstoretest.PathKeys())
}

// vanishing ends its body early, without an error, once the object is gone:
// the silent short read a backend must never produce.
type vanishing struct {
	rc   io.ReadCloser
	gone func() bool
}

func (v *vanishing) Read(p []byte) (int, error) {
	if v.gone() {
		return 0, io.EOF
	}
	return v.rc.Read(p)
}

func (v *vanishing) Close() error { return v.rc.Close() }

func TestMutants(t *testing.T) {
	if name := os.Getenv(mutantEnv); name != "" {
		m, ok := mutants[name]
		if !ok {
			t.Fatalf("no mutant %q", name)
		}
		objstoretest.Run(t, func(*testing.T) objstore.Bucket { return m.make() }, m.opts...)
		return
	}
	if testing.Short() {
		t.Skip("re-runs the suite once per mutant")
	}
	for name, m := range mutants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			checkCaught(t, "TestMutants", mutantEnv, name, m.catch)
		})
	}
}

// checkCaught runs the subtests catch of test (a Test function of this
// binary) in a child process with env set to the mutant's name, and checks
// that each of them failed.
func checkCaught(t *testing.T, test, env, name string, catch []string) {
	t.Helper()
	// Only the cases expected to fail run, which keeps this cheap.
	run := fmt.Sprintf("^%s$/^(%s)$", test, strings.Join(catch, "|"))
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.timeout=2m")
	cmd.Env = append(os.Environ(), env+"="+name)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("suite passed or did not run against the mutant (err %v):\n%s", err, out)
	}
	for _, c := range catch {
		failed := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*--- FAIL: %s/%s \(`, test, regexp.QuoteMeta(c)))
		if !failed.Match(out) {
			t.Errorf("subtest %s did not catch the mutant", c)
		}
	}
	if t.Failed() {
		t.Logf("suite output:\n%s", out)
	}
}
