package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// proc is one rollstore process.
type proc struct {
	name  string // w-1, w-1', merger'', reader-0, ...
	role  string
	shard string
	addr  string // 127.0.0.1:port
	url   string // http://addr
	log   string // file receiving its stdout and stderr
	cmd   *exec.Cmd

	exited  chan struct{} // closed once the process has been waited for
	waitErr error

	// Counters kept by the test's clients, not by the process.
	inflight    atomic.Int64 // writes being sent to it
	inflightBig atomic.Int64 // ... of which external (> 1 MiB) payloads
	acks        atomic.Int64 // writes it acknowledged
	shardOwned  atomic.Int64 // writes it refused with 503 shard_owned
}

func (p *proc) String() string { return p.name }

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// signal sends sig to the process by its PID.
func (p *proc) signal(sig syscall.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// waitExit waits for the process to end, at most d.
func (p *proc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

// cluster starts and tracks the processes of one test, all on one fresh
// container and prefix, and kills whatever is left when the test ends.
type cluster struct {
	t      *testing.T
	start  time.Time
	env    []string
	flags  []string // common to every process
	logDir string
	http   *http.Client

	mu    sync.Mutex
	procs []*proc
	seq   int
}

func newCluster(t *testing.T, connectionString string, flags []string) *cluster {
	logDir := os.Getenv("ROLLSTORE_E2E_LOGS")
	if logDir == "" {
		logDir = t.TempDir()
	} else {
		logDir = filepath.Join(logDir, time.Now().Format("20060102-150405"))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The children get a clean ROLLSTORE_ environment: only what the test
	// sets, never the caller's configuration.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ROLLSTORE_") {
			env = append(env, kv)
		}
	}
	env = append(env, "ROLLSTORE_AZURE_CONNECTION_STRING="+connectionString)
	c := &cluster{
		t:      t,
		start:  time.Now(),
		env:    env,
		flags:  flags,
		logDir: logDir,
		http:   &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}},
	}
	t.Cleanup(c.shutdown)
	return c
}

// logf logs with the time since the cluster started.
func (c *cluster) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[%5.1fs] %s", time.Since(c.start).Seconds(), fmt.Sprintf(format, args...))
}

// startProc starts a process and waits until its /readyz answers 200.
func (c *cluster) startProc(name, role, shard string) *proc {
	c.t.Helper()
	const tries = 3
	for try := 1; ; try++ {
		p, err := c.spawn(name, role, shard)
		if err != nil {
			c.t.Fatalf("starting %s: %v", name, err)
		}
		err = c.waitReady(p, 60*time.Second)
		if err == nil {
			c.logf("started %s (%s, shard %q, pid %d) on %s", name, role, shard, p.pid(), p.addr)
			return p
		}
		// The port picked may have been taken between its probe and the
		// process's bind; anything else is fatal.
		if p.hasExited() && try < tries && logContains(p.log, "address already in use") {
			continue
		}
		c.t.Fatalf("%s did not become ready: %v", name, err)
	}
}

func (c *cluster) spawn(name, role, shard string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.seq++
	seq := c.seq
	c.mu.Unlock()
	p := &proc{
		name:   name,
		role:   role,
		shard:  shard,
		addr:   fmt.Sprintf("127.0.0.1:%d", port),
		log:    filepath.Join(c.logDir, fmt.Sprintf("%02d-%s.log", seq, strings.ReplaceAll(name, "'", "+"))),
		exited: make(chan struct{}),
	}
	p.url = "http://" + p.addr
	args := append([]string{"serve", "--listen", p.addr, "--role", role}, c.flags...)
	if shard != "" {
		args = append(args, "--shard", shard)
	}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(rollstoreBin, args...)
	p.cmd.Env = c.env
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	go func() {
		p.waitErr = p.cmd.Wait()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls /readyz until it answers 200, the process exits or the
// deadline passes.
func (c *cluster) waitReady(p *proc, d time.Duration) error {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.url+"/readyz", nil)
		resp, err := c.http.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		cancel()
		if err == nil && resp.StatusCode == http.StatusOK {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("exited (%v) before it was ready", p.waitErr)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last: %v)", d, errOrStatus(err, resp))
		}
	}
}

func errOrStatus(err error, resp *http.Response) string {
	if err != nil {
		return err.Error()
	}
	return resp.Status
}

// kill ends a process with SIGKILL and waits for it.
func (c *cluster) kill(p *proc) {
	c.t.Helper()
	if err := p.signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Fatalf("kill -9 %s: %v", p, err)
	}
	if !p.waitExit(30 * time.Second) {
		c.t.Fatalf("%s (pid %d) did not exit after SIGKILL", p, p.pid())
	}
}

// shutdown kills, by PID, every process still running, and prints their
// logs if the test failed.
func (c *cluster) shutdown() {
	c.mu.Lock()
	procs := append([]*proc(nil), c.procs...)
	c.mu.Unlock()
	for _, p := range procs {
		if !p.hasExited() {
			_ = p.signal(syscall.SIGKILL)
		}
	}
	for _, p := range procs {
		if !p.waitExit(30 * time.Second) {
			c.t.Errorf("%s (pid %d) still running after SIGKILL", p, p.pid())
		}
	}
	if c.t.Failed() {
		for _, p := range procs {
			c.dumpLog(p)
		}
	}
}

// dumpLog prints what a process logged beyond routine requests: its
// warnings and errors other than 503 answers (at most 60), the requests
// answered with another 5xx (at most 20), and its last 15 lines.
func (c *cluster) dumpLog(p *proc) {
	f, err := os.Open(p.log)
	if err != nil {
		c.t.Logf("log of %s: %v", p, err)
		return
	}
	defer f.Close()
	var notable, failed, tail []string
	total, more := 0, 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		total++
		request := strings.Contains(line, " msg=request ")
		switch {
		case request && strings.Contains(line, " status=5") && !strings.Contains(line, " status=503 "):
			if len(failed) < 20 {
				failed = append(failed, line)
			} else {
				more++
			}
		case !request && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") || strings.Contains(line, "panic")):
			if len(notable) < 60 {
				notable = append(notable, line)
			} else {
				more++
			}
		}
		tail = append(tail, line)
		if len(tail) > 15 {
			tail = tail[1:]
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "==== %s (%s, shard %q, pid %d, exit: %v): %d lines in %s\n", p, p.role, p.shard, p.pid(), p.waitErr, total, p.log)
	fmt.Fprintf(&b, "---- warnings, errors and 5xx answers other than 503 (%d more not shown):\n", more)
	for _, l := range append(notable, failed...) {
		b.WriteString(l + "\n")
	}
	b.WriteString("---- last lines:\n")
	for _, l := range tail {
		b.WriteString(l + "\n")
	}
	c.t.Log(b.String())
}

func logContains(path, s string) bool {
	data, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(data), s)
}

// freePort returns a TCP port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls cond every interval until it holds, or fails the test
// after d with what.
func (c *cluster) waitFor(what string, d, interval time.Duration, cond func() bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for !cond() {
		if time.Since(start) > d {
			c.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		<-tick.C
	}
	return time.Since(start)
}
