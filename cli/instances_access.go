package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/stream"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// Access to running instances (docs/ACCESS.md): exec and port-forward,
// through the server and the host's agent; nothing listens on the host.

func newInstancesExecCommand(s *session) *cobra.Command {
	var stdin, tty bool
	cmd := &cobra.Command{
		Use:   "exec ID [-i] [-t] -- COMMAND [ARG...]",
		Short: "Run a command in a running instance",
		Long: "Run a command in a running instance, in its environment (its container's\n" +
			"namespaces and user, or its working directory under the process runtime), as\n" +
			"kubectl exec does. The command's output comes back on stdout and stderr, and\n" +
			"gpucloud exits with the command's exit code.\n\n" +
			"-i sends this terminal's input to the command. -t runs the command on a\n" +
			"terminal: on a terminal here it is put in raw mode, so that every key\n" +
			"(Ctrl-C included) goes to the remote command, and its size follows this\n" +
			"window's. Without -t, Ctrl-C ends the session and the command with it.\n\n" +
			"Every session is an event on the instance (who, what, how long, the exit\n" +
			"code) and counts against the user's limit of open sessions.",
		Example: "  gpucloud instances exec i-0123456789abcdef -- nvidia-smi\n" +
			"  gpucloud instances exec -it i-0123456789abcdef -- bash",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return cmdutil.Usagef(cmd, "%s takes an instance ID or name and a command after --", cmd.CommandPath())
			}
			if at := cmd.ArgsLenAtDash(); at >= 0 && at != 1 {
				return cmdutil.Usagef(cmd, "give one instance ID or name before -- and the command after it")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			id, err := c.resolve(ctx, instanceKind, args[0])
			cancel()
			if err != nil {
				return err
			}
			return runExec(cmd, c, id, args[1:], stdin, tty)
		},
		ValidArgsFunction: s.completeInstances(false),
	}
	cmd.Flags().BoolVarP(&stdin, "stdin", "i", false, "send this terminal's input to the command")
	cmd.Flags().BoolVarP(&tty, "tty", "t", false, "run the command on a terminal (raw mode here when this is a terminal)")
	return cmd
}

// runExec runs one exec session and turns its exit code into gpucloud's.
func runExec(cmd *cobra.Command, c *conn, id string, command []string, withStdin, tty bool) error {
	o := client.ExecOptions{Command: command, TTY: tty, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr()}
	in := cmd.InOrStdin()
	if withStdin {
		o.Stdin = in
	}
	ctx := contextOf(cmd)
	f, isFile := in.(*os.File)
	terminal := isFile && term.IsTerminal(int(f.Fd()))
	if tty && withStdin && !terminal {
		// A script piped into -it: a remote terminal would echo it, and
		// the end of the input would hang the shell up before it ran
		// what was read. As kubectl does, run without one.
		fmt.Fprintln(cmd.ErrOrStderr(), "Unable to use a TTY: the input is not a terminal; running the command without one")
		tty, o.TTY = false, false
	}
	raw := tty && terminal
	if raw {
		if w, h, err := term.GetSize(int(f.Fd())); err == nil {
			o.Size = stream.Size{Cols: uint16(w), Rows: uint16(h)}
		}
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
		resize, stop := watchSize(int(f.Fd()))
		defer stop()
		o.Resize = resize
	} else {
		// Without a remote terminal, Ctrl-C here ends the session (and
		// the agent kills the command).
		var cancel context.CancelFunc
		ctx, cancel = interruptible(cmd)
		defer cancel()
	}
	st, err := c.Exec(ctx, id, o)
	if raw {
		fmt.Fprint(cmd.ErrOrStderr(), "\r")
	}
	if err != nil {
		if ctx.Err() != nil {
			return &codeError{code: 130, err: errors.New("interrupted; the remote command was ended")}
		}
		return err
	}
	if st.ExitCode == 0 {
		return nil
	}
	var msg error = errors.New("")
	if st.Message != "" {
		msg = errors.New(st.Message)
	}
	return &codeError{code: st.ExitCode & 0xff, err: msg}
}

