package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rollstore/rollstore/api/openapitest"
	"github.com/rollstore/rollstore/client"
)

// The server's --max-concurrent-requests and --max-concurrent-uploads:
// the Python overload test fills the upload slots and reads with the rest.
const (
	pythonMaxConcurrent = 4
	pythonMaxUploads    = 2
)

// TestPythonClient runs the Python client's tests (python/tests) with the
// machine's python3 against a real `rollstore serve`: the binary is built,
// serves a temporary folder on a free loopback port with a bearer token,
// and every request of the Python tests passes through a proxy that checks
// it, and its answer, against api/openapi.yaml. The tests that need torch
// (python/tests/test_training.py: FeedDataset in a torch DataLoader) skip
// under a python3 without it; they then run again with the python3 that
// test/python/install-torch.sh finds or installs (Debian's python3-torch),
// and only where that cannot be had are they left out, the reason logged.
func TestPythonClient(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python client's tests (python/tests) were not run")
	}
	if testing.Short() {
		t.Skip("-short: the Python client's tests build and run the binary")
	}
	// Before the server starts: the first install downloads for a minute or more.
	torchPython, noTorch := installTorch(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "rollstore")
	build := exec.Command(goTool(t), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	token := "python-test-token"
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	data := filepath.Join(dir, "data")
	srv := startServeBinary(t, bin, "--listen", "127.0.0.1:0", "--data", data,
		"--auth-token-file", tokens, "--max-concurrent-requests", strconv.Itoa(pythonMaxConcurrent),
		"--max-concurrent-uploads", strconv.Itoa(pythonMaxUploads),
		// One client (one token) holds every upload slot in the overload
		// test: the server-wide limits are what it checks.
		"--max-client-share", "1",
		"--retain-versions", "1", "--retain-age", "0s", "--merge-interval", "0",
		"--log-format", "json", "--log-level", "info")

	v, err := openapitest.New()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var drift []string
	proxy := httptest.NewServer(checkingProxy(t, srv.url, v.Transport(http.DefaultTransport.(*http.Transport).Clone(), func(err error) {
		mu.Lock()
		defer mu.Unlock()
		drift = append(drift, err.Error())
	})))
	defer proxy.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.New(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	for c.Ready(ctx) != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the server never got ready: %s", srv.log())
		case <-time.After(20 * time.Millisecond):
		}
	}

	pyDir, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(),
		"ROLLSTORE_TEST_URL="+proxy.URL,
		"ROLLSTORE_TEST_DIRECT_URL="+srv.url,
		"ROLLSTORE_TEST_TOKEN="+token,
		"ROLLSTORE_TEST_MAX_UPLOADS="+strconv.Itoa(pythonMaxUploads),
		"ROLLSTORE_TEST_DATA_DIR="+data,
		"PYTHONPATH="+pyDir,
		"PYTHONDONTWRITEBYTECODE=1", // leave no __pycache__ in the tree
		"PYTHONUNBUFFERED=1",
	)
	runUnittest := func(python string, args ...string) (string, int, []string) {
		cmd := exec.CommandContext(ctx, python, append([]string{"-W", "always", "-m", "unittest"}, args...)...)
		cmd.Dir, cmd.Env = pyDir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s -m unittest: %v\n%s\nserver log:\n%s", python, err, out, srv.log())
		}
		ran, skips := unittestSummary(string(out))
		t.Logf("%s -m unittest: %d tests, skipped: %q", python, ran, skips)
		return string(out), ran, skips
	}
	out, ran, skips := runUnittest(python, "discover", "-s", "tests", "-v")
	if ran < 15 {
		t.Fatalf("only %d Python tests ran:\n%s", ran, out)
	}
	var arrowSkips, torchSkips int
	for _, s := range skips {
		// Only the tests that need pyarrow or torch may skip: everything
		// else must run against the server.
		switch {
		case strings.Contains(s, "pyarrow"):
			arrowSkips++
		case strings.Contains(s, "torch is not installed"):
			torchSkips++
		default:
			t.Errorf("a Python test was skipped: %s\n%s", s, out)
		}
	}
	if arrowSkips > pythonArrowTests {
		t.Errorf("%d Python tests skipped for want of pyarrow, only %d need it", arrowSkips, pythonArrowTests)
	}
	if torchSkips > 0 {
		// The python3 on PATH has no torch: the training tests run again
		// with the one that has (Debian's, which install-torch.sh installs).
		if torchPython == "" {
			t.Logf("the PyTorch tests were skipped (%d): no python3 with torch: %s", torchSkips, noTorch)
		} else {
			out, ran, skips := runUnittest(torchPython, "discover", "-s", "tests", "-p", "test_training.py", "-v")
			if ran == 0 {
				t.Errorf("%s ran no training test:\n%s", torchPython, out)
			}
			for _, s := range skips {
				if strings.Contains(s, "torch") {
					t.Errorf("a PyTorch test was skipped by %s, which imports torch: %s\n%s", torchPython, s, out)
				}
			}
		}
	}
	mu.Lock()
	for _, d := range drift {
		t.Error(d)
	}
	mu.Unlock()

	if err := srv.stop(); err != nil {
		t.Fatalf("rollstore serve did not drain cleanly: %v\n%s", err, srv.log())
	}
}

