package fabric

import (
	"net/netip"
	"strings"
	"testing"
)

// TestConfigCheck: a configuration New would refuse is refused before
// anything is made, with what is wrong; defaults are filled in.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" when accepted
	}{
		{"ok", Config{Cloud: "a1b2c3", Hosts: 4}, ""},
		{"one char", Config{Cloud: "z", Hosts: 1}, ""},
		{"empty cloud", Config{Hosts: 1}, "cloud identity"},
		{"upper case", Config{Cloud: "AB", Hosts: 1}, "cloud identity"},
		{"too long", Config{Cloud: "abcdefg", Hosts: 1}, "cloud identity"},
		{"dash", Config{Cloud: "a-b", Hosts: 1}, "cloud identity"},
		{"no hosts", Config{Cloud: "a", Hosts: 0}, "0 hosts"},
		{"too many hosts", Config{Cloud: "a", Hosts: MaxHosts + 1}, "254 hosts"},
		{"small MTU", Config{Cloud: "a", Hosts: 1, MTU: 100}, "MTU 100"},
		{"IPv6 prefix", Config{Cloud: "a", Hosts: 1, Prefix: netip.MustParsePrefix("fd00::/64")}, "want an IPv4 prefix"},
		{"not masked", Config{Cloud: "a", Hosts: 1, Prefix: netip.MustParsePrefix("10.1.2.3/24")}, "want its network address (10.1.2.0/24)"},
		{"too small", Config{Cloud: "a", Hosts: 2, Prefix: netip.MustParsePrefix("10.1.2.0/30")}, "too small for a gateway and 2 hosts"},
		{"just enough", Config{Cloud: "a", Hosts: 5, Prefix: netip.MustParsePrefix("10.1.2.0/29")}, ""},
		{"one too many", Config{Cloud: "a", Hosts: 6, Prefix: netip.MustParsePrefix("10.1.2.0/29")}, "too small"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			err := cfg.check()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			case tc.want == "" && (cfg.MTU != DefaultMTU && tc.cfg.MTU == 0 || cfg.Log == nil):
				t.Fatalf("defaults not filled in: %+v", cfg)
			}
		})
	}
}

// TestNames: every name fits an interface name (15 bytes), derives from
// the identity, and is read back as its host only for its own identity.
func TestNames(t *testing.T) {
	for _, tc := range []struct {
		cloud, name string
		host        int
		ok          bool
	}{
		{"abc123", "gcabc123h0", 0, true},
		{"abc123", "gcabc123h252", 252, true},
		{"abc123", "gcabc123h07", 0, false},
		{"abc123", "gcabc123h", 0, false},
		{"abc123", "gcabc123f", 0, false},
		{"ab", "gcabh1h0", 0, false}, // host 0 of cloud "abh1"
		{"abh1", "gcabh1h0", 0, true},
		{"ab", "gcab-h0", 0, false},
		{"ab", "gcabh1234", 0, false},
	} {
		i, ok := hostIndex(tc.cloud, tc.name)
		if ok != tc.ok || ok && i != tc.host {
			t.Errorf("hostIndex(%q, %q) = %d, %v; want %d, %v", tc.cloud, tc.name, i, ok, tc.host, tc.ok)
		}
	}
	long := strings.Repeat("z", MaxCloudLen)
	for _, name := range []string{BridgeName(long), HostNetns(long, MaxHosts-1)} {
		if len(name) > 15 {
			t.Errorf("%q is longer than an interface name may be", name)
		}
	}
	if BridgeName("x1") != "gcx1f" || HostNetns("x1", 3) != "gcx1h3" || Table("x1") != "gpucloud_x1_fabric" || Alias("x1") != "gpucloud-fabric:x1" {
		t.Errorf("names of x1: %s %s %s %s", BridgeName("x1"), HostNetns("x1", 3), Table("x1"), Alias("x1"))
	}
}

// TestDefaultPrefix: a /24 of DefaultRange, the same for the same
// identity, and the search walks every /24 of the range once.
func TestDefaultPrefix(t *testing.T) {
	a, b := DefaultPrefix("aaaaaa"), DefaultPrefix("bbbbbb")
	for _, p := range []netip.Prefix{a, b} {
		if p.Bits() != 24 || !DefaultRange.Contains(p.Addr()) || p != p.Masked() {
			t.Errorf("DefaultPrefix = %v: want a /24 of %v", p, DefaultRange)
		}
	}
	if a != DefaultPrefix("aaaaaa") || a == b {
		t.Errorf("DefaultPrefix: aaaaaa %v (again %v), bbbbbb %v", a, DefaultPrefix("aaaaaa"), b)
	}
	seen := map[netip.Prefix]bool{}
	n := 1 << (24 - DefaultRange.Bits())
	for k := range n {
		p := candidate("aaaaaa", k)
		if seen[p] || !DefaultRange.Contains(p.Addr()) {
			t.Fatalf("candidate %d = %v: again, or outside the range", k, p)
		}
		seen[p] = true
	}
	if candidate("aaaaaa", n) != a {
		t.Errorf("the search does not wrap around")
	}
	if got := nth(netip.MustParsePrefix("100.97.3.0/24"), 2); got != netip.MustParseAddr("100.97.3.2") {
		t.Errorf("nth = %v", got)
	}
}
