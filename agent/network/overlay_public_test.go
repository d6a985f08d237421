//go:build linux

package network

import (
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// TestOverlayPublic: an instance with a public address is reachable at
// it from a namespace outside the fabric, which routes the address to
// the instance's host as gpucloud up's fabric does (here, by following
// OnPublic), on the ports its groups open only, with the client's own
// address (and from another network's instance on the same host, through
// the host); revoking the rule stops new connections; moving the address
// to another tenant's instance with the same private address on the same
// host reaches that one only; disassociating it makes it unreachable and
// leaves no route or rule of it behind.
func TestOverlayPublic(t *testing.T) {
	need(t)
	f := newFabric(t, 1)
	A := f.hosts[0]
	pub := netip.MustParseAddr("203.0.113.7")
	client := netip.MustParseAddr("198.51.100.2")

	// The world: the fabric's namespace routes between the outside and
	// the hosts, as a machine does for gpucloud up's fabric; host A
	// forwards and reaches the world through it.
	outNS := "gcto" + randHex(6)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", outNS).Run() })
	gw := A.underlay.As4()
	gw[3] = 254
	fabricGW := netip.AddrFrom4(gw)
	ipCmd(t, "netns", "add", outNS)
	ipCmd(t, "-n", f.ns, "link", "add", "out0", "type", "veth", "peer", "name", "eth0", "netns", outNS)
	ipCmd(t, "-n", f.ns, "addr", "add", "198.51.100.1/30", "dev", "out0")
	ipCmd(t, "-n", f.ns, "link", "set", "out0", "up")
	ipCmd(t, "-n", f.ns, "addr", "add", fabricGW.String()+"/24", "dev", "br0")
	ipCmd(t, "netns", "exec", f.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	ipCmd(t, "-n", outNS, "addr", "add", client.String()+"/30", "dev", "eth0")
	ipCmd(t, "-n", outNS, "link", "set", "eth0", "up")
	ipCmd(t, "-n", outNS, "link", "set", "lo", "up")
	ipCmd(t, "-n", outNS, "route", "add", "default", "via", "198.51.100.1")
	ipCmd(t, "netns", "exec", A.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	ipCmd(t, "-n", A.ns, "route", "add", "default", "via", fabricGW.String())
	outPath := (&simHost{ns: outNS}).path()

	var mu sync.Mutex
	var events []string
	onPublic := func(a netip.Addr, serving bool) {
		mu.Lock()
		events = append(events, fmt.Sprintf("%s %v", a, serving))
		mu.Unlock()
		verb := "replace"
		if !serving {
			verb = "del"
		}
		if out, err := exec.Command("ip", "-n", f.ns, "route", verb, a.String()+"/32", "via", A.underlay.String()).CombinedOutput(); err != nil {
			t.Errorf("route %s %s: %v: %s", verb, a, err, out)
		}
	}
	takeEvents := func() string {
		mu.Lock()
		defer mu.Unlock()
		s := strings.Join(events, ", ")
		events = nil
		return s
	}
	cloud := testCloud()
	d := newOverlayWith(t, A, OverlayConfig{Cloud: cloud, OnPublic: onPublic})

	// Two tenants' networks on host A, each with an instance at
	// 10.0.1.10 serving on 8080 and 9090.
	x, y := vnet{"net-x", 100}, vnet{"net-y", 200}
	i1, i2 := inst{"i1", x, A, 10}, inst{"i2", y, A, 10}
	s1 := i1.spec()
	s1.Public = pub
	paths := map[string]string{}
	for _, c := range []struct {
		in   inst
		spec *runtime.Network
	}{{i1, s1}, {i2, i2.spec()}} {
		p, err := d.Setup(t.Context(), c.in.id, c.spec)
		if err != nil {
			t.Fatal(err)
		}
		paths[c.in.id] = p
		serve(t, p, "0.0.0.0:8080", c.in.id)
		serve(t, p, "0.0.0.0:9090", c.in.id)
	}
	if got := takeEvents(); got != pub.String()+" true" {
		t.Errorf("OnPublic after Setup: %q, want %q", got, pub.String()+" true")
	}

	all := []agentapi.RuleSpec{{Protocol: "all", Peers: []string{"0.0.0.0/0"}}}
	web := agentapi.GroupRules{ID: "sg-web", Egress: all,
		Ingress: []agentapi.RuleSpec{{Protocol: "tcp", FromPort: 8080, ToPort: 8080, Peers: []string{"0.0.0.0/0"}}}}
	open := agentapi.GroupRules{ID: "sg-open", Ingress: all, Egress: all}
	// hostView is the view of both networks: i1 in web, i2 in open, and
	// their public addresses.
	hostView := func(web agentapi.GroupRules, pub1, pub2 string) []agentapi.HostNetwork {
		var out []agentapi.HostNetwork
		for _, c := range []struct {
			in  inst
			g   agentapi.GroupRules
			pub string
		}{{i1, web, pub1}, {i2, open, pub2}} {
			out = append(out, agentapi.HostNetwork{ID: c.in.net.id, VNI: c.in.net.vni, CIDR: "10.0.0.0/16",
				Subnets:        []agentapi.NetworkSubnet{{ID: "sub", CIDR: "10.0.1.0/24", Gateway: "10.0.1.1"}},
				SecurityGroups: []agentapi.GroupRules{c.g},
				Endpoints: []agentapi.Endpoint{{InstanceID: c.in.id, Address: c.in.addr().String(), MAC: macOf(c.in.addr()),
					HostID: A.name, Underlay: A.underlay.String(), SecurityGroups: []string{c.g.ID}, PublicAddress: c.pub}}})
		}
		return out
	}
	sync := func(v []agentapi.HostNetwork) {
		t.Helper()
		if err := d.Sync(t.Context(), v); err != nil {
			t.Fatal(err)
		}
	}
	at := func(port int) string { return fmt.Sprintf("%s:%d", pub, port) }

	sync(hostView(web, pub.String(), ""))
	runChecks(t, []check{
		{desc: "outside to the public address, opened port", netns: outPath, addr: at(8080), want: "i1 " + client.String() + ":"},
		{desc: "outside to the public address, port not opened", netns: outPath, addr: at(9090)},
		{desc: "the other network's instance on the host to the public address", netns: paths["i2"], addr: at(8080), want: "i1 "},
		{desc: "the other network's instance on the host to the public address, port not opened", netns: paths["i2"], addr: at(9090)},
	})
	if got := takeEvents(); got != "" {
		t.Errorf("OnPublic after a Sync that keeps the address: %q", got)
	}

	revoked := web
	revoked.Ingress = nil
	sync(hostView(revoked, pub.String(), ""))
	runChecks(t, []check{
		{desc: "outside to the public address, rule revoked", netns: outPath, addr: at(8080)},
	})

	// The address moves to the other tenant's instance, at the same
	// private address on the same host: only that one answers.
	sync(hostView(web, "", pub.String()))
	runChecks(t, []check{
		{desc: "outside to the moved public address (8080)", netns: outPath, addr: at(8080), want: "i2 " + client.String() + ":"},
		{desc: "outside to the moved public address (9090)", netns: outPath, addr: at(9090), want: "i2 " + client.String() + ":"},
	})
	sync(hostView(web, pub.String(), ""))
	runChecks(t, []check{
		{desc: "outside to the public address, back on i1 (9090 not opened)", netns: outPath, addr: at(9090)},
		{desc: "outside to the public address, back on i1", netns: outPath, addr: at(8080), want: "i1 " + client.String() + ":"},
	})

	// Disassociated: unreachable, no route or rule of it left.
	sync(hostView(web, "", ""))
	runChecks(t, []check{
		{desc: "outside to the disassociated address (8080)", netns: outPath, addr: at(8080)},
		{desc: "outside to the disassociated address (9090)", netns: outPath, addr: at(9090)},
	})
	if got := takeEvents(); got != pub.String()+" false" {
		t.Errorf("OnPublic after disassociation: %q, want %q", got, pub.String()+" false")
	}
	for _, ns := range []string{A.ns, d.routerNS(x.vni), d.routerNS(y.vni)} {
		for _, args := range [][]string{{"ip", "-n", ns, "-4", "route", "show", "table", "all"}, {"ip", "netns", "exec", ns, "nft", "list", "ruleset"}} {
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
			}
			if strings.Contains(string(out), pub.String()) {
				t.Errorf("%s still names %s:\n%s", strings.Join(args, " "), pub, out)
			}
		}
	}

	// Associated again through Setup alone (a new instance not yet in
	// the view) and torn down: the host stops serving it.
	i3 := inst{"i3", x, A, 12}
	s3 := i3.spec()
	s3.Public = netip.MustParseAddr("203.0.113.8")
	if _, err := d.Setup(t.Context(), i3.id, s3); err != nil {
		t.Fatal(err)
	}
	if err := d.Teardown(t.Context(), i3.id); err != nil {
		t.Fatal(err)
	}
	if got := takeEvents(); got != "203.0.113.8 true, 203.0.113.8 false" {
		t.Errorf("OnPublic over i3's life: %q", got)
	}
}

// TestOverlayPublicChoice: which public address each local instance is
// served at: the view's endpoint when the view names the instance, else
// Setup's; none for an address that cannot be one on the host, and the
// first instance by ID for an address two have.
func TestOverlayPublicChoice(t *testing.T) {
	cidr := netip.MustParsePrefix("10.0.0.0/16")
	mk := func(id string, vni uint32, addr, public string) *ovInst {
		in := &ovInst{id: id, vni: vni, addr: netip.MustParseAddr(addr)}
		if public != "" {
			in.public = netip.MustParseAddr(public)
		}
		return in
	}
	ep := func(id, public string) agentapi.Endpoint {
		return agentapi.Endpoint{InstanceID: id, PublicAddress: public}
	}
	for _, tc := range []struct {
		desc  string
		insts []*ovInst
		view  []agentapi.Endpoint // of network 100; nil: no view
		want  string
	}{
		{"Setup's, no view", []*ovInst{mk("i1", 100, "10.0.1.10", "203.0.113.1")}, nil, "203.0.113.1>i1/10.0.1.10"},
		{"Setup's, the view does not name the instance", []*ovInst{mk("i1", 100, "10.0.1.10", "203.0.113.1")},
			[]agentapi.Endpoint{ep("i9", "")}, "203.0.113.1>i1/10.0.1.10"},
		{"the view's replaces Setup's", []*ovInst{mk("i1", 100, "10.0.1.10", "203.0.113.1")},
			[]agentapi.Endpoint{ep("i1", "203.0.113.2")}, "203.0.113.2>i1/10.0.1.10"},
		{"disassociated in the view", []*ovInst{mk("i1", 100, "10.0.1.10", "203.0.113.1")},
			[]agentapi.Endpoint{ep("i1", "")}, ""},
		{"unreadable in the view", []*ovInst{mk("i1", 100, "10.0.1.10", "")},
			[]agentapi.Endpoint{ep("i1", "203.0.113.300")}, ""},
		{"two networks, same private address", []*ovInst{mk("i1", 100, "10.0.1.10", "203.0.113.1"), mk("i2", 200, "10.0.1.10", "203.0.113.2")},
			nil, "203.0.113.1>i1/10.0.1.10 203.0.113.2>i2/10.0.1.10"},
		{"one address, two instances: the first by ID", []*ovInst{mk("i2", 200, "10.0.1.10", "203.0.113.1"), mk("i1", 100, "10.0.1.11", "203.0.113.1")},
			nil, "203.0.113.1>i1/10.0.1.11"},
		{"in the network's own CIDR", []*ovInst{mk("i1", 100, "10.0.1.10", "10.0.9.9")}, nil, ""},
		{"in the transit pool", []*ovInst{mk("i1", 100, "10.0.1.10", "100.65.0.9")}, nil, ""},
		{"the host's underlay address", []*ovInst{mk("i1", 100, "10.0.1.10", "192.0.2.1")}, nil, ""},
		{"IPv6", []*ovInst{mk("i1", 100, "10.0.1.10", "2001:db8::1")}, nil, ""},
		{"multicast", []*ovInst{mk("i1", 100, "10.0.1.10", "239.1.1.1")}, nil, ""},
		{"unspecified", []*ovInst{mk("i1", 100, "10.0.1.10", "0.0.0.0")}, nil, ""},
	} {
		o := &Overlay{cfg: OverlayConfig{Underlay: netip.MustParseAddr("192.0.2.1"), TransitPool: DefaultTransitPool, Log: slog.New(slog.DiscardHandler)},
			insts: map[string]*ovInst{}, views: map[uint32]agentapi.HostNetwork{},
			routers: map[uint32]*router{100: {vni: 100, netID: "net-x", cidr: cidr}, 200: {vni: 200, netID: "net-y", cidr: cidr}}}
		for _, in := range tc.insts {
			o.insts[in.id] = in
		}
		if tc.view != nil {
			o.views[100] = agentapi.HostNetwork{ID: "net-x", VNI: 100, Endpoints: tc.view}
		}
		pubs := o.publics(false)
		var got []string
		for _, a := range slices.SortedFunc(maps.Keys(pubs), netip.Addr.Compare) {
			got = append(got, fmt.Sprintf("%s>%s/%s", a, pubs[a].inst, pubs[a].addr))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("%s: %q, want %q", tc.desc, g, tc.want)
		}
	}
}
