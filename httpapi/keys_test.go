package httpapi

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

func testKeyLine(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}

// TestKeys covers the routes, and another tenant, which can neither read,
// list nor delete the key.
func TestKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := e.counts()
	for _, req := range []api.ImportKeyRequest{
		{},
		{PublicKey: "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"},
		{PublicKey: "not a key"},
		{PublicKey: testKeyLine(t, ""), Name: "no spaces allowed"},
	} {
		_, err := e.acme.ImportKey(ctx, req, "")
		wantCode(t, err, cloud.Invalid)
	}
	e.unchanged(before, "bad keys")

	line := testKeyLine(t, "me@laptop")
	k, err := e.acme.ImportKey(ctx, api.ImportKeyRequest{PublicKey: line}, "k1")
	if err != nil || k.TenantID != e.acmeID || !strings.HasPrefix(k.ID, "k-") || k.Name != "me-laptop" ||
		k.PublicKey != line || !strings.HasPrefix(k.Fingerprint, "SHA256:") {
		t.Fatalf("import = %+v, %v", k, err)
	}
	if again, err := e.acme.ImportKey(ctx, api.ImportKeyRequest{PublicKey: line}, "k1"); err != nil || again.ID != k.ID {
		t.Errorf("retry = %+v, %v", again, err)
	}
	_, err = e.acme.ImportKey(ctx, api.ImportKeyRequest{PublicKey: line, Name: "twice"}, "")
	wantCode(t, err, cloud.Conflict)
	if ks, err := e.acme.Keys(ctx, ""); err != nil || len(ks) != 1 || ks[0].ID != k.ID {
		t.Errorf("acme lists %v, %v", ks, err)
	}

	// Globex sees none of it and changes nothing.
	before = e.counts()
	_, err = e.globex.GetKey(ctx, k.ID)
	wantCode(t, err, cloud.NotFound)
	wantCode(t, e.globex.DeleteKey(ctx, k.ID), cloud.NotFound)
	if ks, err := e.globex.Keys(ctx, ""); err != nil || len(ks) != 0 {
		t.Errorf("globex lists %v, %v", ks, err)
	}
	_, err = e.globex.Keys(ctx, e.acmeID)
	if cloud.ErrorCode(err) == "" {
		t.Errorf("globex lists acme's keys by tenant: no error")
	}
	e.unchanged(before, "globex's tries")

	if ks, err := e.admin.Keys(ctx, e.acmeID); err != nil || len(ks) != 1 || ks[0].ID != k.ID {
		t.Errorf("admin lists %v, %v", ks, err)
	}
	if err := e.acme.DeleteKey(ctx, k.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	_, err = e.acme.GetKey(ctx, k.ID)
	wantCode(t, err, cloud.NotFound)
}

// TestInstanceSSHRefusals: GET /v1/instances/{id}/ssh answers its
// refusals as JSON errors before any upgrade: another tenant's instance
// is not_found (before its keys are read), a tenant without keys is told
// to import one, an instance that is not running is a conflict.
func TestInstanceSSHRefusals(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.acme.DialSSH(ctx, in.ID)
	if wantCode(t, err, cloud.Invalid); err == nil || !strings.Contains(err.Error(), "keys import") {
		t.Errorf("no keys: %v", err)
	}
	if _, err := e.acme.ImportKey(ctx, api.ImportKeyRequest{PublicKey: testKeyLine(t, "a")}, ""); err != nil {
		t.Fatal(err)
	}
	before := e.counts()
	_, err = e.globex.DialSSH(ctx, in.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.DialSSH(ctx, "i-doesnotexist")
	wantCode(t, err, cloud.NotFound)
	e.unchanged(before, "refused ssh")
	_, err = e.acme.DialSSH(ctx, in.ID)
	wantCode(t, err, cloud.Conflict)
}
