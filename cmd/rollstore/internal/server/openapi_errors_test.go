package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollstore/rollstore/api/openapitest"
)

// TestEveryErrorAnswerIsInTheOpenAPIFile keeps api/openapi.yaml in step
// with the answers the server can give, including those no other test
// provokes over HTTP: every error code of errors.go is one the file's
// error envelope allows (and the file lists no code the server lacks);
// every error classify maps, and every answer a handler builds with
// newError or an apiError literal, is documented, with its code, for its
// status by some operation (answers given before any operation runs are
// checked against the envelope alone).
func TestEveryErrorAnswerIsInTheOpenAPIFile(t *testing.T) {
	v, err := openapitest.New()
	if err != nil {
		t.Fatal(err)
	}
	fileCodes := v.ErrorCodes()

	fset := token.NewFileSet()
	var files []*ast.File
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}

	// The code constants: const codeX = "x".
	codes := map[string]string{} // identifier → value
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "code") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						codes[n.Name], _ = strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	if len(codes) < 30 {
		t.Fatalf("found only %d error codes in the server's sources", len(codes))
	}
	for name, code := range codes {
		// canceled is logged for a client that went away, never sent.
		if code != codeCanceled && !slices.Contains(fileCodes, code) {
			t.Errorf("error code %q (%s) is not in the file's Error schema", code, name)
		}
	}
	for _, code := range fileCodes {
		found := false
		for _, c := range codes {
			found = found || c == code
		}
		if !found {
			t.Errorf("the file lists error code %q, which the server does not have", code)
		}
	}

	for _, c := range classifyCases() {
		if c.status != statusClientClosed && !v.DocumentsError(c.status, c.code) {
			t.Errorf("classify answers %v with %d %s, which no operation of the file documents", c.err, c.status, c.code)
		}
	}

	// Answers built in place: newError(http.StatusX, codeY, …) and
	// &apiError{status: http.StatusX, code: codeY, …}.
	statuses := map[string]int{}
	for s := 100; s < 600; s++ {
		if txt := http.StatusText(s); txt != "" {
			statuses[statusConstName(txt)] = s
		}
	}
	// Answered before any operation of the file is matched (see
	// openapitest's checkUnrouted): only the envelope applies.
	unrouted := map[string]bool{codeRedirect: true, codeMethodNotAllowed: true, codeRouteNotFound: true}
	n := 0
	check := func(pos token.Pos, status, code ast.Expr) {
		sel, ok1 := status.(*ast.SelectorExpr)
		id, ok2 := code.(*ast.Ident)
		if !ok1 || !ok2 {
			return // built from variables; covered by the code check above
		}
		st, ok := statuses[sel.Sel.Name]
		if !ok {
			t.Errorf("%s: status %s is not a net/http status constant", fset.Position(pos), sel.Sel.Name)
			return
		}
		c, ok := codes[id.Name]
		if !ok {
			t.Errorf("%s: %s is not an error code constant", fset.Position(pos), id.Name)
			return
		}
		n++
		if !unrouted[c] && !v.DocumentsError(st, c) {
			t.Errorf("%s: the server answers %d %s, which no operation of the file documents", fset.Position(pos), st, c)
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(node ast.Node) bool {
			switch x := node.(type) {
			case *ast.CallExpr:
				if fn, ok := x.Fun.(*ast.Ident); ok && fn.Name == "newError" && len(x.Args) >= 2 {
					check(x.Pos(), x.Args[0], x.Args[1])
				}
			case *ast.CompositeLit:
				if typ, ok := x.Type.(*ast.Ident); ok && typ.Name == "apiError" {
					var status, code ast.Expr
					for _, e := range x.Elts {
						kv, ok := e.(*ast.KeyValueExpr)
						if !ok {
							continue
						}
						switch k := kv.Key.(*ast.Ident); k.Name {
						case "status":
							status = kv.Value
						case "code":
							code = kv.Value
						}
					}
					if status != nil && code != nil {
						check(x.Pos(), status, code)
					}
				}
			}
			return true
		})
	}
	if n < 15 {
		t.Fatalf("found only %d answers built in place in the server's sources", n)
	}
}

// statusConstName is net/http's constant name for a status text:
// "Service Unavailable" → "StatusServiceUnavailable".
func statusConstName(text string) string {
	var b strings.Builder
	b.WriteString("Status")
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return r == ' ' || r == '-' || r == '\'' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}
