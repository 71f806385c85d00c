package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
)

// testCmdEnv runs commands in-process with the given environment only.
func testCmdEnv(vars map[string]string) (cmdEnv, *bytes.Buffer, *bytes.Buffer) {
	var out, errOut bytes.Buffer
	return cmdEnv{
		stdout:    &out,
		stderr:    &errOut,
		lookupEnv: func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
		environ: func() []string {
			var kv []string
			for k, v := range vars {
				kv = append(kv, k+"="+v)
			}
			return kv
		},
	}, &out, &errOut
}

type call struct {
	t    *testing.T
	base string
}

func (c call) do(method, path string, body []byte, hdr ...string) (int, http.Header, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// TestServeCurlSession runs `rollstore serve` in-process on a free port
// and replays the README's curl session: over a fresh local folder with no
// other settings (the embedded default), and over a fresh Azurite
// container configured as an Azure deployment would be, by environment.
func TestServeCurlSession(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		curlSession(t, map[string]string{"ROLLSTORE_DATA": filepath.Join(t.TempDir(), "data")})
	})
	t.Run("azurite", func(t *testing.T) {
		container := azuritetest.ContainerName()
		cs := azuritetest.ConnectionString(t)
		t.Cleanup(func() { azuritetest.DeleteContainer(t, cs, container) })
		curlSession(t, map[string]string{
			"ROLLSTORE_STORE":                   "azure",
			"ROLLSTORE_AZURE_AUTH":              "connection-string",
			"ROLLSTORE_AZURE_CONNECTION_STRING": cs,
			"ROLLSTORE_AZURE_CONTAINER":         container,
			"ROLLSTORE_AZURE_CREATE_CONTAINER":  "true",
			"ROLLSTORE_PREFIX":                  "staging-1",
		})
	})
}

func curlSession(t *testing.T, vars map[string]string) {
	env, _, stderr := testCmdEnv(vars)
	addrs := make(chan net.Addr, 1)
	env.listening = func(a net.Addr) { addrs <- a }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0"}, env) }()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String()
	case code := <-exit:
		t.Fatalf("serve exited %d: %s", code, stderr)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening")
	}
	c := call{t, base}
	payload := []byte("hello, rollstore: this is a rollout payload")

	if s, _, b := c.do("PUT", "/v1/tables/demo", nil); s != 201 {
		t.Fatalf("create table: %d %s", s, b)
	}
	s, h, b := c.do("PUT", "/v1/tables/demo/rollouts/run-1%2Fstep-0", payload,
		"Rollstore-Record", `{"rollout_id":"run-1","sequence":0,"reward":1.5,"metadata":{"env":"demo"}}`,
		"Content-Type", "text/plain")
	if s != 201 || !bytes.Contains(b, []byte(`"payload_sha256"`)) {
		t.Fatalf("put: %d %s", s, b)
	}
	etag := h.Get("ETag")
	read := func() {
		t.Helper()
		if s, _, b := c.do("GET", "/v1/tables/demo/rollouts/run-1%2Fstep-0", nil); s != 200 || !bytes.Contains(b, []byte(`"rollout_id":"run-1"`)) {
			t.Fatalf("metadata: %d %s", s, b)
		}
		s, h, b := c.do("GET", "/v1/tables/demo/rollouts/run-1%2Fstep-0/payload", nil)
		if s != 200 || !bytes.Equal(b, payload) || h.Get("ETag") != etag || h.Get("Content-Type") != "text/plain" {
			t.Fatalf("payload: %d %q %v", s, b, h)
		}
		s, h, b = c.do("GET", "/v1/tables/demo/rollouts/run-1%2Fstep-0/payload", nil, "Range", "bytes=0-4")
		if s != 206 || string(b) != "hello" || h.Get("Content-Range") != "bytes 0-4/43" {
			t.Fatalf("range: %d %q %v", s, b, h)
		}
	}
	read()
	s, _, b = c.do("POST", "/v1/tables/demo/merge", nil)
	if s != 200 || !bytes.Contains(b, []byte(`"version":1`)) {
		t.Fatalf("merge: %d %s", s, b)
	}
	read() // now from the base
	if s, _, b := c.do("GET", "/v1/tables/demo", nil); s != 200 || !bytes.Contains(b, []byte(`"rows":1`)) {
		t.Fatalf("table status: %d %s", s, b)
	}
	if s, _, _ := c.do("GET", "/readyz", nil); s != 200 {
		t.Fatalf("readyz %d", s)
	}

	cancel() // as SIGTERM would
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not drain")
	}
}

