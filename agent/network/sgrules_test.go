package network

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
)

// sgFixture is a network with three local instances: web (group sg-web),
// client (sg-client) and db (sg-db, sg-client), and one remote instance
// in sg-client. sg-web opens 8080 to the subnet, 9000 to sg-client's
// members and ICMP to all; sg-db opens 5432 to sg-web's members; every
// group allows all egress except sg-db, which may reach 10.0.0.0/24 on
// TCP 80-90 only.
func sgFixture() (agentapi.HostNetwork, []LocalPort) {
	hn := agentapi.HostNetwork{
		ID: "net-1", CIDR: "10.0.0.0/16",
		Subnets: []agentapi.NetworkSubnet{{ID: "subnet-1", CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"}},
		Endpoints: []agentapi.Endpoint{
			{InstanceID: "i-client", Address: "10.0.0.3", MAC: "02:00:0a:00:00:03", SecurityGroups: []string{"sg-client"}},
			{InstanceID: "i-db", Address: "10.0.0.4", MAC: "02:00:0a:00:00:04", SecurityGroups: []string{"sg-db", "sg-client"}},
			{InstanceID: "i-remote", Address: "10.0.0.9", MAC: "02:00:0a:00:00:09", HostID: "h-2", SecurityGroups: []string{"sg-client"}},
			{InstanceID: "i-web", Address: "10.0.0.2", MAC: "02:00:0a:00:00:02", SecurityGroups: []string{"sg-web"}},
		},
		SecurityGroups: []agentapi.GroupRules{
			{ID: "sg-web",
				Ingress: []agentapi.RuleSpec{
					{Protocol: "tcp", FromPort: 8080, ToPort: 8080, Peers: []string{"10.0.0.0/24"}},
					{Protocol: "tcp", FromPort: 9000, ToPort: 9000, Peers: []string{"10.0.0.3/32", "10.0.0.4/32", "10.0.0.9/32"}},
					{Protocol: "icmp", Peers: []string{"0.0.0.0/0"}},
				},
				Egress: []agentapi.RuleSpec{{Protocol: "all", Peers: []string{"0.0.0.0/0"}}}},
			{ID: "sg-client",
				Egress: []agentapi.RuleSpec{{Protocol: "all", Peers: []string{"0.0.0.0/0"}}}},
			{ID: "sg-db",
				Ingress: []agentapi.RuleSpec{{Protocol: "tcp", FromPort: 5432, ToPort: 5432, Peers: []string{"10.0.0.2/32"}}},
				Egress:  []agentapi.RuleSpec{{Protocol: "tcp", FromPort: 80, ToPort: 90, Peers: []string{"10.0.0.0/24"}}}},
		},
	}
	local := []LocalPort{
		{InstanceID: "i-web", Iface: "r-web", Addr: netip.MustParseAddr("10.0.0.2"), MAC: "02:00:0a:00:00:02"},
		{InstanceID: "i-client", Iface: "r-client", Addr: netip.MustParseAddr("10.0.0.3"), MAC: "02:00:0A:00:00:03"},
		{InstanceID: "i-db", Iface: "r-db", Addr: netip.MustParseAddr("10.0.0.4"), MAC: "02:00:0a:00:00:04"},
	}
	return hn, local
}

// sgNeedNft skips a test that loads or checks scripts where it cannot
// (not root, or no ip or nft), and fails it in CI.
func sgNeedNft(t testing.TB) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "nft needs root"
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil && why == "" {
			why = tool + " is missing; .ci/tools.sh installs it"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("the security group tests must run in CI: %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// sgNetns makes a network namespace of the test's own and removes it
// when the test ends; it returns its name.
func sgNetns(t testing.TB, role string) string {
	t.Helper()
	name := fmt.Sprintf("sgt-%d-%s-%s", os.Getpid(), role, sgRandHex())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}

func sgRandHex() string { return fmt.Sprintf("%06x", rand.Uint32()&0xffffff) }

// sgNft runs nft with args in a namespace, the script on its input.
func sgNft(netns, script string, args ...string) error {
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

func TestGroupRuleset(t *testing.T) {
	type change func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions)
	cases := []struct {
		name    string
		change  change
		want    []string
		notWant []string
	}{{
		name: "fixture",
		want: []string{
			"table inet sgtest\ndelete table inet sgtest\ntable inet sgtest {\n",
			// Anti-spoofing, MACs in lower case.
			`iifname . ether saddr . ip saddr { "r-client" . 02:00:0a:00:00:03 . 10.0.0.3, "r-db" . 02:00:0a:00:00:04 . 10.0.0.4, "r-web" . 02:00:0a:00:00:02 . 10.0.0.2 } accept`,
			`iifname { "r-client", "r-db", "r-web" } drop`,
			// The router: pings to the subnet's gateway only.
			`iifname { "r-client", "r-db", "r-web" } jump input_instance`,
			"ip daddr 10.0.0.1 icmp type echo-request accept\n\t\tdrop\n",
			// Conntrack first, then dispatch by interface.
			"ct state established,related accept\n\t\tct state invalid drop\n" +
				`		iifname vmap { "r-client" : goto out_r-client, "r-db" : goto out_r-db, "r-web" : goto out_r-web }` + "\n\t\tgoto deliver\n",
			`oifname vmap { "r-client" : goto in_r-client, "r-db" : goto in_r-db, "r-web" : goto in_r-web }` + "\n\t\taccept\n",
			// Each instance's groups, sorted, then drop.
			"chain out_r-db {\n\t\tjump ge_sg-client\n\t\tjump ge_sg-db\n\t\tdrop\n\t}",
			"chain in_r-db {\n\t\tjump gi_sg-client\n\t\tjump gi_sg-db\n\t\tdrop\n\t}",
			"chain in_r-web {\n\t\tjump gi_sg-web\n\t\tdrop\n\t}",
			// Rules: all to anywhere needs no match; peers as sets.
			"chain ge_sg-web {\n\t\tgoto deliver\n\t}",
			"chain gi_sg-web {\n\t\ticmp type echo-request accept\n" +
				"\t\tip saddr 10.0.0.0/24 tcp dport 8080 accept\n" +
				"\t\tip saddr @peers_0 tcp dport 9000 accept\n\t}",
			// Peer sets of more than one address are named.
			"table inet sgtest {\n\tset peers_0 {\n\t\ttype ipv4_addr; flags interval;\n" +
				"\t\telements = { 10.0.0.3, 10.0.0.4, 10.0.0.9 }\n\t}\n\tchain prerouting {",
			"chain ge_sg-db {\n\t\tip daddr 10.0.0.0/24 tcp dport 80-90 goto deliver\n\t}",
			"chain gi_sg-db {\n\t\tip saddr 10.0.0.2 tcp dport 5432 accept\n\t}",
			"chain gi_sg-client {\n\t}",
		},
	}, {
		name: "no local instances",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			*local = nil
		},
		want:    []string{"chain forward {", "\t\tgoto deliver\n", "chain deliver {\n\t\taccept\n\t}"},
		notWant: []string{"vmap", "iifname", "chain ge_", "chain gi_"},
	}, {
		name: "a group nobody local is in has no chains",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			*local = (*local)[:1] // web
		},
		want:    []string{"chain gi_sg-web {"},
		notWant: []string{"sg-db", "sg-client", "r-db"},
	}, {
		name: "a group-peer rule of an empty group allows nothing",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			hn.SecurityGroups[0].Ingress[1].Peers = nil
			hn.SecurityGroups[0].Ingress[2].Peers = []string{}
		},
		want:    []string{"chain gi_sg-web {\n\t\tip saddr 10.0.0.0/24 tcp dport 8080 accept\n\t}"},
		notWant: []string{"9000", "icmp type echo-request accept\n\t\tip saddr"},
	}, {
		name: "nested and duplicate peers and rules merge, adjacent ones stay",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			g := &hn.SecurityGroups[2] // sg-db
			g.Ingress = []agentapi.RuleSpec{
				{Protocol: "udp", FromPort: 53, ToPort: 53, Peers: []string{"10.0.1.7/32", "10.0.0.0/16", "10.0.0.5/24", "192.168.0.1/32"}},
				{Protocol: "udp", FromPort: 53, ToPort: 53, Peers: []string{"192.168.0.1/32", "10.0.0.0/16"}},
				{Protocol: "udp", Peers: []string{"10.9.0.0/16"}},
				{Protocol: "udp", FromPort: 1, ToPort: 65535, Peers: []string{"10.7.0.128/25", "10.7.0.0/25", "10.7.1.0/24"}},
				{Protocol: "all", Peers: []string{"10.8.0.0/16"}},
				{Protocol: "tcp", FromPort: 53, ToPort: 53, Peers: []string{"192.168.0.1/32", "10.0.0.0/16"}},
			}
		},
		want: []string{"chain gi_sg-db {\n" +
			"\t\tip saddr 10.8.0.0/16 accept\n" +
			"\t\tip saddr 10.9.0.0/16 meta l4proto udp accept\n" +
			"\t\tip saddr @peers_0 tcp dport 53 accept\n" +
			"\t\tip saddr @peers_0 udp dport 53 accept\n" +
			"\t\tip saddr @peers_1 udp dport 1-65535 accept\n\t}",
			"\tset peers_0 {\n\t\ttype ipv4_addr; flags interval;\n\t\telements = { 10.0.0.0/16, 192.168.0.1 }\n\t}\n" +
				"\tset peers_1 {\n\t\ttype ipv4_addr; flags interval;\n\t\telements = { 10.7.0.0/25, 10.7.0.128/25, 10.7.1.0/24 }\n\t}\n" +
				"\tset peers_2 {\n\t\ttype ipv4_addr; flags interval;\n\t\telements = { 10.0.0.3, 10.0.0.4, 10.0.0.9 }\n\t}\n\tchain prerouting {"},
	}, {
		name: "gateways and services from the options",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			opts.Gateways = []netip.Addr{netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.0.1")}
			opts.Services = []GatewayService{{"udp", 53}, {"tcp", 53}, {"udp", 53}}
		},
		want: []string{"ip daddr { 10.0.0.1, 10.0.1.1 } icmp type echo-request accept\n" +
			"\t\tip daddr { 10.0.0.1, 10.0.1.1 } meta l4proto . th dport { tcp . 53, udp . 53 } accept\n\t\tdrop\n"},
	}, {
		name: "no gateway: nothing reaches the router",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			hn.Subnets[0].Gateway = ""
			opts.Services = []GatewayService{{"udp", 53}}
		},
		want:    []string{"chain input_instance {\n\t\tct state established,related accept\n\t\tdrop\n\t}"},
		notWant: []string{"ip daddr 10.0.0.1", "udp . 53"},
	}, {
		name: "a local instance without an endpoint or with an unknown group has no rules",
		change: func(hn *agentapi.HostNetwork, local *[]LocalPort, opts *RulesetOptions) {
			hn.Endpoints = hn.Endpoints[:1] // client only
			hn.Endpoints[0].SecurityGroups = []string{"sg-gone"}
		},
		want:    []string{"chain out_r-client {\n\t\tdrop\n\t}", "chain in_r-web {\n\t\tdrop\n\t}"},
		notWant: []string{"sg-gone", "chain ge_"},
	}}
	check := ""
	if os.Geteuid() == 0 {
		if _, err := exec.LookPath("nft"); err == nil {
			check = sgNetns(t, "check")
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hn, local := sgFixture()
			var opts RulesetOptions
			if c.change != nil {
				c.change(&hn, &local, &opts)
			}
			script, err := GroupRuleset("sgtest", hn, local, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.want {
				if !strings.Contains(script, w) {
					t.Errorf("script lacks\n%s\n---- script:\n%s", w, script)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(script, w) {
					t.Errorf("script has %q:\n%s", w, script)
				}
			}
			if check == "" {
				sgNeedNft(t)
			}
			if err := sgNft(check, script, "-c", "-f", "-"); err != nil {
				t.Errorf("%v\n---- script:\n%s", err, script)
			}
		})
	}
}

