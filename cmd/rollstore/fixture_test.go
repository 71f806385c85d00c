package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/objstore"
	"github.com/rollstore/rollstore/objstore/azure"
	"github.com/rollstore/rollstore/objstore/azure/azuritetest"
	"github.com/rollstore/rollstore/objstore/local"
)

// shortFixture is the short configuration make test runs: small enough to
// finish in well under a minute on two cores under -race, long enough
// (writes spread over 8 s, generations sealed every second, a merge pass
// every half second) that generations are sealed, merged and reclaimed
// while the lookups run.
var shortFixture = []string{
	"fixture",
	"--writers", "2", "--readers", "1",
	"--large-size", "8MiB", "--large-count", "2",
	"--small-count", "150",
	"--min-write-time", "8s",
	"--generation-max-age", "1s", "--merge-interval", "500ms",
	"--lease-duration", "15s",
	"--baseline-objects", "5",
}

// TestFixtureShort runs `rollstore fixture` in-process end to end: on a
// local folder (always), and on Azurite configured as an operator would
// configure a storage account, through the environment.
func TestFixtureShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the fixture for ~15 s")
	}
	t.Run("local", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		stdout := runFixtureOK(t, map[string]string{"ROLLSTORE_STORE": "local", "ROLLSTORE_DATA": dir}, shortFixture)
		if strings.Contains(stdout, "raw SDK GET") {
			t.Error("a baseline row without an Azure store")
		}
		// The prefix was generated; nothing may be left in the folder.
		b, err := local.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		assertEmpty(t, b, "")
	})
	t.Run("azurite", func(t *testing.T) {
		cs := azuritetest.ConnectionString(t)
		container := azuritetest.ContainerName()
		t.Cleanup(func() { azuritetest.DeleteContainer(t, cs, container) })
		prefix := "fixture-test-" + randomHex()
		stdout := runFixtureOK(t, map[string]string{
			"ROLLSTORE_STORE":                   "azure",
			"ROLLSTORE_AZURE_AUTH":              "connection-string",
			"ROLLSTORE_AZURE_CONNECTION_STRING": cs,
			"ROLLSTORE_AZURE_CONTAINER":         container,
			"ROLLSTORE_AZURE_CREATE_CONTAINER":  "true",
			"ROLLSTORE_PREFIX":                  prefix,
		}, shortFixture)
		if !strings.Contains(stdout, "| *raw SDK GET (baseline)* | ") {
			t.Error("no raw-SDK baseline row on Azure")
		}
		b, err := azure.New(context.Background(), azure.Config{Auth: azure.AuthConnectionString, ConnectionString: cs, Container: container})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		assertEmpty(t, b, prefix+"/")
	})
}

