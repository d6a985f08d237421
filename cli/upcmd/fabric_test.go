package upcmd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/network/fabric"
)

// TestUpCloudID: the identity is the CA fingerprint's first six hex
// digits, however the fingerprint is written; anything else is refused.
func TestUpCloudID(t *testing.T) {
	for _, tc := range []struct {
		fp, want, err string
	}{
		{"sha256:3fa9c01d" + strings.Repeat("0", 56), "3fa9c0", ""},
		{"SHA256:3FA9C01D" + strings.Repeat("0", 56), "3fa9c0", ""},
		{"3f:a9:c0:1d", "3fa9c0", ""},
		{"sha256:3fa9", "", "too short"},
		{"sha256:xyz123456", "", "want hex digits"},
	} {
		got, err := upCloudID(tc.fp)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("upCloudID(%q) = %q, %v; want %q, %q", tc.fp, got, err, tc.want, tc.err)
		}
		if err == nil && !fabric.ValidCloud(got) {
			t.Errorf("upCloudID(%q) = %q: not an identity the fabric takes", tc.fp, got)
		}
	}
}

// TestParseFabricPrefix: --fabric-prefix takes an IPv4 network prefix;
// empty is the fabric's choice.
func TestParseFabricPrefix(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want netip.Prefix
		err  string
	}{
		{"", netip.Prefix{}, ""},
		{"100.100.7.0/24", netip.MustParsePrefix("100.100.7.0/24"), ""},
		{"10.9.0.0/16", netip.MustParsePrefix("10.9.0.0/16"), ""},
		{"100.100.7.1/24", netip.Prefix{}, "want its network address, 100.100.7.0/24"},
		{"fd00::/64", netip.Prefix{}, "want an IPv4 prefix"},
		{"100.100.7.0", netip.Prefix{}, "want an IPv4 prefix"},
	} {
		got, err := parseFabricPrefix(tc.in)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("parseFabricPrefix(%q) = %v, %v; want %v, %q", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// TestUpFabric: with containers, up's hosts get a fabric named from the
// cloud's identity, hostNetwork says where each lives, a second up of the
// same cloud is refused while the first runs, and close removes it all.
// Processes get no fabric.
func TestUpFabric(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	procs := &upRuntimes{kind: upRuntimeProcess, cloud: "abc123", log: log}
	if err := procs.startFabric(t.Context(), 3); err != nil || procs.fab != nil {
		t.Fatalf("processes: fabric %v, %v; want none", procs.fab, err)
	}
	if ns, a := procs.hostNetwork(0); ns != "" || a.IsValid() {
		t.Errorf("processes: hostNetwork(0) = %q, %v; want the agent's own namespace", ns, a)
	}
	if os.Geteuid() != 0 {
		t.Skip("the fabric needs root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " is missing")
		}
	}
	cloud := fmt.Sprintf("u%04x", os.Getpid()&0xffff)
	u := &upRuntimes{kind: upRuntimeContainerd, cloud: cloud, log: log}
	defer u.close()
	if err := u.startFabric(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ns, a := u.hostNetwork(i)
		switch {
		case i < 2 && (ns != fabric.HostNetns(cloud, i) || !u.fab.Prefix().Contains(a) || a == u.fab.Gateway()):
			t.Errorf("hostNetwork(%d) = %q, %v; want %s on %v", i, ns, a, fabric.HostNetns(cloud, i), u.fab.Prefix())
		case i < 2:
			if out, err := exec.Command("ip", "-n", ns, "-4", "addr", "show", "dev", fabric.HostLink).CombinedOutput(); err != nil || !strings.Contains(string(out), a.String()+"/") {
				t.Errorf("host %d: %s in %s: %s %v", i, fabric.HostLink, ns, out, err)
			}
		case ns != "" || a.IsValid():
			t.Errorf("hostNetwork(%d) past the fabric's hosts = %q, %v", i, ns, a)
		}
	}
	if u.fabricMTU() != fabric.DefaultMTU {
		t.Errorf("fabricMTU = %d", u.fabricMTU())
	}
	if d := u.describeFabric(); !strings.Contains(d, "cloud "+cloud) || !strings.Contains(d, fabric.BridgeName(cloud)) ||
		!strings.Contains(d, fabric.HostNetns(cloud, 1)) || !strings.Contains(d, u.fab.Prefix().String()) {
		t.Errorf("describeFabric: %q", d)
	}
	// A second up of the same cloud (the same data directory) while this
	// one runs.
	other := &upRuntimes{kind: upRuntimeContainerd, cloud: cloud, log: log}
	if err := other.startFabric(t.Context(), 2); !errors.Is(err, fabric.ErrInUse) || !strings.Contains(err.Error(), "the fabric of cloud "+cloud) {
		t.Errorf("a second up of cloud %s: %v; want it refused", cloud, err)
	}
	if _, err := os.Lstat("/var/run/netns/" + fabric.HostNetns(cloud, 1)); err != nil {
		t.Errorf("the refused up touched the first's hosts: %v", err)
	}
	u.close()
	if u.fab != nil {
		t.Errorf("close kept the fabric")
	}
	if _, err := os.Lstat("/var/run/netns/" + fabric.HostNetns(cloud, 0)); err == nil {
		t.Errorf("close left host 0's namespace")
	}
	if out, _ := exec.Command("ip", "link", "show", fabric.BridgeName(cloud)).CombinedOutput(); !strings.Contains(string(out), "does not exist") {
		t.Errorf("close left the bridge: %s", out)
	}
	if out, _ := exec.Command("nft", "list", "tables").Output(); strings.Contains(string(out), fabric.Table(cloud)) {
		t.Errorf("close left the table")
	}
}

// TestUpPublicRoutes: the public addresses the hosts' overlays serve are
// routed, in the machine's namespace, to the host that serves them, and
// a host that stops serving one after another took it over leaves that
// one's route alone.
func TestUpPublicRoutes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the fabric needs root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(tool + " is missing")
		}
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cloud := fmt.Sprintf("p%04x", os.Getpid()&0xffff)
	u := &upRuntimes{kind: upRuntimeContainerd, cloud: cloud, log: log}
	defer u.close()
	if err := u.startFabric(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	hs := u.fab.Hosts()
	pub := netip.AddrFrom4([4]byte{203, 0, 113, byte(20 + os.Getpid()%200)})
	routed := func() string {
		out, err := exec.Command("ip", "-4", "route", "show", pub.String()+"/32").CombinedOutput()
		if err != nil {
			t.Fatalf("ip route show: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, step := range []struct {
		desc    string
		host    int
		serving bool
		via     netip.Addr // zero: no route
	}{
		{"host 0 serves it", 0, true, hs[0].Underlay},
		{"host 1 takes it over", 1, true, hs[1].Underlay},
		{"host 0 stops serving it, late", 0, false, hs[1].Underlay},
		{"host 1 stops serving it", 1, false, netip.Addr{}},
		{"host 1 serves it again", 1, true, hs[1].Underlay},
	} {
		u.pubs.onPublic(step.host)(pub, step.serving)
		got := routed()
		if step.via.IsValid() && !strings.Contains(got, "via "+step.via.String()+" dev "+fabric.BridgeName(cloud)) ||
			!step.via.IsValid() && got != "" {
			t.Errorf("%s: route %q, want via %v", step.desc, got, step.via)
		}
	}
	u.close()
	if got := routed(); got != "" {
		t.Errorf("after close: route %q", got)
	}
}