// TestGroupRulesetOrder: the script depends on the input's content, not
// its order.
func TestGroupRulesetOrder(t *testing.T) {
	hn, local := sgFixture()
	want, err := GroupRuleset("sgtest", hn, local, RulesetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shuffle := func(n int, swap func(i, j int)) { rand.Shuffle(n, swap) }
	for i := range 20 {
		hn, local := sgFixture()
		shuffle(len(local), func(i, j int) { local[i], local[j] = local[j], local[i] })
		shuffle(len(hn.Endpoints), func(i, j int) { hn.Endpoints[i], hn.Endpoints[j] = hn.Endpoints[j], hn.Endpoints[i] })
		sg := hn.SecurityGroups
		shuffle(len(sg), func(i, j int) { sg[i], sg[j] = sg[j], sg[i] })
		for _, g := range sg {
			shuffle(len(g.Ingress), func(i, j int) { g.Ingress[i], g.Ingress[j] = g.Ingress[j], g.Ingress[i] })
			for _, r := range g.Ingress {
				shuffle(len(r.Peers), func(i, j int) { r.Peers[i], r.Peers[j] = r.Peers[j], r.Peers[i] })
			}
		}
		for _, e := range hn.Endpoints {
			slices.Reverse(e.SecurityGroups)
		}
		got, err := GroupRuleset("sgtest", hn, local, RulesetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("shuffle %d: a different script:\n%s\n---- want:\n%s", i, got, want)
		}
	}
}

func TestGroupRulesetErrors(t *testing.T) {
	type change func(hn *agentapi.HostNetwork, local []LocalPort, opts *RulesetOptions)
	rule := func(hn *agentapi.HostNetwork, r agentapi.RuleSpec) {
		hn.SecurityGroups[2].Egress = append(hn.SecurityGroups[2].Egress, r)
	}
	cases := []struct {
		name   string
		table  string
		change change
		want   string
	}{
		{name: "table", table: "1table", want: `bad table name "1table"`},
		{name: "table chars", table: "a b", want: `bad table name "a b"`},
		{name: "protocol", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "sctp", Peers: []string{"10.0.0.0/8"}})
		}, want: `group sg-db: egress rule 2: bad protocol "sctp"`},
		{name: "CIDR", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			hn.SecurityGroups[0].Ingress[1].Peers[1] = "10.0.0.300/32"
		}, want: `group sg-web: ingress rule 2: bad CIDR "10.0.0.300/32"`},
		{name: "bare address", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "tcp", Peers: []string{"10.0.0.1"}})
		}, want: `bad CIDR "10.0.0.1"`},
		{name: "IPv6 CIDR", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "tcp", Peers: []string{"fd00::/64"}})
		}, want: `bad CIDR "fd00::/64"`},
		{name: "ports reversed", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "tcp", FromPort: 90, ToPort: 80, Peers: []string{"10.0.0.0/8"}})
		}, want: "bad port range 90-80"},
		{name: "port too high", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "udp", FromPort: 1, ToPort: 65536, Peers: []string{"10.0.0.0/8"}})
		}, want: "bad port range 1-65536"},
		{name: "one port zero", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "udp", ToPort: 53, Peers: []string{"10.0.0.0/8"}})
		}, want: "bad port range 0-53"},
		{name: "ports on icmp", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "icmp", FromPort: 8, ToPort: 8, Peers: []string{"10.0.0.0/8"}})
		}, want: "protocol icmp takes no ports (8-8)"},
		{name: "ports on all", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			rule(hn, agentapi.RuleSpec{Protocol: "all", FromPort: 1, ToPort: 2})
		}, want: "protocol all takes no ports (1-2)"},
		{name: "group ID", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			hn.SecurityGroups[1].ID = "sg x"
		}, want: `bad group ID "sg x"`},
		{name: "endpoint's group ID", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			hn.Endpoints[0].SecurityGroups = []string{"sg;drop"}
		}, want: `instance i-client: bad group ID "sg;drop"`},
		{name: "group twice", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			hn.SecurityGroups[1].ID = "sg-web"
		}, want: "group sg-web twice"},
		{name: "interface name", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[0].Iface = `a"b`
		}, want: `instance i-web: bad interface name "a\"b"`},
		{name: "interface too long", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[0].Iface = "abcdefghijklmnop"
		}, want: `bad interface name "abcdefghijklmnop"`},
		{name: "interface twice", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[1].Iface = local[0].Iface
		}, want: "instance i-client: duplicate interface r-web"},
		{name: "instance twice", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[1].InstanceID = local[0].InstanceID
		}, want: `interface r-client: missing or duplicate instance ID "i-web"`},
		{name: "address", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[0].Addr = netip.MustParseAddr("fd00::1")
		}, want: `instance i-web: bad address "fd00::1"`},
		{name: "no address", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[0].Addr = netip.Addr{}
		}, want: "instance i-web: bad address"},
		{name: "address twice", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[2].Addr = local[0].Addr
		}, want: "instance i-db: duplicate address 10.0.0.2"},
		{name: "MAC", change: func(_ *agentapi.HostNetwork, local []LocalPort, _ *RulesetOptions) {
			local[0].MAC = "02:00:0a:00:00"
		}, want: `instance i-web: bad MAC "02:00:0a:00:00"`},
		{name: "subnet gateway", change: func(hn *agentapi.HostNetwork, _ []LocalPort, _ *RulesetOptions) {
			hn.Subnets[0].Gateway = "10.0.0.x"
		}, want: `subnet subnet-1: bad gateway "10.0.0.x"`},
		{name: "option gateway", change: func(_ *agentapi.HostNetwork, _ []LocalPort, opts *RulesetOptions) {
			opts.Gateways = []netip.Addr{netip.MustParseAddr("::1")}
		}, want: `bad gateway address "::1"`},
		{name: "service", change: func(_ *agentapi.HostNetwork, _ []LocalPort, opts *RulesetOptions) {
			opts.Services = []GatewayService{{"icmp", 1}}
		}, want: "bad gateway service icmp/1"},
		{name: "service port", change: func(_ *agentapi.HostNetwork, _ []LocalPort, opts *RulesetOptions) {
			opts.Services = []GatewayService{{"udp", 0}}
		}, want: "bad gateway service udp/0"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hn, local := sgFixture()
			var opts RulesetOptions
			if c.change != nil {
				c.change(&hn, local, &opts)
			}
			table := sgOr(c.table, "sgtest")
			script, err := GroupRuleset(table, hn, local, opts)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			if script != "" {
				t.Errorf("a script with the error:\n%s", script)
			}
		})
	}
}

func sgOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
