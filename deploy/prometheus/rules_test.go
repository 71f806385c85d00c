package prometheus_test

import (
	"bufio"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"go.yaml.in/yaml/v2"
)

const (
	rulesFile     = "rollstore-rules.yaml"
	rulesTestFile = "rollstore-rules.test.yaml"
	// runbookURL prefixes every alert's runbook_url; the anchor names its
	// section of docs/runbooks.md.
	runbookURL  = "https://github.com/rollstore/rollstore/blob/main/docs/runbooks.md#"
	runbookFile = repoRoot + "/docs/runbooks.md"
)

func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	rgs, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	for _, err := range errs {
		t.Error(err)
	}
	if rgs == nil || len(rgs.Groups) == 0 {
		t.Fatalf("%s: no rule groups", rulesFile)
	}
	return rgs
}

type alert struct {
	name        string
	expr        string
	labels      map[string]string
	annotations map[string]string
}

func alerts(t *testing.T) []alert {
	t.Helper()
	var out []alert
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			out = append(out, alert{name: r.Alert, expr: r.Expr, labels: r.Labels, annotations: r.Annotations})
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	return out
}

// TestRulesMetricsExported: every metric the rules read is in a real
// scrape of rollstore after traffic.
func TestRulesMetricsExported(t *testing.T) {
	uses := map[string][]string{}
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			names, err := metricNames(r.Expr)
			if err != nil {
				t.Errorf("%s%s: %v", r.Alert, r.Record, err)
				continue
			}
			for _, n := range names {
				uses[n] = append(uses[n], r.Alert+r.Record)
			}
		}
	}
	checkExported(t, uses)
}

// slug is GitHub's anchor for a markdown heading (as test/doclinks does).
func slug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile("[`*_~]").ReplaceAllString(h, "")
	h = regexp.MustCompile(`[^\w\- ]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// runbookSections returns the anchors of the alert sections of
// docs/runbooks.md: its level-3 headings.
func runbookSections(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open(runbookFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	fence := false
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "```") {
			fence = !fence
		}
		if !fence && strings.HasPrefix(l, "### ") {
			out[slug(strings.TrimPrefix(l, "### "))] = true
		}
	}
	return out
}

// TestRulesAnnotated: every alert has a severity, a summary, a description
// and a runbook_url whose anchor is its own section of docs/runbooks.md;
// and every alert section there belongs to an alert.
func TestRulesAnnotated(t *testing.T) {
	sections := runbookSections(t)
	linked := map[string]bool{}
	for _, a := range alerts(t) {
		if s := a.labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", a.name, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.annotations[k]) == "" {
				t.Errorf("%s: no %s annotation", a.name, k)
			}
		}
		u := a.annotations["runbook_url"]
		anchor, ok := strings.CutPrefix(u, runbookURL)
		switch {
		case !ok:
			t.Errorf("%s: runbook_url %q is not under %s", a.name, u, runbookURL)
		case anchor != slug(a.name):
			t.Errorf("%s: runbook_url anchor #%s, want #%s (its own section)", a.name, anchor, slug(a.name))
		case !sections[anchor]:
			t.Errorf("%s: %s has no section ### %s", a.name, runbookFile, a.name)
		}
		linked[anchor] = true
	}
	for s := range sections {
		if !linked[s] {
			t.Errorf("%s: section #%s belongs to no alert of %s", runbookFile, s, rulesFile)
		}
	}
}

// TestRulesUnitTestsCoverEveryAlert: rollstore-rules.test.yaml has, for
// every alert, a case where it fires and one where it must not.
func TestRulesUnitTestsCoverEveryAlert(t *testing.T) {
	b, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var tf struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tf); err != nil {
		t.Fatal(err)
	}
	if len(tf.RuleFiles) != 1 || tf.RuleFiles[0] != rulesFile {
		t.Errorf("%s: rule_files %v, want [%s]", rulesTestFile, tf.RuleFiles, rulesFile)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, g := range tf.Tests {
		for _, c := range g.Cases {
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
			} else {
				silent[c.Alertname] = true
			}
		}
	}
	for _, a := range alerts(t) {
		if !fires[a.name] {
			t.Errorf("%s: no case in %s where it fires", a.name, rulesTestFile)
		}
		if !silent[a.name] {
			t.Errorf("%s: no case in %s where it stays silent", a.name, rulesTestFile)
		}
	}
}

// TestPromtool runs the promtool pinned in go.mod (`go tool promtool`):
// `check rules` on the rules, then `test rules` on their unit tests. Where
// promtool cannot be built (no go tool, no module download) it skips,
// unless ROLLSTORE_REQUIRE_PROMTOOL=1 (`make test` sets it).
func TestPromtool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds promtool; skipped with -short")
	}
	promtool := promtoolPath(t)
	for _, args := range [][]string{
		{"check", "rules", rulesFile},
		{"test", "rules", rulesTestFile},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
		}
	}
}

// promtoolPath returns a promtool: Debian's pinned package (promtool.sh),
// else the one pinned in go.mod, built (and cached by the go command).
func promtoolPath(t *testing.T) string {
	t.Helper()
	required := os.Getenv("ROLLSTORE_REQUIRE_PROMTOOL") == "1"
	unavailable := func(format string, args ...any) {
		t.Helper()
		if required {
			t.Fatalf(format, args...)
		}
		t.Skipf(format+" (ROLLSTORE_REQUIRE_PROMTOOL=1 makes this a failure)", args...)
	}
	// Debian's package, unpacked into the cache by promtool.sh, takes
	// seconds; building the pinned one takes minutes on two cores.
	if out, err := exec.Command("sh", "promtool.sh").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" {
			return p
		}
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		unavailable("promtool: no go tool on PATH to build it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "tool", "-n", "promtool")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		unavailable("promtool (go.mod's tool directive) cannot be built here: %v\n%s", err, stderr.String())
	}
	p := strings.TrimSpace(string(out))
	if _, err := os.Stat(p); err != nil {
		unavailable("promtool: go tool -n gave %q: %v", p, err)
	}
	return filepath.Clean(p)
}
