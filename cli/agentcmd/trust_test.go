package agentcmd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/controlplane"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// tlsCloud starts a real server (TLS 1.3, its own CA) for an agent to
// join. Only the test links the server: the agent command does not.
func tlsCloud(t *testing.T) *controlplane.Replica {
	t.Helper()
	s, err := controlplane.Start(context.Background(), controlplane.Config{DB: "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db"),
		Listen: "127.0.0.1:0", Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func timeNow() time.Time { return time.Now() }

// TestAgentTrustsOnFirstContact: an agent whose join token carries the
// CA's fingerprint fetches and keeps the CA (0600 in its 0700 data
// directory) and talks TLS to the server from then on; a join token that
// names another CA is refused before the secret is sent; a restart
// without the join token uses the kept CA.
func TestAgentTrustsOnFirstContact(t *testing.T) {
	s := tlsCloud(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "agent")
	other, _ := pki.NewCA("other", timeNow())
	if _, _, err := JoinClient(ctx, s.URL, agentapi.JoinString("gpc_x_y", other.Fingerprint()), dir); err == nil || !strings.Contains(err.Error(), "not") {
		t.Fatalf("a join token naming another CA: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, caFileName)); err == nil {
		t.Fatal("a refused first contact kept a CA")
	}
	hc, secret, err := JoinClient(ctx, s.URL, agentapi.JoinString("gpc_x_y", s.CAFingerprint()), dir)
	if err != nil || secret != "gpc_x_y" {
		t.Fatalf("first contact: %q, %v", secret, err)
	}
	resp, err := hc.Get(s.URL + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	st, err := os.Stat(filepath.Join(dir, caFileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept CA: %v, %v", st, err)
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v", d.Mode().Perm())
	}
	hc, _, err = JoinClient(ctx, s.URL, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Get(s.URL + "/ca.crt"); err != nil {
		t.Fatalf("restart with the kept CA: %v", err)
	} else {
		resp.Body.Close()
	}
}

// TestJoinTokenSources: the join token comes from --join-token-file or
// $GPUCLOUD_JOIN_TOKEN, the file first; --join-token on the command line,
// visible in ps, is refused with a usage error that names both.
func TestJoinTokenSources(t *testing.T) {
	f := filepath.Join(t.TempDir(), "jt")
	if err := os.WriteFile(f, []byte("gpc_c_d\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		desc, file, env, want string
		fails                 bool
	}{
		{"a file", f, "", "gpc_c_d", false},
		{"the environment", "", " gpc_e_f\n", "gpc_e_f", false},
		{"the file before the environment", f, "gpc_e_f", "gpc_c_d", false},
		{"neither", "", "", "", false},
		{"a missing file", filepath.Join(t.TempDir(), "none"), "gpc_e_f", "", true},
	} {
		t.Setenv(EnvJoinToken, c.env)
		got, err := readJoinToken(c.file)
		if got != c.want || (err != nil) != c.fails {
			t.Errorf("%s: %q, %v; want %q (failing: %v)", c.desc, got, err, c.want, c.fails)
		}
	}

	for _, c := range []struct {
		desc string
		args []string
	}{
		{"the flag alone", []string{"--join-token", "gpc_a_b"}},
		{"the flag beside a file", []string{"--join-token=gpc_a_b", "--join-token-file", f}},
		{"an empty flag", []string{"--join-token="}},
	} {
		var stderr strings.Builder
		cmd := New(&stderr)
		cmd.SetArgs(c.args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "--join-token is refused") ||
			!strings.Contains(err.Error(), "--join-token-file") || !strings.Contains(err.Error(), EnvJoinToken) {
			t.Errorf("%s: %v; want a usage error naming --join-token-file and $%s", c.desc, err, EnvJoinToken)
		}
		var ue *cmdutil.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("%s: %v is not a usage error", c.desc, err)
		}
	}
	if h := New(io.Discard).Flags().Lookup("join-token"); h == nil || !h.Hidden {
		t.Errorf("--join-token is not hidden from the help: %+v", h)
	}
}

// TestAgentKeepsClientCert: the join's client key and certificate are
// kept 0600 in the agent's 0700 data directory and presented from then
// on, at restarts too; the credential alone, over TLS without them, is
// refused; a data directory without them (a host that joined before
// mutual TLS) is an error that says to join again.
func TestAgentKeepsClientCert(t *testing.T) {
	s := tlsCloud(t)
	ctx := context.Background()
	admin := client.New(s.URL, s.AdminToken, s.HTTPClient())
	jt, err := admin.CreateJoinToken(ctx, api.CreateJoinTokenRequest{Name: "cli-test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "agent")
	hc, secret, err := JoinClient(ctx, s.URL, agentapi.JoinString(jt.Secret, s.CAFingerprint()), dir)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := sim.New(sim.Spec{ID: "h-cli", Zone: "zone-a", Rack: "r1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}})
	if err != nil {
		t.Fatal(err)
	}
	joined, err := agent.Join(ctx, agentapi.NewClient(s.URL, "", hc), secret, drv)
	if err != nil {
		t.Fatal(err)
	}
	ahc, err := JoinedClient(s.URL, dir, joined)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{clientKeyFileName, clientCertFileName} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want mode 0600", name, st, err)
		}
	}
	if d, _ := os.Stat(dir); d.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode %v", d.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 3 {
		t.Errorf("data directory holds %d files, want ca.crt, client.crt and client.key", len(ents))
	}
	if _, err := agentapi.NewClient(s.URL, joined.Credential, ahc).Assignments(ctx); err != nil {
		t.Fatalf("with the client certificate: %v", err)
	}
	if _, err := agentapi.NewClient(s.URL, joined.Credential, hc).Assignments(ctx); cloud.ErrorCode(err) != cloud.Unauthenticated {
		t.Fatalf("the credential without the client certificate: %v; want unauthenticated", err)
	}
	// A restart reads them back.
	ahc, err = agentCredClient(s.URL, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agentapi.NewClient(s.URL, joined.Credential, ahc).Assignments(ctx); err != nil {
		t.Fatalf("after a restart: %v", err)
	}
	// A host that joined before agents had client certificates.
	os.Remove(filepath.Join(dir, clientCertFileName))
	if _, err := agentCredClient(s.URL, dir); err == nil || !strings.Contains(err.Error(), "join token") {
		t.Fatalf("no client certificate: %v", err)
	}
}
