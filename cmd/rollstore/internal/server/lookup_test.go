package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/hook"
)

type lookupAnswer struct {
	Results []struct {
		ID     string `json:"id"`
		Found  bool   `json:"found"`
		Record *struct {
			ID          string `json:"id"`
			RolloutID   string `json:"rollout_id"`
			PayloadSize int64  `json:"payload_size"`
			PayloadRef  string `json:"payload_ref"`
		} `json:"record"`
	} `json:"results"`
}

func (e *testEnv) lookup(table, query string, body any) response {
	e.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	path := "/v1/tables/" + table + "/lookup"
	if query != "" {
		path += "?" + query
	}
	return e.do("POST", path, bytes.NewReader(b), "Content-Type", "application/json")
}

func lookupIDs(ids ...string) map[string][]string {
	if ids == nil {
		ids = []string{} // not null, which is refused
	}
	return map[string][]string{"ids": ids}
}

func TestLookupAnswersEveryIDInOrder(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "base/1", payloadOf("b1", 10))
	e.mustPut("t", "base/2", payloadOf("b2", 8<<10)) // external payload
	e.merge("t")
	e.mustPut("t", "wal/1", payloadOf("w1", 20))
	e.mustPut("t", "..", payloadOf("dots", 3))

	ask := []string{"wal/1", "absent", "base/2", "..", "base/1", "wal/1", "also absent"}
	r := e.lookup("t", "", lookupIDs(ask...))
	want(t, r, http.StatusOK, "")
	var a lookupAnswer
	r.decode(t, &a)
	if len(a.Results) != len(ask) {
		t.Fatalf("%d results for %d ids", len(a.Results), len(ask))
	}
	for i, id := range ask {
		res := a.Results[i]
		absent := strings.Contains(id, "absent")
		switch {
		case res.ID != id:
			t.Fatalf("results[%d] is %q, want %q: not in request order", i, res.ID, id)
		case absent && (res.Found || res.Record != nil):
			t.Fatalf("%q: found %+v", id, res.Record)
		case !absent && (!res.Found || res.Record == nil || res.Record.ID != id || res.Record.RolloutID != "r-"+id):
			t.Fatalf("%q: %+v", id, res)
		}
	}
	if a.Results[2].Record.PayloadSize != 8<<10 || a.Results[2].Record.PayloadRef == "" {
		t.Fatalf("external payload's record: %+v", a.Results[2].Record)
	}

	// Every id absent: still 200, never a 404 of the request.
	r = e.lookup("t", "", lookupIDs("x", "y"))
	want(t, r, http.StatusOK, "")
	r.decode(t, &a)
	if len(a.Results) != 2 || a.Results[0].Found || a.Results[1].Found {
		t.Fatalf("absent ids: %s", r.body)
	}
	// No ids: no results.
	r = e.lookup("t", "", lookupIDs())
	want(t, r, http.StatusOK, "")
	if strings.TrimSpace(string(r.body)) != `{"results":[]}` {
		t.Fatalf("no ids: %s", r.body)
	}
	// The table must exist.
	want(t, e.lookup("nope", "", lookupIDs("a")), http.StatusNotFound, codeTableNotFound)
}

func TestLookupPinnedVersion(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "a", []byte("a"))
	v1 := e.merge("t").Version
	e.mustPut("t", "b", []byte("b"))

	var a lookupAnswer
	r := e.lookup("t", fmt.Sprint("version=", v1), lookupIDs("a", "b"))
	want(t, r, http.StatusOK, "")
	r.decode(t, &a)
	if !a.Results[0].Found || a.Results[1].Found {
		t.Fatalf("pinned to v%d: %s", v1, r.body)
	}
	want(t, e.lookup("t", "version=99", lookupIDs("a")), http.StatusNotFound, codeVersionNotFound)
	want(t, e.lookup("t", "version=0", lookupIDs("a")), http.StatusBadRequest, codeInvalidArgument)
	// RetainVersions is 2: two more merges collect v1.
	e.merge("t")
	e.mustPut("t", "c", []byte("c"))
	e.merge("t")
	want(t, e.lookup("t", fmt.Sprint("version=", v1), lookupIDs("a", "zz")), http.StatusGone, codeVersionGone)
}

