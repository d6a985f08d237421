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
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Signed tokens: a payload the cloud's CA vouches for, which a party that
// trusts the CA (an agent keeps its certificate) checks offline. A token
// is base64url(payload) "." base64url(ASN.1 ECDSA signature). The
// signature covers the token's purpose, a zero byte and the payload, so
// that what the CA signs for one purpose is never taken for another, and
// never for a certificate (whose signed bytes are DER, not this).

// ErrBadToken is returned for a token that is malformed, or whose
// signature is not the CA's for the purpose.
var ErrBadToken = errors.New("bad signed token")

// maxTokenLen bounds a token that VerifyToken looks at.
const maxTokenLen = 16 << 10

func tokenDigest(purpose string, payload []byte) []byte {
	h := sha256.New()
	h.Write([]byte(purpose))
	h.Write([]byte{0})
	h.Write(payload)
	return h.Sum(nil)
}

// SignToken signs payload for purpose with the CA's key.
func (ca *CA) SignToken(purpose string, payload []byte) (string, error) {
	if purpose == "" {
		return "", errors.New("signed token: a purpose is required")
	}
	sig, err := ca.Key.Sign(rand.Reader, tokenDigest(purpose, payload), crypto.SHA256)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(sig), nil
}

// VerifyToken checks that token was signed for purpose by the key of the
// CA certificate caCert, and returns its payload. It says nothing of what
// the payload claims (expiry, audience): the caller checks those.
func VerifyToken(caCert *x509.Certificate, purpose, token string) ([]byte, error) {
	if caCert == nil {
		return nil, fmt.Errorf("%w: no CA to check it against", ErrBadToken)
	}
	if len(token) > maxTokenLen {
		return nil, fmt.Errorf("%w: %d bytes long", ErrBadToken, len(token))
	}
	p, s, ok := strings.Cut(token, ".")
	if !ok {
		return nil, fmt.Errorf("%w: not payload.signature", ErrBadToken)
	}
	enc := base64.RawURLEncoding
	payload, err := enc.DecodeString(p)
	if err != nil {
		return nil, fmt.Errorf("%w: payload: %v", ErrBadToken, err)
	}
	sig, err := enc.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: signature: %v", ErrBadToken, err)
	}
	pub, ok := caCert.PublicKey.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: the CA's key is not ECDSA", ErrBadToken)
	}
	if !ecdsa.VerifyASN1(pub, tokenDigest(purpose, payload), sig) {
		return nil, fmt.Errorf("%w: the signature is not the cloud CA's", ErrBadToken)
	}
	return payload, nil
}

// SelfSigned makes a TLS 1.3 server certificate signed by its own fresh
// key, named name, valid for lifetime from now, and its fingerprint
// (Fingerprint of the leaf). Its clients trust it by that fingerprint,
// which they learn from a party they already trust (an agent's files
// listener: the server tells a client the fingerprint its agent
// reported over mutual TLS), not by a chain.
func SelfSigned(name string, now time.Time, lifetime time.Duration) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"gpucloud agents"}},
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, Fingerprint(leaf), nil
}

// PinnedLeafConfig is a TLS 1.3 client configuration that trusts exactly
// the server certificate whose fingerprint is fingerprint (SelfSigned),
// whatever its name, chain or dates: the pin is the trust.
func PinnedLeafConfig(fingerprint string) (*tls.Config, error) {
	fp, err := ParseFingerprint(fingerprint)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // replaced by VerifyConnection's pin below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			if got := Fingerprint(cs.PeerCertificates[0]); got != fp {
				return fmt.Errorf("the server's certificate is %s, not the %s the cloud named for it: refusing to talk to it", got, fp)
			}
			return nil
		},
	}, nil
}
