package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollstore/rollstore/internal/version"
	"github.com/rollstore/rollstore/objstore/azure"
)

func TestVersionCommand(t *testing.T) {
	want := version.Get().String() + "\n"
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		env, stdout, stderr := testCmdEnv(nil)
		if code := run(context.Background(), args, env); code != 0 || stdout.String() != want {
			t.Errorf("%q: exit %d, stdout %q (want %q), stderr %s", args, code, stdout, want, stderr)
		}
	}
	env, _, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"version", "extra"}, env); code != 2 {
		t.Errorf("version with an argument: exit %d, want 2", code)
	}
}

// TestMakeBuildStampsVersion builds the binary with the Makefile's build
// target and checks the version it reports. Skipped with -short.
func TestMakeBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	makeTool, err := exec.LookPath("make")
	if err != nil {
		t.Skip("no make")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "rollstore")
	build := exec.Command(makeTool, "-s", "-C", root, "build", "BIN="+bin, "VERSION=v9.8.7-test", "REVISION=0123abcd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	runBin := func(bin string, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	want := "rollstore v9.8.7-test (revision 0123abcd, "
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if got := runBin(bin, args...); !strings.HasPrefix(got, want) {
			t.Errorf("%q: %q, want the stamped %q…", args, got, want)
		}
	}

}

