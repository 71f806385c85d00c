package k8s_test

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The contract between the manifests and the rollstore binary.
const (
	containerName    = "rollstore"
	serviceAccountNm = "rollstore"
	portName         = "http"
	metricsPortName  = "metrics"
	metricsPath      = "/metrics"
	livenessPath     = "/healthz"
	readinessPath    = "/readyz"
	componentLabel   = "app.kubernetes.io/component"
	wiUseLabel       = "azure.workload.identity/use"
	wiClientIDKey    = "azure.workload.identity/client-id"
	zeroGUID         = "00000000-0000-0000-0000-000000000000"
	placeholderImage = "rollstore:set-by-overlay"
	writerName       = "rollstore-writer"
	readerName       = "rollstore-reader"
	mergerName       = "rollstore-merger"

	envInflight = "ROLLSTORE_MAX_INFLIGHT_PAYLOAD" // --max-inflight-payload
	envCache    = "ROLLSTORE_CACHE"                // --cache
	envDrain    = "ROLLSTORE_DRAIN_TIMEOUT"
	envListen   = "ROLLSTORE_LISTEN"
	envMetrics  = "ROLLSTORE_METRICS_LISTEN"
	envTokens   = "ROLLSTORE_AUTH_TOKEN_FILE"
	envRole     = "ROLLSTORE_ROLE"
	envShard    = "ROLLSTORE_SHARD"
	envAdvert   = "ROLLSTORE_ADVERTISE_ADDR"
	envPodIP    = "POD_IP"
	envStore    = "ROLLSTORE_STORE"
	envAuth     = "ROLLSTORE_AZURE_AUTH"
	envAccount  = "ROLLSTORE_AZURE_ACCOUNT"
	envBlobCtr  = "ROLLSTORE_AZURE_CONTAINER"
	envPrefix   = "ROLLSTORE_PREFIX"
)

// headroom is the memory a pod needs beyond its configured budgets (Go
// runtime, goroutine stacks, TLS, decoded indexes): the limit must cover
// in-flight payload bytes + cache bytes + this.
const headroom = 256 << 20

// logAllowance is the ephemeral storage a container's logs may take on the
// node beyond its emptyDir volumes (the kubelet rotates them at 10Mi × 5 by
// default).
const logAllowance = 64 << 20

// The kustomizations, relative to deploy/k8s.
const (
	baseDir    = "base"
	overlayDir = "overlays/azure"
)

// --- rendering -------------------------------------------------------------

// manifestDirs hold the kustomize sources, relative to deploy/k8s.
var manifestDirs = []string{"base", "components", "overlays"}

