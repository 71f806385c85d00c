package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/rollstore/rollstore/engine/rowfile"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

// wantNothingStored fails unless none of ids can be read.
func (e *testEnv) wantNothingStored(table string, ids ...string) {
	e.t.Helper()
	for _, id := range ids {
		want(e.t, e.do("GET", rolloutURL(table, id), nil), http.StatusNotFound, codeNotFound)
	}
}

// TestCreatedAtOutOfRange: a created_at no JSON answer or HTTP date can
// show is refused on every path, naming the field and the line or row,
// and nothing is stored. The edges of the range are accepted and read back.
func TestCreatedAtOutOfRange(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, at := range []string{"9999-12-31T23:59:59-14:00", "0000-06-01T00:00:00Z", "0001-01-01T00:30:00+01:00"} {
		r := e.put("t", "p", `{"rollout_id":"r","created_at":"`+at+`"}`, payloadOf("p", 6000))
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		if !strings.Contains(r.errMessage(), "created_at") || r.errRequestID() == "" {
			t.Fatalf("PUT created_at %s: %s", at, r.body)
		}
	}
	e.wantNothingStored("t", "p")

	body := ndjsonLine("n-1", "r", []byte("one"), "") + ndjsonLine("n-2", "r", []byte("two"), `,"created_at":"9999-12-31T23:59:59-14:00"`)
	r := e.postBatch("t", mediaNDJSON, []byte(body))
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
	if r.errLine() != 2 || !strings.Contains(r.errMessage(), "created_at") {
		t.Fatalf("NDJSON: %s, want line 2 naming created_at", r.body)
	}
	e.wantNothingStored("t", "n-1", "n-2")

	fields := []arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "rollout_id", Type: arrow.BinaryTypes.String},
		{Name: "created_at", Type: &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}, Nullable: true},
	}
	year10000 := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, micros := range []int64{9e18, -9e18, year10000} {
		stream := arrowStream(t, fields, func(b *array.RecordBuilder) {
			for i, m := range []int64{0, micros} {
				b.Field(0).(*array.StringBuilder).Append(fmt.Sprint("a-", i))
				b.Field(1).(*array.StringBuilder).Append("r")
				b.Field(2).(*array.TimestampBuilder).Append(arrow.Timestamp(m))
			}
		})
		r := e.postBatch("t", mediaArrow, stream)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		if r.errRow() != 1 || !strings.Contains(r.errMessage(), "created_at") {
			t.Fatalf("Arrow micros %d: %s, want row 1 naming created_at", micros, r.body)
		}
	}
	e.wantNothingStored("t", "a-0", "a-1")

	// The last representable instant is fine, and reads back whole.
	r = e.put("t", "edge", `{"rollout_id":"r","created_at":"9999-12-31T23:59:59.999999Z"}`, []byte("x"))
	want(t, r, http.StatusCreated, "")
	want(t, e.do("GET", rolloutURL("t", "edge"), nil), http.StatusOK, "")
	p := e.do("GET", rolloutURL("t", "edge")+"/payload", nil)
	want(t, p, http.StatusOK, "")
	if p.header.Get("Last-Modified") != "Fri, 31 Dec 9999 23:59:59 GMT" {
		t.Fatalf("Last-Modified %q", p.header.Get("Last-Modified"))
	}
	want(t, e.do("GET", "/v1/tables/t/rollouts", nil), http.StatusOK, "")
}