// TestPlainBuildFallsBackToBuildInfo: without -ldflags, the binary reports
// the revision the Go toolchain recorded. Skipped with -short, and where
// the toolchain records none (a git worktree, no git).
func TestPlainBuildFallsBackToBuildInfo(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	runBin := func(bin string, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", bin, args, err, out)
		}
		return string(out)
	}
	plain := filepath.Join(t.TempDir(), "rollstore")
	gb := exec.Command("go", "build", "-buildvcs=true", "-o", plain, "./cmd/rollstore")
	gb.Dir = root
	if out, err := gb.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	meta, err := exec.Command("go", "version", "-m", plain).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*build\s+vcs\.revision=(\S+)$`).FindSubmatch(meta)
	if m == nil {
		// A git worktree, or no git: nothing recorded to fall back on
		// (TestResolve in internal/version covers the logic).
		t.Skipf("the toolchain recorded no VCS revision here:\n%s", meta)
	}
	if got := runBin(plain, "version"); !strings.Contains(got, "(revision "+string(m[1])) {
		t.Errorf("plain go build: %q, want the recorded revision %s", got, m[1])
	}
}

// startServe runs serve in-process and returns the API and metrics
// addresses; cancel stops it, and the exit code arrives on the channel.
func startServe(t *testing.T, vars map[string]string, args ...string) (api, metrics string, stderr *bytes.Buffer, stop func() int) {
	t.Helper()
	env, _, stderr := testCmdEnv(vars)
	addrs, maddrs := make(chan net.Addr, 1), make(chan net.Addr, 1)
	env.listening = func(a net.Addr) { addrs <- a }
	env.metricsListening = func(a net.Addr) { maddrs <- a }
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- run(ctx, append([]string{"serve"}, args...), env) }()
	select {
	case a := <-addrs:
		api = a.String()
	case code := <-exit:
		cancel()
		t.Fatalf("serve exited %d: %s", code, stderr)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start listening")
	}
	select {
	case a := <-maddrs:
		metrics = a.String()
	default:
	}
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case code := <-exit:
			return code
		case <-time.After(30 * time.Second):
			t.Fatal("serve did not drain")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	return api, metrics, stderr, stop
}

func httpGet(t *testing.T, url string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
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

// TestServeMetricsListener: with auth on, a scrape of --metrics-listen
// needs no token and gets rollstore's metrics; /metrics on the API
// listener still needs the token.
func TestServeMetricsListener(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	api, metrics, stderr, stop := startServe(t, map[string]string{
		"ROLLSTORE_STORE":           "memory",
		"ROLLSTORE_AUTH_TOKEN_FILE": tokens,
		"ROLLSTORE_METRICS_LISTEN":  "127.0.0.1:0",
	}, "--listen", "127.0.0.1:0")
	if metrics == "" {
		t.Fatalf("no metrics listener: %s", stderr)
	}
	status, body := httpGet(t, "http://"+metrics+"/metrics")
	bi := version.Get()
	buildInfo := fmt.Sprintf(`rollstore_build_info{goversion=%q,revision=%q,version=%q} 1`, bi.GoVersion, bi.Revision, bi.Version)
	if status != http.StatusOK || !strings.Contains(body, buildInfo) || !strings.Contains(body, "rollstore_reads_total") {
		t.Fatalf("scrape without a token: %d, want 200 with %s:\n%.400s", status, buildInfo, body)
	}
	if status, _ := httpGet(t, "http://"+metrics+"/v1/tables"); status != http.StatusNotFound {
		t.Errorf("the metrics listener served the API: %d", status)
	}
	if status, _ := httpGet(t, "http://"+api+"/metrics"); status != http.StatusUnauthorized {
		t.Errorf("API /metrics without a token: %d, want 401", status)
	}
	if status, _ := httpGet(t, "http://"+api+"/metrics", "Authorization", "Bearer s3cret"); status != http.StatusOK {
		t.Errorf("API /metrics with the token: %d, want 200", status)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "metrics_listen="+metrics) {
		t.Errorf("the start log does not name the metrics listener %s:\n%s", metrics, stderr)
	}
}

// goFieldName matches identifiers such as MaxConcurrentRequests or
// AccountName, which mean nothing to someone setting flags.
var goFieldName = regexp.MustCompile(`\b[A-Z][a-z]{2,}(?:[A-Z][a-z]+)+\b`)

// TestServeValidatesBeforeCreatingAnything: every bad setting is refused
// before serve touches the disk (the default local store creates ./data),
// and the message names the flag and its variable, never a Go field.
func TestServeValidatesBeforeCreatingAnything(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, c := range []struct {
		args []string
		vars map[string]string
		code int
		want string // the setting the message must name
	}{
		{[]string{"--listen=bad"}, nil, 2, "--listen / ROLLSTORE_LISTEN"},
		{nil, map[string]string{"ROLLSTORE_LISTEN": "127.0.0.1:99999"}, 2, "--listen / ROLLSTORE_LISTEN"},
		{[]string{"--listen", taken.Addr().String()}, nil, 1, "--listen / ROLLSTORE_LISTEN"},
		{[]string{"--metrics-listen", "nope"}, nil, 2, "--metrics-listen / ROLLSTORE_METRICS_LISTEN"},
		{[]string{"--listen", "127.0.0.1:0", "--metrics-listen", taken.Addr().String()}, nil, 1, "--metrics-listen / ROLLSTORE_METRICS_LISTEN"},
		{[]string{"--listen", "127.0.0.1:8089", "--metrics-listen", "127.0.0.1:8089"}, nil, 2, "must differ from --listen"},
		{[]string{"--lease-duration", "5s"}, nil, 2, "--lease-duration / ROLLSTORE_LEASE_DURATION"},
		{[]string{"--max-concurrent-requests", "0"}, nil, 2, "--max-concurrent-requests / ROLLSTORE_MAX_CONCURRENT_REQUESTS"},
		{[]string{"--sweep-every", "-1"}, nil, 2, "--sweep-every / ROLLSTORE_SWEEP_EVERY"},
		{[]string{"--write-max-pending", "0"}, nil, 2, "--write-max-pending / ROLLSTORE_WRITE_MAX_PENDING"},
		{[]string{"--write-max-pending-per-shard", "-1"}, nil, 2, "--write-max-pending-per-shard / ROLLSTORE_WRITE_MAX_PENDING_PER_SHARD"},
		{nil, map[string]string{"ROLLSTORE_PAYLOAD_CACHE": "-1MiB"}, 2, "ROLLSTORE_PAYLOAD_CACHE"},
		{[]string{"--payload-cache-max-item", "0"}, nil, 2, "--payload-cache-max-item / ROLLSTORE_PAYLOAD_CACHE_MAX_ITEM"},
		{[]string{"--writer-idle-after", "0s"}, nil, 2, "--writer-idle-after / ROLLSTORE_WRITER_IDLE_AFTER"},
		{[]string{"--retain-versions", "0"}, nil, 2, "--retain-versions / ROLLSTORE_RETAIN_VERSIONS"},
		{[]string{"--drain-timeout", "-1s"}, nil, 2, "--drain-timeout / ROLLSTORE_DRAIN_TIMEOUT"},
		{[]string{"--drain-delay", "40s"}, nil, 2, "--drain-delay / ROLLSTORE_DRAIN_DELAY"},
		{[]string{"--orphan-grace", "0s"}, nil, 2, "--orphan-grace / ROLLSTORE_ORPHAN_GRACE"},
		{[]string{"--reclaim-grace", "-5s"}, nil, 2, "--reclaim-grace / ROLLSTORE_RECLAIM_GRACE"},
		{[]string{"--generation-max-age", "0s"}, nil, 2, "--generation-max-age / ROLLSTORE_GENERATION_MAX_AGE"},
		{[]string{"--max-inflight-payload", "0"}, nil, 2, "--max-inflight-payload / ROLLSTORE_MAX_INFLIGHT_PAYLOAD"},
		{nil, map[string]string{"ROLLSTORE_MAX_BODY": "-1"}, 2, "ROLLSTORE_MAX_BODY"},
		{[]string{"--log-level", "loud"}, nil, 2, "--log-level / ROLLSTORE_LOG_LEVEL"},
		{[]string{"--log-format", "xml"}, nil, 2, "--log-format / ROLLSTORE_LOG_FORMAT"},
		{[]string{"--prefix", "a//b"}, nil, 2, "--prefix / ROLLSTORE_PREFIX"},
		{[]string{"--store", "s3"}, nil, 2, "--store / ROLLSTORE_STORE"},
		{[]string{"--store", "azure"}, nil, 2, "--azure-container / ROLLSTORE_AZURE_CONTAINER"},
		{[]string{"--store", "azure", "--azure-container", "c1", "--azure-auth", "shared-key", "--azure-account", "acct"}, nil, 2, "--azure-account-key / ROLLSTORE_AZURE_ACCOUNT_KEY"},
		{[]string{"--store", "azure", "--azure-container", "c1"}, nil, 2, "--azure-account / ROLLSTORE_AZURE_ACCOUNT"},
		{[]string{"--store", "azure", "--azure-container", "c1", "--azure-account", "a", "--azure-endpoint", "ftp://x"}, nil, 2, "--azure-endpoint / ROLLSTORE_AZURE_ENDPOINT"},
		{[]string{"--store", "azure", "--azure-container", "c1", "--azure-auth", "password"}, nil, 2, "--azure-auth / ROLLSTORE_AZURE_AUTH"},
		{[]string{"--role", "writer"}, nil, 2, "--shard / ROLLSTORE_SHARD"},
		{[]string{"--auth-token-file", "/nonexistent/tokens"}, nil, 1, "--auth-token-file / ROLLSTORE_AUTH_TOKEN_FILE"},
	} {
		t.Run(strings.Join(c.args, " ")+fmt.Sprint(c.vars), func(t *testing.T) {
			t.Chdir(t.TempDir())
			env, _, stderr := testCmdEnv(c.vars)
			if code := run(context.Background(), append([]string{"serve"}, c.args...), env); code != c.code {
				t.Errorf("exit %d, want %d: %s", code, c.code, stderr)
			}
			msg := stderr.String()
			if !strings.Contains(msg, c.want) {
				t.Errorf("the message does not name %s: %s", c.want, msg)
			}
			if f := goFieldName.FindString(msg); f != "" {
				t.Errorf("the message names the Go identifier %s: %s", f, msg)
			}
			if ents, err := os.ReadDir("."); err != nil || len(ents) > 0 {
				t.Errorf("serve left %v behind (%v)", ents, err)
			}
		})
	}
}

// TestAzureValidationMatchesBackend: serve refuses exactly the Azure
// settings azure.New would refuse, so no Go field name can reach the user,
// and everything serve accepts, the backend accepts.
func TestAzureValidationMatchesBackend(t *testing.T) {
	n := 0
	for _, auth := range []azure.AuthMode{azure.AuthConnectionString, azure.AuthSharedKey, azure.AuthWorkloadIdentity, azure.AuthDefault, "", "bogus"} {
		for _, cs := range []string{"", "AccountName=a;AccountKey=k"} {
			for _, acct := range []string{"", "acct"} {
				for _, key := range []string{"", "a2V5"} {
					for _, ep := range []string{"", "https://acct.blob.core.windows.net", "ftp://x", "http://"} {
						for _, container := range []string{"rollouts", "Bad_Name"} {
							c := storeConfig{store: "azure", azure: azure.Config{Container: container, Auth: auth,
								ConnectionString: cs, AccountName: acct, AccountKey: key, Endpoint: ep}}
							cmdErr, backendErr := c.validate(), c.azure.Validate()
							if (cmdErr == nil) != (backendErr == nil) {
								t.Errorf("%+v: serve says %v, the backend %v", c.azure, cmdErr, backendErr)
							}
							if cmdErr != nil {
								if f := goFieldName.FindString(cmdErr.Error()); f != "" || !strings.Contains(cmdErr.Error(), "--azure-") {
									t.Errorf("%+v: %v names %q, not the flags", c.azure, cmdErr, f)
								}
							}
							n++
						}
					}
				}
			}
		}
	}
	if n < 300 {
		t.Fatalf("only %d cases", n)
	}
}

func TestUnknownEnv(t *testing.T) {
	known := knownEnv()
	for _, k := range []string{"ROLLSTORE_MAX_BODY", "ROLLSTORE_AZURE_ACCOUNT", "ROLLSTORE_METRICS_LISTEN", "ROLLSTORE_FIXTURE_WRITERS"} {
		if !known[k] {
			t.Errorf("%s is not known", k)
		}
	}
	names, suggest := unknownEnv([]string{
		"ROLLSTORE_MAX_BODDY=1", "ROLLSTORE_AZURE_ACOUNT=x", "ROLLSTORE_LISTEN=:1", "ROLLSTORE_REQUIRE_AZURITE=1",
		"PATH=/bin", "ROLLSTORE_SOMETHING_ELSE_ENTIRELY=1", "ROLLSTORE_MAX_BODDY=2", "ROLLSTORE_FIXTURE_WRITER=3",
	}, known)
	want := [][2]string{{"ROLLSTORE_AZURE_ACOUNT", "ROLLSTORE_AZURE_ACCOUNT"}, {"ROLLSTORE_FIXTURE_WRITER", "ROLLSTORE_FIXTURE_WRITERS"},
		{"ROLLSTORE_MAX_BODDY", "ROLLSTORE_MAX_BODY"}, {"ROLLSTORE_SOMETHING_ELSE_ENTIRELY", ""}}
	if len(names) != len(want) {
		t.Fatalf("unknown %q suggest %q, want %q", names, suggest, want)
	}
	for i, w := range want {
		if names[i] != w[0] || suggest[i] != w[1] {
			t.Errorf("%d: %s -> %q, want %s -> %q", i, names[i], suggest[i], w[0], w[1])
		}
	}
	if d := editDistance("kitten", "sitting"); d != 3 {
		t.Errorf("editDistance %d", d)
	}
}

// TestServeStartLog: the start log warns about unknown variables and names
// the store actually used: the local folder as an absolute path.
func TestServeStartLog(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	_, _, stderr, stop := startServe(t, map[string]string{
		"ROLLSTORE_MAX_BODDY": "1GiB", "ROLLSTORE_LOG_FORMAT": "json", "ROLLSTORE_PREFIX": "staging-7",
	}, "--listen", "127.0.0.1:0", "--data", "store")
	if code := stop(); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var start, warn map[string]any
	for _, line := range strings.Split(stderr.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m["msg"] {
		case "rollstore starting":
			start = m
		case "ignoring unknown environment variable":
			warn = m
		}
	}
	if warn == nil || warn["name"] != "ROLLSTORE_MAX_BODDY" || warn["did_you_mean"] != "ROLLSTORE_MAX_BODY" || warn["level"] != "WARN" {
		t.Errorf("warning %v:\n%s", warn, stderr)
	}
	abs, _ := filepath.EvalSymlinks(filepath.Join(dir, "store"))
	folder, _ := start["folder"].(string)
	if real, _ := filepath.EvalSymlinks(folder); start["store"] != "local" || real != abs || start["prefix"] != "staging-7" || start["version"] != version.Get().Version {
		t.Errorf("start log %v, want store local, folder %s, prefix staging-7", start, abs)
	}
}

func TestDescribeStoreHidesSecrets(t *testing.T) {
	for _, c := range []struct {
		cfg  azure.Config
		want string
	}{
		{azure.Config{Auth: azure.AuthConnectionString, ConnectionString: "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=SECRETKEY==;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1;"},
			"http://127.0.0.1:10000/devstoreaccount1"},
		{azure.Config{Auth: azure.AuthConnectionString, ConnectionString: "DefaultEndpointsProtocol=https;AccountName=prod1;AccountKey=SECRETKEY==;EndpointSuffix=core.windows.net"},
			"https://prod1.blob.core.windows.net"},
		{azure.Config{Auth: azure.AuthSharedKey, AccountName: "prod2", AccountKey: "SECRETKEY=="}, "https://prod2.blob.core.windows.net"},
		{azure.Config{Auth: azure.AuthWorkloadIdentity, Endpoint: "https://x.example"}, "https://x.example"},
	} {
		c.cfg.Container = "rollouts"
		s := storeConfig{store: "azure", prefix: "p1", azure: c.cfg}
		got := fmt.Sprint(s.describe()...)
		if strings.Contains(got, "SECRET") || !strings.Contains(got, c.want) || !strings.Contains(got, "rollouts") || !strings.Contains(got, "p1") {
			t.Errorf("%+v: %s, want endpoint %s, container, prefix and no key", c.cfg, got, c.want)
		}
	}
}

// TestServeHelpGroups: --help lists the flags in the six sections, in
// order, each flag once under the section it was defined in.
func TestServeHelpGroups(t *testing.T) {
	env, stdout, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"serve", "--help"}, env); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	help := stdout.String()
	// Flags are printed as the documentation writes them: --name.
	for line := range strings.SplitSeq(help, "\n") {
		if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
			t.Errorf("help line %q: want --name", line)
		}
	}
	sections := []string{groupServer, groupStore, groupAzure, groupLimits, groupMerge, groupFeed, groupAuth}
	at := -1
	for _, s := range sections {
		i := strings.Index(help, "\n"+s+":\n")
		if i <= at {
			t.Fatalf("section %q missing or out of order in:\n%s", s, help)
		}
		at = i
	}
	sectionOf := func(flagName string) string {
		i := strings.Index(help, "\n  --"+flagName+" ")
		if i < 0 {
			i = strings.Index(help, "\n  --"+flagName+"\n")
		}
		if i < 0 {
			return ""
		}
		found := ""
		for _, s := range sections {
			if j := strings.Index(help, "\n"+s+":\n"); j >= 0 && j < i {
				found = s
			}
		}
		return found
	}
	cfg := defaultServeConfig()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	groups := cfg.flags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		s := groups.section(f.Name)
		if !slices.Contains(sections, s) {
			t.Errorf("-%s is in no section (%q): define it after a g.start", f.Name, s)
		}
		if got := sectionOf(f.Name); got != s {
			t.Errorf("-%s is listed under %q, want %q", f.Name, got, s)
		}
	})
	for name, want := range map[string]string{"listen": groupServer, "metrics-listen": groupServer, "store": groupStore,
		"azure-account": groupAzure, "max-body": groupLimits, "cache": groupLimits, "merge-interval": groupMerge,
		"retain-age": groupMerge, "feed-retention": groupFeed, "feed-max-waiting": groupFeed, "auth-token-file": groupAuth} {
		if got := groups.section(name); got != want {
			t.Errorf("-%s in %q, want %q", name, got, want)
		}
	}
}

// TestFixtureErrorsNameFlags: the fixture's own settings are named with
// their ROLLSTORE_FIXTURE_* variables, the store's with serve's.
func TestFixtureErrorsNameFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--writers", "0"}, "--writers / ROLLSTORE_FIXTURE_WRITERS"},
		{[]string{"--large-count", "0", "--small-count", "0"}, "--small-count / ROLLSTORE_FIXTURE_SMALL_COUNT"},
		{[]string{"--request-timeout", "0s"}, "--request-timeout / ROLLSTORE_FIXTURE_REQUEST_TIMEOUT"},
		{[]string{"--lease-duration", "5s"}, "--lease-duration / ROLLSTORE_FIXTURE_LEASE_DURATION"},
		{[]string{"--log-level", "loud"}, "--log-level / ROLLSTORE_FIXTURE_LOG_LEVEL"},
		{[]string{"--store", "azure", "--azure-container", "c1", "--azure-auth", "shared-key"}, "--azure-account / ROLLSTORE_AZURE_ACCOUNT"},
	} {
		t.Chdir(t.TempDir())
		env, _, stderr := testCmdEnv(nil)
		if code := run(context.Background(), append([]string{"fixture"}, c.args...), env); code != 2 {
			t.Errorf("%q: exit %d, want 2", c.args, code)
		}
		if msg := stderr.String(); !strings.Contains(msg, c.want) || goFieldName.MatchString(msg) {
			t.Errorf("%q: %s, want it to name %s and no Go identifier", c.args, msg, c.want)
		}
		if ents, _ := os.ReadDir("."); len(ents) > 0 {
			t.Errorf("%q: left %v behind", c.args, ents)
		}
	}
}
