package prometheus_test

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// promql parses as Prometheus does by default (no experimental functions).
var promql = parser.NewParser(parser.Options{})

// metricNames parses expr and returns the metric names its selectors name.
// A selector must name its metric (by name or __name__="…"): one matching
// names by a regular expression could not be checked against the scrape.
func metricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var bad error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		for _, m := range vs.LabelMatchers {
			if m.Name == model.MetricNameLabel {
				if m.Type != labels.MatchEqual {
					bad = fmt.Errorf("selector %s matches metric names by %s: name the metric", vs, m.Type)
				}
				name = m.Value
			}
		}
		if name == "" {
			bad = fmt.Errorf("selector %s names no metric", vs)
		}
		seen[name] = true
		return nil
	})
	if bad != nil {
		return nil, bad
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Grafana's variables, replaced before parsing: the interval ones by a
// duration, any other by a plain word (they appear in label values).
var (
	grafanaInterval = regexp.MustCompile(`\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}|\[\[(__rate_interval|__interval|__range)\]\]`)
	grafanaVariable = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:[A-Za-z]+)?\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[A-Za-z_][A-Za-z0-9_]*\]\]`)
)

// expandGrafana turns a dashboard query into PromQL as Grafana would send
// it, with every variable at a representative value.
func expandGrafana(q string) string {
	q = grafanaInterval.ReplaceAllString(q, "5m")
	return grafanaVariable.ReplaceAllString(q, "value")
}

// TestMetricNames: the checks see every metric of an expression, and
// refuse selectors they could not check.
func TestMetricNames(t *testing.T) {
	got, err := metricNames(`sum by (route) (rate(a_total{x="1"}[5m])) / on () group_left b + count({__name__="c"})`)
	if err != nil || strings.Join(got, " ") != "a_total b c" {
		t.Errorf("metricNames: %v %v, want [a_total b c]", got, err)
	}
	for _, bad := range []string{`{__name__=~"rollstore_.*"}`, `sum(rate(x[5m]`, `rate(x[$__rate_interval])`} {
		if _, err := metricNames(bad); err == nil {
			t.Errorf("metricNames(%q): no error", bad)
		}
	}
	if got := expandGrafana(`rate(x{pod=~"$pod", ns=~"${namespace}"}[$__rate_interval])`); got != `rate(x{pod=~"value", ns=~"value"}[5m])` {
		t.Errorf("expandGrafana: %s", got)
	}
	if s := sampleNames("# HELP x_seconds h\nx_seconds_bucket{le=\"1\"} 1\nx_seconds_count 1\ny 2\n"); !s["x_seconds_bucket"] || !s["x_seconds_count"] || !s["y"] || s["x_seconds"] {
		t.Errorf("sampleNames: %v", s)
	}
}
