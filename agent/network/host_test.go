//go:build linux

package network

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The tests below build the instance network on this host, in the host's
// own network namespace, with names of their own (table, interface
// prefix, instance subnet), and remove everything they made. They need
// root, ip(8) and nft(8): without them they fail when CI is set and skip
// otherwise, saying why.

// need skips or fails a test that needs the host's network.
func need(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "the instance network needs root"
	}
	for _, tool := range []struct{ name, pkg string }{{"ip", "iproute2"}, {"nft", "nftables"}} {
		if _, err := findTool("", tool.name, tool.pkg); err != nil && why == "" {
			why = err.Error() + "; .ci/tools.sh installs it"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the instance network tests must run in CI: %s", why)
	}
	t.Skipf("skipping the instance network tests: %s", why)
}

func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// freeSubnet picks a /16 of 10.140.0.0-10.189.0.0 that no route of the
// host overlaps. The test packages that make instance networks each have
// a range of their own (e2e 10.100-139, the containerd runtime 10.190-239),
// since go test runs packages at once and a route check cannot see a
// subnet another package is about to take.
func freeSubnet(t *testing.T) netip.Prefix {
	t.Helper()
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	var routes []netip.Prefix
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		for _, w := range f {
			if p, err := netip.ParsePrefix(w); err == nil {
				routes = append(routes, p)
			} else if a, err := netip.ParseAddr(w); err == nil {
				routes = append(routes, netip.PrefixFrom(a, 32))
			}
		}
	}
	for range 200 {
		b := make([]byte, 1)
		_, _ = rand.Read(b)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 140 + b[0]%50, 0, 0}), 16)
		if !slices.ContainsFunc(routes, func(r netip.Prefix) bool { return r.Overlaps(p) && r.Bits() > 0 }) {
			return p
		}
	}
	t.Fatal("no free /16 in 10.0.0.0/8")
	return netip.Prefix{}
}

// testConfig is a configuration of names no one else uses.
func testConfig(t *testing.T) Config {
	suffix := randHex(4)
	return Config{
		Subnet: freeSubnet(t), Table: "gct" + suffix, IfPrefix: "t" + suffix,
		IP: "", NFT: "",
	}
}

// newNet makes a network and removes all of it when the test ends,
// failing the test if anything of it is left.
func newNet(t *testing.T, cfg Config) *Network {
	t.Helper()
	n, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := n.Destroy(ctx); err != nil {
			t.Errorf("destroy: %v", err)
		}
		if left := leftovers(n); left != "" {
			t.Errorf("left on the host after Destroy: %s", left)
		}
	})
	return n
}

// leftovers lists what of the network is on the host: links, namespaces,
// tables.
func leftovers(n *Network) string {
	var left []string
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, n.cfg.IfPrefix) {
			left = append(left, "link "+i.Name)
		}
	}
	ents, _ := os.ReadDir(NetnsDir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), n.cfg.Table+"-") {
			left = append(left, "netns "+e.Name())
		}
	}
	out, _ := exec.Command(n.cfg.NFT, "list", "tables").Output()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasSuffix(l, " "+n.cfg.Table) {
			left = append(left, l)
		}
	}
	return strings.Join(left, ", ")
}

// inNetns runs f on a thread inside the network namespace at path (""
// for the host's).
func inNetns(path string, f func() error) error {
	if path == "" {
		return f()
	}
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open(path)
		if err != nil {
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- err
			return
		}
		err = f()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread() // else the thread ends with the goroutine
		}
		ch <- err
	}()
	return <-ch
}

