// Package k8s holds rollstore's Kubernetes manifests (kustomize: base/,
// components/, overlays/) and, in its tests, their validation: both
// kustomizations are rendered in-process with the kustomize API (what
// `kubectl kustomize` runs) and every rendered object is decoded strictly
// into its k8s.io/api type and
// checked against the service's contract (probes, memory budgets, drain,
// security, workload identity, the metrics scrape, the Prometheus
// operator's PodMonitor and PrometheusRule, the network policy), and
// scored by kube-score. The tests also check the repository's Dockerfile and
// .dockerignore, build the image's binary and run it as the manifests
// configure it. No cluster is needed.
//
// The tests are a module of their own, so that their dependencies
// (kustomize, kube-score, k8s.io/api) stay out of the service's go.mod.
package k8s