// pythonArrowTests is how many Python tests need pyarrow (and skip
// without it).
const pythonArrowTests = 2

// installTorch runs test/python/install-torch.sh (which installs Debian's
// python3-torch if no python3 imports torch) and returns the python3 that
// imports torch, or "" and why there is none.
func installTorch(t *testing.T) (python, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../test/python/install-torch.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Sprintf("%s could not install one (%v): %s", script, err, strings.TrimSpace(stderr.String()))
	}
	t.Logf("%s: %s", script, strings.TrimSpace(stderr.String()))
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1], ""
}

var (
	ranRe  = regexp.MustCompile(`(?m)^Ran (\d+) tests? in `)
	skipRe = regexp.MustCompile(`(?m)^(test\S+ \(.*\)).* \.\.\. skipped (.*)$`)
)

// unittestSummary reads `python3 -m unittest -v` output: the tests run and
// each skip, with its reason.
func unittestSummary(out string) (int, []string) {
	n := 0
	if m := ranRe.FindStringSubmatch(out); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	var skips []string
	for _, m := range skipRe.FindAllStringSubmatch(out, -1) {
		skips = append(skips, m[1]+": "+m[2])
	}
	return n, skips
}

// goTool is the go command that runs this test: go test puts its own
// GOROOT/bin first on the test's PATH.
func goTool(t *testing.T) string {
	p, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command to build rollstore with")
	}
	return p
}

// checkingProxy forwards to target through rt. Small JSON and NDJSON
// request bodies are read first, so the checking transport can validate
// them (it never reads a body that is not already in memory).
func checkingProxy(t *testing.T, target string, rt http.RoundTripper) http.Handler {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport:     rt,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() == nil { // not a client that went away (a stream closed half way)
				t.Errorf("proxy: %s %s: %v", r.Method, r.URL, err)
			}
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := r.Header.Get("Content-Type")
		if r.ContentLength > 0 && r.ContentLength <= 8<<20 && (strings.HasPrefix(ct, "application/x-ndjson") || strings.HasPrefix(ct, "application/json")) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		}
		rp.ServeHTTP(w, r)
	})
}

// serveProcess is a `rollstore serve` child process.
type serveProcess struct {
	cmd    *exec.Cmd
	url    string
	exited chan struct{} // closed once the process was waited for
	err    error         // its exit, once exited is closed
	mu     sync.Mutex
	logs   bytes.Buffer
}

// startServeBinary starts bin serve with args and waits for its "serving" log
// line, which names the address it listens on.
func startServeBinary(t *testing.T, bin string, args ...string) *serveProcess {
	t.Helper()
	p := &serveProcess{cmd: exec.Command(bin, append([]string{"serve"}, args...)...), exited: make(chan struct{})}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")} // no stray ROLLSTORE_* settings
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Bytes()
			p.mu.Lock()
			p.logs.Write(line)
			p.logs.WriteByte('\n')
			p.mu.Unlock()
			var rec struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" && rec.Addr != "" {
				select {
				case addr <- rec.Addr:
				default:
				}
			}
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	select {
	case a := <-addr:
		p.url = "http://" + a
	case <-p.exited:
		t.Fatalf("rollstore serve exited: %v\n%s", p.err, p.log())
	case <-time.After(time.Minute):
		t.Fatalf("rollstore serve did not log its address:\n%s", p.log())
	}
	return p
}

func (p *serveProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// stop sends SIGTERM and waits for a clean drain (exit 0).
func (p *serveProcess) stop() error {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.exited:
		return p.err
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("still running a minute after SIGTERM")
	}
}
