package server

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/version"
	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/memory"
)

func metricValue(t *testing.T, body, series string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no series %s in:\n%s", series, grepMetrics(body, strings.SplitN(series, "{", 2)[0]))
	}
	return m[1]
}

func grepMetrics(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestMetrics(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.mustPut("t", "secret-id-1", []byte("x"))
	e.mustPut("t", "secret-id-2", []byte("y"))
	e.do("GET", rolloutURL("t", "secret-id-1"), nil)
	e.do("GET", rolloutURL("t", "secret-id-1")+"/payload", nil)
	e.do("GET", rolloutURL("t", "absent-id"), nil)
	e.merge("t")
	e.do("GET", rolloutURL("t", "secret-id-2"), nil)
	e.put("t", "secret-id-2", `{"rollout_id":"other"}`, []byte("y"))

	r := e.do("GET", "/metrics", nil)
	want(t, r, http.StatusOK, "")
	body := string(r.body)
	// Route templates, never raw paths or ids, label the requests.
	if strings.Contains(body, "secret-id") || strings.Contains(body, "absent-id") {
		t.Fatalf("an id leaked into metric labels:\n%s", grepMetrics(body, "rollstore_http"))
	}
	for _, s := range []string{
		`rollstore_http_request_duration_seconds_count{method="GET",route="/v1/tables/{table}/rollouts/{id}",status="200"}`,
		`rollstore_http_request_duration_seconds_count{method="GET",route="/v1/tables/{table}/rollouts/{id}",status="404"}`,
		`rollstore_http_request_duration_seconds_count{method="PUT",route="/v1/tables/{table}/rollouts/{id}",status="201"}`,
		`rollstore_http_request_duration_seconds_count{method="PUT",route="/v1/tables/{table}/rollouts/{id}",status="409"}`,
		`rollstore_http_request_duration_seconds_count{method="GET",route="/v1/tables/{table}/rollouts/{id}/payload",status="200"}`,
		`rollstore_http_request_duration_seconds_count{method="POST",route="/v1/tables/{table}/merge",status="200"}`,
	} {
		if v := metricValue(t, body, s); v == "0" {
			t.Errorf("%s is 0", s)
		}
	}
	if v := metricValue(t, body, `rollstore_reads_total{outcome="base_hit"}`); v == "0" {
		t.Error("no base hit counted")
	}
	if v := metricValue(t, body, `rollstore_reads_total{outcome="absent"}`); v == "0" {
		t.Error("no absent read counted")
	}
	metricValue(t, body, `rollstore_reads_total{outcome="missing_file"}`)
	metricValue(t, body, `rollstore_read_retries_total`)
	if v := metricValue(t, body, `rollstore_appends_total{result="conflict"}`); v != "1" {
		t.Errorf("conflicts counted %s, want 1", v)
	}
	if v := metricValue(t, body, `rollstore_merges_committed_total`); v != "1" {
		t.Errorf("merges counted %s, want 1", v)
	}
	metricValue(t, body, `rollstore_merge_passes_total{result="ok",trigger="api"}`)
	metricValue(t, body, `rollstore_merge_duration_seconds_count{trigger="api"}`)
	metricValue(t, body, `rollstore_cache_hit_ratio{cache="batches"}`)
	metricValue(t, body, `rollstore_payload_in_flight_bytes`)
	metricValue(t, body, `rollstore_payload_in_flight_limit_bytes`)
	// Two one-byte payloads acknowledged (the conflicting put adds
	// nothing), one of them read whole.
	if v := metricValue(t, body, `rollstore_payload_bytes_total{direction="written"}`); v != "2" {
		t.Errorf("payload bytes written %s, want 2", v)
	}
	if v := metricValue(t, body, `rollstore_payload_bytes_total{direction="read"}`); v != "1" {
		t.Errorf("payload bytes read %s, want 1", v)
	}
	metricValue(t, body, `go_goroutines`)
	bi := version.Get()
	if v := metricValue(t, body, `rollstore_build_info{goversion="`+bi.GoVersion+`",revision="`+bi.Revision+`",version="`+bi.Version+`"}`); v != "1" {
		t.Errorf("build info %s, want 1", v)
	}
}

func TestMergerPassAndPendingGauge(t *testing.T) {
	e := newEnv(t)
	e.createTable("t")
	e.createTable("u")
	e.mustPut("t", "a", []byte("a")) // an open generation: pending, not mergeable

	ctx := context.Background()
	e.srv.mergePass(ctx, true)
	body := string(e.do("GET", "/metrics", nil).body)
	if v := metricValue(t, body, `rollstore_pending_generations{table="t"}`); v != "1" {
		t.Fatalf("pending generations of t: %s, want 1", v)
	}
	if v := metricValue(t, body, `rollstore_pending_generations{table="u"}`); v != "0" {
		t.Fatalf("pending generations of u: %s, want 0", v)
	}
	metricValue(t, body, `rollstore_sweep_passes_total{result="ok"}`)
	metricValue(t, body, `rollstore_merge_passes_total{result="noop",trigger="loop"}`)

	// Once sealed, the merger merges it.
	tb, _ := e.db.Table(ctx, "t")
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.srv.mergePass(ctx, false)
	body = string(e.do("GET", "/metrics", nil).body)
	if v := metricValue(t, body, `rollstore_pending_generations{table="t"}`); v != "0" {
		t.Fatalf("pending generations after the merger: %s, want 0", v)
	}
	metricValue(t, body, `rollstore_merge_passes_total{result="ok",trigger="loop"}`)

	// A dropped table's gauges go away.
	want(t, e.do("DELETE", "/v1/tables/u", nil), http.StatusNoContent, "")
	e.srv.mergePass(ctx, false)
	if body := string(e.do("GET", "/metrics", nil).body); strings.Contains(body, `table="u"`) {
		t.Fatalf("gauges of a dropped table remain:\n%s", grepMetrics(body, "rollstore_pending"))
	}
}

func TestRunMergerMergesAndStops(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MergeInterval = 5 * time.Millisecond })
	e.createTable("t")
	e.mustPut("t", "a", []byte("a"))
	ctx := context.Background()
	tb, _ := e.db.Table(ctx, "t")
	if err := tb.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	committed := make(chan struct{})
	e.hooks.Do("merge:after-commit", func(context.Context) error { close(committed); return nil })

	mctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		e.srv.RunMerger(mctx)
		close(stopped)
	}()
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case <-committed:
	case <-wait.Done():
		t.Fatal("the merger loop never merged")
	}
	stop()
	select {
	case <-stopped:
	case <-wait.Done():
		t.Fatal("the merger loop did not stop")
	}
	st, err := tb.Status(ctx)
	if err != nil || st.Version != 1 {
		t.Fatalf("status after the merger: %+v %v", st, err)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	e := newEnv(t, func(o *envOptions) { o.server.MaxConcurrentRequests = 1 })
	e.createTable("t")
	gate := e.hooks.Pause("write:after-payload")
	done := e.startPut(e.ts.URL, "t", "slow", []byte("holds the only slot"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := gate.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/v1/tables", nil)
	want(t, r, http.StatusServiceUnavailable, codeOverloaded)
	if r.header.Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	want(t, e.do("GET", "/healthz", nil), http.StatusOK, "") // probes are not limited
	want(t, e.do("GET", "/metrics", nil), http.StatusOK, "")
	gate.Release()
	want(t, <-done, http.StatusCreated, "")
	want(t, e.do("GET", "/v1/tables", nil), http.StatusOK, "")
}

func TestRequestIDs(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/v1/tables", nil, "X-Request-Id", "caller-42")
	if r.header.Get("X-Request-Id") != "caller-42" {
		t.Fatalf("request id %q, want the caller's", r.header.Get("X-Request-Id"))
	}
	r = e.do("GET", "/v1/tables/nope", nil, "X-Request-Id", "bad id\twith junk")
	id := r.header.Get("X-Request-Id")
	if id == "" || strings.Contains(id, "junk") {
		t.Fatalf("request id %q for an unusable caller id", id)
	}
	var b errorBody
	r.decode(t, &b)
	if b.Error.RequestID != id {
		t.Fatalf("error body request id %q, header %q", b.Error.RequestID, id)
	}
}

// A drop leaves its registry and head tombstones (they fence writers of the
// dropped incarnation in other processes); the sweep pass collects them
// once they are older than the orphan grace.
func TestSweepPassCollectsDroppedTables(t *testing.T) {
	mem := memory.New()
	e := newEnv(t, func(o *envOptions) {
		o.store = mem
		o.engine.OrphanGrace = time.Nanosecond
	})
	e.createTable("t")
	e.mustPut("t", "a", []byte("a"))
	want(t, e.do("DELETE", "/v1/tables/t", nil), http.StatusNoContent, "")
	ctx := context.Background()
	keys := func() []string {
		var ks []string
		if err := mem.List(ctx, "t/", objstore.ListOptions{}, func(en objstore.Entry) error {
			ks = append(ks, en.Key)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	if len(keys()) == 0 {
		t.Fatal("the drop left no tombstones: nothing to check")
	}
	time.Sleep(time.Millisecond) // older than the grace
	e.srv.mergePass(ctx, false)
	if len(keys()) == 0 {
		t.Fatal("a pass without sweep collected the tombstones")
	}
	e.srv.mergePass(ctx, true)
	if ks := keys(); len(ks) != 0 {
		t.Fatalf("after the sweep pass: %v left", ks)
	}
}
