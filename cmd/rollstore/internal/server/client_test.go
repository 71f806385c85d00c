package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollstore/rollstore/client"
	"github.com/rollstore/rollstore/engine"
)

// The Go client against the real handler over real HTTP, every request
// and response also checked against api/openapi.yaml.

// framing records how each request's body was framed.
type framing struct {
	base http.RoundTripper
	mu   sync.Mutex
	last map[string]int64 // METHOD escaped-path → ContentLength (-1 chunked)
}

func (f *framing) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	f.last[req.Method+" "+req.URL.EscapedPath()] = req.ContentLength
	f.mu.Unlock()
	return f.base.RoundTrip(req)
}

func (f *framing) length(method, path string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.last[method+" "+path]
	if !ok {
		return -2
	}
	return n
}

// apiErr fails unless err is an *APIError matching sentinel, with code
// (if not empty) and a request id, and returns it.
func apiErr(t *testing.T, err error, sentinel error, code string) *client.APIError {
	t.Helper()
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, sentinel) || (code != "" && ae.Code != code) || ae.RequestID == "" {
		t.Fatalf("got %v, want %v with code %q and a request id", err, sentinel, code)
	}
	return ae
}

func readAll(t *testing.T, p *client.PayloadReader, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	b, err := io.ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// awkwardIDs are ids a client must carry intact in one path segment.
var awkwardIDs = []string{
	"run-1/step-0", ".", "..", "...", "a/../b", "../../other/rollouts/secret", "%", "%2F", "100%25",
	"with space", "tab\u00a0nbsp", "plus+sign", "q?x=1&y=2", "hash#frag", "semi;colon", "colon:x",
	"ünïcødé/日本語", "emoji-🦀", "trailing/", "/leading", "back\\slash", `quote"d`, "~tilde", "*",
}

// TestClientEveryRoute drives every route of the API through the client
// and checks what comes back byte for byte; at the end, every operation of
// the OpenAPI file must have been exercised.
func TestClientEveryRoute(t *testing.T) {
	e := newEnv(t) // memory store, 4 KiB inline limit, 2 retained versions
	ctx := context.Background()
	fr := &framing{base: e.ts.Client().Transport, last: map[string]int64{}}
	c, err := client.New(e.ts.URL, client.WithHTTPClient(&http.Client{Transport: fr}))
	if err != nil {
		t.Fatal(err)
	}

	// Probes and metrics.
	if err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}

	// Tables.
	if names, err := c.ListTables(ctx); err != nil || names == nil || len(names) != 0 {
		t.Fatalf("tables of an empty store: %q %v", names, err)
	}
	if err := c.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	apiErr(t, c.CreateTable(ctx, "t"), client.ErrConflict, codeTableExists)
	apiErr(t, c.CreateTable(ctx, ".hidden"), client.ErrInvalid, codeInvalidArgument)
	apiErr(t, c.CreateTable(ctx, "a/b"), client.ErrInvalid, codeInvalidArgument)
	if err := c.CreateTable(ctx, "scratch"); err != nil {
		t.Fatal(err)
	}
	if names, err := c.ListTables(ctx); err != nil || !slices.Equal(names, []string{"scratch", "t"}) {
		t.Fatalf("tables %q %v", names, err)
	}

	// Puts of awkward ids, inline and external payloads, read back whole.
	reward := 0.5
	for i, id := range awkwardIDs {
		payload := payloadOf(id, 1+i*400) // up to ~9 KiB: both sides of the 4 KiB inline limit
		res, err := c.Put(ctx, "t", id, client.Fields{
			RolloutID: "run-" + fmt.Sprint(i%3), ProblemID: "p", Sequence: int64(i), Role: "policy", Reward: &reward,
			PolicyVersion: "v1", Metadata: map[string]any{"i": i, "id": id}, ContentType: "application/x-test",
		}, bytes.NewReader(payload))
		if err != nil {
			t.Fatalf("put %q: %v", id, err)
		}
		if !res.Created || res.ID != id || res.PayloadSize != int64(len(payload)) || res.PayloadSHA256 != sumHex(payload) ||
			res.ContentType != "application/x-test" || res.Sequence != int64(i) || res.CreatedAt.IsZero() {
			t.Fatalf("put %q answered %+v", id, res)
		}
		rec, err := c.Get(ctx, "t", id)
		if err != nil {
			t.Fatalf("get %q: %v", id, err)
		}
		var md struct {
			I  int    `json:"i"`
			ID string `json:"id"`
		}
		if json.Unmarshal(rec.Metadata, &md) != nil || md.I != i || md.ID != id || rec.ID != id || rec.Reward == nil || *rec.Reward != 0.5 ||
			rec.RolloutID != res.RolloutID || rec.PayloadSHA256 != res.PayloadSHA256 || rec.Role != "policy" {
			t.Fatalf("get %q: %+v", id, rec)
		}
		p, err := c.Payload(ctx, "t", id)
		if got := readAll(t, p, err); !bytes.Equal(got, payload) {
			t.Fatalf("payload of %q: %d bytes, want %d", id, len(got), len(payload))
		}
		if p.Size != int64(len(payload)) || p.Partial || p.ContentType != "application/x-test" || p.ETag != `"`+res.PayloadSHA256+`"` {
			t.Fatalf("payload info of %q: %+v", id, p.PayloadInfo)
		}
		if n := fr.length("PUT", "/v1/tables/t/rollouts/"+client.PathEscape(id)); n != int64(len(payload)) {
			t.Fatalf("put %q sent Content-Length %d, want %d", id, n, len(payload))
		}
	}
	// An id is never a path step: "../../other/rollouts/secret" stayed in t.
	if _, err := c.Get(ctx, "scratch", "secret"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("an id escaped its table: %v", err)
	}

	// Identical retry and conflict.
	id0 := awkwardIDs[0]
	p0 := payloadOf(id0, 1)
	f0 := client.Fields{RolloutID: "run-0", ProblemID: "p", Role: "policy", Reward: &reward, PolicyVersion: "v1",
		Metadata: json.RawMessage(`{"id":"run-1/step-0","i":0}`), ContentType: "application/x-test"}
	if res, err := c.Put(ctx, "t", id0, f0, bytes.NewReader(p0)); err != nil || res.Created {
		t.Fatalf("identical retry: %+v %v", res, err)
	}
	apiErr(t, errOf(c.Put(ctx, "t", id0, f0, strings.NewReader("other"))), client.ErrConflict, codeConflict)
	apiErr(t, errOf(c.Put(ctx, "t", "x", client.Fields{}, nil)), client.ErrInvalid, codeInvalidArgument) // no rollout_id
	apiErr(t, errOf(c.Put(ctx, "nope", "x", client.Fields{RolloutID: "r"}, nil)), client.ErrNotFound, codeTableNotFound)

	// Streamed uploads: unknown length (chunked), Sized, a file, empty.
	big := payloadOf("streamed", 300<<10)
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < len(big); i += 7 << 10 {
			pw.Write(big[i:min(i+7<<10, len(big))])
		}
		pw.Close()
	}()
	if res, err := c.Put(ctx, "t", "streamed", client.Fields{RolloutID: "s"}, pr); err != nil || res.PayloadSize != int64(len(big)) || res.PayloadSHA256 != sumHex(big) {
		t.Fatalf("chunked put: %+v %v", res, err)
	}
	if n := fr.length("PUT", rolloutURL("t", "streamed")); n != -1 {
		t.Fatalf("a reader of unknown length was sent with Content-Length %d", n)
	}
	if res, err := c.Put(ctx, "t", "sized", client.Fields{RolloutID: "s"}, client.Sized(io.MultiReader(bytes.NewReader(big)), int64(len(big)))); err != nil || res.PayloadSHA256 != sumHex(big) {
		t.Fatalf("sized put: %+v %v", res, err)
	}
	if n := fr.length("PUT", rolloutURL("t", "sized")); n != int64(len(big)) {
		t.Fatalf("Sized sent Content-Length %d", n)
	}
	fpath := filepath.Join(t.TempDir(), "payload")
	if err := os.WriteFile(fpath, big, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fpath)
	if err != nil {
		t.Fatal(err)
	}
	f.Seek(1000, io.SeekStart) // from the file's offset on
	if res, err := c.Put(ctx, "t", "file", client.Fields{RolloutID: "s"}, f); err != nil || res.PayloadSHA256 != sumHex(big[1000:]) {
		t.Fatalf("file put: %+v %v", res, err)
	}
	f.Close()
	if n := fr.length("PUT", rolloutURL("t", "file")); n != int64(len(big)-1000) {
		t.Fatalf("a file was sent with Content-Length %d", n)
	}
	if res, err := c.Put(ctx, "t", "empty", client.Fields{RolloutID: "s"}, nil); err != nil || res.PayloadSize != 0 || res.PayloadSHA256 != sumHex(nil) {
		t.Fatalf("empty put: %+v %v", res, err)
	}

	// Ranges, conditional reads, HEAD.
	n := int64(len(big))
	for _, rc := range []struct {
		opt         client.ReadOption
		first, end  int64
		wantPartial bool
	}{
		{client.Range(0, 1), 0, 1, true},
		{client.Range(10, 20), 10, 30, true},
		{client.Range(n-100, -1), n - 100, n, true},
		{client.Range(n-5, 1000), n - 5, n, true}, // cut at the end
		{client.LastBytes(30), n - 30, n, true},
		{client.LastBytes(n + 5), 0, n, true},
	} {
		p, err := c.Payload(ctx, "t", "streamed", rc.opt)
		got := readAll(t, p, err)
		if !bytes.Equal(got, big[rc.first:rc.end]) || p.Offset != rc.first || p.Length != rc.end-rc.first || p.Size != n || p.Partial != rc.wantPartial {
			t.Fatalf("range [%d,%d): %d bytes, info %+v", rc.first, rc.end, len(got), p.PayloadInfo)
		}
	}
	if _, err := c.Payload(ctx, "t", "streamed", client.Range(n, 1)); errorCode(err) != codeRangeNotSatisfy || statusOf(err) != 416 {
		t.Fatalf("range past the end: %v", err)
	}
	if _, err := c.Payload(ctx, "t", "streamed", client.Range(0, 0)); err == nil {
		t.Fatal("an empty range was sent")
	}
	info, err := c.StatPayload(ctx, "t", "streamed")
	if err != nil || info.Size != n || info.ETag != `"`+sumHex(big)+`"` || info.ContentType != "application/octet-stream" || info.LastModified.IsZero() {
		t.Fatalf("stat: %+v %v", info, err)
	}
	if info, err := c.StatPayload(ctx, "t", "streamed", client.LastBytes(10)); err != nil || !info.Partial || info.Offset != n-10 || info.Length != 10 {
		t.Fatalf("stat of a range: %+v %v", info, err)
	}
	if _, err := c.StatPayload(ctx, "t", "absent"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("stat of an absent id: %v", err)
	}
	if _, err := c.Payload(ctx, "t", "streamed", client.IfNoneMatch(info.ETag)); !errors.Is(err, client.ErrNotModified) {
		t.Fatalf("If-None-Match with the ETag: %v", err)
	}
	if got := mustPayload(t)(c.Payload(ctx, "t", "streamed", client.IfNoneMatch(`"other"`))); !bytes.Equal(got, big) {
		t.Fatal("If-None-Match with another ETag did not serve the payload")
	}
	// A partly read stream can be closed; the next read is unaffected.
	p, err := c.Payload(ctx, "t", "streamed")
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := io.ReadFull(p, head); err != nil || !bytes.Equal(head, big[:100]) {
		t.Fatalf("first bytes of a stream: %v", err)
	}
	p.Close()
	apiErr(t, errOf(c.Payload(ctx, "t", "absent")), client.ErrNotFound, codeNotFound)
	apiErr(t, errOf(c.Payload(ctx, "nope", "absent")), client.ErrNotFound, codeTableNotFound)
	apiErr(t, errOf(c.Get(ctx, "t", "absent")), client.ErrNotFound, codeNotFound)

	// Batches: NDJSON, and an Arrow stream.
	var items []client.BatchItem
	for i := range 10 {
		id := fmt.Sprintf("batch/%02d", i)
		items = append(items, client.BatchItem{ID: id, Fields: client.Fields{RolloutID: "batch", Sequence: int64(i), ContentType: "text/plain"},
			Payload: payloadOf(id, i*700)})
	}
	br, err := c.PutBatch(ctx, "t", items)
	if err != nil || br.Created != 10 || br.Existing != 0 || len(br.Records) != 10 || br.Records[4].ID != "batch/04" ||
		br.Records[4].PayloadSize != 2800 || br.Records[4].PayloadSHA256 != sumHex(payloadOf("batch/04", 2800)) {
		t.Fatalf("batch: %+v %v", br, err)
	}
	if br, err := c.PutBatch(ctx, "t", items); err != nil || br.Created != 0 || br.Existing != 10 {
		t.Fatalf("retried batch: %+v %v", br, err)
	}
	if got := mustPayload(t)(c.Payload(ctx, "t", "batch/07")); !bytes.Equal(got, payloadOf("batch/07", 4900)) {
		t.Fatal("batch payload read back wrong")
	}
	bad := append(slices.Clone(items[:2]), client.BatchItem{ID: "batch/new", Fields: client.Fields{RolloutID: "batch"}},
		client.BatchItem{ID: "batch/03", Fields: client.Fields{RolloutID: "batch"}, Payload: []byte("other")})
	if ae := apiErr(t, errOf(c.PutBatch(ctx, "t", bad)), client.ErrConflict, codeConflict); ae.Line != 4 || ae.Row != -1 {
		t.Fatalf("batch conflict names line %d row %d, want line 4", ae.Line, ae.Row)
	}
	// A conflict with a stored row refuses the whole batch, whatever
	// partitions it spans (batch/new and batch/03 are in different ones).
	if engine.PartitionOf("batch/new", engine.DefaultPartitions) == engine.PartitionOf("batch/03", engine.DefaultPartitions) {
		t.Fatal("the test wants batch/new and batch/03 in different partitions")
	}
	apiErr(t, errOf(c.Get(ctx, "t", "batch/new")), client.ErrNotFound, codeNotFound)
	arrowIDs := []string{"arrow/0", "arrow/1", "arrow/2"}
	stream := arrowStream(t, minimalFields, minimalRows(arrowIDs, []string{"a", "a", "a"}))
	if br, err := c.PutBatchArrow(ctx, "t", bytes.NewReader(stream)); err != nil || br.Created != 3 || br.Records[2].ID != "arrow/2" {
		t.Fatalf("arrow batch: %+v %v", br, err)
	}
	if got := mustPayload(t)(c.Payload(ctx, "t", "arrow/2")); !bytes.Equal(got, payloadOf("arrow/2", 200)) {
		t.Fatal("arrow batch payload read back wrong")
	}
	badStream := arrowStream(t, minimalFields, minimalRows([]string{"arrow/x", "arrow/y"}, []string{"a", ""}))
	if ae := apiErr(t, errOf(c.PutBatchArrow(ctx, "t", bytes.NewReader(badStream))), client.ErrInvalid, codeInvalidArgument); ae.Row != 1 || ae.Line != -1 {
		t.Fatalf("arrow batch error names row %d line %d, want row 1", ae.Row, ae.Line)
	}

	// Listing: one page at a time, and the iterator over all pages.
	want := slices.Clone(awkwardIDs)
	want = append(want, "streamed", "sized", "file", "empty")
	for _, it := range items {
		want = append(want, it.ID)
	}
	want = append(want, arrowIDs...)
	slices.Sort(want)
	var got, tokens []string
	opts := client.ListOptions{Limit: 7}
	for {
		page, err := c.List(ctx, "t", opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Records) > 7 {
			t.Fatalf("a page of %d records, limit 7", len(page.Records))
		}
		for _, r := range page.Records {
			got = append(got, r.ID)
		}
		if page.NextPageToken == "" {
			break
		}
		if slices.Contains(tokens, page.NextPageToken) {
			t.Fatalf("page token %q repeated", page.NextPageToken)
		}
		tokens = append(tokens, page.NextPageToken)
		opts.PageToken = page.NextPageToken
	}
	if !slices.Equal(got, want) || len(tokens) != (len(want)-1)/7 {
		t.Fatalf("paged ids (%d pages)\n%q\nwant\n%q", len(tokens)+1, got, want)
	}
	got = got[:0]
	for r, err := range c.All(ctx, "t", client.ListOptions{Limit: 4, RolloutID: "batch"}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.ID)
	}
	if len(got) != 10 || got[0] != "batch/00" || got[9] != "batch/09" {
		t.Fatalf("All with a filter: %q", got)
	}
	for _, err := range c.All(ctx, "nope", client.ListOptions{}) {
		if !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("All of an absent table: %v", err)
		}
	}
	apiErr(t, errOf(c.List(ctx, "t", client.ListOptions{PageToken: "%%garbage"})), client.ErrInvalid, codeInvalidArgument)

	// Merge, versions, pinned reads, a collected version.
	st, err := c.TableStatus(ctx, "t")
	if err != nil || st.Name != "t" || st.Version != 0 || st.PendingRows != int64(len(want)) || len(st.Pending) == 0 || st.Partitions != engine.DefaultPartitions {
		t.Fatalf("status before merge: %+v %v", st, err)
	}
	m1, err := c.Merge(ctx, "t")
	if err != nil || m1.Version != 1 || m1.Rows != int64(len(want)) || len(m1.Merged) != len(st.Pending) {
		t.Fatalf("merge: %+v %v", m1, err)
	}
	if st, err := c.TableStatus(ctx, "t"); err != nil || st.Version != 1 || st.Rows != int64(len(want)) || st.PendingRows != 0 {
		t.Fatalf("status after merge: %+v %v", st, err)
	}
	if _, err := c.Put(ctx, "t", "late", client.Fields{RolloutID: "late"}, strings.NewReader("late")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "t", "late", client.AtVersion(1)); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a row written after v1 read at v1: %v", err)
	}
	if got := mustPayload(t)(c.Payload(ctx, "t", "..", client.AtVersion(1))); !bytes.Equal(got, payloadOf("..", 1+2*400)) {
		t.Fatal("pinned payload read back wrong")
	}
	if _, err := c.Merge(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	vs, err := c.Versions(ctx, "t")
	if err != nil || len(vs) != 2 || vs[0].Version != 1 || vs[1].Version != 2 || vs[1].Parent != 1 || vs[1].Rows != int64(len(want))+1 {
		t.Fatalf("versions: %+v %v", vs, err)
	}
	page, err := c.List(ctx, "t", client.ListOptions{Version: 1, Limit: 1000})
	if err != nil || len(page.Records) != len(want) {
		t.Fatalf("pinned list: %d records, %v", len(page.Records), err)
	}
	apiErr(t, errOf(c.Get(ctx, "t", "late", client.AtVersion(9))), client.ErrNotFound, codeVersionNotFound)
	if res, err := c.GetMany(ctx, "t", []string{"late", ".."}, client.AtVersion(1)); err != nil || len(res) != 2 || res[0].Found || !res[1].Found {
		t.Fatalf("pinned multi-id get: %+v %v", res, err)
	}
	if _, err := c.Put(ctx, "t", "later", client.Fields{RolloutID: "late"}, strings.NewReader("later")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Merge(ctx, "t"); err != nil { // v3: v1 falls out of retention
		t.Fatal(err)
	}
	apiErr(t, errOf(c.Get(ctx, "t", "..", client.AtVersion(1))), client.ErrGone, codeVersionGone)
	apiErr(t, errOf(c.Payload(ctx, "t", "..", client.AtVersion(1))), client.ErrGone, codeVersionGone)
	apiErr(t, errOf(c.Scan(ctx, "t", client.ScanOptions{Version: 1})), client.ErrGone, codeVersionGone)

	// Scan: the table as an Arrow stream, pinned, with payloads.
	scan := func(o client.ScanOptions) map[string][]byte {
		t.Helper()
		rc, err := c.Scan(ctx, "t", o)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		body, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, r := range readScan(t, body) {
			out[r.ID] = r.Payload
		}
		return out
	}
	if rows := scan(client.ScanOptions{}); len(rows) != len(want)+2 {
		t.Fatalf("scan: %d rows, want %d", len(rows), len(want)+2)
	}
	if rows := scan(client.ScanOptions{Version: 2}); len(rows) != len(want)+1 {
		t.Fatalf("pinned scan: %d rows", len(rows))
	} else if _, ok := rows["later"]; ok {
		t.Fatal("pinned scan of v2 holds a row written after it")
	}
	rows := scan(client.ScanOptions{Payloads: true})
	for i, id := range awkwardIDs {
		if !bytes.Equal(rows[id], payloadOf(id, 1+i*400)) {
			t.Fatalf("scanned payload of %q: %d bytes", id, len(rows[id]))
		}
	}

	// Metrics name the routes the client used.
	metrics, err := c.Metrics(ctx)
	if err != nil || !bytes.Contains(metrics, []byte(`route="/v1/tables/{table}/rollouts/{id}/payload"`)) {
		t.Fatalf("metrics (%d bytes): %v", len(metrics), err)
	}

	// The feed and a consumer group of a member.
	feed := c.Feed("scratch", client.FeedOptions{MaxRows: 2, AllPayloads: true})
	if p, err := feed.Next(ctx); err != nil || len(p.Rows) != 0 || feed.Cursor() == "" {
		t.Fatalf("feed of an empty table: %+v %v", p, err)
	}
	if _, err := c.Put(ctx, "scratch", "f", client.Fields{RolloutID: "r"}, strings.NewReader("fed")); err != nil {
		t.Fatal(err)
	}
	if p, err := feed.Next(ctx); err != nil || len(p.Rows) != 1 || string(p.Rows[0].Payload) != "fed" || p.Rows[0].Offset != 0 {
		t.Fatalf("feed after a put: %+v %v", p, err)
	}
	m := c.Consumer("scratch", "g", "m", client.FeedOptions{})
	if p, err := m.Next(ctx); err != nil || len(p.Rows) != 1 {
		t.Fatalf("consumer: %+v %v", p, err)
	}
	if g, err := m.Commit(ctx); err != nil || g.LagRows != 0 {
		t.Fatalf("commit: %+v %v", g, err)
	}
	if gs, err := c.Consumers(ctx, "scratch"); err != nil || len(gs) != 1 {
		t.Fatalf("consumers: %+v %v", gs, err)
	}
	if _, err := c.ConsumerGroupOf(ctx, "scratch", "g"); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConsumer(ctx, "scratch", "g"); err != nil {
		t.Fatal(err)
	}

	// Drop.
	if err := c.DropTable(ctx, "scratch"); err != nil {
		t.Fatal(err)
	}
	apiErr(t, errOf(c.TableStatus(ctx, "scratch")), client.ErrNotFound, codeTableNotFound)
	apiErr(t, c.DropTable(ctx, "scratch"), client.ErrNotFound, codeTableNotFound)
	apiErr(t, errOf(c.Versions(ctx, "scratch")), client.ErrNotFound, codeTableNotFound)
	apiErr(t, errOf(c.Merge(ctx, "scratch")), client.ErrNotFound, codeTableNotFound)

	// The internal commit and await endpoints are for writer pods, not the
	// client (forward_test.go and feedrelay_test.go check them against the
	// file); the
	// status page's routes neither (TestUIAuth exercises them).
	left := slices.DeleteFunc(e.api.Unexercised(), func(op string) bool {
		return op == "POST "+internalCommitPath || op == "POST "+internalAwaitPath || isUIOperation(op)
	})
	if len(left) > 0 {
		t.Errorf("operations of api/openapi.yaml the client never reached: %v", left)
	}
}

// TestClientOverloadedRetryAfter: a 503 is ErrOverloaded, with the
// server's Retry-After.
func TestClientOverloadedRetryAfter(t *testing.T) {
	e := newEnv(t, func(o *envOptions) {
		o.server.MaxConcurrentRequests = 1
		o.server.RetryAfter = 3 * time.Second
	})
	ctx := context.Background()
	e.createTable("t")
	gate := e.hooks.Pause("write:after-payload")
	done := make(chan error, 1)
	go func() {
		_, err := e.client.Put(ctx, "t", "slow", client.Fields{RolloutID: "r"}, strings.NewReader("holds the only slot"))
		done <- err
	}()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := gate.Wait(wctx); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.Get(ctx, "t", "slow")
	if ae := apiErr(t, err, client.ErrOverloaded, codeOverloaded); ae.RetryAfter != 3*time.Second || ae.Status != 503 {
		t.Fatalf("503 with RetryAfter %v", ae.RetryAfter)
	}
	if errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrGone) {
		t.Fatalf("%v matches another sentinel", err)
	}
	if err := e.client.Health(ctx); err != nil { // probes are not limited
		t.Fatal(err)
	}
	gate.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec, err := e.client.Get(ctx, "t", "slow"); err != nil || rec.PayloadSize != int64(len("holds the only slot")) {
		t.Fatalf("after the slot freed: %+v %v", rec, err)
	}

	// Draining is a 503 too, and so is readiness.
	e.srv.StartDrain()
	apiErr(t, errOf(e.client.Get(ctx, "t", "slow")), client.ErrOverloaded, codeDraining)
	apiErr(t, e.client.Ready(ctx), client.ErrOverloaded, codeDraining)
}

