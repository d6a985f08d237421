// Package cliconfig is the command line's configuration file (where the
// server is, the token, the CA to trust) and the environment variables
// that override it. `gpucloud login` and `gpucloud up` write it; the
// commands that talk to a server read it.
package cliconfig

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// Environment variables of the connection settings. They override the
// config file; the --server and --token flags override them.
const (
	EnvServer = "GPUCLOUD_SERVER"
	EnvToken  = "GPUCLOUD_TOKEN"
	EnvConfig = "GPUCLOUD_CONFIG"
	// EnvCAFile names a PEM file of the CA to trust for the server's
	// certificate, overriding the config file's.
	EnvCAFile = "GPUCLOUD_CA_FILE"
	// EnvCAFingerprint is the fingerprint (sha256:...) of the cloud's own
	// CA, fetched from the server and trusted by that fingerprint alone,
	// as `gpucloud login --ca-fingerprint` does. The Terraform provider
	// reads it (its ca_fingerprint setting).
	EnvCAFingerprint = "GPUCLOUD_CA_FINGERPRINT"
)

// File is the config file: where the server is, the token to use,
// and the CA its certificate is signed by (PEM, base64, as a kubeconfig's
// certificate-authority-data), so that a cloud with its own CA needs no
// certificate setup.
type File struct {
	Server string `yaml:"server"`
	Token  string `yaml:"token"`
	CA     string `yaml:"certificate-authority-data,omitempty"`
}

// Path returns the config file gpucloud reads and `gpucloud login`
// writes: $GPUCLOUD_CONFIG if set, else $XDG_CONFIG_HOME/gpucloud/config.yaml
// when XDG_CONFIG_HOME is an absolute path, else
// ~/.config/gpucloud/config.yaml. It returns "" when there is no home
// directory to put it in.
func Path() string {
	if p := os.Getenv(EnvConfig); p != "" {
		return p
	}
	if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "gpucloud", "config.yaml")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".config", "gpucloud", "config.yaml")
}

// Write writes the config file at path with the server URL, token
// and CA certificate (PEM; nil when the server's certificate is signed by
// a CA the system trusts, or the server is plain HTTP), readable by its
// owner only (0600), creating its directory (0700) if needed. It replaces
// the file atomically, so a reader never sees half of it.
func Write(path string, server, token string, caPEM []byte) error {
	if path == "" {
		return fmt.Errorf("no place for the config file: set $%s or $HOME", EnvConfig)
	}
	fc := File{Server: server, Token: token}
	if len(caPEM) > 0 {
		fc.CA = base64.StdEncoding.EncodeToString(caPEM)
	}
	b, err := yaml.Marshal(fc)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	// os.CreateTemp creates the file with mode 0600.
	f, err := os.CreateTemp(dir, ".config-*.yaml")
	if err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write config %s: %w", path, err)
	}
	return nil
}

// Read reads the config file at path; a missing file is an empty
// config. A file that others can read draws a warning on stderr, because
// it holds a secret.
func Read(path string, stderr io.Writer) (File, error) {
	var c File
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("read config: %w", err)
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("config file %s: %v", path, err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 && c.Token != "" {
		fmt.Fprintf(stderr, "warning: %s holds a token and is readable by other users; run: chmod 600 %s\n", path, path)
	}
	return c, nil
}

// TrustedCA is the CA (PEM) to trust for server's certificate: the file
// $GPUCLOUD_CA_FILE names, else the config file's when the config file is
// for that server, else none (nil: the system's roots). The CLI and the
// Terraform provider both trust a server this way.
func TrustedCA(server string, stderr io.Writer) ([]byte, error) {
	if p := os.Getenv(EnvCAFile); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", EnvCAFile, err)
		}
		return b, nil
	}
	fc, err := Read(Path(), stderr)
	if err != nil || fc.CA == "" || strings.TrimRight(fc.Server, "/") != strings.TrimRight(server, "/") {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(fc.CA)
	if err != nil {
		return nil, fmt.Errorf("config file %s: certificate-authority-data: %v", Path(), err)
	}
	return b, nil
}
