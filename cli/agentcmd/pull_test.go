package agentcmd

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
)

// TestPullFlags: --allow-registry and --max-image-size reach the
// containerd runtime's configuration; bad values are refused saying why.
func TestPullFlags(t *testing.T) {
	for _, c := range []struct {
		args    []string
		max     int64
		allowed string // host:port, "" for none
		says    string // the error, "" for none
	}{
		{args: nil, max: containerd.DefaultMaxImageBytes},
		{args: []string{"--max-image-size", "50", "--allow-registry", "10.0.0.5:5000"}, max: 50 << 30, allowed: "10.0.0.5:5000"},
		{args: []string{"--max-image-size", "0"}, says: "from 1 to"},
		{args: []string{"--allow-registry", "10.0.0.5/x"}, says: "HOST or HOST:PORT"},
	} {
		var p pullFlags
		cmd := &cobra.Command{Use: "agent"}
		p.register(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg containerd.Config
		err := p.apply(&cfg)
		if c.says != "" {
			if err == nil || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%v: %v, want an error saying %q", c.args, err, c.says)
			}
			continue
		}
		if err != nil || cfg.MaxImageBytes != c.max {
			t.Errorf("%v: max %d, %v; want %d", c.args, cfg.MaxImageBytes, err, c.max)
		}
		if host, port, ok := strings.Cut(c.allowed, ":"); ok && !cfg.AllowRegistries.Allows(host, port) {
			t.Errorf("%v: %s not allowed", c.args, c.allowed)
		}
	}
}