// TestStoredOutOfRangeCreatedAtStillReads: a row stored before the range
// was checked (here: a WAL segment rewritten with a created_at in year
// 287168) is still served by every read: metadata, payload, listing.
func TestStoredOutOfRangeCreatedAtStillReads(t *testing.T) {
	store := memory.New()
	w := newEnv(t, func(o *envOptions) { o.store = store })
	w.createTable("t")
	payload := []byte("payload of a row with a strange date")
	want(t, w.put("t", "old", `{"rollout_id":"r","created_at":"2020-01-01T00:00:00Z"}`, payload), http.StatusCreated, "")

	ctx := context.Background()
	var seg string
	for _, k := range store.Keys() {
		if strings.Contains(k, "/wal/") && strings.HasSuffix(k, ".arrow") {
			seg = k
		}
	}
	data, _, err := objstore.ReadAll(ctx, store, seg, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := rowfile.Decode(data, true)
	if err != nil || len(rows) != 1 {
		t.Fatalf("decoding %s: %d rows, %v", seg, len(rows), err)
	}
	rows[0].CreatedAt = time.UnixMicro(9e18).UTC()
	bad, _, err := rowfile.Encode(rows, rowfile.Options{EmbedLayout: true}) // as the engine writes segments
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, seg, bytes.NewReader(bad), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	// The shard's head carries a copy of the segment's layout (the date
	// included): without it, a reader takes the layout from the rewritten
	// segment, as it would from one written with that date.
	headKey := path.Join(path.Dir(path.Dir(seg)), "_head.json") // <shard>/<generation>/<segment>.arrow
	body, attrs, err := objstore.ReadAll(ctx, store, headKey, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if attrs.Metadata["layout"] == "" {
		t.Fatalf("head %s carries no layout: %v", headKey, attrs.Metadata)
	}
	delete(attrs.Metadata, "layout")
	if _, err := store.Put(ctx, headKey, bytes.NewReader(body), objstore.PutOptions{Metadata: attrs.Metadata, ContentType: attrs.ContentType}); err != nil {
		t.Fatal(err)
	}

	// A fresh reader, with nothing cached.
	e := newEnv(t, func(o *envOptions) { o.store = store; o.engine.Shard = "" })
	m := e.do("GET", rolloutURL("t", "old"), nil)
	want(t, m, http.StatusOK, "")
	if !strings.Contains(string(m.body), `"created_at":"`+time.UnixMicro(9e18).UTC().Format(time.RFC3339Nano)+`"`) {
		t.Fatalf("metadata %s: the rewritten created_at is not what was read", m.body)
	}
	p := e.do("GET", rolloutURL("t", "old")+"/payload", nil)
	want(t, p, http.StatusOK, "")
	if !bytes.Equal(p.body, payload) || p.header.Get("Last-Modified") != "" {
		t.Fatalf("payload %q, Last-Modified %q", p.body, p.header.Get("Last-Modified"))
	}
	want(t, e.do("GET", rolloutURL("t", "old")+"/payload", nil, "If-Modified-Since", "Mon, 01 Jan 2024 00:00:00 GMT"), http.StatusOK, "")
	l := e.do("GET", "/v1/tables/t/rollouts", nil)
	want(t, l, http.StatusOK, "")
	if !strings.Contains(string(l.body), `"id":"old"`) {
		t.Fatalf("list %s", l.body)
	}
	// The Go client reads it too, to the stored time.
	if rec, err := e.client.Get(ctx, "t", "old"); err != nil || !rec.CreatedAt.Equal(time.UnixMicro(9e18)) {
		t.Errorf("client.Get: created_at %v, %v", rec.CreatedAt, err)
	}
}

// TestRecordJSONIsStrict: what encoding/json would silently change is
// refused with 400, in the record header and in NDJSON lines.
func TestRecordJSONIsStrict(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	for _, c := range []struct{ name, record, in string }{
		{"duplicate key", `{"rollout_id":"r","rollout_id":"s"}`, "duplicate key"},
		{"duplicate key in metadata", `{"rollout_id":"r","metadata":{"a":1,"a":2}}`, "duplicate key"},
		{"wrong case", `{"rollout_id":"r","Rollout_ID":"s"}`, "Rollout_ID"},
		{"wrong case alone", `{"Rollout_ID":"r"}`, "Rollout_ID"},
		{"lone high surrogate", `{"rollout_id":"r\ud800"}`, "surrogate"},
		{"lone low surrogate in metadata", `{"rollout_id":"r","metadata":{"k":"\udc01"}}`, "surrogate"},
		{"invalid UTF-8", "{\"rollout_id\":\"r\xff\"}", "UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.put("t", "x", c.record, []byte("payload"))
			want(t, r, http.StatusBadRequest, codeInvalidArgument)
			if !strings.Contains(r.errMessage(), c.in) {
				t.Fatalf("PUT: %s, want a message containing %q", r.body, c.in)
			}
			line := strings.TrimPrefix(c.record, "{")
			body := ndjsonLine("ok", "r", nil, "") + `{"id":"y","payload":"",` + line + "\n"
			r = e.postBatch("t", mediaNDJSON, []byte(body))
			want(t, r, http.StatusBadRequest, codeInvalidArgument)
			if r.errLine() != 2 || !strings.Contains(r.errMessage(), c.in) {
				t.Fatalf("NDJSON: %s, want line 2 containing %q", r.body, c.in)
			}
			e.wantNothingStored("t", "x", "y", "ok")
		})
	}
	// Arrow metadata is JSON too.
	fields := []arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "rollout_id", Type: arrow.BinaryTypes.String},
		{Name: "metadata", Type: arrow.BinaryTypes.String, Nullable: true}}
	stream := arrowStream(t, fields, func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).Append("z")
		b.Field(1).(*array.StringBuilder).Append("r")
		b.Field(2).(*array.StringBuilder).Append(`{"a":1,"a":2}`)
	})
	r := e.postBatch("t", mediaArrow, stream)
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
	if r.errRow() != 0 || !strings.Contains(r.errMessage(), "duplicate key") {
		t.Fatalf("Arrow: %s", r.body)
	}
	e.wantNothingStored("t", "z")
	// A proper surrogate pair is a character like any other.
	want(t, e.put("t", "pair", `{"rollout_id":"r","metadata":{"emoji":"\ud83d\ude00"}}`, []byte("p")), http.StatusCreated, "")
}

