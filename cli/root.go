// Package cli is gpucloud's command line: a cobra command tree whose
// runtime errors print as one "error: ..." line (exit code 1) and whose
// usage errors add a hint to --help (exit code 2).
package cli

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cli/servercmd"
	"github.com/spf13/cobra"
)

// Version is the gpucloud version, set at build time with
// -ldflags "-X github.com/gpucloud/gpucloud/cli.Version=v1.2.3". When it is
// not set, the module version from the build info is used, if any.
var Version = ""

// Exit codes of Main.
const (
	ExitOK    = 0
	ExitError = 1 // the command ran and failed
	ExitUsage = 2 // bad flags or arguments
	ExitNoFit = 3 // stacks plan: the stack's instances do not fit now
	// ExitDrift is stacks drift's answer when the stack drifted, like
	// terraform plan -detailed-exitcode; a failure is still ExitError.
	ExitDrift = 2
)

// codeError is a failure with an exit code of its own. An error without
// a message is an answer, not a failure: Main prints nothing for it.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// Main runs gpucloud with args (without the program name) and returns the
// exit code. Output goes to stdout, diagnostics and progress to stderr.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	msg := strings.TrimSpace(err.Error())
	var (
		ue *cmdutil.UsageError
		ce *codeError
	)
	switch {
	case errors.As(err, &ce):
		if msg == "" {
			return ce.code
		}
		fmt.Fprintf(stderr, "error: %s\n", strings.ReplaceAll(msg, "\n", "; "))
		return ce.code
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "error: %s\nRun '%s --help' for usage.\n", msg, ue.Path)
		return ExitUsage
	case isCobraUsage(err):
		path := root.CommandPath()
		if cmd != nil {
			path = cmd.CommandPath()
		}
		fmt.Fprintf(stderr, "error: %s\nRun '%s --help' for usage.\n", msg, path)
		return ExitUsage
	}
	// Runtime errors are one line: multi-line messages would hide the
	// "file:line:" prefix that says where to look.
	fmt.Fprintf(stderr, "error: %s\n", strings.ReplaceAll(msg, "\n", "; "))
	return ExitError
}

// isCobraUsage recognises the errors cobra itself returns for a bad
// command line (its flag errors go through SetFlagErrorFunc instead).
func isCobraUsage(err error) bool {
	s := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires at least", "invalid argument", "flag needs an argument"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// NewRootCommand builds the gpucloud command tree writing to stdout and
// stderr. Errors are returned, not printed: Main prints them.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gpucloud",
		Short: "An open-source GPU cloud in one binary",
		Long: "gpucloud is an open-source GPU cloud in one binary.\n\n" +
			"  gpucloud up                  a complete local cloud: server, SQLite, simulated fleet\n" +
			"  gpucloud server / agent      the control plane, and the agent on each GPU host\n" +
			"  gpucloud instances ...       rent whole GPUs, MIG slices, GPU shares or bare metal\n" +
			"  gpucloud sim replay          replay cluster traces through the placement engine",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return &cmdutil.UsageError{Err: err, Path: cmd.CommandPath()}
	})
	root.AddCommand(newVersionCommand(), newSimCommand(stderr), newCatalogCommand(), servercmd.New(stderr))
	root.AddCommand(hostCommands(stderr)...)
	root.AddCommand(newCloudCommands(root)...)
	root.AddCommand(newGroupCommands(root)...)
	root.AddCommand(newEndpointCommands(root)...)
	root.AddCommand(newBillingCommands(root)...)
	root.AddCommand(newCostCommand())
	root.AddCommand(newAdviseCommand())
	// --server and --token are root's persistent flags, so that they may
	// come before the command (gpucloud --server URL instances list); the
	// commands that never talk to a server neither list nor accept them.
	for _, c := range root.Commands() {
		switch c.Name() {
		case "up", "server", "sim", "catalog", "version", "images":
			offServer(c, "server", "token")
		case "agent":
			// The agent's --server is where it joins; it has no token.
			offServer(c, "token")
		}
	}
	return root
}

// offServer hides root's connection flags named in flags from the help of
// cmd and its subcommands, which do not use them, and makes giving one a
// usage error rather than silently ignoring it.
func offServer(cmd *cobra.Command, flags ...string) {
	help := cmd.HelpFunc()
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		for _, name := range flags {
			if f := c.Root().PersistentFlags().Lookup(name); f != nil && !f.Hidden {
				f.Hidden = true
				defer func() { f.Hidden = false }()
			}
		}
		help(c, args)
	})
	var guard func(c *cobra.Command)
	guard = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(c *cobra.Command, args []string) error {
				for _, name := range flags {
					if f := c.Root().PersistentFlags().Lookup(name); f != nil && f.Changed {
						return cmdutil.Usagef(c, "%s does not use --%s: it talks to no gpucloud server", c.CommandPath(), name)
					}
				}
				return run(c, args)
			}
		}
		for _, sub := range c.Commands() {
			guard(sub)
		}
	}
	guard(cmd)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the gpucloud version",
		Args:  cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "gpucloud %s (%s, %s/%s)\n", version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return nil
		},
	}
}

// version returns Version, else the main module's version, else "dev".
func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func newSimCommand(stderr io.Writer) *cobra.Command {
	sim := &cobra.Command{
		Use:   "sim",
		Short: "Replay cluster traces through the placement engine",
		Long: "Replay cluster traces through the real placement engine and report how well\n" +
			"each placement policy packs GPUs.",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	sim.AddCommand(newReplayCommand(stderr), newAutoscaleCommand(), newDemandCommand())
	return sim
}

// exactArgs is cobra.ExactArgs as a usage error naming the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return cmdutil.Usagef(cmd, "%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs as a usage error naming the arguments.
func minArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return cmdutil.Usagef(cmd, "%s takes %s", cmd.CommandPath(), names)
		}
		return nil
	}
}

// keyValues parses repeated KEY=VALUE flags; a malformed or repeated key is
// a usage error.
func keyValues(cmd *cobra.Command, flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(vals))
	for _, kv := range vals {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, cmdutil.Usagef(cmd, "--%s %q: want KEY=VALUE", flag, kv)
		}
		if _, dup := out[k]; dup {
			return nil, cmdutil.Usagef(cmd, "--%s %s is given twice", flag, k)
		}
		out[k] = v
	}
	return out, nil
}

// groupCommand is a command that only holds subcommands.
func groupCommand(use, short, long string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short, Long: long, Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() }}
	cmd.AddCommand(subs...)
	return cmd
}
