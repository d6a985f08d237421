package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
)

// SSH to instances (docs/SSH.md): the system's OpenSSH client, with
// `gpucloud instances ssh-proxy` as its ProxyCommand, which carries the
// SSH bytes over a WebSocket to the server, and the server to the
// instance's agent, which serves SSH itself (agent/sshd). The instance
// needs no sshd and no open port.

// sshUser is the user name the stanza gives ssh. The agent ignores it
// (a session runs as the instance's user); a fixed name keeps the local
// user name from leaving the machine.
const sshUser = "gpucloud"

// knownHostsPath is gpucloud's own known_hosts file, beside the config
// file: the instances' host keys, remembered on first use (the transport
// to them is authenticated by TLS already; see docs/SSH.md).
func knownHostsPath() string {
	return filepath.Join(filepath.Dir(cliconfig.Path()), "known_hosts")
}

// shellQuote quotes s for the shell ssh runs ProxyCommand with.
func shellQuote(s string) string {
	if regexp.MustCompile(`^[A-Za-z0-9_./:=@%+-]+$`).MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// proxyCommand is the ProxyCommand that runs this binary's ssh-proxy,
// with --server when the command was given one (never the token: ssh's
// config is no place for a secret; the proxy finds it as every command
// does).
func (s *session) proxyCommand() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the gpucloud binary for ProxyCommand: %w", err)
	}
	cmd := shellQuote(self)
	if s.server != "" {
		cmd += " --server " + shellQuote(s.server)
	}
	return cmd + " instances ssh-proxy %h", nil
}

func newSSHConfigCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-config",
		Short: "Print an OpenSSH config stanza for ssh, scp, rsync and VS Code Remote to instances",
		Long: "Print a Host stanza for ~/.ssh/config that makes i-ID.gpucloud reach instance\n" +
			"i-ID through the gpucloud server (ProxyCommand: gpucloud instances ssh-proxy),\n" +
			"so that plain ssh, scp, rsync and VS Code Remote-SSH work against it with no\n" +
			"inbound port and no sshd in the image. Your keys must be imported first\n" +
			"(gpucloud keys import ~/.ssh/id_ed25519.pub). An instance's host key is\n" +
			"remembered on first use in " + knownHostsPath() + ".",
		Example: "  gpucloud ssh-config >> ~/.ssh/config\n" +
			"  ssh i-0123456789abcdef.gpucloud nvidia-smi\n" +
			"  rsync -a data/ i-0123456789abcdef.gpucloud:data/\n" +
			"  ssh -L 8888:localhost:8888 i-0123456789abcdef.gpucloud",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			proxy, err := s.proxyCommand()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s", sshConfig(proxy, knownHostsPath()))
			return err
		},
	}
}

// sshConfig is the stanza ssh-config prints.
func sshConfig(proxy, knownHosts string) string {
	return "# gpucloud: ssh, scp, rsync and VS Code Remote to instances as i-ID" + client.SSHDomain + ",\n" +
		"# through the gpucloud server (no inbound port, no sshd in the image).\n" +
		"Host i-*" + client.SSHDomain + "\n" +
		"    ProxyCommand " + proxy + "\n" +
		"    User " + sshUser + "\n" +
		"    UserKnownHostsFile " + shellQuote(knownHosts) + "\n" +
		"    StrictHostKeyChecking accept-new\n" +
		"    ServerAliveInterval 30\n"
}

