package controlplane

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/service"
)

// startWith starts a replica on db with the CA key in keyFile ("" for
// none), its log in buf.
func startWith(db, keyFile string, buf *bytes.Buffer) (*Replica, error) {
	w, err := CAKeyFrom(keyFile, "")
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(buf, nil))
	return Start(context.Background(), Config{DB: db, Listen: "127.0.0.1:0", Log: log, CAKey: w})
}

// TestCAKeyEncryptedAtRest: a server without a key warns once that the
// CA key is unencrypted; the next start with a key encrypts it (nothing of
// it stays readable in a fresh database file) and keeps the CA; a start
// with the wrong key fails naming the key's file; a rotated key starts.
func TestCAKeyEncryptedAtRest(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "gpucloud.db")
	var log bytes.Buffer
	s, err := startWith(db, "", &log)
	if err != nil {
		t.Fatal(err)
	}
	fp := s.CAFingerprint()
	s.Close(context.Background())
	if n := strings.Count(log.String(), "stored unencrypted"); n != 1 {
		t.Errorf("%d warnings about the unencrypted CA key, want 1:\n%s", n, log.String())
	}
	keyFile, wrongFile, newFile := filepath.Join(dir, "ca.key"), filepath.Join(dir, "wrong.key"), filepath.Join(dir, "new.key")
	for _, f := range []string{keyFile, wrongFile, newFile} {
		if made, err := EnsureCAKeyFile(f); err != nil || !made {
			t.Fatalf("EnsureCAKeyFile(%s): %v, %v", f, made, err)
		}
	}
	log.Reset()
	if s, err = startWith(db, keyFile, &log); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	if s.CAFingerprint() != fp || !strings.Contains(log.String(), "encrypted the CA's private key") || strings.Contains(log.String(), "unencrypted") {
		t.Errorf("upgrade: CA %s (want %s), log:\n%s", s.CAFingerprint(), fp, log.String())
	}
	_, err = startWith(db, wrongFile, &log)
	var ke *service.CAKeyError
	if !errors.As(err, &ke) || !strings.Contains(err.Error(), "does not decrypt with the key from "+wrongFile+": wrong key?") {
		t.Fatalf("start with a wrong key: %v", err)
	}
	if err := RotateCAKey(context.Background(), db, keyFile, newFile); err != nil {
		t.Fatal(err)
	}
	if _, err := startWith(db, keyFile, &log); !errors.As(err, &ke) {
		t.Errorf("start with the key rotated away: %v", err)
	}
	if s, err = startWith(db, newFile, &log); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	if s.CAFingerprint() != fp {
		t.Errorf("after rotation the CA is %s, want %s", s.CAFingerprint(), fp)
	}

	// A database that never held the key in plaintext shows none of it.
	fresh := filepath.Join(dir, "fresh.db")
	if s, err = startWith("sqlite://"+fresh, keyFile, &log); err != nil {
		t.Fatal(err)
	}
	s.Close(context.Background())
	for _, f := range []string{fresh, fresh + "-wal"} {
		raw, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("PRIVATE KEY")) {
			t.Errorf("%s holds a PEM private key", f)
		}
	}
}

// TestCAKeyFrom: a key from a file or the environment, never both; bad
// keys are errors that do not repeat them; a made key file is 0600 and
// kept on the next call.
func TestCAKeyFrom(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if made, err := EnsureCAKeyFile(good); err != nil || !made {
		t.Fatal(made, err)
	}
	if st, err := os.Stat(good); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", st.Mode(), err)
	}
	before, _ := os.ReadFile(good)
	if made, err := EnsureCAKeyFile(good); err != nil || made {
		t.Fatalf("second EnsureCAKeyFile: %v, %v", made, err)
	}
	if after, _ := os.ReadFile(good); !bytes.Equal(before, after) {
		t.Fatal("EnsureCAKeyFile replaced an existing key")
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("hunter2"), 0o600)
	hex := strings.TrimSpace(string(before))
	for _, c := range []struct {
		name, file, env string
		ok              bool
		source          string
	}{
		{"none", "", "", true, ""},
		{"file", good, "", true, good},
		{"environment", "", hex, true, "$" + EnvCAKey},
		{"both", good, hex, false, ""},
		{"bad file", bad, "", false, ""},
		{"missing file", filepath.Join(dir, "missing"), "", false, ""},
		{"bad environment", "", "hunter2", false, ""},
	} {
		w, err := CAKeyFrom(c.file, c.env)
		if (err == nil) != c.ok {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") || err != nil && strings.Contains(err.Error(), hex) {
			t.Errorf("%s: the error shows the key: %v", c.name, err)
		}
		if c.ok && (w == nil) != (c.source == "") || w != nil && w.Source != c.source {
			t.Errorf("%s: %+v", c.name, w)
		}
	}
}
