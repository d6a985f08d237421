package pki

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// SealedPrefix starts every sealed value (SealKey), so that a reader tells
// a sealed value from a plaintext PEM one and a later format can take
// another prefix. After it: base64 (standard, padded) of the 12-byte
// nonce followed by the AES-256-GCM ciphertext and tag.
const SealedPrefix = "gpucloud-sealed-v1:"

// WrapKeySize is the size of a key that seals values: AES-256.
const WrapKeySize = 32

// ErrUnseal is a sealed value that does not open with the key given: the
// wrong key, another purpose's value, or a value that was changed.
var ErrUnseal = errors.New("does not decrypt: wrong key, or the value was changed")

// ParseWrapKey reads a sealing key as an operator writes it: 64 hex digits
// (openssl rand -hex 32) or the base64 of 32 bytes, surrounding white space
// ignored. Errors say the expected form, never the input.
func ParseWrapKey(text []byte) ([]byte, error) {
	s := strings.TrimSpace(string(text))
	if k, err := hex.DecodeString(s); err == nil && len(k) == WrapKeySize {
		return k, nil
	}
	if k, err := base64.StdEncoding.DecodeString(s); err == nil && len(k) == WrapKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("want a %d-byte key as %d hex digits (openssl rand -hex %d) or as base64", WrapKeySize, 2*WrapKeySize, WrapKeySize)
}

// NewWrapKey makes a random sealing key and answers it as ParseWrapKey
// reads it (hex, with a newline).
func NewWrapKey() ([]byte, error) {
	k := make([]byte, WrapKeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return []byte(hex.EncodeToString(k) + "\n"), nil
}

// IsSealed says whether a stored value is sealed (by SealKey) rather than
// plaintext.
func IsSealed(v []byte) bool { return strings.HasPrefix(string(v), SealedPrefix) }

func wrapAEAD(key []byte) (cipher.AEAD, error) {
	if len(key) != WrapKeySize {
		return nil, fmt.Errorf("a sealing key has %d bytes, not %d", WrapKeySize, len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// SealKey encrypts plain (a private key's PEM) with key, AES-256-GCM with
// a random nonce, bound to purpose (the associated data: a value sealed
// for one purpose does not open as another's).
func SealKey(key, plain []byte, purpose string) ([]byte, error) {
	a, err := wrapAEAD(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := a.Seal(nonce, nonce, plain, []byte(purpose))
	return []byte(SealedPrefix + base64.StdEncoding.EncodeToString(out)), nil
}

// OpenKey decrypts a value SealKey made with the same key and purpose;
// ErrUnseal when it does not open.
func OpenKey(key, sealed []byte, purpose string) ([]byte, error) {
	a, err := wrapAEAD(key)
	if err != nil {
		return nil, err
	}
	if !IsSealed(sealed) {
		return nil, errors.New("not a sealed value")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(string(sealed), SealedPrefix))
	if err != nil || len(raw) < a.NonceSize()+a.Overhead() {
		return nil, ErrUnseal
	}
	plain, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(purpose))
	if err != nil {
		return nil, ErrUnseal
	}
	return plain, nil
}
