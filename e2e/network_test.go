package e2e

import (
	"cmp"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/store/pgtest"
	"github.com/gpucloud/gpucloud/testkit"
)

// Private networks end to end (issue 19): a real server, two real agents
// on a fabric, each host's instances in containers on the kernel overlay
// of its namespace (netenv_test.go), on both stores.

// TestNetworkCrossHost: a tenant's network, subnet and security group
// (tcp 7000 from the group itself, the default egress), an instance on
// each host; the one on host a reaches the one on host b by its private
// address and by its DNS names, and not on a port the group does not
// open; describe shows the instances' address, subnet and groups.
func TestNetworkCrossHost(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testNetworkCrossHost(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testNetworkCrossHost(t, ch, pgtest.URL(t)) })
}

// reachScript waits (at most about a minute) until PEER serves on port
// 7000, prints what it served by address, by NAME.NETWORK.internal and by
// the bare name (the search list), then what port 7001 answers (the
// group does not open it), and "done".
const reachScript = fetchFn + `
i=0; while [ $i -lt 100 ]; do r=$(get "$PEER" 7000); [ "$r" != FAIL ] && break; sleep 0.2; i=$((i+1)); done
echo "addr $r"
i=0; while [ $i -lt 100 ]; do r=$(get "$PEERNAME" 7000); [ "$r" != FAIL ] && break; sleep 0.2; i=$((i+1)); done
echo "name $r"
echo "short $(get b 7000)"
echo "closed $(get "$PEER" 7001)"
echo done; exec sleep 600
`

func testNetworkCrossHost(t *testing.T, ch *containerHost, db string) {
	began := time.Now()
	c := startNetCluster(t, ch, db)
	_, alice, _ := c.member("acme", "alice")
	tn := c.makeTenantNet(alice, "prod", "10.0.0.0/16", "10.0.1.0/24")

	b := tn.run(c, "b", "b", serveScript("hello-from-b", netPort, 7001), nil)
	a := tn.run(c, "a", "a", reachScript, map[string]string{"PEER": b.PrivateAddress, "PEERNAME": "b.prod.internal"})
	c.waitRunningOn(alice, b.ID, netHosts[1].ID)
	c.waitRunningOn(alice, a.ID, netHosts[0].ID)
	c.waitLogs(alice, b.ID, "serving\n")
	t.Logf("both instances running at %v", time.Since(began).Round(time.Millisecond))

	out := c.waitLogs(alice, a.ID, "done\n")
	t.Logf("a's output at %v:\n%s", time.Since(began).Round(time.Millisecond), out)
	for _, want := range []string{"addr hello-from-b\n", "name hello-from-b\n", "short hello-from-b\n", "closed FAIL\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("a's output lacks %q", want)
		}
	}

	// Describe: the address, the subnet and the groups the server gave.
	cidr := netip.MustParsePrefix(tn.subnet.CIDR)
	for _, in := range []*cloud.Instance{a, b} {
		got := c.get(alice, in.ID)
		addr, err := netip.ParseAddr(got.PrivateAddress)
		if err != nil || !cidr.Contains(addr) || got.PrivateAddress != in.PrivateAddress {
			t.Errorf("%s: private address %q, want %s given at create, in %s", in.Name, got.PrivateAddress, in.PrivateAddress, cidr)
		}
		if got.NetworkID != tn.net.ID || got.SubnetID != tn.subnet.ID || !slices.Equal(got.SecurityGroupIDs, []string{tn.group.ID}) {
			t.Errorf("%s: network %q subnet %q groups %v, want %s %s [%s]", in.Name, got.NetworkID, got.SubnetID,
				got.SecurityGroupIDs, tn.net.ID, tn.subnet.ID, tn.group.ID)
		}
	}
	if a.PrivateAddress == b.PrivateAddress {
		t.Errorf("a and b share the address %s", a.PrivateAddress)
	}
	t.Logf("done at %v", time.Since(began).Round(time.Millisecond))
}

