package server

// What a writer sends is stored only in a form the server can vouch for,
// and what a reader's browser receives cannot act in the API's origin:
// media types are RFC 9110 syntax on every write route, bodies in a
// content coding are refused (never stored compressed), an Arrow batch
// refuses the columns an NDJSON batch refuses, and payloads are served
// under a sandboxing policy, active types as attachments.

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"net/http"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

func TestMediaTypeSyntaxOnEveryWriteRoute(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	bad := []string{"html", "text/", "/plain", "text/plain extra", "text/plain; charset", "text/plain; charset=",
		"text/plain; a=\"open", "text/plain; a=\"caf\xc3\xa9\"", "text/pl\xc3\xa1in", "text /plain", "text/plain;;x"}
	for i, ct := range bad {
		id := "bad-" + string(rune('a'+i))
		r := e.put("t", id, `{"rollout_id":"r"}`, []byte("p"), "Content-Type", ct)
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		if !strings.Contains(r.errMessage(), "media type") {
			t.Errorf("PUT %q: message %q does not say what is wrong", ct, r.errMessage())
		}
		line := ndjsonLine(id, "r", []byte("p"), `,"content_type":`+jsonString(ct))
		want(t, e.postBatch("t", mediaNDJSON, []byte(line)), http.StatusBadRequest, codeInvalidArgument)
		want(t, e.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
	}
	// An Arrow row with a bad content type is refused by its index.
	fields := append(append([]arrow.Field{}, minimalFields...), arrow.Field{Name: "content_type", Type: arrow.BinaryTypes.String})
	r := e.postBatch("t", mediaArrow, arrowStream(t, fields, func(b *array.RecordBuilder) {
		minimalRows([]string{"ar-0", "ar-1"}, []string{"r", "r"})(b)
		b.Field(4).(*array.StringBuilder).AppendValues([]string{"text/plain", "text/"}, nil)
	}))
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
	if r.errRow() != 1 {
		t.Errorf("arrow batch error names row %d, want 1: %s", r.errRow(), r.body)
	}
	want(t, e.do("GET", rolloutURL("t", "ar-0"), nil), http.StatusNotFound, codeNotFound)

	good := []string{"", "text/plain", "Text/Plain; Charset=UTF-8", `application/x.y+z; a="q \" s"; b=c`, "application/octet-stream ;x=1"}
	for i, ct := range good {
		id := "good-" + string(rune('a'+i))
		r := e.put("t", id, `{"rollout_id":"r"}`, []byte("p"), "Content-Type", ct)
		want(t, r, http.StatusCreated, "")
	}
}

func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range []byte(s) {
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func TestPayloadsServedSandboxedAndActiveTypesAsAttachments(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	body := []byte("<script>alert(document.cookie)</script>")
	cases := []struct {
		ct         string
		attachment bool
	}{
		{"text/html", true},
		{"text/html; charset=utf-8", true},
		{"image/svg+xml", true},
		{"application/xhtml+xml", true},
		{"text/xml", true},
		{"application/javascript", true},
		{"text/javascript", true},
		{"text/plain", false},
		{"application/json", false},
		{"", false},
	}
	for i, c := range cases {
		id := "p-" + string(rune('a'+i))
		want(t, e.put("t", id, `{"rollout_id":"r"}`, body, "Content-Type", c.ct), http.StatusCreated, "")
		for _, rng := range []string{"", "bytes=0-3"} {
			var r response
			if rng == "" {
				r = e.do("GET", rolloutURL("t", id)+"/payload", nil)
				want(t, r, http.StatusOK, "")
			} else {
				r = e.do("GET", rolloutURL("t", id)+"/payload", nil, "Range", rng)
				want(t, r, http.StatusPartialContent, "")
			}
			h := r.header
			if h.Get("X-Content-Type-Options") != "nosniff" {
				t.Errorf("%q %s: no nosniff", c.ct, rng)
			}
			if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") || !strings.Contains(csp, "default-src 'none'") {
				t.Errorf("%q %s: Content-Security-Policy %q", c.ct, rng, csp)
			}
			if got := h.Get("Content-Disposition") == "attachment"; got != c.attachment {
				t.Errorf("%q %s: Content-Disposition %q, attachment want %v", c.ct, rng, h.Get("Content-Disposition"), c.attachment)
			}
		}
	}
	// An error answer carries none of the payload's headers.
	r := e.do("GET", rolloutURL("t", "p-a")+"/payload", nil, "Range", "bytes=999-")
	want(t, r, http.StatusRequestedRangeNotSatisfiable, "")
	if r.header.Get("Content-Disposition") != "" {
		t.Errorf("error answer has Content-Disposition %q", r.header.Get("Content-Disposition"))
	}
}

func TestContentEncodedBodiesRefused(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte("payload"))
	_ = zw.Close()
	for _, enc := range []string{"gzip", "br", "identity, gzip", "x-custom"} {
		r := e.put("t", "z", `{"rollout_id":"r"}`, gz.Bytes(), "Content-Encoding", enc)
		want(t, r, http.StatusUnsupportedMediaType, codeUnsupportedMedia)
		if r.header.Get("Accept-Encoding") != "identity" {
			t.Errorf("%s: Accept-Encoding %q", enc, r.header.Get("Accept-Encoding"))
		}
		r = e.do("POST", "/v1/tables/t/rollouts", bytes.NewReader(gz.Bytes()), "Content-Type", mediaNDJSON, "Content-Encoding", enc)
		want(t, r, http.StatusUnsupportedMediaType, codeUnsupportedMedia)
	}
	want(t, e.do("GET", rolloutURL("t", "z"), nil), http.StatusNotFound, codeNotFound)
	// identity is no coding at all.
	want(t, e.put("t", "z", `{"rollout_id":"r"}`, []byte("payload"), "Content-Encoding", "identity"), http.StatusCreated, "")
	p := e.do("GET", rolloutURL("t", "z")+"/payload", nil)
	if !bytes.Equal(p.body, []byte("payload")) {
		t.Fatalf("payload %q", p.body)
	}
}

