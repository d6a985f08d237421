package servercmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/controlplane"
)

// TestCAKeyFlags: the key comes from --ca-encryption-key-file, else
// $GPUCLOUD_CA_ENCRYPTION_KEY, else (up) a key file made in the data
// directory, 0600; a server given none has none; both is a usage error.
func TestCAKeyFlags(t *testing.T) {
	dir := t.TempDir()
	given := filepath.Join(dir, "given.key")
	if _, err := controlplane.EnsureCAKeyFile(given); err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(given)
	for _, c := range []struct {
		name        string
		args        []string
		env         string
		defaultFile string
		source      string // "" for no key
		bad         bool
	}{
		{name: "server without a key"},
		{name: "file", args: []string{"--ca-encryption-key-file", given}, source: given},
		{name: "environment", env: string(text), source: "$" + controlplane.EnvCAKey},
		{name: "both", args: []string{"--ca-encryption-key-file", given}, env: string(text), bad: true},
		{name: "up's default", defaultFile: filepath.Join(dir, "up.key"), source: filepath.Join(dir, "up.key")},
		{name: "up given a file", args: []string{"--ca-encryption-key-file", given}, defaultFile: filepath.Join(dir, "unused.key"), source: given},
	} {
		t.Setenv(controlplane.EnvCAKey, c.env)
		var f CAKeyFlags
		cmd := &cobra.Command{Use: "server"}
		f.Register(cmd)
		if err := cmd.ParseFlags(c.args); err != nil {
			t.Fatal(err)
		}
		var cfg controlplane.Config
		err := f.Apply(cmd, &cfg, c.defaultFile)
		if c.bad != (err != nil) {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		got := ""
		if cfg.CAKey != nil {
			got = cfg.CAKey.Source
		}
		if got != c.source {
			t.Errorf("%s: key from %q, want %q", c.name, got, c.source)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "up.key")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("up's key file: %v, %v", st, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused.key")); !os.IsNotExist(err) {
		t.Errorf("a key file was made although one was given: %v", err)
	}
}

// TestRotateCAKeyCommand: rotate-ca-key needs the new key, and moves the
// CA key of a server's database to it.
func TestRotateCAKeyCommand(t *testing.T) {
	dir := t.TempDir()
	db := "sqlite://" + filepath.Join(dir, "gpucloud.db")
	oldKey, newKey := filepath.Join(dir, "old.key"), filepath.Join(dir, "new.key")
	for _, f := range []string{oldKey, newKey} {
		controlplane.EnsureCAKeyFile(f)
	}
	w, err := controlplane.CAKeyFrom(oldKey, "")
	if err != nil {
		t.Fatal(err)
	}
	s, err := controlplane.Start(t.Context(), controlplane.Config{DB: db, Listen: "127.0.0.1:0", CAKey: w})
	if err != nil {
		t.Fatal(err)
	}
	s.Close(t.Context())
	run := func(args ...string) (string, error) {
		cmd := New(&bytes.Buffer{})
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"rotate-ca-key", "--db", db}, args...))
		err := cmd.ExecuteContext(t.Context())
		return out.String(), err
	}
	if _, err := run("--old-key-file", oldKey); err == nil || !strings.Contains(err.Error(), "--new-key-file is required") {
		t.Errorf("without --new-key-file: %v", err)
	}
	if _, err := run("--old-key-file", newKey, "--new-key-file", oldKey); err == nil || !strings.Contains(err.Error(), "wrong key?") {
		t.Errorf("with a wrong old key: %v", err)
	}
	if out, err := run("--old-key-file", oldKey, "--new-key-file", newKey); err != nil || !strings.Contains(out, "now encrypted with the key in "+newKey) {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	w, _ = controlplane.CAKeyFrom(newKey, "")
	s, err = controlplane.Start(t.Context(), controlplane.Config{DB: db, Listen: "127.0.0.1:0", CAKey: w})
	if err != nil {
		t.Fatalf("start with the new key: %v", err)
	}
	s.Close(t.Context())
}
