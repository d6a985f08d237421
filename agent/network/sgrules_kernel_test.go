//go:build linux

package network

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agentapi"
)

// The kernel tests build a network's router namespace as the overlay
// does (a /32 route and proxy ARP per instance veth, the gateway on the
// router's loopback, forwarding on), with an instance namespace at the
// end of each veth, load GroupRuleset's table into the router and try
// real connections through it.

// sgRun runs a program and fails the test with its output if it fails.
func sgRun(t testing.TB, prog string, args ...string) {
	t.Helper()
	if out, err := exec.Command(prog, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", prog, strings.Join(args, " "), err, out)
	}
}

// sgInNetns runs f on a thread inside the named network namespace. A
// socket f makes stays in that namespace after f returns. The thread
// ends with the goroutine unless it got back to its own namespace.
func sgInNetns(netns string, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open("/run/netns/" + netns)
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
			goruntime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// sgSysctl sets a key under /proc/sys/net in a namespace.
func sgSysctl(t testing.TB, netns, key, value string) {
	t.Helper()
	if err := sgInNetns(netns, func() error {
		return os.WriteFile("/proc/sys/net/"+key, []byte(value), 0o644)
	}); err != nil {
		t.Fatalf("sysctl net/%s in %s: %v", key, netns, err)
	}
}

// sgRouter is a router namespace with instance namespaces.
type sgRouter struct {
	netns string
	gw    netip.Addr
	insts map[string]*sgInst
}

// sgInst is an instance namespace; its veth is eth0 there and iface in
// the router.
type sgInst struct {
	name, netns, iface, mac string
	addr                    netip.Addr
}

// sgNewRouter makes the router namespace, with gateway gw on its
// loopback, and an instance namespace for each name, address and MAC.
func sgNewRouter(t testing.TB, gw string, insts [][3]string) *sgRouter {
	t.Helper()
	r := &sgRouter{netns: sgNetns(t, "r"), gw: netip.MustParseAddr(gw), insts: map[string]*sgInst{}}
	sgRun(t, "ip", "-n", r.netns, "link", "set", "lo", "up")
	sgRun(t, "ip", "-n", r.netns, "addr", "add", gw+"/32", "dev", "lo")
	sgSysctl(t, r.netns, "ipv4/ip_forward", "1")
	for i, in := range insts {
		r.addInst(t, fmt.Sprintf("i%d", i), in[0], in[1], in[2])
	}
	return r
}

func (r *sgRouter) addInst(t testing.TB, role, name, addr, mac string) {
	t.Helper()
	in := &sgInst{name: name, netns: sgNetns(t, role), iface: "r-" + name, mac: mac, addr: netip.MustParseAddr(addr)}
	ipr := func(args ...string) { sgRun(t, "ip", append([]string{"-n", r.netns}, args...)...) }
	ipi := func(args ...string) { sgRun(t, "ip", append([]string{"-n", in.netns}, args...)...) }
	ipr("link", "add", in.iface, "type", "veth", "peer", "name", "eth0", "netns", in.netns)
	// Proxy ARP answers for every other address at once (not after
	// proxy_delay): the instance reaches its neighbours through the
	// router.
	sgSysctl(t, r.netns, "ipv4/conf/"+in.iface+"/proxy_arp", "1")
	sgSysctl(t, r.netns, "ipv4/neigh/"+in.iface+"/proxy_delay", "0")
	ipr("link", "set", in.iface, "up")
	ipr("route", "add", addr+"/32", "dev", in.iface)
	ipi("link", "set", "lo", "up")
	ipi("link", "set", "eth0", "address", mac)
	ipi("addr", "add", addr+"/24", "dev", "eth0")
	ipi("link", "set", "eth0", "up")
	ipi("route", "add", "default", "via", r.gw.String())
	r.insts[name] = in
}

// ports is the router's local ports.
func (r *sgRouter) ports() []LocalPort {
	var ps []LocalPort
	for _, in := range r.insts {
		ps = append(ps, LocalPort{InstanceID: "i-" + in.name, Iface: in.iface, Addr: in.addr, MAC: in.mac})
	}
	return ps
}

// load writes and loads the ruleset of groups for members, a map from
// instance name to group IDs.
func (r *sgRouter) load(t testing.TB, groups []sgTestGroup, members map[string][]string, opts RulesetOptions) {
	t.Helper()
	hn := agentapi.HostNetwork{ID: "net-1", CIDR: "10.0.0.0/16"}
	for _, in := range r.insts {
		hn.Endpoints = append(hn.Endpoints, agentapi.Endpoint{InstanceID: "i-" + in.name, Address: in.addr.String(), MAC: in.mac, SecurityGroups: members[in.name]})
	}
	hn.SecurityGroups = sgResolve(groups, hn.Endpoints)
	opts.Gateways = append(opts.Gateways, r.gw)
	script, err := GroupRuleset("sgtest", hn, r.ports(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := sgNft(r.netns, script, "-f", "-"); err != nil {
		t.Fatalf("%v\n---- script:\n%s", err, script)
	}
}

// sgTestGroup is a security group as the API has it: rules with either
// a CIDR or a group as the peer.
type sgTestGroup struct {
	id              string
	ingress, egress []sgTestRule
}

type sgTestRule struct {
	proto         string
	from, to      int
	cidr, groupID string
}

// sgResolve does what the server does for the agent's view: a rule
// naming a group gets the /32 of each of that group's members.
func sgResolve(groups []sgTestGroup, eps []agentapi.Endpoint) []agentapi.GroupRules {
	resolve := func(rs []sgTestRule) []agentapi.RuleSpec {
		var out []agentapi.RuleSpec
		for _, r := range rs {
			spec := agentapi.RuleSpec{Protocol: r.proto, FromPort: r.from, ToPort: r.to}
			if r.cidr != "" {
				spec.Peers = []string{r.cidr}
			}
			for _, e := range eps {
				for _, g := range e.SecurityGroups {
					if r.groupID != "" && g == r.groupID {
						spec.Peers = append(spec.Peers, e.Address+"/32")
					}
				}
			}
			out = append(out, spec)
		}
		return out
	}
	var out []agentapi.GroupRules
	for _, g := range groups {
		out = append(out, agentapi.GroupRules{ID: g.id, Ingress: resolve(g.ingress), Egress: resolve(g.egress)})
	}
	return out
}

// sgServeTCP listens on addr in a namespace and answers each line a
// connection sends with name and the line, until the test ends.
func sgServeTCP(t testing.TB, netns, addr, name string) {
	t.Helper()
	var ln net.Listener
	if err := sgInNetns(netns, func() (err error) {
		ln, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s := bufio.NewScanner(c)
				for s.Scan() {
					if _, err := fmt.Fprintf(c, "%s %s\n", name, s.Text()); err != nil {
						return
					}
				}
			}()
		}
	}()
}

// sgConn is a TCP connection from an instance to a server of
// sgServeTCP.
type sgConn struct {
	c net.Conn
	r *bufio.Reader
}

func sgDial(netns, addr string, timeout time.Duration) (*sgConn, error) {
	var c net.Conn
	err := sgInNetns(netns, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, timeout)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &sgConn{c: c, r: bufio.NewReader(c)}, nil
}

// ask sends a line and returns the answer.
func (c *sgConn) ask(line string, timeout time.Duration) (string, error) {
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(c.c, line); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	return strings.TrimSpace(s), err
}

// sgPing sends an ICMP echo request from a namespace to addr and says
// whether the reply came within timeout.
func sgPing(netns string, to netip.Addr, timeout time.Duration) (bool, error) {
	var pc net.PacketConn
	if err := sgInNetns(netns, func() (err error) {
		pc, err = net.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return false, err
	}
	defer pc.Close()
	id := uint16(os.Getpid())
	msg := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), 0, 1, 's', 'g'}
	var sum uint32
	for i := 0; i < len(msg); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(msg[i:]))
	}
	sum = (sum >> 16) + (sum & 0xffff)
	sum += sum >> 16
	binary.BigEndian.PutUint16(msg[2:], ^uint16(sum))
	if _, err := pc.WriteTo(msg, &net.IPAddr{IP: to.AsSlice()}); err != nil {
		return false, err
	}
	_ = pc.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, nil
			}
			return false, err
		}
		// An echo reply (type 0) from to with our ID.
		if n >= 8 && buf[0] == 0 && binary.BigEndian.Uint16(buf[4:]) == id && from.(*net.IPAddr).IP.Equal(to.AsSlice()) {
			return true, nil
		}
	}
}