// TestClientBearerToken: without the token every API route is
// ErrUnauthorized; with it, it works; probes need none.
func TestClientBearerToken(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.AuthTokens = []string{"s3cret"} })
	ctx := context.Background()
	anon := e.client
	apiErr(t, anon.CreateTable(ctx, "t"), client.ErrUnauthorized, codeUnauthorized)
	apiErr(t, errOf(anon.Metrics(ctx)), client.ErrUnauthorized, codeUnauthorized)
	if err := anon.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if err := anon.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	wrong, _ := client.New(e.ts.URL, client.WithHTTPClient(e.ts.Client()), client.WithToken("s3cre"))
	apiErr(t, errOf(wrong.ListTables(ctx)), client.ErrUnauthorized, codeUnauthorized)
	c, _ := client.New(e.ts.URL, client.WithHTTPClient(e.ts.Client()), client.WithToken("s3cret"))
	if err := c.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "t", "a/b", client.Fields{RolloutID: "r"}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if got := mustPayload(t)(c.Payload(ctx, "t", "a/b")); string(got) != "x" {
		t.Fatalf("payload %q", got)
	}
	if _, err := c.Metrics(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestClientBehindPathPrefix: a base URL with a path (a server behind a
// proxy at /rollstore/) keeps its prefix, and ids stay escaped under it.
func TestClientBehindPathPrefix(t *testing.T) {
	e := newEnv(t)
	mux := http.NewServeMux()
	mux.Handle("/rollstore/", http.StripPrefix("/rollstore", e.srv.Handler()))
	ts := httptest.NewServer(mux) // not in the OpenAPI file's paths: unchecked
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL + "/rollstore/")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.CreateTable(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a/b", "..", "%2F"} {
		if _, err := c.Put(ctx, "t", id, client.Fields{RolloutID: "r"}, strings.NewReader(id)); err != nil {
			t.Fatalf("put %q: %v", id, err)
		}
		if got := mustPayload(t)(c.Payload(ctx, "t", id)); string(got) != id {
			t.Fatalf("payload of %q: %q", id, got)
		}
	}
}

// errOf drops a result and keeps the error.
func errOf[T any](_ T, err error) error { return err }

// mustPayload reads a whole payload stream: mustPayload(t)(c.Payload(…)).
func mustPayload(t *testing.T) func(*client.PayloadReader, error) []byte {
	return func(p *client.PayloadReader, err error) []byte {
		t.Helper()
		return readAll(t, p, err)
	}
}

func errorCode(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

func statusOf(err error) int {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Status
	}
	return 0
}
