package service_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestAgentsJoinClientCert: a server that issues client certificates
// signs the join's certificate request with the host ID as the name,
// whatever the request asked; a join without a request (an agent too old
// for mutual TLS) or with a bad one is refused and changes nothing; a
// re-join issues a new certificate for the new key; a server that issues
// none ignores the request.
func TestAgentsJoinClientCert(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		ca, err := pki.NewCA("test cloud", f.clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		svc := service.New(st, nil, service.Options{Now: f.clock.Now, SignAgentCert: func(csr []byte, host string) ([]byte, error) {
			return ca.SignClient(csr, host, f.clock.Now())
		}})
		join, jtID := f.joinActor("rack-1")

		before := f.state()
		_, _, _, _, err = svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), nil, "")
		if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "csr" || ce.Details["reason"] != service.AgentTooOld ||
			!strings.Contains(ce.Message, "too old") {
			t.Errorf("join without a CSR: %+v", ce)
		}
		for name, csr := range map[string][]byte{
			"not PEM":     []byte("hello"),
			"another PEM": pki.EncodeCert(ca.Cert),
			"oversize":    []byte(strings.Repeat("A", 17<<10)),
		} {
			_, _, _, _, err = svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), csr, "")
			if ce := ahCode(t, err, cloud.Invalid); ce.Details["field"] != "csr" {
				t.Errorf("CSR %s: %+v", name, ce)
			}
		}
		f.unchanged(before, "joins refused for their CSR")

		// The request asks for another host's name: the certificate names
		// the host that joined.
		key, csr, err := pki.NewClientKey("node-2")
		if err != nil {
			t.Fatal(err)
		}
		id, cred, certPEM, created, err := svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), csr, "")
		if err != nil || id != "node-1" || !created || cred == "" {
			t.Fatalf("Join = %q, %v, %v", id, created, err)
		}
		first := checkClientCert(t, ca, certPEM, "node-1", key, f.clock.Now())

		// A re-join with the host's credential: a new certificate, for the
		// new key.
		tk, err := f.token(cred)
		if err != nil {
			t.Fatal(err)
		}
		key2, csr2, _ := pki.NewClientKey("node-1")
		_, _, certPEM2, created, err := svc.Agents.Join(ctx, join, jtID, ahInventory("node-1", "L4", 1), csr2, tk.ID)
		if err != nil || created {
			t.Fatalf("re-join: %v, %v", created, err)
		}
		if second := checkClientCert(t, ca, certPEM2, "node-1", key2, f.clock.Now()); second.SerialNumber.Cmp(first.SerialNumber) == 0 {
			t.Error("the re-join's certificate has the first one's serial")
		}

		// A server without client certificates (plain HTTP) ignores it.
		inv := ahInventory("node-3", "L4", 1)
		inv.Host.GPUs[0].UUID += "-3"
		if _, _, certPEM, _, err := f.svc.Agents.Join(ctx, join, jtID, inv, csr, ""); err != nil || certPEM != nil {
			t.Errorf("plain server's join: %q, %v; want no certificate", certPEM, err)
		}
	})
}

// checkClientCert checks that certPEM is a client certificate of ca for
// host, of key's public key, and returns it.
func checkClientCert(t *testing.T, ca *pki.CA, certPEM []byte, host string, key *ecdsa.PrivateKey, now time.Time) *x509.Certificate {
	t.Helper()
	c, err := pki.ParseCert(certPEM)
	if err != nil {
		t.Fatalf("certificate: %v", err)
	}
	if c.Subject.CommonName != host {
		t.Errorf("certificate names %q, want %q", c.Subject.CommonName, host)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		t.Error("the certificate is not for the request's key")
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("certificate does not verify as a client certificate of the CA: %v", err)
	}
	return c
}
