package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/faulty"
	"github.com/rollstore/rollstore/objstore/memory"
)

func TestPayloadRanges(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, size := range []int{1000, 10 << 10} { // inline and external
		id := fmt.Sprint("p-", size)
		payload := payloadOf(id, size)
		e.mustPut("t", id, payload)
		path := rolloutURL("t", id) + "/payload"
		n := int64(size)
		for _, phase := range []string{"wal", "base"} {
			if phase == "base" {
				e.merge("t")
			}
			for _, c := range []struct {
				rng        string
				first, end int64 // served bytes [first, end)
			}{
				{"bytes=0-0", 0, 1},
				{"bytes=10-19", 10, 20},
				{"bytes=100-", 100, n},
				{"bytes=-30", n - 30, n},
				{fmt.Sprintf("bytes=-%d", n+5), 0, n},              // suffix longer than the payload: all of it
				{fmt.Sprintf("bytes=%d-%d", n-5, n+100), n - 5, n}, // clipped at the end
				{fmt.Sprintf("bytes=%d-", n-1), n - 1, n},
			} {
				r := e.do("GET", path, nil, "Range", c.rng)
				want(t, r, http.StatusPartialContent, "")
				wantCR := fmt.Sprintf("bytes %d-%d/%d", c.first, c.end-1, n)
				if r.header.Get("Content-Range") != wantCR || r.header.Get("Content-Length") != fmt.Sprint(c.end-c.first) {
					t.Fatalf("%s %s: Content-Range %q Content-Length %q, want %q", phase, c.rng, r.header.Get("Content-Range"), r.header.Get("Content-Length"), wantCR)
				}
				if !bytes.Equal(r.body, payload[c.first:c.end]) {
					t.Fatalf("%s %s: wrong bytes", phase, c.rng)
				}
			}
			for _, rng := range []string{
				fmt.Sprintf("bytes=%d-", n),          // starts at the end
				fmt.Sprintf("bytes=%d-%d", n+1, n+9), // past the end
				"bytes=-0",                           // empty suffix
				"bytes=5-2",                          // last before first
				"bytes=abc",                          // malformed
				"bytes=-",
			} {
				r := e.do("GET", path, nil, "Range", rng)
				want(t, r, http.StatusRequestedRangeNotSatisfiable, codeRangeNotSatisfy)
				if strings.Contains(rng, fmt.Sprint(n)) && r.header.Get("Content-Range") != fmt.Sprintf("bytes */%d", n) {
					t.Fatalf("%s %s: Content-Range %q", phase, rng, r.header.Get("Content-Range"))
				}
			}
			// Several ranges, or another unit: the whole payload.
			for _, rng := range []string{"bytes=0-1,5-6", "items=0-1"} {
				r := e.do("GET", path, nil, "Range", rng)
				want(t, r, http.StatusOK, "")
				if !bytes.Equal(r.body, payload) {
					t.Fatalf("%s: wrong bytes", rng)
				}
			}
		}
	}
}

func TestPayloadEmpty(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "empty", nil)
	r := e.do("GET", rolloutURL("t", "empty")+"/payload", nil)
	want(t, r, http.StatusOK, "")
	if len(r.body) != 0 || r.header.Get("Content-Length") != "0" {
		t.Fatalf("empty payload: %d bytes, Content-Length %q", len(r.body), r.header.Get("Content-Length"))
	}
	r = e.do("GET", rolloutURL("t", "empty")+"/payload", nil, "Range", "bytes=0-")
	want(t, r, http.StatusRequestedRangeNotSatisfiable, codeRangeNotSatisfy)
	if r.header.Get("Content-Range") != "bytes */0" {
		t.Fatalf("Content-Range %q", r.header.Get("Content-Range"))
	}
}

