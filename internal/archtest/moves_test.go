package archtest

import (
	"encoding/json"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneMoveFunction checks that no production code outside package
// service writes an instance's state: every lifecycle move goes through
// service.MoveInstance (or MoveInstances), which checks cloud.CanMove and
// writes the event the usage ledger rests on. The stores, which read rows
// into instances, and their conformance fixtures are exempt. Tests are not
// checked; they move instances with testkit.Move.
func TestOneMoveFunction(t *testing.T) {
	mod, _ := modulePackages(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	touchSources(t, root)
	type listed struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		Standard                bool
	}
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles,Standard", mod+"/...").Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if strings.HasPrefix(p.ImportPath, mod+"/") || p.ImportPath == mod {
			pkgs = append(pkgs, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})
	cloudPath := mod + "/cloud"
	exempt := func(path string) bool {
		rel := strings.TrimPrefix(path, mod+"/")
		return rel == "service" || rel == "cloud" || rel == "store" || strings.HasPrefix(rel, "store/")
	}
	checked := 0
	for _, p := range pkgs {
		if exempt(p.ImportPath) {
			continue
		}
		var files []*ast.File
		usesCloud := false
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, is := range f.Imports {
				usesCloud = usesCloud || strings.Trim(is.Path.Value, `"`) == cloudPath
			}
			files = append(files, f)
		}
		if !usesCloud {
			continue
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Logf("type-checking %s: %v (checked what could be typed)", p.ImportPath, err)
		}
		checked++
		isInstance := func(e ast.Expr) bool {
			tv, ok := info.Types[e]
			if !ok {
				return false
			}
			typ := tv.Type
			if ptr, ok := typ.(*types.Pointer); ok {
				typ = ptr.Elem()
			}
			named, ok := typ.(*types.Named)
			return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == cloudPath && named.Obj().Name() == "Instance"
		}
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "State" && isInstance(sel.X) {
							t.Errorf("%s: writes an instance's state; use service.MoveInstance", fset.Position(sel.Pos()))
						}
					}
				case *ast.CompositeLit:
					if !isInstance(n) {
						return true
					}
					for _, el := range n.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok && id.Name == "State" {
								t.Errorf("%s: builds an instance with a state; use service.CreateInstance", fset.Position(kv.Pos()))
							}
						}
					}
				}
				return true
			})
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d packages; the test is not finding the code", checked)
	}
}
