package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestConditionalGETMatchesServeContent sends the same conditional and
// ranged requests to a payload and to net/http.ServeContent serving the
// same bytes with the same ETag and modification time, and wants the same
// answers: status, validators, range, length and body.
func TestConditionalGETMatchesServeContent(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	payload := payloadOf("conditional", 5000)
	// A fraction of a second, which Last-Modified cannot carry.
	created := time.Date(2024, 5, 6, 7, 8, 9, 500_000_000, time.UTC)
	r := e.put("t", "c", `{"rollout_id":"r","created_at":"`+created.Format(time.RFC3339Nano)+`"}`, payload, "Content-Type", "image/png")
	want(t, r, http.StatusCreated, "")
	tag := r.header.Get("ETag")

	ref := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", tag)
		w.Header().Set("Content-Type", "image/png")
		http.ServeContent(w, r, "", created, bytes.NewReader(payload))
	}))
	defer ref.Close()

	lm := created.Format(http.TimeFormat)
	before := created.Add(-time.Second).Format(http.TimeFormat)
	after := created.Add(time.Second).Format(http.TimeFormat)
	other, weak := `"other"`, "W/"+tag
	cases := [][]string{
		{},
		{"If-Match", tag}, {"If-Match", other}, {"If-Match", "*"}, {"If-Match", weak}, {"If-Match", other + ", " + tag},
		{"If-Match", "garbage"},
		{"If-Unmodified-Since", before}, {"If-Unmodified-Since", lm}, {"If-Unmodified-Since", after}, {"If-Unmodified-Since", "garbage"},
		{"If-Match", tag, "If-Unmodified-Since", before},
		{"If-None-Match", tag}, {"If-None-Match", weak}, {"If-None-Match", other}, {"If-None-Match", "*"},
		{"If-None-Match", other + ", " + tag}, {"If-None-Match", "garbage"},
		{"If-Modified-Since", lm}, {"If-Modified-Since", before}, {"If-Modified-Since", after}, {"If-Modified-Since", "garbage"},
		{"If-None-Match", other, "If-Modified-Since", lm},
		{"If-Match", other, "If-None-Match", tag},
		{"If-Unmodified-Since", before, "If-None-Match", tag},
		{"Range", "bytes=0-9"}, {"Range", "bytes=-100"}, {"Range", "bytes=4990-"}, {"Range", "bytes=4990-99999"},
		{"Range", "bytes=-99999"}, {"Range", "bytes=5000-"}, {"Range", "bytes=9000-9999"},
		{"Range", "bytes=10-19", "If-Range", tag}, {"Range", "bytes=10-19", "If-Range", other},
		{"Range", "bytes=10-19", "If-Range", weak}, {"Range", "bytes=10-19", "If-Range", lm},
		{"Range", "bytes=10-19", "If-Range", before}, {"Range", "bytes=10-19", "If-Range", after},
		{"Range", "bytes=10-19", "If-Range", "garbage"},
		{"Range", "bytes=0-9", "If-None-Match", tag}, {"Range", "bytes=0-9", "If-Match", other},
		{"Range", "bytes=0-9", "If-Modified-Since", lm}, {"Range", "bytes=0-9", "If-Match", tag},
		{"Range", "bytes=5000-", "If-None-Match", tag},
	}
	get := func(base, method string, hdr []string) response {
		req, _ := http.NewRequest(method, base, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return response{status: resp.StatusCode, header: resp.Header, body: b}
	}
	for _, method := range []string{"GET", "HEAD"} {
		for _, hdr := range cases {
			name := method + " " + strings.Join(hdr, ": ")
			ours := get(e.ts.URL+rolloutURL("t", "c")+"/payload", method, hdr)
			theirs := get(ref.URL, method, hdr)
			if ours.status != theirs.status {
				t.Errorf("%s: %d, ServeContent %d", name, ours.status, theirs.status)
				continue
			}
			compare := []string{"ETag", "Content-Range"}
			switch ours.status {
			case http.StatusOK, http.StatusPartialContent:
				compare = append(compare, "Content-Length", "Last-Modified", "Content-Type", "Accept-Ranges")
				if !bytes.Equal(ours.body, theirs.body) {
					t.Errorf("%s: %d bytes, ServeContent %d", name, len(ours.body), len(theirs.body))
				}
			case http.StatusNotModified:
				compare = append(compare, "Last-Modified", "Content-Type", "Content-Length")
			}
			for _, k := range compare {
				if ours.header.Get(k) != theirs.header.Get(k) {
					t.Errorf("%s: %s %q, ServeContent %q", name, k, ours.header.Get(k), theirs.header.Get(k))
				}
			}
			if ours.status == http.StatusPreconditionFailed && ours.errCode() != codePrecondFailed && method == "GET" {
				t.Errorf("%s: 412 %s", name, ours.body)
			}
		}
	}
}

// TestRangeSemantics: a last position too large for an integer is the
// end (RFC 9110 §14.1.1), every 416 says the size, and so does one for a
// malformed Range.
func TestRangeSemantics(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, size := range []int{1000, 10 << 10} { // inline and external
		id := fmt.Sprint("r-", size)
		payload := payloadOf(id, size)
		e.mustPut("t", id, payload)
		path := rolloutURL("t", id) + "/payload"
		for _, rng := range []string{"bytes=0-99999999999999999999", "bytes=0-9223372036854775807", "bytes=-99999999999999999999"} {
			r := e.do("GET", path, nil, "Range", rng)
			want(t, r, http.StatusPartialContent, "")
			if !bytes.Equal(r.body, payload) || r.header.Get("Content-Range") != fmt.Sprintf("bytes 0-%d/%d", size-1, size) {
				t.Errorf("%s: %d bytes, Content-Range %q", rng, len(r.body), r.header.Get("Content-Range"))
			}
		}
		r := e.do("GET", path, nil, "Range", "bytes=10-99999999999999999999")
		if r.status != http.StatusPartialContent || !bytes.Equal(r.body, payload[10:]) {
			t.Errorf("from 10 to the end: %d, %d bytes", r.status, len(r.body))
		}
		for _, rng := range []string{"bytes=99999999999999999999-", "bytes=abc", "bytes=-", "bytes=5-2", "bytes=+1-2",
			fmt.Sprintf("bytes=%d-", size), "bytes=-0"} {
			for _, method := range []string{"GET", "HEAD"} {
				r := e.do(method, path, nil, "Range", rng)
				want(t, r, http.StatusRequestedRangeNotSatisfiable, map[string]string{"GET": codeRangeNotSatisfy}[method])
				if r.header.Get("Content-Range") != fmt.Sprintf("bytes */%d", size) {
					t.Errorf("%s %s: 416 with Content-Range %q", method, rng, r.header.Get("Content-Range"))
				}
			}
		}
	}
}

func TestListLimitTooLargeForAnInteger(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "a", []byte("x"))
	for _, limit := range []string{"99999999999999999999", "9223372036854775808", "5000"} {
		want(t, e.do("GET", "/v1/tables/t/rollouts?limit="+limit, nil), http.StatusOK, "")
	}
	for _, limit := range []string{"0", "-1", "x", "+5", "1.5", ""} {
		want(t, e.do("GET", "/v1/tables/t/rollouts?limit="+limit, nil), http.StatusBadRequest, codeInvalidArgument)
	}
}