func newInstancesSSHCommand(s *session) *cobra.Command {
	var identity string
	cmd := &cobra.Command{
		Use:   "ssh ID [-- COMMAND [ARG...]]",
		Short: "Open an SSH session to an instance (a shell, or a command)",
		Long: "Run the system's ssh (OpenSSH) to the instance through the gpucloud server, with\n" +
			"your keys (import them first: gpucloud keys import ~/.ssh/id_ed25519.pub). With\n" +
			"no command, a login shell; with one, its output and exit code. For scp, rsync\n" +
			"and VS Code, see gpucloud ssh-config. Where ssh is not installed, a built-in\n" +
			"client does the same (keys from -i, ssh-agent, or ~/.ssh/id_* without a\n" +
			"passphrase; the same known_hosts).",
		Example: "  gpucloud instances ssh i-0123456789abcdef\n" +
			"  gpucloud instances ssh i-0123456789abcdef -- nvidia-smi\n" +
			"  gpucloud instances ssh -i ~/.ssh/work_ed25519 i-0123456789abcdef",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := strings.TrimSuffix(args[0], client.SSHDomain)
			if err := s.withConn(cmd, func(ctx context.Context, c *conn) (err error) {
				id, err = c.resolve(ctx, instanceKind, id)
				return err
			}); err != nil {
				return err
			}
			remote := args[1:]
			if len(remote) > 0 && remote[0] == "--" {
				// Flags stop at the ID, so the "--" before a command is
				// still there.
				remote = remote[1:]
			}
			sshPath, err := exec.LookPath("ssh")
			if err != nil {
				// No OpenSSH here: the same session with our own client.
				return s.withConn(cmd, func(ctx context.Context, c *conn) error {
					return builtinSSH(ctx, cmd, c, id, identity, remote)
				})
			}
			proxy, err := s.proxyCommand()
			if err != nil {
				return err
			}
			known := knownHostsPath()
			if err := os.MkdirAll(filepath.Dir(known), 0o700); err != nil {
				return err
			}
			argv := []string{"-o", "ProxyCommand=" + proxy, "-o", "UserKnownHostsFile=" + shellQuote(known),
				"-o", "StrictHostKeyChecking=accept-new", "-o", "User=" + sshUser}
			if identity != "" {
				argv = append(argv, "-i", identity, "-o", "IdentitiesOnly=yes")
			}
			argv = append(argv, "--", id+client.SSHDomain)
			argv = append(argv, remote...)
			c := exec.CommandContext(contextOf(cmd), sshPath, argv...)
			c.Stdin, c.Stdout, c.Stderr = cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
			// The proxy finds the token as every command does; one given
			// by flag reaches it through the environment, not argv.
			c.Env = os.Environ()
			if s.token != "" {
				c.Env = append(c.Env, cliconfig.EnvToken+"="+s.token)
			}
			err = c.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				// ssh's own exit code: the command's, or 255 for ssh's
				// failures, which it has explained on stderr already.
				return &codeError{code: ee.ExitCode(), err: errors.New("")}
			}
			return err
		},
	}
	// Everything after the ID is the remote command, flags included.
	cmd.Flags().SetInterspersed(false)
	cmd.Flags().StringVarP(&identity, "identity", "i", "", "the private key file to log in with (default: ssh's own choice: ssh-agent, ~/.ssh/id_*)")
	return cmd
}

func newInstancesSSHProxyCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "ssh-proxy ID",
		Short: "Carry an SSH connection to an instance over standard input and output (ssh's ProxyCommand)",
		Long: "Connect standard input and output to the instance's SSH endpoint through the\n" +
			"gpucloud server: ssh runs this as its ProxyCommand (gpucloud ssh-config,\n" +
			"gpucloud instances ssh). ID may be i-ID" + client.SSHDomain + ", as ssh's %h gives it.",
		Args: exactArgs(1, instanceKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.resolve(ctx, instanceKind, strings.TrimSuffix(args[0], client.SSHDomain))
				if err != nil {
					return err
				}
				nc, err := c.DialSSH(ctx, id)
				if err != nil {
					return c.explain(err)
				}
				defer nc.Close()
				done := make(chan error, 2)
				go func() {
					_, err := io.Copy(nc, cmd.InOrStdin())
					done <- err
				}()
				go func() {
					_, err := io.Copy(cmd.OutOrStdout(), nc)
					done <- err
				}()
				// Either end finishing ends the session: ssh closes its
				// side once the connection is over, and the server
				// closes its side once the agent's has.
				select {
				case <-done:
				case <-ctx.Done():
				}
				return nil
			})
		},
	}
}
