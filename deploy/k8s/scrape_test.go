package k8s_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestScrapeAsDeployed runs the image's binary once per workload with the
// environment the rendered Azure overlay gives its container (auth on, the
// listeners, budgets, role, shard), with only the store swapped for the
// in-memory one and the addresses for free loopback ports, and scrapes it
// the way the prometheus.io annotations say, without a token: 200 with
// rollstore's metrics. The API port's /metrics answers 401 without the
// token, which is why the annotations must not point there. The binary
// also must not warn about any variable the manifests set.
func TestScrapeAsDeployed(t *testing.T) {
	bin := imageBinary(t)
	s := renderOrFatal(t, loadTree(t), overlayDir)
	for _, w := range s.workloads {
		t.Run(w.name, func(t *testing.T) {
			target, errs := s.scrapeTarget(w)
			for _, err := range errs {
				t.Fatal(err)
			}
			c, err := mainContainer(w)
			if err != nil {
				t.Fatal(err)
			}
			e, eerrs := s.effectiveEnv(c)
			for _, err := range eerrs {
				t.Fatal(err)
			}
			if e.vals[envTokens] == "" {
				t.Fatalf("%s is not set: the overlay is expected to turn auth on", envTokens)
			}
			vars := map[string]string{}
			for k, v := range e.vals {
				vars[k] = v
			}
			for k, from := range e.from {
				switch from {
				case "fieldRef:metadata.name":
					vars[k] = w.name + "-0" // the pod's name
				case "fieldRef:status.podIP":
					vars[k] = "127.0.0.1" // the pod's IP
				default:
					t.Fatalf("%s comes from %s, which this test cannot stand in for", k, from)
				}
			}
			// The kubelet expands $(VAR) of variables defined before.
			for _, ev := range c.Env {
				if v, ok := vars[ev.Name]; ok && ev.ValueFrom == nil {
					for _, prev := range c.Env {
						if prev.Name == ev.Name {
							break
						}
						v = strings.ReplaceAll(v, "$("+prev.Name+")", vars[prev.Name])
					}
					vars[ev.Name] = v
				}
			}
			tokens := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(tokens, []byte("the-api-token\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			vars[envTokens] = tokens
			vars[envStore] = "memory" // no Azure here; everything else as deployed
			for _, k := range []string{envListen, envMetrics} {
				if _, _, err := net.SplitHostPort(vars[k]); err != nil {
					t.Fatalf("%s=%q: %v", k, vars[k], err)
				}
				vars[k] = "127.0.0.1:0" // the port the kernel picks; the log says which
			}
			if vars["ROLLSTORE_LOG_FORMAT"] != "json" {
				t.Fatalf("ROLLSTORE_LOG_FORMAT=%q: the manifests log JSON, and this test reads it", vars["ROLLSTORE_LOG_FORMAT"])
			}

			start, logs := runDeployed(t, bin, vars)
			apiAddr, metricsAddr := start["listen"], start["metrics_listen"]
			if start["store"] != "memory" || start["role"] != e.vals[envRole] {
				t.Errorf("start log %v: want store memory, role %s", start, e.vals[envRole])
			}
			if e.vals[envRole] == "writer" && start["advertise_addr"] != "127.0.0.1:8080" {
				t.Errorf("start log %v: a writer advertises its pod IP and the API port, want advertise_addr 127.0.0.1:8080", start)
			}

			// The scrape as the annotations configure it: port → the listener
			// of ROLLSTORE_METRICS_LISTEN (scrapeTarget checked they agree),
			// path as annotated, no credentials.
			status, body := get(t, "http://"+metricsAddr+target.path, "")
			if status != http.StatusOK || !strings.Contains(body, `rollstore_build_info{goversion=`) ||
				!strings.Contains(body, `version="`+testVersion+`"`) || !strings.Contains(body, "rollstore_http_requests_in_flight") {
				t.Errorf("scrape of %s%s (annotated port %d): %d\n%.300s", metricsAddr, target.path, target.port, status, body)
			}
			if status, _ := get(t, "http://"+apiAddr+metricsPath, ""); status != http.StatusUnauthorized {
				t.Errorf("/metrics on the API port without a token: %d, want 401 (auth is on as deployed)", status)
			}
			if status, _ := get(t, "http://"+apiAddr+metricsPath, "Bearer the-api-token"); status != http.StatusOK {
				t.Errorf("/metrics on the API port with the token: %d, want 200", status)
			}
			out := logs()
			if strings.Contains(out, "unknown environment variable") {
				t.Errorf("the binary does not know a variable the manifests set:\n%s", out)
			}
		})
	}
}

// runDeployed starts bin serve with exactly vars as its environment and
// returns the attributes of its start log line; logs stops it with
// SIGTERM, as the kubelet does, requires a clean exit and returns its log.
func runDeployed(t *testing.T, bin string, vars map[string]string) (start map[string]string, logs func() string) {
	t.Helper()
	var env []string
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	started := make(chan map[string]string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			var m map[string]any
			if !sent && json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "rollstore starting" {
				attrs := map[string]string{}
				for k, v := range m {
					attrs[k] = fmt.Sprint(v)
				}
				started <- attrs
				sent = true
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	stopped := false
	stop := func() string {
		if stopped {
			return all.String()
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan error, 1)
		go func() { <-done; exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve did not exit cleanly on SIGTERM: %v\n%s", err, all.String())
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("serve did not drain within 60 s")
		}
		return all.String()
	}
	t.Cleanup(func() { stop() })
	select {
	case start = <-started:
	case <-done:
		stop()
		t.Fatalf("serve exited before it started:\n%s", all.String())
	case <-time.After(60 * time.Second):
		stop()
		t.Fatalf("no start log within 60 s:\n%s", all.String())
	}
	return start, stop
}

func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