func TestArrowBatchRefusesWhatNDJSONRefuses(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	str := arrow.BinaryTypes.String
	i64 := arrow.PrimitiveTypes.Int64
	bin := arrow.BinaryTypes.Binary
	sha := &arrow.FixedSizeBinaryType{ByteWidth: 32}
	payload := []byte("the payload")
	good := sha256.Sum256(payload)
	cases := map[string]struct {
		fields []arrow.Field
		column string
		size   int64
		sum    []byte
		ref    string
		body   []byte
	}{
		"two id columns":    {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "id", Type: str}}, column: `"id"`},
		"misspelt":          {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "Role", Type: str}}, column: `"Role"`},
		"unknown":           {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "score", Type: str}}, column: `"score"`},
		"wrong size":        {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "payload", Type: bin}, {Name: "payload_size", Type: i64}}, column: `"payload_size"`, size: 3, body: payload},
		"wrong sha256":      {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "payload", Type: bin}, {Name: "payload_sha256", Type: sha}}, column: `"payload_sha256"`, sum: make([]byte, 32), body: payload},
		"ref without bytes": {fields: []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "payload_ref", Type: str}, {Name: "payload_size", Type: i64}}, column: `"payload_ref"`, ref: "other/table/payload", size: 5 << 20},
	}
	build := func(fields []arrow.Field, size int64, sum []byte, ref string, body []byte) func(b *array.RecordBuilder) {
		return func(b *array.RecordBuilder) {
			for i, f := range fields {
				switch f.Name {
				case "payload":
					b.Field(i).(*array.BinaryBuilder).Append(body)
				case "payload_size":
					b.Field(i).(*array.Int64Builder).Append(size)
				case "payload_sha256":
					b.Field(i).(*array.FixedSizeBinaryBuilder).Append(sum)
				case "payload_ref":
					b.Field(i).(*array.StringBuilder).Append(ref)
				default:
					b.Field(i).(*array.StringBuilder).Append("v-" + f.Name + "-" + string(rune('0'+i)))
				}
			}
		}
	}
	for name, c := range cases {
		r := e.postBatch("t", mediaArrow, arrowStream(t, c.fields, build(c.fields, c.size, c.sum, c.ref, c.body)))
		want(t, r, http.StatusBadRequest, codeInvalidArgument)
		if !strings.Contains(r.errMessage(), c.column) {
			t.Errorf("%s: message %q does not name column %s", name, r.errMessage(), c.column)
		}
	}
	var n struct {
		Records []any `json:"records"`
	}
	r := e.do("GET", "/v1/tables/t/rollouts", nil)
	want(t, r, http.StatusOK, "")
	r.decode(t, &n)
	if len(n.Records) != 0 {
		t.Fatalf("%d rows stored by refused batches", len(n.Records))
	}
	// The columns a scan carries are accepted when they describe the
	// payload the row carries: a copy is verified.
	fields := []arrow.Field{{Name: "id", Type: str}, {Name: "rollout_id", Type: str}, {Name: "payload", Type: bin},
		{Name: "payload_size", Type: i64}, {Name: "payload_sha256", Type: sha}, {Name: "payload_ref", Type: str}}
	r = e.postBatch("t", mediaArrow, arrowStream(t, fields, build(fields, int64(len(payload)), good[:], "src/ref", payload)))
	want(t, r, http.StatusCreated, "")
}
