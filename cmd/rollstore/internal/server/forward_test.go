package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/rollstore/rollstore/api/openapitest"
	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/hook"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
	"github.com/rollstore/rollstore/objstore/metered"
)

// pod is one writer process of a multi-pod test: its own engine DB and
// server over real HTTP, on a store the pods share.
type pod struct {
	t    *testing.T
	name string
	db   *engine.DB
	srv  *Server
	ts   *httptest.Server
	// http checks its traffic against the OpenAPI file; the pod's
	// forwarded commits are checked likewise.
	http   *http.Client
	closed bool
}

// newPod starts writer name on store; its address is known before its
// engine opens, as --advertise-addr is.
func newPod(t *testing.T, store objstore.Bucket, name string, opts ...func(*envOptions)) *pod {
	t.Helper()
	o := envOptions{store: store, engine: testEngineConfig(),
		server: Config{MergeInterval: -1, MaxBodyBytes: 1 << 20, MaxBatchBytes: 1 << 20, MaxClientShare: 1}}
	o.engine.Shard = name
	o.engine.MembersPollInterval = 20 * time.Millisecond
	for _, f := range opts {
		f(&o)
	}
	ts := httptest.NewUnstartedServer(nil)
	o.engine.Addr = ts.Listener.Addr().String()
	o.engine.MaxPayload = o.server.MaxBodyBytes
	db, err := engine.Open(store, o.engine)
	if err != nil {
		t.Fatal(err)
	}
	v, err := openapitest.New()
	if err != nil {
		t.Fatal(err)
	}
	report := func(err error) { t.Error(err) }
	o.server.ForwardClient = &http.Client{Transport: v.Transport(newForwardClient().Transport, report)}
	o.server.Store = store
	srv, err := New(db, o.server)
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = srv.Handler()
	ts.Start()
	p := &pod{t: t, name: name, db: db, srv: srv, ts: ts, http: &http.Client{Transport: v.Transport(http.DefaultTransport, report)}}
	t.Cleanup(p.stop)
	return p
}

// stop closes the pod's server and database (gracefully: it leaves the
// members, so the others take its partitions at once).
func (p *pod) stop() {
	if p.closed {
		return
	}
	p.closed = true
	p.ts.Close()
	_ = p.db.Close(context.Background())
}