// loadTree reads every manifest file under deploy/k8s's kustomize folders
// (the test's working directory): path relative to it -> content.
func loadTree(t testing.TB) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		top, _, _ := strings.Cut(filepath.ToSlash(p), "/")
		if d.IsDir() {
			if p != "." && !slices.Contains(manifestDirs, top) {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.Contains(manifestDirs, top) || strings.HasSuffix(p, ".md") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tree[filepath.ToSlash(p)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{baseDir + "/kustomization.yaml", overlayDir + "/kustomization.yaml"} {
		if _, ok := tree[want]; !ok {
			t.Fatalf("%s missing", want)
		}
	}
	return tree
}

// render builds the kustomization in dir with the kustomize API (what
// `kubectl kustomize` runs) from an in-memory copy of tree, and decodes the
// output strictly.
func render(tree map[string]string, dir string) (*set, error) {
	mem := filesys.MakeFsInMemory()
	for p, c := range tree {
		if err := mem.WriteFile("/k8s/"+p, []byte(c)); err != nil {
			return nil, err
		}
	}
	srcErrs := parseSources(tree)
	buildErr := func(err error) error {
		// A source that does not parse is the likely cause: name it.
		for _, e := range srcErrs {
			err = fmt.Errorf("%w\n[sources] %v", err, e)
		}
		return fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, "/k8s/"+dir)
	if err != nil {
		return nil, buildErr(err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		return nil, buildErr(err)
	}
	s := &set{dir: dir, overlay: dir != baseDir, yaml: string(out)}
	s.sourceErrs = srcErrs
	s.decode(out)
	return s, nil
}

// parseSources checks that every YAML file in the tree parses, document by
// document, without duplicate keys.
func parseSources(tree map[string]string) []error {
	var errs []error
	paths := make([]string, 0, len(tree))
	for p := range tree {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if !strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml") {
			continue
		}
		for i, doc := range splitDocs(tree[p]) {
			var v map[string]any // a map: duplicate keys are only caught into one
			if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
				errs = append(errs, fmt.Errorf("%s document %d: %v", p, i+1, err))
			}
		}
	}
	return errs
}

var docSep = regexp.MustCompile(`(?m)^---[ \t]*$`)

func splitDocs(s string) []string {
	var docs []string
	for _, d := range docSep.Split(s, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// set is one rendered kustomization, decoded.
type set struct {
	dir     string
	overlay bool
	yaml    string

	sourceErrs []error // source files that do not parse
	decodeErrs []error // rendered documents that do not decode strictly

	keys            []string // kind/name of every object, in output order
	namespaces      []*corev1.Namespace
	serviceAccounts []*corev1.ServiceAccount
	configMaps      []*corev1.ConfigMap
	services        []*corev1.Service
	workloads       []*workload
	pdbs            []*policyv1.PodDisruptionBudget
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	netpols         []*networkingv1.NetworkPolicy
	podMonitors     []*monitoringv1.PodMonitor
	promRules       []*monitoringv1.PrometheusRule
	objNamespaces   map[string]string // kind/name -> metadata.namespace

	// monitoring is set on the rendering with the prometheus-operator
	// component (renderMonitoring), which must hold its objects.
	monitoring bool
}

// workload is a Deployment or a StatefulSet.
type workload struct {
	kind     string
	name     string
	meta     metav1.ObjectMeta
	replicas *int32
	selector *metav1.LabelSelector
	tmpl     *corev1.PodTemplateSpec
	dep      *appsv1.Deployment
	sts      *appsv1.StatefulSet
}

func (w *workload) String() string { return w.kind + "/" + w.name }

func (w *workload) component() string { return w.tmpl.Labels[componentLabel] }

func (s *set) decode(out []byte) {
	s.objNamespaces = map[string]string{}
	for i, doc := range splitDocs(string(out)) {
		var tm struct {
			metav1.TypeMeta
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			s.decodeErrs = append(s.decodeErrs, fmt.Errorf("document %d: %v", i+1, err))
			continue
		}
		key := tm.Kind + "/" + tm.Metadata.Name
		obj, err := decodeObject([]byte(doc))
		if err != nil {
			s.decodeErrs = append(s.decodeErrs, fmt.Errorf("%s: %v (an unknown field is a typo or misplaced)", key, err))
			continue
		}
		s.keys = append(s.keys, key)
		s.objNamespaces[key] = tm.Metadata.Namespace
		switch o := obj.(type) {
		case *corev1.Namespace:
			s.namespaces = append(s.namespaces, o)
		case *corev1.ServiceAccount:
			s.serviceAccounts = append(s.serviceAccounts, o)
		case *corev1.ConfigMap:
			s.configMaps = append(s.configMaps, o)
		case *corev1.Service:
			s.services = append(s.services, o)
		case *appsv1.Deployment:
			s.workloads = append(s.workloads, &workload{kind: "Deployment", name: o.Name, meta: o.ObjectMeta,
				replicas: o.Spec.Replicas, selector: o.Spec.Selector, tmpl: &o.Spec.Template, dep: o})
		case *appsv1.StatefulSet:
			s.workloads = append(s.workloads, &workload{kind: "StatefulSet", name: o.Name, meta: o.ObjectMeta,
				replicas: o.Spec.Replicas, selector: o.Spec.Selector, tmpl: &o.Spec.Template, sts: o})
		case *policyv1.PodDisruptionBudget:
			s.pdbs = append(s.pdbs, o)
		case *autoscalingv2.HorizontalPodAutoscaler:
			s.hpas = append(s.hpas, o)
		case *networkingv1.NetworkPolicy:
			s.netpols = append(s.netpols, o)
		case *monitoringv1.PodMonitor:
			s.podMonitors = append(s.podMonitors, o)
		case *monitoringv1.PrometheusRule:
			s.promRules = append(s.promRules, o)
		default:
			s.decodeErrs = append(s.decodeErrs, fmt.Errorf("%s: a %T, which no check knows", key, obj))
		}
	}
}

// --- helpers ---------------------------------------------------------------

func (s *set) workloadNamed(kind, name string) *workload {
	for _, w := range s.workloads {
		if w.kind == kind && w.name == name {
			return w
		}
	}
	return nil
}

func (s *set) configMapNamed(name string) *corev1.ConfigMap {
	for _, c := range s.configMaps {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// hpaFor returns the HPA scaling w, if any.
func (s *set) hpaFor(w *workload) *autoscalingv2.HorizontalPodAutoscaler {
	for _, h := range s.hpas {
		r := h.Spec.ScaleTargetRef
		if r.Kind == w.kind && r.Name == w.name {
			return h
		}
	}
	return nil
}

// minReplicas is the fewest pods w runs with: its replicas, or its HPA's
// minReplicas (1 when unset, as in Kubernetes).
func (s *set) minReplicas(w *workload) int32 {
	if h := s.hpaFor(w); h != nil {
		if h.Spec.MinReplicas == nil {
			return 1
		}
		return *h.Spec.MinReplicas
	}
	if w.replicas == nil {
		return 1
	}
	return *w.replicas
}

// mainContainer is the rollstore container of w.
func mainContainer(w *workload) (*corev1.Container, error) {
	for i := range w.tmpl.Spec.Containers {
		if c := &w.tmpl.Spec.Containers[i]; c.Name == containerName {
			return c, nil
		}
	}
	return nil, fmt.Errorf("%s: no container named %q", w, containerName)
}

// containerPort resolves a probe or Service target port (a name or a number)
// against c's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) || (p.Type == intstr.String && p.StrVal != "" && cp.Name == p.StrVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func namedPort(c *corev1.Container, name string) (int32, bool) {
	return containerPort(c, intstr.FromString(name))
}

// env is the effective environment of a container: envFrom ConfigMaps first,
// then env entries, which override them (Kubernetes semantics). Values that
// come from valueFrom are kept aside in from.
type env struct {
	vals map[string]string
	from map[string]string // name -> "fieldRef:<path>", "resourceFieldRef:<res>", ...
}

func (s *set) effectiveEnv(c *corev1.Container) (env, []error) {
	e := env{vals: map[string]string{}, from: map[string]string{}}
	var errs []error
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil {
			continue
		}
		cm := s.configMapNamed(ef.ConfigMapRef.Name)
		if cm == nil {
			errs = append(errs, fmt.Errorf("envFrom references ConfigMap %q, which is not in the output", ef.ConfigMapRef.Name))
			continue
		}
		for k, v := range cm.Data {
			e.vals[ef.Prefix+k] = v
		}
	}
	for _, ev := range c.Env {
		delete(e.vals, ev.Name)
		delete(e.from, ev.Name)
		switch vf := ev.ValueFrom; {
		case vf == nil:
			e.vals[ev.Name] = ev.Value
		case vf.FieldRef != nil:
			e.from[ev.Name] = "fieldRef:" + vf.FieldRef.FieldPath
		case vf.ResourceFieldRef != nil:
			e.from[ev.Name] = "resourceFieldRef:" + vf.ResourceFieldRef.Resource
		case vf.ConfigMapKeyRef != nil:
			e.from[ev.Name] = "configMapKeyRef:" + vf.ConfigMapKeyRef.Name
		case vf.SecretKeyRef != nil:
			e.from[ev.Name] = "secretKeyRef:" + vf.SecretKeyRef.Name
		}
	}
	return e, errs
}

// parseBytes parses a byte size as GOMEMLIMIT takes it: a plain integer, or
// with a B, KiB, MiB, GiB or TiB suffix.
func parseBytes(s string) (int64, error) { return parseSize(s, false) }

// parseFlagSize parses a size as rollstore's size flags take it: like
// GOMEMLIMIT, and Ki, Mi, Gi, Ti (as Kubernetes writes them) and K, M, G,
// T as binary units too.
func parseFlagSize(s string) (int64, error) { return parseSize(s, true) }

func parseSize(s string, short bool) (int64, error) {
	s = strings.TrimSpace(s)
	type unit struct {
		suffix string
		shift  uint
	}
	units := []unit{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	if short {
		units = append(units, unit{"Ti", 40}, unit{"Gi", 30}, unit{"Mi", 20}, unit{"Ki", 10},
			unit{"T", 40}, unit{"G", 30}, unit{"M", 20}, unit{"K", 10})
	}
	in := s
	var shift uint
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, shift = strings.TrimSuffix(s, u.suffix), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)>>shift {
		return 0, fmt.Errorf("invalid byte size %q", in)
	}
	return n << shift, nil
}

func mib(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', -1, 64) + "Mi"
}

// budgets reads the memory budgets and drain timeout from c's effective env.
func (s *set) budgets(c *corev1.Container) (inflight, cache int64, drain time.Duration, errs []error) {
	e, errs := s.effectiveEnv(c)
	get := func(k string) (string, bool) {
		v, ok := e.vals[k]
		if !ok {
			errs = append(errs, fmt.Errorf("%s is not set (the ConfigMap must state it so the resources can be checked against it)", k))
		}
		return v, ok
	}
	var err error
	if v, ok := get(envInflight); ok {
		if inflight, err = parseFlagSize(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", envInflight, err))
		}
	}
	if v, ok := get(envCache); ok {
		if cache, err = parseFlagSize(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", envCache, err))
		}
	}
	if v, ok := get(envDrain); ok {
		if drain, err = time.ParseDuration(v); err != nil || drain <= 0 {
			errs = append(errs, fmt.Errorf("%s: invalid duration %q", envDrain, v))
		}
	}
	return inflight, cache, drain, errs
}

var guidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// splitImage splits an image reference into repository, tag and digest.
func splitImage(ref string) (repo, tag, digest string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref, digest = ref[:i], ref[i+1:]
	}
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		ref, tag = ref[:i], ref[i+1:]
	}
	return ref, tag, digest
}

// --- checks ----------------------------------------------------------------

// A check inspects a rendered kustomization and returns what is wrong.
type check struct {
	name        string
	overlayOnly bool
	fn          func(s *set) []error
}

var checks = []check{
	{name: "sources", fn: func(s *set) []error { return s.sourceErrs }},
	{name: "schema", fn: func(s *set) []error { return s.decodeErrs }},
	{name: "objects", fn: checkObjects},
	{name: "selectors", fn: checkSelectors},
	{name: "probes", fn: checkProbes},
	{name: "config", fn: checkConfig},
	{name: "resources", fn: checkResources},
	{name: "drain", fn: checkDrain},
	{name: "security", fn: checkSecurity},
	{name: "image", fn: checkImage},
	{name: "writers", fn: checkWriters},
	{name: "readers", fn: checkReaders},
	{name: "merger", fn: checkMerger},
	{name: "spread", fn: checkSpread},
	{name: "services", fn: checkServices},
	{name: "pdb", fn: checkPDBs},
	{name: "hpa", fn: checkHPAs},
	{name: "identity", fn: checkIdentity},
	{name: "metrics", fn: checkMetrics},
	{name: "monitoring", fn: checkMonitoring},
	{name: "network", fn: checkNetwork},
	{name: "azure", overlayOnly: true, fn: checkAzure},
}

// runChecks runs every applicable check; each error is prefixed with the
// check's name in brackets.
func runChecks(s *set) []error {
	var errs []error
	for _, c := range checks {
		if c.overlayOnly && !s.overlay {
			continue
		}
		for _, err := range c.fn(s) {
			errs = append(errs, fmt.Errorf("[%s] %s: %w", c.name, s.dir, err))
		}
	}
	return errs
}

// checkObjects: the expected objects exist once each, and namespaces are
// left to the overlay (base) or set consistently by it (overlay).
func checkObjects(s *set) []error {
	var errs []error
	seen := map[string]bool{}
	for _, k := range s.keys {
		if strings.HasSuffix(k, "/") {
			errs = append(errs, fmt.Errorf("%s: object without a name", k))
		}
		if seen[k] {
			errs = append(errs, fmt.Errorf("%s: defined twice", k))
		}
		seen[k] = true
	}
	for _, want := range []string{"StatefulSet/" + writerName, "Deployment/" + readerName, "Deployment/" + mergerName,
		"ServiceAccount/" + serviceAccountNm, "Service/" + readerName, "Service/" + writerName,
		"PodDisruptionBudget/" + readerName, "PodDisruptionBudget/" + writerName, "PodDisruptionBudget/" + mergerName} {
		if !seen[want] {
			errs = append(errs, fmt.Errorf("%s: missing", want))
		}
	}
	if !s.overlay {
		for _, k := range s.keys {
			if ns := s.objNamespaces[k]; ns != "" {
				errs = append(errs, fmt.Errorf("%s: the base sets namespace %q; it must stay namespace-agnostic", k, ns))
			}
		}
		return errs
	}
	if len(s.namespaces) != 1 {
		return append(errs, fmt.Errorf("the overlay must create exactly one Namespace, found %d", len(s.namespaces)))
	}
	ns := s.namespaces[0].Name
	for _, k := range s.keys {
		if strings.HasPrefix(k, "Namespace/") {
			continue
		}
		if got := s.objNamespaces[k]; got != ns {
			errs = append(errs, fmt.Errorf("%s: namespace %q, want %q (the Namespace the overlay creates)", k, got, ns))
		}
	}
	return errs
}

// checkSelectors: every workload's selector selects its own pod template,
// and no two workloads' selectors overlap.
func checkSelectors(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		if !selects(w.selector, w.tmpl.Labels) {
			errs = append(errs, fmt.Errorf("%s: selector %v does not match its pod template labels %v", w, w.selector, w.tmpl.Labels))
		}
		if w.component() == "" {
			errs = append(errs, fmt.Errorf("%s: pod template has no %s label", w, componentLabel))
		}
		for _, o := range s.workloads {
			if o != w && selects(w.selector, o.tmpl.Labels) {
				errs = append(errs, fmt.Errorf("%s: selector also selects the pods of %s", w, o))
			}
		}
	}
	return errs
}