func TestLookupRefusals(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxLookupIDs = 5 })
	e.createTable("t")
	post := func(body string, hdr ...string) response {
		t.Helper()
		return e.do("POST", "/v1/tables/t/lookup", strings.NewReader(body), append([]string{"Content-Type", "application/json"}, hdr...)...)
	}
	want(t, post(`{"ids":["a","b","c","d","e"]}`), http.StatusOK, "")
	r := post(`{"ids":["a","b","c","d","e","f"]}`)
	want(t, r, http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	if !strings.Contains(r.errMessage(), "limit of 5") {
		t.Fatalf("message %q does not name the limit", r.errMessage())
	}
	// The body is bounded too: room for 5 ids of the longest kind.
	huge := `{"ids":["` + strings.Repeat(" ", int(e.srv.cfg.MaxLookupBytes)) + `"]}`
	want(t, post(huge), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	// Chunked, so the limit is met while reading.
	req, err := http.NewRequest("POST", e.ts.URL+"/v1/tables/t/lookup", struct{ *strings.Reader }{strings.NewReader(huge)})
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	want(t, e.send(req), http.StatusRequestEntityTooLarge, codePayloadTooLarge)

	for _, body := range []string{
		``, `[]`, `{}`, `{"ids":null}`, `{"ids":"a"}`, `{"ids":[1]}`, `{"ids":["a"],"version":1}`,
		`{"IDS":["a"]}`, `{"ids":["a"]}{"ids":["b"]}`, `{"ids":["a"],"ids":["b"]}`, `{"ids":[""]}`,
		`{"ids":["ok","` + strings.Repeat("x", 513) + `"]}`, `{"ids":["a\u0001"]}`,
	} {
		r := post(body)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
	}
	r = post(`{"ids":["ok",""]}`)
	if !strings.Contains(r.errMessage(), "ids[1]") {
		t.Fatalf("the refusal of an invalid id does not name it: %q", r.errMessage())
	}
	want(t, e.do("POST", "/v1/tables/t/lookup", strings.NewReader(`{"ids":["a"]}`), "Content-Type", "text/plain"),
		http.StatusUnsupportedMediaType, codeUnsupportedMedia)
	want(t, post(`{"ids":["a"]}`, "Content-Encoding", "gzip"), http.StatusUnsupportedMediaType, codeUnsupportedMedia)
	want(t, e.do("POST", "/v1/tables/t/lookup?ids=a", strings.NewReader(`{"ids":["a"]}`), "Content-Type", "application/json"),
		http.StatusBadRequest, codeInvalidArgument)
	r = e.do("GET", "/v1/tables/t/lookup", nil)
	want(t, r, http.StatusMethodNotAllowed, codeMethodNotAllowed)
	if r.header.Get("Allow") != "POST" {
		t.Fatalf("Allow: %q", r.header.Get("Allow"))
	}
}

// The server's side of the race the engine tests force: every lookup of
// a request is held after it located its row in a pending generation,
// the merge endpoint merges and reclaims that generation, and the
// request still answers every row.
func TestLookupRacingMergeFindsEveryRow(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.LookupParallelism = 3 })
	e.createTable("t")
	var ids []string
	for i := range 12 {
		id := fmt.Sprintf("row-%02d", i)
		ids = append(ids, id)
		e.mustPut("t", id, payloadOf(id, 10+i*700))
	}
	ask := append([]string{"missing"}, ids...)
	// Lookups are held until the merge is done: the request, issued
	// first, locates its rows in the generation the merge reclaims.
	gate := e.hooks.Pause("read:located", hook.Always())
	done := make(chan response, 1)
	go func() { done <- e.lookup("t", "", lookupIDs(ask...)) }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if m := e.merge("t"); len(m.Reclaimed) == 0 {
		t.Fatalf("the merge reclaimed nothing: %+v", m)
	}
	gate.Release()
	r := <-done
	want(t, r, http.StatusOK, "")
	var a lookupAnswer
	r.decode(t, &a)
	var found []string
	for _, res := range a.Results {
		if res.Found {
			found = append(found, res.ID)
		}
	}
	if !slices.Equal(found, ids) || a.Results[0].Found {
		t.Fatalf("found %v, want %v", found, ids)
	}
	if st := e.db.Stats(); st.ReadRetries.Load() == 0 || st.ReadMissingFile.Load() != 0 {
		t.Fatalf("retries %d, missing files %d: the race was not exercised as meant", st.ReadRetries.Load(), st.ReadMissingFile.Load())
	}
}

