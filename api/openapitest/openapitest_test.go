package openapitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestFileDescribesTheREADMERoutes keeps the README's API table and the
// file in step: every route the README documents has an operation.
func TestFileDescribesTheREADMERoutes(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops := v.Operations()
	re := regexp.MustCompile("`(GET|PUT|POST|DELETE|HEAD) (/[^`?]*)[`?]")
	n := 0
	for _, m := range re.FindAllStringSubmatch(string(readme), -1) {
		n++
		if !slices.Contains(ops, m[1]+" "+m[2]) {
			t.Errorf("the README documents %s %s; api/openapi.yaml has no such operation", m[1], m[2])
		}
	}
	for _, probe := range []string{"/healthz", "/readyz", "/metrics"} {
		if !slices.Contains(ops, "GET "+probe) {
			t.Errorf("no operation GET %s", probe)
		}
	}
	if n < 12 {
		t.Fatalf("found only %d routes in the README's API table", n)
	}
}

func TestErrorCodesAndDocumentsError(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	codes := v.ErrorCodes()
	for _, c := range []string{"internal", "not_found", "overloaded", "redirect"} {
		if !slices.Contains(codes, c) {
			t.Errorf("ErrorCodes() = %v, without %s", codes, c)
		}
	}
	for _, c := range []struct {
		status int
		code   string
		want   bool
	}{
		{404, "not_found", true},
		{404, "conflict", false}, // a code of another status
		{503, "store_unavailable", true},
		{418, "internal", false}, // a status no operation has
		{500, "no_such_code", false},
	} {
		if got := v.DocumentsError(c.status, c.code); got != c.want {
			t.Errorf("DocumentsError(%d, %q) = %v, want %v", c.status, c.code, got, c.want)
		}
	}
}

// fake answers every request with whatever the test's handler says, so
// each rule of the validator can be shown to catch a drift.
func fake(t *testing.T, h http.HandlerFunc) (*http.Client, string, *[]error) {
	t.Helper()
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	var mu sync.Mutex
	var errs []error
	c := &http.Client{Transport: v.Transport(ts.Client().Transport, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	})}
	return c, ts.URL, &errs
}

