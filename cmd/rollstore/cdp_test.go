package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// browser is a headless Chromium driven over the DevTools protocol, spoken
// on the pipe --remote-debugging-pipe opens (the browser reads commands on
// its fd 3 and writes answers and events on its fd 4, each message JSON
// ended by a NUL byte): no websocket, no library.
type browser struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser // the browser's fd 3

	mu      sync.Mutex
	next    int64
	pending map[int64]chan cdpMessage
	// console collects what the page logged and threw, shown when a test
	// fails.
	console []string
	closed  chan struct{}
	readErr error
	// stderr is the browser's standard error, a file: a pipe would keep
	// Wait waiting for the browser's children, which inherit it.
	stderr *os.File
}

type cdpMessage struct {
	ID        int64           `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// startBrowser starts Chromium in the background; it is stopped when the
// test ends.
func startBrowser(t *testing.T, chromium string) *browser {
	t.Helper()
	cmdR, cmdW, err := os.Pipe() // commands: we write, the browser reads (fd 3)
	if err != nil {
		t.Fatal(err)
	}
	evR, evW, err := os.Pipe() // answers and events: the browser writes (fd 4)
	if err != nil {
		t.Fatal(err)
	}
	b := &browser{t: t, in: cmdW, pending: map[int64]chan cdpMessage{}, closed: make(chan struct{})}
	b.cmd = exec.Command(chromium,
		"--headless", "--remote-debugging-pipe",
		// Root in a container: no sandbox; no GPU; /dev/shm may be tiny.
		"--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--no-first-run", "--no-default-browser-check",
		"--disable-extensions", "--disable-background-networking", "--disable-sync", "--disable-component-update",
		"--mute-audio", "--window-size=1280,1000", "--enable-logging=stderr", "about:blank")
	b.cmd.ExtraFiles = []*os.File{cmdR, evW}
	if b.stderr, err = os.CreateTemp(t.TempDir(), "chromium-stderr"); err != nil {
		t.Fatal(err)
	}
	b.cmd.Stderr = b.stderr
	// A process group of its own, so that stopping it stops its children
	// (zygote, renderers, GPU process) too.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	cmdR.Close()
	evW.Close()
	go b.read(evR)
	exited := make(chan struct{})
	go func() { _ = b.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// Browser.close, then the pipe closed: either makes it exit; the
		// group is killed if it has not within a few seconds.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = b.call(ctx, "", "Browser.close", nil, nil)
		cancel()
		b.in.Close()
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // the group: its children too
		<-exited
		if t.Failed() {
			b.mu.Lock()
			t.Logf("page console:\n%s\nchromium stderr (tail):\n%s", strings.Join(b.console, "\n"), b.stderrTail())
			b.mu.Unlock()
		}
		b.stderr.Close()
	})
	return b
}

// stderrTail is the end of the browser's standard error, without the
// lines about D-Bus, which a container lacks and Chromium reports at
// length.
func (b *browser) stderrTail() string {
	out, _ := os.ReadFile(b.stderr.Name())
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, "dbus") && strings.TrimSpace(l) != "" {
			keep = append(keep, l)
		}
	}
	if len(keep) > 30 {
		keep = keep[len(keep)-30:]
	}
	return strings.Join(keep, "\n")
}

func (b *browser) read(r io.ReadCloser) {
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	var err error
	for {
		var line []byte
		if line, err = br.ReadBytes(0); err != nil {
			break
		}
		var m cdpMessage
		if err = json.Unmarshal(line[:len(line)-1], &m); err != nil {
			break
		}
		b.mu.Lock()
		if ch, ok := b.pending[m.ID]; ok && m.ID != 0 {
			delete(b.pending, m.ID)
			ch <- m
		} else {
			b.noteEvent(m)
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.readErr = err
	b.mu.Unlock()
	close(b.closed)
}

// noteEvent keeps the page's console output and uncaught exceptions.
// b.mu is held.
func (b *browser) noteEvent(m cdpMessage) {
	switch m.Method {
	case "Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded":
		b.console = append(b.console, m.Method+" "+string(m.Params))
	}
}

// call sends a command (to a page's session if session is set) and
// decodes its result into out (if not nil).
func (b *browser) call(ctx context.Context, session, method string, params any, out any) error {
	if params == nil {
		params = struct{}{}
	}
	p, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan cdpMessage, 1)
	b.mu.Lock()
	b.next++
	id := b.next
	b.pending[id] = ch
	b.mu.Unlock()
	msg, err := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	if err != nil {
		return err
	}
	if _, err := b.in.Write(append(msg, 0)); err != nil {
		return fmt.Errorf("%s: writing to the browser: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(m.Result, out)
		}
		return nil
	case <-b.closed:
		b.mu.Lock()
		defer b.mu.Unlock()
		return fmt.Errorf("%s: the browser went away (%v); its stderr:\n%s", method, b.readErr, b.stderrTail())
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	}
}

// openPage starts a browser and opens a tab in it. Chromium now and then
// dies while starting (a crash before its first page, seen about once in
// thirty starts on a loaded machine); that is no verdict on what a test
// checks, so it is started again, twice at most.
func openPage(ctx context.Context, t *testing.T, chromium string) *page {
	t.Helper()
	for attempt := 1; ; attempt++ {
		b := startBrowser(t, chromium)
		p, err := b.newPage(ctx)
		if err == nil {
			return p
		}
		select {
		case <-b.closed:
			if attempt < 3 {
				t.Logf("Chromium died while starting (attempt %d), starting it again: %v", attempt, err)
				continue
			}
		default:
		}
		t.Fatal(err)
	}
}

// page is one tab, attached in flat mode (commands carry its session id).
type page struct {
	b       *browser
	session string
}

func (b *browser) newPage(ctx context.Context) (*page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	p := &page{b: b, session: att.SessionID}
	for _, domain := range []string{"Page", "Runtime", "Log"} {
		if err := b.call(ctx, p.session, domain+".enable", nil, nil); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *page) navigate(ctx context.Context, url string) error {
	var res struct {
		ErrorText string `json:"errorText"`
	}
	if err := p.b.call(ctx, p.session, "Page.navigate", map[string]any{"url": url}, &res); err != nil {
		return err
	}
	if res.ErrorText != "" {
		return fmt.Errorf("navigating to %s: %s", url, res.ErrorText)
	}
	return nil
}

// eval runs a JavaScript expression in the page and decodes its value
// (returned by value, so it must be JSON: strings, numbers, objects).
func (p *page) eval(ctx context.Context, expr string, out any) error {
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &res); err != nil {
		return err
	}
	if e := res.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg = e.Exception.Description
		}
		return fmt.Errorf("evaluating %q: %s", expr, msg)
	}
	if out == nil || len(res.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(res.Result.Value, out)
}

// waitFor evaluates expr (a JSON-valued expression) until ok accepts its
// value or ctx ends; it returns the last value seen. An evaluation that
// fails (the page is between two documents) is retried.
func (p *page) waitFor(ctx context.Context, what, expr string, ok func(json.RawMessage) bool) (json.RawMessage, error) {
	var last json.RawMessage
	var lastErr error
	for {
		var v json.RawMessage
		if lastErr = p.eval(ctx, expr, &v); lastErr == nil {
			last = v
			if ok(v) {
				return v, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("waiting for %s: %w (last value %s, last error %v)", what, ctx.Err(), last, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// screenshot returns a PNG of the page as drawn.
func (p *page) screenshot(ctx context.Context) ([]byte, error) {
	var res struct {
		Data []byte `json:"data"` // base64 in JSON
	}
	if err := p.b.call(ctx, p.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res); err != nil {
		return nil, err
	}
	if len(res.Data) == 0 {
		return nil, errors.New("empty screenshot")
	}
	return res.Data, nil
}
