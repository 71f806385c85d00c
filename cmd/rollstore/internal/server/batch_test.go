package server

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

func ndjsonLine(id, rollout string, payload []byte, extra string) string {
	return fmt.Sprintf(`{"id":%q,"rollout_id":%q,"payload":%q%s}`, id, rollout, base64.StdEncoding.EncodeToString(payload), extra) + "\n"
}

func (e *testEnv) postBatch(table, contentType string, body []byte) response {
	e.t.Helper()
	return e.do("POST", "/v1/tables/"+table+"/rollouts", bytes.NewReader(body), "Content-Type", contentType)
}

type batchAnswer struct {
	Created  int
	Existing int
	Records  []struct {
		ID          string `json:"id"`
		Created     bool   `json:"created"`
		PayloadSize int64  `json:"payload_size"`
	}
}

func TestBatchNDJSON(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	var body strings.Builder
	for i := range 20 {
		id := fmt.Sprintf("b-%02d", i)
		body.WriteString(ndjsonLine(id, "r", payloadOf(id, i*500), `,"sequence":`+fmt.Sprint(i)+`,"content_type":"text/plain"`))
		if i == 3 {
			body.WriteString("\n") // blank lines are allowed
		}
	}
	r := e.postBatch("t", "application/x-ndjson; charset=utf-8", []byte(body.String()))
	want(t, r, http.StatusCreated, "")
	var a batchAnswer
	r.decode(t, &a)
	if a.Created != 20 || a.Existing != 0 || len(a.Records) != 20 || a.Records[5].ID != "b-05" || a.Records[5].PayloadSize != 2500 {
		t.Fatalf("batch answered %s", r.body)
	}
	p := e.do("GET", rolloutURL("t", "b-07")+"/payload", nil)
	if !bytes.Equal(p.body, payloadOf("b-07", 3500)) || p.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("batch row read back wrong: %d bytes, %v", len(p.body), p.header.Get("Content-Type"))
	}
	// The identical batch again: every item an identical retry.
	r = e.postBatch("t", mediaNDJSON, []byte(body.String()))
	want(t, r, http.StatusOK, "")
	r.decode(t, &a)
	if a.Created != 0 || a.Existing != 20 {
		t.Fatalf("retried batch answered %s", r.body)
	}
}

// TestBatchAllOrNothing: on a table of one partition, a batch is all or
// nothing (TestBatchCommittedPerPartition covers several partitions).
func TestBatchAllOrNothing(t *testing.T) {
	e := newEnv(t)
	e.createTableWith("t", 1)
	e.mustPut("t", "taken", []byte("original"))
	good := ndjsonLine("n-1", "r", []byte("one"), "") + ndjsonLine("n-2", "r", []byte("two"), "")
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		line   int
	}{
		{"bad JSON", good + "{not json\n", 400, codeInvalidArgument, 3},
		{"unknown field", good + `{"id":"x","rollout_id":"r","colour":"red"}` + "\n", 400, codeInvalidArgument, 3},
		{"bad base64", good + `{"id":"x","rollout_id":"r","payload":"%%%"}` + "\n", 400, codeInvalidArgument, 3},
		{"missing rollout_id", good + "\n\n" + `{"id":"x","payload":""}` + "\n", 400, codeInvalidArgument, 5},
		{"missing id", `{"rollout_id":"r"}` + "\n" + good, 400, codeInvalidArgument, 1},
		{"conflict with a stored row", good + ndjsonLine("taken", "r", []byte("other"), ""), 409, codeConflict, 3},
		{"conflict within the batch", good + ndjsonLine("n-1", "r", []byte("uno"), ""), 409, codeConflict, 3},
		{"two values on a line", good + `{"id":"x","rollout_id":"r"} {}` + "\n", 400, codeInvalidArgument, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.postBatch("t", mediaNDJSON, []byte(c.body))
			want(t, r, c.status, c.code)
			var b errorBody
			r.decode(t, &b)
			if b.Error.Line == nil || *b.Error.Line != c.line || !strings.Contains(b.Error.Message, fmt.Sprintf("line %d", c.line)) {
				t.Fatalf("error %s, want line %d", r.body, c.line)
			}
			// Nothing of the batch is visible.
			want(t, e.do("GET", rolloutURL("t", "n-1"), nil), http.StatusNotFound, codeNotFound)
			want(t, e.do("GET", rolloutURL("t", "n-2"), nil), http.StatusNotFound, codeNotFound)
		})
	}
	want(t, e.postBatch("t", mediaNDJSON, []byte("\n\n")), http.StatusBadRequest, codeInvalidArgument)
}

func TestBatchMediaTypesAndLimits(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxBatchBytes = 4 << 10 })
	e.createTable("t")
	body := []byte(ndjsonLine("a", "r", []byte("x"), ""))
	for _, ct := range []string{"", "application/json", "text/plain", "application/octet-stream", "not a media type;;"} {
		want(t, e.postBatch("t", ct, body), http.StatusUnsupportedMediaType, codeUnsupportedMedia)
	}
	want(t, e.postBatch("t", mediaNDJSON, []byte(ndjsonLine("big", "r", make([]byte, 4<<10), ""))), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	want(t, e.postBatch("nope", mediaNDJSON, body), http.StatusNotFound, codeTableNotFound)
	want(t, e.do("GET", rolloutURL("t", "big"), nil), http.StatusNotFound, codeNotFound)
}