// checkProbes: liveness on /healthz and readiness on /readyz, over HTTP, at
// the container's serving port; a startup probe, if any, on /healthz.
func checkProbes(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		port, ok := namedPort(c, portName)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: container has no port named %q", w, portName))
			continue
		}
		for _, p := range []struct {
			kind     string
			probe    *corev1.Probe
			path     string
			required bool
		}{
			{"liveness", c.LivenessProbe, livenessPath, true},
			{"readiness", c.ReadinessProbe, readinessPath, true},
			{"startup", c.StartupProbe, livenessPath, false},
		} {
			switch {
			case p.probe == nil:
				if p.required {
					errs = append(errs, fmt.Errorf("%s: no %s probe", w, p.kind))
				}
			case p.probe.HTTPGet == nil:
				errs = append(errs, fmt.Errorf("%s: %s probe is not an HTTP GET", w, p.kind))
			default:
				if p.probe.HTTPGet.Path != p.path {
					errs = append(errs, fmt.Errorf("%s: %s probe path %q, want %q", w, p.kind, p.probe.HTTPGet.Path, p.path))
				}
				if got, ok := containerPort(c, p.probe.HTTPGet.Port); !ok || got != port {
					errs = append(errs, fmt.Errorf("%s: %s probe port %s is not the container port %s (%d)", w, p.kind, intOrStr(p.probe.HTTPGet.Port), portName, port))
				}
				if sc := p.probe.HTTPGet.Scheme; sc != "" && sc != corev1.URISchemeHTTP {
					errs = append(errs, fmt.Errorf("%s: %s probe scheme %s, the server speaks HTTP", w, p.kind, sc))
				}
			}
		}
	}
	return errs
}

// checkConfig: every pod gets the shared ConfigMap, its role matches its
// component, and it listens on the port its container declares.
func checkConfig(s *set) []error {
	var errs []error
	roles := map[string]string{writerName: "writer", readerName: "reader", mergerName: "merger"}
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e, eerrs := s.effectiveEnv(c)
		for _, err := range eerrs {
			errs = append(errs, fmt.Errorf("%s: %v", w, err))
		}
		if len(c.EnvFrom) == 0 {
			errs = append(errs, fmt.Errorf("%s: no envFrom: the shared ConfigMap is not wired in", w))
		}
		role := e.vals[envRole]
		if want, ok := roles[w.name]; ok && role != want {
			errs = append(errs, fmt.Errorf("%s: %s=%q, want %q", w, envRole, role, want))
		}
		if role != w.component() {
			errs = append(errs, fmt.Errorf("%s: %s=%q but the pods are labelled %s=%q", w, envRole, role, componentLabel, w.component()))
		}
		listen, ok := e.vals[envListen]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s is not set", w, envListen))
			continue
		}
		_, lp, err := net.SplitHostPort(listen)
		port, ok := namedPort(c, portName)
		if err != nil || !ok || lp != strconv.Itoa(int(port)) {
			errs = append(errs, fmt.Errorf("%s: %s=%q does not listen on the container port %s (%d)", w, envListen, listen, portName, port))
		}
	}
	return errs
}

