package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/gpucloud/gpucloud/agent/runtime/containerd"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// needSSH skips (fails in CI) without OpenSSH's client and ssh-keygen.
func needSSH(t *testing.T) {
	t.Helper()
	for _, p := range []string{"ssh", "ssh-keygen", "scp"} {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("this test must run in CI: %s is missing (apt package openssh-client)", p)
			}
			t.Skipf("skipping: %s is missing (apt package openssh-client)", p)
		}
	}
}

// sshUser is a tenant's member on an up, with an SSH key pair of their own.
type sshUser struct {
	token, key, config string
}

// sshCloud is an up with two tenants' members, alice (acme) and bob
// (globex), each with a key imported, and alice's running instance.
type sshCloud struct {
	t          *testing.T
	dir        string
	alice, bob sshUser
	in         cloud.Instance
	host       string // the instance as ssh names it
	sshConfig  string // ssh-config's stanza, in a file
}

// newSSHCloud starts an up with flags and sets up sshCloud, alice's
// instance created with createArgs.
func newSSHCloud(t *testing.T, flags []string, createArgs ...string) *sshCloud {
	t.Helper()
	cmd, out, wait := startUp(t, flags...)
	// Stopped as a user would (Ctrl-C), so that up stops its containers
	// and its containerd before the data directory goes.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		wait()
	})
	admin := upCLI(t, out)
	conf := regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(out)[1]
	c := &sshCloud{t: t, dir: t.TempDir()}
	newUser := func(tenant, name string) sshUser {
		admin("tenants", "create", tenant)
		var cu api.CreatedUser
		if err := json.Unmarshal([]byte(admin("tenants", "add-user", tenant, "--name", name, "-o", "json")), &cu); err != nil {
			t.Fatal(err)
		}
		key := filepath.Join(c.dir, name)
		if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name+"@laptop", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v %s", err, b)
		}
		return sshUser{token: cu.Secret, key: key, config: conf}
	}
	c.alice, c.bob = newUser("acme", "alice"), newUser("globex", "bob")
	c.must(c.alice, "keys", "import", c.alice.key+".pub")
	c.must(c.bob, "keys", "import", c.bob.key+".pub")
	js := c.must(c.alice, append([]string{"instances", "create", "--wait", "-o", "json"}, createArgs...)...)
	if err := json.Unmarshal([]byte(js), &c.in); err != nil {
		t.Fatal(err)
	}
	c.host = c.in.ID + ".gpucloud"
	c.sshConfig = filepath.Join(c.dir, "ssh_config")
	if err := os.WriteFile(c.sshConfig, []byte(c.must(c.alice, "ssh-config")), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// env is u's environment for gpucloud, which also reaches the
// ProxyCommand that ssh runs (this test binary, as gpucloud).
func (c *sshCloud) env(u sshUser) []string {
	return append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+u.config, "GPUCLOUD_TOKEN="+u.token)
}

func run(prog string, env []string, args ...string) (string, string, error) {
	cmd := exec.Command(prog, args...)
	cmd.Env = env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	return string(b), stderr.String(), err
}

// as runs gpucloud as u.
func (c *sshCloud) as(u sshUser, args ...string) (string, string, error) {
	return run(os.Args[0], c.env(u), args...)
}

func (c *sshCloud) must(u sshUser, args ...string) string {
	c.t.Helper()
	o, e, err := c.as(u, args...)
	if err != nil {
		c.t.Fatalf("gpucloud %s: %v\n%s%s", strings.Join(args, " "), err, o, e)
	}
	return o
}

