package agentcmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/agent/network"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// TestNetworkID: the overlay's identity is the flag's, else the first 6
// hex digits of the kept CA's fingerprint, else of the server URL's hash;
// a bad underlay or identity is refused; --overlay-steer-receive reaches
// the overlay's configuration.
func TestNetworkID(t *testing.T) {
	ca, err := pki.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	withCA := t.TempDir()
	if err := os.WriteFile(filepath.Join(withCA, caFileName), pki.EncodeCert(ca.Cert), 0o600); err != nil {
		t.Fatal(err)
	}
	fromCA := strings.TrimPrefix(pki.Fingerprint(ca.Cert), pki.FingerprintPrefix)[:6]
	other := t.TempDir()
	for _, tc := range []struct {
		desc               string
		flags              instanceNetFlags
		server, dir        string
		wantCloud, wantErr string
	}{
		{desc: "no underlay: no overlay", dir: withCA},
		{desc: "from the CA", flags: instanceNetFlags{underlay: "192.0.2.1"}, server: "https://a:7878", dir: withCA, wantCloud: fromCA},
		{desc: "the flag wins", flags: instanceNetFlags{underlay: "192.0.2.1", networkID: "abc1"}, dir: withCA, wantCloud: "abc1"},
		{desc: "receive steering", flags: instanceNetFlags{underlay: "192.0.2.1", networkID: "abc1", steerReceive: true}, dir: withCA, wantCloud: "abc1"},
		{desc: "bad underlay", flags: instanceNetFlags{underlay: "::1"}, dir: withCA, wantErr: "--underlay"},
	} {
		cfg, err := tc.flags.overlay(network.Config{}, tc.server, tc.dir)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.desc, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.desc, err)
		case cfg.Cloud != tc.wantCloud || cfg.Underlay.IsValid() != (tc.flags.underlay != ""):
			t.Errorf("%s: cloud %q underlay %v, want %q", tc.desc, cfg.Cloud, cfg.Underlay, tc.wantCloud)
		case cfg.SteerReceive != tc.flags.steerReceive:
			t.Errorf("%s: SteerReceive %v, want %v", tc.desc, cfg.SteerReceive, tc.flags.steerReceive)
		}
	}
	// Without a CA: the server's URL, so two http:// clouds differ.
	a, err1 := NetworkID("http://127.0.0.1:7878", other)
	b, err2 := NetworkID("http://127.0.0.1:7879", other)
	if err1 != nil || err2 != nil || a == b || len(a) != 6 || a == fromCA {
		t.Fatalf("identities without a CA: %q %q (%v %v)", a, b, err1, err2)
	}
}
