package prometheus_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the service's module, whose binary the tests build and run.
const repoRoot = "../.."

// notYetExported are metrics the dashboard or the rules read that a
// rollstore built from this tree does not export yet, each with why. Keep
// it short (empty is best): an entry is a panel that shows nothing. An
// entry whose metric shows up in the scrape fails the test, so that it is
// removed.
var notYetExported = map[string]string{}

var (
	scrapeOnce    sync.Once
	scrapeSamples map[string]bool // sample names: a histogram's _bucket, _sum and _count
	scrapeErr     error
	scrapeDir     string // removed by TestMain
)

func TestMain(m *testing.M) {
	code := m.Run()
	if scrapeDir != "" {
		os.RemoveAll(scrapeDir)
	}
	os.Exit(code)
}

// exportedSamples builds rollstore, serves it on the memory store with a
// merger pass every second, drives traffic that touches every family
// (writes, an identical retry, a conflict, reads from the WAL and from the
// base, an absent id, payloads, a merge, a missing table, a consumer
// group's feed reads and commit) and returns the
// sample names of a /metrics scrape. Built and run once per test binary;
// skipped with -short.
func exportedSamples(t *testing.T) map[string]bool {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs rollstore; skipped with -short")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go tool on PATH to build rollstore")
	}
	scrapeOnce.Do(func() { scrapeSamples, scrapeErr = scrapeAfterTraffic() })
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	return scrapeSamples
}

// checkExported fails for every metric in uses (name -> where it is used)
// that the scrape lacks, unless notYetExported lists it.
func checkExported(t *testing.T, uses map[string][]string) {
	t.Helper()
	samples := exportedSamples(t)
	names := make([]string, 0, len(uses))
	for n := range uses {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		why, pending := notYetExported[n]
		switch {
		case pending && samples[n]:
			t.Errorf("%s is exported now: remove it from notYetExported (%s)", n, why)
		case pending:
			t.Logf("%s: not exported yet (%s); used by %s", n, why, strings.Join(uses[n], ", "))
		case !samples[n]:
			t.Errorf("%s is not in a scrape of rollstore after traffic; used by %s", n, strings.Join(uses[n], ", "))
		}
	}
}

func scrapeAfterTraffic() (map[string]bool, error) {
	var err error
	if scrapeDir, err = os.MkdirTemp("", "rollstore-metrics-"); err != nil {
		return nil, err
	}
	bin := filepath.Join(scrapeDir, "rollstore")
	// Built as the Dockerfile builds it (static, -trimpath), so that the
	// packages compiled for deploy/k8s's image binary are reused.
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "./cmd/rollstore")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/rollstore: %v\n%s", err, out)
	}

	cmd := exec.Command(bin, "serve", "--store", "memory", "--listen", "127.0.0.1:0", "--log-format", "json",
		"--merge-interval", "1s", "--sweep-every", "1")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROLLSTORE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	var logMu sync.Mutex
	var logs strings.Builder
	started := make(chan string, 1)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var m map[string]any
			if !sent && json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "rollstore starting" {
				started <- fmt.Sprint(m["listen"])
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	log := func() string { logMu.Lock(); defer logMu.Unlock(); return logs.String() }
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var addr string
	select {
	case addr = <-started:
	case err := <-exited:
		exited <- err
		return nil, fmt.Errorf("rollstore serve exited before it started (%v):\n%s", err, log())
	case <-time.After(60 * time.Second):
		return nil, fmt.Errorf("rollstore serve: no start log within 60 s:\n%s", log())
	}

	base := "http://" + addr
	client := &http.Client{Timeout: 30 * time.Second}
	do := func(method, path string, body []byte, header ...string) (int, []byte, error) {
		req, err := http.NewRequest(method, base+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	const record = "Rollstore-Record"
	big := bytes.Repeat([]byte("rollout "), 8<<10) // 64 KiB: a payload object of its own
	steps := []struct {
		method, path string
		body         []byte
		header       []string
		want         int
	}{
		{"PUT", "/v1/tables/demo", nil, nil, http.StatusCreated},
		{"PUT", "/v1/tables/demo/rollouts/r1", []byte("hello"), []string{record, `{"rollout_id":"run-1","sequence":0}`}, http.StatusCreated},
		{"PUT", "/v1/tables/demo/rollouts/r1", []byte("hello"), []string{record, `{"rollout_id":"run-1","sequence":0}`}, http.StatusOK},
		{"PUT", "/v1/tables/demo/rollouts/r1", []byte("other"), []string{record, `{"rollout_id":"run-1","sequence":0}`}, http.StatusConflict},
		{"PUT", "/v1/tables/demo/rollouts/r2", big, []string{record, `{"rollout_id":"run-1","sequence":1}`}, http.StatusCreated},
		{"GET", "/v1/tables/demo/rollouts/r1", nil, nil, http.StatusOK}, // from the WAL
		{"GET", "/v1/tables/demo/rollouts/absent", nil, nil, http.StatusNotFound},
		{"GET", "/v1/tables/demo/rollouts/r1/payload", nil, nil, http.StatusOK},
		{"POST", "/v1/tables/demo/merge", nil, nil, http.StatusOK},
		{"GET", "/v1/tables/demo/rollouts/r1", nil, nil, http.StatusOK}, // from the base
		{"GET", "/v1/tables/demo/rollouts/r2/payload", nil, nil, http.StatusOK},
		{"GET", "/v1/tables/demo/rollouts/r2/payload", nil, nil, http.StatusOK}, // the payload cache
		{"PUT", "/v1/tables/demo/rollouts/r3", []byte("after the merge"), []string{record, `{"rollout_id":"run-1","sequence":2}`}, http.StatusCreated},
		{"GET", "/v1/tables/missing", nil, nil, http.StatusNotFound}, // a store miss
	}
	for _, s := range steps {
		status, b, err := do(s.method, s.path, s.body, s.header...)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %v", s.method, s.path, err)
		}
		if status != s.want {
			return nil, fmt.Errorf("%s %s: %d, want %d: %s", s.method, s.path, status, s.want, b)
		}
	}
	// A consumer group reads the feed, then reads on from the cursor it
	// was given, which commits it: a pod exports the lag of the groups it
	// served, from their committed positions.
	cursor := ""
	for i := range 2 {
		path := "/v1/tables/demo/feed?group=ops&member=m1"
		if i > 0 {
			path += "&cursor=" + url.QueryEscape(cursor)
		}
		resp, err := client.Get(base + path)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Rollstore-Cursor") == "" {
			return nil, fmt.Errorf("GET %s: %d, cursor %q: %.300s", path, resp.StatusCode, resp.Header.Get("Rollstore-Cursor"), b)
		}
		cursor = resp.Header.Get("Rollstore-Cursor")
	}
	// The merger loop's pass sets the pending gauges and sweeps; the
	// feed's loop (every 15 s) the consumer lag gauges.
	deadline := time.Now().Add(60 * time.Second)
	for {
		status, b, err := do("GET", "/metrics", nil)
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("scrape: %d %v: %.300s", status, err, b)
		}
		samples := sampleNames(string(b))
		if samples["rollstore_pending_generations"] && samples["rollstore_sweep_passes_total"] &&
			samples["rollstore_merge_passes_total"] && samples["rollstore_feed_consumer_lag_seconds"] {
			return samples, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no merger pass within 60 s:\n%s\nlog:\n%s", b, log())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sampleNames returns the metric names of the samples of a text
// exposition.
func sampleNames(exposition string) map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(exposition, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			out[l[:i]] = true
		}
	}
	return out
}
