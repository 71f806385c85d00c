package k8s_test

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The repository root, from deploy/k8s.
const repoRoot = "../.."

const (
	versionVar    = "github.com/rollstore/rollstore/internal/version.version"
	revisionVar   = "github.com/rollstore/rollstore/internal/version.revision"
	imageUID      = 65532
	imagePath     = "/rollstore"
	servedPort    = "8080"
	mainPkg       = "./cmd/rollstore"
	builderPrefix = "golang:"
)

// --- a Dockerfile reader -----------------------------------------------------

type instruction struct {
	cmd  string // upper case: FROM, RUN, COPY, ...
	args string
	line int
}

type stage struct {
	image, name string
	instrs      []instruction
	line        int
}

func (s *stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// parseDockerfile splits a Dockerfile into stages of instructions, joining
// continuation lines and dropping comments, as BuildKit reads it.
func parseDockerfile(src string) ([]*stage, error) {
	var stages []*stage
	var cur strings.Builder
	start := 0
	flush := func() error {
		text := strings.TrimSpace(cur.String())
		cur.Reset()
		if text == "" {
			return nil
		}
		cmd, args, _ := strings.Cut(text, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			var img, name string
			for i := 0; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					name = f[i+1]
					i++
				case img == "":
					img = f[i]
				}
			}
			stages = append(stages, &stage{image: img, name: name, line: start})
			return nil
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				return nil // global ARG before the first FROM
			}
			return fmt.Errorf("line %d: %s before the first FROM", start, in.cmd)
		}
		st := stages[len(stages)-1]
		st.instrs = append(st.instrs, in)
		return nil
	}
	for i, l := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(l)
		if strings.HasPrefix(trimmed, "#") {
			continue // comments (and parser directives) never continue a line
		}
		if cur.Len() == 0 {
			if trimmed == "" {
				continue
			}
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(l)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return stages, nil
}

