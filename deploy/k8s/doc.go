// Package k8s holds rollstore's Kubernetes manifests (kustomize: base/,
// components/, overlays/) and, in its tests, their validation: both
// kustomizations are rendered in-process with the kustomize API (what
// `kubectl kustomize` runs) and every rendered object is decoded strictly and
// checked against the service's contract (probes, memory budgets, drain,
// security, workload identity). The tests also check the repository's
// Dockerfile and .dockerignore. No cluster is needed.
package k8s