func (p *pod) do(method, path string, body []byte, hdr ...string) response {
	p.t.Helper()
	req, err := http.NewRequest(method, p.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := p.http.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

func (p *pod) put(table, id string, payload []byte) response {
	p.t.Helper()
	return p.do("PUT", rolloutURL(table, id), payload, "Rollstore-Record", `{"rollout_id":"r"}`, "Content-Type", "application/octet-stream")
}

func (p *pod) table(name string) *engine.Table {
	p.t.Helper()
	tb, err := p.db.Table(context.Background(), name)
	if err != nil {
		p.t.Fatal(err)
	}
	return tb
}

// owner is the writer owning id's partition as p sees it.
func (p *pod) owner(table, id string) engine.Owner {
	p.t.Helper()
	o, err := p.table(table).Owner(context.Background(), id)
	if err != nil {
		p.t.Fatal(err)
	}
	return o
}

// agreeOnOwners waits until every pod sees the same owner for every
// partition of table, each pod owning some. Only the membership is waited
// for (heartbeats and polls); nothing is written before.
func agreeOnOwners(t *testing.T, table string, pods ...*pod) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var first []engine.Owner
		agree := true
		owns := map[string]bool{}
		for _, p := range pods {
			os, err := p.table(table).Owners(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range os {
				owns[o.Writer] = true
			}
			if first == nil {
				first = os
			} else if !reflect.DeepEqual(stripSelf(first), stripSelf(os)) {
				agree = false
			}
		}
		if agree && len(owns) == len(pods) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pods do not agree on the owners of %s: %+v", table, first)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stripSelf(os []engine.Owner) []engine.Owner {
	out := make([]engine.Owner, len(os))
	for i, o := range os {
		o.Self = false
		out[i] = o
	}
	return out
}

// idsOwnedBy returns n ids of table whose partition w owns.
func idsOwnedBy(t *testing.T, p *pod, table, prefix, w string, n int) []string {
	t.Helper()
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if p.owner(table, id).Writer == w {
			out = append(out, id)
		}
		if i > 100*n {
			t.Fatalf("no ids owned by %s", w)
		}
	}
	return out
}

// twoPods starts writers a and b on one store and a table both own part of.
func twoPods(t *testing.T, store objstore.Bucket) (*pod, *pod) {
	t.Helper()
	a := newPod(t, store, "pod-a")
	b := newPod(t, store, "pod-b")
	want(t, a.do("PUT", "/v1/tables/t", nil), http.StatusCreated, "")
	agreeOnOwners(t, "t", a, b)
	return a, b
}

func readBoth(t *testing.T, id string, payload []byte, pods ...*pod) {
	t.Helper()
	for _, p := range pods {
		r := p.do("GET", rolloutURL("t", id)+"/payload", nil)
		if r.status != http.StatusOK || !bytes.Equal(r.body, payload) {
			t.Fatalf("%s serves %s: %d, %d bytes (want %d)", p.name, id, r.status, len(r.body), len(payload))
		}
	}
}

// TestForwardConcurrentWritesOneWinner: the same 150 ids PUT at once to
// two pods with different payloads: every id is answered 201 once and 409
// once, and both pods serve the acknowledged bytes.
func TestForwardConcurrentWritesOneWinner(t *testing.T) {
	a, b := twoPods(t, memory.New())
	const n = 150
	type answer struct {
		status  int
		payload []byte
	}
	got := make([][2]answer, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range n {
		for k, p := range []*pod{a, b} {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				id := fmt.Sprintf("id-%03d", i)
				// Every third payload is stored as an object of its own.
				payload := payloadOf(fmt.Sprintf("%s from %s", id, p.name), 100+(i%3)*3000)
				got[i][k] = answer{p.put("t", id, payload).status, payload}
			})
		}
	}
	wg.Wait()
	for i := range n {
		id := fmt.Sprintf("id-%03d", i)
		s0, s1 := got[i][0].status, got[i][1].status
		var winner []byte
		switch {
		case s0 == http.StatusCreated && s1 == http.StatusConflict:
			winner = got[i][0].payload
		case s1 == http.StatusCreated && s0 == http.StatusConflict:
			winner = got[i][1].payload
		default:
			t.Fatalf("%s answered %d by pod-a and %d by pod-b, want one 201 and one 409", id, s0, s1)
		}
		readBoth(t, id, winner, a, b)
	}
	if f := testutil.ToFloat64(a.srv.metrics.forwarded.WithLabelValues(fwdRefused)) +
		testutil.ToFloat64(b.srv.metrics.forwarded.WithLabelValues(fwdCommitted)); f == 0 {
		t.Error("nothing was forwarded")
	}
}

// countingStore counts the Puts of payload objects.
func countingStore(b objstore.Bucket) (objstore.Bucket, *atomic.Int64) {
	var n atomic.Int64
	return metered.Wrap(b, metered.Options{Observe: func(_ context.Context, c *metered.Call) {
		if c.Op == metered.OpPut && strings.Contains(c.Key, "/payloads/") {
			n.Add(1)
		}
	}}), &n
}

// TestForwardToOwner: a write to the pod that does not own its partition
// is forwarded, acknowledged as the owner decided (201, then 200 for the
// identical retry, 409 for other content), readable from both pods, and
// its payload object uploaded once.
func TestForwardToOwner(t *testing.T) {
	store, puts := countingStore(memory.New())
	a, b := twoPods(t, store)
	id := idsOwnedBy(t, a, "t", "fwd", "pod-b", 1)[0]
	payload := payloadOf("forwarded", 10<<10) // above the 4 KiB inline limit
	before := puts.Load()
	r := a.put("t", id, payload)
	want(t, r, http.StatusCreated, "")
	if r.header.Get("Location") != rolloutURL("t", id) || r.header.Get("ETag") == "" {
		t.Errorf("forwarded 201 without Location or ETag: %v", r.header)
	}
	var rec struct {
		ID          string `json:"id"`
		PayloadSize int64  `json:"payload_size"`
		PayloadRef  string `json:"payload_ref"`
	}
	r.decode(t, &rec)
	if rec.ID != id || rec.PayloadSize != int64(len(payload)) || !strings.Contains(rec.PayloadRef, "/payloads/") {
		t.Fatalf("forwarded answer %s", r.body)
	}
	if n := puts.Load() - before; n != 1 {
		t.Errorf("the payload object was uploaded %d times, want once", n)
	}
	readBoth(t, id, payload, a, b)
	if got := testutil.ToFloat64(a.srv.metrics.forwarded.WithLabelValues(fwdCommitted)); got != 1 {
		t.Errorf("forwarded committed = %v, want 1", got)
	}
	// The owner's decisions, answered by the receiving pod.
	want(t, a.put("t", id, payload), http.StatusOK, "")
	want(t, a.put("t", id, payloadOf("other", 10<<10)), http.StatusConflict, codeConflict)
	want(t, a.put("t", id, []byte("small other")), http.StatusConflict, codeConflict)
	if got := testutil.ToFloat64(a.srv.metrics.forwarded.WithLabelValues(fwdRefused)); got != 2 {
		t.Errorf("forwarded refused = %v, want 2", got)
	}
	// An invalid record is refused by the receiving pod before anything
	// is stored or sent.
	want(t, a.do("PUT", rolloutURL("t", id+"-x"), []byte("x"), "Rollstore-Record", `{}`), http.StatusBadRequest, codeInvalidArgument)
}

