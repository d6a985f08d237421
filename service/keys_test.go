package service_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// authorizedLine is pub as an authorized_keys line with comment.
func authorizedLine(t *testing.T, pub any, comment string) string {
	t.Helper()
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sp))) + " " + comment
}

func newEd25519Line(t *testing.T, comment string) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return authorizedLine(t, pub, comment)
}

func rsaLine(t *testing.T, bits int) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return authorizedLine(t, &k.PublicKey, "rsa")
}

// TestParseKey: what an import takes (and the size and type it records),
// and what it refuses, each with an Invalid error that names the problem
// and never repeats the input.
func TestParseKey(t *testing.T) {
	ec, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edPriv, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKCS8PrivateKey(edPriv)
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "OPENSSH PRIVATE KEY", Bytes: der}))
	ed := newEd25519Line(t, "me@laptop")
	for _, c := range []struct {
		name, text, typ string
		bits            int
		problem         string
	}{
		{"ed25519", ed, ssh.KeyAlgoED25519, 256, ""},
		{"with comments and blank lines", "# my key\n\n" + ed + "\n", ssh.KeyAlgoED25519, 256, ""},
		{"ecdsa p384", authorizedLine(t, &ec.PublicKey, "ec"), ssh.KeyAlgoECDSA384, 384, ""},
		{"rsa 2048", rsaLine(t, 2048), ssh.KeyAlgoRSA, 2048, ""},
		{"rsa 1024", rsaLine(t, 1024), "", 0, "1024-bit RSA key; the minimum is 2048"},
		{"dsa", "ssh-dss AAAAB3NzaC1kc3MAAACBAP me@old", "", 0, "DSA key"},
		{"private key", privPEM, "", 0, "is a private key"},
		{"garbage", "hello world", "", 0, "not an OpenSSH public key"},
		{"empty", "  \n", "", 0, "is required"},
		{"two keys", ed + "\n" + newEd25519Line(t, "other"), "", 0, "more than one key"},
		{"options", `command="ls" ` + ed, "", 0, "options"},
		{"too long", ed + " " + strings.Repeat("x", 9000), "", 0, "bytes long"},
		{"ssh2 format", "---- BEGIN SSH2 PUBLIC KEY ----\nAAAA\n---- END SSH2 PUBLIC KEY ----", "", 0, "RFC 4716"},
	} {
		k, err := service.ParseKey("public_key", c.text)
		if c.problem == "" {
			if err != nil || k.Type != c.typ || k.Bits != c.bits || !strings.HasPrefix(k.Fingerprint, "SHA256:") ||
				strings.ContainsAny(k.Line, "\n#") {
				t.Errorf("%s: %+v, %v; want type %s, %d bits", c.name, k, err, c.typ, c.bits)
			}
			continue
		}
		var ce *cloud.Error
		if err == nil || cloud.ErrorCode(err) != cloud.Invalid || !strings.Contains(err.Error(), c.problem) {
			t.Errorf("%s: %v, want Invalid saying %q", c.name, err, c.problem)
		} else if ce, _ = err.(*cloud.Error); ce.Details["field"] != "public_key" {
			t.Errorf("%s: details %v, want field public_key", c.name, ce.Details)
		}
		if len(c.text) > 40 && err != nil && strings.Contains(err.Error(), strings.TrimSpace(c.text)[:40]) {
			t.Errorf("%s: the error repeats the input: %v", c.name, err)
		}
	}
}

func TestDefaultKeyName(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	sp, _ := ssh.NewPublicKey(pub)
	for comment, want := range map[string]string{
		"me@laptop":                "me-laptop",
		"  ":                       "key-",
		"@@@":                      "key-",
		"--x y--":                  "x-y",
		strings.Repeat("a", 100):   strings.Repeat("a", 63),
		"Jörg's key (work), 2024.": "J-rg-s-key-work-2024",
	} {
		got := service.DefaultKeyName(&service.ParsedKey{Key: sp, Comment: strings.TrimSpace(comment)})
		if want == "key-" {
			if !strings.HasPrefix(got, "key-") || len(got) != 12 {
				t.Errorf("%q → %q, want key- and 8 hex digits", comment, got)
			}
		} else if got != want {
			t.Errorf("%q → %q, want %q", comment, got, want)
		}
		if err := service.CheckName("name", got, true); err != nil {
			t.Errorf("%q → %q, not a valid name: %v", comment, got, err)
		}
	}
}