// TestNetworkIsolation: two tenants with the same CIDR, subnet, network
// name and instance names, their listeners at the same private address on
// the same host, and groups open to 0.0.0.0/0 on the listeners' ports.
// Each tenant's client reaches its own listener (by address and by name)
// and never the other tenant's, whose listener alone serves the port it
// tries; and the second tenant cannot read or use the first's network,
// subnet and group through the API.
func TestNetworkIsolation(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) { testNetworkIsolation(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db")) })
	t.Run("postgres", func(t *testing.T) { testNetworkIsolation(t, ch, pgtest.URL(t)) })
}

// isolationScript waits until PEER serves port 7000, then prints what
// PEER serves on 7000, by name, on OWN (the port only its own tenant's
// listener serves) and, three times, on OTHER (the port only the other
// tenant's listener serves), and "done".
const isolationScript = fetchFn + `
i=0; while [ $i -lt 100 ]; do r=$(get "$PEER" 7000); [ "$r" != FAIL ] && break; sleep 0.2; i=$((i+1)); done
echo "addr $r"
i=0; while [ $i -lt 100 ]; do r=$(get b.prod.internal 7000); [ "$r" != FAIL ] && break; sleep 0.2; i=$((i+1)); done
echo "name $r"
echo "own $(get "$PEER" "$OWN")"
for i in 1 2 3; do echo "other $(get "$PEER" "$OTHER")"; done
echo done; exec sleep 600
`

func testNetworkIsolation(t *testing.T, ch *containerHost, db string) {
	began := time.Now()
	c := startNetCluster(t, ch, db)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	_, bob, _ := c.member("globex", "bob")
	type side struct {
		name       string
		tn         *tenantNet
		own, other int
		a, b       *cloud.Instance
	}
	sides := []*side{{name: "acme", own: 7001, other: 7002}, {name: "globex", own: 7002, other: 7001}}
	for i, s := range sides {
		cl := []*client.Client{alice, bob}[i]
		s.tn = c.makeTenantNet(cl, "prod", "10.0.0.0/16", "10.0.1.0/24")
		// Open to anyone: only the overlay keeps the other tenant out.
		g, err := cl.Authorize(ctx, s.tn.group.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: cloud.ProtocolTCP,
			FromPort: netPort, ToPort: 7002, CIDR: "0.0.0.0/0"}, 0)
		if err != nil {
			t.Fatalf("%s: authorize from anywhere: %v", s.name, err)
		}
		s.tn.group = g
	}
	// The listeners first, then the clients, in the same order in both
	// tenants: the same addresses.
	for _, s := range sides {
		s.b = s.tn.run(c, "b", "b", serveScript(s.name, netPort, s.own), nil)
	}
	for _, s := range sides {
		s.a = s.tn.run(c, "a", "a", isolationScript, map[string]string{"PEER": s.b.PrivateAddress,
			"OWN": strconv.Itoa(s.own), "OTHER": strconv.Itoa(s.other)})
	}
	if sides[0].b.PrivateAddress != sides[1].b.PrivateAddress || sides[0].a.PrivateAddress != sides[1].a.PrivateAddress {
		t.Fatalf("the tenants' instances have different addresses (listeners %s and %s, clients %s and %s): the test needs the same",
			sides[0].b.PrivateAddress, sides[1].b.PrivateAddress, sides[0].a.PrivateAddress, sides[1].a.PrivateAddress)
	}
	for _, s := range sides {
		c.waitRunningOn(s.tn.cl, s.b.ID, netHosts[1].ID)
		c.waitRunningOn(s.tn.cl, s.a.ID, netHosts[0].ID)
	}
	for _, s := range sides {
		out := c.waitLogs(s.tn.cl, s.a.ID, "done\n")
		t.Logf("%s's client at %v:\n%s", s.name, time.Since(began).Round(time.Millisecond), out)
		for _, want := range []string{"addr " + s.name + "\n", "name " + s.name + "\n", fmt.Sprintf("own %s\n", s.name)} {
			if !strings.Contains(out, want) {
				t.Errorf("%s's client did not reach its own listener: its output lacks %q", s.name, want)
			}
		}
		if n := strings.Count(out, "other FAIL\n"); n != 3 {
			t.Errorf("%s's client reached port %d, which only the other tenant's listener at the same address serves", s.name, s.other)
		}
	}

	// Through the API, globex sees nothing of acme's network.
	acme := sides[0].tn
	gid, sid, nid := acme.group.ID, acme.subnet.ID, acme.net.ID
	own := sides[1].tn
	// The versions of acme's network, subnet and group (the subnet's
	// changes as it gives addresses).
	versions := func() map[string]int64 {
		t.Helper()
		n, err := alice.GetNetwork(ctx, nid)
		if err != nil {
			t.Fatal(err)
		}
		s, err := alice.GetSubnet(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		g, err := alice.GetSecurityGroup(ctx, gid)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]int64{"network": n.Version, "subnet": s.Version, "group": g.Version}
	}
	before := versions()
	for name, do := range map[string]func() error{
		"get network":    func() error { _, err := bob.GetNetwork(ctx, nid); return err },
		"get subnet":     func() error { _, err := bob.GetSubnet(ctx, sid); return err },
		"get group":      func() error { _, err := bob.GetSecurityGroup(ctx, gid); return err },
		"delete network": func() error { return bob.DeleteNetwork(ctx, nid) },
		"delete subnet":  func() error { return bob.DeleteSubnet(ctx, sid) },
		"delete group":   func() error { return bob.DeleteSecurityGroup(ctx, gid) },
		"authorize": func() error {
			_, err := bob.Authorize(ctx, gid, api.AuthorizeRequest{Direction: api.Ingress, Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}, 0)
			return err
		},
		"revoke": func() error {
			_, err := bob.Revoke(ctx, gid, api.RevokeRequest{RuleID: acme.rule.ID}, 0)
			return err
		},
		"subnet in its network": func() error {
			_, err := bob.CreateSubnet(ctx, api.CreateSubnetRequest{Network: nid, Name: "x", CIDR: "10.0.9.0/24", Zone: netHosts[0].Zone}, "")
			return err
		},
		"group in its network": func() error {
			_, err := bob.CreateSecurityGroup(ctx, api.CreateSecurityGroupRequest{Network: nid, Name: "x"}, "")
			return err
		},
		"instance in its subnet": func() error {
			_, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Subnet: sid, Command: []string{"true"}}, "")
			return err
		},
		"instance in its group": func() error {
			_, err := bob.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "h100.1x", Subnet: own.subnet.ID,
				SecurityGroups: []string{gid}, Command: []string{"true"}}, "")
			return err
		},
		"own group's rule naming its group": func() error {
			_, err := bob.Authorize(ctx, own.group.ID, api.AuthorizeRequest{Direction: api.Ingress, Protocol: cloud.ProtocolAll, Group: gid}, 0)
			return err
		},
	} {
		wantCode(t, "globex: "+name+" of acme's", do(), cloud.NotFound)
	}
	if ns, err := bob.Networks(ctx, ""); err != nil || slices.ContainsFunc(ns, func(n *cloud.Network) bool { return n.ID == nid }) {
		t.Errorf("globex lists networks %v, %v: want none of acme's", ns, err)
	}
	if after := versions(); !maps.Equal(after, before) {
		t.Errorf("acme's network, subnet and group after globex's tries: versions %v, want %v, unchanged", after, before)
	}
	if l := c.instances(bob, client.ListInstancesOptions{}); len(l) != 2 {
		t.Errorf("globex has %d instances, want its client and listener only", len(l))
	}
}

