package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// modulePath is the module path of this repository.
const modulePath = "github.com/gpucloud/gpucloud"

// serverSide are the packages (each with everything under it) that the
// agent must not be built with: the control plane's. The agent speaks to
// it through agentapi only.
var serverSide = []string{
	"httpapi", "billing", "placement", "spot", "store", "estimate", "sim",
	"controller", "service", "serve", "client",
}

// TestNoServerDependencies fails when a package under agent/ depends,
// directly or not, on a server-side package, and shows the chain of imports
// that brings it in.
func TestNoServerDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Imports,DepOnly,Dir,GoFiles", "./agent/...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type pkg struct {
		ImportPath string
		Imports    []string
		DepOnly    bool
		Dir        string
		GoFiles    []string
	}
	pkgs := map[string]*pkg{}
	var roots []string
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		p := new(pkg)
		if err := dec.Decode(p); err != nil {
			t.Fatalf("decode go list: %v", err)
		}
		pkgs[p.ImportPath] = p
		if !p.DepOnly {
			roots = append(roots, p.ImportPath)
		}
		// The test's result is cached on the files it looks at; looking at
		// the module's packages (their directories and sources) makes a
		// change to any of them run it again.
		if p.ImportPath == modulePath || strings.HasPrefix(p.ImportPath, modulePath+"/") {
			_, _ = os.Stat(p.Dir)
			for _, f := range p.GoFiles {
				_, _ = os.Stat(filepath.Join(p.Dir, f))
			}
		}
	}
	if len(roots) == 0 {
		t.Fatal("go list found no package under agent/")
	}
	slices.Sort(roots)

	// Breadth first from the agent's packages, remembering who imported
	// each package first, so that a forbidden one comes with a shortest
	// chain from the agent.
	from := map[string]string{}
	queue := slices.Clone(roots)
	for _, r := range roots {
		from[r] = ""
	}
	var bad []string
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		if forbidden(path) {
			bad = append(bad, path)
			continue
		}
		p := pkgs[path]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := from[imp]; !seen {
				from[imp] = path
				queue = append(queue, imp)
			}
		}
	}
	slices.Sort(bad)
	for _, b := range bad {
		chain := []string{b}
		for p := from[b]; p != ""; p = from[p] {
			chain = append(chain, p)
		}
		slices.Reverse(chain)
		t.Errorf("the agent depends on server-side package %s:\n\t%s", b, strings.Join(chain, "\n\t-> "))
	}
}

// forbidden reports whether path is one of serverSide or under one.
func forbidden(path string) bool {
	for _, s := range serverSide {
		s = modulePath + "/" + s
		if path == s || strings.HasPrefix(path, s+"/") {
			return true
		}
	}
	return false
}