func newInstancesPortForwardCommand(s *session) *cobra.Command {
	var direct, relayed bool
	cmd := &cobra.Command{
		Use:   "port-forward ID [LOCAL:]REMOTE",
		Short: "Forward a local port to a port inside a running instance",
		Long: "Listen on 127.0.0.1:LOCAL and forward each connection to port REMOTE inside a\n" +
			"running instance (Jupyter, TensorBoard), through the server and the host's\n" +
			"agent, as kubectl port-forward does: each connection is a session of its own.\n" +
			"LOCAL 0 (or :REMOTE) picks a free port; REMOTE alone uses the same port\n" +
			"locally. It runs until Ctrl-C.\n\n" +
			"Each connection is a TLS 1.3 session between this client and the host's agent,\n" +
			"with a short-lived grant from the server, tunnelled through the server, which\n" +
			"passes the encrypted bytes on without reading them. Where the server or the\n" +
			"agent cannot tunnel (a plain-HTTP server, an older agent, a proxy between), it\n" +
			"says why and goes through the server's relay; --relay asks for the relay.\n\n" +
			"With --direct each connection goes straight to the host's agent over TLS 1.3\n" +
			"with a short-lived grant from the server, where the operator lets tenants reach\n" +
			"the agents (server --direct-access, agent --direct-listen); where it cannot, it\n" +
			"says why and goes through the server.",
		Example: "  gpucloud instances port-forward i-0123456789abcdef 8888\n" +
			"  gpucloud instances port-forward i-0123456789abcdef 6006:6006\n" +
			"  gpucloud instances port-forward --direct i-0123456789abcdef 8888",
		Args: exactArgs(2, "an instance ID or name and [LOCAL:]REMOTE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			local, remote, err := parsePorts(args[1])
			if err != nil {
				return cmdutil.Usagef(cmd, "%v", err)
			}
			if direct && relayed {
				return cmdutil.Usagef(cmd, "--direct and --relay are two ways: give one")
			}
			via := viaTunnel
			switch {
			case direct:
				via = viaDirect
			case relayed:
				via = viaRelay
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			id, err := c.resolve(ctx, instanceKind, args[0])
			if err != nil {
				return err
			}
			f := &forwarder{c: c.Client, id: id, remote: remote, via: via, stderr: cmd.ErrOrStderr()}
			return forwardPort(ctx, f, local, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
		ValidArgsFunction: s.completeInstances(false),
	}
	cmd.Flags().BoolVar(&direct, "direct", false, "connect straight to the host's agent with a grant from the server, where the operator allows it (else through the server)")
	cmd.Flags().BoolVar(&relayed, "relay", false, "go through the server's relay, which decrypts and re-encrypts each connection's bytes, instead of a tunnel")
	return cmd
}

// forwarder opens the connections of a port forward: with a grant,
// tunnelled through the server or (direct) straight to the agent, which
// it renews before it expires and when the agent refuses it (a grant
// holds at most agentapi.MaxDirectConns connections); or through the
// server's relay. When no grant is to be had or the agent cannot be
// reached, it says why once and goes through the relay from then on.
type forwarder struct {
	c      *client.Client
	id     string
	remote int
	via    string // viaTunnel, viaDirect or viaRelay
	stderr io.Writer

	mu    sync.Mutex
	grant *client.DirectGrant
}

// grantLeft is how long before its expiry a grant is renewed.
const grantLeft = 15 * time.Second

// The ways of a forward's connections.
const (
	viaTunnel = client.ViaTunnel
	viaDirect = "direct"
	viaRelay  = "relay"
)

// open opens one connection to the remote port.
func (f *forwarder) open(ctx context.Context) (net.Conn, error) {
	f.mu.Lock()
	via := f.via
	f.mu.Unlock()
	if via != viaRelay {
		conn, err := f.openGranted(ctx, via)
		if err == nil {
			return conn, nil
		}
		if cloud.IsNotFound(err) || ctx.Err() != nil {
			return nil, err
		}
		f.mu.Lock()
		if f.via == via {
			f.via = viaRelay
			fmt.Fprintf(f.stderr, "no %s forward (%v); forwarding through the server's relay\n", via, err)
		}
		f.mu.Unlock()
	}
	return f.c.PortForward(ctx, f.id, f.remote)
}

// openGranted opens a connection with the current grant (tunnelled or
// direct, as via says), or a new one when it is near its end or the
// agent refused it.
func (f *forwarder) openGranted(ctx context.Context, via string) (net.Conn, error) {
	for try := 0; ; try++ {
		f.mu.Lock()
		g := f.grant
		if g == nil || time.Until(g.ExpiresAt) < grantLeft || try > 0 {
			var err error
			if via == viaTunnel {
				g, err = f.c.ForwardTunnelGrant(ctx, f.id, f.remote)
			} else {
				g, err = f.c.ForwardGrant(ctx, f.id, f.remote)
			}
			if err != nil {
				f.mu.Unlock()
				return nil, err
			}
			f.grant = g
		}
		f.mu.Unlock()
		conn, err := f.c.OpenDirect(ctx, g)
		if err == nil || try > 0 {
			return conn, err
		}
	}
}

// parsePorts reads [LOCAL:]REMOTE.
func parsePorts(s string) (local, remote int, err error) {
	l, r, two := strings.Cut(s, ":")
	if !two {
		r = l
	}
	port := func(v string, zero bool) (int, error) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 65535 || n == 0 && !zero {
			return 0, fmt.Errorf("%q: want [LOCAL:]REMOTE, TCP ports such as 8888 or 8080:80", s)
		}
		return n, nil
	}
	if remote, err = port(r, false); err != nil {
		return 0, 0, err
	}
	if !two {
		return remote, remote, nil
	}
	if l == "" {
		return 0, remote, nil
	}
	local, err = port(l, true)
	return local, remote, err
}

// forwardPort serves 127.0.0.1:local until ctx ends, each connection
// forwarded to remote in instance id.
func forwardPort(ctx context.Context, f *forwarder, local int, stdout, stderr io.Writer) error {
	remote := f.remote
	// Refuse at once what would refuse every connection (another
	// tenant's instance, a stopped one).
	probe, err := f.open(ctx)
	if err != nil {
		return err
	}
	probe.Close()
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(local)))
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, func() { ln.Close() })
	fmt.Fprintf(stdout, "Forwarding from %s -> %d\n", ln.Addr(), remote)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		lconn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() {
			defer lconn.Close()
			rconn, err := f.open(ctx)
			if err != nil {
				fmt.Fprintf(stderr, "error: forwarding a connection to %d: %v\n", remote, err)
				return
			}
			defer rconn.Close()
			pipeBoth(ctx, lconn, rconn)
		})
	}
}

