package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestPythonInstall installs the Python client (python/) into fresh
// virtual environments of the machine's python3 with pip, with no package
// index and every network route closed: `pip install ./python`, as a user
// runs it (build isolation on), works offline because the in-tree build
// backend (python/build_backend) needs nothing but the standard library.
// It checks the wheel pip builds (py3-none-any, purelib, RECORD hashes),
// that the installed copy is what an import outside the source tree finds,
// that the sdist builds and installs the same way, that an editable
// install (pip install -e) imports from the tree, and that none of it
// writes into the source tree.
func TestPythonInstall(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python client's install was not tested")
	}
	if testing.Short() {
		t.Skip("-short: the Python install test creates virtual environments and runs pip")
	}
	src, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	version := pythonPackageVersion(t, src)
	before := treeDigest(t, src)
	dir := t.TempDir()
	env := offlinePipEnv(dir)

	venv := newVenv(t, python, filepath.Join(dir, "venv"), env)

	// The wheel pip builds from the tree.
	wheels := filepath.Join(dir, "wheels")
	venv.pip(t, "wheel", "--no-deps", "-w", wheels, src)
	whl := filepath.Join(wheels, "rollstore-"+version+"-py3-none-any.whl")
	checkWheel(t, whl, src, version)

	// pip install ./python, as the README says.
	venv.pip(t, "install", src)
	venv.checkImport(t, filepath.Join(venv.dir, "lib"), version)

	// The sdist, built by the backend itself (pip has no sdist command),
	// installs offline too: it carries the backend.
	sdists := filepath.Join(dir, "sdist")
	build := exec.Command(venv.python, "-I", "-B", "-c",
		"import sys; sys.path.insert(0, 'build_backend'); import rollstore_build as b; print(b.build_sdist(sys.argv[1]))", sdists)
	build.Dir, build.Env = src, env
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("build_sdist: %v\n%s", err, out)
	}
	if name := strings.TrimSpace(string(out)); name != "rollstore-"+version+".tar.gz" {
		t.Fatalf("build_sdist returned %q", name)
	}
	venv.pip(t, "uninstall", "-y", "rollstore")
	venv.pip(t, "install", filepath.Join(sdists, "rollstore-"+version+".tar.gz"))
	venv.checkImport(t, filepath.Join(venv.dir, "lib"), version)

	// An editable install imports the tree's package, and only it.
	venv.pip(t, "uninstall", "-y", "rollstore")
	venv.pip(t, "install", "-e", src)
	venv.checkImport(t, filepath.Join(src, "rollstore"), version)
	probe := exec.Command(venv.python, "-I", "-B", "-c", "import tests")
	probe.Dir, probe.Env = dir, env
	if out, err := probe.CombinedOutput(); err == nil {
		t.Errorf("the editable install put the source tree itself on sys.path (import tests worked):\n%s", out)
	}

	after := treeDigest(t, src)
	for name, d := range after {
		if before[name] != d {
			t.Errorf("building and installing wrote python/%s into the source tree", name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			t.Errorf("building and installing removed python/%s from the source tree", name)
		}
	}
}

// offlinePipEnv is the environment pip runs in: no configuration file or
// PIP_* setting of the machine (a find-links folder, an index), no index,
// and every proxy variable pointing at a closed port, so any attempt to
// reach the network fails instead of quietly succeeding.
func offlinePipEnv(dir string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch u := strings.ToUpper(k); {
		case strings.HasPrefix(u, "PIP_"), strings.HasPrefix(u, "PYTHON"), u == "VIRTUAL_ENV",
			strings.HasSuffix(u, "_PROXY"):
			continue
		}
		env = append(env, kv)
	}
	closed := "http://127.0.0.1:9" // discard: nothing listens there
	return append(env,
		"PIP_CONFIG_FILE="+os.DevNull,
		"PIP_NO_INDEX=1",
		"PIP_NO_CACHE_DIR=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1",
		"PIP_NO_INPUT=1",
		"HTTP_PROXY="+closed, "HTTPS_PROXY="+closed, "ALL_PROXY="+closed,
		"http_proxy="+closed, "https_proxy="+closed, "all_proxy="+closed,
		"PYTHONDONTWRITEBYTECODE=1", // the backend module is imported from the tree
		"PYTHONNOUSERSITE=1",
		"TMPDIR="+dir,
	)
}

