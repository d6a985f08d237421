package pki

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestSignedTokens(t *testing.T) {
	ca, other := mustCA(t), mustCA(t)
	payload := []byte(`{"host_id":"h-1","exp":1}`)
	tok, err := ca.SignToken("grant v1", payload)
	if err != nil {
		t.Fatal(err)
	}
	got, err := VerifyToken(ca.Cert, "grant v1", tok)
	if err != nil || string(got) != string(payload) {
		t.Fatalf("VerifyToken = %q, %v; want the payload", got, err)
	}
	p, s, _ := strings.Cut(tok, ".")
	forged, err := other.SignToken("grant v1", payload)
	if err != nil {
		t.Fatal(err)
	}
	otherPurpose, err := ca.SignToken("grant v2", payload)
	if err != nil {
		t.Fatal(err)
	}
	_, fs, _ := strings.Cut(forged, ".")
	tampered := base64.RawURLEncoding.EncodeToString([]byte(`{"host_id":"h-2","exp":1}`))
	cases := map[string]string{
		"another CA's signature":       forged,
		"another CA's signature, ours": p + "." + fs,
		"signed for another purpose":   otherPurpose,
		"payload changed":              tampered + "." + s,
		"no signature":                 p,
		"empty":                        "",
		"not base64":                   "!!!." + s,
		"signature not base64":         p + ".***",
		"too long":                     strings.Repeat("a", maxTokenLen+1) + "." + s,
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := VerifyToken(ca.Cert, "grant v1", tok); !errors.Is(err, ErrBadToken) {
				t.Fatalf("VerifyToken = %v; want ErrBadToken", err)
			}
		})
	}
	if _, err := VerifyToken(nil, "grant v1", tok); !errors.Is(err, ErrBadToken) {
		t.Fatalf("no CA: %v", err)
	}
	if _, err := ca.SignToken("", payload); err == nil {
		t.Fatal("a token without a purpose was signed")
	}
}

// TestPinnedLeaf: a client pinned to a self-signed certificate's
// fingerprint talks to its server and refuses another's, whatever the
// names.
func TestPinnedLeaf(t *testing.T) {
	cert, fp, err := SelfSigned("files h-1", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, otherFP, err := SelfSigned("files h-1", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if fp == otherFP {
		t.Fatal("two certificates share a fingerprint")
	}
	listen := func(c tls.Certificate) string {
		ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{c}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); io.WriteString(c, "hello") }()
			}
		}()
		return ln.Addr().String()
	}
	good, bad := listen(cert), listen(other)
	cfg, err := PinnedLeafConfig(fp)
	if err != nil {
		t.Fatal(err)
	}
	dial := func(addr string) (string, error) {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg.Clone())
		if err != nil {
			return "", err
		}
		defer c.Close()
		if c.ConnectionState().Version != tls.VersionTLS13 {
			t.Errorf("TLS version %x", c.ConnectionState().Version)
		}
		b, err := io.ReadAll(c)
		return string(b), err
	}
	if got, err := dial(good); err != nil || got != "hello" {
		t.Fatalf("pinned server: %q, %v", got, err)
	}
	if _, err := dial(bad); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("another certificate: %v; want a refusal", err)
	}
	if _, err := PinnedLeafConfig("md5:00"); err == nil {
		t.Fatal("a malformed fingerprint was taken")
	}
}
