package archtest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// pkg is what go list says of one package.
type pkg struct {
	ImportPath string
	Imports    []string
}

// modulePackages lists the module's packages (tests not included) with
// their imports, by path relative to the module root.
func modulePackages(t *testing.T) (string, map[string][]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", mod+"/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		var deps []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, mod+"/") {
				deps = append(deps, strings.TrimPrefix(imp, mod+"/"))
			}
		}
		pkgs[rel] = deps
	}
	return mod, pkgs
}

// row is one line of the package table: the packages it names and the
// module packages it says they depend on.
type row struct {
	line     int
	packages []string
	deps     []string
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// readTable reads the "| package | owns | depends on |" table.
func readTable(t *testing.T, path string, known map[string][]string) []row {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "| package |") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		r := row{line: n}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			r.packages = append(r.packages, strings.TrimSuffix(m[1], "/"))
		}
		// The dependency column names module packages and outside
		// libraries; only the module's are checked.
		for _, d := range strings.Split(cells[len(cells)-1], ",") {
			d = strings.Trim(strings.TrimSpace(d), "`")
			if _, ok := known[d]; ok {
				r.deps = append(r.deps, d)
			}
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no package table found", path)
	}
	return rows
}

// TestArchitectureTable checks docs/ARCHITECTURE.md's package table
// against go list: every package of the module is in the table, and each
// row's "depends on" column names exactly the module packages that the
// row's packages import (outside the row itself).
func TestArchitectureTable(t *testing.T) {
	_, pkgs := modulePackages(t)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	touchSources(t, root)
	rows := readTable(t, filepath.Join(root, "docs", "ARCHITECTURE.md"), pkgs)
	listed := map[string]bool{}
	for _, r := range rows {
		own := map[string]bool{}
		for _, p := range r.packages {
			if _, ok := pkgs[p]; !ok {
				t.Errorf("ARCHITECTURE.md:%d names package %q, which does not exist", r.line, p)
			}
			own[p] = true
			listed[p] = true
		}
		want := map[string]bool{}
		for _, p := range r.packages {
			for _, d := range pkgs[p] {
				if !own[d] {
					want[d] = true
				}
			}
		}
		var missing, extra []string
		for d := range want {
			if !slices.Contains(r.deps, d) {
				missing = append(missing, d)
			}
		}
		for _, d := range r.deps {
			if !want[d] {
				extra = append(extra, d)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		if len(missing) > 0 || len(extra) > 0 {
			t.Errorf("ARCHITECTURE.md:%d %v: \"depends on\" lacks %v and names %v, which they do not import", r.line, r.packages, missing, extra)
		}
	}
	var unlisted []string
	for p := range pkgs {
		if !listed[p] {
			unlisted = append(unlisted, p)
		}
	}
	sort.Strings(unlisted)
	if len(unlisted) > 0 {
		t.Errorf("ARCHITECTURE.md's package table lacks %v", unlisted)
	}
}

// touchSources stats every Go file of the module, so that go test's cache,
// which does not see what go list read, reruns this test when one changes.
func touchSources(t *testing.T, root string) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") && path != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			_, err = os.Stat(path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
