package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The HTTP API is a front door: its handlers decode, call package sandboxops (or the
// fleet, the auth service) and encode. It speaks to no agent itself and opens no store
// transaction: both belong to the layers under it, which every front door shares.
func TestHandlersStayAFrontDoor(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, problem := range frontDoorProblems(fset, f) {
			t.Error(problem)
		}
	}
	if checked == 0 {
		t.Fatal("no source files checked")
	}
}

// frontDoorProblems lists what in f reaches past the layers: an import of the agent's
// generated client (or a gRPC connection), and a store transaction (a *store.Tx, which
// every Store.Update body takes).
func frontDoorProblems(fset *token.FileSet, f *ast.File) []string {
	var out []string
	storeName := "store"
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		switch {
		case strings.HasSuffix(p, "/internal/wire/agentv1"), p == "google.golang.org/grpc":
			out = append(out, fset.Position(imp.Pos()).String()+": imports "+p+": call the agent through package sandboxops")
		case strings.HasSuffix(p, "/internal/store") && imp.Name != nil:
			storeName = imp.Name.Name
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); ok && x.Name == storeName && sel.Sel.Name == "Tx" {
			out = append(out, fset.Position(sel.Pos()).String()+": a store transaction (store.Tx): open it in package sandboxops or the store")
		}
		return true
	})
	return out
}

// The check itself finds what it is for.
func TestFrontDoorProblems(t *testing.T) {
	src := `package server
import (
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
	"github.com/paddockhq/paddock/internal/store"
)
func f(st *store.Store) { _ = st.Update(nil, func(tx *store.Tx) error { return nil }); _ = pb.InfoRequest{} }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	if got := frontDoorProblems(fset, f); len(got) != 2 {
		t.Errorf("problems found: %q, want the import and the transaction", got)
	}
}
