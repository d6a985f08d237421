package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// hostCommands are, on Windows, placeholders that say where up, the agent
// and the image tools run: this build is the CLI of a cloud that runs
// elsewhere.
func hostCommands(io.Writer) []*cobra.Command {
	var out []*cobra.Command
	for _, c := range []struct{ name, short string }{
		{"up", "Run a local cloud (Linux only)"},
		{"agent", "Run a host's agent (Linux only)"},
		{"images", "Build and import workload images (Linux only)"},
	} {
		name := c.name
		out = append(out, &cobra.Command{
			Use:                name,
			Short:              c.short,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return fmt.Errorf("gpucloud %s runs on Linux; on Windows this binary is the CLI of a cloud that runs elsewhere (gpucloud login)", name)
			},
		})
	}
	return out
}