func TestServeHelpDocumentsEveryFlag(t *testing.T) {
	env, stdout, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"serve", "--help"}, env); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	help := stdout.String()
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg.flags(fs)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(help, "-"+f.Name+" ") && !strings.Contains(help, "-"+f.Name+"\n") {
			t.Errorf("--help does not list -%s", f.Name)
		}
		if !strings.Contains(help, "$"+envName(f.Name)+"]") {
			t.Errorf("--help does not give %s", envName(f.Name))
		}
	})
	if n < 25 {
		t.Fatalf("only %d flags", n)
	}
}

func TestServeConfigPrecedence(t *testing.T) {
	env, _, _ := testCmdEnv(map[string]string{
		"ROLLSTORE_LISTEN":         "127.0.0.1:9999",
		"ROLLSTORE_MAX_BODY":       "2GiB",
		"ROLLSTORE_MERGE_INTERVAL": "5s",
		"ROLLSTORE_SHARD":          "writer-3",
	})
	cfg, err := parseServe(env, []string{"--listen", ":7070", "--upload-idle-timeout", "0"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != ":7070" {
		t.Errorf("listen %q: the flag must win over the environment", cfg.listen)
	}
	if cfg.server.MaxBodyBytes != 2<<30 || cfg.engine.MaxPayload != 2<<30 {
		t.Errorf("max body %d / engine %d", cfg.server.MaxBodyBytes, cfg.engine.MaxPayload)
	}
	if cfg.server.MergeInterval != 5*time.Second || cfg.engine.Shard != "writer-3" {
		t.Errorf("merge interval %v shard %q", cfg.server.MergeInterval, cfg.engine.Shard)
	}
	if cfg.server.UploadIdleTimeout >= 0 {
		t.Errorf("idle timeout 0 must disable it, got %v", cfg.server.UploadIdleTimeout)
	}

	// Defaults with nothing set: the embedded configuration.
	env, _, _ = testCmdEnv(nil)
	cfg, err = parseServe(env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.listen != "127.0.0.1:8080" || cfg.store != "local" || cfg.data != "./data" || cfg.engine.Shard != "local-0" || cfg.server.MergeInterval <= 0 {
		t.Errorf("defaults %+v", cfg)
	}
	// Readers own no shard and run no merger.
	cfg, err = parseServe(env, []string{"--role", "reader"})
	if err != nil || cfg.engine.Shard != "" || cfg.server.MergeInterval >= 0 {
		t.Errorf("reader: shard %q merge %v err %v", cfg.engine.Shard, cfg.server.MergeInterval, err)
	}
}

func TestServeUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		vars map[string]string
	}{
		{[]string{"--no-such-flag"}, nil},
		{[]string{"--store", "s3"}, nil},
		{[]string{"--store", "azure"}, nil}, // no container
		{[]string{"--role", "boss"}, nil},
		{[]string{"--max-body", "lots"}, nil},
		{[]string{"--role", "writer", "--shard", ""}, nil}, // and no HOSTNAME
		{[]string{"--shard", "../x"}, nil},
		{[]string{"extra-arg"}, nil},
		{nil, map[string]string{"ROLLSTORE_MAX_BODY": "-1"}},
		{[]string{"--log-format", "xml"}, nil},
	} {
		env, _, stderr := testCmdEnv(c.vars)
		if code := run(context.Background(), append([]string{"serve"}, c.args...), env); code != 2 {
			t.Errorf("%q %v: exit %d, want 2 (%s)", c.args, c.vars, code, stderr)
		}
	}
	env, _, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"frobnicate"}, env); code != 2 {
		t.Errorf("unknown command: exit %d", code)
	}
	if code := run(context.Background(), nil, env); code != 2 {
		t.Errorf("no command: exit %d", code)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "123": 123, "64KiB": 64 << 10, "1GiB": 1 << 30, "2g": 2 << 30, "512 MiB": 512 << 20, "3k": 3 << 10,
		// As Kubernetes writes them (resources, ConfigMaps).
		"256Mi": 256 << 20, "1Gi": 1 << 30, "64Ki": 64 << 10, "2Ti": 2 << 40, "512mi": 512 << 20} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.5GiB", "GiB", "1PB", "99999999999TiB", "Mi", "1.5Gi", "1Pi", "1MB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
	var n int64 = 1 << 30
	if s := (byteSize{&n}).String(); s != "1GiB" {
		t.Errorf("String %q", s)
	}
}

