package k8s_test

import (
	"bufio"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/zegl/kube-score/config"
	"github.com/zegl/kube-score/domain"
	"github.com/zegl/kube-score/parser"
	"github.com/zegl/kube-score/score"
	kschecks "github.com/zegl/kube-score/score/checks"
	"github.com/zegl/kube-score/scorecard"
)

// kubeScoreAccepted is the checked-in list of kube-score findings that are
// deliberate, one per line: check id, object (Kind/name), and the reason.
const kubeScoreAccepted = "kube-score-accepted.txt"

// minKubernetes is the oldest cluster the manifests support (README.md).
const minKubernetes = "v1.30"

type finding struct {
	check, object, grade, comment string
}

func (f finding) key() string { return f.check + " " + f.object }

// kubeScore runs kube-score's default checks, as `kube-score score` does,
// on the rendered YAML and returns its CRITICAL and WARNING findings.
func kubeScore(t testing.TB, yamlDoc string) []finding {
	t.Helper()
	ver, err := config.ParseSemver(minKubernetes)
	if err != nil {
		t.Fatal(err)
	}
	run := &config.RunConfiguration{KubernetesVersion: ver, UseIgnoreChecksAnnotation: true, UseOptionalChecksAnnotation: true}
	p, err := parser.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := p.ParseFiles([]domain.NamedReader{namedReader{strings.NewReader(yamlDoc), "rendered.yaml"}})
	if err != nil {
		t.Fatalf("kube-score cannot parse the rendered manifests: %v", err)
	}
	card, err := score.Score(objs, score.RegisterAllChecks(objs, &kschecks.Config{}, run), run)
	if err != nil {
		t.Fatal(err)
	}
	var out []finding
	for _, o := range *card {
		for _, c := range o.Checks {
			if c.Skipped || c.Grade > scorecard.GradeWarning {
				continue
			}
			var comments []string
			for _, cm := range c.Comments {
				comments = append(comments, strings.TrimSpace(cm.Path+" "+cm.Summary))
			}
			out = append(out, finding{check: c.Check.ID, object: o.TypeMeta.Kind + "/" + o.ObjectMeta.Name,
				grade: c.Grade.String(), comment: strings.Join(comments, "; ")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

type namedReader struct {
	*strings.Reader
	name string
}

func (n namedReader) Name() string { return n.name }

// readAccepted parses the accepted list: "<check> <Kind/name> <reason>".
func readAccepted(t testing.TB) map[string]string {
	t.Helper()
	f, err := os.Open(kubeScoreAccepted)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	accepted := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			t.Fatalf("%s:%d: want <check> <Kind/name> <reason>, got %q", kubeScoreAccepted, n, line)
		}
		key := fields[0] + " " + fields[1]
		if _, dup := accepted[key]; dup {
			t.Fatalf("%s:%d: %s listed twice", kubeScoreAccepted, n, key)
		}
		accepted[key] = strings.Join(fields[2:], " ")
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return accepted
}

// TestKubeScore runs kube-score on the rendered Azure overlay (what is
// applied): every CRITICAL finding must be in kube-score-accepted.txt with
// its reason, and every entry there must still be found (a fixed finding
// leaves no stale excuse behind). Warnings are logged.
func TestKubeScore(t *testing.T) {
	s := renderOrFatal(t, loadTree(t), overlayDir)
	accepted := readAccepted(t)
	found := map[string]bool{}
	for _, f := range kubeScore(t, s.yaml) {
		if f.grade != "CRITICAL" {
			t.Logf("kube-score WARNING %s: %s", f.key(), f.comment)
			continue
		}
		found[f.key()] = true
		if _, ok := accepted[f.key()]; !ok {
			t.Errorf("kube-score CRITICAL %s: %s (fix it, or add it to %s with the reason)", f.key(), f.comment, kubeScoreAccepted)
		}
	}
	keys := make([]string, 0, len(accepted))
	for k := range accepted {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !found[k] {
			t.Errorf("%s lists %s, which kube-score no longer reports: remove it", kubeScoreAccepted, k)
		}
	}
}

// TestKubeScoreCatchesBrokenManifests: kube-score's verdict can fail the
// test: manifests broken the way an edit could get CRITICAL findings that
// the accepted list does not excuse.
func TestKubeScoreCatchesBrokenManifests(t *testing.T) {
	tree := loadTree(t)
	accepted := readAccepted(t)
	for _, m := range []struct {
		mutation
		check string // the kube-score check that must then be CRITICAL
	}{
		{mutation{name: "no network policy", file: "base/kustomization.yaml", old: "  - networkpolicy.yaml\n", new: ""}, "pod-networkpolicy"},
		{mutation{name: "no ephemeral-storage limit", file: "base/reader.yaml", old: "              ephemeral-storage: 256Mi\n", new: ""}, "container-ephemeral-storage-request-and-limit"},
		{mutation{name: "writable root", file: "base/writer.yaml", old: "readOnlyRootFilesystem: true", new: "readOnlyRootFilesystem: false"}, "container-security-context-readonlyrootfilesystem"},
	} {
		t.Run(m.name, func(t *testing.T) {
			broken, err := m.apply(tree)
			if err != nil {
				t.Fatal(err)
			}
			s := renderOrFatal(t, broken, overlayDir)
			var got []string
			for _, f := range kubeScore(t, s.yaml) {
				if _, ok := accepted[f.key()]; f.grade == "CRITICAL" && !ok {
					got = append(got, f.check)
				}
			}
			if !slices.Contains(got, m.check) {
				t.Errorf("unexcused CRITICAL findings %v, want %s among them", got, m.check)
			}
		})
	}
}