// arrowStream encodes columns as one record batch of an IPC stream.
func arrowStream(t *testing.T, fields []arrow.Field, build func(b *array.RecordBuilder), opts ...ipc.Option) []byte {
	t.Helper()
	schema := arrow.NewSchema(fields, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	build(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, append([]ipc.Option{ipc.WithSchema(schema)}, opts...)...)
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var minimalFields = []arrow.Field{
	{Name: "payload", Type: arrow.BinaryTypes.Binary, Nullable: true}, // any order
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "rollout_id", Type: arrow.BinaryTypes.String},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}

func minimalRows(ids, rollouts []string) func(b *array.RecordBuilder) {
	return func(b *array.RecordBuilder) {
		for i, id := range ids {
			b.Field(0).(*array.BinaryBuilder).Append(payloadOf(id, 100*i))
			b.Field(1).(*array.StringBuilder).Append(id)
			b.Field(2).(*array.StringBuilder).Append(rollouts[i])
			b.Field(3).(*array.Float64Builder).Append(float64(i) / 2)
		}
	}
}

func TestBatchArrow(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	ids := []string{"x-0", "x-1", "x-2"}
	r := e.postBatch("t", mediaArrow, arrowStream(t, minimalFields, minimalRows(ids, []string{"r", "r", "r"})))
	want(t, r, http.StatusCreated, "")
	var a batchAnswer
	r.decode(t, &a)
	if a.Created != 3 {
		t.Fatalf("arrow batch answered %s", r.body)
	}
	p := e.do("GET", rolloutURL("t", "x-2")+"/payload", nil)
	if !bytes.Equal(p.body, payloadOf("x-2", 200)) {
		t.Fatal("arrow row payload read back wrong")
	}
	m := e.do("GET", rolloutURL("t", "x-2"), nil)
	if !strings.Contains(string(m.body), `"reward":1`) {
		t.Fatalf("arrow row metadata %s", m.body)
	}

	// A bad row rejects the batch and is named by its index (from 0).
	r = e.postBatch("t", mediaArrow, arrowStream(t, minimalFields, minimalRows([]string{"y-0", "y-1", "y-2"}, []string{"r", "r", ""})))
	want(t, r, http.StatusBadRequest, codeInvalidArgument)
	var b errorBody
	r.decode(t, &b)
	if b.Error.Row == nil || *b.Error.Row != 2 {
		t.Fatalf("error %s, want row 2", r.body)
	}
	want(t, e.do("GET", rolloutURL("t", "y-0"), nil), http.StatusNotFound, codeNotFound)

	// Not Arrow at all, a truncated stream, a wrong column type, a
	// missing required column.
	good := arrowStream(t, minimalFields, minimalRows([]string{"z-0"}, []string{"r"}))
	wrongType := arrowStream(t, []arrow.Field{{Name: "id", Type: arrow.PrimitiveTypes.Int64}, {Name: "rollout_id", Type: arrow.BinaryTypes.String}},
		func(b *array.RecordBuilder) {
			b.Field(0).(*array.Int64Builder).Append(1)
			b.Field(1).(*array.StringBuilder).Append("r")
		})
	noRollout := arrowStream(t, []arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}},
		func(b *array.RecordBuilder) { b.Field(0).(*array.StringBuilder).Append("z-1") })
	for name, body := range map[string][]byte{
		"garbage":        []byte("this is not an arrow stream"),
		"truncated":      good[:len(good)/2],
		"wrong type":     wrongType,
		"missing column": noRollout,
	} {
		r := e.postBatch("t", mediaArrow, body)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", name, r.status, r.body)
		}
	}
	want(t, e.do("GET", rolloutURL("t", "z-0"), nil), http.StatusNotFound, codeNotFound)
}

func TestBatchArrowMemoryBounds(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxBatchBytes = 256 << 10 })
	e.createTable("t")
	// A compressed stream is fine while it decompresses within bounds.
	small := arrowStream(t, minimalFields, minimalRows([]string{"c-0", "c-1"}, []string{"r", "r"}), ipc.WithZstd())
	want(t, e.postBatch("t", mediaArrow, small), http.StatusCreated, "")
	// A few KiB that decompress to 8 MiB, past the decoding budget (the
	// batch limit): refused as too large.
	bomb := arrowStream(t, minimalFields, func(b *array.RecordBuilder) {
		b.Field(0).(*array.BinaryBuilder).Append(make([]byte, 8<<20))
		b.Field(1).(*array.StringBuilder).Append("bomb")
		b.Field(2).(*array.StringBuilder).Append("r")
		b.Field(3).(*array.Float64Builder).AppendNull()
	}, ipc.WithZstd())
	if len(bomb) > 16<<10 {
		t.Fatalf("the bomb is %d bytes; it should compress", len(bomb))
	}
	want(t, e.postBatch("t", mediaArrow, bomb), http.StatusRequestEntityTooLarge, codePayloadTooLarge)
	want(t, e.do("GET", rolloutURL("t", "bomb"), nil), http.StatusNotFound, codeNotFound)
}

func TestCheckArrowStreamAllocatesLittleForGarbage(t *testing.T) {
	// The first four bytes of this text read as a 1.9 GB message length.
	garbage := []byte("this is not an arrow stream")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := checkArrowStream(garbage, 1<<20, 4096)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("garbage accepted")
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 16<<20 {
		t.Fatalf("checking 27 bytes allocated %d bytes", n)
	}
}
