package controlplane

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gpucloud/gpucloud/internal/pki"
)

// TLS configures how a replica serves: TLS 1.3 by default, with a server
// certificate the cloud's own CA issues at every start, or the operator's.
type TLS struct {
	// CertFile and KeyFile are the operator's server certificate (PEM,
	// the chain's intermediates after the leaf) and key; when empty, the
	// cloud's CA issues one for the listener's addresses, loopback,
	// localhost, the machine's host name and Hosts.
	CertFile, KeyFile string
	// Hosts are more names or addresses for the issued certificate (the
	// name clients and agents reach the server by).
	Hosts []string
	// Plain serves plain HTTP instead: a development mode, refused
	// unless the listener is on a loopback address.
	Plain bool
}

// serverTLS is the TLS 1.3 configuration of a replica listening on addr:
// its certificate (issued by ca, or the operator's), and client
// certificates of ca verified when given (agents present theirs).
func serverTLS(cfg TLS, ca *pki.CA, addr net.Addr, now time.Time) (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		if cfg.CertFile == "" || cfg.KeyFile == "" {
			return nil, errors.New("TLS: give both the certificate and its key, or neither")
		}
		if cert, err = tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("TLS: %w", err)
		}
	} else {
		if cert, err = ca.ServerCert(serverNames(addr, cfg.Hosts), now); err != nil {
			return nil, fmt.Errorf("TLS: issue the server certificate: %w", err)
		}
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.Pool(),
		NextProtos:   []string{"h2", "http/1.1"},
	}, nil
}

// serverNames are the names a generated server certificate covers: the
// listener's address (every interface's when it listens on all), loopback,
// localhost, the host name, and the extra ones.
func serverNames(addr net.Addr, extra []string) []string {
	names := []string{"127.0.0.1", "::1", "localhost"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	if ta, ok := addr.(*net.TCPAddr); ok {
		if ta.IP.IsUnspecified() {
			if addrs, err := net.InterfaceAddrs(); err == nil {
				for _, a := range addrs {
					if n, ok := a.(*net.IPNet); ok {
						names = append(names, n.IP.String())
					}
				}
			}
		} else {
			names = append(names, ta.IP.String())
		}
	}
	names = append(names, extra...)
	seen := map[string]bool{}
	out := names[:0]
	for _, n := range names {
		if n != "" && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// checkPlain refuses plain HTTP on anything but a loopback address,
// before anything listens.
func checkPlain(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err == nil {
		if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
			return nil
		}
	}
	return fmt.Errorf("plain HTTP is only allowed on a loopback address (127.0.0.1, ::1), not on %q: serve TLS (the default), or listen on loopback", listen)
}

// CAPEM is the cloud's CA certificate, PEM: what clients and agents trust.
func (s *Replica) CAPEM() []byte { return pki.EncodeCert(s.ca.Cert) }

// CAFingerprint is the CA's fingerprint ("sha256:..."), which join tokens
// carry so that a new host can trust the server on first contact.
func (s *Replica) CAFingerprint() string { return s.ca.Fingerprint() }

// HTTPClient is an HTTP client that trusts the cloud's CA (for tests and
// in-process callers), with a timeout.
func (s *Replica) HTTPClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: s.ca.Pool()},
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 64,
	}}
}
