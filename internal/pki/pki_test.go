package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("test cloud", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serve runs a TLS 1.3 server with cert, requesting client certs of ca.
func serve(t *testing.T, cert tls.Certificate, ca *CA) *httptest.Server {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			io.WriteString(w, "client="+r.TLS.PeerCertificates[0].Subject.CommonName)
			return
		}
		io.WriteString(w, "anonymous")
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, cfg *tls.Config, url string) (string, error) {
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), nil
}

func TestServerAndClientCertificates(t *testing.T) {
	ca := mustCA(t)
	cert, err := ca.ServerCert([]string{"127.0.0.1", "localhost"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, cert, ca)
	// Trusting the CA: TLS 1.3, anonymous.
	body, err := get(t, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13}, srv.URL)
	if err != nil || body != "anonymous" {
		t.Fatalf("with the CA: %q, %v", body, err)
	}
	// Not trusting it: refused.
	if _, err := get(t, &tls.Config{}, srv.URL); err == nil {
		t.Fatal("a client without the CA connected")
	}
	// A client certificate for a CSR: the CA decides the name.
	key, csr, err := NewClientKey("whatever-the-agent-says")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.SignClient(csr, "host-7", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := EncodeKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	body, err = get(t, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{pair}}, srv.URL)
	if err != nil || body != "client=host-7" {
		t.Fatalf("with a client cert: %q, %v", body, err)
	}
	// A client certificate of another CA is refused at the handshake.
	other := mustCA(t)
	foreignPEM, err := other.SignClient(csr, "host-7", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := tls.X509KeyPair(foreignPEM, keyPEM)
	if _, err := get(t, &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{foreign}}, srv.URL); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
}

func TestPinnedConfig(t *testing.T) {
	ca := mustCA(t)
	cert, err := ca.ServerCert([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := serve(t, cert, ca)
	cfg, err := PinnedConfig(ca.Fingerprint())
	if err != nil {
		t.Fatal(err)
	}
	if body, err := get(t, cfg, srv.URL); err != nil || body != "anonymous" {
		t.Fatalf("pinned to the right CA: %q, %v", body, err)
	}
	// Another CA's server (a man in the middle with its own CA) is refused.
	other := mustCA(t)
	mitmCert, _ := other.ServerCert([]string{"127.0.0.1"}, time.Now())
	mitm := serve(t, mitmCert, other)
	if _, err := get(t, cfg, mitm.URL); err == nil || !strings.Contains(err.Error(), "not the") {
		t.Fatalf("pinned client talked to another CA's server: %v", err)
	}
	// A leaf signed by nobody, with the right CA appended, is refused too.
	forged := mitmCert
	forged.Certificate = [][]byte{mitmCert.Certificate[0], ca.Cert.Raw}
	forgedSrv := serve(t, forged, other)
	if _, err := get(t, cfg, forgedSrv.URL); err == nil {
		t.Fatal("a leaf of another CA passed with the pinned CA appended")
	}
}

func TestParseFingerprint(t *testing.T) {
	ca := mustCA(t)
	fp := ca.Fingerprint()
	for _, c := range []struct {
		in string
		ok bool
	}{
		{fp, true},
		{strings.ToUpper(fp), true},
		{" " + fp + "\n", true},
		{strings.TrimPrefix(fp, FingerprintPrefix), false},
		{"sha256:abc", false},
		{"md5:" + strings.TrimPrefix(fp, FingerprintPrefix), false},
		{fp[:len(fp)-2] + "zz", false},
	} {
		got, err := ParseFingerprint(c.in)
		if (err == nil) != c.ok || c.ok && got != fp {
			t.Errorf("ParseFingerprint(%q) = %q, %v", c.in, got, err)
		}
	}
}

func TestLoadCAAndSignRules(t *testing.T) {
	ca := mustCA(t)
	keyPEM, err := EncodeKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	back, err := LoadCA(EncodeCert(ca.Cert), keyPEM)
	if err != nil || back.Fingerprint() != ca.Fingerprint() {
		t.Fatalf("LoadCA: %v", err)
	}
	other := mustCA(t)
	otherKey, _ := EncodeKey(other.Key)
	if _, err := LoadCA(EncodeCert(ca.Cert), otherKey); err == nil {
		t.Error("LoadCA accepted another CA's key")
	}
	leaf, _ := ca.ServerCert([]string{"x"}, time.Now())
	if _, err := LoadCA(EncodeCert(leaf.Leaf), keyPEM); err == nil {
		t.Error("LoadCA accepted a leaf certificate")
	}
	for _, bad := range [][]byte{nil, []byte("junk"), EncodeCert(ca.Cert)} {
		if _, err := ca.SignClient(bad, "h", time.Now()); err == nil {
			t.Errorf("SignClient accepted %q", bad)
		}
	}
	// A server certificate names exactly its hosts and expires before the CA.
	c, err := ca.ServerCert([]string{"127.0.0.1", "::1", "gpucloud.example"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Leaf.IPAddresses) != 2 || len(c.Leaf.DNSNames) != 1 || !c.Leaf.IPAddresses[1].Equal(net.ParseIP("::1")) {
		t.Errorf("SANs %v %v", c.Leaf.IPAddresses, c.Leaf.DNSNames)
	}
	if c.Leaf.NotAfter.After(ca.Cert.NotAfter) || c.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("server cert %v..%v", c.Leaf.NotBefore, c.Leaf.NotAfter)
	}
}

// TestReplicaCert: a replica's certificate passes IsReplica over a real
// TLS 1.3 handshake; an agent's, a server's, another CA's replica
// certificate and no certificate do not.
func TestReplicaCert(t *testing.T) {
	ca := mustCA(t)
	serverCert, err := ca.ServerCert([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, IsReplica(r.TLS))
	}))
	srv.TLS = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}
	srv.StartTLS()
	t.Cleanup(srv.Close)

	replica, err := ca.ReplicaCert("r-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if replica.Leaf.Subject.CommonName != "replica r-1" {
		t.Errorf("common name %q", replica.Leaf.Subject.CommonName)
	}
	key, csr, _ := NewClientKey("x")
	agentPEM, _ := ca.SignClient(csr, "r-1", time.Now())
	keyPEM, _ := EncodeKey(key)
	agent, _ := tls.X509KeyPair(agentPEM, keyPEM)
	foreign, _ := mustCA(t).ReplicaCert("r-1", time.Now())
	if _, err := ca.ReplicaCert("", time.Now()); err == nil {
		t.Error("a replica certificate without an ID was issued")
	}
	for _, c := range []struct {
		name  string
		certs []tls.Certificate
		want  string // "" for a refused handshake
	}{
		{"replica", []tls.Certificate{replica}, "true"},
		{"agent named like the replica", []tls.Certificate{agent}, "false"},
		{"server's own", []tls.Certificate{serverCert}, ""},
		{"none", nil, "false"},
		{"another CA's replica", []tls.Certificate{foreign}, ""},
	} {
		body, err := get(t, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS13, Certificates: c.certs}, srv.URL)
		if c.want == "" {
			if err == nil {
				t.Errorf("%s: answered %q, want a refused handshake", c.name, body)
			}
			continue
		}
		if err != nil || body != c.want {
			t.Errorf("%s: %q, %v; want %q", c.name, body, err, c.want)
		}
	}
	if IsReplica(nil) {
		t.Error("IsReplica(nil)")
	}
}
