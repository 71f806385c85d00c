package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

// freezer is a TCP proxy in front of Azurite that can stop answering, as
// a store that is SIGSTOPped (or whose network path black-holes) does to
// its clients: connections are still accepted and requests still sent,
// and nothing comes back, until it thaws.
type freezer struct {
	ln     net.Listener
	target string
	frozen atomic.Bool
	mu     sync.Mutex
	thawed chan struct{}
	conns  []net.Conn
}

func newFreezer(t *testing.T, target string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, thawed: make(chan struct{})}
	close(f.thawed)
	go f.serve()
	t.Cleanup(func() {
		f.thaw()
		ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen.Swap(true) {
		f.thawed = make(chan struct{})
	}
}

func (f *freezer) thaw() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.frozen.Swap(false) {
		close(f.thawed)
	}
}

// gate blocks while the proxy is frozen.
func (f *freezer) gate() {
	f.mu.Lock()
	ch := f.thawed
	f.mu.Unlock()
	<-ch
}

func (f *freezer) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		go f.proxy(c)
	}
}

func (f *freezer) proxy(c net.Conn) {
	f.gate() // a frozen store accepts, then says nothing
	up, err := net.Dial("tcp", f.target)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	f.conns = append(f.conns, c, up)
	f.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				f.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(up, c)
	pipe(c, up)
}

// TestHungStoreAnswers503: while the store accepts connections and never
// answers, a rollstore process answers reads and writes 503
// store_unavailable with Retry-After within its Azure retry budget, not
// after the client's whole wait; once the store answers again, so does
// the process, and what was acknowledged before is still there.
func TestHungStoreAnswers503(t *testing.T) {
	if rollstoreBin == "" {
		t.Fatal("TestMain did not build the rollstore binary")
	}
	connStr := azuritetest.ConnectionString(t)
	m := regexp.MustCompile(`BlobEndpoint=http://([^/;]+)/`).FindStringSubmatch(connStr)
	if m == nil {
		t.Fatalf("no BlobEndpoint host in the Azurite connection string")
	}
	fr := newFreezer(t, m[1])
	proxied := strings.Replace(connStr, m[1], fr.ln.Addr().String(), 1)
	cfg := azuritetest.Config(t)
	azuritetest.Open(t, cfg) // the container, deleted when the test ends
	const budget = 6 * time.Second
	c := newCluster(t, proxied, []string{
		"--store", "azure",
		"--azure-auth", "connection-string",
		"--azure-container", cfg.Container,
		"--prefix", "hung-" + randomHex(6),
		"--azure-retry-budget", budget.String(),
		"--azure-stall-timeout", "3s", // above what a busy machine's Azurite takes to answer
		"--merge-interval", "0",
	})
	w := c.startProc("w-0", "writer", "w-0")
	createTable(t, c.http, w, table)
	put := func(ctx context.Context, id string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, w.url+"/v1/tables/"+table+"/rollouts/"+id, bytes.NewReader([]byte("payload "+id)))
		req.Header.Set("Rollstore-Record", `{"rollout_id":"hung"}`)
		return c.http.Do(req)
	}
	c.waitFor("a write before the freeze", slowdown*60*time.Second, 100*time.Millisecond, func() bool {
		resp, err := put(context.Background(), "before")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
	})

	fr.freeze()
	c.logf("store frozen")
	// The client waits up to 30 s, as the client that found this did;
	// the answer must come within the budget (and scheduling slack).
	within := budget + slowdown*4*time.Second
	for _, tc := range []struct {
		name string
		do   func(ctx context.Context) (*http.Response, error)
	}{
		{"GET rollout", func(ctx context.Context) (*http.Response, error) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.url+"/v1/tables/"+table+"/rollouts/absent-id", nil)
			return c.http.Do(req)
		}},
		{"PUT rollout", func(ctx context.Context) (*http.Response, error) { return put(ctx, "during") }},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		resp, err := tc.do(ctx)
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("%s while frozen: %v after %v", tc.name, err, took)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(body, &e)
		c.logf("%s while frozen: %d %s after %v", tc.name, resp.StatusCode, e.Error.Code, took.Round(time.Millisecond))
		// A write whose outcome the store could not confirm may also be
		// answered outcome_unknown; both are 503 with Retry-After.
		if resp.StatusCode != http.StatusServiceUnavailable || (e.Error.Code != "store_unavailable" && e.Error.Code != "outcome_unknown") ||
			resp.Header.Get("Retry-After") == "" || took > within {
			t.Errorf("%s while frozen: %d %s (Retry-After %q) after %v, want 503 store_unavailable within %v",
				tc.name, resp.StatusCode, body, resp.Header.Get("Retry-After"), took, within)
		}
	}

	fr.thaw()
	c.logf("store thawed")
	var got []byte
	c.waitFor("the process to answer again", slowdown*60*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, w.url+"/v1/tables/"+table+"/rollouts/before/payload", nil)
		resp, err := c.http.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		got, _ = io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK
	})
	if string(got) != "payload before" {
		t.Fatalf("after the thaw: %q", got)
	}
	c.waitFor("a write to be acknowledged again", slowdown*60*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := put(ctx, "after")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK
	})
}
