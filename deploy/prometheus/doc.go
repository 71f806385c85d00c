// Package prometheus holds rollstore's monitoring: the alerting rules
// (rollstore-rules.yaml) with their promtool unit tests
// (rollstore-rules.test.yaml), and, in its tests, the checks of those rules
// and of the Grafana dashboard (../grafana/rollstore.json): every PromQL
// expression parses, every metric it names is one a running rollstore
// exports (the binary is built and scraped after traffic), every alert
// links to its runbook section in docs/runbooks.md, and `promtool test
// rules` passes.
//
// promtool is Debian's prometheus package, pinned and unpacked into the
// user's cache by promtool.sh (seconds), or, where apt cannot fetch it, the
// one pinned by go.mod's tool directive, built by `go tool promtool`
// (minutes on two cores, then cached).
//
// The tests are a module of their own so that github.com/prometheus/prometheus
// (the PromQL parser, and the fallback promtool) stays out of the service's go.mod, out of
// tools/go.mod (whose golangci-lint would be built against other versions
// of shared dependencies) and out of deploy/k8s/go.mod (which pins
// k8s.io/api at v0.33 for kube-score; Prometheus requires a newer one).
package prometheus
