//go:build linux

package fabric

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// The kernel tests make real fabrics: root, ip and nft needed. Each uses
// identities of its own ("t", four hex digits of the test's PID, a
// letter) and removes what it made.

func needKernel(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := findTool("", tool, tool); err != nil {
			t.Skip(err)
		}
	}
}

// testCloud is an identity of this test process's, one per letter.
func testCloud(letter string) string { return fmt.Sprintf("t%04x%s", os.Getpid()&0xffff, letter) }

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newFabric makes a fabric that is closed (and checked gone) at the
// test's end.
func newFabric(t *testing.T, cfg Config) *Fabric {
	t.Helper()
	cfg.Log = quietLog()
	f, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Close(context.Background()); err != nil {
			t.Error(err)
		}
		if left := leftovers(cfg.Cloud); left != "" {
			t.Errorf("after Close, cloud %s left %s", cfg.Cloud, left)
		}
	})
	return f
}

// leftovers lists what of cloud's is on the machine: links with its alias
// or names, host namespaces, its table, its lock file.
func leftovers(cloud string) string {
	var left []string
	links, _ := netlink.LinkList()
	for _, l := range links {
		if _, host := hostIndex(cloud, l.Attrs().Name); host || l.Attrs().Alias == Alias(cloud) || l.Attrs().Name == BridgeName(cloud) {
			left = append(left, "link "+l.Attrs().Name)
		}
	}
	ents, _ := os.ReadDir(netnsDir)
	for _, e := range ents {
		if _, host := hostIndex(cloud, e.Name()); host {
			left = append(left, "netns "+e.Name())
		}
	}
	if out, _ := exec.Command("nft", "list", "tables").Output(); hasTable(out, Table(cloud)) {
		left = append(left, "table "+Table(cloud))
	}
	if _, err := os.Stat(ownerLock(cloud)); err == nil {
		left = append(left, "lock "+ownerLock(cloud))
	}
	return strings.Join(left, ", ")
}

// sh runs a command and fails the test with its output if it fails.
func sh(t *testing.T, prog string, args ...string) {
	t.Helper()
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", prog, strings.Join(args, " "), err, out)
	}
}

// listen opens a TCP listener in a namespace ("" is the test's own) at
// addr, port chosen by the kernel; each connection is told the address it
// came from, then closed.
func listen(t *testing.T, ns string, addr netip.Addr) netip.AddrPort {
	t.Helper()
	var l net.Listener
	open := func() (err error) {
		l, err = net.Listen("tcp4", netip.AddrPortFrom(addr, 0).String())
		return err
	}
	var err error
	if ns == "" {
		err = open()
	} else {
		err = inNetns(ns, open)
	}
	if err != nil {
		t.Fatalf("listen in %q at %v: %v", ns, addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, c.RemoteAddr())
			c.Close()
		}
	}()
	return netip.MustParseAddrPort(l.Addr().String())
}

// reach connects from a namespace ("" is the test's own) to a listener
// and returns the address the listener saw the connection come from.
func reach(ns string, to netip.AddrPort) (netip.AddrPort, error) {
	var c net.Conn
	dial := func() (err error) {
		c, err = net.DialTimeout("tcp4", to.String(), time.Second)
		return err
	}
	var err error
	if ns == "" {
		err = dial()
	} else {
		err = inNetns(ns, dial)
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("read: %w", err)
	}
	return netip.ParseAddrPort(strings.TrimSpace(line))
}

