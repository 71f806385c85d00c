package server

import (
	"bytes"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/engine/rowfile"
)

type listAnswer struct {
	Records []struct {
		ID            string `json:"id"`
		RolloutID     string `json:"rollout_id"`
		PayloadSHA256 string `json:"payload_sha256"`
	} `json:"records"`
	NextPageToken string `json:"next_page_token"`
}

func TestListRollouts(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for i := range 25 {
		rec := fmt.Sprintf(`{"rollout_id":"r%d","problem_id":"p%d","policy_version":"v%d"}`, i%2, i%3, i%5)
		want(t, e.put("t", fmt.Sprintf("id-%02d", i), rec, []byte("x")), http.StatusCreated, "")
		if i == 12 {
			e.merge("t") // half in the base, half in the WAL
		}
	}
	list := func(q string) listAnswer {
		t.Helper()
		r := e.do("GET", "/v1/tables/t/rollouts?"+q, nil)
		want(t, r, http.StatusOK, "")
		var a listAnswer
		r.decode(t, &a)
		return a
	}
	a := list("")
	if len(a.Records) != 25 || a.NextPageToken != "" || a.Records[0].ID != "id-00" || a.Records[24].ID != "id-24" || a.Records[3].PayloadSHA256 == "" {
		t.Fatalf("full list: %d records, token %q", len(a.Records), a.NextPageToken)
	}
	// Pages in id order, each continuing where the last stopped.
	var ids []string
	token := ""
	for pages := 0; ; pages++ {
		a := list("limit=7&rollout_id=r1&page_token=" + url.QueryEscape(token))
		for _, r := range a.Records {
			if r.RolloutID != "r1" {
				t.Fatalf("filter leaked %+v", r)
			}
			ids = append(ids, r.ID)
		}
		if token = a.NextPageToken; token == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
	}
	if len(ids) != 12 || ids[0] != "id-01" || ids[11] != "id-23" {
		t.Fatalf("paged ids %v", ids)
	}
	if a := list("problem_id=p0&policy_version=v0"); len(a.Records) != 2 { // i = 0, 15
		t.Fatalf("combined filter: %d records", len(a.Records))
	}
	if a := list("limit=5000"); len(a.Records) != 25 { // lowered to the maximum, not refused
		t.Fatalf("large limit: %d records", len(a.Records))
	}
	if a := list("version=1"); len(a.Records) != 13 {
		t.Fatalf("pinned list: %d records, want the 13 merged", len(a.Records))
	}
	for _, q := range []string{"limit=0", "limit=-3", "limit=ten", "page_token=%25%25garbage", "version=0"} {
		want(t, e.do("GET", "/v1/tables/t/rollouts?"+q, nil), http.StatusBadRequest, codeInvalidArgument)
	}
	want(t, e.do("GET", "/v1/tables/nope/rollouts", nil), http.StatusNotFound, codeTableNotFound)
}

func readScan(t *testing.T, body []byte) []rowfile.Record {
	t.Helper()
	rd, err := ipc.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("scan output is not an Arrow stream: %v", err)
	}
	defer rd.Release()
	if !rd.Schema().Equal(rowfile.Schema) {
		t.Fatalf("scan schema %v", rd.Schema())
	}
	var out []rowfile.Record
	for rd.Next() {
		rec := rd.RecordBatch()
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.String)
		payloads := rec.Column(rec.Schema().FieldIndices("payload")[0]).(*array.Binary)
		for i := range int(rec.NumRows()) {
			r := rowfile.Record{ID: ids.Value(i)}
			if payloads.IsValid(i) {
				r.Payload = bytes.Clone(payloads.Value(i))
			}
			out = append(out, r)
		}
	}
	if err := rd.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestScan(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for i := range 6 {
		id := fmt.Sprint("s-", i)
		e.mustPut("t", id, payloadOf(id, i*2000)) // inline and external
		if i == 2 {
			e.merge("t")
		}
	}
	r := e.do("GET", "/v1/tables/t/scan", nil)
	want(t, r, http.StatusOK, "")
	if ct := r.header.Get("Content-Type"); ct != mediaArrow {
		t.Fatalf("Content-Type %q", ct)
	}
	rows := readScan(t, r.body)
	if len(rows) != 6 || rows[0].ID != "s-0" || rows[5].ID != "s-5" {
		t.Fatalf("scan rows %v", rows)
	}

	r = e.do("GET", "/v1/tables/t/scan?payloads=true", nil)
	want(t, r, http.StatusOK, "")
	for i, row := range readScan(t, r.body) {
		if id := fmt.Sprint("s-", i); !bytes.Equal(row.Payload, payloadOf(id, i*2000)) {
			t.Fatalf("scan payload of %s: %d bytes", id, len(row.Payload))
		}
	}
	if rows := readScan(t, e.do("GET", "/v1/tables/t/scan?version=1", nil).body); len(rows) != 3 {
		t.Fatalf("pinned scan: %d rows", len(rows))
	}
	want(t, e.do("GET", "/v1/tables/t/scan?version=7", nil), http.StatusNotFound, codeVersionNotFound)
	want(t, e.do("GET", "/v1/tables/t/scan?payloads=maybe", nil), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", "/v1/tables/t/scan?version=x", nil), http.StatusBadRequest, codeInvalidArgument)
	want(t, e.do("GET", "/v1/tables/nope/scan", nil), http.StatusNotFound, codeTableNotFound)
}

func TestMergeAndVersions(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 1) // one partition: one generation to merge
	r := e.do("GET", "/v1/tables/t/versions", nil)
	want(t, r, http.StatusOK, "")
	var vs struct{ Versions []engine.VersionInfo }
	r.decode(t, &vs)
	if vs.Versions == nil || len(vs.Versions) != 0 {
		t.Fatalf("versions of a new table: %s", r.body)
	}
	// Nothing to merge: an empty pass, not an error.
	if res := e.merge("t"); res.Version != 0 || res.Merged == nil {
		t.Fatalf("empty merge %+v", res)
	}
	e.mustPut("t", "a", []byte("a"))
	e.mustPut("t", "b", []byte("b"))
	// Merge seals what was written before it, so it is merged now.
	res := e.merge("t")
	if res.Version != 1 || len(res.Merged) != 1 || res.Rows != 2 {
		t.Fatalf("merge %+v", res)
	}
	e.mustPut("t", "c", []byte("c"))
	res = e.merge("t")
	if res.Version != 2 || len(res.Reclaimed) == 0 {
		t.Fatalf("second merge %+v (zero reclaim grace reclaims at once)", res)
	}
	e.do("GET", "/v1/tables/t/versions", nil).decode(t, &vs)
	if len(vs.Versions) != 2 || vs.Versions[1].Version != 2 || vs.Versions[1].Rows != 3 {
		t.Fatalf("versions %+v", vs.Versions)
	}
	// Rows read the same after merges.
	for _, id := range []string{"a", "b", "c"} {
		if p := e.do("GET", rolloutURL("t", id)+"/payload", nil); string(p.body) != id {
			t.Fatalf("%s read back %q", id, p.body)
		}
	}
	want(t, e.do("POST", "/v1/tables/nope/merge", nil), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("GET", "/v1/tables/nope/versions", nil), http.StatusNotFound, codeTableNotFound)
}