func jsonAnswer(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Request-Id", "req-1")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

const goodRecord = `{"id":"a/b","rollout_id":"r","sequence":0,"created_at":"2026-01-02T03:04:05Z","payload_size":3,` +
	`"payload_sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}`

func TestValidatorCatchesDrift(t *testing.T) {
	for _, c := range []struct {
		name    string
		method  string
		path    string
		hdr     map[string]string
		body    string
		handler http.HandlerFunc
		drift   string // "" means no report is expected
	}{
		{"conforming record", "GET", "/v1/tables/t/rollouts/a%2Fb", nil, "",
			func(w http.ResponseWriter, r *http.Request) { jsonAnswer(w, 200, goodRecord) }, ""},
		{"undocumented status", "GET", "/v1/tables/t/rollouts/a", nil, "",
			func(w http.ResponseWriter, r *http.Request) { jsonAnswer(w, 418, `{}`) }, "418 is not documented"},
		{"unknown field in a response", "GET", "/v1/tables/t/rollouts/a", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				jsonAnswer(w, 200, strings.Replace(goodRecord, `"id"`, `"extra":1,"id"`, 1))
			}, "extra"},
		{"error code not of its status", "GET", "/v1/tables/t/rollouts/a", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				jsonAnswer(w, 404, `{"error":{"code":"conflict","message":"m","request_id":"x"}}`)
			}, "conflict"},
		{"503 without Retry-After", "GET", "/v1/tables", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				jsonAnswer(w, 503, `{"error":{"code":"overloaded","message":"m","request_id":"x"}}`)
			}, "Retry-After"},
		{"missing request id", "GET", "/healthz", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"status":"ok"}`)
			}, "X-Request-Id"},
		{"invalid request accepted", "GET", "/v1/tables/t/rollouts?limit=0", nil, "",
			func(w http.ResponseWriter, r *http.Request) { jsonAnswer(w, 200, `{"records":[]}`) }, "refuses this request"},
		{"invalid request refused", "GET", "/v1/tables/t/rollouts?limit=0", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				jsonAnswer(w, 400, `{"error":{"code":"invalid_argument","message":"m","request_id":"x"}}`)
			}, ""},
		{"bad record header accepted", "PUT", "/v1/tables/t/rollouts/a", map[string]string{"Rollstore-Record": `{"rollout_id":"r","colour":1}`}, "abc",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`)
				w.Header().Set("Location", "/x")
				jsonAnswer(w, 201, goodRecord)
			}, "refuses this request"},
		{"bad NDJSON line accepted", "POST", "/v1/tables/t/rollouts", map[string]string{"Content-Type": "application/x-ndjson"},
			`{"id":"a","rollout_id":"r"}` + "\n" + `{"id":"b"}` + "\n",
			func(w http.ResponseWriter, r *http.Request) {
				jsonAnswer(w, 201, `{"created":2,"existing":0,"records":[]}`)
			}, "line 2"},
		{"feed NDJSON row off its schema", "GET", "/v1/tables/t/feed", map[string]string{"Accept": "application/x-ndjson"}, "",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.Header().Set("X-Request-Id", "x")
				w.Header().Set("Rollstore-Cursor", "c")
				w.Header().Set("Rollstore-Rows", "1")
				w.Header().Set("Rollstore-Lag-Rows", "0")
				io.WriteString(w, `{"id":"a","partition":0,"offset":"zero","acked_at":"2026-01-02T03:04:05Z","payload_url":"/p"}`+"\n"+
					`{"cursor":"c","lag_rows":0,"partitions":[0]}`+"\n")
			}, "line 1"},
		{"feed NDJSON conforming", "GET", "/v1/tables/t/feed", map[string]string{"Accept": "application/x-ndjson"}, "",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/x-ndjson")
				w.Header().Set("X-Request-Id", "x")
				w.Header().Set("Rollstore-Cursor", "c")
				w.Header().Set("Rollstore-Rows", "1")
				w.Header().Set("Rollstore-Lag-Rows", "0")
				io.WriteString(w, `{"id":"a","partition":0,"offset":0,"acked_at":"2026-01-02T03:04:05Z","payload_url":"/p"}`+"\n"+
					`{"cursor":"c","lag_rows":0,"partitions":[0]}`+"\n")
			}, ""},
		{"no operation, answered 200", "GET", "/v2/whatever", nil, "",
			func(w http.ResponseWriter, r *http.Request) { jsonAnswer(w, 200, `{}`) }, "no operation"},
		{"no operation, error not JSON", "GET", "/v2/whatever", nil, "",
			func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", 404) }, "not JSON"},
		{"public route answers 401", "GET", "/readyz", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("WWW-Authenticate", "Bearer x")
				jsonAnswer(w, 401, `{"error":{"code":"unauthorized","message":"m","request_id":"x"}}`)
			}, "public"},
		{"payload type not listed for a scan", "GET", "/v1/tables/t/scan", nil, "",
			func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/csv")
				w.Header().Set("X-Request-Id", "x")
				io.WriteString(w, "a,b")
			}, "text/csv"},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, base, errs := fake(t, c.handler)
			req, err := http.NewRequest(c.method, base+c.path, strings.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch {
			case c.drift == "" && len(*errs) > 0:
				t.Fatalf("reported %v", *errs)
			case c.drift != "" && (len(*errs) == 0 || !strings.Contains(fmt.Sprint(*errs), c.drift)):
				t.Fatalf("reported %v, want a drift naming %q", *errs, c.drift)
			}
		})
	}
}

// TestValidatorStreams shows that a streamed payload upload and download
// pass through unbuffered: the server reads the upload's first chunk
// before the client sends the second, and the client reads the download's
// first chunk before the server writes the second.
func TestValidatorStreams(t *testing.T) {
	gotFirst := make(chan struct{})
	readFirst := make(chan struct{})
	client, base, errs := fake(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Request-Id", "x")
		h.Set("ETag", `"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"`)
		if r.Method == "PUT" {
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil || string(buf) != "first" {
				t.Errorf("first chunk %q %v", buf, err)
			}
			close(gotFirst)
			if rest, _ := io.ReadAll(r.Body); string(rest) != "second" {
				t.Errorf("rest %q", rest)
			}
			h.Set("Location", "/v1/tables/t/rollouts/a")
			jsonAnswer(w, 201, goodRecord)
			return
		}
		h.Set("Content-Type", "image/png")
		h.Set("Accept-Ranges", "bytes")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
		h.Set("Last-Modified", "Mon, 02 Jan 2026 03:04:05 GMT")
		h.Set("Content-Length", "11")
		w.WriteHeader(200)
		io.WriteString(w, "chunk")
		w.(http.Flusher).Flush()
		<-readFirst
		io.WriteString(w, "-more!")
	})
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first"))
		<-gotFirst
		pw.Write([]byte("second"))
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", base+"/v1/tables/t/rollouts/a", pr)
	req.Header.Set("Rollstore-Record", `{"rollout_id":"r"}`)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("PUT %d", resp.StatusCode)
	}

	resp, err = client.Get(base + "/v1/tables/t/rollouts/a/payload")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "chunk" {
		t.Fatalf("first chunk %q %v", buf, err)
	}
	close(readFirst)
	if rest, _ := io.ReadAll(resp.Body); string(rest) != "-more!" {
		t.Fatalf("rest %q", rest)
	}
	if len(*errs) > 0 {
		t.Fatalf("reported %v", *errs)
	}
}