// shellWords splits a shell command line into words, honouring quotes and
// dropping RUN's own --flags.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// buildArgRE finds $NAME and ${NAME} references.
var buildArgRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)`)

// goBuild is the `go build` of a Dockerfile: its environment assignments
// and its arguments after `go`.
type goBuild struct {
	stage *stage
	env   []string
	args  []string
	out   string // -o
}

func findGoBuild(stages []*stage) (*goBuild, error) {
	for _, st := range stages[:len(stages)-1] {
		for _, in := range st.all("RUN") {
			words, err := shellWords(in.args)
			if err != nil {
				return nil, err
			}
			for len(words) > 0 && strings.HasPrefix(words[0], "--") {
				words = words[1:] // --mount=..., --network=...
			}
			i := slices.Index(words, "go")
			if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
				continue
			}
			if slices.Contains(words[:i], "&&") || slices.Contains(words[i:], "&&") || slices.Contains(words, ";") {
				return nil, fmt.Errorf("line %d: keep the go build alone in its RUN", in.line)
			}
			b := &goBuild{stage: st, args: words[i+1:]}
			for _, w := range words[:i] {
				if !strings.Contains(w, "=") {
					return nil, fmt.Errorf("line %d: %q before go build is not an environment assignment", in.line, w)
				}
				b.env = append(b.env, w)
			}
			for j, a := range b.args {
				if a == "-o" && j+1 < len(b.args) {
					b.out = b.args[j+1]
				} else if v, ok := strings.CutPrefix(a, "-o="); ok {
					b.out = v
				}
			}
			return b, nil
		}
	}
	return nil, errors.New("no RUN with `go build` in a build stage")
}

func (b *goBuild) flag(name string) (string, bool) {
	for j, a := range b.args {
		if a == name {
			if j+1 < len(b.args) {
				return b.args[j+1], true
			}
			return "", true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// --- checks ------------------------------------------------------------------

// goDirective is the go line of go.mod, e.g. "1.26.0".
func goDirective(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+(?:\.\d+)?)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	return string(m[1])
}

func majorMinor(v string) string {
	p := strings.SplitN(v, ".", 3)
	if len(p) < 2 {
		return v
	}
	return p[0] + "." + p[1]
}

// checkDockerfile returns what is wrong with the Dockerfile src, each error
// prefixed by its check in brackets. goVersion is go.mod's go directive.
func checkDockerfile(src, goVersion string) []error {
	var errs []error
	add := func(check, format string, a ...any) {
		errs = append(errs, fmt.Errorf("["+check+"] "+format, a...))
	}
	stages, err := parseDockerfile(src)
	if err != nil {
		add("stages", "%v", err)
		return errs
	}
	names := map[string]bool{}
	for _, st := range stages {
		if st.name != "" {
			names[st.name] = true
		}
	}
	// Stages: a builder and a final image; every base image pinned.
	if len(stages) < 2 {
		add("stages", "single stage: the image would carry the toolchain; use a builder stage")
	}
	for _, st := range stages {
		if names[st.image] || st.image == "scratch" {
			continue
		}
		_, tag, digest := splitImage(st.image)
		if tag == "latest" || (tag == "" && digest == "") {
			add("stages", "line %d: FROM %s is not pinned to a tag or digest", st.line, st.image)
		}
	}
	final := stages[len(stages)-1]

	// The build: static, reproducible, stripped.
	b, err := findGoBuild(stages)
	if err != nil {
		add("build", "%v", err)
	} else {
		if !strings.HasPrefix(b.stage.image, builderPrefix) {
			add("build", "the build stage is FROM %s, want the official %s image", b.stage.image, builderPrefix)
		} else if _, tag, _ := splitImage(b.stage.image); majorMinor(tag) != majorMinor(goVersion) {
			add("build", "builder %s does not match go.mod's go %s", b.stage.image, goVersion)
		}
		if !slices.Contains(b.env, "CGO_ENABLED=0") {
			add("build", "go build without CGO_ENABLED=0: the binary would need libc, which the final image lacks")
		}
		if _, ok := b.flag("-trimpath"); !ok {
			add("build", "go build without -trimpath")
		}
		ld, _ := b.flag("-ldflags")
		if f := strings.Fields(ld); !slices.Contains(f, "-s") || !slices.Contains(f, "-w") {
			add("build", "go build -ldflags %q, want -s -w", ld)
		}
		for _, v := range []string{versionVar, revisionVar} {
			if !regexp.MustCompile(`-X\s+` + regexp.QuoteMeta(v) + `=\S`).MatchString(ld) {
				add("build", "go build -ldflags stamps no %s: rollstore version and rollstore_build_info would say devel/unknown", v)
			}
		}
		// Every build argument the line uses must be declared in its stage,
		// or it expands to nothing.
		declared := map[string]bool{}
		for _, in := range b.stage.all("ARG") {
			name, _, _ := strings.Cut(strings.TrimSpace(in.args), "=")
			declared[name] = true
		}
		for _, w := range append(slices.Clone(b.env), b.args...) {
			for _, m := range buildArgRE.FindAllStringSubmatch(w, -1) {
				if name := m[1] + m[2]; !declared[name] {
					add("build", "go build uses $%s, which is not declared with ARG in the build stage", name)
				}
			}
		}
		if !slices.Contains(b.args, mainPkg) {
			add("build", "go build does not build %s", mainPkg)
		}
		if b.out == "" {
			add("build", "go build without -o")
		}
	}

	// The final image: distroless static nonroot (or scratch with CA certs).
	img := final.image
	switch {
	case strings.HasPrefix(img, "gcr.io/distroless/static") && strings.Contains(img, "nonroot"):
	case img == "scratch":
		certs := false
		for _, in := range final.all("COPY") {
			certs = certs || strings.Contains(in.args, "ca-certificates")
		}
		if !certs {
			add("final", "scratch without CA certificates: TLS to Azure would fail")
		}
	default:
		add("final", "final stage FROM %s, want gcr.io/distroless/static*:nonroot or scratch", img)
	}
	if len(final.all("RUN")) > 0 {
		add("final", "the final stage runs commands; it should only copy the binary in")
	}
	var copied []string
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		if len(f) == 0 || !strings.HasPrefix(f[0], "--from=") || !names[strings.TrimPrefix(f[0], "--from=")] {
			add("final", "line %d: COPY %s does not copy from a build stage", in.line, in.args)
			continue
		}
		if strings.Contains(in.args, "ca-certificates") {
			continue
		}
		copied = append(copied, strings.Join(f[1:], " "))
	}
	if b != nil && (len(copied) != 1 || copied[0] != b.out+" "+imagePath) {
		add("final", "the final stage copies %q; want only the binary: %s %s", copied, b.out, imagePath)
	}
	if len(final.all("ADD")) > 0 {
		add("final", "ADD in the final stage")
	}

	// The user: non-root, and the uid the pods run as.
	users := final.all("USER")
	if len(users) == 0 {
		add("user", "the final stage sets no USER")
	} else {
		u := users[len(users)-1].args
		uid, _, _ := strings.Cut(u, ":")
		if n, err := strconv.Atoi(uid); err != nil || n != imageUID {
			add("user", "USER %s, want %d:%d (numeric, so runAsNonRoot can verify it; the pods' runAsUser)", u, imageUID, imageUID)
		}
	}

	// How it runs.
	exec := func(cmd string) []string {
		ins := final.all(cmd)
		if len(ins) == 0 {
			return nil
		}
		var v []string
		if err := json.Unmarshal([]byte(ins[len(ins)-1].args), &v); err != nil {
			return []string{"<not exec form: " + ins[len(ins)-1].args + ">"}
		}
		return v
	}
	if got := exec("ENTRYPOINT"); !slices.Equal(got, []string{imagePath}) {
		add("entrypoint", "ENTRYPOINT %q, want [%q] in exec form", got, imagePath)
	}
	if got := exec("CMD"); !slices.Equal(got, []string{"serve"}) {
		add("entrypoint", "CMD %q, want [\"serve\"]", got)
	}
	var exposed []string
	for _, in := range final.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.args)...)
	}
	if !slices.Contains(exposed, servedPort) && !slices.Contains(exposed, servedPort+"/tcp") {
		add("entrypoint", "EXPOSE %v, want %s", exposed, servedPort)
	}
	return errs
}

// --- .dockerignore -----------------------------------------------------------

type ignorePattern struct {
	re      *regexp.Regexp
	exclude bool // false for a !exception
}

func parseDockerignore(src string) ([]ignorePattern, error) {
	var ps []ignorePattern
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		p := ignorePattern{exclude: true}
		if rest, ok := strings.CutPrefix(l, "!"); ok {
			l, p.exclude = strings.TrimSpace(rest), false
		}
		l = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(l)), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(l); i++ {
			switch c := l[i]; {
			case strings.HasPrefix(l[i:], "**/"):
				re.WriteString("(?:.*/)?")
				i += 2
			case strings.HasPrefix(l[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		var err error
		if p.re, err = regexp.Compile(re.String()); err != nil {
			return nil, fmt.Errorf("pattern %q: %v", l, err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// ignored reports whether the build context leaves path out: the last
// pattern matching the path or one of its parent directories decides.
func ignored(ps []ignorePattern, path string) bool {
	out := false
	for _, p := range ps {
		parts := strings.Split(path, "/")
		for i := 1; i <= len(parts); i++ {
			if p.re.MatchString(strings.Join(parts[:i], "/")) {
				out = p.exclude
				break
			}
		}
	}
	return out
}

// checkDockerignore: local state and bulk stay out of the build context;
// everything the build compiles stays in.
func checkDockerignore(src string, sources []string) []error {
	var errs []error
	ps, err := parseDockerignore(src)
	if err != nil {
		return []error{fmt.Errorf("[dockerignore] %v", err)}
	}
	for _, p := range []string{".git/HEAD", "bin/rollstore", "data/t/base/x.arrow",
		"test/azurite/node_modules/azurite/package.json", "test/azurite/.state/pid"} {
		if !ignored(ps, p) {
			errs = append(errs, fmt.Errorf("[dockerignore] %s is sent to the build context", p))
		}
	}
	for _, p := range append([]string{"go.mod", "go.sum"}, sources...) {
		if ignored(ps, p) {
			errs = append(errs, fmt.Errorf("[dockerignore] %s is excluded, but the build needs it", p))
		}
	}
	return errs
}

// goSources lists the module's non-test Go files outside deploy/ and test/
// (what the image build may compile), relative to the repository root.
func goSources(t testing.TB) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && (strings.HasPrefix(d.Name(), ".") || rel == "deploy" || rel == "test" || rel == "bin" || rel == "data" || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readRepoFile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// --- tests -------------------------------------------------------------------

func TestDockerfile(t *testing.T) {
	for _, err := range checkDockerfile(readRepoFile(t, "Dockerfile"), goDirective(t)) {
		t.Error(err)
	}
}

func TestDockerignore(t *testing.T) {
	sources := goSources(t)
	if len(sources) == 0 {
		t.Fatal("found no Go sources")
	}
	for _, err := range checkDockerignore(readRepoFile(t, ".dockerignore"), sources) {
		t.Error(err)
	}
}

// TestImageMatchesPods: the image's user and port are the ones the pods are
// configured with.
func TestImageMatchesPods(t *testing.T) {
	stages, err := parseDockerfile(readRepoFile(t, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	final := stages[len(stages)-1]
	s := renderOrFatal(t, loadTree(t), overlayDir)
	for _, w := range s.workloads {
		ps := w.tmpl.Spec.SecurityContext
		if ps == nil || ps.RunAsUser == nil || *ps.RunAsUser != imageUID || ps.RunAsGroup == nil || *ps.RunAsGroup != imageUID {
			t.Errorf("%s: pod runAsUser/runAsGroup must be %d, the image's USER", w, imageUID)
		}
		c, err := mainContainer(w)
		if err != nil {
			t.Fatal(err)
		}
		var exposed []string
		for _, in := range final.all("EXPOSE") {
			exposed = append(exposed, strings.Fields(in.args)...)
		}
		port, _ := namedPort(c, portName)
		if strconv.Itoa(int(port)) != servedPort {
			t.Errorf("%s: container port %d, the image exposes %s", w, port, servedPort)
		}
		if mp, ok := namedPort(c, metricsPortName); ok && !slices.Contains(exposed, strconv.Itoa(int(mp))) {
			t.Errorf("%s: metrics port %d, the image exposes %v", w, mp, exposed)
		}
		if len(c.Command) > 0 {
			t.Errorf("%s: command %q overrides the image's ENTRYPOINT", w, c.Command)
		}
	}
	if u := final.all("USER"); len(u) == 0 || !strings.HasPrefix(u[len(u)-1].args, strconv.Itoa(imageUID)) {
		t.Errorf("final stage USER %v, want %d", u, imageUID)
	}
}

type textMutation struct {
	name, old, new, want string
}

func TestDockerChecksCatchBrokenFiles(t *testing.T) {
	goVersion := goDirective(t)
	df := readRepoFile(t, "Dockerfile")
	for _, m := range []textMutation{
		{"cgo", "CGO_ENABLED=0", "CGO_ENABLED=1", "CGO_ENABLED=0"},
		{"no trimpath", "-trimpath ", "", "-trimpath"},
		{"symbols kept", `-ldflags="-s -w `, `-ldflags="-s `, "want -s -w"},
		{"version not stamped", "-X github.com/rollstore/rollstore/internal/version.version=${VERSION} ", "", "stamps no " + versionVar},
		{"revision not stamped", " -X github.com/rollstore/rollstore/internal/version.revision=${REVISION}", "", "stamps no " + revisionVar},
		{"undeclared build arg", "ARG REVISION=unknown\n", "", "$REVISION, which is not declared"},
		{"other package", "./cmd/rollstore", "./cmd/other", "does not build"},
		{"builder off go.mod", "golang:1.26 ", "golang:1.25 ", "does not match go.mod"},
		{"untagged builder", "golang:1.26 ", "golang ", "not pinned"},
		{"latest base", "static-debian12:nonroot", "static-debian12:latest", "[final]"},
		{"fat final image", "gcr.io/distroless/static-debian12:nonroot", "debian:13", "[final]"},
		{"single stage", "FROM gcr.io/distroless/static-debian12:nonroot\nCOPY --from=build /out/rollstore /rollstore\n", "", "single stage"},
		{"source copied", "COPY --from=build /out/rollstore /rollstore", "COPY --from=build /src /src", "[final]"},
		{"root user", "USER 65532:65532", "USER root", "[user]"},
		{"no user", "USER 65532:65532\n", "", "[user]"},
		{"shell entrypoint", `ENTRYPOINT ["/rollstore"]`, "ENTRYPOINT /rollstore", "[entrypoint]"},
		{"no serve", `CMD ["serve"]`, `CMD ["help"]`, "[entrypoint]"},
		{"other port", "EXPOSE 8080 9090", "EXPOSE 9090", "[entrypoint]"},
	} {
		t.Run(m.name, func(t *testing.T) {
			if strings.Count(df, m.old) != 1 {
				t.Fatalf("%q does not occur exactly once in the Dockerfile: update the mutation", m.old)
			}
			got := errors.Join(checkDockerfile(strings.Replace(df, m.old, m.new, 1), goVersion)...)
			if got == nil || !strings.Contains(got.Error(), m.want) {
				t.Fatalf("want an error containing %q, got: %v", m.want, got)
			}
		})
	}

	di := readRepoFile(t, ".dockerignore")
	sources := []string{"cmd/rollstore/main.go", "engine/engine.go"}
	for _, m := range []textMutation{
		{".git sent", ".git\n", "", ".git/HEAD is sent"},
		{"node_modules sent", "test/azurite/node_modules/\n**/node_modules/\n", "", "node_modules"},
		{"sources excluded", "deploy/\n", "deploy/\n*/*.go\n", "engine/engine.go is excluded"},
		{"go.sum excluded", "deploy/\n", "deploy/\ngo.*\n", "go.sum is excluded"},
		{"exception wins", "bin/\n", "bin/\n!bin/rollstore\n", "bin/rollstore is sent"},
	} {
		t.Run("dockerignore "+m.name, func(t *testing.T) {
			if strings.Count(di, m.old) != 1 {
				t.Fatalf("%q does not occur exactly once in .dockerignore: update the mutation", m.old)
			}
			got := errors.Join(checkDockerignore(strings.Replace(di, m.old, m.new, 1), sources)...)
			if got == nil || !strings.Contains(got.Error(), m.want) {
				t.Fatalf("want an error containing %q, got: %v", m.want, got)
			}
		})
	}
}

// The version the image build is given in the tests (--build-arg).
const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "feedface"
)

var (
	imageBuildOnce sync.Once
	imageBuildDir  string // removed by TestMain
	imageBuildBin  string
	imageBuildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if imageBuildDir != "" {
		os.RemoveAll(imageBuildDir)
	}
	os.Exit(code)
}

// imageBinary builds rollstore once per test run with the Dockerfile's own
// go build line (its environment and flags, for this machine's OS and
// architecture, VERSION and REVISION as build arguments) and returns its
// path: the binary the image would hold. It skips with -short, and where
// it cannot build.
func imageBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH")
	}
	imageBuildOnce.Do(func() { imageBuildBin, imageBuildErr = buildImageBinary(goTool) })
	if imageBuildErr != nil {
		t.Fatal(imageBuildErr)
	}
	return imageBuildBin
}

func buildImageBinary(goTool string) (string, error) {
	src, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		return "", err
	}
	stages, err := parseDockerfile(string(src))
	if err != nil {
		return "", err
	}
	b, err := findGoBuild(stages)
	if err != nil {
		return "", err
	}
	if imageBuildDir, err = os.MkdirTemp("", "rollstore-image-"); err != nil {
		return "", err
	}
	out := filepath.Join(imageBuildDir, "rollstore")
	vars := map[string]string{"TARGETOS": runtime.GOOS, "TARGETARCH": runtime.GOARCH, "VERSION": testVersion, "REVISION": testRevision}
	expand := func(s string) string { return os.Expand(s, func(k string) string { return vars[k] }) }
	env := os.Environ()
	for _, e := range b.env {
		env = append(env, expand(e))
	}
	var args []string
	for i := 0; i < len(b.args); i++ {
		a := expand(b.args[i])
		switch {
		case a == "-o":
			args = append(args, "-o", out)
			i++
		case strings.HasPrefix(a, "-o="):
			args = append(args, "-o="+out)
		default:
			args = append(args, a)
		}
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goTool, args...)
	cmd.Dir, cmd.Env = root, env
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// TestDockerfileBuildsStaticBinary checks that the Dockerfile's build
// gives what the final image needs: a static executable (no ELF
// interpreter, no shared libraries) without symbols or DWARF, without the
// build machine's paths, reporting the version it was given.
func TestDockerfileBuildsStaticBinary(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("checks a Linux ELF binary")
	}
	out := imageBinary(t)
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary has an ELF interpreter: it is dynamically linked")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v", libs)
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: -ldflags -s missing")
	}
	if f.Section(".debug_info") != nil || f.Section(".zdebug_info") != nil {
		t.Error("the binary has DWARF: -ldflags -w missing")
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := filepath.Abs(repoRoot)
	if bytes.Contains(bin, []byte(root+"/")) {
		t.Errorf("the binary contains the build path %s: -trimpath missing", root)
	}
	v, err := exec.Command(out, "version").CombinedOutput()
	if want := "rollstore " + testVersion + " (revision " + testRevision + ", "; err != nil || !strings.HasPrefix(string(v), want) {
		t.Errorf("rollstore version: %q (%v), want %q…: the build arguments do not reach the binary", v, err, want)
	}
}
