package cli

import (
	"os"
	"strings"
	"testing"
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
