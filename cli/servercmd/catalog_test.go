package servercmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/controlplane"
)

// TestCatalogFlag: --catalog reaches the server's configuration with the
// operator's offerings beside the built-in ones; no flag is the built-in
// catalog; a file that does not load is a usage error naming it.
func TestCatalogFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte("offerings:\n  - name: h200.small\n    mode: gpu\n    model: H200\n    gpus: 1\n    vcpus: 8\n    memory_mib: 65536\n"), 0o644)
	os.WriteFile(bad, []byte("offerings:\n  - name: h200.small\n    mode: gpu\n    model: H999\n    gpus: 1\n"), 0o644)
	for _, c := range []struct {
		args    []string
		has     string
		lacks   string
		wantErr string
	}{
		{args: nil, has: "h200.1x", lacks: "h200.small"},
		{args: []string{"--catalog", good}, has: "h200.small"},
		{args: []string{"--catalog", bad}, wantErr: "bad.yaml"},
		{args: []string{"--catalog", filepath.Join(dir, "missing.yaml")}, wantErr: "missing.yaml"},
	} {
		var f CatalogFlag
		cmd := &cobra.Command{Use: "server"}
		f.Register(cmd, "test")
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg controlplane.Config
		err := f.Apply(cmd, &cfg)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%v: %v, want an error naming %s", c.args, err, c.wantErr)
			}
			if cfg.Catalog != nil {
				t.Errorf("%v: a catalog was set despite the error", c.args)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		if _, err := cfg.Catalog.Offering(c.has); err != nil {
			t.Errorf("%v: offering %s missing", c.args, c.has)
		}
		if c.lacks != "" {
			if _, err := cfg.Catalog.Offering(c.lacks); err == nil {
				t.Errorf("%v: offering %s present", c.args, c.lacks)
			}
		}
	}
}
