// Package pki is gpucloud's small certificate authority: the CA a cloud
// makes for itself on first start, the server certificates it issues to
// each replica, the client certificates it signs for agents at join, and
// the CA fingerprint a join token carries so that an agent can trust the
// server on first contact (as kubeadm's discovery hash does).
//
// Keys are ECDSA P-256; certificates are X.509 v3 with the usual key
// usages. Nothing here does I/O but the PEM helpers' callers.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"time"
)

// Lifetimes of what the CA issues.
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	ServerLifetime = 397 * 24 * time.Hour // the browsers' cap
	ClientLifetime = 365 * 24 * time.Hour
	// backdate covers clocks a little behind the issuer's.
	backdate = 5 * time.Minute
)

// FingerprintPrefix starts a CA fingerprint: "sha256:" and the hex SHA-256
// of the CA certificate's DER bytes.
const FingerprintPrefix = "sha256:"

// CA is a certificate authority: its certificate and private key.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA makes a self-signed CA named name, valid from now.
func NewCA(name string, now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"gpucloud"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(CALifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// serial is a random 128-bit serial number.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n.Add(n, big.NewInt(1))
}

// Fingerprint is the CA certificate's fingerprint, "sha256:<hex>".
func (ca *CA) Fingerprint() string { return Fingerprint(ca.Cert) }

// Fingerprint is a certificate's fingerprint, "sha256:<hex>".
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return FingerprintPrefix + hex.EncodeToString(sum[:])
}

// ParseFingerprint checks a fingerprint's form and returns it lower-cased.
func ParseFingerprint(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	h, ok := strings.CutPrefix(s, FingerprintPrefix)
	if !ok {
		return "", fmt.Errorf("CA fingerprint %q: want %s followed by 64 hex digits", s, FingerprintPrefix)
	}
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("CA fingerprint %q: want %s followed by 64 hex digits", s, FingerprintPrefix)
	}
	return s, nil
}

// Pool is a cert pool holding just the CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// ServerCert issues a server certificate for hosts (DNS names or IP
// addresses), with the CA in its chain.
func (ca *CA) ServerCert(hosts []string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "gpucloud server", Organization: []string{"gpucloud"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     minTime(now.Add(ServerLifetime), ca.Cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// NewClientKey makes a client key and a certificate request naming
// commonName, PEM-encoded, for SignClient.
func NewClientKey(commonName string) (key *ecdsa.PrivateKey, csrPEM []byte, err error) {
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: commonName}}, key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// ErrBadCSR is returned for a certificate request SignClient refuses.
var ErrBadCSR = errors.New("bad certificate request")

// SignClient checks a PEM certificate request's signature and signs a
// client certificate for it whose subject is commonName, whatever the
// request asked for: the caller decides who the certificate speaks for.
func (ca *CA) SignClient(csrPEM []byte, commonName string, now time.Time) ([]byte, error) {
	b, _ := pem.Decode(csrPEM)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: not a PEM CERTIFICATE REQUEST", ErrBadCSR)
	}
	csr, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCSR, err)
	}
	switch k := csr.PublicKey.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return nil, fmt.Errorf("%w: ECDSA keys must be P-256 or P-384", ErrBadCSR)
		}
	default:
		return nil, fmt.Errorf("%w: the key must be ECDSA", ErrBadCSR)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"gpucloud agents"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     minTime(now.Add(ClientLifetime), ca.Cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, csr.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// EncodeCert and EncodeKey PEM-encode a certificate and a private key.
func EncodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// EncodeKey PEM-encodes a private key (PKCS #8).
func EncodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseCert reads the first PEM certificate of b.
func ParseCert(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM CERTIFICATE found")
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// ParseKey reads a PEM private key (PKCS #8, or EC).
func ParseKey(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("no PEM private key found")
		}
		switch blk.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, err
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, errors.New("the private key cannot sign")
			}
			return s, nil
		case "EC PRIVATE KEY":
			return x509.ParseECPrivateKey(blk.Bytes)
		}
	}
}

// LoadCA reads a CA from its PEM certificate and key, checking that they
// match and that the certificate is a CA's.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	c, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	k, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !c.IsCA {
		return nil, errors.New("CA certificate: not a CA (basic constraints)")
	}
	pub, ok := k.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(c.PublicKey) {
		return nil, errors.New("the CA key does not match the CA certificate")
	}
	return &CA{Cert: c, Key: k}, nil
}

// PinnedConfig is a TLS 1.3 client configuration that trusts exactly one
// CA, known by its fingerprint only: the server must present a chain whose
// last certificate has that fingerprint and which verifies up to it for
// serverName (or, when serverName is empty, for whatever name the chain's
// leaf has: the fingerprint is the trust). It is how an agent talks to the
// server before it has the CA itself.
func PinnedConfig(fingerprint string) (*tls.Config, error) {
	fp, err := ParseFingerprint(fingerprint)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyPeerCertificate below
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) < 2 {
				return errors.New("the server sent no CA certificate in its chain to check the pinned fingerprint against")
			}
			certs := make([]*x509.Certificate, len(raw))
			for i, r := range raw {
				c, err := x509.ParseCertificate(r)
				if err != nil {
					return err
				}
				certs[i] = c
			}
			root := certs[len(certs)-1]
			if Fingerprint(root) != fp {
				return fmt.Errorf("the server's CA is %s, not the %s the join token names: refusing to talk to it", Fingerprint(root), fp)
			}
			pool := x509.NewCertPool()
			pool.AddCert(root)
			inter := x509.NewCertPool()
			for _, c := range certs[1 : len(certs)-1] {
				inter.AddCert(c)
			}
			_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			return err
		},
	}, nil
}

// ReplicaOrganization is the organization of the client certificates
// server replicas present to each other (ReplicaCert): agents' are
// "gpucloud agents", the servers' own "gpucloud", so that no agent
// certificate passes for a replica's.
const ReplicaOrganization = "gpucloud replicas"

// ReplicaLifetime is how long a replica's certificate lives; a replica
// issues itself a new one at every start.
const ReplicaLifetime = 30 * 24 * time.Hour

// ReplicaCert issues the client certificate with which replica id
// reaches its peers (docs/CONTROL_PLANE.md, "Several replicas"): a fresh
// key, the common name "replica " + id, ReplicaOrganization, client
// authentication only, the CA in its chain.
func (ca *CA) ReplicaCert(id string, now time.Time) (tls.Certificate, error) {
	if id == "" {
		return tls.Certificate{}, errors.New("replica certificate: the replica needs an ID")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "replica " + id, Organization: []string{ReplicaOrganization}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     minTime(now.Add(ReplicaLifetime), ca.Cert.NotAfter),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// IsReplica reports whether a verified TLS connection's client presented
// a replica's certificate: its verified chain's leaf has exactly
// ReplicaOrganization as its organization and client authentication. The
// caller's TLS configuration has verified the chain against the cloud's CA
// (state.VerifiedChains is empty otherwise).
func IsReplica(state *tls.ConnectionState) bool {
	if state == nil {
		return false
	}
	for _, chain := range state.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		leaf := chain[0]
		if len(leaf.Subject.Organization) == 1 && leaf.Subject.Organization[0] == ReplicaOrganization &&
			slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			return true
		}
	}
	return false
}
