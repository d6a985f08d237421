package cli

import (
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/cloud"
)

func TestKeys(t *testing.T) {
	e := newCloudEnv(t)
	_, tok := e.member("acme", "alice")
	_, other := e.member("globex", "gary")
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	dir := t.TempDir()
	file := filepath.Join(dir, "id_ed25519.pub")
	if err := os.WriteFile(file, append(ssh.MarshalAuthorizedKey(sp)[:len(ssh.MarshalAuthorizedKey(sp))-1], " alice@laptop\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	var k cloud.Key
	decodeJSON(t, e.ok(tok, "keys", "import", file, "-o", "json"), &k)
	if k.Name != "alice-laptop" || k.Fingerprint != ssh.FingerprintSHA256(sp) || !strings.HasPrefix(k.ID, "k-") {
		t.Fatalf("imported %+v", k)
	}
	if out := e.ok(tok, "keys", "list"); !strings.Contains(out, k.ID) || !strings.Contains(out, k.Fingerprint) {
		t.Errorf("list:\n%s", out)
	}
	priv := filepath.Join(dir, "id_ed25519")
	if err := os.WriteFile(priv, []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := e.as(tok, "keys", "import", "--name", "x", priv)
	oneLine(t, code, errOut, "private key")
	code, _, errOut = e.as(tok, "keys", "import", "--name", "again", file)
	oneLine(t, code, errOut, "(conflict)")
	if code, _, errOut := e.as(tok, "keys", "import"); code != 2 || errOut == "" {
		t.Errorf("import without a file: exit %d, %q; want a usage error", code, errOut)
	}

	// Another tenant: not found, and its list is empty.
	code, _, errOut = e.as(other, "keys", "delete", k.ID)
	oneLine(t, code, errOut, "(not_found)")
	if out := e.ok(other, "keys", "list"); !strings.Contains(out, "no SSH keys") {
		t.Errorf("globex lists:\n%s", out)
	}
	if out := e.ok(tok, "keys", "delete", k.ID); !strings.Contains(out, "deleted") {
		t.Errorf("delete: %s", out)
	}
	if out := e.ok(tok, "keys", "list"); !strings.Contains(out, "no SSH keys") {
		t.Errorf("list after delete:\n%s", out)
	}
}
