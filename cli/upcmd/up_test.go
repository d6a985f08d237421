package upcmd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestProbeAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7878": "127.0.0.1:7878", ":7878": "127.0.0.1:7878", "0.0.0.0:7878": "127.0.0.1:7878",
		"[::]:7878": "127.0.0.1:7878", "10.0.0.5:80": "10.0.0.5:80", "localhost:7878": "localhost:7878",
	} {
		if got := probeAddr(in); got != want {
			t.Errorf("probeAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestMakeHostDirMode checks that up's per-host directories, and the hosts
// directory above them, are 0700, a directory an earlier up (or anything
// else) left 0755 included.
func TestMakeHostDirMode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		premade []string // directories under the data directory made 0755 first
	}{
		{"fresh", nil},
		{"left 0755", []string{"hosts", "hosts/sim-h100-1"}},
		{"hosts only", []string{"hosts"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			for _, d := range tc.premade {
				p := filepath.Join(data, d)
				if err := os.Mkdir(p, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			dir, err := makeHostDir(data, "sim-h100-1")
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(data, "hosts", "sim-h100-1"); dir != want {
				t.Errorf("dir %s, want %s", dir, want)
			}
			for _, p := range []string{filepath.Join(data, "hosts"), dir} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if got := fi.Mode().Perm(); got != 0o700 {
					t.Errorf("%s: mode %v, want 0700", p, got)
				}
			}
		})
	}
}
