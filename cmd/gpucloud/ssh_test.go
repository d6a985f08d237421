package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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

// TestSSH: the system's ssh, scp and `gpucloud instances ssh` reach an
// instance through the server and its host's agent (gpucloud up, process
// runtime) with a key the tenant imported; another tenant's key is
// refused by the instance, and another tenant's instance is not_found.
func TestSSH(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local cloud")
	}
	needSSH(t)
	_, out, _ := startUp(t, noMetrics...)
	admin := upCLI(t, out)
	conf := regexp.MustCompile(`CLI configured in (\S+); try:`).FindStringSubmatch(out)[1]
	dir := t.TempDir()
	newUser := func(tenant, name string) sshUser {
		admin("tenants", "create", tenant)
		var cu api.CreatedUser
		if err := json.Unmarshal([]byte(admin("tenants", "add-user", tenant, "--name", name, "-o", "json")), &cu); err != nil {
			t.Fatal(err)
		}
		key := filepath.Join(dir, name)
		if b, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name+"@laptop", "-f", key).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v %s", err, b)
		}
		return sshUser{token: cu.Secret, key: key, config: conf}
	}
	alice, bob := newUser("acme", "alice"), newUser("globex", "bob")
	// as runs gpucloud as u; the environment also reaches the
	// ProxyCommand that ssh runs (this test binary, as gpucloud).
	env := func(u sshUser) []string {
		return append(os.Environ(), runMainEnv+"=1", "GPUCLOUD_CONFIG="+u.config, "GPUCLOUD_TOKEN="+u.token)
	}
	as := func(u sshUser, args ...string) (string, string, error) {
		c := exec.Command(os.Args[0], args...)
		c.Env = env(u)
		var stderr strings.Builder
		c.Stderr = &stderr
		b, err := c.Output()
		return string(b), stderr.String(), err
	}
	must := func(u sshUser, args ...string) string {
		t.Helper()
		o, e, err := as(u, args...)
		if err != nil {
			t.Fatalf("gpucloud %s: %v\n%s%s", strings.Join(args, " "), err, o, e)
		}
		return o
	}
	must(alice, "keys", "import", alice.key+".pub")
	must(bob, "keys", "import", bob.key+".pub")
	var in cloud.Instance
	if err := json.Unmarshal([]byte(must(alice, "instances", "create", "--offering", "l40s.1x", "--wait", "-o", "json", "--", "sleep", "3600")), &in); err != nil {
		t.Fatal(err)
	}
	sshConfig := filepath.Join(dir, "ssh_config")
	if err := os.WriteFile(sshConfig, []byte(must(alice, "ssh-config")), 0o600); err != nil {
		t.Fatal(err)
	}
	host := in.ID + ".gpucloud"
	// ssh runs plain OpenSSH with the printed stanza, as a user would.
	ssh := func(u sshUser, prog string, args ...string) (string, string, error) {
		c := exec.Command(prog, append([]string{"-F", sshConfig, "-i", u.key, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"}, args...)...)
		c.Env = env(u)
		var stderr strings.Builder
		c.Stderr = &stderr
		b, err := c.Output()
		return string(b), stderr.String(), err
	}

	start := time.Now()
	if o, e, err := ssh(alice, "ssh", host, "echo", "hi"); err != nil || o != "hi\n" {
		t.Fatalf("ssh %s echo hi: %q, %v\n%s", host, o, err, e)
	}
	t.Logf("ssh echo hi (a new connection, key exchange and session): %s", time.Since(start).Round(time.Millisecond))
	// The exit code comes back.
	_, _, err := ssh(alice, "ssh", host, "exit 7")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 7 {
		t.Errorf("exit 7: %v", err)
	}
	// A terminal (ssh -tt: one even without a local terminal), of the
	// client's TERM.
	if o, e, err := ssh(alice, "ssh", "-tt", host, `tty; echo "$TERM"`); err != nil || !strings.HasPrefix(o, "/dev/pts/") {
		t.Errorf("ssh -tt: %q, %v\n%s", o, err, e)
	}
	// scp's legacy protocol (it needs scp in the instance: on the process
	// runtime, the host's).
	local := filepath.Join(dir, "dataset.bin")
	if err := os.WriteFile(local, []byte(strings.Repeat("0123456789abcdef", 1<<14)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, e, err := ssh(alice, "scp", "-O", local, host+":dataset.bin"); err != nil {
		t.Errorf("scp -O: %v\n%s", err, e)
	} else if o, _, err := ssh(alice, "ssh", host, "wc -c < dataset.bin"); err != nil || strings.TrimSpace(o) != fmt.Sprint(1<<18) {
		t.Errorf("the copied file: %q bytes, %v", o, err)
	}
	// A forward to a port inside the instance (ssh -W: direct-tcpip; the
	// process runtime's instances share the host's loopback).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("jupyter here\n"))
			c.Close()
		}
	}()
	if o, e, err := ssh(alice, "ssh", "-W", ln.Addr().String(), host); err != nil || o != "jupyter here\n" {
		t.Errorf("ssh -W: %q, %v\n%s", o, err, e)
	}
	// gpucloud instances ssh runs the same ssh.
	if o, e, err := as(alice, "instances", "ssh", "-i", alice.key, in.ID, "--", "echo", "from", "instances", "ssh"); err != nil || o != "from instances ssh\n" {
		t.Errorf("instances ssh: %q, %v\n%s", o, err, e)
	}

	// Without OpenSSH, instances ssh's own client does the same, and
	// checks the host key OpenSSH recorded.
	noSSH := func(args ...string) (string, string, error) {
		c := exec.Command(os.Args[0], args...)
		c.Env = append(env(alice), "PATH="+t.TempDir())
		var stderr strings.Builder
		c.Stderr = &stderr
		b, err := c.Output()
		return string(b), stderr.String(), err
	}
	if o, e, err := noSSH("instances", "ssh", "-i", alice.key, in.ID, "--", "echo", "built", "in;", "exit", "3"); o != "built in\n" {
		t.Errorf("the built-in client: %q, %v\n%s", o, err, e)
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("the built-in client's exit code: %v", err)
	}
	if _, e, err := noSSH("instances", "ssh", "-i", bob.key, in.ID, "--", "true"); err == nil || !strings.Contains(e, "unable to authenticate") {
		t.Errorf("the built-in client with bob's key: %v\n%s", err, e)
	}

	// Bob's key is not acme's: the instance refuses it, even over
	// alice's token.
	if o, e, err := ssh(sshUser{token: alice.token, key: bob.key, config: conf}, "ssh", host, "echo", "hi"); err == nil || !strings.Contains(e, "Permission denied (publickey)") {
		t.Errorf("bob's key on acme's instance: %q, %v\n%s", o, err, e)
	}
	// Bob's token: acme's instance is not found.
	if o, e, err := ssh(bob, "ssh", host, "echo", "hi"); err == nil || !strings.Contains(e, "not_found") {
		t.Errorf("bob's token on acme's instance: %q, %v\n%s", o, err, e)
	}
	// A deleted key opens no new session.
	var keys []cloud.Key
	if err := json.Unmarshal([]byte(must(alice, "keys", "list", "-o", "json")), &keys); err != nil || len(keys) != 1 {
		t.Fatalf("alice's keys: %v %v", keys, err)
	}
	must(alice, "keys", "delete", keys[0].ID)
	if _, e, err := ssh(alice, "ssh", host, "echo", "hi"); err == nil || !strings.Contains(e, "no SSH keys") {
		t.Errorf("after the key's delete: %v\n%s", err, e)
	}
}
