package azure

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
)

// blackHole listens on a local port, accepts every connection and reads
// what is sent, but never answers: a store process that hangs. It
// returns the endpoint.
func blackHole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// noHangCtx bounds a test call well beyond the retry budget: a call that
// hangs until the caller's context ends fails the test on that context
// rather than hold the package's tests.
func noHangCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestBlackHoleStore: against a store that accepts connections and never
// answers, every call fails with ErrUnavailable (a transport timeout, not
// the caller's context) within the default retry budget, with the
// transport New builds and the default configuration.
func TestBlackHoleStore(t *testing.T) {
	b := newOffline(t, blackHole(t), nil)
	big := bytes.Repeat([]byte("x"), 2*DefaultBlockSize+1) // streamed in blocks
	ctx := noHangCtx(t)
	var wg sync.WaitGroup
	for name, call := range map[string]func(context.Context) error{
		"check": func(ctx context.Context) error { return b.Check(ctx) },
		"get": func(ctx context.Context) error {
			_, _, err := b.Get(ctx, "k")
			return err
		},
		"get range": func(ctx context.Context) error {
			_, err := b.GetRange(ctx, "k", 1, 2)
			return err
		},
		"head": func(ctx context.Context) error {
			_, err := b.Head(ctx, "k")
			return err
		},
		"put": func(ctx context.Context) error {
			_, err := b.Put(ctx, "k", bytes.NewReader([]byte("v")), objstore.PutOptions{})
			return err
		},
		"put streamed": func(ctx context.Context) error {
			_, err := b.Put(ctx, "k", io.MultiReader(bytes.NewReader(big)), objstore.PutOptions{})
			return err
		},
		"put if absent": func(ctx context.Context) error {
			_, err := b.Put(ctx, "k", bytes.NewReader([]byte("v")), objstore.PutOptions{IfNotExists: true})
			return err
		},
		"put if match": func(ctx context.Context) error {
			_, err := b.Put(ctx, "k", bytes.NewReader([]byte("v")), objstore.PutOptions{IfMatch: `"0x1"`})
			return err
		},
		"list": func(ctx context.Context) error {
			return b.List(ctx, "", objstore.ListOptions{}, func(objstore.Entry) error { return nil })
		},
		"list delimited": func(ctx context.Context) error {
			return b.List(ctx, "a/", objstore.ListOptions{Delimited: true}, func(objstore.Entry) error { return nil })
		},
		"delete":          func(ctx context.Context) error { return b.Delete(ctx, "k") },
		"delete if match": func(ctx context.Context) error { return b.DeleteIfMatch(ctx, "k", `"0x1"`) },
		"delete many":     func(ctx context.Context) error { return b.DeleteMany(ctx, []string{"a", "b", "c"}) },
		"acquire lease": func(ctx context.Context) error {
			_, err := b.AcquireLease(ctx, "lease", 15*time.Second)
			return err
		},
	} {
		// All at once, rather than parallel subtests, which -parallel
		// (GOMAXPROCS by default) would serialise on a small machine.
		wg.Go(func() {
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v, want ErrUnavailable, not the context's end", name, err)
			}
			if errors.Is(err, objstore.ErrPrecondition) {
				t.Errorf("%s: %v: a Put without an answer must not say its condition failed", name, err)
			}
			// The budget plus slack for a loaded machine: the point is
			// that it is not the caller's whole wait.
			if bound := DefaultMaxElapsed + 1500*time.Millisecond; took > bound {
				t.Errorf("%s: failed after %v, want within %v", name, took, bound)
			}
		})
	}
	wg.Wait()
}

// stallingBlob serves every download with the headers of a blob of size
// bytes, then stalls until the test ends, having sent the first download
// sent of them (and resumptions nothing). It counts the downloads.
func stallingBlob(t *testing.T, size, sent int) (endpoint string, downloads func() int) {
	t.Helper()
	release := make(chan struct{})
	var (
		mu sync.Mutex
		n  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(size))
		h.Set("ETag", `"0x8D0000000000001"`)
		h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		h.Set("x-ms-blob-type", "BlockBlob")
		status := http.StatusOK
		if r.Header.Get("x-ms-range") != "" || r.Header.Get("Range") != "" {
			status = http.StatusPartialContent
		}
		w.WriteHeader(status)
		if first {
			w.Write(bytes.Repeat([]byte("x"), sent))
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestStalledDownloadBody: a download whose body stops arriving is cut by
// the per-read stall timeout, resumed as many times as MaxReadRetries
// allows, and then fails with ErrUnavailable, having returned the bytes
// that did arrive.
func TestStalledDownloadBody(t *testing.T) {
	endpoint, downloads := stallingBlob(t, 1000, 10)
	b := newOffline(t, endpoint, func(c *Config) {
		c.Retry = RetryConfig{StallTimeout: 200 * time.Millisecond, RetryDelay: 10 * time.Millisecond}
	})
	ctx := noHangCtx(t)
	start := time.Now()
	rc, _, err := b.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get: %v (the headers did arrive)", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	took := time.Since(start)
	if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("read: %v, want ErrUnavailable", err)
	}
	if len(got) != 10 {
		t.Errorf("read %d bytes before the stall, want the 10 sent", len(got))
	}
	if n := downloads(); n != 1+DefaultMaxReadRetries {
		t.Errorf("%d downloads, want 1 + %d resumptions", n, DefaultMaxReadRetries)
	}
	if took > 5*time.Second {
		t.Errorf("failed after %v: the stall was not cut per read", took)
	}
}

// TestSlowDownloadNotCut: a download body that keeps arriving, however
// long it takes in total, is not cut: the stall timeout bounds each read,
// not the transfer, and does not count time the caller spends between
// reads.
func TestSlowDownloadNotCut(t *testing.T) {
	const chunks = 20
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Length", strconv.Itoa(chunks))
		h.Set("ETag", `"0x8D0000000000001"`)
		h.Set("x-ms-blob-type", "BlockBlob")
		w.WriteHeader(http.StatusOK)
		for range chunks {
			w.Write([]byte("x"))
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond) // well inside the stall timeout, 1s in all
		}
	}))
	t.Cleanup(srv.Close)
	b := newOffline(t, srv.URL, func(c *Config) {
		c.Retry = RetryConfig{StallTimeout: 500 * time.Millisecond, MaxReadRetries: -1}
	})
	rc, _, err := b.Get(noHangCtx(t), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var got []byte
	buf := make([]byte, 1)
	for {
		n, err := rc.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("after %d bytes: %v", len(got), err)
		}
		if len(got) == 1 {
			time.Sleep(time.Second) // the caller dawdles: not the store's stall
		}
	}
	if len(got) != chunks {
		t.Errorf("read %d bytes, want %d", len(got), chunks)
	}
}