// TestKeys: import (idempotent; a duplicate fingerprint or name is a
// conflict; the tenant's limit), list, delete, Authorized, and another
// tenant, which can neither read, list nor delete the keys.
func TestKeys(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		line := newEd25519Line(t, "me@laptop")
		k, created, err := f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{PublicKey: line + "\n"}, "idem-1")
		if err != nil || !created || !strings.HasPrefix(k.ID, service.KeyPrefix) || k.TenantID != f.acme.TenantID ||
			k.Name != "me-laptop" || k.PublicKey != line || k.Type != ssh.KeyAlgoED25519 {
			t.Fatalf("import = %+v, %v, %v", k, created, err)
		}
		again, created, err := f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{PublicKey: line}, "idem-1")
		if err != nil || created || again.ID != k.ID {
			t.Errorf("retry = %+v, %v, %v; want %s again", again, created, err, k.ID)
		}
		_, _, err = f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{PublicKey: newEd25519Line(t, "x")}, "idem-1")
		if ce := vaCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, "public_key") {
			t.Errorf("reused idempotency key: %v, want a conflict naming public_key", ce)
		}
		before := f.counts()
		_, _, err = f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{Name: "again", PublicKey: line}, "")
		if ce := vaCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, k.Fingerprint) {
			t.Errorf("the same key twice: %v, want a conflict naming its fingerprint", ce)
		}
		_, _, err = f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{Name: "me-laptop", PublicKey: newEd25519Line(t, "")}, "")
		vaCode(t, err, cloud.Conflict)
		_, _, err = f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{Name: "bad name!", PublicKey: newEd25519Line(t, "")}, "")
		vaCode(t, err, cloud.Invalid)
		f.unchanged(before, "refused imports")

		// Globex sees none of it, and may import the same key itself.
		before = f.counts()
		_, err = f.svc.Keys.Get(ctx, f.globex, k.ID)
		vaCode(t, err, cloud.NotFound)
		vaCode(t, f.svc.Keys.Delete(ctx, f.globex, k.ID), cloud.NotFound)
		if ks, err := f.svc.Keys.List(ctx, f.globex, ""); err != nil || len(ks) != 0 {
			t.Errorf("globex lists %v, %v", ks, err)
		}
		f.unchanged(before, "globex's tries")
		if _, _, err := f.svc.Keys.Import(ctx, f.globex, api.ImportKeyRequest{PublicKey: line}, "idem-1"); err != nil {
			t.Errorf("the same key in another tenant: %v", err)
		}
		if lines, err := f.svc.Keys.Authorized(ctx, f.acme.TenantID); err != nil || len(lines) != 1 || lines[0] != line {
			t.Errorf("authorized = %q, %v", lines, err)
		}
		if ks, err := f.svc.Keys.List(ctx, f.admin, f.acme.TenantID); err != nil || len(ks) != 1 || ks[0].ID != k.ID {
			t.Errorf("admin lists %v, %v", ks, err)
		}

		// The limit.
		for i := 1; i < service.MaxKeysPerTenant; i++ {
			if _, _, err := f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{PublicKey: newEd25519Line(t, "")}, ""); err != nil {
				t.Fatalf("key %d: %v", i+1, err)
			}
		}
		_, _, err = f.svc.Keys.Import(ctx, f.acme, api.ImportKeyRequest{PublicKey: newEd25519Line(t, "")}, "")
		vaCode(t, err, cloud.QuotaExceeded)

		if err := f.svc.Keys.Delete(ctx, f.acme, k.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
		_, err = f.svc.Keys.Get(ctx, f.acme, k.ID)
		vaCode(t, err, cloud.NotFound)
		if lines, _ := f.svc.Keys.Authorized(ctx, f.acme.TenantID); len(lines) != service.MaxKeysPerTenant-1 || strings.Contains(strings.Join(lines, "\n"), line) {
			t.Errorf("after delete %d authorized keys, the deleted one among them: %v", len(lines), strings.Contains(strings.Join(lines, "\n"), line))
		}
		if _, err := f.svc.Keys.Authorized(ctx, ""); err == nil {
			t.Error("Authorized of no tenant answered")
		}

		// The trail: one import event per key made (none for the retry or
		// the refusals), one deletion, each naming the key and who.
		evs, _, err := f.svc.Instances.EventLog(ctx, f.admin, cloud.EventFilter{TenantID: f.acme.TenantID,
			Kinds: []cloud.EventKind{service.EventKeyImported, service.EventKeyDeleted}, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		imports, deletes := 0, 0
		for _, e := range evs {
			switch e.Kind {
			case service.EventKeyImported:
				imports++
			case service.EventKeyDeleted:
				deletes++
				if e.Actor != f.acme.ID || !strings.Contains(string(e.Details), k.ID) || !strings.Contains(string(e.Details), k.Fingerprint) {
					t.Errorf("the deletion's event: %+v %s", e, e.Details)
				}
			}
		}
		if imports != service.MaxKeysPerTenant || deletes != 1 {
			t.Errorf("%d key.imported and %d key.deleted events for acme, want %d and 1", imports, deletes, service.MaxKeysPerTenant)
		}
		if evs[0].Kind != service.EventKeyImported || evs[0].Actor != f.acme.ID || !strings.Contains(string(evs[0].Details), k.ID) {
			t.Errorf("the first import's event: %+v %s", evs[0], evs[0].Details)
		}
	})
}
