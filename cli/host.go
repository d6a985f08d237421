//go:build !windows

package cli

import (
	"io"

	"github.com/gpucloud/gpucloud/cli/agentcmd"
	"github.com/gpucloud/gpucloud/cli/upcmd"
	"github.com/spf13/cobra"
)

// hostCommands are the commands that run a cloud's parts on this machine:
// up, the agent and the image tools (containerd's).
func hostCommands(stderr io.Writer) []*cobra.Command {
	return []*cobra.Command{upcmd.New(stderr), agentcmd.New(stderr), newImagesCommand()}
}