// checkHost checks what New made for host h in the kernel.
func checkHost(t *testing.T, f *Fabric, i int, h Host) {
	t.Helper()
	root, err := netlink.LinkByName(h.Netns)
	if err != nil {
		t.Fatalf("host %d: the veth's end on the bridge: %v", i, err)
	}
	br, err := netlink.LinkByName(BridgeName(f.Cloud()))
	if err != nil {
		t.Fatal(err)
	}
	if root.Attrs().MasterIndex != br.Attrs().Index || root.Attrs().Alias != Alias(f.Cloud()) || root.Attrs().MTU != f.MTU() {
		t.Errorf("host %d: veth end %+v: want a port of %s with alias %q and MTU %d", i, root.Attrs(), br.Attrs().Name, Alias(f.Cloud()), f.MTU())
	}
	out, err := exec.Command("ip", "-n", h.Netns, "-4", "-o", "addr", "show", "dev", HostLink).CombinedOutput()
	if err != nil || !strings.Contains(string(out), h.Underlay.String()+"/"+fmt.Sprint(f.Prefix().Bits())) {
		t.Errorf("host %d: %s in %s: %s %v", i, HostLink, h.Netns, out, err)
	}
	out, err = exec.Command("ip", "-n", h.Netns, "link", "show", "dev", HostLink).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf(" mtu %d ", f.MTU())) || !strings.Contains(string(out), "alias "+Alias(f.Cloud())) {
		t.Errorf("host %d: %s in %s: %s %v; want MTU %d and the fabric's alias", i, HostLink, h.Netns, out, err, f.MTU())
	}
	out, err = exec.Command("ip", "-n", h.Netns, "-4", "route", "show", "default").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "via "+f.Gateway().String()+" dev "+HostLink) {
		t.Errorf("host %d: default route in %s: %s %v", i, h.Netns, out, err)
	}
	for key, want := range map[string]string{"ipv4/ip_forward": "1", "ipv4/conf/all/rp_filter": "2", "ipv4/conf/" + HostLink + "/rp_filter": "2"} {
		var got []byte
		if err := inNetns(h.Netns, func() (err error) { got, err = os.ReadFile("/proc/sys/net/" + key); return err }); err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("host %d: net/%s in %s = %q, %v; want %s", i, key, h.Netns, got, err, want)
		}
	}
}

// TestTwoFabrics: two clouds' fabrics side by side. Each host reaches the
// other hosts of its fabric, never those of the other fabric, and not the
// agent's namespace, which reaches them; the hosts reach the outside
// through the agent's namespace, masqueraded. Closing one leaves the
// other whole and working.
func TestTwoFabrics(t *testing.T) {
	needKernel(t)
	ca, cb := testCloud("a"), testCloud("b")
	a := newFabric(t, Config{Cloud: ca, Hosts: 2})
	b := newFabric(t, Config{Cloud: cb, Hosts: 2, MTU: 1400})
	if a.Prefix() == b.Prefix() || a.Prefix().Overlaps(b.Prefix()) {
		t.Fatalf("prefixes %v and %v overlap", a.Prefix(), b.Prefix())
	}
	for _, f := range []*Fabric{a, b} {
		if !DefaultRange.Contains(f.Prefix().Addr()) || f.Prefix().Bits() != 24 || f.Gateway() != nth(f.Prefix(), 1) {
			t.Errorf("fabric %s: prefix %v, gateway %v", f.Cloud(), f.Prefix(), f.Gateway())
		}
		hs := f.Hosts()
		if len(hs) != 2 {
			t.Fatalf("fabric %s: %d hosts", f.Cloud(), len(hs))
		}
		for i, h := range hs {
			if h.Netns != HostNetns(f.Cloud(), i) || h.Underlay != nth(f.Prefix(), i+2) {
				t.Errorf("fabric %s: host %d = %+v", f.Cloud(), i, h)
			}
			checkHost(t, f, i, h)
		}
	}
	type host struct {
		f    *Fabric
		ns   string
		addr netip.AddrPort
	}
	var hosts []host
	for _, f := range []*Fabric{a, b} {
		for _, h := range f.Hosts() {
			hosts = append(hosts, host{f, h.Netns, listen(t, h.Netns, h.Underlay)})
		}
	}
	// Every try at once: the ones that must fail wait out their timeout
	// together.
	type try struct {
		from, to string
		addr     netip.AddrPort
		want     bool // reached
		check    func(seen netip.AddrPort) string
	}
	var tries []try
	for _, from := range hosts {
		for _, to := range hosts {
			if from.ns == to.ns {
				continue
			}
			self := from.addr.Addr()
			tries = append(tries, try{from.ns, to.ns, to.addr, from.f == to.f, func(seen netip.AddrPort) string {
				if seen.Addr() != self {
					return fmt.Sprintf("from %v, not its underlay address", seen)
				}
				return ""
			}})
		}
		// The agent's namespace opens connections to the hosts.
		tries = append(tries, try{"", from.ns, from.addr, true, nil})
	}
	// The hosts open none to the agent's namespace, at either fabric's
	// gateway.
	for _, f := range []*Fabric{a, b} {
		gw := listen(t, "", f.Gateway())
		for _, h := range hosts {
			tries = append(tries, try{h.ns, "the agent's namespace", gw, false, nil})
		}
	}
	var wg sync.WaitGroup
	for _, tr := range tries {
		wg.Go(func() {
			seen, err := reach(tr.from, tr.addr)
			switch {
			case tr.want && err != nil:
				t.Errorf("%q cannot reach %s at %v: %v", tr.from, tr.to, tr.addr, err)
			case !tr.want && err == nil:
				t.Errorf("%q reached %s at %v (seen from %v)", tr.from, tr.to, tr.addr, seen)
			case tr.want && tr.check != nil:
				if why := tr.check(seen); why != "" {
					t.Errorf("%q reached %s %s", tr.from, tr.to, why)
				}
			}
		})
	}
	wg.Wait()
	reachOutside(t, a.Hosts()[1].Netns)

	if err := a.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(ca); left != "" {
		t.Errorf("Close of %s left %s", ca, left)
	}
	if left := leftovers(cb); !strings.Contains(left, "link "+BridgeName(cb)) || !strings.Contains(left, "netns "+HostNetns(cb, 1)) ||
		!strings.Contains(left, "table "+Table(cb)) {
		t.Errorf("Close of %s took some of %s's: it has %s", ca, cb, left)
	}
	if _, err := reach(b.Hosts()[0].Netns, hosts[3].addr); err != nil {
		t.Errorf("after %s's Close, %s's hosts do not reach each other: %v", ca, cb, err)
	}
}

