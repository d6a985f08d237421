//go:build linux

package network

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math/big"
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
	"golang.org/x/sys/unix"

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
	return newOverlayWith(t, h, OverlayConfig{Cloud: cloud})
}

// newOverlayWith is newOverlayOn with more of the configuration: its
// host's namespace and underlay address are h's.
func newOverlayWith(t testing.TB, h *simHost, cfg OverlayConfig) *Overlay {
	t.Helper()
	cloud := cfg.Cloud
	cfg.HostNetns, cfg.Underlay = h.ns, h.underlay
	o, err := NewOverlay(t.Context(), cfg)
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

// defaultGroup is a network's default security group: everything among
// the network's addresses, every egress.
var defaultGroup = agentapi.GroupRules{ID: "sg-default",
	Ingress: []agentapi.RuleSpec{{Protocol: "all", Peers: []string{"10.0.0.0/16"}}},
	Egress:  []agentapi.RuleSpec{{Protocol: "all", Peers: []string{"0.0.0.0/0"}}}}

// view is the control plane's view of the networks of insts, each
// endpoint in defaultGroup.
func view(insts ...inst) []agentapi.HostNetwork {
	var out []agentapi.HostNetwork
	idx := map[string]int{}
	for _, in := range insts {
		i, ok := idx[in.net.id]
		if !ok {
			i = len(out)
			idx[in.net.id] = i
			out = append(out, agentapi.HostNetwork{ID: in.net.id, VNI: in.net.vni, CIDR: "10.0.0.0/16",
				Subnets:        []agentapi.NetworkSubnet{{ID: "sub", CIDR: "10.0.1.0/24", Gateway: "10.0.1.1"}},
				SecurityGroups: []agentapi.GroupRules{defaultGroup}})
		}
		out[i].Endpoints = append(out[i].Endpoints, agentapi.Endpoint{InstanceID: in.id, Address: in.addr().String(),
			MAC: macOf(in.addr()), HostID: in.host.name, Underlay: in.host.underlay.String(), SecurityGroups: []string{defaultGroup.ID}})
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
	// No receive packet steering unless the configuration asks for it
	// (TestOverlaySteerReceive).
	for _, in := range []inst{i1, i2} {
		checkSteering(t, drivers[in.host], in, x, big.NewInt(0))
	}
	if a, ok := drivers[A].Address("i1"); !ok || a != i1.addr() {
		t.Errorf("Address(i1) = %v, %v", a, ok)
	}
}

// checkSteering checks that both ends of in's veth steer what they
// receive to the CPUs of the mask want (0: none).
func checkSteering(t *testing.T, d *Overlay, in inst, x vnet, want *big.Int) {
	t.Helper()
	for _, end := range []struct{ ns, ifname string }{{d.instNS(in.id), InstanceIf}, {d.routerNS(x.vni), d.insts[in.id].veth}} {
		out, err := exec.Command("ip", "netns", "exec", end.ns, "sh", "-c", `cat /sys/class/net/"$1"/queues/rx-*/rps_cpus`, "sh", end.ifname).Output()
		if err != nil {
			t.Fatal(err)
		}
		qs := strings.Fields(string(out))
		if len(qs) == 0 {
			t.Fatalf("%s: %s in %s has no receive queue", in.id, end.ifname, end.ns)
		}
		for _, q := range qs {
			got, _ := new(big.Int).SetString(strings.ReplaceAll(q, ",", ""), 16)
			if got == nil || got.Cmp(want) != 0 {
				t.Errorf("%s: %s in %s steers to CPUs %s, want %x", in.id, end.ifname, end.ns, q, want)
			}
		}
	}
}

// TestOverlaySteerReceive: with OverlayConfig.SteerReceive, both ends of
// an instance's veth steer what they receive over every CPU the agent may
// use.
func TestOverlaySteerReceive(t *testing.T) {
	need(t)
	want, ok := new(big.Int).SetString(strings.ReplaceAll(rpsMask(), ",", ""), 16)
	if !ok {
		t.Skip("one CPU: no receive packet steering to check")
	}
	f := newFabric(t, 1)
	A := f.hosts[0]
	drivers := map[*simHost]*Overlay{A: newOverlayWith(t, A, OverlayConfig{Cloud: testCloud(), SteerReceive: true})}
	x := vnet{"net-x", 100}
	i1 := inst{"i1", x, A, 10}
	start(t, drivers, "", i1)
	syncAll(t, drivers, i1)
	checkSteering(t, drivers[A], i1, x, want)
}

// TestOverlayIsolation: two tenants' networks (VNIs 100 and 200) with the
// same CIDR and the same addresses on the same two hosts. Each instance
// reaches its own network's peer at the shared address, never the other
// network's; a forged source address is dropped; the hosts' underlay
// addresses are out of reach; and a VXLAN packet an instance crafts for
// the other network's VNI never reaches the fabric, while the same
// packet sent from the host does (the check can fail).
func TestOverlayIsolation(t *testing.T) {
	need(t)
	f := newFabric(t, 2)
	A, B := f.hosts[0], f.hosts[1]
	cloud := testCloud()
	drivers := map[*simHost]*Overlay{A: newOverlayOn(t, A, cloud), B: newOverlayOn(t, B, cloud)}
	x, y := vnet{"net-x", 100}, vnet{"net-y", 200}
	x1, x2 := inst{"x1", x, A, 10}, inst{"x2", x, B, 11}
	y1, y2 := inst{"y1", y, A, 10}, inst{"y2", y, B, 11}
	paths := start(t, drivers, "7000", x1, x2, y1, y2)
	syncAll(t, drivers, x1, x2, y1, y2)
	for id, p := range paths {
		assertNoIPv6(t, "instance "+id, p)
	}
	hostPort := "7001"
	serve(t, A.path(), "0.0.0.0:"+hostPort, "hostA")
	serve(t, B.path(), "0.0.0.0:"+hostPort, "hostB")
	runChecks(t, []check{
		{desc: "x1 to 10.0.1.11 (x2, its network's)", netns: paths["x1"], addr: "10.0.1.11:7000", want: "x2 10.0.1.10:"},
		{desc: "y1 to 10.0.1.11 (y2, its network's)", netns: paths["y1"], addr: "10.0.1.11:7000", want: "y2 10.0.1.10:"},
		{desc: "x2 to 10.0.1.10 (x1)", netns: paths["x2"], addr: "10.0.1.10:7000", want: "x1 10.0.1.11:"},
		{desc: "y2 to 10.0.1.10 (y1)", netns: paths["y2"], addr: "10.0.1.10:7000", want: "y1 10.0.1.11:"},
		{desc: "x1 to a network address no instance has", netns: paths["x1"], addr: "10.0.1.99:7000"},
		{desc: "x1 to host A's underlay address", netns: paths["x1"], addr: A.underlay.String() + ":" + hostPort},
		{desc: "x1 to host B's underlay address", netns: paths["x1"], addr: B.underlay.String() + ":" + hostPort},
		{desc: "x1 to its gateway", netns: paths["x1"], addr: "10.0.1.1:" + hostPort},
		{desc: "host A to host B (the fabric works)", netns: A.path(), addr: B.underlay.String() + ":" + hostPort, want: "hostB"},
	})

	// x1 forges a neighbour's address: dropped, while its own works, to
	// an instance on another host (TCP) and to one on its own (UDP, which
	// needs no answer).
	ipCmd(t, "-n", drivers[A].instNS("x1"), "addr", "add", "10.0.1.12/32", "dev", InstanceIf)
	runChecks(t, []check{
		{desc: "x1 to x2 from a forged address", netns: paths["x1"], addr: "10.0.1.11:7000", from: netip.MustParseAddr("10.0.1.12")},
		{desc: "x1 to x2 from its own address", netns: paths["x1"], addr: "10.0.1.11:7000", from: x1.addr(), want: "x2"},
	})
	x3 := inst{"x3", x, A, 13}
	paths["x3"] = start(t, drivers, "", x3)["x3"]
	syncAll(t, drivers, x1, x2, x3, y1, y2)
	x3got := udpListen(t, paths["x3"], "0.0.0.0:7003")
	udpSend(t, paths["x1"], netip.MustParseAddr("10.0.1.12"), "10.0.1.13:7003", "forged")
	time.Sleep(200 * time.Millisecond)
	udpSend(t, paths["x1"], x1.addr(), "10.0.1.13:7003", "own")
	select {
	case s := <-x3got:
		if s != "own" {
			t.Fatalf("x3 received %q from a forged address", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("x3 never received x1's datagram from its own address")
	}

	// x1 claims x3's address in ARP (a gratuitous reply, then a request
	// from it): the router still reaches x3, and keeps no entry that
	// points x3's address at x1.
	x1MAC, _ := net.ParseMAC(macOf(x1.addr()))
	for _, op := range []uint16{2, 1} {
		sendARP(t, paths["x1"], op, x1MAC, x3.addr(), netip.MustParseAddr("10.0.1.1"))
	}
	time.Sleep(200 * time.Millisecond)
	rh, err := handleIn(drivers[A].routerNS(x.vni))
	if err != nil {
		t.Fatal(err)
	}
	neighs, _ := rh.NeighList(0, netlink.FAMILY_V4)
	rh.Close()
	for _, nb := range neighs {
		if a, _ := netip.AddrFromSlice(nb.IP.To4()); a == x3.addr() && nb.HardwareAddr.String() == x1MAC.String() {
			t.Errorf("the router holds x3's address at x1's MAC after x1's ARP: %+v", nb)
		}
	}
	serve(t, paths["x3"], "0.0.0.0:7000", "x3")
	runChecks(t, []check{{desc: "x2 to x3 after x1 claimed x3's address", netns: paths["x2"], addr: "10.0.1.13:7000", want: "x3 10.0.1.11:"}})

	// A VXLAN packet for y's VNI, from y1 to y2, to host B's VXLAN port.
	got := udpListen(t, paths["y2"], "0.0.0.0:7002")
	inject := func(netnsPath, payload string) {
		t.Helper()
		pkt := vxlanPacket(y.vni, vtepMAC(A.underlay), vtepMAC(B.underlay), y1.addr(), y2.addr(), 7002, payload)
		if err := inNetns(netnsPath, func() error {
			c, err := net.Dial("udp4", net.JoinHostPort(B.underlay.String(), "4789"))
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(pkt)
			return err
		}); err != nil {
			t.Fatalf("send from %s: %v", netnsPath, err)
		}
	}
	inject(paths["x1"], "from x1")
	time.Sleep(200 * time.Millisecond)
	inject(A.path(), "from host A")
	select {
	case s := <-got:
		if s != "from host A" {
			t.Fatalf("y2 received %q: an instance of another network injected into y's VNI", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the VXLAN packet from host A never reached y2: the injection check cannot tell")
	}
	select {
	case s := <-got:
		t.Fatalf("y2 received %q too", s)
	case <-time.After(200 * time.Millisecond):
	}
}

// sendARP sends an ARP packet (op 1 request, 2 reply) out of eth0 in a
// namespace, from mac claiming sender, to target, broadcast.
func sendARP(t *testing.T, netnsPath string, op uint16, mac net.HardwareAddr, sender, target netip.Addr) {
	t.Helper()
	frame := make([]byte, 0, 42)
	frame = append(frame, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	frame = append(frame, mac...)
	frame = append(frame, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, byte(op>>8), byte(op))
	s, d := sender.As4(), target.As4()
	frame = append(frame, mac...)
	frame = append(frame, s[:]...)
	frame = append(frame, 0, 0, 0, 0, 0, 0)
	frame = append(frame, d[:]...)
	if err := inNetns(netnsPath, func() error {
		ifi, err := net.InterfaceByName(InstanceIf)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Protocol: 0x0608, Ifindex: ifi.Index, Halen: 6,
			Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
	}); err != nil {
		t.Fatal(err)
	}
}

// udpListen receives datagrams on addr in a namespace.
func udpListen(t *testing.T, netnsPath, addr string) <-chan string {
	t.Helper()
	got := make(chan string, 4)
	var ln net.PacketConn
	if err := inNetns(netnsPath, func() (err error) {
		ln, err = net.ListenPacket("udp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := ln.ReadFrom(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

// udpSend sends a datagram from a namespace, from an address of its.
func udpSend(t *testing.T, netnsPath string, from netip.Addr, to, payload string) {
	t.Helper()
	if err := inNetns(netnsPath, func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: from.AsSlice()}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(to)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte(payload))
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// vxlanPacket is a VXLAN payload carrying an IPv4 UDP datagram.
func vxlanPacket(vni uint32, srcMAC, dstMAC net.HardwareAddr, src, dst netip.Addr, port uint16, payload string) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 5555)
	binary.BigEndian.PutUint16(udp[2:], port)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...) // checksum 0: none, as IPv4 allows
	ip := make([]byte, 20)
	ip[0], ip[8], ip[9] = 0x45, 64, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
	binary.BigEndian.PutUint16(ip[6:], 0x4000)
	s, d := src.As4(), dst.As4()
	copy(ip[12:], s[:])
	copy(ip[16:], d[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	out := []byte{0x08, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}
	out = append(out, dstMAC...)
	out = append(out, srcMAC...)
	out = append(out, 0x08, 0x00)
	out = append(out, ip...)
	return append(out, udp...)
}

// TestOverlaySync: an endpoint removed from the view becomes unreachable,
// one added becomes reachable, a narrowed security group stops new
// connections, and the running instances' interfaces are left as they
// are.
func TestOverlaySync(t *testing.T) {
	need(t)
	f := newFabric(t, 2)
	A, B := f.hosts[0], f.hosts[1]
	cloud := testCloud()
	drivers := map[*simHost]*Overlay{A: newOverlayOn(t, A, cloud), B: newOverlayOn(t, B, cloud)}
	x := vnet{"net-x", 100}
	i1, i2, i3 := inst{"i1", x, A, 10}, inst{"i2", x, B, 11}, inst{"i3", x, B, 12}
	paths := start(t, drivers, "7000", i1, i2, i3)
	syncAll(t, drivers, i1, i2)
	runChecks(t, []check{
		{desc: "i1 to i2 (in the view)", netns: paths["i1"], addr: "10.0.1.11:7000", want: "i2"},
		{desc: "i1 to i3 (not yet in the view)", netns: paths["i1"], addr: "10.0.1.12:7000"},
	})
	ifindexes := func() map[string]int {
		out := map[string]int{}
		for _, in := range []inst{i1, i2, i3} {
			d := drivers[in.host]
			d.mu.Lock()
			oi := d.insts[in.id]
			d.mu.Unlock()
			h, err := handleIn(d.routerNS(x.vni))
			if err != nil {
				t.Fatal(err)
			}
			l, err := h.LinkByName(oi.veth)
			h.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[in.id] = l.Attrs().Index
		}
		return out
	}
	before := ifindexes()
	syncAll(t, drivers, i1, i3)
	runChecks(t, []check{
		{desc: "i1 to i2 (gone from the view)", netns: paths["i1"], addr: "10.0.1.11:7000"},
		{desc: "i1 to i3 (added)", netns: paths["i1"], addr: "10.0.1.12:7000", want: "i3 10.0.1.10:"},
		{desc: "i3 to i1 (added)", netns: paths["i3"], addr: "10.0.1.10:7000", want: "i1 10.0.1.12:"},
	})
	// A group that opens port 7001 only: new connections to 7000 stop,
	// those to 7001 pass.
	serve(t, paths["i3"], "0.0.0.0:7001", "i3-7001")
	narrow := view(i1, i3)
	narrow[0].SecurityGroups[0].Ingress = []agentapi.RuleSpec{{Protocol: "tcp", FromPort: 7001, ToPort: 7001, Peers: []string{"10.0.0.0/16"}}}
	for _, d := range drivers {
		if err := d.Sync(t.Context(), narrow); err != nil {
			t.Fatal(err)
		}
	}
	runChecks(t, []check{
		{desc: "i1 to i3:7000 (no longer open)", netns: paths["i1"], addr: "10.0.1.12:7000"},
		{desc: "i1 to i3:7001 (open)", netns: paths["i1"], addr: "10.0.1.12:7001", want: "i3-7001"},
	})
	if after := ifindexes(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("Sync remade instances' interfaces: %v, before %v", after, before)
	}
}

// TestOverlayTeardown: a second cloud's driver on the same hosts keeps
// its objects and its traffic through the first one's teardowns, restart
// and Destroy; a restarted driver finds its instances, and Reconcile
// drops the ones that are gone; after every teardown and Destroy nothing
// of the first cloud is left on either host (newOverlayOn checks).
func TestOverlayTeardown(t *testing.T) {
	need(t)
	f := newFabric(t, 2)
	A, B := f.hosts[0], f.hosts[1]
	c1, c2 := testCloud(), testCloud()
	other := map[*simHost]*Overlay{A: newOverlayOn(t, A, c2), B: newOverlayOn(t, B, c2)}
	o1 := map[*simHost]*Overlay{A: newOverlayOn(t, A, c1), B: newOverlayOn(t, B, c1)}
	n1, n2 := vnet{"net-1", 100}, vnet{"net-2", 300}
	a1, b1, a3 := inst{"a1", n1, A, 10}, inst{"b1", n1, B, 11}, inst{"a3", n1, A, 13}
	p1 := start(t, o1, "7000", a1, b1, a3)
	syncAll(t, o1, a1, b1, a3)
	a2, b2 := inst{"a2", n2, A, 10}, inst{"b2", n2, B, 11}
	p2 := start(t, other, "7000", a2, b2)
	syncAll(t, other, a2, b2)

	// The same VNI on the same host and port as another cloud's is
	// refused, and leaves nothing.
	clash := inst{"clash", vnet{"net-c", 300}, A, 20}
	if _, err := o1[A].Setup(t.Context(), clash.id, clash.spec()); err == nil || !strings.Contains(err.Error(), "taken") {
		t.Fatalf("a VNI another cloud has on the host: %v", err)
	}
	if nsExists(o1[A].instNS("clash")) || nsExists(o1[A].routerNS(300)) {
		t.Fatal("the refused setup left its namespaces")
	}
	checks := []check{
		{desc: "cloud 2: a2 to b2", netns: p2["a2"], addr: "10.0.1.11:7000", want: "b2"},
	}
	runChecks(t, append(checks, check{desc: "cloud 1: a1 to b1", netns: p1["a1"], addr: "10.0.1.11:7000", want: "b1"}))

	// A restarted driver finds its instances; Reconcile drops a3.
	again, err := NewOverlay(t.Context(), o1[A].cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(again.Instances(), " "); got != "a1 a3" {
		t.Fatalf("the restarted driver found %q", got)
	}
	runChecks(t, []check{{desc: "cloud 1: a1 to b1 after the restart, before a view", netns: p1["a1"], addr: "10.0.1.11:7000", want: "b1"}})
	if err := again.Reconcile(t.Context(), []string{"a1"}); err != nil {
		t.Fatal(err)
	}
	if nsExists(o1[A].instNS("a3")) {
		t.Fatal("Reconcile left a3's namespace")
	}
	if err := again.Sync(t.Context(), view(a1, b1)); err != nil {
		t.Fatal(err)
	}
	runChecks(t, append(checks, check{desc: "cloud 1: a1 to b1 after the restart", netns: p1["a1"], addr: "10.0.1.11:7000", want: "b1"}))

	for _, step := range []struct {
		d  *Overlay
		id string
	}{{again, "a1"}, {o1[B], "b1"}} {
		if err := step.d.Teardown(t.Context(), step.id); err != nil {
			t.Fatal(err)
		}
		if err := step.d.Teardown(t.Context(), step.id); err != nil {
			t.Fatalf("a second teardown of %s: %v", step.id, err)
		}
	}
	for _, h := range []*simHost{A, B} {
		if left := overlayLeftovers(h, c1, o1[h].nsPrefix()); strings.Contains(left, "netns") || strings.Contains(left, "link") || strings.Contains(left, "route") {
			t.Errorf("host %s after every teardown: %s (want the host's table only)", h.name, left)
		}
	}
	for _, d := range o1 {
		if err := d.Destroy(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	runChecks(t, checks)
	if got := strings.Join(other[A].Instances(), " "); got != "a2" {
		t.Fatalf("cloud 2's driver on A has %q", got)
	}
}

// TestOverlayRefusals: a bad configuration is refused before anything is
// made, and a Setup with bad input is refused and leaves nothing.
func TestOverlayRefusals(t *testing.T) {
	for _, tc := range []struct {
		desc string
		cfg  OverlayConfig
		want string
	}{
		{"no identity", OverlayConfig{Underlay: netip.MustParseAddr("10.1.1.1")}, "cloud identity"},
		{"an identity too long", OverlayConfig{Cloud: "abcdefg", Underlay: netip.MustParseAddr("10.1.1.1")}, "cloud identity"},
		{"an identity with capitals", OverlayConfig{Cloud: "Ab", Underlay: netip.MustParseAddr("10.1.1.1")}, "cloud identity"},
		{"no underlay", OverlayConfig{Cloud: "ab"}, "underlay"},
		{"an IPv6 underlay", OverlayConfig{Cloud: "ab", Underlay: netip.MustParseAddr("fd00::1")}, "underlay"},
		{"a transit pool too small", OverlayConfig{Cloud: "ab", Underlay: netip.MustParseAddr("10.1.1.1"), TransitPool: netip.MustParsePrefix("100.65.0.0/31")}, "transit pool"},
		{"a bad port", OverlayConfig{Cloud: "ab", Underlay: netip.MustParseAddr("10.1.1.1"), Port: 70000}, "port"},
	} {
		if _, err := NewOverlay(t.Context(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.desc, err, tc.want)
		}
	}
	for _, tc := range []struct{ fp, want string }{
		{"sha256:ABCDEF0123", "abcdef"}, {"ab:cd:ef:01", "abcdef"}, {"abc", ""}, {"sha256:zzzzzzzz", ""},
	} {
		if got, err := CloudID(tc.fp); got != tc.want || (err == nil) != (tc.want != "") {
			t.Errorf("CloudID(%q) = %q, %v; want %q", tc.fp, got, err, tc.want)
		}
	}

	need(t)
	f := newFabric(t, 1)
	A := f.hosts[0]
	if _, err := NewOverlay(t.Context(), OverlayConfig{Cloud: "ab", HostNetns: A.ns, Underlay: netip.MustParseAddr("192.0.2.1")}); err == nil ||
		!strings.Contains(err.Error(), "no interface") {
		t.Fatalf("an underlay the host does not hold: %v", err)
	}
	o := newOverlayOn(t, A, testCloud())
	good := inst{"i1", vnet{"net-x", 100}, A, 10}
	for _, tc := range []struct {
		desc   string
		id     string
		change func(*runtime.Network)
		want   string
	}{
		{"no network", "i1", nil, "no network"},
		{"a bad instance ID", "a/b", func(*runtime.Network) {}, "instance id"},
		{"a router's name", "n100", func(*runtime.Network) {}, "router"},
		{"VNI 0", "i1", func(n *runtime.Network) { n.VNI = 0 }, "VNI"},
		{"a VNI too large", "i1", func(n *runtime.Network) { n.VNI = 1 << 24 }, "VNI"},
		{"a subnet outside the network", "i1", func(n *runtime.Network) { n.Subnet = netip.MustParsePrefix("10.9.0.0/24") }, "subnet"},
		{"an address outside the subnet", "i1", func(n *runtime.Network) { n.Addr = netip.MustParseAddr("10.0.2.5") }, "address"},
		{"the subnet's own address", "i1", func(n *runtime.Network) { n.Addr = netip.MustParseAddr("10.0.1.0") }, "address"},
		{"the gateway's address", "i1", func(n *runtime.Network) { n.Addr = n.Gateway }, "gateway"},
		{"a multicast MAC", "i1", func(n *runtime.Network) { n.MAC = "01:00:5e:00:00:01" }, "MAC"},
		{"no MAC", "i1", func(n *runtime.Network) { n.MAC = "" }, "MAC"},
	} {
		var n *runtime.Network
		if tc.change != nil {
			n = good.spec()
			tc.change(n)
		}
		if _, err := o.Setup(t.Context(), tc.id, n); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error about %s", tc.desc, err, tc.want)
		}
	}
	// Another network on a VNI the host has for one: refused.
	start(t, map[*simHost]*Overlay{A: o}, "", good)
	other := good.spec()
	other.ID = "net-other"
	if _, err := o.Setup(t.Context(), "i2", other); err == nil || !strings.Contains(err.Error(), "VNI 100 is network net-x") {
		t.Errorf("another network on VNI 100: %v", err)
	}
	// The same address twice in one network: refused.
	if _, err := o.Setup(t.Context(), "i3", good.spec()); err == nil || !strings.Contains(err.Error(), "is instance i1's") {
		t.Errorf("a second instance at i1's address: %v", err)
	}
	if got := strings.Join(o.Instances(), " "); got != "i1" {
		t.Fatalf("instances after the refusals: %q", got)
	}
	for _, id := range []string{"i2", "i3", "n100x", "a"} {
		if nsExists(o.instNS(id)) {
			t.Errorf("a refused setup left the namespace of %s", id)
		}
	}
}

// TestCPUMask: the sysfs cpumask of a set of CPUs, nothing for one.
func TestCPUMask(t *testing.T) {
	for _, c := range []struct {
		cpus []int
		want string
	}{
		{nil, ""},
		{[]int{0}, ""},
		{[]int{5}, ""},
		{[]int{0, 1}, "3"},
		{[]int{1, 3}, "a"},
		{[]int{0, 31}, "80000001"},
		{[]int{0, 33}, "2,00000001"},
		{[]int{2, 70}, "40,00000000,00000004"},
	} {
		var set unix.CPUSet
		for _, cpu := range c.cpus {
			set.Set(cpu)
		}
		if got := cpuMask(set); got != c.want {
			t.Errorf("cpuMask(%v) = %q, want %q", c.cpus, got, c.want)
		}
	}
	all := make([]int, 40)
	var set unix.CPUSet
	for i := range all {
		set.Set(i)
	}
	if got := cpuMask(set); got != "ff,ffffffff" {
		t.Errorf("cpuMask(0-39) = %q, want ff,ffffffff", got)
	}
}