// ssh runs OpenSSH's prog (ssh, scp) as u with ssh-config's stanza, as a
// user would, and u's key.
func (c *sshCloud) ssh(u sshUser, prog string, args ...string) (string, string, error) {
	return run(prog, c.env(u), append([]string{"-F", c.sshConfig, "-i", u.key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"}, args...)...)
}

// checkTenancy: bob's key is refused by alice's instance even over
// alice's token, and bob's token does not find it.
func (c *sshCloud) checkTenancy() {
	t := c.t
	if o, e, err := c.ssh(sshUser{token: c.alice.token, key: c.bob.key, config: c.alice.config}, "ssh", c.host, "echo", "hi"); err == nil || !strings.Contains(e, "Permission denied (publickey)") {
		t.Errorf("bob's key on acme's instance: %q, %v\n%s", o, err, e)
	}
	if o, e, err := c.ssh(c.bob, "ssh", c.host, "echo", "hi"); err == nil || !strings.Contains(e, "not_found") {
		t.Errorf("bob's token on acme's instance: %q, %v\n%s", o, err, e)
	}
}

// TestSSH: the system's ssh, scp and `gpucloud instances ssh` reach an
// instance through the server and its host's agent (gpucloud up, process
// runtime) with a key the tenant imported; another tenant's key is
// refused by the instance, and another tenant's instance is not_found.
func TestSSH(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needSSH(t)
	c := newSSHCloud(t, noMetrics, "--offering", "l40s.1x", "--", "sleep", "3600")
	alice, bob, host := c.alice, c.bob, c.host

	// Each run is a new ssh: the proxy process, TLS, the WebSocket, the
	// agent's dial-back, the key exchange and the session.
	var took []time.Duration
	for range 5 {
		start := time.Now()
		if o, e, err := c.ssh(alice, "ssh", host, "echo", "hi"); err != nil || o != "hi\n" {
			t.Fatalf("ssh %s echo hi: %q, %v\n%s", host, o, err, e)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("ssh echo hi, a new connection each: min %s, median %s, max %s", took[0].Round(time.Millisecond),
		took[2].Round(time.Millisecond), took[4].Round(time.Millisecond))
	// The exit code comes back.
	_, _, err := c.ssh(alice, "ssh", host, "exit 7")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("exit 7: %v", err)
	}
	// A terminal (ssh -tt: one even without a local terminal).
	if o, e, err := c.ssh(alice, "ssh", "-tt", host, "tty"); err != nil || !strings.HasPrefix(o, "/dev/pts/") {
		t.Errorf("ssh -tt: %q, %v\n%s", o, err, e)
	}
	// scp's legacy protocol (it needs scp in the instance: on the process
	// runtime, the host's).
	local := filepath.Join(c.dir, "dataset.bin")
	if err := os.WriteFile(local, []byte(strings.Repeat("0123456789abcdef", 1<<14)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, e, err := c.ssh(alice, "scp", "-O", local, host+":dataset.bin"); err != nil {
		t.Errorf("scp -O: %v\n%s", err, e)
	} else if o, _, err := c.ssh(alice, "ssh", host, "wc -c < dataset.bin"); err != nil || strings.TrimSpace(o) != fmt.Sprint(1<<18) {
		t.Errorf("the copied file: %q bytes, %v", o, err)
	}
	// rsync over the same stanza (it needs rsync in the instance too).
	if _, err := exec.LookPath("rsync"); err != nil {
		if os.Getenv("CI") != "" {
			t.Errorf("rsync is missing (apt package rsync)")
		}
	} else {
		src := filepath.Join(c.dir, "checkpoints")
		if err := os.MkdirAll(filepath.Join(src, "step-1"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "step-1", "model.pt"), []byte("weights"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, e, err := run("rsync", c.env(alice), "-a", "-e", "ssh -F "+c.sshConfig+" -i "+alice.key+" -o IdentitiesOnly=yes -o BatchMode=yes",
			src+"/", host+":ckpt/"); err != nil {
			t.Errorf("rsync: %v\n%s", err, e)
		} else if o, _, err := c.ssh(alice, "ssh", host, "cat ckpt/step-1/model.pt"); err != nil || o != "weights" {
			t.Errorf("rsync's copy: %q, %v", o, err)
		}
	}
	// A forward to a port inside the instance (ssh -W: direct-tcpip; the
	// process runtime's instances share the host's loopback).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if conn, err := ln.Accept(); err == nil {
			conn.Write([]byte("jupyter here\n"))
			conn.Close()
		}
	}()
	if o, e, err := c.ssh(alice, "ssh", "-W", ln.Addr().String(), host); err != nil || o != "jupyter here\n" {
		t.Errorf("ssh -W: %q, %v\n%s", o, err, e)
	}
	// gpucloud instances ssh runs the same ssh.
	if o, e, err := c.as(alice, "instances", "ssh", "-i", alice.key, c.in.ID, "--", "echo", "from", "instances", "ssh"); err != nil || o != "from instances ssh\n" {
		t.Errorf("instances ssh: %q, %v\n%s", o, err, e)
	}
	// Without OpenSSH, instances ssh's own client does the same, and
	// checks the host key OpenSSH recorded.
	noSSH := func(args ...string) (string, string, error) {
		return run(os.Args[0], append(c.env(alice), "PATH="+t.TempDir()), args...)
	}
	if o, e, err := noSSH("instances", "ssh", "-i", alice.key, c.in.ID, "--", "echo", "built", "in;", "exit", "3"); o != "built in\n" {
		t.Errorf("the built-in client: %q, %v\n%s", o, err, e)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("the built-in client's exit code: %v", err)
	}
	if _, e, err := noSSH("instances", "ssh", "-i", bob.key, c.in.ID, "--", "true"); err == nil || !strings.Contains(e, "unable to authenticate") {
		t.Errorf("the built-in client with bob's key: %v\n%s", err, e)
	}
	// Its shell on a terminal: the local size, and the exit code.
	sh := exec.Command(os.Args[0], "instances", "ssh", "-i", alice.key, c.in.ID)
	sh.Env = append(c.env(alice), "PATH="+t.TempDir(), "TERM=xterm")
	tty, err := pty.StartWithSize(sh, &pty.Winsize{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	if _, err := tty.Write([]byte("stty size; exit 4\n")); err != nil {
		t.Fatal(err)
	}
	screen := make(chan string, 1)
	go func() {
		// Until the terminal's other side closes (EIO) with the client.
		b, _ := io.ReadAll(tty)
		screen <- string(b)
	}()
	waited := make(chan error, 1)
	go func() { waited <- sh.Wait() }()
	select {
	case err := <-waited:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 4 {
			t.Errorf("the built-in client's shell: %v", err)
		}
	case <-time.After(30 * time.Second):
		_ = sh.Process.Kill()
		t.Errorf("the built-in client's shell did not exit")
	}
	select {
	case out := <-screen:
		if !strings.Contains(out, "30 100") {
			t.Errorf("the built-in client's terminal: %q, want the size 30 100", out)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the built-in client's terminal did not close")
	}

	c.checkTenancy()
	// A deleted key opens no new session.
	var keys []cloud.Key
	if err := json.Unmarshal([]byte(c.must(alice, "keys", "list", "-o", "json")), &keys); err != nil || len(keys) != 1 {
		t.Fatalf("alice's keys: %v %v", keys, err)
	}
	c.must(alice, "keys", "delete", keys[0].ID)
	if _, e, err := c.ssh(alice, "ssh", host, "echo", "hi"); err == nil || !strings.Contains(e, "no SSH keys") {
		t.Errorf("after the key's delete: %v\n%s", err, e)
	}
}

// TestSSHContainers: an image without sshd (the busybox base image) gets
// a shell and commands over plain ssh, in the container, as its user,
// with the allowed environment; tenancy as on processes.
func TestSSHContainers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needSSH(t)
	needContainers(t)
	c := newSSHCloud(t, []string{"--runtime", "containerd", "--agent-metrics-listen", ""},
		"--offering", "h100.1x", "--image", "gpucloud/base:1", "--", "sleep", "3600")
	o, e, err := c.ssh(c.alice, "ssh", "-o", "SetEnv=LANG=C.UTF-8", c.host, `echo "$(hostname) $(id -u) $LANG"; exit 5`)
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 5 {
		t.Fatalf("ssh in a container: %q, %v\n%s", o, err, e)
	}
	f := strings.Fields(o)
	if len(f) != 3 || f[0] != c.in.ID || f[2] != "C.UTF-8" {
		t.Errorf("in the container: %q; want its hostname %s, a uid and LANG", o, c.in.ID)
	} else if uid, _ := strconv.Atoi(f[1]); uid < containerd.DefaultUIDBase {
		t.Errorf("the session runs as %d, not the container's user", uid)
	}
	if o, e, err := c.ssh(c.alice, "ssh", "-tt", c.host, "tty"); err != nil || !strings.HasPrefix(o, "/dev/pts/") {
		t.Errorf("ssh -tt in a container: %q, %v\n%s", o, err, e)
	}
	c.checkTenancy()
}
