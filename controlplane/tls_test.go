package controlplane

import (
	"context"
	"crypto/tls"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/internal/pki"
)

// TestTLSByDefault: a replica serves TLS 1.3 only, with a certificate of
// the cloud's own CA for loopback; the CA is made once and kept in the
// store, so a restart presents the same one; GET /ca.crt serves it.
func TestTLSByDefault(t *testing.T) {
	db := "sqlite://" + filepath.Join(t.TempDir(), "gpucloud.db")
	s := start(t, db)
	if !strings.HasPrefix(s.URL, "https://127.0.0.1:") {
		t.Fatalf("URL %s", s.URL)
	}
	fp := s.CAFingerprint()
	resp, err := s.HTTPClient().Get(s.URL + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.Version != tls.VersionTLS13 {
		t.Fatalf("TLS state %+v", resp.TLS)
	}
	if got := pki.Fingerprint(resp.TLS.PeerCertificates[len(resp.TLS.PeerCertificates)-1]); got != fp {
		t.Errorf("chain ends in %s, want the CA %s", got, fp)
	}
	// TLS 1.2 is refused; so is a client that does not trust the CA.
	old := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: s.HTTPClient().Transport.(*http.Transport).TLSClientConfig.RootCAs, MaxVersion: tls.VersionTLS12}}}
	if _, err := old.Get(s.URL + "/ca.crt"); err == nil {
		t.Error("a TLS 1.2 client connected")
	}
	if _, err := (&http.Client{Timeout: 5 * time.Second}).Get(s.URL + "/ca.crt"); err == nil {
		t.Error("a client without the CA connected")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s2 := start(t, db)
	defer s2.Close(context.Background())
	if s2.CAFingerprint() != fp {
		t.Errorf("the CA changed across a restart: %s, then %s", fp, s2.CAFingerprint())
	}
}

// TestPlainHTTPOnlyOnLoopback: plain HTTP is a development mode, refused
// anywhere but loopback.
func TestPlainHTTPOnlyOnLoopback(t *testing.T) {
	dir := t.TempDir()
	_, err := Start(context.Background(), Config{DB: "sqlite://" + filepath.Join(dir, "a.db"), Listen: "0.0.0.0:0", Log: quiet, TLS: TLS{Plain: true}})
	if err == nil || !strings.Contains(err.Error(), "only allowed on a loopback address") {
		t.Fatalf("plain HTTP on every interface: %v", err)
	}
	s, err := Start(context.Background(), Config{DB: "sqlite://" + filepath.Join(dir, "b.db"), Listen: "127.0.0.1:0", Log: quiet, TLS: TLS{Plain: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") {
		t.Fatalf("URL %s", s.URL)
	}
	resp, err := http.Get(s.URL + "/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}