// sgCheck is a connection a test tries: from an instance to addr (TCP)
// or, with ping, an echo request to addr's host. ok says whether it must
// work; one that must not must time out (dropped), not be refused.
type sgCheck struct {
	from, addr string
	ping, ok   bool
}

const (
	sgOKTimeout      = 3 * time.Second
	sgDroppedTimeout = 500 * time.Millisecond
)

// sgRunChecks tries the checks at once and reports every one that went
// the wrong way.
func (r *sgRouter) sgRunChecks(t *testing.T, checks []sgCheck) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]string, len(checks))
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			timeout := sgDroppedTimeout
			if c.ok {
				timeout = sgOKTimeout
			}
			netns := r.insts[c.from].netns
			desc := fmt.Sprintf("%s -> %s", c.from, c.addr)
			if c.ping {
				desc = "ping " + desc
				got, err := sgPing(netns, netip.MustParseAddr(c.addr), timeout)
				switch {
				case err != nil:
					errs[i] = fmt.Sprintf("%s: %v", desc, err)
				case got != c.ok:
					errs[i] = fmt.Sprintf("%s: answered %v, want %v", desc, got, c.ok)
				}
				return
			}
			conn, err := sgDial(netns, c.addr, timeout)
			var answer string
			if err == nil {
				answer, err = conn.ask("hello", timeout)
				conn.c.Close()
			}
			var ne net.Error
			switch {
			case c.ok && err != nil:
				errs[i] = fmt.Sprintf("%s: %v, want a connection", desc, err)
			case c.ok && !strings.HasSuffix(answer, " hello"):
				errs[i] = fmt.Sprintf("%s: answered %q", desc, answer)
			case !c.ok && err == nil:
				errs[i] = fmt.Sprintf("%s: connected (%q), want it dropped", desc, answer)
			case !c.ok && !(errors.As(err, &ne) && ne.Timeout()):
				errs[i] = fmt.Sprintf("%s: %v, want a timeout (dropped)", desc, err)
			}
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Error(e)
		}
	}
}

