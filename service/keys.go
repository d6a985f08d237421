package service

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// MaxKeysPerTenant bounds a tenant's SSH keys: every one is offered to
// every session's authentication, so the list must stay short.
const MaxKeysPerTenant = 50

// MinRSABits is the smallest RSA key imported (NIST SP 800-131A and
// OpenSSH's own minimum since 9.x refuse shorter ones).
const MinRSABits = 2048

// maxPublicKeyLen bounds an imported line: a 16384-bit RSA key is about
// 2.8 KB in base64, so 8 KiB leaves room for any real key and its comment.
const maxPublicKeyLen = 8 << 10

// ParsedKey is an OpenSSH public key checked for import.
type ParsedKey struct {
	Key ssh.PublicKey
	// Line is the key as one authorized_keys line, without options:
	// type, base64 and the comment, if any.
	Line        string
	Comment     string
	Type        string
	Bits        int
	Fingerprint string
}

// ParseKey parses and checks one public key as given to POST /v1/keys:
// one authorized_keys line (blank and # lines around it are ignored), not
// a private key, not a certificate, without options, not DSA and not RSA
// under MinRSABits. Its errors are Invalid naming field and the problem,
// and never repeat the input (a pasted private key must not land in an
// error message or a log).
func ParseKey(field, text string) (*ParsedKey, error) {
	if len(text) > maxPublicKeyLen {
		return nil, Field(field, "is %d bytes long; a public key is at most %d", len(text), maxPublicKeyLen)
	}
	if strings.TrimSpace(text) == "" {
		return nil, Field(field, "is required: one OpenSSH public key such as \"ssh-ed25519 AAAA... me@laptop\"")
	}
	if strings.Contains(text, "PRIVATE KEY") {
		return nil, Field(field, "is a private key; import its public half instead (the .pub file, or the output of ssh-keygen -y -f KEYFILE), and keep the private key to yourself")
	}
	if strings.Contains(text, "BEGIN SSH2 PUBLIC KEY") {
		return nil, Field(field, "is an RFC 4716 (SSH2) public key; convert it with ssh-keygen -i -f KEYFILE first")
	}
	pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	if err != nil && slices.Contains(strings.Fields(text), ssh.InsecureKeyAlgoDSA) {
		// x/crypto/ssh no longer parses DSA keys at all.
		return nil, Field(field, "is a DSA key, which OpenSSH no longer accepts; use ssh-keygen -t ed25519")
	}
	if err != nil {
		return nil, Field(field, "is not an OpenSSH public key; want one line such as \"ssh-ed25519 AAAA... me@laptop\" (the .pub file)")
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey(rest); err == nil {
		return nil, Field(field, "holds more than one key; import one at a time")
	}
	if len(options) > 0 {
		return nil, Field(field, "has authorized_keys options (%d); import the bare key, gpucloud decides what a session may do", len(options))
	}
	if _, ok := pub.(*ssh.Certificate); ok {
		return nil, Field(field, "is an SSH certificate (%s); import the plain public key", pub.Type())
	}
	if err := CheckText(field+" comment", comment, 1024); err != nil {
		return nil, err
	}
	k := &ParsedKey{Key: pub, Comment: comment, Type: pub.Type(), Fingerprint: ssh.FingerprintSHA256(pub)}
	k.Line = string(bytes.TrimSpace(ssh.MarshalAuthorizedKey(pub)))
	if comment != "" {
		k.Line += " " + comment
	}
	switch k.Type {
	case ssh.KeyAlgoRSA:
		k.Bits = cryptoBits(pub)
		if k.Bits < MinRSABits {
			return nil, Field(field, "is a %d-bit RSA key; the minimum is %d bits (or use ssh-keygen -t ed25519)", k.Bits, MinRSABits)
		}
	case ssh.KeyAlgoECDSA256, ssh.KeyAlgoSKECDSA256, ssh.KeyAlgoED25519, ssh.KeyAlgoSKED25519:
		k.Bits = 256
	case ssh.KeyAlgoECDSA384:
		k.Bits = 384
	case ssh.KeyAlgoECDSA521:
		k.Bits = 521
	default:
		return nil, Field(field, "has key type %s, which gpucloud does not take; use ssh-ed25519, ecdsa or rsa", Quote(k.Type))
	}
	return k, nil
}

// cryptoBits is an RSA or ECDSA key's size in bits (0 for others).
func cryptoBits(pub ssh.PublicKey) int {
	cp, ok := pub.(ssh.CryptoPublicKey)
	if !ok {
		return 0
	}
	switch k := cp.CryptoPublicKey().(type) {
	case *rsa.PublicKey:
		return k.N.BitLen()
	case *ecdsa.PublicKey:
		return k.Curve.Params().BitSize
	}
	return 0
}

// DefaultKeyName is the name a key imported without one gets: its comment
// made a valid name (me@laptop → me-laptop), or "key-" and the first hex
// digits of its fingerprint's hash when the comment leaves nothing.
func DefaultKeyName(k *ParsedKey) string {
	var b strings.Builder
	for _, c := range k.Comment {
		switch {
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			b.WriteRune(c)
		case b.Len() > 0 && (c == '-' || c == '_' || c == '.'):
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
		if b.Len() >= maxNameLen {
			break
		}
	}
	name := strings.TrimRight(b.String(), "-_.")
	if len(name) > maxNameLen {
		name = name[:maxNameLen]
	}
	if name == "" {
		sum := sha256.Sum256(k.Key.Marshal())
		name = "key-" + hex.EncodeToString(sum[:4])
	}
	return name
}

// Import stores one of a tenant's SSH public keys for actor a; idempotent
// by key as PlacementGroups.Create is. The tenant's keys open SSH
// sessions to its instances.
func (s *Keys) Import(ctx context.Context, a Actor, spec api.ImportKeyRequest, key string) (out *cloud.Key, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	pk, err := ParseKey("public_key", spec.PublicKey)
	if err != nil {
		return nil, false, err
	}
	if spec.Name == "" {
		spec.Name = DefaultKeyName(pk)
	}
	if err := CheckName("name", spec.Name, true); err != nil {
		return nil, false, err
	}
	same := func(k *cloud.Key) error {
		var d KeyDiffs
		d.String("name", k.Name, spec.Name)
		d.String("public_key", k.Fingerprint, pk.Fingerprint)
		return d.Err("key", k.ID)
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		ks, err := tx.ListKeys(ctx, tenant)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Key, error) {
			for _, old := range ks {
				if old.IdempotencyKey == k {
					return old, nil
				}
			}
			return nil, cloud.Errorf(cloud.NotFound, "no key with idempotency key %s", Quote(k))
		}
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		if len(ks) >= MaxKeysPerTenant {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: "the tenant has " + strconv.Itoa(len(ks)) + " SSH keys, the most it may have; delete one first",
				Details: map[string]any{"limit": MaxKeysPerTenant}}
		}
		k := &cloud.Key{ID: NewID(KeyPrefix), TenantID: tenant, Name: spec.Name, PublicKey: pk.Line, Type: pk.Type,
			Bits: pk.Bits, Fingerprint: pk.Fingerprint, CreatedAt: s.now(), IdempotencyKey: key}
		if err := tx.CreateKey(ctx, k); err != nil {
			return asKeyRace(err, key)
		}
		out, created = k, true
		return appendKeyEvent(ctx, tx, a, EventKeyImported, k, s.now())
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Key, error) {
		return tx.GetKey(ctx, id)
	}, same)
	return out, created && err == nil, err
}

