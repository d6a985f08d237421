package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// tlsCloud starts a real server (TLS 1.3, its own CA) and points the CLI's
// config at a fresh file.
func tlsCloud(t *testing.T) *controlplane.Replica {
	t.Helper()
	t.Setenv(cliconfig.EnvConfig, filepath.Join(t.TempDir(), "config.yaml"))
	t.Setenv(cliconfig.EnvServer, "")
	t.Setenv(cliconfig.EnvToken, "")
	t.Setenv(cliconfig.EnvCAFile, "")
	s, err := controlplane.Start(context.Background(), controlplane.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db"),
		Listen: "127.0.0.1:0", Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// TestLoginTrustsTheCloudCA: without the CA the CLI refuses the server and
// says how to trust it; login with the fingerprint fetches the CA, checks
// it, saves it, and later commands use it; a wrong fingerprint saves
// nothing.
func TestLoginTrustsTheCloudCA(t *testing.T) {
	s := tlsCloud(t)
	code, _, errOut := run(t, "--server", s.URL, "--token", s.AdminToken, "offerings")
	if code != ExitError || !strings.Contains(errOut, "not trust") || !strings.Contains(errOut, "--ca-fingerprint") {
		t.Fatalf("without the CA: %d %s", code, errOut)
	}
	other, err := pki.NewCA("other", timeNow())
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(t, "login", "--server", s.URL, "--token", s.AdminToken, "--ca-fingerprint", other.Fingerprint())
	if code != ExitError || !strings.Contains(errOut, "not the") {
		t.Fatalf("login with another CA's fingerprint: %d %s", code, errOut)
	}
	if _, err := os.Stat(cliconfig.Path()); err == nil {
		t.Fatal("a refused login wrote the config")
	}
	code, out, errOut := run(t, "login", "--server", s.URL, "--token", s.AdminToken, "--ca-fingerprint", strings.ToUpper(s.CAFingerprint()))
	if code != ExitOK || !strings.Contains(out, "Logged in") {
		t.Fatalf("login: %d %s %s", code, out, errOut)
	}
	b, _ := os.ReadFile(cliconfig.Path())
	if !strings.Contains(string(b), "certificate-authority-data:") {
		t.Errorf("config lacks the CA:\n%s", b)
	}
	if code, out, errOut := run(t, "offerings"); code != ExitOK || !strings.Contains(out, "h100.1x") {
		t.Fatalf("offerings after login: %d %s", code, errOut)
	}
	// The join token the CLI prints carries the CA's fingerprint.
	// It recommends the file or the environment, never --join-token.
	code, out, errOut = run(t, "hosts", "join-token", "--name", "rack-1")
	if code != ExitOK || !strings.Contains(out, "@"+s.CAFingerprint()) || !strings.Contains(out, "GPUCLOUD_JOIN_TOKEN=") ||
		!strings.Contains(out, "--join-token-file") || strings.Contains(out, "--join-token ") || !strings.Contains(out, "joins 1 host until") {
		t.Fatalf("join-token: %d %s %s", code, out, errOut)
	}
	id := strings.Fields(out)[2]
	for _, c := range []struct {
		desc string
		args []string
		code int
		want string
	}{
		{"a fleet's token", []string{"hosts", "join-token", "--name", "fleet", "--max-joins", "16"}, ExitOK, "joins 16 hosts until"},
		{"no joins", []string{"hosts", "join-token", "--max-joins", "0"}, ExitUsage, "--max-joins must be at least 1"},
		{"the help recommends the file and the environment only", []string{"hosts", "join-token", "--help"}, ExitOK, "--join-token-file"},
		{"the list shows the joins", []string{"hosts", "join-token", "list"}, ExitOK, "0/16"},
		{"revoking", []string{"hosts", "join-token", "revoke", id}, ExitOK, "revoked"},
		{"removing a missing host", []string{"hosts", "remove", "node-9"}, ExitError, "node-9"},
	} {
		code, out, errOut := run(t, c.args...)
		if code != c.code || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%s: exit %d, %q %q; want exit %d and %q", c.desc, code, out, errOut, c.code, c.want)
		}
		if strings.Contains(out, "--join-token ") || strings.Contains(out, "--join-token TOKEN") {
			t.Errorf("%s: recommends --join-token: %s", c.desc, out)
		}
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func timeNow() time.Time { return time.Now() }