// pipeBoth copies a and b into each other until either ends or ctx does.
func pipeBoth(ctx context.Context, a, b net.Conn) {
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			dst.Close()
		}
		done <- struct{}{}
	}
	go cp(a, b)
	go cp(b, a)
	for range 2 {
		select {
		case <-done:
		case <-ctx.Done():
			return
		}
	}
}

// portURLs are the addresses of the instance's published ports.
func (c *conn) portURLs(in *cloud.Instance) []string {
	urls := make([]string, len(in.Publish))
	for i, p := range in.Publish {
		urls[i] = c.PortURL(in.ID, p)
	}
	return urls
}

func newInstancesOpenCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "open ID PORT",
		Short: "Print the URL of an instance's published HTTP port",
		Long: "Print the address at which the server proxies HTTP to PORT inside the instance\n" +
			"(a port published at create: gpucloud instances create --publish PORT), and a\n" +
			"curl line that sends the token. Requests need the token as a bearer token;\n" +
			"the server removes it before the request reaches the instance. For Jupyter,\n" +
			"start it with --ServerApp.base_url set to the URL's path (docs/ACCESS.md).",
		Example: "  gpucloud instances open i-0123456789abcdef 8888",
		Args:    exactArgs(2, "an instance ID or name and a published port"),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return cmdutil.Usagef(cmd, "%q: want a TCP port from 1 to 65535", args[1])
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			id, err := c.resolve(ctx, instanceKind, args[0])
			if err != nil {
				return err
			}
			in, err := c.GetInstance(ctx, id)
			if err != nil {
				return c.explain(err)
			}
			if !slices.Contains(in.Publish, port) {
				return fmt.Errorf("instance %s does not publish port %d (published: %v); publish ports at create with --publish", in.ID, port, in.Publish)
			}
			u := c.PortURL(in.ID, port)
			w := cmd.OutOrStdout()
			fmt.Fprintln(w, u)
			// The token itself is not printed: the line names the variable.
			fmt.Fprintf(w, "curl -H \"Authorization: Bearer $%s\" %s\n", cliconfig.EnvToken, u)
			return nil
		},
		ValidArgsFunction: s.completeInstances(false),
	}
}
