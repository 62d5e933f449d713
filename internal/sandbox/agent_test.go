package sandbox_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/sandbox/kube"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/sandbox/process"
)

// Every tier's sandbox keeps its agent's channel and exit in the one embedded type, so
// that Conn and Exited are written once (and a tier cannot differ in them by accident).
func TestTiersEmbedAgent(t *testing.T) {
	want := reflect.TypeFor[sandbox.Agent]()
	for _, tier := range []reflect.Type{
		reflect.TypeFor[process.Sandbox](),
		reflect.TypeFor[container.Sandbox](),
		reflect.TypeFor[microvm.Sandbox](),
		reflect.TypeFor[kube.Sandbox](),
	} {
		f, ok := tier.FieldByName("Agent")
		if !ok || !f.Anonymous || f.Type != want || len(f.Index) != 1 {
			t.Errorf("%s does not embed sandbox.Agent", tier)
		}
	}
	// A tier's own Conn or Exited would shadow the embedded one.
	for _, dir := range []string{"process", "container", "microvm", "kube"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("the %s tier's sources: %v", dir, err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if ok && fn.Recv != nil && (fn.Name.Name == "Conn" || fn.Name.Name == "Exited") {
					t.Errorf("%s declares its own %s: sandbox.Agent's is the one", name, fn.Name.Name)
				}
			}
		}
	}
}

// An agent not yet dialled has no channel to close, and no exit to wait for.
func TestAgentBeforeDial(t *testing.T) {
	var a sandbox.Agent
	if err := a.CloseConn(); err != nil {
		t.Errorf("CloseConn before a dial: %v", err)
	}
	if a.Conn() != nil || a.Exited() != nil {
		t.Errorf("Conn %v, Exited %v before a dial: want nil", a.Conn(), a.Exited())
	}
}
