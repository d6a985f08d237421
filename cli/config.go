package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// requestTimeout bounds one API call, so that a hung server does not hang
// the command line forever.
const requestTimeout = 60 * time.Second

// clockNow is the clock for ages and expiry times; tests may replace it.
var clockNow = time.Now

// session holds the connection flags of the root command and turns them,
// the environment and the config file into a client.
type session struct {
	server, token string
}

// conn is a client of one server, with what the CLI needs to explain
// failures: the URL, and where the token came from.
type conn struct {
	*client.Client
	server, tokenFrom string
	// endpointKey: the token is an endpoint key ("gpc_ek-..."), which
	// calls one endpoint and lists nothing.
	endpointKey bool
}

// settings resolves the server and token, each from the first of: flag,
// environment, config file. It reports where each came from.
func (s *session) settings(stderr io.Writer) (server, serverFrom, token, tokenFrom string, err error) {
	server, serverFrom = s.server, "--server"
	if server == "" {
		server, serverFrom = os.Getenv(cliconfig.EnvServer), "$"+cliconfig.EnvServer
	}
	token, tokenFrom = s.token, "--token"
	if token == "" {
		token, tokenFrom = os.Getenv(cliconfig.EnvToken), "$"+cliconfig.EnvToken
	}
	if server == "" || token == "" {
		path := cliconfig.Path()
		fc, err := cliconfig.Read(path, stderr)
		if err != nil {
			return "", "", "", "", err
		}
		if server == "" {
			server, serverFrom = fc.Server, path
		}
		if token == "" {
			token, tokenFrom = fc.Token, path
		}
	}
	return strings.TrimSpace(server), serverFrom, strings.TrimSpace(token), tokenFrom, nil
}

// connect returns a client of the configured server, or an error that
// says how to configure one.
func (s *session) connect(cmd *cobra.Command) (*conn, error) {
	server, serverFrom, token, tokenFrom, err := s.settings(cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	if server == "" {
		return nil, errors.New("no gpucloud server configured: run `gpucloud up` to start one, or `gpucloud login --server URL --token TOKEN` to use an existing one")
	}
	if err := checkServerURL(server); err != nil {
		return nil, fmt.Errorf("%v (from %s)", err, serverFrom)
	}
	if token == "" {
		return nil, fmt.Errorf("no token for the gpucloud server at %s: run `gpucloud login --server %s --token TOKEN`, or set $%s", server, server, cliconfig.EnvToken)
	}
	caPEM, err := trustedCA(server, cmd.ErrOrStderr())
	if err != nil {
		return nil, err
	}
	hc, err := agentapi.TLSClient(caPEM)
	if err != nil {
		return nil, err
	}
	hc.Timeout = requestTimeout
	return &conn{Client: client.New(server, token, hc), server: strings.TrimRight(server, "/"), tokenFrom: tokenFrom,
		endpointKey: strings.HasPrefix(token, "gpc_ek-")}, nil
}

// trustedCA is the CA to trust for server's certificate
// (cliconfig.TrustedCA).
func trustedCA(server string, stderr io.Writer) ([]byte, error) {
	return cliconfig.TrustedCA(server, stderr)
}

// checkServerURL accepts http and https URLs with a host.
func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("server %q is not a URL such as http://127.0.0.1:8080", s)
	}
	return nil
}

// explain turns a client error into the CLI's one-line error: an API error
// as "message (code)", a refused connection as a hint to start the server.
func (c *conn) explain(err error) error {
	if err == nil {
		return nil
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return fmt.Errorf("the server %s presents a certificate signed by a CA this CLI does not trust; run `gpucloud login --server %s --token TOKEN --ca-fingerprint sha256:...` with the fingerprint `gpucloud up` or `gpucloud server` printed, or set $%s to the CA's PEM file", c.server, c.server, cliconfig.EnvCAFile)
	}
	var ce *cloud.Error
	if errors.As(err, &ce) {
		msg := fmt.Sprintf("%s (%s)", ce.Message, ce.Code)
		if ce.Code == cloud.Unauthenticated {
			msg += fmt.Sprintf("; the token came from %s: run `gpucloud login --server %s --token TOKEN` with a valid one", c.tokenFrom, c.server)
		}
		return errors.New(msg)
	}
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("cannot reach the gpucloud server at %s: is `gpucloud up` running?", c.server)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("the gpucloud server at %s did not answer within %s", c.server, requestTimeout)
		}
		var dns *net.DNSError
		if errors.As(err, &dns) {
			return fmt.Errorf("cannot reach the gpucloud server at %s: %v", c.server, dns)
		}
		return fmt.Errorf("cannot reach the gpucloud server at %s: %v", c.server, ue.Err)
	}
	return err
}

// interruptible returns the command's context, cancelled on Ctrl-C, so
// that waits and follows end cleanly.
func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(contextOf(cmd), os.Interrupt)
}