// TestSecurityGroupRevoke: a client on host a connects to a listener on
// host b every 200 ms, printing ok or fail with the time each try began
// (the host's uptime, which the containers share); once the rule that
// lets it in is revoked, new connections fail within a second or two, and
// once it is authorized again they succeed.
func TestSecurityGroupRevoke(t *testing.T) {
	ch := startContainerHost(t)
	t.Run("sqlite", func(t *testing.T) {
		testSecurityGroupRevoke(t, ch, "sqlite://"+filepath.Join(t.TempDir(), "gpucloud.db"))
	})
	t.Run("postgres", func(t *testing.T) { testSecurityGroupRevoke(t, ch, pgtest.URL(t)) })
}

// loopScript begins a connection to PEER:7000 every 200 ms, whether the
// one before has ended or not (each is bounded by a second: a dropped
// connection hangs until then), and prints "ok T" or "fail T" when it
// ends, T the uptime when it began: the lines are in the order the tries
// ended.
const loopScript = `
while :; do
  t=$(cut -d' ' -f1 /proc/uptime)
  ( if timeout 1 wget -q -O /dev/null "http://$PEER:7000/" 2>/dev/null; then echo "ok $t"; else echo "fail $t"; fi ) &
  sleep 0.2
done
`

// try is one connection attempt of loopScript.
type try struct {
	ok    bool
	began float64 // uptime, seconds
}

// tries parses loopScript's output, in the order the tries began.
func tries(out string) []try {
	var ts []try
	for _, line := range strings.Split(out, "\n") {
		res, at, ok := strings.Cut(line, " ")
		if !ok || (res != "ok" && res != "fail") {
			continue
		}
		f, err := strconv.ParseFloat(at, 64)
		if err != nil {
			continue
		}
		ts = append(ts, try{ok: res == "ok", began: f})
	}
	slices.SortStableFunc(ts, func(a, b try) int { return cmp.Compare(a.began, b.began) })
	return ts
}

