package agentcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadMetricsToken: the token file's one token, trimmed; a short,
// spaced or missing one, or a token without a listener, is refused.
func TestReadMetricsToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  0123456789abcdef0123\n")
	for _, c := range []struct {
		name, file, listen, want, err string
	}{
		{name: "none", listen: "127.0.0.1:9400"},
		{name: "a token", file: good, listen: "127.0.0.1:9400", want: "0123456789abcdef0123"},
		{name: "without a listener", file: good, err: "needs --metrics-listen"},
		{name: "short", file: write("short", "abc\n"), listen: ":0", err: "at least 16"},
		{name: "two words", file: write("two", "0123456789abcdef 0123456789abcdef"), listen: ":0", err: "at least 16"},
		{name: "missing", file: filepath.Join(dir, "missing"), listen: ":0", err: "no such file"},
	} {
		got, err := readMetricsToken(&flags{metricsTokenFile: c.file, metricsListen: c.listen})
		if got != c.want || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: %q, %v; want %q, %q", c.name, got, err, c.want, c.err)
		}
	}
}
