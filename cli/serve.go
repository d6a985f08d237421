package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/serve"
)

// dataDir is where gpucloud keeps its embedded database and agent state by
// default: $XDG_DATA_HOME/gpucloud, or ~/.local/share/gpucloud.
func dataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "gpucloud")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "gpucloud")
	}
	return ".gpucloud"
}

// signalContext ends on SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func newServerCommand(stderr io.Writer) *cobra.Command {
	var (
		db, listen string
		hbTimeout  time.Duration
		logLevel   string
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane: API, scheduler and health controllers",
		Long: "Run a gpucloud server. It stores everything in embedded SQLite by default\n" +
			"(--db sqlite://PATH) or in PostgreSQL (--db postgres://...), applying schema\n" +
			"migrations at start. Several servers may share one PostgreSQL: one of them\n" +
			"leads and runs the controllers, the others serve the API.\n\n" +
			"The first start creates the operator tenant and an admin token, printed once.",
		Example: "  gpucloud server --db sqlite://./gpucloud.db --listen 127.0.0.1:7878\n" +
			"  gpucloud server --db postgres://gpucloud@db.internal/gpucloud --listen 0.0.0.0:7878",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if db == "" {
				if err := os.MkdirAll(dataDir(), 0o700); err != nil {
					return err
				}
				db = "sqlite://" + filepath.Join(dataDir(), "gpucloud.db")
			}
			log, err := newLogger(stderr, logLevel)
			if err != nil {
				return usagef(cmd, "%v", err)
			}
			ctx, stop := signalContext()
			defer stop()
			s, err := serve.Start(ctx, serve.Config{DB: db, Listen: listen, HeartbeatTimeout: hbTimeout, Log: log})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "gpucloud server listening on %s (store %s)\n", s.URL, s.Store.Dialect())
			if s.AdminToken != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "admin token (shown once; keep it): %s\n", s.AdminToken)
			}
			<-ctx.Done()
			shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return s.Close(shut)
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", "", "store: sqlite://PATH or postgres://URL (default sqlite in the data directory)")
	f.StringVar(&listen, "listen", "127.0.0.1:7878", "API listen address")
	f.DurationVar(&hbTimeout, "heartbeat-timeout", 30*time.Second, "mark a host unhealthy after this long without a heartbeat")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// newLogger returns a text logger on w at the named level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
