package sshd

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/agentapi"
)

// TestHandler: a session request's keys authorize, the instance's host
// key is made once and kept, and requests without keys or with an
// instance ID that is not one are refused.
func TestHandler(t *testing.T) {
	dir := t.TempDir()
	user := newSigner(t)
	h := &Handler{KeyDir: dir, Exec: func(string) Execer { return fakeExec }}
	args, _ := json.Marshal(agentapi.SSHSession{AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(user.PublicKey()))}})
	req := agentapi.SessionRequest{ID: "ses-1", Kind: agentapi.SessionSSH, InstanceID: "i-0123abcd", SSH: args}

	var hostKeys []ssh.PublicKey
	for range 2 {
		cc, sc := connPair(t)
		served := make(chan error, 1)
		go func() { served <- h.ServeSession(t.Context(), req, sc) }()
		conn, chans, reqs, err := ssh.NewClientConn(cc, "i-0123abcd.gpucloud", &ssh.ClientConfig{User: "x",
			Auth: []ssh.AuthMethod{ssh.PublicKeys(user)}, Timeout: 10 * time.Second,
			HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
				hostKeys = append(hostKeys, key)
				return nil
			}})
		if err != nil {
			t.Fatal(err)
		}
		c := ssh.NewClient(conn, chans, reqs)
		s, _ := c.NewSession()
		if out, err := s.Output("echo hi"); err != nil || string(out) != "hi\n" {
			t.Errorf("echo: %q, %v", out, err)
		}
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("ServeSession: %v", err)
		}
	}
	if len(hostKeys) != 2 || string(hostKeys[0].Marshal()) != string(hostKeys[1].Marshal()) {
		t.Errorf("the host key changed between sessions")
	}
	if st, err := os.Stat(filepath.Join(dir, "i-0123abcd.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("host key file: %v", err)
	}

	for name, bad := range map[string]agentapi.SessionRequest{
		"a path for an ID": {ID: "ses-2", Kind: agentapi.SessionSSH, InstanceID: "../../etc/x", SSH: args},
		"no ssh arguments": {ID: "ses-3", Kind: agentapi.SessionSSH, InstanceID: "i-1"},
		"a bad key":        {ID: "ses-4", Kind: agentapi.SessionSSH, InstanceID: "i-1", SSH: json.RawMessage(`{"authorized_keys":["ssh-ed25519 junk"]}`)},
	} {
		_, sc := connPair(t)
		if err := h.ServeSession(t.Context(), bad, sc); err == nil {
			t.Errorf("%s: served", name)
		} else if strings.Contains(name, "path") {
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("%s: wrote %d files", name, len(entries))
			}
		}
	}
}