// contextOf returns the command's context; cobra leaves it nil on commands
// it did not execute, such as the one whose arguments it completes.
func contextOf(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// newCloudCommands returns the commands that talk to a gpucloud server, and
// adds their connection flags to root as persistent flags.
func newCloudCommands(root *cobra.Command) []*cobra.Command {
	s := &session{}
	pf := root.PersistentFlags()
	pf.StringVar(&s.server, "server", "", "gpucloud server URL (default $"+cliconfig.EnvServer+", else the config file)")
	pf.StringVar(&s.token, "token", "", "API token (default $"+cliconfig.EnvToken+", else the config file)")
	return []*cobra.Command{newLoginCommand(s), newOfferingsCommand(s), newInstancesCommand(s),
		newVolumesCommand(s), newPlacementGroupsCommand(s), newKeysCommand(s), newSSHConfigCommand(s), newNetworksCommand(s), newSubnetsCommand(s), newSecurityGroupsCommand(s), newStacksCommand(s), newHostsCommand(s), newTenantsCommand(s), newQuotasCommand(s), newTokensCommand(s)}
}

func newLoginCommand(s *session) *cobra.Command {
	var (
		skipVerify            bool
		caFingerprint, caFile string
	)
	cmd := &cobra.Command{
		Use:   "login",
		Short: "Save the server URL and token for later commands",
		Long: "Save the server URL and API token in the config file, readable by you only\n" +
			"(0600), so that later commands need neither flags nor environment variables.\n\n" +
			"The file is $" + cliconfig.EnvConfig + " if set, else $XDG_CONFIG_HOME/gpucloud/config.yaml,\n" +
			"else ~/.config/gpucloud/config.yaml. Every command takes the server and token\n" +
			"from --server and --token first, then $" + cliconfig.EnvServer + " and $" + cliconfig.EnvToken + ", then\n" +
			"this file. login checks the token against the server before saving it.\n\n" +
			"A cloud serves TLS with a CA of its own: give its fingerprint (printed by\n" +
			"`gpucloud up` and `gpucloud server`) with --ca-fingerprint, and login fetches the\n" +
			"CA from the server, checks it against the fingerprint and saves it; or give the\n" +
			"CA's PEM file with --ca-file. A server whose certificate the system trusts\n" +
			"needs neither.",
		Example: strings.Join([]string{
			"  gpucloud login --server https://10.0.0.5:7878 --token gpc_tk-..._... --ca-fingerprint sha256:9f86d0...",
			"",
			"  # Keep the saved server and replace the token",
			"  gpucloud login --token gpc_tk-..._...",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			server, _, token, _, err := s.settings(cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			if server == "" || token == "" {
				return cmdutil.Usagef(cmd, "login needs --server URL and --token TOKEN")
			}
			if err := checkServerURL(server); err != nil {
				return cmdutil.Usagef(cmd, "--server: %v", err)
			}
			caPEM, err := loginCA(cmd, server, caFingerprint, caFile)
			if err != nil {
				return err
			}
			if len(caPEM) > 0 {
				f, err := os.CreateTemp("", "gpucloud-ca-*.pem")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				_, err = f.Write(caPEM)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return err
				}
				// connect reads the CA this way: the one being saved.
				os.Setenv(cliconfig.EnvCAFile, f.Name())
				defer os.Unsetenv(cliconfig.EnvCAFile)
			}
			if !skipVerify {
				c, err := s.connect(cmd)
				if err != nil {
					return err
				}
				ctx, cancel := interruptible(cmd)
				defer cancel()
				if _, err := c.Offerings(ctx); err != nil {
					return c.explain(err)
				}
			}
			path := cliconfig.Path()
			if err := cliconfig.Write(path, strings.TrimRight(server, "/"), token, caPEM); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Logged in to %s; saved to %s\n", strings.TrimRight(server, "/"), path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&skipVerify, "skip-verify", false, "save without checking the token against the server")
	cmd.Flags().StringVar(&caFingerprint, "ca-fingerprint", "", "trust the cloud's own CA with this fingerprint (sha256:...), fetched from the server")
	cmd.Flags().StringVar(&caFile, "ca-file", "", "trust the CA in this PEM file for the server's certificate")
	return cmd
}

// loginCA is the CA login saves for server: fetched from the server and
// checked against --ca-fingerprint, read from --ca-file, or else the one
// already saved for the server, if any.
func loginCA(cmd *cobra.Command, server, caFingerprint, caFile string) ([]byte, error) {
	var caPEM []byte
	switch {
	case caFingerprint != "" && caFile != "":
		return nil, cmdutil.Usagef(cmd, "give --ca-fingerprint or --ca-file, not both")
	case caFingerprint != "":
		fp, err := pki.ParseFingerprint(caFingerprint)
		if err != nil {
			return nil, cmdutil.Usagef(cmd, "--ca-fingerprint: %v", err)
		}
		ctx, cancel := interruptible(cmd)
		caPEM, err = agentapi.FetchCA(ctx, server, fp)
		cancel()
		if err != nil {
			return nil, err
		}
	case caFile != "":
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		if _, err := pki.ParseCert(b); err != nil {
			return nil, fmt.Errorf("--ca-file %s: %w", caFile, err)
		}
		caPEM = b
	default:
		// Keep the CA saved for this server, if any.
		if b, err := trustedCA(server, cmd.ErrOrStderr()); err == nil {
			caPEM = b
		}
	}
	return caPEM, nil
}

// tenantID resolves what a user typed for a tenant, a name or an ID, into
// an ID. Members cannot list tenants; what they typed goes to the server
// as it is.
func (c *conn) tenantID(ctx context.Context, arg string) (string, error) {
	if arg == "" {
		return "", nil
	}
	ts, err := c.Tenants(ctx)
	if cloud.ErrorCode(err) == cloud.PermissionDenied {
		return arg, nil
	}
	if err != nil {
		return "", c.explain(err)
	}
	for _, t := range ts {
		if t.ID == arg {
			return arg, nil
		}
	}
	for _, t := range ts {
		if t.Name == arg {
			return t.ID, nil
		}
	}
	return arg, nil
}

// withConn connects and runs fn with an interruptible context.
func (s *session) withConn(cmd *cobra.Command, fn func(context.Context, *conn) error) error {
	c, err := s.connect(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := interruptible(cmd)
	defer cancel()
	return fn(ctx, c)
}