// checkResources: requests and limits set for cpu, memory and ephemeral
// storage; the memory limit covers the budgets the pod is configured with
// (in-flight payload bytes + cache bytes) plus headroom, the request covers
// the budgets, and GOMEMLIMIT (if set) sits between the budgets and the
// limit; every emptyDir is bounded and the ephemeral-storage limit covers
// them and the logs.
func checkResources(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		var emptyDirs int64
		for _, v := range w.tmpl.Spec.Volumes {
			if v.EmptyDir == nil {
				continue
			}
			if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.Sign() <= 0 {
				errs = append(errs, fmt.Errorf("%s: emptyDir %s has no sizeLimit: it could fill the node's disk", w, v.Name))
				continue
			}
			emptyDirs += v.EmptyDir.SizeLimit.Value()
		}
		for i := range w.tmpl.Spec.Containers {
			c := &w.tmpl.Spec.Containers[i]
			vals := map[string]resource.Quantity{}
			for _, kind := range []string{"requests", "limits"} {
				m := c.Resources.Requests
				if kind == "limits" {
					m = c.Resources.Limits
				}
				for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
					q, ok := m[res]
					if !ok {
						errs = append(errs, fmt.Errorf("%s container %s: no %s.%s", w, c.Name, kind, res))
						continue
					}
					if q.Sign() <= 0 {
						errs = append(errs, fmt.Errorf("%s container %s: %s.%s %s is not positive", w, c.Name, kind, res, q.String()))
						continue
					}
					vals[kind+"."+string(res)] = q
				}
			}
			for _, res := range []string{"cpu", "memory", "ephemeral-storage"} {
				rq, ok1 := vals["requests."+res]
				lm, ok2 := vals["limits."+res]
				if ok1 && ok2 && rq.Cmp(lm) > 0 {
					errs = append(errs, fmt.Errorf("%s container %s: %s request above its limit", w, c.Name, res))
				}
			}
			if lm, ok := vals["limits.ephemeral-storage"]; ok && c.Name == containerName {
				if need := emptyDirs + logAllowance; lm.Value() < need {
					errs = append(errs, fmt.Errorf("%s container %s: ephemeral-storage limit %s < emptyDir size limits %s + logs %s = %s: the kubelet would evict the pod",
						w, c.Name, mib(lm.Value()), mib(emptyDirs), mib(logAllowance), mib(need)))
				}
			}
			if c.Name != containerName {
				continue
			}
			inflight, cache, _, berrs := s.budgets(c)
			for _, err := range berrs {
				errs = append(errs, fmt.Errorf("%s: %v", w, err))
			}
			rq, ok1 := vals["requests.memory"]
			lq, ok2 := vals["limits.memory"]
			if inflight == 0 || cache == 0 || !ok1 || !ok2 {
				continue
			}
			req, lim := rq.Value(), lq.Value()
			budgets := inflight + cache
			if need := budgets + headroom; lim < need {
				errs = append(errs, fmt.Errorf("%s: memory limit %s < in-flight %s + cache %s + headroom %s = %s",
					w, mib(lim), mib(inflight), mib(cache), mib(headroom), mib(need)))
			}
			if req < budgets {
				errs = append(errs, fmt.Errorf("%s: memory request %s < in-flight %s + cache %s: the scheduler would not reserve the configured budgets",
					w, mib(req), mib(inflight), mib(cache)))
			}
			e, _ := s.effectiveEnv(c)
			if gml, ok := e.vals["GOMEMLIMIT"]; ok {
				g, err := parseBytes(gml)
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("%s: GOMEMLIMIT: %v", w, err))
				case g >= lim:
					errs = append(errs, fmt.Errorf("%s: GOMEMLIMIT %s is not below the memory limit %s", w, mib(g), mib(lim)))
				case g < budgets:
					errs = append(errs, fmt.Errorf("%s: GOMEMLIMIT %s is below the configured budgets %s", w, mib(g), mib(budgets)))
				}
			}
		}
	}
	return errs
}

// checkDrain: a preStop sleep lets endpoint removal propagate, then the
// drain runs; the grace period covers both.
func checkDrain(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, _, drain, _ := s.budgets(c)
		if drain <= 0 {
			errs = append(errs, fmt.Errorf("%s: no valid %s", w, envDrain))
			continue
		}
		var sleep time.Duration
		if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Sleep.Seconds < 1 {
			errs = append(errs, fmt.Errorf("%s: no preStop sleep: endpoints would still route to a draining pod", w))
		} else {
			sleep = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
		g := w.tmpl.Spec.TerminationGracePeriodSeconds
		if g == nil {
			errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds unset (default 30s)", w))
			continue
		}
		if grace := time.Duration(*g) * time.Second; grace <= sleep+drain {
			errs = append(errs, fmt.Errorf("%s: terminationGracePeriodSeconds %s <= preStop sleep %s + %s %s: the pod is killed mid-drain",
				w, grace, sleep, envDrain, drain))
		}
	}
	return errs
}

// checkSecurity: non-root, read-only root filesystem, no privilege
// escalation, no capabilities, RuntimeDefault seccomp, no API token: the
// "restricted" Pod Security Standard and then some.
func checkSecurity(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		ps := w.tmpl.Spec.SecurityContext
		if ps == nil {
			ps = &corev1.PodSecurityContext{}
		}
		if a := w.tmpl.Spec.AutomountServiceAccountToken; a == nil || *a {
			errs = append(errs, fmt.Errorf("%s: automountServiceAccountToken must be false (rollstore never calls the Kubernetes API)", w))
		}
		for i := range w.tmpl.Spec.Containers {
			c := &w.tmpl.Spec.Containers[i]
			cs := c.SecurityContext
			if cs == nil {
				errs = append(errs, fmt.Errorf("%s container %s: no securityContext", w, c.Name))
				continue
			}
			nonRoot := (ps.RunAsNonRoot != nil && *ps.RunAsNonRoot) || (cs.RunAsNonRoot != nil && *cs.RunAsNonRoot)
			if !nonRoot || (cs.RunAsNonRoot != nil && !*cs.RunAsNonRoot) {
				errs = append(errs, fmt.Errorf("%s container %s: runAsNonRoot is not true", w, c.Name))
			}
			uid := ps.RunAsUser
			if cs.RunAsUser != nil {
				uid = cs.RunAsUser
			}
			if uid == nil || *uid == 0 {
				errs = append(errs, fmt.Errorf("%s container %s: runAsUser must be set to a non-root uid", w, c.Name))
			}
			if cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
				errs = append(errs, fmt.Errorf("%s container %s: readOnlyRootFilesystem is not true", w, c.Name))
			}
			if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
				errs = append(errs, fmt.Errorf("%s container %s: allowPrivilegeEscalation is not false", w, c.Name))
			}
			if cs.Privileged != nil && *cs.Privileged {
				errs = append(errs, fmt.Errorf("%s container %s: privileged", w, c.Name))
			}
			if cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") || len(cs.Capabilities.Add) > 0 {
				errs = append(errs, fmt.Errorf("%s container %s: capabilities must drop ALL and add none", w, c.Name))
			}
			sp := ps.SeccompProfile
			if cs.SeccompProfile != nil {
				sp = cs.SeccompProfile
			}
			if sp == nil || (sp.Type != "RuntimeDefault" && sp.Type != "Localhost") {
				errs = append(errs, fmt.Errorf("%s container %s: seccompProfile must be RuntimeDefault", w, c.Name))
			}
			mounts := map[string]bool{}
			for _, v := range w.tmpl.Spec.Volumes {
				mounts[v.Name] = true
			}
			for _, m := range c.VolumeMounts {
				if !mounts[m.Name] {
					errs = append(errs, fmt.Errorf("%s container %s: volumeMount %q has no volume", w, c.Name, m.Name))
				}
			}
		}
	}
	return errs
}