// TestGroupRulesetKernel loads rulesets into a router namespace and tries
// connections between three instances: what the groups allow connects,
// the rest is dropped; a revoked rule stops new connections but not an
// open one; a group-peer rule follows membership; spoofed packets are
// dropped.
func TestGroupRulesetKernel(t *testing.T) {
	sgNeedNft(t)
	r := sgNewRouter(t, "10.0.0.1", [][3]string{
		{"web", "10.0.0.2", "02:00:0a:00:00:02"},
		{"client", "10.0.0.3", "02:00:0a:00:00:03"},
		{"db", "10.0.0.4", "02:00:0a:00:00:04"},
	})
	for _, p := range []string{"7000", "8080", "8081", "9000"} {
		sgServeTCP(t, r.insts["web"].netns, "10.0.0.2:"+p, "web")
	}
	sgServeTCP(t, r.insts["client"].netns, "10.0.0.3:8080", "client")
	sgServeTCP(t, r.insts["db"].netns, "10.0.0.4:5432", "db")
	sgServeTCP(t, r.insts["db"].netns, "10.0.0.4:8080", "db")
	sgServeTCP(t, r.netns, "10.0.0.1:7000", "router")

	web8080 := sgTestRule{proto: "tcp", from: 8080, to: 8080, cidr: "10.0.0.0/24"}
	groups := func(withWeb8080 bool) []sgTestGroup {
		web := sgTestGroup{id: "sg-web",
			ingress: []sgTestRule{
				{proto: "tcp", from: 9000, to: 9000, groupID: "sg-client"},
				{proto: "tcp", from: 7000, to: 7000, cidr: "10.0.0.0/24"},
				{proto: "udp", from: 5353, to: 5353, cidr: "10.0.0.0/24"},
				{proto: "icmp", cidr: "0.0.0.0/0"},
			},
			egress: []sgTestRule{{proto: "all", cidr: "0.0.0.0/0"}}}
		if withWeb8080 {
			web.ingress = append(web.ingress, web8080)
		}
		return []sgTestGroup{web,
			{id: "sg-client", egress: []sgTestRule{{proto: "all", cidr: "0.0.0.0/0"}}},
			{id: "sg-db",
				ingress: []sgTestRule{{proto: "tcp", from: 5432, to: 5432, groupID: "sg-web"}},
				egress:  []sgTestRule{{proto: "tcp", from: 8080, to: 8080, cidr: "10.0.0.2/32"}}},
			// A group no one is in: its member-less peer list allows nothing.
			{id: "sg-empty"},
		}
	}
	members := map[string][]string{"web": {"sg-web"}, "client": {"sg-client"}, "db": {"sg-db"}}
	r.load(t, groups(true), members, RulesetOptions{})

	t.Run("allowed and dropped", func(t *testing.T) {
		r.sgRunChecks(t, []sgCheck{
			{from: "client", addr: "10.0.0.2:8080", ok: true}, // ingress by CIDR
			{from: "db", addr: "10.0.0.2:8080", ok: true},     // egress to one address
			{from: "client", addr: "10.0.0.2:8081"},           // no ingress rule for the port
			{from: "client", addr: "10.0.0.2:9000", ok: true}, // ingress by group
			{from: "db", addr: "10.0.0.2:9000"},               // not in the group
			{from: "client", addr: "10.0.0.2:7000", ok: true},
			{from: "db", addr: "10.0.0.2:7000"}, // db's egress lacks the port
			{from: "web", addr: "10.0.0.4:5432", ok: true},
			{from: "client", addr: "10.0.0.4:5432"},
			{from: "web", addr: "10.0.0.4:8080"},
			{from: "web", addr: "10.0.0.3:8080"}, // sg-client has no ingress
			{from: "client", addr: "10.0.0.1:7000"},
			{from: "client", addr: "10.0.0.1", ping: true, ok: true},
			{from: "client", addr: "10.0.0.2", ping: true, ok: true},
			{from: "web", addr: "10.0.0.3", ping: true},
			{from: "db", addr: "10.0.0.2", ping: true}, // db's egress is TCP only
		})
	})

	t.Run("spoofed sources are dropped", func(t *testing.T) {
		web, client := r.insts["web"], r.insts["client"]
		var rx net.PacketConn
		if err := sgInNetns(web.netns, func() (err error) {
			rx, err = net.ListenPacket("udp4", "10.0.0.2:5353")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer rx.Close()
		sgRun(t, "ip", "-n", client.netns, "addr", "add", "10.0.0.99/32", "dev", "eth0")
		defer sgRun(t, "ip", "-n", client.netns, "addr", "del", "10.0.0.99/32", "dev", "eth0")
		send := func(from, payload string) {
			t.Helper()
			if err := sgInNetns(client.netns, func() error {
				c, err := net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(from)), net.UDPAddrFromAddrPort(netip.MustParseAddrPort("10.0.0.2:5353")))
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
		// What is sent first on the same path arrives first: when the
		// last datagram, a genuine one, is in, the spoofed ones before
		// it would have been too.
		send("10.0.0.3:4000", "genuine")
		send("10.0.0.99:4000", "spoofed address")
		sgRun(t, "ip", "-n", client.netns, "link", "set", "eth0", "address", "02:00:0a:00:00:63")
		send("10.0.0.3:4001", "spoofed MAC")
		sgRun(t, "ip", "-n", client.netns, "link", "set", "eth0", "address", client.mac)
		send("10.0.0.3:4002", "genuine again")
		var got []string
		buf := make([]byte, 100)
		_ = rx.SetReadDeadline(time.Now().Add(sgOKTimeout))
		for len(got) == 0 || got[len(got)-1] != "genuine again" {
			n, from, err := rx.ReadFrom(buf)
			if err != nil {
				t.Fatalf("after %q: %v", got, err)
			}
			got = append(got, fmt.Sprintf("%s", buf[:n]))
			_ = from
		}
		if want := "genuine,genuine again"; strings.Join(got, ",") != want {
			t.Errorf("web got %q, want %q", got, want)
		}
	})

	t.Run("a revoked rule stops new connections, not open ones", func(t *testing.T) {
		open, err := sgDial(r.insts["client"].netns, "10.0.0.2:8080", sgOKTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer open.c.Close()
		if a, err := open.ask("before", sgOKTimeout); err != nil || a != "web before" {
			t.Fatalf("before: %q, %v", a, err)
		}
		r.load(t, groups(false), members, RulesetOptions{})
		if a, err := open.ask("after", sgOKTimeout); err != nil || a != "web after" {
			t.Errorf("the open connection after the revoke: %q, %v", a, err)
		}
		r.sgRunChecks(t, []sgCheck{
			{from: "client", addr: "10.0.0.2:8080"},
			{from: "db", addr: "10.0.0.2:8080"},
			{from: "client", addr: "10.0.0.2:7000", ok: true},
		})
		// Authorized again, it lets new connections in.
		r.load(t, groups(true), members, RulesetOptions{})
		r.sgRunChecks(t, []sgCheck{{from: "client", addr: "10.0.0.2:8080", ok: true}})
	})

	t.Run("a group-peer rule follows membership", func(t *testing.T) {
		// db joins sg-client: web's port 9000 opens to it, and
		// sg-client's egress adds to sg-db's.
		m := map[string][]string{"web": {"sg-web"}, "client": {"sg-client"}, "db": {"sg-db", "sg-client"}}
		r.load(t, groups(true), m, RulesetOptions{})
		r.sgRunChecks(t, []sgCheck{
			{from: "db", addr: "10.0.0.2:9000", ok: true},
			{from: "client", addr: "10.0.0.2:9000", ok: true},
			{from: "db", addr: "10.0.0.2", ping: true, ok: true},
		})
		// client leaves it for the empty group: 9000 closes to it, and
		// its egress with it.
		m["client"] = []string{"sg-empty"}
		r.load(t, groups(true), m, RulesetOptions{})
		r.sgRunChecks(t, []sgCheck{
			{from: "client", addr: "10.0.0.2:9000"},
			{from: "client", addr: "10.0.0.2:8080"},
			{from: "db", addr: "10.0.0.2:9000", ok: true},
		})
	})

	t.Run("gateway services", func(t *testing.T) {
		r.load(t, groups(true), members, RulesetOptions{Services: []GatewayService{{Protocol: "tcp", Port: 7000}}})
		r.sgRunChecks(t, []sgCheck{
			{from: "client", addr: "10.0.0.1:7000", ok: true},
			{from: "web", addr: "10.0.0.1:7000", ok: true},
		})
	})
}

// sgBenchNetwork is a network of 200 local instances in 50 groups, three
// groups each, whose 1,000 rules (ten ingress and ten egress a group)
// are half CIDR rules with port ranges and half rules naming another
// group, whose members' addresses they resolve to.
func sgBenchNetwork() (agentapi.HostNetwork, []LocalPort) {
	const nInst, nGroups = 200, 50
	hn := agentapi.HostNetwork{ID: "net-bench", CIDR: "10.0.0.0/16",
		Subnets: []agentapi.NetworkSubnet{{ID: "subnet-bench", CIDR: "10.0.0.0/16", Gateway: "10.0.0.1"}}}
	var local []LocalPort
	for i := range nInst {
		addr := netip.AddrFrom4([4]byte{10, 0, byte((i + 2) >> 8), byte(i + 2)})
		mac := fmt.Sprintf("02:00:0a:00:%02x:%02x", (i+2)>>8, (i+2)&0xff)
		id := fmt.Sprintf("i-%04d", i)
		var groups []string
		for _, g := range []int{i % nGroups, (i*7 + 3) % nGroups, (i*13 + 5) % nGroups} {
			groups = append(groups, fmt.Sprintf("sg-%02d", g))
		}
		hn.Endpoints = append(hn.Endpoints, agentapi.Endpoint{InstanceID: id, Address: addr.String(), MAC: mac, SecurityGroups: groups})
		local = append(local, LocalPort{InstanceID: id, Iface: fmt.Sprintf("v%04d", i), Addr: addr, MAC: mac})
	}
	var groups []sgTestGroup
	for g := range nGroups {
		sg := sgTestGroup{id: fmt.Sprintf("sg-%02d", g)}
		for k := range 10 {
			proto := []string{"tcp", "udp"}[k%2]
			port := 1000 + 100*k + g
			if k < 5 {
				sg.ingress = append(sg.ingress, sgTestRule{proto: proto, from: port, to: port + 10, cidr: fmt.Sprintf("10.%d.%d.0/24", 1+k, g)})
				sg.egress = append(sg.egress, sgTestRule{proto: proto, from: port, to: port, cidr: fmt.Sprintf("172.16.%d.0/24", g)})
			} else {
				sg.ingress = append(sg.ingress, sgTestRule{proto: proto, from: port, to: port, groupID: fmt.Sprintf("sg-%02d", (g+k)%nGroups)})
				sg.egress = append(sg.egress, sgTestRule{proto: proto, from: port, to: port + 5, groupID: fmt.Sprintf("sg-%02d", (g+2*k)%nGroups)})
			}
		}
		groups = append(groups, sg)
	}
	hn.SecurityGroups = sgResolve(groups, hn.Endpoints)
	return hn, local
}

// BenchmarkGroupRuleset1000 writes the ruleset of 1,000 rules over 200
// instances and loads it into a namespace, replacing the previous
// version, as a host does on every change of its view.
func BenchmarkGroupRuleset1000(b *testing.B) {
	sgNeedNft(b)
	netns := sgNetns(b, "bench")
	hn, local := sgBenchNetwork()
	rules := 0
	for _, g := range hn.SecurityGroups {
		rules += len(g.Ingress) + len(g.Egress)
	}
	if rules != 1000 || len(local) != 200 {
		b.Fatalf("%d rules over %d instances", rules, len(local))
	}
	var size int
	for b.Loop() {
		script, err := GroupRuleset("sgbench", hn, local, RulesetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if err := sgNft(netns, script, "-f", "-"); err != nil {
			b.Fatal(err)
		}
		size = len(script)
	}
	b.ReportMetric(float64(size), "script-bytes")
}