// TestIdenticalRetryIsExact: a retry is identical only if its content is
// exactly the same value; numbers are compared by exact decimal value, not
// as float64 (9007199254740993.0 is 9007199254740993, 9007199254740992 is
// not).
func TestIdenticalRetryIsExact(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	p := []byte("payload")
	want(t, e.put("t", "a", `{"rollout_id":"r","metadata":{"n":9007199254740993,"x":[1,2]}}`, p), http.StatusCreated, "")
	want(t, e.put("t", "a", `{"metadata":{ "x":[1, 2], "n":9007199254740993 },"rollout_id":"r"}`, p), http.StatusOK, "")
	want(t, e.put("t", "a", `{"rollout_id":"r","metadata":{"n":9007199254740992,"x":[1,2]}}`, p), http.StatusConflict, codeConflict)
	want(t, e.put("t", "a", `{"rollout_id":"r","metadata":{"n":9007199254740993.0,"x":[1,2]}}`, p), http.StatusOK, "")
	want(t, e.put("t", "a", `{"rollout_id":"r","metadata":{"n":9007199254740992.0,"x":[1,2]}}`, p), http.StatusConflict, codeConflict)
	e.merge("t")
	want(t, e.put("t", "a", `{"rollout_id":"r","metadata":{"n":9007199254740992,"x":[1,2]}}`, p), http.StatusConflict, codeConflict)
	r := e.postBatch("t", mediaNDJSON, []byte(ndjsonLine("a", "r", p, `,"metadata":{"n":9007199254740992,"x":[1,2]}`)))
	want(t, r, http.StatusConflict, codeConflict)
	want(t, e.postBatch("t", mediaNDJSON, []byte(ndjsonLine("a", "r", p, `,"metadata":{"n":9007199254740993,"x":[1,2]}`))), http.StatusOK, "")
}