// serve listens on addr in a namespace and answers each connection with
// name and the peer's address, then closes it.
func serve(t *testing.T, netns, addr, name string) string {
	t.Helper()
	var ln net.Listener
	if err := inNetns(netns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, netns, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s %s\n", name, c.RemoteAddr())
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// dial connects from a namespace to addr and reads the answer's line.
func dial(netns, addr string, from netip.Addr, timeout time.Duration) (string, error) {
	var c net.Conn
	err := inNetns(netns, func() (err error) {
		d := net.Dialer{Timeout: timeout}
		if from.IsValid() {
			d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
		}
		c, err = d.Dial("tcp4", addr)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// check is one connection the test tries; want "" means it must fail.
type check struct {
	desc        string
	netns, addr string
	from        netip.Addr
	want        string // a prefix of the answer
}

// runChecks tries the connections in parallel.
func runChecks(t *testing.T, checks []check) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []string
	for _, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := dial(c.netns, c.addr, c.from, 1500*time.Millisecond)
			// A path that must work gets a few tries: on a loaded
			// machine (CI runs packages side by side) a first SYN or
			// ARP can be late. One that must not work gets one, which
			// must time out or be refused.
			for try := 1; c.want != "" && err != nil && try < 4; try++ {
				got, err = dial(c.netns, c.addr, c.from, 2*time.Second)
			}
			var msg string
			switch {
			case c.want == "" && err == nil:
				msg = fmt.Sprintf("%s: reached %s: %q", c.desc, c.addr, got)
			case c.want != "" && err != nil:
				msg = fmt.Sprintf("%s: %s unreachable: %v", c.desc, c.addr, err)
			case c.want != "" && !strings.HasPrefix(got, c.want):
				msg = fmt.Sprintf("%s: %s answered %q, want %q...", c.desc, c.addr, got, c.want)
			}
			if msg != "" {
				mu.Lock()
				errs = append(errs, msg)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(errs)
	for _, e := range errs {
		t.Error(e)
	}
}

// outside is a namespace standing for the world beyond the host: a veth
// from the host, whose addresses are in 198.18.0.0/15 (a benchmarking
// range, not one the network blocks).
type outside struct {
	netns, path  string
	hostAddr     netip.Addr // the host's end
	addr, second netip.Addr // the outside's addresses
}

func newOutside(t *testing.T, cfg Config) *outside {
	t.Helper()
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	o := &outside{
		netns:    "gcout" + randHex(6),
		hostAddr: netip.AddrFrom4([4]byte{198, 18, b[0], 1}),
		addr:     netip.AddrFrom4([4]byte{198, 18, b[0], 2}),
		second:   netip.AddrFrom4([4]byte{198, 18, b[0], 130}),
	}
	o.path = NetnsDir + "/" + o.netns
	veth := "gco" + randHex(8)
	ipRun := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", veth).Run()
		_ = exec.Command("ip", "netns", "del", o.netns).Run()
	})
	ipRun("netns", "add", o.netns)
	ipRun("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", o.netns)
	ipRun("addr", "add", o.hostAddr.String()+"/24", "dev", veth)
	ipRun("link", "set", veth, "up")
	ipRun("-n", o.netns, "addr", "add", o.addr.String()+"/24", "dev", "eth0")
	ipRun("-n", o.netns, "addr", "add", o.second.String()+"/24", "dev", "eth0")
	ipRun("-n", o.netns, "link", "set", "eth0", "up")
	ipRun("-n", o.netns, "link", "set", "lo", "up")
	// Replies come back in through this link: it forwards, as a host's
	// uplink must (the host's own setting is left alone).
	if err := writeSysctl("net/ipv4/conf/"+veth+"/forwarding", "1"); err != nil {
		t.Fatal(err)
	}
	return o
}

// hostAddrs are IPv4 addresses of the host's own links (not the test's).
func hostAddrs(n *Network) []netip.Addr {
	var out []netip.Addr
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if strings.HasPrefix(i.Name, n.cfg.IfPrefix) || i.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := i.Addrs()
		for _, a := range as {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
				out = append(out, p.Addr())
			}
		}
	}
	return out
}

// TestInstanceNetwork builds two tenants' instances on this host and
// checks what each reaches: its tenant's instances and the outside (through
// NAT), and not another tenant's instances, the host's ports, blocked
// destinations, or the outside under a forged address. Then it restarts
// the network (an agent restart), reconciles, and tears everything down.
func TestInstanceNetwork(t *testing.T) {
	need(t)
	cfg := testConfig(t)
	out := newOutside(t, cfg)
	cfg.Blocked = []netip.Prefix{netip.PrefixFrom(out.second, 25).Masked()}
	n := newNet(t, cfg)
	ctx := t.Context()
	paths := map[string]string{}
	for _, in := range []struct{ id, tenant string }{{"a1", "ten-a"}, {"a2", "ten-a"}, {"b1", "ten-b"}} {
		p, err := n.Setup(ctx, in.id, in.tenant, nil)
		if err != nil {
			t.Fatal(err)
		}
		paths[in.id] = p
	}
	info := map[string]Info{}
	for id := range paths {
		i, ok := n.Instance(id)
		if !ok || i.Netns != paths[id] || !i.Prefix.Contains(i.Addr) || !cfg.Subnet.Contains(i.Addr) {
			t.Fatalf("instance %s: %+v", id, i)
		}
		info[id] = i
	}
	if info["a1"].Bridge != info["a2"].Bridge || info["a1"].Prefix != info["a2"].Prefix || info["a1"].Bridge == info["b1"].Bridge ||
		info["a1"].Prefix.Overlaps(info["b1"].Prefix) {
		t.Fatalf("tenants' networks: %+v", info)
	}

	for id, p := range paths {
		assertNoIPv6(t, "instance "+id, p)
	}
	const port = "8080"
	for id, p := range paths {
		serve(t, p, "0.0.0.0:"+port, id)
	}
	serve(t, out.path, out.addr.String()+":"+port, "outside")
	serve(t, out.path, out.second.String()+":"+port, "blocked")
	hostAny := serve(t, "", "0.0.0.0:0", "host")
	_, hostPort, _ := net.SplitHostPort(hostAny)
	hostLo := serve(t, "", "127.0.0.1:0", "host-loopback")
	at := func(a netip.Addr, port string) string { return net.JoinHostPort(a.String(), port) }

	checks := []check{
		{desc: "a1 to a2 (same tenant)", netns: paths["a1"], addr: at(info["a2"].Addr, port), want: "a2 " + info["a1"].Addr.String()},
		{desc: "a2 to a1 (same tenant)", netns: paths["a2"], addr: at(info["a1"].Addr, port), want: "a1 " + info["a2"].Addr.String()},
		{desc: "b1 to a1 (another tenant)", netns: paths["b1"], addr: at(info["a1"].Addr, port)},
		{desc: "a1 to b1 (another tenant)", netns: paths["a1"], addr: at(info["b1"].Addr, port)},
		{desc: "a1 to its gateway's port", netns: paths["a1"], addr: at(info["a1"].Gateway, hostPort)},
		{desc: "a1 to the other tenant's gateway", netns: paths["a1"], addr: at(info["b1"].Gateway, hostPort)},
		{desc: "a1 to the host's end of the outside link", netns: paths["a1"], addr: at(out.hostAddr, hostPort)},
		{desc: "a1 to 127.0.0.1 (its own loopback, not the host's)", netns: paths["a1"], addr: hostLo},
		{desc: "a1 to the outside, through NAT", netns: paths["a1"], addr: at(out.addr, port), want: "outside " + out.hostAddr.String() + ":"},
		{desc: "b1 to the outside, through NAT", netns: paths["b1"], addr: at(out.addr, port), want: "outside " + out.hostAddr.String() + ":"},
		{desc: "a1 to a blocked destination", netns: paths["a1"], addr: at(out.second, port)},
		// The test's own servers answer the host.
		{desc: "the host to its port", addr: at(info["a1"].Gateway, hostPort), want: "host"},
		{desc: "the host to its loopback", addr: hostLo, want: "host-loopback"},
		{desc: "the host to the blocked destination", addr: at(out.second, port), want: "blocked"},
		{desc: "the host to an instance", addr: at(info["b1"].Addr, port), want: "b1"},
	}
	for _, a := range hostAddrs(n) {
		checks = append(checks, check{desc: "a1 to the host's address " + a.String(), netns: paths["a1"], addr: at(a, hostPort)})
	}
	runChecks(t, checks)
	// a1 forges an address of b's block, then one of its own tenant's:
	// the bridge drops both.
	forged := info["b1"].Prefix.Addr().Next().Next().Next().Next()
	neighbour := info["a1"].Prefix.Addr().Next().Next().Next().Next()
	for _, f := range []netip.Addr{forged, neighbour} {
		if o, err := exec.Command("ip", "-n", n.netnsName("a1"), "addr", "add", f.String()+"/32", "dev", InstanceIf).CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, o)
		}
	}
	runChecks(t, []check{
		{desc: "a1 to the outside from b's block", netns: paths["a1"], addr: at(out.addr, port), from: forged},
		{desc: "a1 to a2 from a forged address", netns: paths["a1"], addr: at(info["a2"].Addr, port), from: neighbour},
		{desc: "a1 to a2 from its own address", netns: paths["a1"], addr: at(info["a2"].Addr, port), from: info["a1"].Addr, want: "a2"},
	})
	if t.Failed() {
		out, _ := exec.Command("nft", "list", "ruleset").Output()
		t.Logf("ruleset:\n%s", out)
		return
	}

	// An agent restart: a new network finds the instances; Reconcile
	// with the ones that still run drops the others.
	stray := cfg.IfPrefix + "v00000000"
	if o, err := exec.Command("ip", "link", "add", stray, "type", "bridge").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, o)
	}
	if o, err := exec.Command("ip", "netns", "add", n.netnsName("ghost")).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, o)
	}
	n2, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(n2.Instances(), " "); got != "a1 a2 b1" {
		t.Fatalf("the restarted network found %q", got)
	}
	for id, want := range info {
		if got, _ := n2.Instance(id); got != want {
			t.Fatalf("instance %s after the restart: %+v, want %+v", id, got, want)
		}
	}
	if err := n2.Reconcile(ctx, []string{"a1", "a2"}); err != nil {
		t.Fatal(err)
	}
	if linkExists(stray) || linkExists(info["b1"].Veth) || linkExists(info["b1"].Bridge) {
		t.Fatal("Reconcile left a stray link, or the network of an instance that is gone")
	}
	for _, ns := range []string{n.netnsName("ghost"), n.netnsName("b1")} {
		if _, err := os.Stat(NetnsDir + "/" + ns); err == nil {
			t.Fatalf("Reconcile left the namespace %s", ns)
		}
	}
	runChecks(t, []check{
		{desc: "a1 to a2 after the restart", netns: paths["a1"], addr: at(info["a2"].Addr, port), want: "a2"},
		{desc: "a2 to the outside after the restart", netns: paths["a2"], addr: at(out.addr, port), want: "outside"},
		{desc: "a2 to the host after the restart", netns: paths["a2"], addr: at(info["a2"].Gateway, hostPort)},
	})

	// Teardown leaves nothing of the instance: link, namespace, rule.
	rules := func() string {
		b, err := exec.Command("nft", "list", "table", "bridge", cfg.Table).Output()
		if err != nil {
			t.Fatal(err)
		}
		c, err := exec.Command("nft", "list", "table", "inet", cfg.Table).Output()
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + string(c)
	}
	if r := rules(); !strings.Contains(r, info["a2"].Veth) || strings.Contains(r, info["b1"].Veth) || strings.Contains(r, info["b1"].Bridge) {
		t.Fatalf("rules after reconcile:\n%s", r)
	}
	if err := n2.Teardown(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if err := n2.Teardown(ctx, "a2"); err != nil {
		t.Fatalf("a second teardown: %v", err)
	}
	if r := rules(); strings.Contains(r, info["a2"].Veth) || strings.Contains(r, info["a2"].Addr.String()) || !strings.Contains(r, info["a1"].Bridge) {
		t.Fatalf("rules after a2's teardown:\n%s", r)
	}
	if linkExists(info["a2"].Veth) || !linkExists(info["a1"].Bridge) {
		t.Fatal("a2's veth is left, or its tenant's bridge went while a1 is on it")
	}
	if err := n2.Teardown(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if linkExists(info["a1"].Bridge) {
		t.Fatal("the bridge of a tenant without instances is left")
	}
	if r := rules(); strings.Contains(r, info["a1"].Bridge) || strings.Contains(r, info["a1"].Veth) {
		t.Fatalf("rules after the last teardown:\n%s", r)
	}
	if left := leftovers(n2); !strings.Contains(left, "table") || strings.Contains(left, "link") || strings.Contains(left, "netns") {
		t.Fatalf("left after every teardown: %s (want the tables only)", left)
	}
}

// TestSetupErrors checks refusals, and that a failed setup leaves nothing.
func TestSetupErrors(t *testing.T) {
	need(t)
	cfg := testConfig(t)
	cfg.Subnet = netip.PrefixFrom(cfg.Subnet.Addr(), 29)
	cfg.TenantBits = 30 // one tenant block of 1 instance, and another
	n := newNet(t, cfg)
	ctx := t.Context()
	if _, err := n.Setup(ctx, "a/b", "t", nil); err == nil {
		t.Fatal("accepted an instance ID with a slash")
	}
	if _, err := n.Setup(ctx, "i1", "ten a", nil); err == nil {
		t.Fatal("accepted a tenant ID with a space")
	}
	if _, err := n.Setup(ctx, "i1", "ta", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Setup(ctx, "i2", "ta", nil); err == nil || !strings.Contains(err.Error(), "no free address") {
		t.Fatalf("a second instance in a /30: %v", err)
	}
	if _, err := n.Setup(ctx, "i3", "tb", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Setup(ctx, "i4", "tc", nil); err == nil || !strings.Contains(err.Error(), "no free /30") {
		t.Fatalf("a third tenant in a /29 of /30s: %v", err)
	}
	if got := strings.Join(n.Instances(), " "); got != "i1 i3" {
		t.Fatalf("instances %q", got)
	}
	for _, id := range []string{"i2", "i4"} {
		if _, err := os.Stat(n.NetnsPath(id)); err == nil {
			t.Fatalf("the failed setup of %s left its namespace", id)
		}
	}
	// Setting an instance up again gives it a fresh network.
	before, _ := n.Instance("i1")
	if _, err := n.Setup(ctx, "i1", "ta", nil); err != nil {
		t.Fatal(err)
	}
	if after, _ := n.Instance("i1"); after != before {
		t.Fatalf("again: %+v, before %+v", after, before)
	}
}

// assertNoIPv6 fails the test when the network namespace at path has an
// IPv6 address on any interface (a link-local one included: the instance
// networks are IPv4 only and nothing filters IPv6) or IPv6 enabled at all.
func assertNoIPv6(t *testing.T, what, path string) {
	t.Helper()
	var inet6, all, def string
	err := inNS(path, func() error {
		// /proc/net is the process's namespace; thread-self is this
		// thread's, which inNS moved.
		b, err := os.ReadFile("/proc/thread-self/net/if_inet6")
		if err != nil && !os.IsNotExist(err) {
			return err
		}
		inet6 = strings.TrimSpace(string(b))
		a, _ := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
		d, _ := os.ReadFile("/proc/sys/net/ipv6/conf/default/disable_ipv6")
		all, def = strings.TrimSpace(string(a)), strings.TrimSpace(string(d))
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if inet6 != "" {
		t.Errorf("%s has IPv6 addresses:\n%s", what, inet6)
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil && (all != "1" || def != "1") {
		t.Errorf("%s: IPv6 not disabled (all=%q default=%q)", what, all, def)
	}
}
