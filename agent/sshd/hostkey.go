package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/ssh"
)

// HostKey loads the ed25519 host key at path, or makes one there (0600,
// its directory 0700) when there is none: one key per instance, kept
// across sessions and agent restarts, so that ssh's known_hosts entry for
// the instance stays valid.
func HostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		s, err := ssh.ParsePrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("sshd: host key %s: %w", path, err)
		}
		return s, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "gpucloud instance host key")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	// Written aside and renamed, so that two sessions starting together
	// never read half a key; the first rename wins and both read it back.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".hostkey-*")
	if err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(pem.EncodeToMemory(block)); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("sshd: host key: %w", err)
	}
	return HostKey(path)
}
