package provider_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestProviderBinary builds the provider's binary as users do (no cgo),
// points terraform at it through dev_overrides (no init, no registry),
// validates every example under examples/terraform, and plans each
// against the cloud with the connection taken from the GPUCLOUD_*
// environment variables alone.
func TestProviderBinary(t *testing.T) {
	c := sharedCloud(t)
	tn := c.newTenant(t)
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-gpucloud"), "github.com/gpucloud/gpucloud/cmd/terraform-provider-gpucloud")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the provider: %v\n%s", err, out)
	}
	rc := filepath.Join(t.TempDir(), "terraformrc")
	cfg := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"gpucloud/gpucloud\" = %q\n  }\n  direct {}\n}\n", bin)
	if err := os.WriteFile(rc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	examples, err := filepath.Glob("../../examples/terraform/*/main.tf")
	if err != nil || len(examples) == 0 {
		t.Fatalf("no example under examples/terraform (%v)", err)
	}
	env := append(os.Environ(), "TF_CLI_CONFIG_FILE="+rc, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1",
		"GPUCLOUD_SERVER="+c.srv.URL, "GPUCLOUD_TOKEN="+tn.Token, "GPUCLOUD_CA_FINGERPRINT="+c.fingerprint)
	tf := func(dir string, args ...string) (string, error) {
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
			return out.String(), fmt.Errorf("terraform %s did not end in 2 minutes", args[0])
		}
	}
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
