package k8s_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// A mutation breaks one manifest the way an edit could, and names the check
// that must then fail. Together they show that every check can fail.
type mutation struct {
	name     string
	file     string // relative to deploy/k8s
	old, new string
	all      bool   // replace every occurrence (else old must occur once)
	dir      string // kustomization to render; the overlay when empty
	// monitoring renders the overlay with components/prometheus-operator
	// included (renderMonitoring).
	monitoring bool
	want       string // substring of the errors, e.g. "[probes]"
}

var mutations = []mutation{
	{name: "duplicate key", file: "base/pdb.yaml", old: "  minAvailable: 1\n", new: "  minAvailable: 1\n  minAvailable: 2\n", want: "[sources]"},
	{name: "misspelt field", file: "base/reader.yaml", old: "readinessProbe:", new: "readinesProbe:", want: "[schema]"},
	{name: "unknown apiVersion", file: "base/pdb.yaml", old: "apiVersion: policy/v1\n", new: "apiVersion: policy/v1beta1\n", all: true, want: "unknown apiVersion/kind"},
	{name: "base sets a namespace", file: "base/kustomization.yaml", old: "kind: Kustomization\n", new: "kind: Kustomization\nnamespace: default\n", dir: baseDir, want: "[objects]"},
	{name: "missing workload", file: "base/kustomization.yaml", old: "  - merger.yaml\n", new: "", want: "[objects]"},

	{name: "selector misses pods", file: "base/reader.yaml",
		old: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: reader\n",
		new: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: readers\n", want: "[selectors]"},
	{name: "selector too broad", file: "base/writer.yaml",
		old: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: writer\n",
		new: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n", want: "selector also selects"},

	{name: "readiness path", file: "base/reader.yaml", old: "path: /readyz", new: "path: /ready", want: "[probes]"},
	{name: "liveness port", file: "base/writer.yaml",
		old: "livenessProbe:\n            httpGet:\n              path: /healthz\n              port: http",
		new: "livenessProbe:\n            httpGet:\n              path: /healthz\n              port: 8081", want: "[probes]"},
	{name: "no liveness", file: "base/merger.yaml",
		old: "          livenessProbe:\n            httpGet:\n              path: /healthz\n              port: http\n            periodSeconds: 10\n            timeoutSeconds: 3\n            failureThreshold: 3\n",
		new: "", want: "no liveness probe"},

	{name: "listen port", file: "base/rollstore.env", old: "ROLLSTORE_LISTEN=:8080", new: "ROLLSTORE_LISTEN=:9090", want: "[config]"},
	{name: "wrong role", file: "base/merger.yaml", old: "value: merger", new: "value: reader", want: "[config]"},
	{name: "dangling envFrom", file: "base/reader.yaml", old: "name: rollstore-config", new: "name: rollstore-cfg", want: "[config]"},

	{name: "limit below budgets", file: "base/reader.yaml", old: "memory: 1536Mi", new: "memory: 900Mi", want: "[resources]"},
	{name: "budget above limit", file: "base/rollstore.env", old: "ROLLSTORE_MAX_INFLIGHT_PAYLOAD=512MiB", new: "ROLLSTORE_MAX_INFLIGHT_PAYLOAD=2147483648", want: "memory limit"},
	{name: "cache budget in GiB", file: "base/rollstore.env", old: "ROLLSTORE_CACHE=256MiB", new: "ROLLSTORE_CACHE=1GiB", want: "memory limit"},
	{name: "no cpu request", file: "base/merger.yaml", old: "              cpu: 500m\n", new: "", want: "no requests.cpu"},
	{name: "no budget in config", file: "base/rollstore.env", old: "ROLLSTORE_CACHE=256MiB\n", new: "", want: "ROLLSTORE_CACHE is not set"},
	{name: "GOMEMLIMIT above limit", file: "base/writer.yaml", old: "value: 1380MiB", new: "value: 1600MiB", want: "GOMEMLIMIT"},

	{name: "short grace", file: "base/writer.yaml", old: "terminationGracePeriodSeconds: 45", new: "terminationGracePeriodSeconds: 30", want: "[drain]"},
	{name: "long drain", file: "base/rollstore.env", old: "ROLLSTORE_DRAIN_TIMEOUT=30s", new: "ROLLSTORE_DRAIN_TIMEOUT=45s", want: "[drain]"},
	{name: "no preStop sleep", file: "base/reader.yaml", old: "              sleep:\n                seconds: 5\n", new: "              sleep:\n                seconds: 0\n", want: "no preStop sleep"},

	{name: "root allowed", file: "base/merger.yaml", old: "runAsNonRoot: true", new: "runAsNonRoot: false", all: true, want: "runAsNonRoot"},
	{name: "uid 0", file: "base/reader.yaml", old: "runAsUser: 65532", new: "runAsUser: 0", want: "runAsUser"},
	{name: "writable root", file: "base/reader.yaml", old: "readOnlyRootFilesystem: true", new: "readOnlyRootFilesystem: false", want: "readOnlyRootFilesystem"},
	{name: "capabilities kept", file: "base/writer.yaml", old: `drop: ["ALL"]`, new: `drop: ["NET_RAW"]`, want: "capabilities"},
	{name: "seccomp off", file: "base/merger.yaml", old: "type: RuntimeDefault", new: "type: Unconfined", want: "seccompProfile"},
	{name: "privilege escalation", file: "base/writer.yaml", old: "allowPrivilegeEscalation: false", new: "allowPrivilegeEscalation: true", want: "allowPrivilegeEscalation"},
	{name: "API token mounted", file: "base/reader.yaml", old: "      automountServiceAccountToken: false\n", new: "", want: "automountServiceAccountToken"},
	{name: "dangling volumeMount", file: "base/writer.yaml", old: "        - name: tmp\n          emptyDir:", new: "        - name: scratch\n          emptyDir:", want: "has no volume"},

	{name: "latest tag", file: "overlays/azure/kustomization.yaml", old: "newTag: 0.1.0", new: "newTag: latest", want: "[image]"},
	{name: "image not pinned", file: "overlays/azure/kustomization.yaml",
		old: "images:\n  - name: rollstore\n    newName: replace-me.azurecr.io/rollstore\n    newTag: 0.1.0\n", new: "", want: "did not pin the image"},
	{name: "untagged base image", file: "base/writer.yaml", old: "image: rollstore:set-by-overlay", new: "image: rollstore", dir: baseDir, want: "[image]"},

	{name: "ordered writers", file: "base/writer.yaml", old: "podManagementPolicy: Parallel", new: "podManagementPolicy: OrderedReady", want: "[writers]"},
	{name: "governing Service not headless", file: "base/writer.yaml", old: "serviceName: rollstore-writer-headless", new: "serviceName: rollstore-writer", want: "not headless"},
	{name: "shard from node", file: "base/writer.yaml", old: "fieldPath: metadata.name", new: "fieldPath: spec.nodeName", want: "ROLLSTORE_SHARD must come from"},
	{name: "shared shard", file: "base/rollstore.env", old: "ROLLSTORE_LISTEN=:8080\n", new: "ROLLSTORE_LISTEN=:8080\nROLLSTORE_SHARD=shard-0\n", want: "[writers]"},
	{name: "pod IP from host", file: "base/writer.yaml", old: "fieldPath: status.podIP", new: "fieldPath: status.hostIP", want: "POD_IP must come from"},
	{name: "advertised port", file: "base/writer.yaml", old: "value: $(POD_IP):8080", new: "value: $(POD_IP):9090", want: "ROLLSTORE_ADVERTISE_ADDR="},
	{name: "shared address", file: "base/rollstore.env", old: "ROLLSTORE_LISTEN=:8080\n", new: "ROLLSTORE_LISTEN=:8080\nROLLSTORE_ADVERTISE_ADDR=10.0.0.1:8080\n", want: "advertise the same address"},
	{name: "writers cut off", file: "base/networkpolicy.yaml",
		old: "    - to:\n        - podSelector:\n            matchLabels:\n              app.kubernetes.io/name: rollstore\n              app.kubernetes.io/component: writer\n      ports:\n        - port: http\n          protocol: TCP\n",
		new: "", want: "forwarded writes would fail"},

	{name: "one reader", file: "base/reader.yaml", old: "  replicas: 2\n", new: "  replicas: 1\n", dir: baseDir, want: "[readers]"},
	{name: "HPA floor of one", file: "components/reader-hpa/hpa.yaml", old: "minReplicas: 2", new: "minReplicas: 1", want: "[readers]"},

	{name: "two mergers", file: "base/merger.yaml", old: "  replicas: 1\n", new: "  replicas: 2\n", want: "[merger]"},
	{name: "rolling merger", file: "base/merger.yaml", old: "    type: Recreate\n", new: "    type: RollingUpdate\n", want: "[merger]"},

	{name: "readers not spread", file: "base/reader.yaml", old: "topologyKey: kubernetes.io/hostname", new: "topologyKey: topology.kubernetes.io/region", want: "[spread]"},

	{name: "Service targetPort", file: "base/writer.yaml", old: "targetPort: http", new: "targetPort: admin", all: true, want: "[services]"},
	{name: "read Service selects writers", file: "base/reader.yaml",
		old: "  selector:\n    app.kubernetes.io/name: rollstore\n    app.kubernetes.io/component: reader\n",
		new: "  selector:\n    app.kubernetes.io/name: rollstore\n    app.kubernetes.io/component: writer\n", want: "[services]"},

	{name: "singleton PDB blocks drains", file: "base/pdb.yaml",
		old: "  maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: merger\n",
		new: "  minAvailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: merger\n", want: "[pdb]"},
	{name: "PDB selects nothing", file: "base/pdb.yaml",
		old: "      app.kubernetes.io/component: reader\n", new: "      app.kubernetes.io/component: readers\n", want: "[pdb]"},
	{name: "writers PDB too loose", file: "base/pdb.yaml",
		old: "  maxUnavailable: 1\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: writer\n",
		new: "  maxUnavailable: 3\n  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: writer\n", want: "[pdb]"},

	{name: "HPA with fixed replicas", file: "components/reader-hpa/kustomization.yaml",
		old: "      - op: remove\n        path: /spec/replicas", new: "      - op: test\n        path: /spec/replicas\n        value: 2", want: "[hpa]"},
	{name: "HPA scales the merger", file: "components/reader-hpa/hpa.yaml",
		old: "    kind: Deployment\n    name: rollstore-reader", new: "    kind: Deployment\n    name: rollstore-merger", want: "[hpa]"},

	{name: "pod not labelled for workload identity", file: "base/writer.yaml", old: `azure.workload.identity/use: "true"`, new: `azure.workload.identity/use: "false"`, want: "[identity]"},
	{name: "client id not a GUID", file: "base/serviceaccount.yaml", old: `client-id: "00000000-0000-0000-0000-000000000000"`, new: `client-id: "fill-me-in"`, dir: baseDir, want: "[identity]"},
	{name: "default service account", file: "base/merger.yaml", old: "serviceAccountName: rollstore", new: "serviceAccountName: default", want: "[identity]"},

	{name: "scrape on the API port", file: "base/reader.yaml", old: `prometheus.io/port: "9090"`, new: `prometheus.io/port: "8080"`, want: "[metrics]"},
	{name: "metrics listener elsewhere", file: "base/rollstore.env", old: "ROLLSTORE_METRICS_LISTEN=:9090", new: "ROLLSTORE_METRICS_LISTEN=:9091", want: "[metrics]"},
	{name: "no metrics listener", file: "base/rollstore.env", old: "ROLLSTORE_METRICS_LISTEN=:9090\n", new: "", want: "[metrics]"},
	{name: "scrape path", file: "base/merger.yaml", old: "prometheus.io/path: /metrics", new: "prometheus.io/path: /stats", want: "[metrics]"},
	{name: "not scraped", file: "base/writer.yaml", old: `prometheus.io/scrape: "true"`, new: `prometheus.io/scrape: "false"`, want: "[metrics]"},

	{name: "PodMonitor misspelt", file: "components/prometheus-operator/podmonitor.yaml", old: "podMetricsEndpoints:", new: "podMetricEndpoints:", monitoring: true, want: "[schema]"},
	{name: "PodMonitor selects nothing", file: "components/prometheus-operator/podmonitor.yaml",
		old: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n", new: "  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstor\n", monitoring: true, want: "[monitoring]"},
	{name: "PodMonitor on the API port", file: "components/prometheus-operator/podmonitor.yaml", old: "- port: metrics", new: "- port: http", monitoring: true, want: "[monitoring]"},
	{name: "PodMonitor in every namespace", file: "components/prometheus-operator/podmonitor.yaml", old: "spec:\n", new: "spec:\n  namespaceSelector:\n    any: true\n", monitoring: true, want: "[monitoring]"},
	{name: "PrometheusRule drifts from the rules file", file: "components/prometheus-operator/prometheusrule.yaml", old: "> 0.05", new: "> 0.5", monitoring: true, want: "[monitoring]"},
	{name: "operator objects outside the component", file: "base/pdb.yaml", old: "  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: merger\n",
		new: "  unhealthyPodEvictionPolicy: AlwaysAllow\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n      app.kubernetes.io/component: merger\n" +
			"---\napiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n  name: rollstore\nspec:\n  selector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n  podMetricsEndpoints:\n    - port: metrics\n",
		dir: baseDir, want: "[monitoring]"},

	{name: "no network policy", file: "base/kustomization.yaml", old: "  - networkpolicy.yaml\n", new: "", want: "[network]"},
	{name: "ingress only", file: "base/networkpolicy.yaml", old: "    - Ingress\n    - Egress\n", new: "    - Ingress\n", want: "[network]"},
	{name: "scraper blocked", file: "base/networkpolicy.yaml", old: "        - port: metrics\n          protocol: TCP\n", new: "", want: "[network]"},
	{name: "DNS blocked", file: "base/networkpolicy.yaml", old: "        - port: 53\n          protocol: UDP\n", new: "", want: "[network]"},
	{name: "policy selects nothing", file: "base/networkpolicy.yaml", old: "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: rollstore\n", new: "  podSelector:\n    matchLabels:\n      app.kubernetes.io/name: rollstor\n", want: "[network]"},

	{name: "no ephemeral-storage limit", file: "base/merger.yaml", old: "              ephemeral-storage: 256Mi\n", new: "", want: "no limits.ephemeral-storage"},
	{name: "emptyDir above the ephemeral limit", file: "base/writer.yaml", old: "sizeLimit: 64Mi", new: "sizeLimit: 1Gi", want: "ephemeral-storage limit"},
	{name: "unbounded emptyDir", file: "base/reader.yaml", old: "          emptyDir:\n            sizeLimit: 64Mi\n", new: "          emptyDir: {}\n", want: "no sizeLimit"},

	{name: "client id not patched", file: "overlays/azure/kustomization.yaml", old: "  - path: serviceaccount.yaml\n", new: "", want: "[azure]"},
	{name: "local store", file: "overlays/azure/kustomization.yaml", old: "ROLLSTORE_STORE=azure", new: "ROLLSTORE_STORE=local", want: "[azure]"},
	{name: "shared key auth", file: "overlays/azure/kustomization.yaml", old: "ROLLSTORE_AZURE_AUTH=workload-identity", new: "ROLLSTORE_AZURE_AUTH=shared-key", want: "[azure]"},
	{name: "bad account name", file: "overlays/azure/kustomization.yaml", old: "ROLLSTORE_AZURE_ACCOUNT=replacemeaccount", new: "ROLLSTORE_AZURE_ACCOUNT=Replace_Me", want: "storage account"},
	{name: "empty prefix", file: "overlays/azure/kustomization.yaml", old: "ROLLSTORE_PREFIX=prod", new: "ROLLSTORE_PREFIX=", want: "[azure]"},
}

// apply returns a copy of tree with m applied.
func (m mutation) apply(tree map[string]string) (map[string]string, error) {
	src, ok := tree[m.file]
	if !ok {
		return nil, fmt.Errorf("no file %s", m.file)
	}
	n := strings.Count(src, m.old)
	if n == 0 || (!m.all && n != 1) {
		return nil, fmt.Errorf("%q occurs %d times in %s: update the mutation", m.old, n, m.file)
	}
	out := make(map[string]string, len(tree))
	for k, v := range tree {
		out[k] = v
	}
	out[m.file] = strings.ReplaceAll(src, m.old, m.new)
	return out, nil
}

// TestChecksCatchBrokenManifests breaks the manifests one way at a time and
// requires the named check to fail; and every check must be the one that
// fails for at least one mutation.
func TestChecksCatchBrokenManifests(t *testing.T) {
	tree := loadTree(t)
	caught := map[string]bool{} // check names that reported a wanted error
	ran := 0
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			ran++
			broken, err := m.apply(tree)
			if err != nil {
				t.Fatal(err)
			}
			dir := m.dir
			if dir == "" {
				dir = overlayDir
			}
			var errs []error
			var s *set
			if m.monitoring {
				s, err = renderMonitoring(broken)
			} else {
				s, err = render(broken, dir)
			}
			if err != nil {
				errs = []error{err}
			} else {
				errs = runChecks(s)
			}
			for _, e := range errs {
				for _, line := range strings.Split(e.Error(), "\n") {
					if strings.Contains(line, m.want) {
						if tag := checkTag.FindStringSubmatch(line); tag != nil {
							caught[tag[1]] = true
						}
					}
				}
			}
			got := errors.Join(errs...)
			if got == nil || !strings.Contains(got.Error(), m.want) {
				t.Fatalf("%s: %s -> %s: want an error containing %q, got: %v", m.file, m.old, m.new, m.want, got)
			}
		})
	}
	if ran < len(mutations) {
		return // a -run filter: coverage is not known
	}
	for _, c := range checks {
		if !caught[c.name] {
			t.Errorf("check %s: no mutation makes it fail", c.name)
		}
	}
}

var checkTag = regexp.MustCompile(`^\[([a-z]+)\]`)
