package main

import (
	"bytes"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestServeStoreMetrics: `rollstore serve` counts the engine's store calls,
// and a scrape of /metrics over HTTP shows them for what the traffic did.
func TestServeStoreMetrics(t *testing.T) {
	api, _, stderr, stop := startServe(t, map[string]string{
		"ROLLSTORE_DATA": filepath.Join(t.TempDir(), "data"),
	}, "--listen", "127.0.0.1:0")
	c := call{t, "http://" + api}
	payload := bytes.Repeat([]byte("rollout "), 64)
	if s, _, b := c.do("PUT", "/v1/tables/demo", nil); s != http.StatusCreated {
		t.Fatalf("create table: %d %s", s, b)
	}
	if s, _, b := c.do("PUT", "/v1/tables/demo/rollouts/r1", payload, "Rollstore-Record", `{"rollout_id":"run-1","sequence":0}`); s != http.StatusCreated {
		t.Fatalf("put: %d %s", s, b)
	}
	if s, _, b := c.do("POST", "/v1/tables/demo/merge", nil); s != http.StatusOK {
		t.Fatalf("merge: %d %s", s, b)
	}
	if s, _, b := c.do("GET", "/v1/tables/demo/rollouts/r1/payload", nil); s != http.StatusOK || !bytes.Equal(b, payload) {
		t.Fatalf("payload: %d %q", s, b)
	}
	if s, _, _ := c.do("GET", "/v1/tables/missing", nil); s != http.StatusNotFound {
		t.Fatalf("status of a missing table: %d, want 404", s)
	}
	if s, _, _ := c.do("GET", "/v1/tables", nil); s != http.StatusOK {
		t.Fatalf("list tables: %d", s)
	}

	status, body := httpGet(t, "http://"+api+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("scrape: %d", status)
	}
	value := func(series string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			t.Errorf("no series %s in the scrape", series)
			return 0
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Errorf("%s: %v", series, err)
		}
		return v
	}
	// Creating a table writes its descriptor and registry, an append a
	// segment and the head, a merge a data file and a manifest; the writer
	// leases its shard; reads open manifests and indexes whole and the
	// payload by range; listing tables lists the store's root and heads
	// the descriptors; the missing table's descriptor is not found.
	for _, op := range []string{"put", "get", "get_range", "head", "list", "acquire_lease"} {
		if v := value(`rollstore_store_operations_total{operation="` + op + `"}`); v <= 0 {
			t.Errorf("rollstore_store_operations_total{operation=%q} = %v, want > 0", op, v)
		}
		if v := value(`rollstore_store_operation_duration_seconds_count{operation="` + op + `"}`); v <= 0 {
			t.Errorf("rollstore_store_operation_duration_seconds_count{operation=%q} = %v, want > 0", op, v)
		}
	}
	if v := value(`rollstore_store_written_bytes_total{operation="put"}`); v < float64(len(payload)) {
		t.Errorf("written bytes %v, want at least the payload's %d", v, len(payload))
	}
	if v := value(`rollstore_store_read_bytes_total{operation="get_range"}`); v < float64(len(payload)) {
		t.Errorf("bytes read by range %v, want at least the payload's %d", v, len(payload))
	}
	if !regexp.MustCompile(`(?m)^rollstore_store_operation_failures_total\{kind="not_found",operation="(get|head)"\} [1-9]`).MatchString(body) {
		t.Errorf("no not_found failure counted for the missing table:\n%s", grepLines(body, "rollstore_store_operation_failures_total"))
	}
	if regexp.MustCompile(`(?m)^rollstore_store_operation_failures_total\{kind="other"`).MatchString(body) {
		t.Errorf("unexpected failures:\n%s", grepLines(body, "rollstore_store_operation_failures_total"))
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, stderr)
	}
}

func grepLines(s, sub string) string {
	var out []byte
	for _, l := range bytes.Split([]byte(s), []byte("\n")) {
		if bytes.Contains(l, []byte(sub)) {
			out = append(append(out, l...), '\n')
		}
	}
	return string(out)
}
