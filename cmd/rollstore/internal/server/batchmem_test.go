package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
)

// heapPeak samples the Go heap (live objects and garbage not yet swept,
// what the process holds) every 100µs while fn runs, and returns the
// highest value above the heap right after a GC before fn.
func heapPeak(fn func()) uint64 {
	sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() uint64 {
		rtmetrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	runtime.GC()
	base := read()
	peak := base
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			peak = max(peak, read())
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	})
	fn()
	close(stop)
	wg.Wait()
	peak = max(peak, read())
	return peak - base
}

// The stated bounds, as multiples of --max-batch-body, by which serving
// one batch may grow the Go heap (live objects and garbage not yet swept,
// with the default GOGC, under -race too). A refused batch costs its
// decoding only, up to the row or byte limit and never the rest of the
// body: the body itself and, for Arrow, one record batch being checked. An
// accepted one also costs the engine's commit: its own copy of the
// payloads and the encoded segment (rowfile.Encode, which writes a segment
// twice to embed its layout, into buffers that grow as they go).
// The heap is the test's too: the measured request is posted so that the
// OpenAPI check leaves its body alone (postBatchStreamed), since
// validating every NDJSON line costs several times the batch itself.
// Measured (8 MiB limit): refused ≤ 1.8× (2.7× under -race); accepted
// ≤ 10.9× (12.3× under -race), of which decoding is under 2×; the bounds
// leave room for the garbage collector's timing.
const (
	refusedBatchMemMultiple  = 4
	acceptedBatchMemMultiple = 16
)

// TestBatchMemoryIsBounded posts batches of --max-batch-body bytes over
// real HTTP, NDJSON and Arrow, refused for their row count (hundreds of
// thousands of tiny rows) or accepted (4000 rows, or one large line), and
// checks that the heap never grew by more than the stated multiple of the
// limit while each was served, and that refused batches stored nothing.
func TestBatchMemoryIsBounded(t *testing.T) {
	const limit = 8 << 20
	e := newEnv(t, withLocalStore(t), func(o *envOptions) {
		o.server.MaxBatchBytes = limit
		o.server.MaxBodyBytes = limit
	})
	e.createTable("t")
	maxRows := e.db.Config().SegmentMaxRows

	tinyNDJSON := func() []byte {
		var b bytes.Buffer
		for i := 0; b.Len() < limit-100; i++ {
			fmt.Fprintf(&b, `{"id":"t%d","rollout_id":"r"}`+"\n", i)
		}
		return b.Bytes()
	}
	bigNDJSON := func(rows int) []byte {
		var b bytes.Buffer
		size := limit*3/4/rows - 100
		for i := range rows {
			b.WriteString(ndjsonLine(fmt.Sprintf("n%d-%d", rows, i), "r", payloadOf(fmt.Sprint(rows, i), size), ""))
		}
		return b.Bytes()
	}
	arrowRows := func(rows, size int) []byte {
		ids, rollouts := make([]string, rows), make([]string, rows)
		for i := range ids {
			ids[i], rollouts[i] = fmt.Sprintf("a%d-%d", rows, i), "r"
		}
		return arrowStream(t, minimalFields, func(b *array.RecordBuilder) {
			for i, id := range ids {
				b.Field(0).(*array.BinaryBuilder).Append(payloadOf(id, size))
				b.Field(1).(*array.StringBuilder).Append(id)
				b.Field(2).(*array.StringBuilder).Append(rollouts[i])
				b.Field(3).(*array.Float64Builder).AppendNull()
			}
		})
	}
	cases := []struct {
		name, media string
		body        []byte
		status      int
		first       string // an id of the batch
	}{
		{"NDJSON, tiny rows past the row limit", mediaNDJSON, tinyNDJSON(), http.StatusRequestEntityTooLarge, "t0"},
		{"NDJSON, rows at the limit", mediaNDJSON, bigNDJSON(maxRows), http.StatusCreated, fmt.Sprintf("n%d-0", maxRows)},
		{"NDJSON, one large line", mediaNDJSON, bigNDJSON(1), http.StatusCreated, "n1-0"},
		{"Arrow, tiny rows past the row limit", mediaArrow, arrowRows(limit/40, 0), http.StatusRequestEntityTooLarge, fmt.Sprintf("a%d-0", limit/40)},
		{"Arrow, rows at the limit", mediaArrow, arrowRows(maxRows, limit*3/4/maxRows), http.StatusCreated, fmt.Sprintf("a%d-0", maxRows)},
	}
	for _, c := range cases {
		if len(c.body) > limit {
			t.Fatalf("%s: body of %d bytes is over the limit", c.name, len(c.body))
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r response
			grew := heapPeak(func() { r = e.postBatchStreamed("t", c.media, c.body) })
			if r.status != c.status {
				t.Fatalf("%d %s, want %d", r.status, bytes.TrimSpace(r.body[:min(len(r.body), 300)]), c.status)
			}
			t.Logf("body %d bytes: heap grew by %.1f MiB, %.2f × the limit", len(c.body), float64(grew)/(1<<20), float64(grew)/limit)
			bound := acceptedBatchMemMultiple
			if c.status != http.StatusCreated {
				bound = refusedBatchMemMultiple
			}
			if grew > uint64(bound)*limit {
				t.Errorf("heap grew by %d bytes, more than %d × the %d-byte limit", grew, bound, limit)
			}
			if c.status == http.StatusRequestEntityTooLarge {
				if !strings.Contains(r.errMessage(), fmt.Sprint(maxRows)) {
					t.Errorf("413 %q does not state the row limit", r.errMessage())
				}
				e.wantNothingStored("t", c.first)
			} else {
				want(t, e.do("GET", rolloutURL("t", c.first), nil), http.StatusOK, "")
			}
		})
	}
}

// postBatchStreamed posts body as a stream the client cannot rewind (with
// its Content-Length): the OpenAPI check then leaves the request body
// alone, since decoding a whole batch to validate it would cost the test's
// heap more than the server's.
func (e *testEnv) postBatchStreamed(table, contentType string, body []byte) response {
	e.t.Helper()
	req, err := http.NewRequest("POST", e.ts.URL+"/v1/tables/"+table+"/rollouts", io.NopCloser(bytes.NewReader(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	req.ContentLength = int64(len(body))
	req.Header.Set("Content-Type", contentType)
	return e.send(req)
}