// uptime is the host's uptime in seconds, the clock of loopScript.
func uptime(t *testing.T) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func testSecurityGroupRevoke(t *testing.T, ch *containerHost, db string) {
	c := startNetCluster(t, ch, db)
	ctx := t.Context()
	_, alice, _ := c.member("acme", "alice")
	tn := c.makeTenantNet(alice, "prod", "10.0.0.0/16", "10.0.1.0/24")
	b := tn.run(c, "b", "b", serveScript("hello", netPort), nil)
	a := tn.run(c, "a", "a", loopScript, map[string]string{"PEER": b.PrivateAddress})
	c.waitRunningOn(alice, b.ID, netHosts[1].ID)
	c.waitRunningOn(alice, a.ID, netHosts[0].ID)

	// since waits (a few seconds at most) until a try that began after
	// from has result ok, and returns it.
	since := func(from float64, ok bool, what string) try {
		t.Helper()
		var got try
		testkit.EventuallySays(t, 5*time.Second, what, func() (bool, string) {
			ts := tries(c.logs(alice, a.ID))
			for _, tr := range ts {
				if tr.began >= from && tr.ok == ok {
					got = tr
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d tries, the last %+v", len(ts), ts[max(0, len(ts)-3):])
		})
		return got
	}
	// The path works first (the overlay and the groups may take a moment
	// after the start): three tries in a row succeed.
	c.until("the client to connect three times in a row", func() (bool, string) {
		ts := tries(c.logs(alice, a.ID))
		n := len(ts)
		return n >= 3 && ts[n-1].ok && ts[n-2].ok && ts[n-3].ok, fmt.Sprintf("%d tries, the last %+v", n, ts[max(0, n-3):])
	})

	// Revoke: new connections fail.
	revoked := uptime(t)
	g, err := alice.Revoke(ctx, tn.group.ID, api.RevokeRequest{RuleID: tn.rule.ID}, 0)
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if len(g.Ingress) != 0 {
		t.Fatalf("ingress after the revoke: %+v, want none", g.Ingress)
	}
	answered := uptime(t)
	fail := since(revoked, false, "a connection to fail after the revoke")
	// Every later try fails too: wait for two more and look.
	c.until("two more tries after the first failure", func() (bool, string) {
		ts := tries(c.logs(alice, a.ID))
		n := 0
		for _, tr := range ts {
			if tr.began > fail.began {
				n++
			}
		}
		return n >= 2, fmt.Sprintf("%d", n)
	})
	var lastOK float64
	for _, tr := range tries(c.logs(alice, a.ID)) {
		if tr.began > fail.began && tr.ok {
			t.Errorf("a try that began %.2fs after the first failure succeeded", tr.began-fail.began)
		}
		if tr.ok && tr.began >= revoked {
			lastOK = tr.began
		}
	}
	t.Logf("revoke: the API answered in %.2fs; the first failing try began %.2fs after the call (the last succeeding one %s)",
		answered-revoked, fail.began-revoked, okAfter(lastOK, revoked))
	if d := fail.began - revoked; d > 2 {
		t.Errorf("the first failing try began %.2fs after the revoke, want within a second or two", d)
	}

	// Authorize again: new connections succeed.
	authorized := uptime(t)
	if _, err := alice.Authorize(ctx, tn.group.ID, selfRule(tn.group.ID), 0); err != nil {
		t.Fatalf("authorize again: %v", err)
	}
	ok := since(authorized, true, "a connection to succeed after the rule is authorized again")
	// The tries that began before it end within a second of it.
	var ts []try
	c.until("a try to end more than a second after the first success", func() (bool, string) {
		ts = tries(c.logs(alice, a.ID))
		return slices.ContainsFunc(ts, func(tr try) bool { return tr.began > ok.began+1 }), fmt.Sprintf("%d tries", len(ts))
	})
	lastFail := 0.0
	for _, tr := range ts {
		if !tr.ok && tr.began >= authorized {
			lastFail = tr.began
		}
	}
	t.Logf("authorize: the first succeeding try began %.2fs after the call (the last failing one %s)",
		ok.began-authorized, failAfter(lastFail, authorized))
	if d := ok.began - authorized; d > 2 {
		t.Errorf("the first succeeding try began %.2fs after the authorize, want within a second or two", d)
	}
}

// failAfter describes the last try that failed after the authorize.
func failAfter(lastFail, authorized float64) string {
	if lastFail == 0 {
		return "none after the call"
	}
	return fmt.Sprintf("%.2fs after it", lastFail-authorized)
}

// okAfter describes the last try that succeeded after the revoke.
func okAfter(lastOK, revoked float64) string {
	if lastOK == 0 {
		return "none after the call"
	}
	return fmt.Sprintf("%.2fs after it", lastOK-revoked)
}
