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

// agentLinks are the module's packages (each with everything under it,
// relative to the module) that the agent may be built with. Everything
// else of the module is the control plane's or the command line's, and
// fails TestAgentDependencies: the agent speaks to the server through
// agentapi only.
var agentLinks = []string{
	"agent",              // the agent itself: its loop, drivers, runtimes, network, exporter
	"agentapi",           // the agent protocol and its client
	"cloud",              // the domain's types and errors, shared by both ends of the protocol
	"catalog",            // GPU models and offerings, which cloud's types name
	"fleet",              // hosts, GPUs and partitions, as the agent reports them
	"money",              // the amounts in cloud's types
	"internal/pki",       // the CA pinned by the join token, the agent's client certificate
	"internal/rest",      // the one HTTP request path of the clients
	"internal/batchconn", // gathered TLS writes of websocket streams (internal/rest)
	"internal/tunnel",    // the tunnels internal/rest dials (docs/ACCESS.md, "Tunnels")
	"internal/imageref",  // canonical image names (containerd runtime)
	"internal/stream",    // the framing of exec sessions
	"internal/filexfer",  // the files protocol of volumes cp and instances cp
}

// agentCommandLinks are what `gpucloud agent` (cli/agentcmd) may link
// beyond agentLinks: the command line's shared helpers, not its resource
// commands nor the server's launcher.
var agentCommandLinks = []string{
	"cli/agentcmd",  // the agent's launcher
	"cli/cmdutil",   // usage errors, logger, signal context, data directory
	"cli/cliconfig", // the environment variables of the connection settings
}

// TestAgentDependencies fails when the agent's packages, or the agent's
// command, depend directly or not on a package of the module that is not
// on their allow-list, and shows the chain of imports that brings it in.
func TestAgentDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	for _, tc := range []struct {
		name, pattern string
		allowed       []string
	}{
		{"the agent's packages", "./agent/...", agentLinks},
		{"the agent command", "./cli/agentcmd", slices.Concat(agentLinks, agentCommandLinks)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkgs, roots := goListDeps(t, goBin, root, tc.pattern)
			for _, b := range outside(pkgs, roots, tc.allowed) {
				t.Errorf("%s: %s is not on the allow-list; the imports that bring it in:\n\t%s", tc.name, b[len(b)-1], strings.Join(b, "\n\t-> "))
			}
		})
	}
}

// listed is what go list says of one package.
type listed struct {
	ImportPath string
	Imports    []string
	DepOnly    bool
	Dir        string
	GoFiles    []string
}

// goListDeps lists the packages of pattern and all they depend on, by
// import path, and the pattern's own packages (the roots), sorted.
func goListDeps(t *testing.T, goBin, root, pattern string) (map[string]*listed, []string) {
	t.Helper()
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Imports,DepOnly,Dir,GoFiles", pattern)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*listed{}
	var roots []string
	for dec := json.NewDecoder(bytes.NewReader(out)); dec.More(); {
		p := new(listed)
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
		if inModule(p.ImportPath) {
			_, _ = os.Stat(p.Dir)
			for _, f := range p.GoFiles {
				_, _ = os.Stat(filepath.Join(p.Dir, f))
			}
		}
	}
	if len(roots) == 0 {
		t.Fatalf("go list found no package in %s", pattern)
	}
	slices.Sort(roots)
	return pkgs, roots
}

// outside walks the imports breadth first from roots and returns, for
// each package of the module not under allowed, a shortest chain of
// imports from a root to it, in the order of the packages' paths.
func outside(pkgs map[string]*listed, roots, allowed []string) [][]string {
	from := map[string]string{}
	queue := slices.Clone(roots)
	for _, r := range roots {
		from[r] = ""
	}
	var bad []string
	for len(queue) > 0 {
		path := queue[0]
		queue = queue[1:]
		if inModule(path) && !under(path, allowed) {
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
	var chains [][]string
	for _, b := range bad {
		chain := []string{b}
		for p := from[b]; p != ""; p = from[p] {
			chain = append(chain, p)
		}
		slices.Reverse(chain)
		chains = append(chains, chain)
	}
	return chains
}

// inModule reports whether path is a package of this module.
func inModule(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

// under reports whether path is one of dirs (relative to the module) or
// under one.
func under(path string, dirs []string) bool {
	for _, d := range dirs {
		d = modulePath + "/" + d
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// TestAllowListCheck: the walk flags a package of the module off the
// list, with the chain that brings it in, and passes packages on the list
// and packages outside the module.
func TestAllowListCheck(t *testing.T) {
	m := func(p string) string { return modulePath + "/" + p }
	pkgs := map[string]*listed{
		m("agent"):        {ImportPath: m("agent"), Imports: []string{m("agentapi"), "net/http"}},
		m("agentapi"):     {ImportPath: m("agentapi"), Imports: []string{m("cloud")}},
		m("cloud"):        {ImportPath: m("cloud")},
		m("cli/agentcmd"): {ImportPath: m("cli/agentcmd"), Imports: []string{m("agent"), m("cli/cmdutil")}},
		m("cli/cmdutil"):  {ImportPath: m("cli/cmdutil"), Imports: []string{m("service/x")}},
		m("service/x"):    {ImportPath: m("service/x")},
		"net/http":        {ImportPath: "net/http"},
	}
	for _, tc := range []struct {
		roots, allowed []string
		want           [][]string
	}{
		{[]string{m("agent")}, []string{"agent", "agentapi", "cloud"}, nil},
		{[]string{m("agent")}, []string{"agent", "agentapi"}, [][]string{{m("agent"), m("agentapi"), m("cloud")}}},
		{[]string{m("cli/agentcmd")}, []string{"agent", "agentapi", "cloud", "cli/agentcmd", "cli/cmdutil"},
			[][]string{{m("cli/agentcmd"), m("cli/cmdutil"), m("service/x")}}},
		{[]string{m("cli/agentcmd")}, []string{"agent", "agentapi", "cloud", "cli/agentcmd", "cli/cmdutil", "service"}, nil},
		// A name that is a prefix of another is not its parent.
		{[]string{m("agent")}, []string{"agen", "agentapi", "cloud"}, [][]string{{m("agent")}}},
	} {
		got := outside(pkgs, tc.roots, tc.allowed)
		if !slices.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("roots %v, allowed %v: %v, want %v", tc.roots, tc.allowed, got, tc.want)
		}
	}
}
