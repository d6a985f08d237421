package agent

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMakeDataDirMode checks that the data directory ends 0700 whether it
// was missing, missing with its parent, or there before with a looser mode.
func TestMakeDataDirMode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		path    string
		premade os.FileMode // 0: not there before
	}{
		{"missing", "agent", 0},
		{"missing parent", "hosts/h1", 0},
		{"existing 0755", "agent", 0o755},
		{"existing 0777", "agent", 0o777},
		{"existing 0700", "agent", 0o700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), tc.path)
			if tc.premade != 0 {
				if err := os.Mkdir(dir, tc.premade); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, tc.premade); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			if err := MakeDataDir(dir); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != 0o700 {
				t.Errorf("%s: mode %v, want 0700", dir, got)
			}
		})
	}
}
