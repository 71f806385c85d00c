package objstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rollstore/rollstore/objstore"
)

// testConcurrent runs writers, readers and an updater against one bucket.
// Readers check every body in full against what its key says it must be: a
// key whose Put has returned must be readable, a key still being written may
// be ErrNotFound, and nothing may be torn, short or foreign. The updater
// replaces one hot key with If-Match, and readers of it must see exactly one
// complete version.
func testConcurrent(t *testing.T, b objstore.Bucket) {
	const (
		writers   = 8
		perWriter = 20
		readers   = 8
		maxReads  = 60 // per reader; bounds the run on a slow store
		minReads  = 20 // per reader; keeps a fast store's run meaningful
		versions  = 20
		hot       = "hot"
	)
	key := func(w, i int) string { return fmt.Sprintf("c/w%02d/%04d", w, i) }
	version := func(v int) []byte {
		// Lengths differ by version, so a mix of two cannot pass.
		head := fmt.Sprintf("version %02d\n", v)
		return append([]byte(head), bytes.Repeat([]byte{byte('a' + v)}, 1000+37*v)...)
	}

	ctx := t.Context()
	first := mustPut(t, b, hot, version(0), objstore.PutOptions{})

	var (
		written [writers]atomic.Int64 // writer w's keys [0, n) are acknowledged
		done    atomic.Bool
		wg      sync.WaitGroup // writers and the updater
		rg      sync.WaitGroup // readers
		lastTag atomic.Value
	)
	lastTag.Store(first.ETag)

	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				k := key(w, i)
				if _, err := put(t, b, k, content(k), objstore.PutOptions{}); err != nil {
					t.Errorf("Put(%q): %v", k, err)
					return
				}
				written[w].Store(int64(i + 1))
			}
		})
	}
	wg.Go(func() {
		etag := first.ETag
		for v := 1; v <= versions; v++ {
			a, err := put(t, b, hot, version(v), objstore.PutOptions{IfMatch: etag})
			if err != nil {
				t.Errorf("If-Match Put of %s version %d (sole updater): %v", hot, v, err)
				return
			}
			etag = a.ETag
			lastTag.Store(etag)
		}
	})

	// readOne reads a key and returns its body, or a nil body and no error
	// when ErrNotFound is acceptable.
	readOne := func(r *rand.Rand, k string, mayBeMissing bool) ([]byte, error) {
		var rc io.ReadCloser
		var err error
		var size int64 = -1
		if r.IntN(2) == 0 {
			var a objstore.Attrs
			rc, a, err = b.Get(ctx, k)
			size = a.Size
		} else {
			rc, err = b.GetRange(ctx, k, 0, -1)
		}
		if errors.Is(err, objstore.ErrNotFound) && mayBeMissing {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", k, err)
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", k, err)
		}
		if size >= 0 && size != int64(len(data)) {
			return nil, fmt.Errorf("%s: Attrs.Size %d, body %d bytes", k, size, len(data))
		}
		return data, nil
	}

	for rd := range readers {
		rg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(rd), 1))
			for n := 0; n < maxReads && (n < minReads || !done.Load()); n++ {
				if n%5 == 0 {
					data, err := readOne(r, hot, false)
					if err != nil {
						t.Error(err)
						return
					}
					var v int
					if _, err := fmt.Sscanf(string(data), "version %d", &v); err != nil || v < 0 || v > versions || !bytes.Equal(data, version(v)) {
						t.Errorf("%s: read %d bytes that are no complete version (starts %.20q)", hot, len(data), data)
						return
					}
					continue
				}
				w := r.IntN(writers)
				acked := int(written[w].Load()) // loaded before the read starts
				i := r.IntN(perWriter)
				if acked > 0 && r.IntN(4) != 0 {
					i = r.IntN(acked) // mostly keys known to exist
				}
				k := key(w, i)
				data, err := readOne(r, k, i >= acked)
				if err != nil {
					t.Errorf("reader %d: %v (Put acknowledged: %v)", rd, err, i < acked)
					return
				}
				if data != nil && !bytes.Equal(data, content(k)) {
					t.Errorf("reader %d: %s: %d bytes, not its content (starts %.20q)", rd, k, len(data), data)
					return
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	rg.Wait()
	if t.Failed() {
		return
	}

	entries := list(t, b, "c/", flat)
	if len(entries) != writers*perWriter {
		t.Errorf("List(c/) after the run: %d entries, want %d", len(entries), writers*perWriter)
	}
	for _, e := range entries {
		if e.Size != int64(len(content(e.Key))) {
			t.Errorf("List(c/): %s has Size %d, want %d", e.Key, e.Size, len(content(e.Key)))
		}
	}
	if a := checkContent(t, b, hot, version(versions)); a.ETag != lastTag.Load().(string) {
		t.Errorf("%s: ETag %q, the last If-Match Put returned %q", hot, a.ETag, lastTag.Load())
	}
}

// testDeleteDuringRead deletes an object while a body of it is open, which
// is what a merge's reclaim does to a reader. The reader must get the whole
// object or an error matching ErrNotFound (which the read path retries) —
// never different bytes and never a clean short read.
func testDeleteDuringRead(t *testing.T, b objstore.Bucket) {
	ctx := t.Context()
	data := noise(7, 1<<20)
	open := map[string]func(key string) (io.ReadCloser, error){
		"Get": func(key string) (io.ReadCloser, error) {
			rc, _, err := b.Get(ctx, key)
			return rc, err
		},
		"GetRange": func(key string) (io.ReadCloser, error) {
			return b.GetRange(ctx, key, 0, -1)
		},
	}
	for _, name := range []string{"Get", "GetRange"} {
		key := "reclaim/" + strings.ToLower(name)
		mustPut(t, b, key, data, objstore.PutOptions{})
		rc, err := open[name](key)
		if err != nil {
			t.Fatalf("%s(%q): %v", name, key, err)
		}
		head := make([]byte, 4096)
		if _, err := io.ReadFull(rc, head); err != nil {
			rc.Close()
			t.Fatalf("%s(%q): reading the first 4 KiB: %v", name, key, err)
		}
		if err := b.Delete(ctx, key); err != nil {
			rc.Close()
			t.Fatalf("Delete(%q) during read: %v", key, err)
		}
		rest, err := io.ReadAll(rc)
		rc.Close()
		switch got := append(head, rest...); {
		case err != nil && !errors.Is(err, objstore.ErrNotFound):
			t.Errorf("%s: reading after Delete: err = %v, want nil or ErrNotFound", name, err)
		case err == nil:
			checkBytes(t, name+" after Delete", got, data)
		case len(got) > len(data) || !bytes.Equal(got, data[:len(got)]):
			t.Errorf("%s: reading after Delete failed (%v), and the %d bytes before were wrong", name, err, len(got))
		}
		checkMissing(t, b, key)
	}
}

// testCanceled calls every method with a context cancelled beforehand: each
// must report context.Canceled, and none may have an effect.
func testCanceled(t *testing.T, b objstore.Bucket) {
	const key = "cancel/existing"
	mustPut(t, b, key, []byte("still here"), objstore.PutOptions{})
	ctx := canceled(t)
	noop := func(objstore.Entry) error { return nil }

	rc, _, err := b.Get(ctx, key)
	if err == nil {
		rc.Close()
	}
	checkErr(t, "Get", err, context.Canceled)
	rc, err = b.GetRange(ctx, key, 0, 1)
	if err == nil {
		rc.Close()
	}
	checkErr(t, "GetRange", err, context.Canceled)
	_, err = b.Head(ctx, key)
	checkErr(t, "Head", err, context.Canceled)
	_, err = b.Put(ctx, "cancel/new", strings.NewReader("new"), objstore.PutOptions{Size: 3})
	checkErr(t, "Put", err, context.Canceled)
	_, err = b.Put(ctx, "cancel/created", strings.NewReader("new"), objstore.PutOptions{Size: 3, IfNotExists: true})
	checkErr(t, "Put(IfNotExists)", err, context.Canceled)
	_, err = b.Put(ctx, key, strings.NewReader("replaced"), objstore.PutOptions{Size: 8})
	checkErr(t, "Put over an existing key", err, context.Canceled)
	checkErr(t, "Delete", b.Delete(ctx, key), context.Canceled)
	checkErr(t, "DeleteMany", b.DeleteMany(ctx, []string{key}), context.Canceled)
	checkErr(t, "List", b.List(ctx, "", flat, noop), context.Canceled)
	checkErr(t, "List(Delimited)", b.List(ctx, "", delimited, noop), context.Canceled)

	checkMissing(t, b, "cancel/new")
	checkMissing(t, b, "cancel/created")
	checkContent(t, b, key, []byte("still here"))
}
