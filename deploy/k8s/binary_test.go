package k8s_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// cmdDir is the rollstore command, whose flags the manifests configure
// through ROLLSTORE_* environment variables.
var cmdDir = filepath.Join(repoRoot, "cmd", "rollstore")

// flagDefiners are the flag.FlagSet methods whose first string literal
// argument is a flag name.
var flagDefiners = map[string]bool{
	"StringVar": true, "BoolVar": true, "IntVar": true, "Int64Var": true, "UintVar": true, "Uint64Var": true,
	"Float64Var": true, "DurationVar": true, "TextVar": true, "Var": true, "Func": true, "BoolFunc": true,
	"String": true, "Bool": true, "Int": true, "Int64": true, "Uint": true, "Uint64": true, "Float64": true, "Duration": true,
}

var flagNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// binaryEnv returns the environment variables rollstore reads: ROLLSTORE_
// and each flag name in upper case with '-' as '_' (cmd/rollstore/flags.go),
// for every flag defined in cmd/rollstore's non-test sources. ok is false
// when the command does not exist yet.
func binaryEnv(t testing.TB) (vars map[string]bool, ok bool) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(cmdDir, "*.go"))
	fset := token.NewFileSet()
	vars = map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		ast.Inspect(af, func(n ast.Node) bool {
			call, isCall := n.(*ast.CallExpr)
			if !isCall {
				return true
			}
			sel, isSel := call.Fun.(*ast.SelectorExpr)
			if !isSel || !flagDefiners[sel.Sel.Name] {
				return true
			}
			for _, a := range call.Args {
				lit, isLit := a.(*ast.BasicLit)
				if !isLit || lit.Kind != token.STRING {
					continue
				}
				if name, err := strconv.Unquote(lit.Value); err == nil && flagNameRE.MatchString(name) {
					vars["ROLLSTORE_"+strings.ToUpper(strings.ReplaceAll(name, "-", "_"))] = true
				}
				break // the first string literal is the name
			}
			return true
		})
	}
	return vars, len(vars) > 0
}

// manifestEnv lists the ROLLSTORE_* variables the rendered manifests set
// (ConfigMap data and container env), each with where it is set.
func manifestEnv(s *set) map[string][]string {
	out := map[string][]string{}
	for _, cm := range s.configMaps {
		for k := range cm.Data {
			if strings.HasPrefix(k, "ROLLSTORE_") {
				out[k] = append(out[k], "ConfigMap/"+cm.Name)
			}
		}
	}
	for _, w := range s.workloads {
		for _, c := range w.tmpl.Spec.Containers {
			for _, e := range c.Env {
				if strings.HasPrefix(e.Name, "ROLLSTORE_") {
					out[e.Name] = append(out[e.Name], w.String())
				}
			}
		}
	}
	return out
}

func unknownEnv(s *set, known map[string]bool) []error {
	var errs []error
	env := manifestEnv(s)
	for _, k := range keysOf(env) {
		if !known[k] {
			errs = append(errs, fmt.Errorf("%s (set in %v) is not a flag of `rollstore`: the binary would ignore it", k, env[k]))
		}
	}
	return errs
}

// TestManifestEnvMatchesBinaryFlags: every ROLLSTORE_* variable the
// manifests set is one the binary reads, so no setting (a memory budget,
// say) is silently ignored. Skipped until cmd/rollstore exists.
func TestManifestEnvMatchesBinaryFlags(t *testing.T) {
	known, ok := binaryEnv(t)
	if !ok {
		t.Skip("cmd/rollstore defines no flags yet")
	}
	tree := loadTree(t)
	for _, dir := range []string{baseDir, overlayDir} {
		s := renderOrFatal(t, tree, dir)
		for _, err := range unknownEnv(s, known) {
			t.Errorf("%s: %v", dir, err)
		}
	}
	// The check can fail: a variable the binary does not define.
	s := renderOrFatal(t, tree, overlayDir)
	before := len(unknownEnv(s, known))
	s.configMaps[0].Data["ROLLSTORE_NO_SUCH_FLAG"] = "1"
	if errs := unknownEnv(s, known); len(errs) != before+1 {
		t.Errorf("an unknown variable gave %d errors, want %d: %v", len(errs), before+1, errs)
	}
	if t.Failed() {
		names := keysOf(known)
		sort.Strings(names)
		t.Logf("the binary reads: %s", strings.Join(names, " "))
	}
}
