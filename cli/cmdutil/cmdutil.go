// Package cmdutil holds what every role of the gpucloud command line
// shares: usage errors, the no-arguments check, the logger, the signal
// context and the default data directory. It depends on no gpucloud
// package, so that the agent's command links nothing of the server's
// through it.
package cmdutil

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// UsageError marks an error in how a command was invoked; cli.Main prints
// it with a hint to --help and exits with cli.ExitUsage.
type UsageError struct {
	Err  error
	Path string // command path for the hint, e.g. "gpucloud sim replay"
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError of cmd with a formatted message.
func Usagef(cmd *cobra.Command, format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...), Path: cmd.CommandPath()}
}

// NoArgs rejects positional arguments as a usage error.
func NoArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		if cmd.HasSubCommands() {
			return Usagef(cmd, "unknown command %q for %q", args[0], cmd.CommandPath())
		}
		return Usagef(cmd, "%s takes no arguments, got %q", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}

// NewLogger returns a text logger on w at the named level.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// SignalContext ends on SIGINT or SIGTERM.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// ShutdownContext is a fresh context for shutting down after the
// command's own context has ended.
func ShutdownContext(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// DataDir is where gpucloud keeps its embedded database and agent state by
// default: $XDG_DATA_HOME/gpucloud, or ~/.local/share/gpucloud.
func DataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "gpucloud")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "gpucloud")
	}
	return ".gpucloud"
}