// TestQueryStringsSayOneThing: a query string is refused (400) when it
// does not say exactly one thing: a malformed escape, a parameter given
// twice, a parameter the route does not take; and a page token continues
// only the listing that issued it.
func TestQueryStringsSayOneThing(t *testing.T) {
	e := newEnv(t)
	e.createTable("a")
	e.createTable("b")
	for i := range 6 {
		for _, tb := range []string{"a", "b"} {
			rec := fmt.Sprintf(`{"rollout_id":"r%d","problem_id":"p%d"}`, i%2, i%3)
			want(t, e.put(tb, fmt.Sprintf("id-%d", i), rec, []byte("x")), http.StatusCreated, "")
		}
	}
	for _, q := range []string{
		"page_token=%%%", "limit=1&limit=5", "rollout_id=r0&rollout_id=r1", "rolout_id=r0", "limit=%zz",
		"version=1&version=1",
	} {
		r := e.do("GET", "/v1/tables/a/rollouts?"+q, nil)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
	}
	for _, path := range []string{rolloutURL("a", "id-1") + "?limit=1", rolloutURL("a", "id-1") + "/payload?x=1", "/v1/tables/a/scan?version=1&version=2", "/v1/tables/a?x=1"} {
		want(t, e.do("GET", path, nil), http.StatusBadRequest, codeInvalidArgument)
	}
	want(t, e.do("GET", "/v1/tables/a/rollouts?limit=2&rollout_id=r0", nil), http.StatusOK, "")

	var page struct {
		Records []struct {
			ID string `json:"id"`
		} `json:"records"`
		NextPageToken string `json:"next_page_token"`
	}
	r := e.do("GET", "/v1/tables/a/rollouts?limit=1&rollout_id=r0", nil)
	want(t, r, http.StatusOK, "")
	r.decode(t, &page)
	if len(page.Records) != 1 || page.NextPageToken == "" {
		t.Fatalf("first page %s", r.body)
	}
	tok := url.QueryEscape(page.NextPageToken)
	for _, other := range []string{
		"/v1/tables/b/rollouts?limit=1&rollout_id=r0&page_token=", // another table
		"/v1/tables/a/rollouts?limit=1&rollout_id=r1&page_token=", // other filters
		"/v1/tables/a/rollouts?limit=1&page_token=",               // no filter
		"/v1/tables/a/rollouts?limit=1&rollout_id=r0&problem_id=p0&page_token=",
	} {
		r := e.do("GET", other+tok, nil)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		if !strings.Contains(r.errMessage(), "another listing") {
			t.Errorf("%s: message %q", other, r.errMessage())
		}
	}
	// The same listing continues, whatever the page size.
	r = e.do("GET", "/v1/tables/a/rollouts?limit=10&rollout_id=r0&page_token="+tok, nil)
	want(t, r, http.StatusOK, "")
	var rest struct {
		Records []struct {
			ID string `json:"id"`
		} `json:"records"`
	}
	r.decode(t, &rest)
	if len(rest.Records) != 2 || rest.Records[0].ID == page.Records[0].ID {
		t.Fatalf("continued listing %s after %s", r.body, page.Records[0].ID)
	}
	// A token that is not one of ours says so in the API's words.
	r = e.do("GET", "/v1/tables/a/rollouts?page_token="+url.QueryEscape("aWQtMQ"), nil)
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
	if !strings.Contains(r.errMessage(), "page_token is malformed") {
		t.Errorf("malformed token: message %q", r.errMessage())
	}
}
