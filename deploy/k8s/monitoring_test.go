package k8s_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"sigs.k8s.io/yaml"
)

// The Prometheus operator component, off by default: the Azure overlay
// lists it on a commented line, which an operator uncomments.
const (
	monitoringComponent = "components/prometheus-operator"
	monitoringLine      = "  # - ../../" + monitoringComponent + "\n"
)

// rulesFile is the plain Prometheus rules file whose groups the
// PrometheusRule must hold unchanged (its promtool tests are there).
var rulesFile = filepath.Join(repoRoot, "deploy", "prometheus", "rollstore-rules.yaml")

// withMonitoring returns tree with the overlay's commented component line
// uncommented, as the comment tells an operator to.
func withMonitoring(tree map[string]string) (map[string]string, error) {
	k := overlayDir + "/kustomization.yaml"
	if strings.Count(tree[k], monitoringLine) != 1 {
		return nil, fmt.Errorf("%s: no line %q to uncomment", k, strings.TrimSpace(monitoringLine))
	}
	out := make(map[string]string, len(tree))
	for p, c := range tree {
		out[p] = c
	}
	out[k] = strings.Replace(tree[k], monitoringLine, "  - ../../"+monitoringComponent+"\n", 1)
	return out, nil
}

// renderMonitoring renders the overlay with the component included.
func renderMonitoring(tree map[string]string) (*set, error) {
	tree, err := withMonitoring(tree)
	if err != nil {
		return nil, err
	}
	s, err := render(tree, overlayDir)
	if err != nil {
		return nil, err
	}
	s.monitoring = true
	return s, nil
}

// checkMonitoring: with the component, one PodMonitor scrapes every
// workload's pods on their metrics listener (the container port named
// "metrics", /metrics, plain HTTP, in their own namespace), and one
// PrometheusRule holds exactly the groups of deploy/prometheus's rules
// file. Without it, neither kind appears.
func checkMonitoring(s *set) []error {
	var errs []error
	if !s.monitoring {
		if n := len(s.podMonitors) + len(s.promRules); n > 0 {
			errs = append(errs, fmt.Errorf("%d Prometheus operator objects without %s: include the component instead", n, monitoringComponent))
		}
		return errs
	}
	if len(s.podMonitors) != 1 || len(s.promRules) != 1 {
		return append(errs, fmt.Errorf("%s: %d PodMonitors and %d PrometheusRules, want one each", monitoringComponent, len(s.podMonitors), len(s.promRules)))
	}
	pm := s.podMonitors[0]
	ns := pm.Spec.NamespaceSelector
	if ns.Any || (len(ns.MatchNames) > 0 && !(len(ns.MatchNames) == 1 && ns.MatchNames[0] == pm.Namespace)) {
		errs = append(errs, fmt.Errorf("PodMonitor/%s: namespaceSelector %+v reaches beyond its own namespace", pm.Name, ns))
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 {
		return append(errs, fmt.Errorf("PodMonitor/%s: %d podMetricsEndpoints, want 1", pm.Name, len(pm.Spec.PodMetricsEndpoints)))
	}
	ep := pm.Spec.PodMetricsEndpoints[0]
	if ep.Port == nil || *ep.Port != metricsPortName { // port wins over portNumber and targetPort
		errs = append(errs, fmt.Errorf("PodMonitor/%s: the endpoint's port must be the container port named %q (the metrics listener, no token)", pm.Name, metricsPortName))
	}
	if ep.Path != "" && ep.Path != metricsPath {
		errs = append(errs, fmt.Errorf("PodMonitor/%s: path %q, want %s", pm.Name, ep.Path, metricsPath))
	}
	if ep.Scheme != "" && ep.Scheme != "http" {
		errs = append(errs, fmt.Errorf("PodMonitor/%s: scheme %q: the metrics listener speaks plain HTTP", pm.Name, ep.Scheme))
	}
	for _, w := range s.workloads {
		if !selects(&pm.Spec.Selector, w.tmpl.Labels) {
			errs = append(errs, fmt.Errorf("PodMonitor/%s: its selector does not select the pods of %s", pm.Name, w))
			continue
		}
		// The same contract as the annotations' scrape: the port exists and
		// ROLLSTORE_METRICS_LISTEN listens on it.
		t, terrs := s.scrapeTarget(w)
		errs = append(errs, terrs...)
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p, ok := namedPort(c, metricsPortName); !ok || p != t.port {
			errs = append(errs, fmt.Errorf("PodMonitor/%s: %s has no container port %q", pm.Name, w, metricsPortName))
		}
	}

	pr := s.promRules[0]
	want, err := rulesFileGroups()
	if err != nil {
		return append(errs, err)
	}
	b, err := json.Marshal(pr.Spec.Groups)
	if err != nil {
		return append(errs, err)
	}
	var got any
	if err := json.Unmarshal(b, &got); err != nil {
		return append(errs, err)
	}
	if !reflect.DeepEqual(got, want) {
		errs = append(errs, fmt.Errorf("PrometheusRule/%s: spec.groups differ from %s: copy its groups into %s/prometheusrule.yaml", pr.Name, rulesFile, monitoringComponent))
	}
	return errs
}

// rulesFileGroups reads the groups of the plain rules file, as JSON values.
func rulesFileGroups() (any, error) {
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		return nil, err
	}
	var f struct {
		Groups any `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %v", rulesFile, err)
	}
	return f.Groups, nil
}
