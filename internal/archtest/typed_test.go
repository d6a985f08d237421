package archtest

import (
	"encoding/json"
	"fmt"
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
	"sync"
	"testing"
)

// typedPackage is one of the module's packages, parsed and type-checked
// against the compiler's export data (what could be typed).
type typedPackage struct {
	Path  string // relative to the module root
	Fset  *token.FileSet
	Files []*ast.File
	Info  *types.Info
}

// typedPackages parses and type-checks the module's non-test code of every
// package that imports one of the given module packages (relative paths),
// skipping those skip says to.
func typedPackages(t *testing.T, imports []string, skip func(rel string) bool) []typedPackage {
	t.Helper()
	mod, pkgs, imp, fset := loadModule(t)
	wanted := map[string]bool{}
	for _, rel := range imports {
		wanted[mod+"/"+rel] = true
	}
	var typed []typedPackage
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		if skip(rel) {
			continue
		}
		var files []*ast.File
		uses := false
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, is := range f.Imports {
				uses = uses || wanted[strings.Trim(is.Path.Value, `"`)]
			}
			files = append(files, f)
		}
		if !uses {
			continue
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Logf("type-checking %s: %v (checked what could be typed)", p.ImportPath, err)
		}
		typed = append(typed, typedPackage{Path: rel, Fset: fset, Files: files, Info: info})
	}
	return typed
}

// listed is what go list says of one package for type-checking.
type listed struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
}

var module struct {
	once sync.Once
	mod  string
	pkgs []listed
	imp  types.Importer
	fset *token.FileSet
	err  error
}

// loadModule lists the module's packages with the compiler's export data
// of everything they import, once per test binary.
func loadModule(t *testing.T) (string, []listed, types.Importer, *token.FileSet) {
	t.Helper()
	m := &module
	m.once.Do(func() { m.mod, m.pkgs, m.imp, m.fset, m.err = listModule(t) })
	if m.err != nil {
		t.Fatal(m.err)
	}
	return m.mod, m.pkgs, m.imp, m.fset
}

func listModule(t *testing.T) (string, []listed, types.Importer, *token.FileSet, error) {
	mod, _ := modulePackages(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	touchSources(t, root)
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles", mod+"/...").Output()
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("go list -export: %v", err)
	}
	exports := map[string]string{}
	var pkgs []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return "", nil, nil, nil, err
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
	return mod, pkgs, imp, fset, nil
}

// isNamed reports whether typ (or what it points to) is the named type
// pkgPath.name.
func isNamed(typ types.Type, pkgPath, name string) bool {
	if ptr, ok := typ.(*types.Pointer); ok {
		typ = ptr.Elem()
	}
	named, ok := typ.(*types.Named)
	return ok && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == pkgPath && named.Obj().Name() == name
}
