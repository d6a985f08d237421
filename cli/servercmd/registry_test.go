package servercmd

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/controlplane"
)

// TestAllowRegistryFlag: --allow-registry is repeatable, reaches the
// server's configuration, and a value that is not HOST[:PORT] is a usage
// error saying the form.
func TestAllowRegistryFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		allowed []string // host, port pairs
		refused []string
		bad     bool
	}{
		{args: nil, refused: []string{"10.0.0.5", "5000", "localhost", "5000"}},
		{args: []string{"--allow-registry", "10.0.0.5:5000", "--allow-registry", "localhost"},
			allowed: []string{"10.0.0.5", "5000", "localhost", "5000", "localhost", "443"},
			refused: []string{"10.0.0.5", "5001", "10.0.0.6", "5000"}},
		{args: []string{"--allow-registry", "[fd00::5]:5000"}, allowed: []string{"fd00::5", "5000"}},
		{args: []string{"--allow-registry", "10.0.0.5:"}, bad: true},
		{args: []string{"--allow-registry", "http://10.0.0.5"}, bad: true},
		{args: []string{"--allow-registry", "reg/x"}, bad: true},
	} {
		var f RegistryFlags
		cmd := &cobra.Command{Use: "server"}
		f.Register(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg controlplane.Config
		err := f.Apply(cmd, &cfg)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "HOST or HOST:PORT") {
				t.Errorf("%v: %v, want a usage error giving the form", c.args, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		for i := 0; i < len(c.allowed); i += 2 {
			if !cfg.AllowRegistries.Allows(c.allowed[i], c.allowed[i+1]) || !f.List.Allows(c.allowed[i], c.allowed[i+1]) {
				t.Errorf("%v: %s:%s not allowed", c.args, c.allowed[i], c.allowed[i+1])
			}
		}
		for i := 0; i < len(c.refused); i += 2 {
			if cfg.AllowRegistries.Allows(c.refused[i], c.refused[i+1]) {
				t.Errorf("%v: %s:%s allowed", c.args, c.refused[i], c.refused[i+1])
			}
		}
	}
}