// checkImage: never :latest, always a tag or digest; the base carries only
// the placeholder, and the overlay replaces it everywhere with one pinned
// image from a registry.
func checkImage(s *set) []error {
	var errs []error
	images := map[string]bool{}
	for _, w := range s.workloads {
		for _, c := range append(slices.Clone(w.tmpl.Spec.InitContainers), w.tmpl.Spec.Containers...) {
			repo, tag, digest := splitImage(c.Image)
			switch {
			case repo == "":
				errs = append(errs, fmt.Errorf("%s container %s: no image", w, c.Name))
			case tag == "latest":
				errs = append(errs, fmt.Errorf("%s container %s: image %s uses the latest tag", w, c.Name, c.Image))
			case tag == "" && digest == "":
				errs = append(errs, fmt.Errorf("%s container %s: image %s has no tag or digest (that means latest)", w, c.Name, c.Image))
			}
			if c.ImagePullPolicy == "Always" {
				errs = append(errs, fmt.Errorf("%s container %s: imagePullPolicy Always: a pinned image needs IfNotPresent", w, c.Name))
			}
			if c.Name != containerName {
				continue
			}
			images[c.Image] = true
			if !s.overlay && c.Image != placeholderImage {
				errs = append(errs, fmt.Errorf("%s: base image %q, want the placeholder %q that overlays replace", w, c.Image, placeholderImage))
			}
			if s.overlay {
				if c.Image == placeholderImage || repo == "rollstore" || tag == "set-by-overlay" {
					errs = append(errs, fmt.Errorf("%s: image %q: the overlay did not pin the image (kustomize images: name rollstore)", w, c.Image))
				} else if first, _, ok := strings.Cut(repo, "/"); !ok || !strings.ContainsAny(first, ".:") {
					errs = append(errs, fmt.Errorf("%s: image %q does not name a registry", w, c.Image))
				}
			}
		}
	}
	if len(images) > 1 {
		errs = append(errs, fmt.Errorf("the rollstore containers run different images %v: one release at a time", keysOf(images)))
	}
	return errs
}

func keysOf[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// checkWriters: one StatefulSet, started in parallel, with a headless
// governing Service, and each pod's shard is its own name.
func checkWriters(s *set) []error {
	w := s.workloadNamed("StatefulSet", writerName)
	if w == nil {
		return []error{fmt.Errorf("StatefulSet/%s missing (shard names derive from it: rename it on purpose only)", writerName)}
	}
	var errs []error
	if w.component() != "writer" {
		errs = append(errs, fmt.Errorf("%s: %s=%q, want writer", w, componentLabel, w.component()))
	}
	if w.replicas == nil || *w.replicas < 1 {
		errs = append(errs, fmt.Errorf("%s: replicas must be set and at least 1", w))
	}
	if s.hpaFor(w) != nil {
		errs = append(errs, fmt.Errorf("%s: writers are shards, not autoscaled", w))
	}
	if p := w.sts.Spec.PodManagementPolicy; p != "Parallel" {
		errs = append(errs, fmt.Errorf("%s: podManagementPolicy %q, want Parallel (shards are independent)", w, p))
	}
	var gov *corev1.Service
	for _, svc := range s.services {
		if svc.Name == w.sts.Spec.ServiceName {
			gov = svc
		}
	}
	switch {
	case gov == nil:
		errs = append(errs, fmt.Errorf("%s: serviceName %q is not a Service in the output", w, w.sts.Spec.ServiceName))
	case gov.Spec.ClusterIP != "None":
		errs = append(errs, fmt.Errorf("%s: serviceName %q is not headless (clusterIP: None)", w, gov.Name))
	case !selectsMap(gov.Spec.Selector, w.tmpl.Labels):
		errs = append(errs, fmt.Errorf("%s: headless Service %q does not select the writer pods", w, gov.Name))
	}
	c, err := mainContainer(w)
	if err != nil {
		return append(errs, err)
	}
	e, _ := s.effectiveEnv(c)
	if from := e.from[envShard]; from != "fieldRef:metadata.name" {
		errs = append(errs, fmt.Errorf("%s: %s must come from fieldRef metadata.name (the pod name is the shard), got %q", w, envShard, from+e.vals[envShard]))
	}
	for _, cm := range s.configMaps {
		if _, ok := cm.Data[envShard]; ok {
			errs = append(errs, fmt.Errorf("ConfigMap/%s sets %s: every pod would claim the same shard", cm.Name, envShard))
		}
		if _, ok := cm.Data[envAdvert]; ok {
			errs = append(errs, fmt.Errorf("ConfigMap/%s sets %s: every writer would advertise the same address", cm.Name, envAdvert))
		}
	}
	// Writers forward to each other at their pod IPs and API port.
	if from := e.from[envPodIP]; from != "fieldRef:status.podIP" {
		errs = append(errs, fmt.Errorf("%s: %s must come from fieldRef status.podIP (the address other writers forward to), got %q", w, envPodIP, from+e.vals[envPodIP]))
	}
	_, listenPort, _ := strings.Cut(e.vals[envListen], ":")
	if want := "$(" + envPodIP + "):" + listenPort; listenPort == "" || e.vals[envAdvert] != want {
		errs = append(errs, fmt.Errorf("%s: %s=%q, want %q (the pod IP and the %s port)", w, envAdvert, e.vals[envAdvert], want, envListen))
	}
	// $(POD_IP) expands only if POD_IP is defined before it.
	podIPAt, advertAt := -1, -1
	for i, ev := range c.Env {
		switch ev.Name {
		case envPodIP:
			podIPAt = i
		case envAdvert:
			advertAt = i
		}
	}
	if podIPAt < 0 || advertAt < podIPAt {
		errs = append(errs, fmt.Errorf("%s: %s must be defined after %s, or $(%s) is not expanded", w, envAdvert, envPodIP, envPodIP))
	}
	if port, ok := namedPort(c, portName); ok && !writersReachEachOther(s, w, c, port) {
		errs = append(errs, fmt.Errorf("%s: the NetworkPolicies do not let a writer reach another writer's %s port (%d): forwarded writes would fail", w, portName, port))
	}
	return errs
}

// writersReachEachOther reports whether the NetworkPolicies selecting the
// writer pods let them out to writer pods on port, and in from them.
func writersReachEachOther(s *set, w *workload, c *corev1.Container, port int32) bool {
	out, in := false, false
	for _, np := range s.netpols {
		if !selects(&np.Spec.PodSelector, w.tmpl.Labels) {
			continue
		}
		for _, r := range np.Spec.Egress {
			if !portAllowed(r.Ports, c, port, corev1.ProtocolTCP) {
				continue
			}
			if len(r.To) == 0 {
				out = true
			}
			for _, peer := range r.To {
				if peer.IPBlock == nil && peer.NamespaceSelector == nil && (peer.PodSelector == nil || selects(peer.PodSelector, w.tmpl.Labels)) {
					out = true
				}
			}
		}
		for _, r := range np.Spec.Ingress {
			if !portAllowed(r.Ports, c, port, corev1.ProtocolTCP) {
				continue
			}
			if len(r.From) == 0 {
				in = true
			}
			for _, peer := range r.From {
				if peer.IPBlock == nil && (peer.PodSelector == nil || selects(peer.PodSelector, w.tmpl.Labels)) {
					in = true
				}
			}
		}
	}
	return out && in
}

// checkReaders: a horizontally scalable Deployment that keeps at least two
// pods and rolls without losing capacity.
func checkReaders(s *set) []error {
	w := s.workloadNamed("Deployment", readerName)
	if w == nil {
		return []error{fmt.Errorf("Deployment/%s missing", readerName)}
	}
	var errs []error
	if w.component() != "reader" {
		errs = append(errs, fmt.Errorf("%s: %s=%q, want reader", w, componentLabel, w.component()))
	}
	if n := s.minReplicas(w); n < 2 {
		errs = append(errs, fmt.Errorf("%s: runs with %d replica(s) at least; readers need 2 to survive a disruption", w, n))
	}
	if t := w.dep.Spec.Strategy.Type; t != "" && t != "RollingUpdate" {
		errs = append(errs, fmt.Errorf("%s: strategy %s, want RollingUpdate", w, t))
	}
	return errs
}

// checkMerger: exactly one merger, replaced with Recreate so a rollout
// never runs two, and nothing scales it.
func checkMerger(s *set) []error {
	w := s.workloadNamed("Deployment", mergerName)
	if w == nil {
		return []error{fmt.Errorf("Deployment/%s missing", mergerName)}
	}
	var errs []error
	if w.component() != "merger" {
		errs = append(errs, fmt.Errorf("%s: %s=%q, want merger", w, componentLabel, w.component()))
	}
	if w.replicas == nil || *w.replicas != 1 {
		errs = append(errs, fmt.Errorf("%s: replicas must be exactly 1 (a singleton by blob lease)", w))
	}
	if t := w.dep.Spec.Strategy.Type; t != appsv1.RecreateDeploymentStrategyType {
		errs = append(errs, fmt.Errorf("%s: strategy %q, want Recreate (a rolling update overlaps two mergers)", w, t))
	}
	if s.hpaFor(w) != nil {
		errs = append(errs, fmt.Errorf("%s: the merger must not be autoscaled", w))
	}
	return errs
}

// checkSpread: readers and writers spread across nodes (topology spread or
// pod anti-affinity on kubernetes.io/hostname, selecting their own pods).
func checkSpread(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		if w.name == mergerName {
			continue
		}
		spec := &w.tmpl.Spec
		ok := false
		for _, tsc := range spec.TopologySpreadConstraints {
			if tsc.TopologyKey == "kubernetes.io/hostname" && tsc.MaxSkew >= 1 && selects(tsc.LabelSelector, w.tmpl.Labels) {
				ok = true
			}
		}
		if spec.Affinity != nil && spec.Affinity.PodAntiAffinity != nil {
			terms := slices.Clone(spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
			for _, p := range spec.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				terms = append(terms, p.PodAffinityTerm)
			}
			for _, t := range terms {
				if t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, w.tmpl.Labels) {
					ok = true
				}
			}
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%s: no topology spread or anti-affinity over kubernetes.io/hostname selecting its own pods", w))
		}
	}
	return errs
}

