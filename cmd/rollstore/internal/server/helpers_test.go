package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/api/openapitest"
	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/local"
	"github.com/rollstore/rollstore/objstore/memory"
)

// testEngineConfig is small and explicit: a 4 KiB inline limit so tests
// cover external payloads with small bodies, generations sealed only by
// Flush (the merge endpoint), zero reclaim grace to exercise the races.
func testEngineConfig() engine.Config {
	return engine.Config{
		Shard:             "test-0",
		InlineMax:         4 << 10,
		GroupCommitWindow: time.Millisecond,
		GenMaxAge:         time.Hour,
		ReclaimGrace:      0,
		RetainVersions:    2,
		RetainAge:         0,
		OrphanGrace:       time.Hour,
		CacheBytes:        8 << 20,
	}
}

type envOptions struct {
	store  objstore.Bucket
	engine engine.Config
	server Config
}

type testEnv struct {
	t     *testing.T
	store objstore.Bucket
	db    *engine.DB
	srv   *Server
	ts    *httptest.Server
	hooks *hook.Set
	// api checks every request and response of ts.Client() against
	// api/openapi.yaml.
	api *openapitest.Validator
	// client is the Go client over ts.Client(), checked likewise.
	client *client.Client
}

// newEnv serves the real handler over real HTTP on the memory backend
// unless an option picks another store.
func newEnv(t *testing.T, opts ...func(*envOptions)) *testEnv {
	t.Helper()
	o := envOptions{store: memory.New(), engine: testEngineConfig(),
		// Every test client is 127.0.0.1: no per-client share unless a
		// test asks for one.
		server: Config{MergeInterval: -1, MaxBodyBytes: 1 << 20, MaxBatchBytes: 1 << 20, MaxClientShare: 1}}
	for _, f := range opts {
		f(&o)
	}
	hs := hook.NewSet()
	o.engine.Hooks = hs.Func()
	o.server.Hooks = hs.Func()
	o.engine.MaxPayload = o.server.MaxBodyBytes
	db, err := engine.Open(o.store, o.engine)
	if err != nil {
		t.Fatal(err)
	}
	o.server.Store = o.store
	srv, err := New(db, o.server)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	api := checkOpenAPI(t, ts)
	c, err := client.New(ts.URL, client.WithHTTPClient(ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		hs.Reset()
		ts.Close()
		_ = db.Close(context.Background())
	})
	return &testEnv{t: t, store: o.store, db: db, srv: srv, ts: ts, hooks: hs, api: api, client: c}
}

// checkOpenAPI makes ts.Client() validate its traffic against the OpenAPI
// file, failing t on any drift.
func checkOpenAPI(t *testing.T, ts *httptest.Server) *openapitest.Validator {
	t.Helper()
	v, err := openapitest.New()
	if err != nil {
		t.Fatal(err)
	}
	c := ts.Client()
	c.Transport = v.Transport(c.Transport, func(err error) { t.Error(err) })
	return v
}

func withLocalStore(t *testing.T) func(*envOptions) {
	return func(o *envOptions) {
		b, err := local.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		o.store = b
	}
}

// withAzurite serves from a fresh Azurite container; it skips when no
// Azurite runs (fails under ROLLSTORE_REQUIRE_AZURITE=1).
func withAzurite(t *testing.T) func(*envOptions) {
	b := azuritetest.Bucket(t)
	return func(o *envOptions) { o.store = b }
}

type response struct {
	status int
	header http.Header
	body   []byte
}

// errCode returns the error code of a JSON error answer, "" otherwise.
func (r response) errCode() string {
	var b errorBody
	if json.Unmarshal(r.body, &b) != nil {
		return ""
	}
	return b.Error.Code
}

// errDetail returns the error of a JSON error answer, zero otherwise.
func (r response) errDetail() errorDetail {
	var b errorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error
}

func (r response) errMessage() string   { return r.errDetail().Message }
func (r response) errRequestID() string { return r.errDetail().RequestID }

// errLine and errRow return the line or row an error names, or -1.
func (r response) errLine() int {
	if l := r.errDetail().Line; l != nil {
		return *l
	}
	return -1
}

func (r response) errRow() int {
	if l := r.errDetail().Row; l != nil {
		return *l
	}
	return -1
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %q: %v", r.body, err)
	}
}

// do sends a request; hdr is name, value pairs.
func (e *testEnv) do(method, path string, body io.Reader, hdr ...string) response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.ts.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return e.send(req)
}

func (e *testEnv) send(req *http.Request) response {
	e.t.Helper()
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", req.Method, req.URL, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// createTableWith creates a table of n partitions (a table of one
// partition is what a test of whole-table atomicity needs: a batch on it
// commits all or nothing).
func (e *testEnv) createTableWith(name string, partitions int) {
	e.t.Helper()
	want(e.t, e.do("PUT", fmt.Sprintf("/v1/tables/%s?partitions=%d", name, partitions), nil), http.StatusCreated, "")
}

func (e *testEnv) createTable(name string) {
	e.t.Helper()
	if err := e.client.CreateTable(context.Background(), name); err != nil {
		e.t.Fatalf("create table %s: %v", name, err)
	}
}

// rolloutURL is the path of a rollout; ids made of dots travel as %2E.
func rolloutURL(table, id string) string {
	seg := url.PathEscape(id)
	if seg == "." || seg == ".." {
		seg = strings.Repeat("%2E", len(seg))
	}
	return "/v1/tables/" + table + "/rollouts/" + seg
}

// put stores a payload with record fields given as JSON.
func (e *testEnv) put(table, id, record string, payload []byte, hdr ...string) response {
	e.t.Helper()
	return e.do("PUT", rolloutURL(table, id), bytes.NewReader(payload),
		append([]string{"Rollstore-Record", record, "Content-Type", "application/octet-stream"}, hdr...)...)
}

func (e *testEnv) mustPut(table, id string, payload []byte) {
	e.t.Helper()
	res, err := e.client.Put(context.Background(), table, id, client.Fields{RolloutID: "r-" + id, ContentType: "application/octet-stream"}, bytes.NewReader(payload))
	if err != nil || !res.Created {
		e.t.Fatalf("put %s: %+v %v", id, res, err)
	}
}

func (e *testEnv) merge(table string) client.MergeResult {
	e.t.Helper()
	res, err := e.client.Merge(context.Background(), table)
	if err != nil {
		e.t.Fatalf("merge: %v", err)
	}
	return res
}

// want fails unless r has the status (and, if code is not empty, the error
// code).
func want(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || (code != "" && r.errCode() != code) {
		t.Fatalf("got %d %s, want %d %s", r.status, bytes.TrimSpace(r.body), status, code)
	}
}

// payloadOf derives test bytes from a seed.
func payloadOf(seed string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed[i%len(seed)] + byte(i/len(seed))
	}
	return b
}