// Get reads a key actor a may see.
func (s *Keys) Get(ctx context.Context, a Actor, id string) (*cloud.Key, error) {
	var k *cloud.Key
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		k, err = Visible(ctx, a, "key", id, tx.GetKey)
		return err
	})
	return k, err
}

// List answers the keys actor a may see: a member's own tenant's, an
// admin's every tenant's or tenant's.
func (s *Keys) List(ctx context.Context, a Actor, tenant string) ([]*cloud.Key, error) {
	var out []*cloud.Key
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		out, err = tx.ListKeys(ctx, t)
		return err
	})
	if out == nil && err == nil {
		out = []*cloud.Key{}
	}
	return out, err
}

// Delete deletes a key; the sessions it opened go on, new ones can no
// longer use it.
func (s *Keys) Delete(ctx context.Context, a Actor, id string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		k, err := Visible(ctx, a, "key", id, tx.GetKey)
		if err != nil {
			return err
		}
		if err := tx.DeleteKey(ctx, id); err != nil {
			return err
		}
		return appendKeyEvent(ctx, tx, a, EventKeyDeleted, k, s.now())
	})
}

// The events of a tenant's SSH keys, in the event trail: who imported or
// deleted which key (its ID, name and fingerprint), since a key opens SSH
// sessions to every instance of its tenant.
const (
	EventKeyImported cloud.EventKind = "key.imported"
	EventKeyDeleted  cloud.EventKind = "key.deleted"
)

// appendKeyEvent records kind for key k, done by actor a at now.
func appendKeyEvent(ctx context.Context, tx cloud.Tx, a Actor, kind cloud.EventKind, k *cloud.Key, now time.Time) error {
	details := map[string]any{"key_id": k.ID, "name": k.Name, "fingerprint": k.Fingerprint}
	if a.Admin() && a.TenantID != k.TenantID {
		details["admin"] = true
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: kind, TenantID: k.TenantID, Actor: a.ID,
		Reason: string(kind) + " " + k.Name + " (" + k.Fingerprint + ")", Details: mustJSON(details)})
}

// Authorized answers the authorized_keys lines of tenant, for the server
// to hand to an agent with an SSH session: the keys as they are at the
// session's start.
func (s *Keys) Authorized(ctx context.Context, tenant string) ([]string, error) {
	if tenant == "" {
		// ListKeys would answer every tenant's keys.
		return nil, cloud.Errorf(cloud.Invalid, "authorized keys of no tenant")
	}
	var out []string
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ks, err := tx.ListKeys(ctx, tenant)
		if err != nil {
			return err
		}
		out = make([]string, 0, len(ks))
		for _, k := range ks {
			out = append(out, k.PublicKey)
		}
		return nil
	})
	return out, err
}