// checkServices: every Service selects the pods of exactly one workload and
// its target ports exist on them; reads go to readers, writes to writers.
func checkServices(s *set) []error {
	var errs []error
	for _, svc := range s.services {
		var matched []*workload
		for _, w := range s.workloads {
			if selectsMap(svc.Spec.Selector, w.tmpl.Labels) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			errs = append(errs, fmt.Errorf("Service/%s: selector %v selects %d workloads' pods, want exactly 1", svc.Name, svc.Spec.Selector, len(matched)))
			continue
		}
		w := matched[0]
		want := map[string]string{readerName: "reader", writerName: "writer"}[svc.Name]
		if want != "" && w.component() != want {
			errs = append(errs, fmt.Errorf("Service/%s selects the %s pods, want the %s pods", svc.Name, w.component(), want))
		}
		if len(svc.Spec.Ports) == 0 {
			errs = append(errs, fmt.Errorf("Service/%s: no ports", svc.Name))
		}
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range svc.Spec.Ports {
			tp := p.TargetPort
			if tp.String() == "" || tp.String() == "0" {
				tp = intstr.FromInt32(p.Port)
			}
			if _, ok := containerPort(c, tp); !ok {
				errs = append(errs, fmt.Errorf("Service/%s: targetPort %s is not a port of the %s pods", svc.Name, intOrStr(tp), w))
			}
		}
	}
	return errs
}

// checkPDBs: every workload has exactly one budget selecting only its pods;
// a budget never blocks a drain forever, and readers keep one pod serving.
func checkPDBs(s *set) []error {
	var errs []error
	covered := map[*workload]int{}
	for _, p := range s.pdbs {
		name := "PodDisruptionBudget/" + p.Name
		var matched []*workload
		for _, w := range s.workloads {
			if selects(p.Spec.Selector, w.tmpl.Labels) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			errs = append(errs, fmt.Errorf("%s: selector selects %d workloads' pods, want exactly 1", name, len(matched)))
			continue
		}
		w := matched[0]
		covered[w]++
		minA, maxU := p.Spec.MinAvailable, p.Spec.MaxUnavailable
		if (minA == nil) == (maxU == nil) {
			errs = append(errs, fmt.Errorf("%s: set exactly one of minAvailable and maxUnavailable", name))
			continue
		}
		n := int64(s.minReplicas(w))
		// allowed: how many pods of the smallest scale may be evicted at once.
		var allowed int64
		switch {
		case minA != nil && minA.Type == intstr.Int:
			allowed = n - int64(minA.IntVal)
		case maxU != nil && maxU.Type == intstr.Int:
			allowed = int64(maxU.IntVal)
		default:
			errs = append(errs, fmt.Errorf("%s: use an absolute number, not a percentage", name))
			continue
		}
		if allowed < 1 {
			errs = append(errs, fmt.Errorf("%s: with %d replica(s) it allows no eviction: node drains and cluster upgrades would block on %s", name, n, w))
		}
		if remaining := n - allowed; w.component() == "reader" && remaining < 1 {
			errs = append(errs, fmt.Errorf("%s: lets every reader go at once", name))
		}
		if w.component() == "writer" && allowed > 1 {
			errs = append(errs, fmt.Errorf("%s: lets %d writer shards go at once, want 1", name, allowed))
		}
	}
	for _, w := range s.workloads {
		if covered[w] != 1 {
			errs = append(errs, fmt.Errorf("%s: covered by %d PodDisruptionBudgets, want 1", w, covered[w]))
		}
	}
	return errs
}