type venv struct {
	dir, python string
	env         []string
}

// newVenv creates a virtual environment with pip in it, or skips the test
// if this python3 cannot (Debian's python3 without python3-venv).
func newVenv(t *testing.T, python, dir string, env []string) *venv {
	t.Helper()
	cmd := exec.Command(python, "-m", "venv", dir)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		probe := exec.Command(python, "-c", "import venv, ensurepip")
		probe.Env = env
		if pout, perr := probe.CombinedOutput(); perr != nil {
			t.Skipf("%s -m venv is unavailable (%v: %s); on Debian or Ubuntu, the python3-venv package provides it: the Python client's install was not tested\n%s",
				python, perr, bytes.TrimSpace(pout), out)
		}
		t.Fatalf("%s -m venv: %v\n%s", python, err, out)
	}
	v := &venv{dir: dir, python: filepath.Join(dir, "bin", "python"), env: env}
	if _, err := os.Stat(filepath.Join(dir, "bin", "pip")); err != nil {
		t.Fatalf("the virtual environment has no pip: %v", err)
	}
	return v
}

// pip runs the environment's own pip, offline (--no-index besides
// PIP_NO_INDEX, in case a pip ignores the variable).
func (v *venv) pip(t *testing.T, args ...string) {
	t.Helper()
	full := args
	if args[0] == "install" || args[0] == "wheel" {
		full = append([]string{args[0], "--no-index", "--no-cache-dir"}, args[1:]...)
	}
	cmd := exec.Command(filepath.Join(v.dir, "bin", "pip"), full...)
	cmd.Dir, cmd.Env = filepath.Dir(v.dir), v.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pip %s: %v\n%s", strings.Join(full, " "), err, out)
	}
}

// checkImport imports rollstore with the environment's python, isolated
// (-I: neither the working directory nor PYTHONPATH on sys.path) and
// outside the source tree, and checks where it came from and what it is.
func (v *venv) checkImport(t *testing.T, wantUnder, version string) {
	t.Helper()
	cmd := exec.Command(v.python, "-I", "-B", "-c", `
import importlib.metadata, inspect, json, rollstore
print(json.dumps({
    "file": rollstore.__file__,
    "version": rollstore.__version__,
    "dist_version": importlib.metadata.version("rollstore"),
    "client": [n for n in ("list", "list_page", "get", "put", "scan") if callable(getattr(rollstore.Client, n, None))],
    "list_params": list(inspect.signature(rollstore.Client.list).parameters),
}))`)
	cmd.Dir, cmd.Env = filepath.Dir(v.dir), v.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("import rollstore: %v\n%s%s", err, out, stderr.Bytes())
	}
	var got struct {
		File        string   `json:"file"`
		Version     string   `json:"version"`
		DistVersion string   `json:"dist_version"`
		Client      []string `json:"client"`
		ListParams  []string `json:"list_params"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("import rollstore printed %q: %v", out, err)
	}
	if rel, err := filepath.Rel(wantUnder, got.File); err != nil || strings.HasPrefix(rel, "..") {
		t.Errorf("rollstore imported from %s, want under %s", got.File, wantUnder)
	}
	if got.Version != version || got.DistVersion != version {
		t.Errorf("rollstore.__version__ %q, installed distribution %q; want %q", got.Version, got.DistVersion, version)
	}
	if len(got.Client) != 5 {
		t.Errorf("rollstore.Client has only %v of list, list_page, get, put, scan", got.Client)
	}
	if !contains(got.ListParams, "limit") {
		t.Errorf("rollstore.Client.list takes %v: no limit", got.ListParams)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

var versionRe = regexp.MustCompile(`(?m)^__version__\s*=\s*"([^"]+)"\s*$`)

// pythonPackageVersion is python/rollstore/__init__.py's __version__, the
// version the backend builds.
func pythonPackageVersion(t *testing.T, src string) string {
	b, err := os.ReadFile(filepath.Join(src, "rollstore", "__init__.py"))
	if err != nil {
		t.Fatal(err)
	}
	m := versionRe.FindSubmatch(b)
	if m == nil {
		t.Fatal("python/rollstore/__init__.py sets no __version__")
	}
	return string(m[1])
}