func TestPayloadConditionalAndHead(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	payload := payloadOf("cond", 5000)
	r := e.put("t", "c", `{"rollout_id":"r"}`, payload, "Content-Type", "image/png")
	want(t, r, http.StatusCreated, "")
	tag := r.header.Get("ETag")
	path := rolloutURL("t", "c") + "/payload"

	r = e.do("GET", path, nil, "If-None-Match", tag)
	want(t, r, http.StatusNotModified, "")
	if r.header.Get("ETag") != tag || len(r.body) != 0 {
		t.Fatalf("304 with ETag %q and %d bytes", r.header.Get("ETag"), len(r.body))
	}
	want(t, e.do("GET", path, nil, "If-None-Match", `"other", `+tag), http.StatusNotModified, "")
	want(t, e.do("GET", path, nil, "If-None-Match", "*"), http.StatusNotModified, "")
	want(t, e.do("GET", path, nil, "If-None-Match", `"other"`), http.StatusOK, "")

	// If-Range: the range holds only while the tag matches.
	want(t, e.do("GET", path, nil, "Range", "bytes=0-9", "If-Range", tag), http.StatusPartialContent, "")
	r = e.do("GET", path, nil, "Range", "bytes=0-9", "If-Range", `"stale"`)
	want(t, r, http.StatusOK, "")
	if len(r.body) != len(payload) {
		t.Fatalf("If-Range mismatch served %d bytes", len(r.body))
	}

	r = e.do("HEAD", path, nil)
	want(t, r, http.StatusOK, "")
	if r.header.Get("Content-Length") != "5000" || r.header.Get("Content-Type") != "image/png" || r.header.Get("ETag") != tag {
		t.Fatalf("HEAD headers %v", r.header)
	}
	r = e.do("HEAD", path, nil, "Range", "bytes=-10")
	want(t, r, http.StatusPartialContent, "")
	if r.header.Get("Content-Range") != "bytes 4990-4999/5000" {
		t.Fatalf("HEAD range %v", r.header)
	}
	want(t, e.do("HEAD", rolloutURL("t", "nope")+"/payload", nil), http.StatusNotFound, "")
}

func TestPinnedReads(t *testing.T) {
	e := newEnv(t) // retains 2 versions, no age-based retention
	e.createTable("t")
	e.mustPut("t", "a", []byte("aaa"))
	if v := e.merge("t").Version; v != 1 {
		t.Fatalf("first merge committed version %d", v)
	}
	e.mustPut("t", "b", []byte("bbb"))
	e.merge("t") // v2

	want(t, e.do("GET", rolloutURL("t", "a")+"?version=1", nil), http.StatusOK, "")
	// Pinned reads see exactly their version: b came after v1.
	want(t, e.do("GET", rolloutURL("t", "b")+"?version=1", nil), http.StatusNotFound, codeNotFound)
	r := e.do("GET", rolloutURL("t", "b")+"/payload?version=2", nil)
	want(t, r, http.StatusOK, "")
	if string(r.body) != "bbb" {
		t.Fatalf("pinned payload %q", r.body)
	}
	want(t, e.do("GET", rolloutURL("t", "a")+"?version=9", nil), http.StatusNotFound, codeVersionNotFound)

	e.mustPut("t", "c", []byte("ccc"))
	e.merge("t") // v3; v1 falls out of retention
	want(t, e.do("GET", rolloutURL("t", "a")+"?version=1", nil), http.StatusGone, codeVersionGone)
	want(t, e.do("GET", rolloutURL("t", "a")+"/payload?version=1", nil), http.StatusGone, codeVersionGone)
	want(t, e.do("GET", rolloutURL("t", "a")+"/payload?version=3", nil), http.StatusOK, "")

	for _, v := range []string{"0", "-1", "x", "1.5", "", "+2", "99999999999999999999999"} {
		want(t, e.do("GET", rolloutURL("t", "a")+"?version="+v, nil), http.StatusBadRequest, codeInvalidArgument)
		want(t, e.do("GET", rolloutURL("t", "a")+"/payload?version="+v, nil), http.StatusBadRequest, codeInvalidArgument)
	}
}

func TestMissingFileIsA500(t *testing.T) {
	store := memory.New()
	e := newEnv(t, func(o *envOptions) { o.store = store })
	e.createTable("t")
	e.mustPut("t", "a", []byte("inline payload"))
	e.merge("t")
	// Lose the base data file for good (not a reclaim race: it stays lost).
	var lost int
	for _, k := range store.Keys() {
		if strings.Contains(k, "/base/data/") && strings.HasSuffix(k, ".arrow") {
			if err := store.Delete(context.Background(), k); err != nil {
				t.Fatal(err)
			}
			lost++
		}
	}
	if lost == 0 {
		t.Fatal("no data file to lose")
	}
	want(t, e.do("GET", rolloutURL("t", "a")+"/payload", nil), http.StatusInternalServerError, codeMissingFile)
}

func TestThrottledStoreIs503(t *testing.T) {
	fb := faulty.New(memory.New())
	t.Cleanup(fb.Reset)
	e := newEnv(t, func(o *envOptions) { o.store = fb })
	e.createTable("t")
	// Every segment upload is throttled (the store answered: nothing was
	// written), so the append is refused, not of unknown outcome.
	fb.Fail(faulty.OpPut, faulty.KeyFunc(func(k string) bool {
		return strings.Contains(k, "/wal/") && strings.HasSuffix(k, ".arrow")
	}), objstore.ErrThrottled, faulty.Always())
	r := e.put("t", "a", `{"rollout_id":"r"}`, []byte("x"))
	want(t, r, http.StatusServiceUnavailable, codeThrottled)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
}