// checkHPAs: an autoscaler targets the readers only, keeps at least two,
// scales on CPU requests that exist, and owns the replica count.
func checkHPAs(s *set) []error {
	var errs []error
	for _, h := range s.hpas {
		name := "HorizontalPodAutoscaler/" + h.Name
		r := h.Spec.ScaleTargetRef
		w := s.workloadNamed(r.Kind, r.Name)
		if w == nil || r.APIVersion != "apps/v1" {
			errs = append(errs, fmt.Errorf("%s: scaleTargetRef %s %s/%s is not in the output", name, r.APIVersion, r.Kind, r.Name))
			continue
		}
		if w.component() != "reader" {
			errs = append(errs, fmt.Errorf("%s: scales %s; only readers scale horizontally", name, w))
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 2 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
			errs = append(errs, fmt.Errorf("%s: minReplicas must be set, at least 2 and at most maxReplicas %d", name, h.Spec.MaxReplicas))
		}
		if w.replicas != nil {
			errs = append(errs, fmt.Errorf("%s: %s also sets spec.replicas; every kubectl apply would reset the HPA's count", name, w))
		}
		for _, m := range h.Spec.Metrics {
			if m.Resource == nil {
				continue
			}
			for _, c := range w.tmpl.Spec.Containers {
				if _, ok := c.Resources.Requests[m.Resource.Name]; !ok && m.Resource.Target.Type == "Utilization" {
					errs = append(errs, fmt.Errorf("%s: scales on %s utilization but container %s requests no %s", name, m.Resource.Name, c.Name, m.Resource.Name))
				}
			}
		}
	}
	return errs
}

// checkIdentity: the workload identity wiring, in the base already: the
// ServiceAccount carries a client-id annotation and every pod runs as it,
// labelled for the webhook.
func checkIdentity(s *set) []error {
	var errs []error
	var sa *corev1.ServiceAccount
	for _, x := range s.serviceAccounts {
		if x.Name == serviceAccountNm {
			sa = x
		}
	}
	if sa == nil {
		errs = append(errs, fmt.Errorf("ServiceAccount/%s missing", serviceAccountNm))
	} else if id := sa.Annotations[wiClientIDKey]; !guidRE.MatchString(id) {
		errs = append(errs, fmt.Errorf("ServiceAccount/%s: annotation %s=%q is not a client id (GUID)", serviceAccountNm, wiClientIDKey, id))
	}
	for _, w := range s.workloads {
		if n := w.tmpl.Spec.ServiceAccountName; n != serviceAccountNm {
			errs = append(errs, fmt.Errorf("%s: serviceAccountName %q, want %q", w, n, serviceAccountNm))
		}
		if v := w.tmpl.Labels[wiUseLabel]; v != "true" {
			errs = append(errs, fmt.Errorf("%s: pod label %s=%q, want \"true\" (the webhook injects the token only then)", w, wiUseLabel, v))
		}
		if _, ok := w.selector.MatchLabels[wiUseLabel]; ok {
			errs = append(errs, fmt.Errorf("%s: %s belongs in the pod labels, not the (immutable) selector", w, wiUseLabel))
		}
	}
	return errs
}

// Prometheus' pod annotations, as its kubernetes_sd "pod" role reads them.
const (
	annScrape = "prometheus.io/scrape"
	annPort   = "prometheus.io/port"
	annPath   = "prometheus.io/path"
)

// metricsTarget is where the annotations send the scraper, and the setting
// that puts a listener there.
type metricsTarget struct {
	port   int32
	path   string
	listen string // ROLLSTORE_METRICS_LISTEN as configured
}

// scrapeTarget checks a workload's scrape wiring and returns the target:
// the annotations name the container's "metrics" port and /metrics, and
// ROLLSTORE_METRICS_LISTEN listens on exactly that port, which is not the
// API port (whose /metrics needs the token once auth is on).
func (s *set) scrapeTarget(w *workload) (metricsTarget, []error) {
	var errs []error
	ann := w.tmpl.Annotations
	if ann[annScrape] != "true" {
		errs = append(errs, fmt.Errorf("%s: pod annotation %s=%q, want \"true\"", w, annScrape, ann[annScrape]))
	}
	t := metricsTarget{path: ann[annPath]}
	if t.path != metricsPath {
		errs = append(errs, fmt.Errorf("%s: pod annotation %s=%q, want %s", w, annPath, t.path, metricsPath))
	}
	c, err := mainContainer(w)
	if err != nil {
		return t, append(errs, err)
	}
	mp, ok := namedPort(c, metricsPortName)
	if !ok {
		return t, append(errs, fmt.Errorf("%s: container has no port named %q", w, metricsPortName))
	}
	if p, err := strconv.Atoi(ann[annPort]); err != nil || int32(p) != mp {
		errs = append(errs, fmt.Errorf("%s: pod annotation %s=%q is not the container port %s (%d): the scraper would miss the metrics listener", w, annPort, ann[annPort], metricsPortName, mp))
	}
	t.port = mp
	if hp, ok := namedPort(c, portName); ok && hp == mp {
		errs = append(errs, fmt.Errorf("%s: the metrics port is the API port %d", w, hp))
	}
	e, _ := s.effectiveEnv(c)
	listen, ok := e.vals[envMetrics]
	if !ok {
		return t, append(errs, fmt.Errorf("%s: %s is not set: nothing listens on the metrics port", w, envMetrics))
	}
	t.listen = listen
	if _, lp, err := net.SplitHostPort(listen); err != nil || lp != strconv.Itoa(int(mp)) {
		errs = append(errs, fmt.Errorf("%s: %s=%q does not listen on the container port %s (%d)", w, envMetrics, listen, metricsPortName, mp))
	}
	return t, errs
}

// checkMetrics: every pod is scraped where its metrics listener is.
func checkMetrics(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		_, e := s.scrapeTarget(w)
		errs = append(errs, e...)
	}
	return errs
}

// portAllowed reports whether a NetworkPolicy port list admits the
// container port (resolving named ports against c); an empty list admits
// every port.
func portAllowed(ports []networkingv1.NetworkPolicyPort, c *corev1.Container, port int32, proto corev1.Protocol) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		n, ok := containerPort(c, *p.Port)
		if p.Port.Type == intstr.Int {
			n, ok = p.Port.IntVal, true
		}
		if ok && (n == port || (p.EndPort != nil && n <= port && port <= *p.EndPort)) {
			return true
		}
	}
	return false
}