// reachOutside connects from a fabric's host to a listener in a namespace
// of the test's, behind a veth of the agent's namespace that forwards
// (as the machine's uplink would), and checks it saw the agent's address.
func reachOutside(t *testing.T, from string) {
	t.Helper()
	ns, link := fmt.Sprintf("t%04xout", os.Getpid()&0xffff), fmt.Sprintf("t%04xo", os.Getpid()&0xffff)
	sh(t, "ip", "netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", link).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	sub := fmt.Sprintf("198.18.%d", os.Getpid()%250)
	sh(t, "ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
	sh(t, "ip", "addr", "add", sub+".2/30", "dev", link)
	sh(t, "ip", "link", "set", link, "up")
	if err := writeSysctl("net/ipv4/conf/"+link+"/forwarding", "1"); err != nil {
		t.Fatal(err)
	}
	sh(t, "ip", "-n", ns, "addr", "add", sub+".1/30", "dev", "eth0")
	sh(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	out := listen(t, ns, netip.MustParseAddr(sub+".1"))
	seen, err := reach(from, out)
	if err != nil {
		t.Errorf("%s cannot reach the outside at %v: %v", from, out, err)
		return
	}
	if seen.Addr().String() != sub+".2" {
		t.Errorf("the outside saw %s as %v, not the agent's namespace's %s.2", from, seen, sub)
	}
}

// TestNewRefusesOverlap: a prefix that overlaps an address or a route of
// the machine is refused, saying which, and nothing is made; the default
// prefix skips what is taken.
func TestNewRefusesOverlap(t *testing.T) {
	needKernel(t)
	cloud := testCloud("c")
	dummy := fmt.Sprintf("t%04xd", os.Getpid()&0xffff)
	sh(t, "ip", "link", "add", dummy, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", dummy).Run() })
	first, routed := DefaultPrefix(cloud), candidate(cloud, 5)
	sh(t, "ip", "addr", "add", nth(first, 9).String()+"/24", "dev", dummy)
	sh(t, "ip", "link", "set", dummy, "up")
	sh(t, "ip", "route", "add", routed.String(), "dev", dummy)
	wider := netip.PrefixFrom(routed.Addr(), 22).Masked()
	for _, tc := range []struct {
		prefix netip.Prefix
		want   string
	}{
		{first, fmt.Sprintf("fabric %v overlaps address %v/24 on dev %s; pass --fabric-prefix", first, nth(first, 9), dummy)},
		{netip.PrefixFrom(nth(first, 8), 29), "overlaps address " + nth(first, 9).String()},
		{routed, fmt.Sprintf("fabric %v overlaps route %v on dev %s; pass --fabric-prefix", routed, routed, dummy)},
		{wider, fmt.Sprintf("overlaps route %v on dev %s", routed, dummy)},
	} {
		_, err := New(t.Context(), Config{Cloud: cloud, Hosts: 2, Prefix: tc.prefix, Log: quietLog()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("prefix %v: %v; want an error saying %q", tc.prefix, err, tc.want)
		}
		if left := leftovers(cloud); left != "" {
			t.Errorf("prefix %v: the refusal left %s", tc.prefix, left)
		}
	}
	f := newFabric(t, Config{Cloud: cloud, Hosts: 1})
	if f.Prefix() == first || f.Prefix().Overlaps(routed) || !DefaultRange.Contains(f.Prefix().Addr()) {
		t.Errorf("default prefix %v: want the first free /24 of %v after %v", f.Prefix(), DefaultRange, first)
	}
	if f.Prefix() != candidate(cloud, 1) {
		t.Logf("default prefix %v, not the next candidate %v: something else of the machine's holds that", f.Prefix(), candidate(cloud, 1))
	}
}

// TestNewRefusesForeignNames: a name the fabric needs that something else
// holds (an interface, a namespace) is refused and left alone, and a
// fabric held by another owner is refused while that one lives.
func TestNewRefusesForeignNames(t *testing.T) {
	needKernel(t)
	cloud := testCloud("d")
	prefix := candidate(cloud, 3)
	for _, tc := range []struct {
		name  string
		make  []string
		undo  []string
		want  string
		check func() bool // is the foreign object still there
	}{
		{"bridge name", []string{"ip link add " + BridgeName(cloud) + " type bridge"}, []string{"ip link del " + BridgeName(cloud)},
			"interface " + BridgeName(cloud) + " exists and is not the fabric of cloud " + cloud,
			func() bool { _, err := netlink.LinkByName(BridgeName(cloud)); return err == nil }},
		{"veth name", []string{"ip link add " + HostNetns(cloud, 1) + " type bridge"}, []string{"ip link del " + HostNetns(cloud, 1)},
			"interface " + HostNetns(cloud, 1) + " exists",
			func() bool { _, err := netlink.LinkByName(HostNetns(cloud, 1)); return err == nil }},
		{"namespace", []string{"ip netns add " + HostNetns(cloud, 0), "ip -n " + HostNetns(cloud, 0) + " link add x0 type bridge"},
			[]string{"ip netns del " + HostNetns(cloud, 0)},
			"network namespace " + HostNetns(cloud, 0) + " exists and is not the fabric of cloud " + cloud,
			func() bool {
				return exec.Command("ip", "-n", HostNetns(cloud, 0), "link", "show", "x0").Run() == nil
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range tc.make {
				f := strings.Fields(c)
				sh(t, f[0], f[1:]...)
			}
			t.Cleanup(func() {
				for _, c := range tc.undo {
					f := strings.Fields(c)
					_ = exec.Command(f[0], f[1:]...).Run()
				}
			})
			_, err := New(t.Context(), Config{Cloud: cloud, Hosts: 2, Prefix: prefix, Log: quietLog()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v; want an error saying %q", err, tc.want)
			}
			if !tc.check() {
				t.Errorf("New removed what was not its own")
			}
			if _, err := netlink.LinkByName(BridgeName(cloud)); err == nil && tc.name != "bridge name" {
				t.Errorf("the refusal left the bridge")
			}
		})
	}
	// A fabric of the same identity that another owner holds.
	f := newFabric(t, Config{Cloud: cloud, Hosts: 1, Prefix: prefix})
	if _, err := New(t.Context(), Config{Cloud: cloud, Hosts: 1, Log: quietLog()}); !errors.Is(err, ErrInUse) ||
		!strings.Contains(err.Error(), fmt.Sprintf("in use by another process (pid %d): the fabric of cloud %s;", os.Getpid(), cloud)) {
		t.Errorf("a second New of %s: %v; want ErrInUse naming this process", cloud, err)
	}
	checkHost(t, f, 0, f.Hosts()[0])
}

// TestStaleFabric: a fabric whose process stopped without Close (its lock
// let go, its objects left) is removed by the next New of its identity,
// which then builds its own, with fewer hosts here.
func TestStaleFabric(t *testing.T) {
	needKernel(t)
	cloud := testCloud("e")
	old, err := New(t.Context(), Config{Cloud: cloud, Hosts: 3, Log: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	// The crash: the process's lock goes with it, nothing else does.
	old.owner.Close()
	old = nil
	left := leftovers(cloud)
	if !strings.Contains(left, "netns "+HostNetns(cloud, 2)) || !strings.Contains(left, "link "+BridgeName(cloud)) {
		t.Fatalf("the crashed fabric left %s", left)
	}
	f := newFabric(t, Config{Cloud: cloud, Hosts: 1})
	if _, err := os.Lstat(filepath.Join(netnsDir, HostNetns(cloud, 1))); err == nil {
		t.Errorf("host 1 of the crashed fabric is still there")
	}
	if _, err := netlink.LinkByName(HostNetns(cloud, 2)); err == nil {
		t.Errorf("the veth of host 2 of the crashed fabric is still there")
	}
	checkHost(t, f, 0, f.Hosts()[0])
	if _, err := reach("", netip.AddrPortFrom(f.Hosts()[0].Underlay, listen(t, f.Hosts()[0].Netns, f.Hosts()[0].Underlay).Port())); err != nil {
		t.Errorf("the new fabric's host: %v", err)
	}
}

// TestRoute: an address routed to a host is reached there from the agent's
// namespace, and no longer once unrouted; routes inside the fabric's
// prefix, or of no host, are refused.
func TestRoute(t *testing.T) {
	needKernel(t)
	f := newFabric(t, Config{Cloud: testCloud("f"), Hosts: 2})
	h := f.Hosts()[1]
	pub := netip.MustParsePrefix(fmt.Sprintf("198.19.%d.7/32", os.Getpid()%250))
	sh(t, "ip", "-n", h.Netns, "addr", "add", pub.String(), "dev", "lo")
	to := listen(t, h.Netns, pub.Addr())
	if err := f.Route(pub, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := reach("", to); err != nil {
		t.Errorf("routed to host 1, %v is not reached: %v", pub, err)
	}
	if err := f.Unroute(pub); err != nil {
		t.Fatal(err)
	}
	if _, err := reach("", to); err == nil {
		t.Errorf("unrouted, %v is still reached", pub)
	}
	if err := f.Unroute(pub); err != nil {
		t.Errorf("Unroute again: %v", err)
	}
	for _, tc := range []struct {
		dst  netip.Prefix
		host int
		want string
	}{
		{netip.PrefixFrom(f.Gateway(), 32), 0, "outside the fabric's"},
		{netip.MustParsePrefix("0.0.0.0/0"), 0, "not a default route"},
		{netip.MustParsePrefix("fd00::/64"), 0, "want an IPv4 prefix"},
		{pub, 2, "no host 2"},
	} {
		if err := f.Route(tc.dst, tc.host); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Route(%v, %d) = %v; want an error saying %q", tc.dst, tc.host, err, tc.want)
		}
	}
	if err := f.Route(pub, 0); err != nil {
		t.Fatal(err)
	}
	// The route goes with the fabric.
	if err := f.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("ip", "route", "show", pub.String()).Output(); len(strings.TrimSpace(string(out))) != 0 {
		t.Errorf("Close left the route: %s", out)
	}
}
