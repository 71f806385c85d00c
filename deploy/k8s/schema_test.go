package k8s_test

// The rendered manifests are decoded strictly into the Kubernetes API's own
// Go types (k8s.io/api): an unknown, misspelt or misplaced field, or a
// duplicate one, fails the tests instead of being dropped silently by the
// API server. Only the group versions below may appear.

import (
	"fmt"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// scheme holds the kinds the manifests may contain, in the versions the
// supported clusters (Kubernetes >= 1.30) serve, and the Prometheus
// operator's PodMonitor and PrometheusRule (monitoring.coreos.com/v1) for
// components/prometheus-operator, in the operator's own Go types at v0.85,
// the newest release built on k8s.io/api v0.33 (kube-score needs v0.33).
var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, policyv1.AddToScheme,
			autoscalingv2.AddToScheme, networkingv1.AddToScheme, monitoringv1.AddToScheme} {
			if err := add(s); err != nil {
				panic(err)
			}
		}
		return s
	}()
	strictDecoder = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
)

// decodeObject decodes one YAML document into its typed object, strictly.
func decodeObject(doc []byte) (runtime.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	if !scheme.Recognizes(gvk) {
		return nil, fmt.Errorf("unknown apiVersion/kind %s/%s: the manifests use only core/v1, apps/v1, policy/v1, autoscaling/v2, networking.k8s.io/v1 and monitoring.coreos.com/v1 (schema_test.go)", tm.APIVersion, tm.Kind)
	}
	// Strict: unknown and duplicate fields are errors.
	obj, _, err := strictDecoder.Decode(doc, nil, nil)
	if err != nil {
		return nil, err
	}
	return obj, nil
}

// selects reports whether sel selects a pod with these labels; an empty or
// missing selector never is what we mean.
func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil || (len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0) {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false
	}
	return s.Matches(labels.Set(podLabels))
}

// selectsMap is selects for a Service's plain selector map.
func selectsMap(sel map[string]string, podLabels map[string]string) bool {
	return selects(&metav1.LabelSelector{MatchLabels: sel}, podLabels)
}

// intOrStr formats an IntOrString for messages.
func intOrStr(v intstr.IntOrString) string { return v.String() }
