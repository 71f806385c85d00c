package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

// unreachableAzure is an Azure bucket whose endpoint nobody listens on,
// configured as `rollstore serve` configures one (default retries and
// budget), with Azurite's published development account.
func unreachableAzure(t *testing.T) objstore.Bucket {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b, err := azure.New(t.Context(), azure.Config{
		Container: "unreachable",
		Auth:      azure.AuthConnectionString,
		ConnectionString: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
			"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
			"BlobEndpoint=http://" + addr + "/devstoreaccount1;",
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestUnreachableStoreIs503: with the store unreachable, API calls answer
// 503 store_unavailable with Retry-After, within the Azure retry budget
// (not after the SDK's whole backoff schedule), and /readyz answers 503
// within its own bound, naming the store.
func TestUnreachableStoreIs503(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.store = unreachableAzure(t) })
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/tables"},
		{"PUT", "/v1/tables/t"},
		{"GET", rolloutURL("t", "a")},
	} {
		start := time.Now()
		r := e.do(c.method, c.path, nil)
		took := time.Since(start)
		want(t, r, http.StatusServiceUnavailable, codeStoreDown)
		if r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without Retry-After", c.method, c.path)
		}
		if took > azure.DefaultMaxElapsed {
			t.Errorf("%s %s: answered after %v, more than the %v retry budget", c.method, c.path, took, azure.DefaultMaxElapsed)
		}
	}
	start := time.Now()
	r := e.do("GET", "/readyz", nil)
	took := time.Since(start)
	want(t, r, http.StatusServiceUnavailable, codeNotReady)
	if !strings.Contains(r.errMessage(), "store unreachable") {
		t.Errorf("readyz: %s, want the reason", r.body)
	}
	if bound := DefaultConfig().ReadyTimeout + 500*time.Millisecond; took > bound {
		t.Errorf("readyz answered after %v, bound %v", took, DefaultConfig().ReadyTimeout)
	}
}

// TestReadyzIsBounded: /readyz answers within ReadyTimeout with the reason
// even when a store call hangs and ignores its context, whether the
// probe itself or loading the tables waits on it.
func TestReadyzIsBounded(t *testing.T) {
	fb := faulty.New(memory.New())
	t.Cleanup(fb.Reset)
	e := newEnv(t, func(o *envOptions) {
		o.store = fb
		o.server.ReadyTimeout = 300 * time.Millisecond
	})
	e.createTable("t")
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hang := func(context.Context, string) error { <-release; return nil } // deaf to its context
	rule := fb.Hook(faulty.OpList, faulty.Before, faulty.AnyKey, hang, faulty.Always())
	for range 2 { // the second probe finds the first one's call still hanging
		start := time.Now()
		r := e.do("GET", "/readyz", nil)
		took := time.Since(start)
		want(t, r, http.StatusServiceUnavailable, codeNotReady)
		if !strings.Contains(r.errMessage(), "no answer within 300ms") {
			t.Errorf("readyz: %s, want the reason", r.body)
		}
		if took > time.Second {
			t.Errorf("readyz answered after %v, bound 300ms", took)
		}
	}
	rule.Remove()
	// Loading a table hangs now, not the store probe.
	fb.Hook(faulty.OpGet, faulty.Before, faulty.KeyContains("/base/"), hang, faulty.Always())
	fb.Hook(faulty.OpList, faulty.Before, faulty.KeyContains("/base/"), hang, faulty.Always())
	start := time.Now()
	r := e.do("GET", "/readyz", nil)
	want(t, r, http.StatusServiceUnavailable, codeNotReady)
	if !strings.Contains(r.errMessage(), "loading tables") {
		t.Errorf("readyz: %s, want the reason", r.body)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("readyz answered after %v, bound 300ms", took)
	}
}

// blackHoleAzure is an Azure bucket, configured as `rollstore serve`
// configures one, whose endpoint accepts connections and reads requests
// but never answers: a store process that hangs.
func blackHoleAzure(t *testing.T) objstore.Bucket {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			conns.Go(func() { io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		conns.Wait()
	})
	return azureAt(t, "http://"+ln.Addr().String()+"/devstoreaccount1", "blackhole")
}

func azureAt(t *testing.T, endpoint, container string) objstore.Bucket {
	t.Helper()
	b, err := azure.New(t.Context(), azure.Config{
		Container: container,
		Auth:      azure.AuthConnectionString,
		ConnectionString: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
			"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
			"BlobEndpoint=" + endpoint + ";",
		// Short bounds: the store never answers, so no value is too short
		// here, and the test stays quick.
		Retry: azure.RetryConfig{MaxElapsed: hungBudget, StallTimeout: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// storeBound is how long an answer may take when the store does not
// answer: the retry budget, and slack for a loaded machine. The point is
// that it is not the client's whole wait (30s and more).
const storeBound = hungBudget + 2*time.Second

// hungBudget is the retry budget of the hung-store tests.
const hungBudget = 3 * time.Second

// TestHungStoreIs503: with a store that accepts connections and never
// answers, API calls answer 503 store_unavailable with Retry-After within
// the retry budget, not 503 timeout once the request's own wait is over.
func TestHungStoreIs503(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.store = blackHoleAzure(t) })
	type call struct{ method, path, body string }
	calls := []call{
		{"GET", "/v1/tables", ""},
		{"PUT", "/v1/tables/t", ""},
		{"GET", rolloutURL("t", "a"), ""},
		{"PUT", rolloutURL("t", "a"), "payload"},
	}
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			start := time.Now()
			r, err := e.doAsync(c.method, c.path, c.body, "Rollstore-Record", `{"rollout_id":"r"}`, "Content-Type", "application/octet-stream")
			took := time.Since(start)
			if err != nil {
				t.Errorf("%s %s: %v", c.method, c.path, err)
				return
			}
			if r.status != http.StatusServiceUnavailable || r.errCode() != codeStoreDown {
				t.Errorf("%s %s: %d %s, want 503 %s", c.method, c.path, r.status, r.body, codeStoreDown)
			}
			if r.header.Get("Retry-After") == "" {
				t.Errorf("%s %s: 503 without Retry-After", c.method, c.path)
			}
			if took > storeBound {
				t.Errorf("%s %s: answered after %v, want within %v", c.method, c.path, took, storeBound)
			}
		})
	}
	wg.Wait()
}

// doAsync is do for other goroutines than the test's: it reports failures
// rather than end the test, and gives up after 30s.
func (e *testEnv) doAsync(method, path, body string, hdr ...string) (response, error) {
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.ts.URL+path, rb)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: b}, err
}
