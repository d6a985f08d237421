package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
)

func newImagesCommand() *cobra.Command {
	return groupCommand("images", "Container images on this host (import for air-gapped hosts)",
		"Manage the container images of the host this command runs on: the images the\n"+
			"agent's containerd runtime starts instances in (docs/RUNTIME.md). Hosts pull the\n"+
			"images instances name from their registries; a host without a registry gets\n"+
			"them imported.",
		newImagesImportCommand())
}

func newImagesImportCommand() *cobra.Command {
	var socket, namespace string
	cmd := &cobra.Command{
		Use:   "import FILE.tar",
		Short: "Import an image tarball into this host's containerd",
		Long: "Import the images of a tarball into the containerd of this host, where the\n" +
			"agent's containerd runtime finds them: an air-gapped host runs the instances\n" +
			"that name them without pulling. The tarball is an OCI image layout, a\n" +
			"`docker save` archive, or both in one (`docker save`, `podman save` and `ctr\n" +
			"images export` write one). Images keep the names the tarball gives them\n" +
			"(docker.io/library/python:3.12): an instance names the same image (`--image\n" +
			"python:3.12`), and a host that has it does not pull it.\n\n" +
			"Run it on each host, as root (containerd's socket is root's), with the agent\n" +
			"running or not. Under `gpucloud up`, whose containerd is its own, give that\n" +
			"containerd's socket: DATA-DIR/ctr/containerd.sock (up prints it).",
		Example: strings.Join([]string{
			"  # On a machine with a registry: save the image and carry the file over",
			"  docker pull python:3.12 && docker save python:3.12 -o python.tar",
			"  # On each air-gapped host, as root:",
			"  gpucloud images import python.tar",
			"  # Into gpucloud up's own containerd:",
			"  gpucloud images import python.tar --containerd-socket ~/.local/share/gpucloud/ctr/containerd.sock",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdutil.Usagef(cmd, "takes one tarball (FILE.tar)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			file := args[0]
			if fi, err := os.Stat(file); err != nil {
				return err
			} else if !fi.Mode().IsRegular() {
				return cmdutil.Usagef(cmd, "%s is not a file: want an image tarball", file)
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			names, err := containerd.ImportImageFileTo(ctx, socket, namespace, "", file)
			if err != nil {
				if os.Geteuid() != 0 {
					err = fmt.Errorf("%w (containerd's socket is root's: run as root)", err)
				}
				return err
			}
			for _, n := range names {
				fmt.Fprintf(cmd.OutOrStdout(), "imported %s\n", n)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "into containerd at %s (namespace %s); instances name it with --image\n", socket, namespace)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&socket, "containerd-socket", containerd.DefaultSocket, "containerd's socket (the agent's --containerd-socket; under gpucloud up: DATA-DIR/ctr/containerd.sock)")
	f.StringVar(&namespace, "namespace", containerd.DefaultNamespace, "the containerd namespace the agent's runtime uses")
	return cmd
}
