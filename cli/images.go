//go:build !windows

package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/internal/imageref"
)

func newImagesCommand() *cobra.Command {
	return groupCommand("images", "Container images on this host (import for air-gapped hosts)",
		"Manage the container images of the host this command runs on: the images the\n"+
			"agent's containerd runtime starts instances in (docs/RUNTIME.md). Hosts pull the\n"+
			"images instances name from their registries; a host without a registry gets\n"+
			"them imported.",
		newImagesImportCommand(), newImagesBuildCommand())
}

func newImagesBuildCommand() *cobra.Command {
	var adds, env []string
	var out, cmdLine, busybox string
	cmd := &cobra.Command{
		Use:   "build NAME --add LOCAL:/PATH... -o FILE.tar",
		Short: "Write an image: the busybox base image plus local files",
		Long: "Write an image tarball named NAME (a full reference, as an instance's --image\n" +
			"names it) of the busybox base image that gpucloud up's hosts use and the\n" +
			"local files given with --add, each at its path in the image with its\n" +
			"permission bits. --cmd sets the command the image runs when an instance or\n" +
			"an endpoint names none. Import the tarball with `gpucloud images import`\n" +
			"(or docker load, podman load). It builds images of static programs (a Go\n" +
			"program built with CGO_ENABLED=0) without docker.",
		Example: strings.Join([]string{
			"  CGO_ENABLED=0 go build -o /tmp/echoworker ./examples/echoworker",
			"  gpucloud images build docker.io/gpucloud/echoworker:1 --add /tmp/echoworker:/usr/local/bin/echoworker \\",
			"      --cmd /usr/local/bin/echoworker -o /tmp/echoworker.tar",
			"  sudo gpucloud images import /tmp/echoworker.tar --containerd-socket ~/.local/share/gpucloud/ctr/containerd.sock",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdutil.Usagef(cmd, "takes the image's name (docker.io/acme/worker:1)")
			}
			if out == "" {
				return cmdutil.Usagef(cmd, "-o FILE.tar is required")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name, err := imageref.Normalize(args[0])
			if err != nil {
				return cmdutil.Usagef(cmd, "%s: %v", args[0], err)
			}
			files, err := containerd.BaseImageFiles(busybox)
			if err != nil {
				return err
			}
			for _, a := range adds {
				src, dst, ok := strings.Cut(a, ":")
				if !ok || src == "" || !strings.HasPrefix(dst, "/") {
					return cmdutil.Usagef(cmd, "--add %s: want LOCAL:/PATH (an absolute path in the image)", a)
				}
				fi, err := os.Stat(src)
				if err != nil {
					return err
				}
				if !fi.Mode().IsRegular() {
					return cmdutil.Usagef(cmd, "--add %s: %s is not a file", a, src)
				}
				data, err := os.ReadFile(src)
				if err != nil {
					return err
				}
				files = append(files, containerd.File{Path: dst, Mode: fi.Mode().Perm(), Data: data})
			}
			var cfg containerd.ImageConfig
			if cmdLine != "" {
				cfg.Cmd = strings.Fields(cmdLine)
			}
			for _, kv := range env {
				if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
					return cmdutil.Usagef(cmd, "--env %s: want KEY=VALUE", kv)
				}
				cfg.Env = append(cfg.Env, kv)
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			if err := containerd.WriteImage(f, name, files, cfg); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s to %s; import it with: gpucloud images import %s\n", name, out, out)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&adds, "add", nil, "a local file and its path in the image, LOCAL:/PATH (repeatable)")
	f.StringVar(&cmdLine, "cmd", "", "the image's command, split at spaces")
	f.StringArrayVar(&env, "env", nil, "an environment variable of the image, KEY=VALUE (repeatable)")
	f.StringVarP(&out, "output", "o", "", "the tarball to write")
	f.StringVar(&busybox, "busybox", "", "the statically linked busybox the base image is made of (default "+containerd.DefaultBusybox+")")
	return cmd
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
