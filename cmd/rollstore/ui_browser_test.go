package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// installChromium runs test/browser/install-chromium.sh (which installs
// Debian's chromium package if no Chromium is there) and returns the
// browser's path, or skips the test saying why there is none.
func installChromium(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	script, err := filepath.Abs("../../test/browser/install-chromium.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, script)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Skipf("no Chromium for the status page's browser test, and %s could not install one (%v): %s",
			script, err, strings.TrimSpace(stderr.String()))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	return lines[len(lines)-1]
}

// artifactDir is where the browser test leaves its screenshots:
// $ROLLSTORE_TEST_ARTIFACTS if set (kept), else the test's temporary
// folder (removed after the test).
func artifactDir(t *testing.T) string {
	dir := os.Getenv("ROLLSTORE_TEST_ARTIFACTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pageFields reads what the status page shows for table demo: every
// element with a data-field in its section (by its rendered text), the
// merger line, and how many times the page has refreshed.
const pageFields = `(() => {
  const f = {};
  const s = document.querySelector('[data-table="demo"]');
  if (s) for (const e of s.querySelectorAll('[data-field]')) f[e.dataset.field] = e.innerText;
  const m = document.querySelector('[data-field="merger"]');
  f.merger = m ? m.innerText : "";
  f.passes = m ? m.dataset.passes : "";
  const r = document.getElementById("refresh");
  f.polls = r && r.dataset.polls ? r.dataset.polls : "0";
  f.body = document.body ? document.body.innerText : "";
  return f;
})()`

type shownFields map[string]string

func decodeFields(v json.RawMessage) shownFields {
	var f shownFields
	_ = json.Unmarshal(v, &f)
	return f
}

// TestStatusPageInBrowser serves `rollstore serve` with a token, over real
// HTTP, with a table holding rows, and loads /ui in headless Chromium: the
// login form, then the page as drawn by its script (the figures of the
// table, its owners, its merges, the merger's last pass), then the page
// redrawn in place (no reload) after more rows are written. Screenshots go
// to $ROLLSTORE_TEST_ARTIFACTS (or the test's temporary folder).
//
// Every wait polls the page for its condition until a generous deadline,
// so the test passes on a loaded machine; a page that stops refreshing
// fails it.
func TestStatusPageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	chromium := installChromium(t)
	start := time.Now()

	const token = "ui-browser-test-token"
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	apiAddr, _, _, _ := startServe(t, nil, "--listen", "127.0.0.1:0", "--store", "memory", "--auth-token-file", tokens,
		// The merger runs often enough for the page to show a pass; the
		// generations stay open, so what is pending is what the test wrote.
		"--merge-interval", "300ms", "--generation-max-age", "1h")
	base := "http://" + apiAddr
	api := call{t: t, base: base}
	auth := []string{"Authorization", "Bearer " + token}
	put := func(id string) {
		t.Helper()
		code, _, body := api.do("PUT", "/v1/tables/demo/rollouts/"+id, []byte("payload of "+id),
			append([]string{"Rollstore-Record", `{"rollout_id":"run-1"}`, "Content-Type", "text/plain"}, auth...)...)
		if code != 201 {
			t.Fatalf("PUT %s: %d %s", id, code, body)
		}
	}
	if code, _, body := api.do("PUT", "/v1/tables/demo", nil, auth...); code != 201 {
		t.Fatalf("create table: %d %s", code, body)
	}
	put("a-0")
	put("a-1")
	if code, _, body := api.do("POST", "/v1/tables/demo/merge", nil, auth...); code != 200 {
		t.Fatalf("merge: %d %s", code, body)
	}
	put("b-0")
	// A learner of group "learners" reads two rows and commits them with
	// its next read (empty: max_rows is per answer, the cursor moved).
	code, _, body := api.do("GET", "/v1/tables/demo/feed?group=learners&member=m0&max_rows=2", nil, auth...)
	var page struct {
		Rows   []json.RawMessage `json:"rows"`
		Cursor string            `json:"cursor"`
	}
	if code != 200 || json.Unmarshal(body, &page) != nil || len(page.Rows) != 2 {
		t.Fatalf("feed: %d %s", code, body)
	}
	if code, _, body := api.do("GET", "/v1/tables/demo/feed?group=learners&member=m0&max_rows=1&cursor="+page.Cursor, nil, auth...); code != 200 {
		t.Fatalf("feed: %d %s", code, body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	p := openPage(ctx, t, chromium)
	artifacts := artifactDir(t)
	shot := func(name string) {
		t.Helper()
		png, err := p.screenshot(ctx)
		if err != nil {
			t.Errorf("screenshot: %v", err)
			return
		}
		path := filepath.Join(artifacts, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", path)
	}

	// Without the session cookie the page is the login form.
	if err := p.navigate(ctx, base+"/ui"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.waitFor(ctx, "the login form", `!!document.querySelector('form#login input[name="token"]')`,
		func(v json.RawMessage) bool { return string(v) == "true" }); err != nil {
		t.Fatal(err)
	}
	if err := p.eval(ctx, `(() => { document.querySelector('input[name="token"]').value = `+strconv.Quote(token)+`;
		document.querySelector('form#login').submit(); })()`, nil); err != nil {
		t.Fatal(err)
	}

	// Logged in, the script draws the table: three rows, two of them in
	// base version 1 (the merge), one pending, in the table's 16 partitions,
	// all owned by this process; the merge is listed; the merger's passes
	// are reported.
	v, err := p.waitFor(ctx, "the table drawn with its 3 rows and a merger pass", pageFields, func(v json.RawMessage) bool {
		f := decodeFields(v)
		return f["rows"] == "3" && f["passes"] != "" && f["passes"] != "0"
	})
	if err != nil {
		t.Fatal(err)
	}
	f := decodeFields(v)
	for field, want := range map[string]string{"version": "1", "base_rows": "2", "pending_rows": "1", "partitions": "16"} {
		if f[field] != want {
			t.Errorf("%s shows %q, want %q", field, f[field], want)
		}
	}
	if n, err := strconv.Atoi(f["pending_generations"]); err != nil || n < 1 {
		t.Errorf("pending generations shows %q", f["pending_generations"])
	}
	if !strings.Contains(f["owners"], "local-0 (this process)") || !strings.Contains(f["owners"], "16") || !strings.Contains(f["owners"], "p0015") {
		t.Errorf("owners show %q", f["owners"])
	}
	if !strings.Contains(f["merges"], "api") || !strings.Contains(f["merges"], "merged") || !strings.Contains(f["merges"], "v1") {
		t.Errorf("merges show %q", f["merges"])
	}
	if !strings.Contains(f["merger"], "every 300 ms") || !strings.Contains(f["merger"], "pass ") {
		t.Errorf("merger shows %q", f["merger"])
	}
	// The group: its member, and one row behind the two it committed
	// (three rows, and the member's third read is not committed yet).
	if !strings.Contains(f["consumers"], "learners") || !strings.Contains(f["consumers"], "m0 (16)") {
		t.Errorf("consumers show %q", f["consumers"])
	}
	for _, s := range []string{"rollstore", "demo", "Pending generations", "Partitions and owners", "Consumers", "Recent merges", "shard local-0"} {
		if !strings.Contains(f["body"], s) {
			t.Errorf("the page does not show %q:\n%s", s, f["body"])
		}
	}
	shot("ui-status.png")

	// More rows: the page, not reloaded, shows them within a few of its
	// refreshes.
	if err := p.eval(ctx, `window.rollstoreTestMark = "same document"`, nil); err != nil {
		t.Fatal(err)
	}
	put("b-1")
	put("b-2")
	// The page refreshes every 2 s: a minute is room for many refreshes
	// on a loaded machine, and a page that does not refresh fails here.
	updateCtx, cancelUpdate := context.WithTimeout(ctx, time.Minute)
	defer cancelUpdate()
	v, err = p.waitFor(updateCtx, "the page to show 5 rows", pageFields, func(v json.RawMessage) bool { return decodeFields(v)["rows"] == "5" })
	if err != nil {
		t.Fatal(err)
	}
	if f := decodeFields(v); f["pending_rows"] != "3" || f["base_rows"] != "2" {
		t.Errorf("after the writes: pending rows %q, base rows %q", f["pending_rows"], f["base_rows"])
	}
	var mark string
	if err := p.eval(ctx, `window.rollstoreTestMark || "reloaded"`, &mark); err != nil || mark != "same document" {
		t.Errorf("the page was reloaded rather than redrawn (%q, %v)", mark, err)
	}
	shot("ui-status-updated.png")
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}
