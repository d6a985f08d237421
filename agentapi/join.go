package agentapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// SplitJoinToken splits a join string "SECRET@sha256:HEX" into the join
// token's secret and the fingerprint of the cloud's CA that it carries
// (empty when it carries none), so that a new host can trust the server on
// first contact, as kubeadm's discovery hash does.
func SplitJoinToken(s string) (secret, fingerprint string, err error) {
	s = strings.TrimSpace(s)
	i := strings.LastIndex(s, "@")
	if i < 0 {
		return s, "", nil
	}
	fp, err := pki.ParseFingerprint(s[i+1:])
	if err != nil {
		return "", "", fmt.Errorf("join token: %w", err)
	}
	return s[:i], fp, nil
}

// JoinString is the join token as an admin hands it to a new host: the
// secret, and the CA's fingerprint when known.
func JoinString(secret, fingerprint string) string {
	if fingerprint == "" {
		return secret
	}
	return secret + "@" + fingerprint
}

// FetchCA fetches the cloud's CA certificate from server (GET /ca.crt)
// over a connection that trusts only a CA with the given fingerprint, and
// returns its PEM once it checked that the certificate is that CA.
func FetchCA(ctx context.Context, server, fingerprint string) ([]byte, error) {
	cfg, err := pki.PinnedConfig(fingerprint)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(server, "/")+"/ca.crt", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch the cloud's CA: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch the cloud's CA: %s answers %s", req.URL, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, err
	}
	c, err := pki.ParseCert(b)
	if err != nil {
		return nil, fmt.Errorf("the cloud's CA: %w", err)
	}
	if pki.Fingerprint(c) != fingerprint {
		return nil, fmt.Errorf("the CA the server sent is %s, not %s", pki.Fingerprint(c), fingerprint)
	}
	return b, nil
}

// TLSClient is an HTTP client that trusts exactly the CA in caPEM (TLS
// 1.3), or the system's roots when caPEM is empty. It presents the client
// certificates given: an agent's, from its join, for mutual TLS.
func TLSClient(caPEM []byte, certs ...tls.Certificate) (*http.Client, error) {
	// The session cache lets a reconnection resume the TLS session
	// (TLS 1.3 tickets, the client certificate's verified chain kept in
	// the ticket) instead of verifying certificates and signing again: a
	// fleet that reconnects at once after a server's restart costs the
	// server a fraction of the handshakes' CPU.
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: certs, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, errors.New("no PEM certificate in the CA data")
		}
		cfg.RootCAs = pool
	}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, MaxIdleConnsPerHost: 16, ForceAttemptHTTP2: true}}, nil
}

// NewClientKey makes an agent's TLS client key (ECDSA P-256) and the
// certificate request its join sends (JoinRequest.CSR), both PEM. The
// key never leaves the host.
func NewClientKey() (keyPEM, csrPEM []byte, err error) {
	key, csrPEM, err := pki.NewClientKey("gpucloud agent")
	if err != nil {
		return nil, nil, err
	}
	if keyPEM, err = pki.EncodeKey(key); err != nil {
		return nil, nil, err
	}
	return keyPEM, csrPEM, nil
}

// ClientCertificate pairs the certificate a join answered with the key
// its CSR was made from, checking that they match and that the
// certificate is a client certificate for host.
func ClientCertificate(certPEM, keyPEM []byte, host string) (tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the agent's client certificate: %w", err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return tls.Certificate{}, fmt.Errorf("the agent's client certificate: %w", err)
		}
	}
	if host != "" && c.Leaf.Subject.CommonName != host {
		return tls.Certificate{}, fmt.Errorf("the agent's client certificate is for host %q, not %q", c.Leaf.Subject.CommonName, host)
	}
	if !slices.Contains(c.Leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return tls.Certificate{}, errors.New("the agent's client certificate is not for client authentication")
	}
	return c, nil
}

// Reasons (details "reason") of joins the server refuses with a conflict.
const (
	// ReasonHostExists: the host ID has joined, and the join presented
	// neither the host's current credential nor came after an admin
	// removed the host.
	ReasonHostExists = "host_exists"
	// ReasonJoinTokenUsedUp: the join token has made all its joins.
	ReasonJoinTokenUsedUp = "join_token_used_up"
)

// HostExists reports whether err is a join refused because its host has
// joined already (ReasonHostExists), and names the host.
func HostExists(err error) (host string, ok bool) {
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != cloud.Conflict || ce.Details["reason"] != ReasonHostExists {
		return "", false
	}
	host, ok = ce.Details["host"].(string)
	return host, ok && host != ""
}