// TestForwardOwnerUnreachable: with the owner's server gone, the receiving
// pod answers 503 with Retry-After and stores nothing (the staged payload
// object is deleted: the owner surely did not commit); once the owner
// leaves the members (its database closed), a retry succeeds.
func TestForwardOwnerUnreachable(t *testing.T) {
	store := memory.New()
	a, b := twoPods(t, store)
	id := idsOwnedBy(t, a, "t", "gone", "pod-b", 1)[0]
	payload := payloadOf("unreachable", 10<<10)
	b.ts.Close() // the owner's database is still a member

	r := a.put("t", id, payload)
	want(t, r, http.StatusServiceUnavailable, codeOwnerUnreachable)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	want(t, a.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
	if n := countPayloadObjects(t, store); n != 0 {
		t.Errorf("%d payload objects left after a write that was never sent", n)
	}

	b.stop() // leaves the members
	deadline := time.Now().Add(time.Minute)
	for {
		r = a.put("t", id, payload)
		if r.status == http.StatusCreated {
			break
		}
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || time.Now().After(deadline) {
			t.Fatalf("retry after the owner left: %d %s", r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	readBoth(t, id, payload, a)
}

func countPayloadObjects(t *testing.T, store objstore.Bucket) int {
	t.Helper()
	n := 0
	err := store.List(context.Background(), "", objstore.ListOptions{}, func(o objstore.Entry) error {
		if strings.Contains(o.Key, "/payloads/") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestForwardBatchAcrossOwners: a batch whose items two pods own is
// committed whole; the identical batch again answers every item existing;
// a batch with a conflict in the other pod's partition is refused whole,
// naming its line; a batch that fails while committing (the other pod
// unreachable) names the items committed nevertheless, and its retry is
// safe.
func TestForwardBatchAcrossOwners(t *testing.T) {
	a, b := twoPods(t, memory.New())
	ids := append(idsOwnedBy(t, a, "t", "mine", "pod-a", 6), idsOwnedBy(t, a, "t", "theirs", "pod-b", 6)...)
	var body strings.Builder
	for i, id := range ids {
		body.WriteString(ndjsonLine(id, "r", payloadOf(id, 1000+i*1000), ""))
	}
	post := func(p *pod, b string) response {
		return p.do("POST", "/v1/tables/t/rollouts", []byte(b), "Content-Type", mediaNDJSON)
	}
	r := post(a, body.String())
	want(t, r, http.StatusCreated, "")
	var ans batchAnswer
	r.decode(t, &ans)
	if ans.Created != len(ids) || len(ans.Records) != len(ids) {
		t.Fatalf("batch answered %s", r.body)
	}
	for i, id := range ids {
		if ans.Records[i].ID != id || ans.Records[i].PayloadSize != int64(1000+i*1000) {
			t.Fatalf("record %d: %+v", i, ans.Records[i])
		}
		readBoth(t, id, payloadOf(id, 1000+i*1000), a, b)
	}
	r = post(a, body.String())
	want(t, r, http.StatusOK, "")
	r.decode(t, &ans)
	if ans.Existing != len(ids) || ans.Created != 0 {
		t.Fatalf("retried batch answered %s", r.body)
	}
	// The same from the other pod.
	r = post(b, body.String())
	want(t, r, http.StatusOK, "")

	// A conflict with a stored row pod-b owns, posted to pod-a, in a batch
	// with new ids of both pods: refused whole before anything is written.
	fresh := append(idsOwnedBy(t, a, "t", "new-mine", "pod-a", 3), idsOwnedBy(t, a, "t", "new-theirs", "pod-b", 3)...)
	clash := ids[len(ids)-1] // pod-b's
	var bad strings.Builder
	for _, id := range fresh {
		bad.WriteString(ndjsonLine(id, "r", []byte("new "+id), ""))
	}
	bad.WriteString(ndjsonLine(clash, "r", []byte("other content"), ""))
	r = post(a, bad.String())
	want(t, r, http.StatusConflict, codeConflict)
	if r.errLine() != len(fresh)+1 || len(r.errDetail().Committed) != 0 {
		t.Fatalf("conflict names line %d (want %d), committed %v (want none): %s", r.errLine(), len(fresh)+1, r.errDetail().Committed, r.body)
	}
	for _, id := range fresh {
		want(t, a.do("GET", rolloutURL("t", id), nil), http.StatusNotFound, codeNotFound)
	}

	// A failure while the partitions commit splits the batch: with pod-b
	// unreachable, pod-a's partitions commit and the error names them.
	var good strings.Builder
	for _, id := range fresh {
		good.WriteString(ndjsonLine(id, "r", []byte("new "+id), ""))
	}
	b.ts.Close()
	r = post(a, good.String())
	want(t, r, http.StatusServiceUnavailable, codeOwnerUnreachable)
	if r.header.Get("Retry-After") == "" || r.errLine() != 4 {
		t.Errorf("503 names line %d (want 4, pod-b's first item), Retry-After %q", r.errLine(), r.header.Get("Retry-After"))
	}
	committed := map[string]bool{}
	for _, c := range r.errDetail().Committed {
		committed[c.ID] = true
		if c.Line == nil || !c.Created {
			t.Errorf("committed item %+v: want its line and created", c)
		}
	}
	for k, id := range fresh {
		mine := k < 3
		got := a.do("GET", rolloutURL("t", id), nil).status
		if mine != committed[id] || (mine && got != http.StatusOK) || (!mine && got != http.StatusNotFound) {
			t.Errorf("%s (pod-a's: %v): committed=%v, GET %d", id, mine, committed[id], got)
		}
	}
	// Retrying the whole batch once pod-b is gone is safe: pod-a's items
	// are identical retries, pod-b's partitions are pod-a's now.
	b.stop()
	deadline := time.Now().Add(time.Minute)
	for {
		r = post(a, good.String())
		if r.status == http.StatusCreated {
			break
		}
		if r.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("retried batch: %d %s", r.status, r.body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.decode(t, &ans)
	if ans.Created != 3 || ans.Existing != 3 {
		t.Fatalf("retried batch answered %s, want pod-a's 3 existing and 3 created", r.body)
	}
}

// TestStagedWireRoundTrip: a staged append crosses the wire whole, every
// field of its record included (a field the engine adds is caught here).
func TestStagedWireRoundTrip(t *testing.T) {
	reward := 0.25
	st := &engine.Staged{Record: engine.Record{ID: "x/1", RolloutID: "r", ProblemID: "p", Sequence: 7, Role: "actor",
		CreatedAt: time.Date(2025, 3, 4, 5, 6, 7, 123456000, time.UTC), ContentType: "text/plain", Reward: &reward,
		PolicyVersion: "v3", Metadata: json.RawMessage(`{ "a" : 1.0 }`), PayloadSize: 3, PayloadSHA256: [32]byte{1, 2, 3},
		Payload: []byte("abc")}, GivenAt: true, Uploaded: time.Date(2025, 3, 4, 5, 6, 0, 0, time.UTC)}
	for _, ref := range []string{"", "t/i/payloads/p0001/1/abc"} {
		in := *st
		if ref != "" {
			in.Record.Payload, in.Record.PayloadRef = nil, ref
		}
		data, err := json.Marshal(toWire(&in, true))
		if err != nil {
			t.Fatal(err)
		}
		var w stagedWire
		if err := json.Unmarshal(data, &w); err != nil {
			t.Fatal(err)
		}
		out, err := w.staged()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, &in) {
			t.Fatalf("round trip:\n%+v\nwant\n%+v", out, &in)
		}
	}
}

// TestForwardWithAuth: the internal endpoint is behind the API's tokens;
// a pod forwards with its own token (the writers share them), and a
// forward the owner refuses for its token is a 500 naming the cause, not
// the owner's 401 passed on to a client whose token was good.
func TestForwardWithAuth(t *testing.T) {
	store := memory.New()
	tok := func(s string) func(*envOptions) { return func(o *envOptions) { o.server.AuthTokens = []string{s} } }
	a := newPod(t, store, "pod-a", tok("s3cret"))
	b := newPod(t, store, "pod-b", tok("s3cret"))
	bearer := []string{"Authorization", "Bearer s3cret"}
	want(t, a.do("PUT", "/v1/tables/t", nil, bearer...), http.StatusCreated, "")
	agreeOnOwners(t, "t", a, b)
	want(t, b.do("POST", "/v1/internal/tables/t/commit", []byte(`{"items":[]}`), "Content-Type", "application/json"), http.StatusUnauthorized, codeUnauthorized)
	want(t, b.do("POST", "/v1/internal/tables/t/commit", []byte(`{"items":[]}`), append([]string{"Content-Type", "application/json"}, bearer...)...), http.StatusBadRequest, codeInvalidArgument)

	id := idsOwnedBy(t, a, "t", "auth", "pod-b", 1)[0]
	put := func(p *pod, id string) response {
		return p.do("PUT", rolloutURL("t", id), []byte("payload"), append([]string{"Rollstore-Record", `{"rollout_id":"r"}`, "Content-Type", "text/plain"}, bearer...)...)
	}
	want(t, put(a, id), http.StatusCreated, "")

	// A writer with another token cannot forward to b.
	c := newPod(t, store, "pod-c", tok("other"), func(o *envOptions) { o.server.AuthTokens = append(o.server.AuthTokens, "s3cret") })
	agreeOnOwners(t, "t", a, b, c)
	id2 := idsOwnedBy(t, c, "t", "auth2", "pod-b", 1)[0]
	r := put(c, id2)
	want(t, r, http.StatusInternalServerError, codeInternal)
	if !strings.Contains(r.errMessage(), "token") {
		t.Errorf("the 500 does not name the token: %s", r.body)
	}
}

// TestForwardPartitionMovedAfterBody: a PUT this pod owned when it began,
// whose partition moves to another writer while its body is being stored,
// is refused by the commit (not_owner); the body is read, so it is not
// forwarded (there is nothing left to stage): the client gets 503 with
// Retry-After, and its retry is forwarded to the new owner.
func TestForwardPartitionMovedAfterBody(t *testing.T) {
	store := memory.New()
	hs := hook.NewSet()
	a := newPod(t, store, "pod-a", func(o *envOptions) { o.engine.Hooks = hs.Func() })
	b := newPod(t, store, "pod-b")
	want(t, a.do("PUT", "/v1/tables/t", nil), http.StatusCreated, "")
	agreeOnOwners(t, "t", a, b)
	// Which of pod-a's partitions a third writer, pod-c, would take.
	mine := idsOwnedBy(t, a, "t", "moved", "pod-a", 64)
	c := newPod(t, store, "pod-c")
	agreeOnOwners(t, "t", a, b, c)
	var id string
	for _, cand := range mine {
		if c.owner("t", cand).Writer == "pod-c" {
			id = cand
			break
		}
	}
	if id == "" {
		t.Fatal("pod-c takes none of pod-a's partitions")
	}
	c.stop() // leaves: pod-a owns id's partition again
	// Bounds on waits for what must happen, generous for a loaded machine.
	deadline := time.Now().Add(time.Minute)
	for a.owner("t", id).Writer != "pod-a" || b.owner("t", id).Writer != "pod-a" {
		if time.Now().After(deadline) {
			t.Fatalf("%s's partition did not go back to pod-a", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	gate := hs.Pause("write:after-payload")
	payload := payloadOf("moved", 10<<10)
	done := make(chan response, 1)
	go func() { done <- a.put("t", id, payload) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	c = newPod(t, store, "pod-c") // back: it takes id's partition
	want(t, c.do("GET", "/v1/tables/t", nil), http.StatusOK, "")
	deadline = time.Now().Add(time.Minute)
	// pod-a sees pod-c own the partition, and has handed it over: its
	// writer, which could still commit there, has stopped.
	part := engine.PartitionOf(id, a.table("t").Partitions())
	for a.owner("t", id).Writer != "pod-c" || a.table("t").Writing(part) {
		if time.Now().After(deadline) {
			t.Fatalf("pod-a does not see pod-c own %s, or still writes its partition", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	gate.Release()
	r := <-done
	want(t, r, http.StatusServiceUnavailable, codeNotOwner)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 not_owner without Retry-After")
	}
	hs.Reset()
	want(t, a.put("t", id, payload), http.StatusCreated, "")
	readBoth(t, id, payload, a, b, c)
}
