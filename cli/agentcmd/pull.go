package agentcmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

// pullFlags say what the containerd runtime pulls: from which internal
// registries, and how large an image.
type pullFlags struct {
	allow       []string
	maxImageGiB int64
}

func (p *pullFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringArrayVar(&p.allow, "allow-registry", nil, "a registry, HOST or HOST:PORT, this host pulls from although its address is loopback, "+
		"link-local or private (refused otherwise; give the server the same); repeatable (--runtime containerd)")
	f.Int64Var(&p.maxImageGiB, "max-image-size", containerd.DefaultMaxImageBytes>>30, "largest image this host pulls, in GiB of compressed layers (--runtime containerd)")
}

// apply sets cfg's pull fields from the flags.
func (p *pullFlags) apply(cfg *containerd.Config) error {
	allow, err := imageref.NewAllowList(p.allow)
	if err != nil {
		return fmt.Errorf("--allow-registry: %w", err)
	}
	if p.maxImageGiB < 1 || p.maxImageGiB > 1<<20 {
		return fmt.Errorf("--max-image-size %d: want a number of GiB from 1 to %d", p.maxImageGiB, 1<<20)
	}
	cfg.AllowRegistries, cfg.MaxImageBytes = allow, p.maxImageGiB<<30
	return nil
}
