package pki

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestSealKey(t *testing.T) {
	keyText, err := NewWrapKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := ParseWrapKey(keyText)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := EncodeKey(mustCA(t).Key)
	sealed, err := SealKey(key, pem, "ca")
	if err != nil {
		t.Fatal(err)
	}
	if !IsSealed(sealed) || IsSealed(pem) || bytes.Contains(sealed, []byte("PRIVATE KEY")) {
		t.Fatalf("sealed value %q", sealed)
	}
	again, _ := SealKey(key, pem, "ca")
	if bytes.Equal(again, sealed) {
		t.Error("two seals of one value are equal: the nonce is not random")
	}
	back, err := OpenKey(key, sealed, "ca")
	if err != nil || !bytes.Equal(back, pem) {
		t.Fatalf("open: %v", err)
	}
	other, _ := ParseWrapKey(bytes.Repeat([]byte("ab"), WrapKeySize))
	// One base64 digit of the ciphertext changed (A and B differ in
	// their low bits, which every position carries).
	flipped := bytes.Clone(sealed)
	if i := len(SealedPrefix) + 20; flipped[i] == 'A' {
		flipped[i] = 'B'
	} else {
		flipped[i] = 'A'
	}
	for _, c := range []struct {
		name    string
		key     []byte
		value   []byte
		purpose string
	}{
		{"wrong key", other, sealed, "ca"},
		{"another purpose", key, sealed, "other"},
		{"changed", key, flipped, "ca"},
		{"cut", key, sealed[:len(SealedPrefix)+8], "ca"},
		{"not base64", key, []byte(SealedPrefix + "!!!"), "ca"},
	} {
		if _, err := OpenKey(c.key, c.value, c.purpose); !errors.Is(err, ErrUnseal) {
			t.Errorf("%s: %v, want ErrUnseal", c.name, err)
		}
	}
}

func TestParseWrapKey(t *testing.T) {
	hex64 := strings.Repeat("0f", WrapKeySize)
	for _, c := range []struct {
		in string
		ok bool
	}{
		{hex64, true},
		{" " + hex64 + "\n", true},
		{"Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8=", true},
		{hex64[:62], false},
		{hex64 + "00", false},
		{"", false},
		{"secret", false},
	} {
		k, err := ParseWrapKey([]byte(c.in))
		if (err == nil) != c.ok {
			t.Errorf("ParseWrapKey(%q): %v", c.in, err)
		}
		if err != nil && strings.Contains(err.Error(), c.in) && c.in != "" {
			t.Errorf("the error repeats the input: %v", err)
		}
		if c.ok && len(k) != WrapKeySize {
			t.Errorf("ParseWrapKey(%q) = %d bytes", c.in, len(k))
		}
	}
}
