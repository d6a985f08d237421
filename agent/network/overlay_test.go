//go:build linux

package network

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// The overlay tests build simulated hosts as network namespaces of their
// own ("hosts"), each with an underlay address on a bridge in another
// namespace (the "fabric"), so that the overlay crosses a real (virtual)
// wire, and a driver per host. Every name is the test's own (a random
// suffix), and everything is removed when the test ends.

// fabric is a set of simulated hosts on one bridge.
type fabric struct {
	ns    string // the bridge's namespace
	hosts []*simHost
}

// simHost is a simulated host: its namespace and underlay address.
type simHost struct {
	name, ns string
	underlay netip.Addr
}

// path is the host namespace's path.
func (h *simHost) path() string { return filepath.Join(NetnsDir, h.ns) }

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// newFabric makes n hosts named A, B... on a fabric of underlay addresses
// 10.250.X.1, .2... (/24; X random: the namespaces are the test's own, so
// nothing of the machine's networks is in the way).
func newFabric(t testing.TB, n int) *fabric {
	t.Helper()
	suffix := randHex(6)
	f := &fabric{ns: "gctf" + suffix}
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	t.Cleanup(func() {
		for _, h := range f.hosts {
			_ = exec.Command("ip", "netns", "del", h.ns).Run()
		}
		_ = exec.Command("ip", "netns", "del", f.ns).Run()
	})
	ipCmd(t, "netns", "add", f.ns)
	ipCmd(t, "-n", f.ns, "link", "add", "br0", "type", "bridge")
	ipCmd(t, "-n", f.ns, "link", "set", "br0", "up")
	for i := range n {
		h := &simHost{name: string(rune('A' + i)), ns: fmt.Sprintf("gcth%s%d", suffix, i),
			underlay: netip.AddrFrom4([4]byte{10, 250, b[0], byte(i + 1)})}
		f.hosts = append(f.hosts, h)
		ipCmd(t, "netns", "add", h.ns)
		port := fmt.Sprintf("p%d", i)
		ipCmd(t, "-n", f.ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.ns)
		ipCmd(t, "-n", f.ns, "link", "set", port, "master", "br0")
		ipCmd(t, "-n", f.ns, "link", "set", port, "up")
		ipCmd(t, "-n", h.ns, "addr", "add", h.underlay.String()+"/24", "dev", "eth0")
		ipCmd(t, "-n", h.ns, "link", "set", "eth0", "up")
		ipCmd(t, "-n", h.ns, "link", "set", "lo", "up")
	}
	return f
}

// newOverlayOn makes a driver of cloud on a host and removes all of it
// when the test ends, failing the test if anything of it is left.
func newOverlayOn(t testing.TB, h *simHost, cloud string) *Overlay {
	t.Helper()
	o, err := NewOverlay(t.Context(), OverlayConfig{Cloud: cloud, HostNetns: h.ns, Underlay: h.underlay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := o.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if left := overlayLeftovers(h, cloud, o.nsPrefix()); left != "" {
			t.Errorf("left on host %s after Destroy: %s", h.name, left)
		}
	})
	return o
}

// overlayLeftovers lists what of a cloud's driver is on a host: links,
// addresses and routes of its transit pool, namespaces (nsPrefix: the
// host's), tables.
func overlayLeftovers(h *simHost, cloud, nsPrefix string) string {
	var left []string
	hh, err := handleIn(h.ns)
	if err != nil {
		return err.Error()
	}
	defer hh.Close()
	links, _ := hh.LinkList()
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, "gc"+cloud) || strings.Contains(l.Attrs().Alias, "cloud="+cloud+"&") || strings.HasSuffix(l.Attrs().Alias, "cloud="+cloud) {
			left = append(left, "link "+l.Attrs().Name)
		}
	}
	routes, _ := hh.RouteList(nil, netlink.FAMILY_V4)
	for _, r := range routes {
		l, err := hh.LinkByIndex(r.LinkIndex)
		if p, ok := prefixOf(r.Dst); ok && err == nil && strings.HasPrefix(l.Attrs().Name, "gc"+cloud) {
			left = append(left, "route "+p.String())
		}
	}
	ents, _ := os.ReadDir(NetnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), nsPrefix) {
			left = append(left, "netns "+e.Name())
		}
	}
	out, _ := exec.Command("ip", "netns", "exec", h.ns, "nft", "list", "tables").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, " gpucloud_"+cloud) {
			left = append(left, l)
		}
	}
	return strings.Join(left, ", ")
}

