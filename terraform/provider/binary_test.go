package provider_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The provider's binary, built once for the tests that run terraform
// through dev_overrides.
var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// devOverrides builds the provider's binary as users do (no cgo), once,
// and answers a CLI configuration file whose dev_overrides point
// terraform at it (no init, no registry).
func devOverrides(t *testing.T) string {
	t.Helper()
	needTerraform(t)
	binOnce.Do(func() {
		// Not t.TempDir: the binary outlives the test that built it.
		if binDir, binErr = os.MkdirTemp("", "gpucloud-tf-bin-"); binErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(binDir, "terraform-provider-gpucloud"), "github.com/gpucloud/gpucloud/cmd/terraform-provider-gpucloud")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build the provider: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	rc := filepath.Join(t.TempDir(), "terraformrc")
	cfg := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"gpucloud/gpucloud\" = %q\n  }\n  direct {}\n}\n", binDir)
	if err := os.WriteFile(rc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return rc
}

// runTerraform runs terraform (or tofu) in dir with env, for 2 minutes
// at most, and answers its output.
func runTerraform(env []string, dir string, args ...string) (string, error) {
	cmd := exec.Command(terraformBin, append([]string{"-chdir=" + dir}, args...)...)
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		return out.String(), fmt.Errorf("%s %s did not end in 2 minutes", filepath.Base(terraformBin), args[0])
	}
}

// TestProviderBinary builds the provider's binary as users do (no cgo),
// points terraform at it through dev_overrides (no init, no registry),
// validates every example under examples/terraform, and plans each
// against the cloud with the connection taken from the GPUCLOUD_*
// environment variables alone.
func TestProviderBinary(t *testing.T) {
	c := sharedCloud(t)
	tn := c.newTenant(t)
	rc := devOverrides(t)
	examples, err := filepath.Glob("../../examples/terraform/*/main.tf")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example under examples/terraform (%v)", err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"GPUCLOUD_SERVER="+c.srv.URL, "GPUCLOUD_TOKEN="+tn.Token, "GPUCLOUD_CA_FINGERPRINT="+c.fingerprint)
	tf := func(dir string, args ...string) (string, error) { return runTerraform(env, dir, args...) }
	for _, ex := range examples {
		name := filepath.Base(filepath.Dir(ex))
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			src, err := os.ReadFile(ex)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "main.tf"), src, 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := tf(dir, "validate", "-no-color"); err != nil || !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("terraform validate: %v\n%s", err, out)
			}
			// Each example plans against the cloud: its data sources
			// read the live market (the advisor picks an L4 for the
			// inference group; the spot job takes an L4 pool).
			plans := map[string]struct {
				args []string
				want string
			}{
				"training-cluster": {[]string{"-var", "offering=l4.1x"}, `Plan: 10 to add, 0 to change, 0 to destroy`},
				"inference-group":  {nil, `(?s)Plan: 1 to add, 0 to change, 0 to destroy.*offering\s+=\s+"l4\.`},
				"spot-job":         {[]string{"-var", "offering=l4.1x"}, `Plan: 2 to add, 0 to change, 0 to destroy`},
			}
			p, ok := plans[name]
			if !ok {
				t.Fatalf("example %s: no plan to check; add one here", name)
			}
			out, err := tf(dir, append([]string{"plan", "-no-color", "-input=false"}, p.args...)...)
			if err != nil {
				t.Fatalf("terraform plan: %v\n%s", err, out)
			}
			if !regexp.MustCompile(p.want).MatchString(out) {
				t.Errorf("terraform plan: want %s:\n%s", p.want, out)
			}
		})
	}
}

// TestExamples runs terraform validate, through the provider's binary
// and dev_overrides, over every example: the registry layout's under
// terraform/provider/examples (the provider's, each resource's and each
// data source's, which the documentation pages include) and
// examples/terraform's; and terraform fmt -check over them all. An
// example without a terraform block gets one naming the provider's
// source, as the pages leave it out.
func TestExamples(t *testing.T) {
	rc := devOverrides(t)
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
	var dirs []string
	for _, pattern := range []string{"examples/provider", "examples/resources/*", "examples/data-sources/*", "../../examples/terraform/*"} {
		found, err := filepath.Glob(pattern)
		if err != nil || len(found) == 0 {
			t.Fatalf("no example directory matches %s (%v)", pattern, err)
		}
		dirs = append(dirs, found...)
	}
	for _, src := range []string{"examples", "../../examples/terraform"} {
		if out, err := runTerraform(env, src, "fmt", "-check", "-recursive", "-diff", "-no-color"); err != nil {
			t.Errorf("%s fmt -check %s: %v (run terraform fmt -recursive %s)\n%s", filepath.Base(terraformBin), src, err, src, out)
		}
	}
	const providers = "terraform {\n  required_providers {\n    gpucloud = { source = \"gpucloud/gpucloud\" }\n  }\n}\n"
	for _, src := range dirs {
		t.Run(strings.TrimPrefix(filepath.ToSlash(src), "../../"), func(t *testing.T) {
			tfs, err := filepath.Glob(filepath.Join(src, "*.tf"))
			if err != nil || len(tfs) == 0 {
				t.Fatalf("%s has no .tf file (%v)", src, err)
			}
			dir := t.TempDir()
			block := false
			for _, f := range tfs {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				block = block || strings.Contains(string(b), "required_providers")
				if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if !block {
				if err := os.WriteFile(filepath.Join(dir, "zz_providers.tf"), []byte(providers), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if out, err := runTerraform(env, dir, "validate", "-no-color"); err != nil || !strings.Contains(out, "The configuration is valid") {
				t.Fatalf("%s validate %s: %v\n%s", filepath.Base(terraformBin), src, err, out)
			}
		})
	}
}