// treeDigest maps every file and directory under dir to its size and
// SHA-256 ("" for a directory).
func treeDigest(t *testing.T, dir string) map[string]string {
	tree := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			tree[rel+"/"] = ""
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		tree[rel] = strconv.Itoa(len(b)) + " " + sha256hex(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func sha256hex(b []byte) string {
	h := sha256.Sum256(b)
	return base64.StdEncoding.EncodeToString(h[:])
}

// checkWheel checks a wheel as installers read it (PEP 427, PEP 491): the
// package's .py files and nothing else besides the .dist-info, whose
// WHEEL says pure Python and py3-none-any, whose METADATA names the
// distribution and version, and whose RECORD lists every file with its
// SHA-256 and size, and itself without.
func checkWheel(t *testing.T, path, src, version string) {
	t.Helper()
	z, err := zip.OpenReader(path)
	if err != nil {
		t.Fatalf("the wheel: %v", err)
	}
	defer z.Close()
	distInfo := "rollstore-" + version + ".dist-info/"
	files := map[string][]byte{}
	var names []string
	for _, f := range z.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s in the wheel: %v", f.Name, err)
		}
		files[f.Name] = b
		names = append(names, f.Name)
	}

	var wantPkg []string
	pys, _ := filepath.Glob(filepath.Join(src, "rollstore", "*.py"))
	for _, p := range pys {
		wantPkg = append(wantPkg, "rollstore/"+filepath.Base(p))
		b, _ := os.ReadFile(p)
		if got := files["rollstore/"+filepath.Base(p)]; !bytes.Equal(got, b) {
			t.Errorf("the wheel's rollstore/%s differs from the tree's", filepath.Base(p))
		}
	}
	want := append(wantPkg, distInfo+"METADATA", distInfo+"WHEEL", distInfo+"RECORD")
	sort.Strings(want)
	sort.Strings(names)
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Errorf("the wheel holds\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}

	wheel := string(files[distInfo+"WHEEL"])
	for _, line := range []string{"Wheel-Version: 1.0", "Root-Is-Purelib: true", "Tag: py3-none-any"} {
		if !contains(strings.Split(strings.TrimSpace(wheel), "\n"), line) {
			t.Errorf("WHEEL has no %q:\n%s", line, wheel)
		}
	}
	meta := string(files[distInfo+"METADATA"])
	head, _, _ := strings.Cut(meta, "\n\n")
	for _, line := range []string{"Metadata-Version: 2.1", "Name: rollstore", "Version: " + version,
		"Requires-Python: >=3.8", "Provides-Extra: arrow", `Requires-Dist: pyarrow>=10 ; extra == "arrow"`} {
		if !contains(strings.Split(head, "\n"), line) {
			t.Errorf("METADATA has no %q:\n%s", line, head)
		}
	}

	rows, err := csv.NewReader(bytes.NewReader(files[distInfo+"RECORD"])).ReadAll()
	if err != nil {
		t.Fatalf("RECORD: %v", err)
	}
	recorded := map[string]bool{}
	for _, r := range rows {
		if len(r) != 3 {
			t.Errorf("RECORD row %q: want 3 fields", r)
			continue
		}
		recorded[r[0]] = true
		if r[0] == distInfo+"RECORD" {
			if r[1] != "" || r[2] != "" {
				t.Errorf("RECORD lists itself with a hash: %q", r)
			}
			continue
		}
		b, ok := files[r[0]]
		if !ok {
			t.Errorf("RECORD lists %s, not in the wheel", r[0])
			continue
		}
		h := sha256.Sum256(b)
		if want := "sha256=" + base64.RawURLEncoding.EncodeToString(h[:]); r[1] != want {
			t.Errorf("RECORD: %s hash %s, want %s", r[0], r[1], want)
		}
		if r[2] != strconv.Itoa(len(b)) {
			t.Errorf("RECORD: %s size %s, want %d", r[0], r[2], len(b))
		}
	}
	for _, n := range names {
		if !recorded[n] {
			t.Errorf("%s is in the wheel but not in RECORD", n)
		}
	}
}