func handleIn(ns string) (*netlink.Handle, error) {
	fd, err := netns.GetFromName(ns)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	return netlink.NewHandleAt(fd)
}

// testCloud is a cloud identity of the test's own.
func testCloud() string { return "t" + randHex(5) }

// vnet is a test network: its ID, VNI and CIDR 10.0.0.0/16 with subnet
// 10.0.1.0/24.
type vnet struct {
	id  string
	vni uint32
}

// inst is a test instance: where it runs and its host-th address.
type inst struct {
	id   string
	net  vnet
	host *simHost
	n    byte // its address is 10.0.1.n
}

func (i inst) addr() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 1, i.n}) }

func (i inst) spec() *runtime.Network {
	return &runtime.Network{
		ID: i.net.id, Name: i.net.id, VNI: i.net.vni,
		CIDR:   netip.MustParsePrefix("10.0.0.0/16"),
		Subnet: netip.MustParsePrefix("10.0.1.0/24"), Gateway: netip.MustParseAddr("10.0.1.1"),
		Addr: i.addr(), MAC: macOf(i.addr()),
	}
}

// view is the control plane's view of the networks of insts.
func view(insts ...inst) []agentapi.HostNetwork {
	var out []agentapi.HostNetwork
	idx := map[string]int{}
	for _, in := range insts {
		i, ok := idx[in.net.id]
		if !ok {
			i = len(out)
			idx[in.net.id] = i
			out = append(out, agentapi.HostNetwork{ID: in.net.id, VNI: in.net.vni, CIDR: "10.0.0.0/16",
				Subnets: []agentapi.NetworkSubnet{{ID: "sub", CIDR: "10.0.1.0/24", Gateway: "10.0.1.1"}}})
		}
		out[i].Endpoints = append(out[i].Endpoints, agentapi.Endpoint{InstanceID: in.id, Address: in.addr().String(),
			MAC: macOf(in.addr()), HostID: in.host.name, Underlay: in.host.underlay.String()})
	}
	return out
}

// start sets instances up on their hosts' drivers and serves a TCP
// answer ("ID PEER") in each on port.
func start(t testing.TB, drivers map[*simHost]*Overlay, port string, insts ...inst) map[string]string {
	t.Helper()
	paths := map[string]string{}
	for _, in := range insts {
		p, err := drivers[in.host].Setup(t.Context(), in.id, in.spec())
		if err != nil {
			t.Fatal(err)
		}
		paths[in.id] = p
		if port != "" {
			serve(t.(*testing.T), p, "0.0.0.0:"+port, in.id)
		}
	}
	return paths
}

func syncAll(t testing.TB, drivers map[*simHost]*Overlay, insts ...inst) {
	t.Helper()
	for _, d := range drivers {
		if err := d.Sync(t.Context(), view(insts...)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOverlayTwoHosts: an instance on host A reaches one on host B of its
// network by address, both ways, and each has the underlay's MTU less
// the overlay's overhead.
func TestOverlayTwoHosts(t *testing.T) {
	need(t)
	f := newFabric(t, 2)
	A, B := f.hosts[0], f.hosts[1]
	cloud := testCloud()
	drivers := map[*simHost]*Overlay{A: newOverlayOn(t, A, cloud), B: newOverlayOn(t, B, cloud)}
	x := vnet{"net-x", 100}
	i1, i2 := inst{"i1", x, A, 10}, inst{"i2", x, B, 11}
	paths := start(t, drivers, "7000", i1, i2)
	syncAll(t, drivers, i1, i2)
	runChecks(t, []check{
		{desc: "i1 (host A) to i2 (host B)", netns: paths["i1"], addr: "10.0.1.11:7000", want: "i2 10.0.1.10:"},
		{desc: "i2 (host B) to i1 (host A)", netns: paths["i2"], addr: "10.0.1.10:7000", want: "i1 10.0.1.11:"},
	})
	for id, p := range paths {
		var mtu int
		if err := inNetns(p, func() error {
			i, err := net.InterfaceByName(InstanceIf)
			if err == nil {
				mtu = i.MTU
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if mtu != 1500-OverlayOverhead {
			t.Errorf("%s: MTU %d, want %d (the fabric's 1500 less %d)", id, mtu, 1500-OverlayOverhead, OverlayOverhead)
		}
	}
	if a, ok := drivers[A].Address("i1"); !ok || a != i1.addr() {
		t.Errorf("Address(i1) = %v, %v", a, ok)
	}
}
