package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/agent/sshd"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
)

// TestSSH: SSH sessions through the server (TLS 1.3) and the host's agent
// (its ssh session kind) with the tenant's imported keys, on both stores:
// a command and its exit status, another tenant's key refused by the
// instance, another tenant's instance not_found, the session in the
// instance's events. (cmd/gpucloud's TestSSH drives OpenSSH itself.)
func TestSSH(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testSSH(t, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testSSH(t, pgtest.URL(t)) })
}

func newSSHKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, string(ssh.MarshalAuthorizedKey(s.PublicKey()))
}

// sshRun runs cmd on instance id as cl with key, and returns its output
// and exit status.
func sshRun(t *testing.T, cl *client.Client, id string, key ssh.Signer, cmd string) (string, int, error) {
	t.Helper()
	nc, err := cl.DialSSH(t.Context(), id)
	if err != nil {
		return "", 0, err
	}
	defer nc.Close()
	sc, chans, reqs, err := ssh.NewClientConn(nc, id+client.SSHDomain+":22", &ssh.ClientConfig{User: "gpucloud",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(key)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 20 * time.Second})
	if err != nil {
		return "", 0, err
	}
	c := ssh.NewClient(sc, chans, reqs)
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return "", 0, err
	}
	out, err := s.Output(cmd)
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitStatus(), nil
	}
	return string(out), 0, err
}

func testSSH(t *testing.T, db string) {
	spec := sim.Spec{ID: "sim-ssh", Zone: "e2e-a", Rack: "rack-1", GPUs: sim.GPUSpec{Model: "L4", Count: 1}}
	c := startClusterTuned(t, db, nil, func(cfg *agent.Config) {
		cfg.Sessions = map[string]agent.SessionHandler{agentapi.SessionSSH: sshd.ForRuntime(filepath.Join(cfg.DataDir, "ssh"), cfg.Runtime, cfg.Log)}
	}, spec)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, mallory, _ := c.member("globex", "mallory")
	aliceKey, aliceLine := newSSHKey(t)
	malloryKey, malloryLine := newSSHKey(t)
	if _, err := alice.ImportKey(ctx, api.ImportKeyRequest{PublicKey: aliceLine}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := mallory.ImportKey(ctx, api.ImportKeyRequest{PublicKey: malloryLine}, ""); err != nil {
		t.Fatal(err)
	}
	in, err := alice.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Command: []string{"sleep", "600"},
		Env: map[string]string{"GREETING": "hi from the workload"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	c.waitState(alice, in.ID, cloud.Running)

	if out, code, err := sshRun(t, alice, in.ID, aliceKey, `echo "$GREETING"; exit 6`); err != nil || out != "hi from the workload\n" || code != 6 {
		t.Errorf("ssh: %q, exit %d, %v", out, code, err)
	}
	if _, _, err := sshRun(t, alice, in.ID, malloryKey, "true"); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
		t.Errorf("another tenant's key: %v", err)
	}
	_, _, err = sshRun(t, mallory, in.ID, malloryKey, "true")
	wantCode(t, "another tenant's instance", err, cloud.NotFound)

	c.until("the ssh sessions' events", func() (bool, string) {
		evs, err := alice.InstanceEvents(ctx, in.ID, client.EventsOptions{Limit: 1000})
		if err != nil {
			return false, err.Error()
		}
		ended := 0
		for _, e := range evs.Events {
			if e.Kind == cloud.EventSessionEnded && strings.Contains(string(e.Details), `"kind":"ssh"`) {
				ended++
			}
		}
		return ended == 2, fmt.Sprintf("%d session.ended events of kind ssh, want 2 (alice's and the refused key's)", ended)
	})
}
