package imageref

import (
	"net/netip"
	"strings"
	"testing"
)

// TestRegistryRefused: every internal range is refused as a registry, as
// an IPv4 or IPv6 literal or a localhost name, with the rule named and no
// port; public addresses and names pass, and the operator's allow-list
// lets one registry through (HOST for every port, HOST:PORT for that one).
func TestRegistryRefused(t *testing.T) {
	for _, c := range []struct {
		image string
		allow []string
		rule  string // "" when allowed
	}{
		{"127.0.0.1:5000/x:1", nil, "a loopback address"},
		{"127.8.9.10/x/y:1", nil, "a loopback address"},
		{"[::1]:5000/x:1", nil, "a loopback address"},
		{"[::ffff:127.0.0.1]:5000/x:1", nil, "a loopback address"},
		{"localhost:5000/x:1", nil, "a loopback address (localhost)"},
		{"LocalHost/x:1", nil, "a loopback address (localhost)"},
		{"reg.localhost:5000/x:1", nil, "a loopback address (localhost)"},
		{"0.0.0.0:5000/x:1", nil, "unspecified"},
		{"[::]:5000/x:1", nil, "an unspecified address"},
		{"169.254.169.254/x:1", nil, "a link-local address"},
		{"[fe80::1]:80/x:1", nil, "a link-local address"},
		{"10.1.2.3:5000/x:1", nil, "a private address"},
		{"172.16.0.1/x:1", nil, "a private address"},
		{"172.31.255.255/x:1", nil, "a private address"},
		{"192.168.1.1:443/x:1", nil, "a private address"},
		{"[fd00::5]:5000/x:1", nil, "a private (unique local) address"},
		{"[fc00::1]/x:1", nil, "a private (unique local) address"},
		{"100.64.0.1/x:1", nil, "carrier-grade NAT"},
		{"224.0.0.1/x:1", nil, "a multicast address"},
		{"[ff02::1]/x:1", nil, "a multicast address"},
		{"240.0.0.1/x:1", nil, "a reserved address"},
		// Public addresses and names pass: names are judged when a host
		// resolves them.
		{"python:3.12", nil, ""},
		{"ghcr.io/acme/x:1", nil, ""},
		{"registry.internal:5000/x:1", nil, ""},
		{"172.32.0.1/x:1", nil, ""},
		{"100.128.0.1/x:1", nil, ""},
		{"8.8.8.8:5000/x:1", nil, ""},
		{"[2001:db8::1]:5000/x:1", nil, ""},
		// The allow-list.
		{"10.1.2.3:5000/x:1", []string{"10.1.2.3:5000"}, ""},
		{"10.1.2.3:5001/x:1", []string{"10.1.2.3:5000"}, "a private address"},
		{"10.1.2.3:5001/x:1", []string{"10.1.2.3"}, ""},
		{"10.1.2.3/x:1", []string{"10.1.2.3:443"}, ""},
		{"localhost:5000/x:1", []string{"LOCALHOST:5000"}, ""},
		{"[fd00::5]:5000/x:1", []string{"[fd00:0::5]:5000"}, ""},
		{"[fd00::5]:5000/x:1", []string{"[fd00::6]:5000"}, "a private (unique local) address"},
	} {
		ref, err := Parse(c.image)
		if err != nil {
			t.Fatalf("%s: %v", c.image, err)
		}
		allow, err := NewAllowList(c.allow)
		if err != nil {
			t.Fatalf("%v: %v", c.allow, err)
		}
		err = CheckRegistryAllowed(ref, allow)
		switch {
		case c.rule == "" && err != nil:
			t.Errorf("%s (allow %v): %v, want allowed", c.image, c.allow, err)
		case c.rule != "" && err == nil:
			t.Errorf("%s (allow %v): allowed, want refused as %s", c.image, c.allow, c.rule)
		case err != nil:
			msg := err.Error()
			if !strings.Contains(msg, c.rule) || !strings.Contains(msg, "--allow-registry") {
				t.Errorf("%s: %q, want it to say %q and --allow-registry", c.image, msg, c.rule)
			}
			if _, port := SplitRegistry(ref.Registry); port != "" && strings.Contains(msg, ":"+port) {
				t.Errorf("%s: %q names the port", c.image, msg)
			}
		}
	}
}

// TestAddrRule: the rule of an address, IPv4 mapped into IPv6 judged as
// IPv4, a zone ignored.
func TestAddrRule(t *testing.T) {
	for _, c := range []struct{ addr, rule string }{
		{"127.0.0.1", "a loopback address"},
		{"::ffff:10.0.0.1", "a private address"},
		{"fe80::1%eth0", "a link-local address"},
		{"169.254.169.254", "a link-local address"},
		{"1.1.1.1", ""},
		{"2606:4700::1111", ""},
	} {
		if got := AddrRule(netip.MustParseAddr(c.addr)); got != c.rule {
			t.Errorf("AddrRule(%s) = %q, want %q", c.addr, got, c.rule)
		}
	}
}

// TestNewAllowList: entries are HOST or HOST:PORT; anything else is
// refused, saying the form.
func TestNewAllowList(t *testing.T) {
	for _, c := range []struct {
		entry string
		ok    bool
	}{
		{"registry.internal", true},
		{"10.0.0.5:5000", true},
		{"[fd00::5]:5000", true},
		{"localhost", true},
		{"", false},
		{"10.0.0.5:", false},
		{"10.0.0.5:99999", false},
		{"registry.internal/x", false},
		{"http://registry.internal", false},
		{"a b", false},
	} {
		_, err := NewAllowList([]string{c.entry})
		if (err == nil) != c.ok {
			t.Errorf("NewAllowList(%q): %v, want ok %v", c.entry, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "HOST or HOST:PORT") {
			t.Errorf("NewAllowList(%q): %q, want it to give the form", c.entry, err)
		}
	}
}