// checkNetwork: every pod is isolated both ways by a NetworkPolicy that
// still lets in the API and the scraper, and lets out DNS and HTTPS (Azure
// Storage, Entra ID).
func checkNetwork(s *set) []error {
	var errs []error
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var ingress, egress bool
		var inRules []networkingv1.NetworkPolicyIngressRule
		var outRules []networkingv1.NetworkPolicyEgressRule
		for _, np := range s.netpols {
			if !selects(&np.Spec.PodSelector, w.tmpl.Labels) {
				continue
			}
			for _, t := range np.Spec.PolicyTypes {
				switch t {
				case networkingv1.PolicyTypeIngress:
					ingress = true
					inRules = append(inRules, np.Spec.Ingress...)
				case networkingv1.PolicyTypeEgress:
					egress = true
					outRules = append(outRules, np.Spec.Egress...)
				}
			}
		}
		if !ingress || !egress {
			errs = append(errs, fmt.Errorf("%s: no NetworkPolicy restricts its ingress and egress (ingress %v, egress %v)", w, ingress, egress))
			continue
		}
		for _, name := range []string{portName, metricsPortName} {
			port, ok := namedPort(c, name)
			if !ok {
				continue // checkProbes and checkMetrics report it
			}
			allowed := false
			for _, r := range inRules {
				allowed = allowed || portAllowed(r.Ports, c, port, corev1.ProtocolTCP)
			}
			if !allowed {
				errs = append(errs, fmt.Errorf("%s: the NetworkPolicies let no traffic in to port %s (%d)", w, name, port))
			}
		}
		for _, out := range []struct {
			port  int32
			proto corev1.Protocol
			what  string
		}{{53, corev1.ProtocolUDP, "DNS"}, {443, corev1.ProtocolTCP, "HTTPS to Azure Storage and Entra ID"}} {
			allowed := false
			for _, r := range outRules {
				allowed = allowed || portAllowed(r.Ports, &corev1.Container{}, out.port, out.proto)
			}
			if !allowed {
				errs = append(errs, fmt.Errorf("%s: the NetworkPolicies let no %s out (%s %d)", w, out.what, out.proto, out.port))
			}
		}
	}
	for _, np := range s.netpols {
		n := 0
		for _, w := range s.workloads {
			if selects(&np.Spec.PodSelector, w.tmpl.Labels) {
				n++
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("NetworkPolicy/%s selects no rollstore pod", np.Name))
		}
	}
	return errs
}

var (
	accountRE   = regexp.MustCompile(`^[a-z0-9]{3,24}$`)
	containerRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$`)
)

// checkAzure (overlay): the store is Azure through workload identity, the
// location is well-formed, and the client id is filled in.
func checkAzure(s *set) []error {
	var errs []error
	for _, sa := range s.serviceAccounts {
		if sa.Name == serviceAccountNm && sa.Annotations[wiClientIDKey] == zeroGUID {
			errs = append(errs, fmt.Errorf("ServiceAccount/%s: the overlay did not patch %s (still the base placeholder)", serviceAccountNm, wiClientIDKey))
		}
	}
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		e, _ := s.effectiveEnv(c)
		for k, want := range map[string]string{envStore: "azure", envAuth: "workload-identity"} {
			if got := e.vals[k]; got != want {
				errs = append(errs, fmt.Errorf("%s: %s=%q, want %q", w, k, got, want))
			}
		}
		if a := e.vals[envAccount]; !accountRE.MatchString(a) {
			errs = append(errs, fmt.Errorf("%s: %s=%q is not a storage account name (3-24 lowercase letters and digits)", w, envAccount, a))
		}
		if c := e.vals[envBlobCtr]; !containerRE.MatchString(c) || strings.Contains(c, "--") {
			errs = append(errs, fmt.Errorf("%s: %s=%q is not a blob container name", w, envBlobCtr, c))
		}
		if p := e.vals[envPrefix]; strings.Trim(p, "/") == "" {
			errs = append(errs, fmt.Errorf("%s: %s is empty: every deployment needs its own prefix", w, envPrefix))
		}
	}
	return errs
}

// --- tests -----------------------------------------------------------------

func renderOrFatal(t *testing.T, tree map[string]string, dir string) *set {
	t.Helper()
	s, err := render(tree, dir)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestManifests renders the base and the Azure overlay and runs every check.
func TestManifests(t *testing.T) {
	tree := loadTree(t)
	for _, dir := range []string{baseDir, overlayDir} {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			s := renderOrFatal(t, tree, dir)
			if len(s.keys) == 0 {
				t.Fatal("rendered nothing")
			}
			for _, err := range runChecks(s) {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("rendered %s:\n%s", dir, s.yaml)
			}
		})
	}
}

// TestManifestsWithPrometheusOperator renders the Azure overlay with the
// prometheus-operator component included, as its commented line says, and
// runs every check: the PodMonitor and the PrometheusRule decode strictly
// into the operator's types, scrape every pod's metrics listener, and the
// rules are those of deploy/prometheus.
func TestManifestsWithPrometheusOperator(t *testing.T) {
	s, err := renderMonitoring(loadTree(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range runChecks(s) {
		t.Error(err)
	}
	if t.Failed() {
		t.Logf("rendered:\n%s", s.yaml)
	}
}

// TestOverlayPatchesBase pins down what the overlay changes: the values the
// base leaves as placeholders are replaced, and nothing else about the pods
// drifts (same workloads, same probes and resources).
func TestOverlayPatchesBase(t *testing.T) {
	tree := loadTree(t)
	base, overlay := renderOrFatal(t, tree, baseDir), renderOrFatal(t, tree, overlayDir)
	for _, bw := range base.workloads {
		ow := overlay.workloadNamed(bw.kind, bw.name)
		if ow == nil {
			t.Errorf("%s: in the base but not in the overlay", bw)
			continue
		}
		bc, err1 := mainContainer(bw)
		oc, err2 := mainContainer(ow)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if bc.Image != placeholderImage || oc.Image == bc.Image {
			t.Errorf("%s: image base %q overlay %q: the overlay must replace the placeholder", bw, bc.Image, oc.Image)
		}
		if !equality.Semantic.DeepEqual(bc.Resources, oc.Resources) {
			t.Errorf("%s: resources differ between base and overlay", bw)
		}
		be, _ := base.effectiveEnv(bc)
		oe, _ := overlay.effectiveEnv(oc)
		for _, k := range []string{envInflight, envCache, envDrain, envListen} {
			if be.vals[k] != oe.vals[k] {
				t.Errorf("%s: %s base %q overlay %q", bw, k, be.vals[k], oe.vals[k])
			}
		}
		if oe.vals[envStore] != "azure" {
			t.Errorf("%s: overlay %s=%q", bw, envStore, oe.vals[envStore])
		}
	}
	if len(base.workloads) != len(overlay.workloads) {
		t.Errorf("base has %d workloads, overlay %d", len(base.workloads), len(overlay.workloads))
	}
}

// TestMemoryArithmetic states the documented numbers, so a change to the
// budgets or limits is a deliberate edit here too.
func TestMemoryArithmetic(t *testing.T) {
	s := renderOrFatal(t, loadTree(t), overlayDir)
	want := map[string]struct{ req, lim string }{
		writerName: {"1Gi", "1536Mi"},
		readerName: {"1Gi", "1536Mi"},
		mergerName: {"1Gi", "2Gi"},
	}
	for _, w := range s.workloads {
		c, err := mainContainer(w)
		if err != nil {
			t.Fatal(err)
		}
		inflight, cache, drain, errs := s.budgets(c)
		if len(errs) > 0 {
			t.Fatal(errs)
		}
		if mib(inflight) != "512Mi" || mib(cache) != "256Mi" || drain != 30*time.Second {
			t.Errorf("%s: budgets in-flight %s cache %s drain %s, the README documents 512Mi, 256Mi, 30s", w, mib(inflight), mib(cache), drain)
		}
		rq, lq := c.Resources.Requests[corev1.ResourceMemory], c.Resources.Limits[corev1.ResourceMemory]
		if got := (struct{ req, lim string }{rq.String(), lq.String()}); got != want[w.name] {
			t.Errorf("%s: memory request/limit %v, the README documents %v", w, got, want[w.name])
		}
	}
}
