package cli

import (
	"strings"
	"testing"
)

// TestServerRateLimitFlags: a bad limit is a usage error before the server
// starts.
func TestServerRateLimitFlags(t *testing.T) {
	var out, errOut strings.Builder
	code := Main([]string{"server", "--db", "sqlite://" + t.TempDir() + "/x.db", "--listen", "127.0.0.1:0", "--rate-limit", "member=fast"}, &out, &errOut)
	if code != ExitUsage || !strings.Contains(errOut.String(), "ROLE=RATE/BURST") {
		t.Errorf("exit %d, %q; want a usage error", code, errOut.String())
	}
}