func TestReadTokens(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tokens")
	if err := os.WriteFile(p, []byte("# current\n  tok-1  \n\ntok-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	toks, err := readTokens(p)
	if err != nil || len(toks) != 2 || toks[0] != "tok-1" || toks[1] != "tok-2" {
		t.Fatalf("tokens %q %v", toks, err)
	}
	if err := os.WriteFile(p, []byte("# nothing\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readTokens(p); err == nil {
		t.Fatal("a file without tokens was accepted")
	}
	if _, err := readTokens(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("a missing file was accepted")
	}
}

func TestServeHelpStatesBatchRowLimit(t *testing.T) {
	env, stdout, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"serve", "--help"}, env); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	if !strings.Contains(stdout.String(), "at most 4096 rows") {
		t.Fatalf("--help does not state the batch row limit:\n%s", stdout)
	}
}

// TestServeAdvertiseAndPartitions: --advertise-addr wins; else $POD_IP
// with the listening port (Kubernetes); else the listening address, with
// $HOSTNAME (or loopback) for a listener on every interface. --partitions
// is the default of new tables, 1..1024.
func TestServeAdvertiseAndPartitions(t *testing.T) {
	addr := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		vars      map[string]string
		args      []string
		listening string
		want      string
	}{
		{nil, []string{"--advertise-addr", "writer-0.rollstore:8080"}, "0.0.0.0:8080", "writer-0.rollstore:8080"},
		{map[string]string{"POD_IP": "10.1.2.3", "HOSTNAME": "w-1"}, []string{"--role", "writer"}, "0.0.0.0:8080", "10.1.2.3:8080"},
		{map[string]string{"POD_IP": "fd00::7"}, nil, "[::]:9000", "[fd00::7]:9000"},
		{map[string]string{"ROLLSTORE_ADVERTISE_ADDR": "10.9.9.9:1"}, nil, "127.0.0.1:5", "10.9.9.9:1"},
		{nil, nil, "127.0.0.1:41234", "127.0.0.1:41234"},
		{map[string]string{"HOSTNAME": "w-2"}, []string{"--role", "writer"}, "[::]:8080", "w-2:8080"},
		{nil, nil, "0.0.0.0:8080", "127.0.0.1:8080"},
	} {
		env, _, _ := testCmdEnv(c.vars)
		cfg, err := parseServe(env, c.args)
		if err != nil {
			t.Fatalf("%v %v: %v", c.vars, c.args, err)
		}
		if got := cfg.advertise(addr(c.listening)); got != c.want {
			t.Errorf("%v %v listening on %s: advertises %q, want %q", c.vars, c.args, c.listening, got, c.want)
		}
	}
	env, _, _ := testCmdEnv(nil)
	if cfg, err := parseServe(env, nil); err != nil || cfg.engine.Partitions != engine.DefaultPartitions {
		t.Errorf("default partitions: %v %v", cfg, err)
	}
	if cfg, err := parseServe(env, []string{"--partitions", "64"}); err != nil || cfg.engine.Partitions != 64 {
		t.Errorf("--partitions 64: %v", err)
	}
	for _, bad := range [][]string{{"--partitions", "0"}, {"--partitions", "1025"}, {"--advertise-addr", "nohost"}, {"--advertise-addr", ":8080"}, {"--advertise-addr", "h:0"}} {
		env, _, stderr := testCmdEnv(nil)
		if _, err := parseServe(env, bad); err == nil || !strings.Contains(stderr.String(), bad[0]) {
			t.Errorf("%v accepted (%q)", bad, stderr.String())
		}
	}
}
