package provider

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// modulePath is the module path of this repository.
const modulePath = "github.com/gpucloud/gpucloud"

// providerLinks are the module's packages (each with everything under
// it) that the provider and its command may be built with: the client
// side of the API. Everything else of the module is the server's, the
// agent's or the command line's, and fails TestProviderDependencies: the
// provider speaks to a cloud through the /v1 API only. The list is the
// same kind of allow-list as agent/deps_test.go's.
var providerLinks = []string{
	"terraform",                       // the provider itself
	"cmd/terraform-provider-gpucloud", // its main
	"client",                          // the Go client of the /v1 API
	"api",                             // the /v1 wire types
	"cloud",                           // the domain's types and errors the API answers
	"catalog",                         // offerings, which the API's types name
	"fleet",                           // placements and hosts, in cloud's types
	"money",                           // the amounts in the API's types
	"billing",                         // invoices, in the client's answers
	"advise",                          // the selection matrix of gpucloud_advise: pure, client-side, as the CLI's
	"estimate",                        // advise's cost comparison: pure
	"stack",                           // stack templates, in the API's types
	"agentapi",                        // FetchCA and TLSClient: the CA pinned by its fingerprint, TLS 1.3
	"cli/cliconfig",                   // the CLI's configuration file and GPUCLOUD_* variables
	"internal/pki",                    // fingerprints
	"internal/rest",                   // the one HTTP request path of the clients
	"internal/batchconn",              // gathered TLS writes of the WebSockets internal/rest dials
	"internal/tunnel",                 // the tunnels internal/rest dials
	"internal/stream",                 // the framing of exec sessions, which the client holds
	"internal/imageref",               // an image as written and its canonical form
}

// TestProviderDependencies fails when the provider or its command depends,
// directly or not, on a package of the module off providerLinks, and
// shows the chain of imports that brings it in.
func TestProviderDependencies(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Imports,DepOnly", "./terraform/...", "./cmd/terraform-provider-gpucloud")
	cmd.Dir = filepath.Dir(strings.TrimSpace(string(gomod)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	type listed struct {
		ImportPath string
		Imports    []string
		DepOnly    bool
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
	}
	if len(roots) < 2 {
		t.Fatalf("go list found %d packages, want the provider and its command", len(roots))
	}
	// Breadth first from the roots, so that each chain shown is a
	// shortest one.
	from := map[string]string{}
	for _, r := range roots {
		from[r] = ""
	}
	for queue := slices.Clone(roots); len(queue) > 0; queue = queue[1:] {
		path := queue[0]
		if inModule(path) && !allowed(path) {
			chain := []string{path}
			for p := from[path]; p != ""; p = from[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			t.Errorf("%s is not on the provider's allow-list; the imports that bring it in:\n\t%s", path, strings.Join(chain, "\n\t-> "))
			continue
		}
		if p := pkgs[path]; p != nil {
			for _, imp := range p.Imports {
				if _, seen := from[imp]; !seen {
					from[imp] = path
					queue = append(queue, imp)
				}
			}
		}
	}
}

// inModule reports whether path is a package of this module.
func inModule(path string) bool {
	return path == modulePath || strings.HasPrefix(path, modulePath+"/")
}

// allowed reports whether path is on providerLinks or under one.
func allowed(path string) bool {
	for _, d := range providerLinks {
		d = modulePath + "/" + d
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}