func TestListPrefixAndStartAfter(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	var all []string
	for _, p := range []string{"a/", "b/", "b/c/", "bb"} {
		for i := range 6 {
			id := fmt.Sprintf("%s%d", p, i)
			all = append(all, id)
			e.mustPut("t", id, []byte(id))
		}
		if p == "b/" {
			e.merge("t") // some in the base, some pending
		}
	}
	slices.Sort(all)
	list := func(q url.Values) []string {
		t.Helper()
		var ids []string
		for pages := 0; pages < 100; pages++ {
			r := e.do("GET", "/v1/tables/t/rollouts?"+q.Encode(), nil)
			want(t, r, http.StatusOK, "")
			var a listAnswer
			r.decode(t, &a)
			for _, rec := range a.Records {
				ids = append(ids, rec.ID)
			}
			if a.NextPageToken == "" {
				return ids
			}
			q.Set("page_token", a.NextPageToken)
		}
		t.Fatal("the listing does not end")
		return nil
	}
	for _, c := range []struct{ prefix, after string }{
		{"b/", ""}, {"b/", "b/3"}, {"b/", "b/c/"}, {"", "b/c/4"}, {"b", "b/5"}, {"zz", ""}, {"a/", "a/5"}, {"b/c/", "a"},
	} {
		var w []string
		for _, id := range all {
			if strings.HasPrefix(id, c.prefix) && id > c.after {
				w = append(w, id)
			}
		}
		got := list(url.Values{"prefix": {c.prefix}, "start_after": {c.after}, "limit": {"2"}})
		if !slices.Equal(got, w) {
			t.Fatalf("prefix %q start_after %q: %v, want %v", c.prefix, c.after, got, w)
		}
	}

	// A token is bound to its listing's prefix and start_after.
	r := e.do("GET", "/v1/tables/t/rollouts?prefix=b%2F&limit=1", nil)
	want(t, r, http.StatusOK, "")
	var a listAnswer
	r.decode(t, &a)
	tok := url.QueryEscape(a.NextPageToken)
	want(t, e.do("GET", "/v1/tables/t/rollouts?prefix=b%2F&limit=1&page_token="+tok, nil), http.StatusOK, "")
	for _, q := range []string{"prefix=a%2F", "prefix=b%2F&start_after=b%2F3", ""} {
		r := e.do("GET", "/v1/tables/t/rollouts?limit=1&page_token="+tok+"&"+q, nil)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
	}
	// A listing without them binds its tokens as before they existed, so
	// tokens issued then still continue their listings.
	r = e.do("GET", "/v1/tables/t/rollouts?limit=1&rollout_id=r-a%2F1", nil)
	r.decode(t, &a)
	h := sha256.New()
	for _, f := range []string{"t", "r-a/1", "", "", "0"} {
		fmt.Fprintf(h, "%d:%s", len(f), f)
	}
	old := pageTokenPrefix + base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:9]) + "."
	r = e.do("GET", "/v1/tables/t/rollouts?limit=1", nil)
	r.decode(t, &a)
	if !strings.HasPrefix(a.NextPageToken, pageTokenPrefix) {
		t.Fatalf("token %q", a.NextPageToken)
	}
	if got := listingBinding("t", engine.ListOptions{RolloutID: "r-a/1"}); pageTokenPrefix+got+"." != old {
		t.Fatalf("binding without prefix or start_after changed: %q, was %q", got, old)
	}
	want(t, e.do("GET", "/v1/tables/t/rollouts?prefix=a&prefix=b", nil), http.StatusBadRequest, codeInvalidArgument)
}