// runFixtureOK runs the fixture and checks what every run must show: exit
// 0, the latency table with every lookup kind measured, zero errors, and
// a verified cleanup.
func runFixtureOK(t *testing.T, vars map[string]string, args []string) string {
	t.Helper()
	env, stdout, stderr := testCmdEnv(vars)
	if code := run(context.Background(), args, env); code != 0 {
		t.Fatalf("fixture exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	out := stdout.String()
	for _, want := range []string{
		"| lookup kind | n | header p50 | header p99 | **header max** |",
		"**Errors:** 0 (",
		"a listing under the prefix is empty: verified",
		"**Result:** PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	// Every lookup kind was measured, and none failed.
	for _, kind := range []string{"base hit", "WAL hit", "absent id"} {
		i := strings.Index(out, "| "+kind+" | ")
		if i < 0 {
			t.Errorf("no %s row", kind)
			continue
		}
		row := strings.Split(strings.SplitN(out[i:], "\n", 2)[0], "|")
		if n := strings.TrimSpace(row[2]); n == "0" {
			t.Errorf("no %s was measured: %s", kind, out[i:i+80])
		}
		if e := strings.TrimSpace(row[9]); e != "0" { // | kind | n | 6 latencies | errors |
			t.Errorf("%s errors: %s", kind, e)
		}
	}
	if !strings.Contains(out, "generations reclaimed**") || strings.Contains(out, "**0 generations reclaimed**") {
		t.Error("no generation was reclaimed during the run")
	}
	if t.Failed() {
		t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr)
	}
	return out
}

func assertEmpty(t *testing.T, b objstore.Bucket, prefix string) {
	t.Helper()
	var left []string
	if err := b.List(context.Background(), prefix, objstore.ListOptions{}, func(e objstore.Entry) error {
		left = append(left, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d keys left under %q, e.g. %q", len(left), prefix, left[0])
	}
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// TestFixtureRefusesUsedPrefix: a prefix holding anything is refused before
// a pod starts, and left alone.
func TestFixtureRefusesUsedPrefix(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	b, err := local.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Put(context.Background(), "used/prod/_table.json", strings.NewReader("{}"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	env, _, stderr := testCmdEnv(map[string]string{"ROLLSTORE_DATA": dir})
	if code := run(context.Background(), []string{"fixture", "--prefix", "used"}, env); code != 1 {
		t.Fatalf("exit %d on a used prefix: %s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "not fresh") || !strings.Contains(stderr.String(), "--force") {
		t.Errorf("stderr does not explain: %s", stderr)
	}
	if _, err := b.Head(context.Background(), "used/prod/_table.json"); err != nil {
		t.Errorf("the existing object was touched: %v", err)
	}
}

func TestFixtureHelpDocumentsEveryFlag(t *testing.T) {
	env, stdout, _ := testCmdEnv(nil)
	if code := run(context.Background(), []string{"fixture", "--help"}, env); code != 0 {
		t.Fatalf("--help exited %d", code)
	}
	help := stdout.String()
	cfg := defaultFixtureConfig()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	storeFlags, _ := cfg.flags(fs)
	envOf := fixtureEnvName(storeFlags)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(help, "-"+f.Name+" ") && !strings.Contains(help, "-"+f.Name+"\n") {
			t.Errorf("--help does not list -%s", f.Name)
		}
		if !strings.Contains(help, "$"+envOf(f.Name)+"]") {
			t.Errorf("--help does not give %s", envOf(f.Name))
		}
	})
	// The store is configured as serve's is; the run by its own variables.
	for name, want := range map[string]string{"store": "ROLLSTORE_STORE", "azure-container": "ROLLSTORE_AZURE_CONTAINER",
		"prefix": "ROLLSTORE_PREFIX", "writers": "ROLLSTORE_FIXTURE_WRITERS", "large-size": "ROLLSTORE_FIXTURE_LARGE_SIZE"} {
		if got := envOf(name); got != want {
			t.Errorf("-%s: env %s, want %s", name, got, want)
		}
	}
}

func TestFixtureConfig(t *testing.T) {
	env, _, _ := testCmdEnv(map[string]string{
		"ROLLSTORE_STORE":              "memory",
		"ROLLSTORE_FIXTURE_WRITERS":    "5",
		"ROLLSTORE_FIXTURE_LARGE_SIZE": "1GiB",
		"ROLLSTORE_FIXTURE_READERS":    "4",
	})
	cfg, err := parseFixture(env, []string{"--readers", "1", "--keep"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.store != "memory" || cfg.run.Writers != 5 || cfg.run.LargeSize != 1<<30 || !cfg.run.Keep {
		t.Errorf("environment not applied: %+v", cfg.run)
	}
	if cfg.run.Readers != 1 {
		t.Errorf("readers %d: the flag must win over the environment", cfg.run.Readers)
	}
	// The defaults are sized for a storage account.
	env, _, _ = testCmdEnv(nil)
	if cfg, err = parseFixture(env, nil); err != nil {
		t.Fatal(err)
	}
	if r := cfg.run; r.Writers != 3 || r.Readers != 2 || r.LargeSize != 300e6 || r.LargeCount != 2 || r.SmallSize != 53248 || r.SmallCount != 2000 || cfg.prefix != "" {
		t.Errorf("defaults %+v prefix %q", r, cfg.prefix)
	}

	for _, args := range [][]string{
		{"--writers", "0"},
		{"--small-count", "0", "--large-count", "0"},
		{"--large-size", "0"},
		{"--lease-duration", "5s"},
		{"--store", "azure"}, // no container
		{"--log-level", "loud"},
		{"extra"},
	} {
		env, _, stderr := testCmdEnv(nil)
		if code := run(context.Background(), append([]string{"fixture"}, args...), env); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, stderr)
		}
	}
}
