package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

func TestSSHConfig(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "--server", "https://cloud.example:8443", "ssh-config")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"Host i-*.gpucloud\n",
		"    ProxyCommand " + shellQuote(self) + " --server https://cloud.example:8443 instances ssh-proxy %h\n",
		"    StrictHostKeyChecking accept-new\n",
		"    UserKnownHostsFile " + shellQuote(knownHostsPath()) + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("ssh-config lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "--token") {
		t.Errorf("ssh-config holds a token:\n%s", out)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/gpucloud":          "/usr/bin/gpucloud",
		"/home/me/my tools/gpucloud": "'/home/me/my tools/gpucloud'",
		"/tmp/it's":                  `'/tmp/it'\''s'`,
		"$(rm -rf ~)":                "'$(rm -rf ~)'",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAcceptNewHostKey: an unknown instance's key is added, a known one
// must match (OpenSSH's hashed entries too), a changed one is refused.
func TestAcceptNewHostKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpucloud", "known_hosts")
	check := acceptNewHostKey(path)
	k1, k2 := testHostKey(t), testHostKey(t)
	if err := check("i-1.gpucloud:22", nil, k1); err != nil {
		t.Fatalf("first use: %v", err)
	}
	if err := check("i-1.gpucloud:22", nil, k1); err != nil {
		t.Errorf("the same key again: %v", err)
	}
	if err := check("i-1.gpucloud:22", nil, k2); err == nil || !strings.Contains(err.Error(), "ssh-keygen -R i-1.gpucloud") {
		t.Errorf("a changed key: %v", err)
	}
	// An entry OpenSSH hashed (HashKnownHosts yes) counts as well.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, knownhosts.Line([]string{knownhosts.HashHostname("i-2.gpucloud")}, k1))
	f.Close()
	if err := check("i-2.gpucloud:22", nil, k2); err == nil {
		t.Error("a changed key under a hashed entry was accepted")
	}
	if err := check("i-2.gpucloud:22", nil, k1); err != nil {
		t.Errorf("the key of a hashed entry: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("known_hosts: %v %v", st.Mode(), err)
	}
}

func testHostKey(t *testing.T) ssh.PublicKey {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
