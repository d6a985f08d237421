//go:build unix

package sshd

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agent/runtime/process"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestForRuntime: sessions through the process runtime's exec: a
// command's output and exit status, the allowed environment, a terminal
// of the client's size, and a refused signal (the runtime cannot deliver
// one).
func TestForRuntime(t *testing.T) {
	dir := t.TempDir()
	rt := process.New(filepath.Join(dir, "rt"))
	id := "i-0123456789abcdef"
	if err := rt.Start(context.Background(), runtime.Spec{InstanceID: id, Command: []string{"sleep", "60"},
		Env: map[string]string{"GREETING": "from the workload"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background(), id) })
	h := ForRuntime(filepath.Join(dir, "ssh"), rt, nil)
	if h == nil || h.Dial == nil {
		t.Fatal("the process runtime gives no handler, or no dialer")
	}
	user := newSigner(t)
	args, _ := json.Marshal(agentapi.SSHSession{AuthorizedKeys: []string{string(ssh.MarshalAuthorizedKey(user.PublicKey()))}})
	cc, sc := connPair(t)
	go func() {
		_ = h.ServeSession(t.Context(), agentapi.SessionRequest{ID: "ses-1", Kind: agentapi.SessionSSH, InstanceID: id, SSH: args}, sc)
	}()
	conn, chans, reqs, err := ssh.NewClientConn(cc, id+".gpucloud", &ssh.ClientConfig{User: "x",
		Auth: []ssh.AuthMethod{ssh.PublicKeys(user)}, HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := ssh.NewClient(conn, chans, reqs)
	defer c.Close()

	s, _ := c.NewSession()
	if err := s.Setenv("LANG", "C.UTF-8 it's"); err != nil {
		t.Fatal(err)
	}
	out, err := s.Output(`echo "$GREETING/$LANG"; exit 4`)
	var ee *ssh.ExitError
	if !errors.As(err, &ee) || ee.ExitStatus() != 4 || string(out) != "from the workload/C.UTF-8 it's\n" {
		t.Errorf("exec: %q, %v", out, err)
	}

	s, _ = c.NewSession()
	if err := s.RequestPty("xterm", 33, 101, nil); err != nil {
		t.Fatal(err)
	}
	out, err = s.Output("stty size; echo $TERM")
	if err != nil || !strings.Contains(string(out), "33 101") || !strings.Contains(string(out), "xterm") {
		t.Errorf("pty: %q, %v", out, err)
	}

	s, _ = c.NewSession()
	if err := s.Start("sleep 30"); err != nil {
		t.Fatal(err)
	}
	if err := s.Signal(ssh.SIGTERM); err == nil {
		// x/crypto's Signal does not want a reply; the refusal shows only
		// as the process going on, so send one that wants a reply.
		if ok, _ := s.SendRequest("signal", true, ssh.Marshal(signalReq{Signal: "TERM"})); ok {
			t.Error("a signal the runtime cannot deliver was accepted")
		}
	}
	s.Close()
}
