package upcmd

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// TestRepointCLI: an up that finds the CLI pointed at another cloud says
// in one line that it repointed it, and where it pointed before, with the
// other cloud's CA fingerprint when the CLI trusted one (without it, the
// login the line gives is refused); a first up, or one at the same
// address, says nothing.
func TestRepointCLI(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca, err := pki.NewCA("test cloud", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		before string // the server the config file had; "" for no file
		ca     []byte // the CA it trusted
		now    string
		want   string
	}{
		{"a first up", "", nil, "https://127.0.0.1:7979", ""},
		{"the same cloud again", "https://127.0.0.1:7979", nil, "https://127.0.0.1:7979/", ""},
		{"a second cloud", "https://127.0.0.1:7878", nil, "https://127.0.0.1:7979",
			"the CLI now points at this cloud (was https://127.0.0.1:7878); `gpucloud login --server https://127.0.0.1:7878 --token TOKEN` points it back"},
		{"a second cloud with its own CA", "https://127.0.0.1:7878", pki.EncodeCert(ca.Cert), "https://127.0.0.1:7979",
			"the CLI now points at this cloud (was https://127.0.0.1:7878); `gpucloud login --server https://127.0.0.1:7878 --token TOKEN --ca-fingerprint " +
				ca.Fingerprint() + "` points it back"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			t.Setenv(cliconfig.EnvConfig, path)
			if c.before != "" {
				if err := cliconfig.Write(path, c.before, "gpc_old", c.ca); err != nil {
					t.Fatal(err)
				}
			}
			got, was := writeCLIConfig(c.now, "gpc_new", nil, log)
			if got != path {
				t.Fatalf("wrote %q, want %q", got, path)
			}
			if line := repointLine(was, c.now); line != c.want {
				t.Errorf("%q, want %q", line, c.want)
			}
			if f, err := cliconfig.Read(path, io.Discard); err != nil || f.Server != c.now {
				t.Errorf("config now %+v, %v; want server %s", f, err, c.now)
			}
		})
	}
}
