package network

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// fake is a network with state but no host behind it, for the pure parts.
func fake(t *testing.T) *Network {
	t.Helper()
	cfg := Config{Subnet: netip.MustParsePrefix("10.200.0.0/22"), TenantBits: 24, Table: "gpucloud", IfPrefix: "gc"}
	if err := cfg.check(); err != nil {
		t.Fatal(err)
	}
	n := &Network{cfg: cfg, insts: map[string]*instance{}, tenants: map[string]*tenantNet{}}
	n.blocked = append([]netip.Prefix{cfg.Subnet}, DefaultBlocked...)
	return n
}

func TestAllocation(t *testing.T) {
	n := fake(t)
	var blocks []string
	for i := range 4 {
		b, ok := n.freeBlock()
		if !ok {
			t.Fatalf("block %d: none free", i)
		}
		blocks = append(blocks, b.String())
		tn := "t" + string(rune('a'+i))
		n.tenants[tn] = &tenantNet{tenant: tn, block: b, bridge: "gcb" + tn}
	}
	if got := strings.Join(blocks, " "); got != "10.200.0.0/24 10.200.1.0/24 10.200.2.0/24 10.200.3.0/24" {
		t.Fatalf("blocks %s", got)
	}
	if b, ok := n.freeBlock(); ok {
		t.Fatalf("a fifth block in a /22 of /24s: %s", b)
	}
	// Freed blocks are used again, lowest first.
	delete(n.tenants, "tb")
	if b, _ := n.freeBlock(); b.String() != "10.200.1.0/24" {
		t.Fatalf("freed block: %s", b)
	}
	ta := n.tenants["ta"]
	var addrs []netip.Addr
	for i := range 253 {
		a, ok := n.freeAddr(ta)
		if !ok {
			t.Fatalf("address %d: none free", i)
		}
		addrs = append(addrs, a)
		id := "i" + a.String()
		n.insts[id] = &instance{id: id, tenant: "ta", addr: a}
	}
	if addrs[0].String() != "10.200.0.2" || addrs[252].String() != "10.200.0.254" {
		t.Fatalf("addresses from %s to %s, want .2 to .254 (.1 is the gateway, .255 the broadcast)", addrs[0], addrs[252])
	}
	if a, ok := n.freeAddr(ta); ok {
		t.Fatalf("a 254th address: %s", a)
	}
	// Another tenant's block has its own addresses.
	if a, _ := n.freeAddr(n.tenants["tc"]); a.String() != "10.200.2.2" {
		t.Fatalf("tc's first address %s", a)
	}
}

func TestConfigCheck(t *testing.T) {
	for _, tt := range []struct {
		desc string
		cfg  Config
		want string
	}{
		{"IPv6 subnet", Config{Subnet: netip.MustParsePrefix("fd00::/64"), TenantBits: 80, Table: "t", IfPrefix: "p"}, "want IPv4"},
		{"blocks wider than the subnet", Config{Subnet: DefaultSubnet, TenantBits: 8, Table: "t", IfPrefix: "p"}, "prefix length"},
		{"blocks too small", Config{Subnet: DefaultSubnet, TenantBits: 31, Table: "t", IfPrefix: "p"}, "prefix length"},
		{"table with a dash", Config{Subnet: DefaultSubnet, TenantBits: 24, Table: "a-b", IfPrefix: "p"}, "table"},
		{"long prefix", Config{Subnet: DefaultSubnet, TenantBits: 24, Table: "t", IfPrefix: "abcdefg"}, "interface prefix"},
		{"IPv6 blocked", Config{Subnet: DefaultSubnet, TenantBits: 24, Table: "t", IfPrefix: "p", Blocked: []netip.Prefix{netip.MustParsePrefix("::/0")}}, "want an IPv4 prefix"},
	} {
		t.Run(tt.desc, func(t *testing.T) {
			if err := tt.cfg.check(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestIDs(t *testing.T) {
	for _, id := range []string{"", ".", "..", "a/b", "a b", "a;b", strings.Repeat("x", 81), "ü"} {
		if checkID("instance", id) == nil {
			t.Errorf("accepted %q", id)
		}
	}
	if checkID("tenant", strings.Repeat("x", 65)) == nil {
		t.Error("accepted a tenant ID of 65 bytes")
	}
	for _, id := range []string{"i-1", "ten_a.b", strings.Repeat("x", 80)} {
		if err := checkID("instance", id); err != nil {
			t.Errorf("refused %q: %v", id, err)
		}
	}
	// The longest IDs and table make an alias an interface takes.
	n := fake(t)
	n.cfg.Table = strings.Repeat("t", 32)
	al := n.alias(url.Values{"tenant": {strings.Repeat("x", 64)}, "instance": {strings.Repeat("y", 80)}, "addr": {"255.255.255.255"}})
	if len(al) > 255 {
		t.Fatalf("alias of %d bytes", len(al))
	}
}

func TestNames(t *testing.T) {
	taken := map[string]bool{}
	a := ifName("gcv", "instance:a", func(s string) bool { return taken[s] })
	if len(a) != 11 || !strings.HasPrefix(a, "gcv") {
		t.Fatalf("name %q", a)
	}
	if again := ifName("gcv", "instance:a", func(s string) bool { return taken[s] }); again != a {
		t.Fatalf("names are not stable: %s then %s", a, again)
	}
	taken[a] = true
	if b := ifName("gcv", "instance:a", func(s string) bool { return taken[s] }); b == a || len(b) != 11 {
		t.Fatalf("a taken name was given again: %s", b)
	}
	if m := macOf(netip.MustParseAddr("10.88.3.7")); m != "02:00:0a:58:03:07" {
		t.Fatalf("mac %s", m)
	}
}

func TestAlias(t *testing.T) {
	n := fake(t)
	al := n.alias(url.Values{"tenant": {"ten-1"}, "instance": {"i-1"}, "addr": {"10.200.0.2"}})
	if len(al) > 255 || strings.ContainsAny(al, " \"\n") {
		t.Fatalf("alias %q", al)
	}
	v, mine, ok := n.parseAlias(al)
	if !mine || !ok || v.Get("instance") != "i-1" || v.Get("tenant") != "ten-1" {
		t.Fatalf("parsed %v %v %v", v, mine, ok)
	}
	other := &Network{cfg: n.cfg}
	other.cfg.Table = "other"
	if _, mine, _ := other.parseAlias(al); mine {
		t.Fatal("another table's network claims the link")
	}
	if _, mine, _ := n.parseAlias("someone else's link"); mine {
		t.Fatal("claimed a foreign alias")
	}
	if _, mine, ok := n.parseAlias(""); !mine || ok {
		t.Fatal("a link of the network's names without an alias is a stray of the network's")
	}
}

// TestRuleset checks the generated rules: what each instance and tenant
// gets, and that nothing of an instance is left once it is gone.
func TestRuleset(t *testing.T) {
	n := fake(t)
	n.cfg.Allowed = []netip.Prefix{netip.MustParsePrefix("10.1.2.3/32")}
	n.tenants["ta"] = &tenantNet{tenant: "ta", bridge: "gcb00000001", block: netip.MustParsePrefix("10.200.0.0/24")}
	n.tenants["tb"] = &tenantNet{tenant: "tb", bridge: "gcb00000002", block: netip.MustParsePrefix("10.200.1.0/24")}
	n.insts["a1"] = &instance{id: "a1", tenant: "ta", addr: netip.MustParseAddr("10.200.0.2"), veth: "gcv000000a1"}
	n.insts["b1"] = &instance{id: "b1", tenant: "tb", addr: netip.MustParseAddr("10.200.1.2"), veth: "gcv000000b1"}
	rs := n.ruleset()
	for _, want := range []string{
		"table inet gpucloud {",
		`iifname { "gcb*", "gcv*" } drop`,
		`iifname "gcb00000001" ip saddr != 10.200.0.0/24 drop`,
		`iifname "gcb00000002" oifname "gcb00000002" accept`,
		`oifname { "gcb*", "gcv*" } drop`,
		"elements = { 10.200.0.0/22, 0.0.0.0/8, 10.0.0.0/8,",
		"elements = { 10.1.2.3/32 }",
		`ip saddr 10.200.0.0/22 oifname != "gcb*" masquerade`,
		"table bridge gpucloud {",
		`iifname "gcv000000a1" ether saddr 02:00:0a:c8:00:02 ip saddr 10.200.0.2 accept`,
		`iifname "gcv000000b1" ether saddr 02:00:0a:c8:01:02 arp saddr ip 10.200.1.2 accept`,
		`iifname "gcv*" drop`,
	} {
		if !strings.Contains(rs, want) {
			t.Errorf("the ruleset lacks %q:\n%s", want, rs)
		}
	}
	delete(n.insts, "b1")
	delete(n.tenants, "tb")
	rs = n.ruleset()
	for _, gone := range []string{"gcv000000b1", "10.200.1.2", "gcb00000002", "10.200.1.0/24"} {
		if strings.Contains(rs, gone) {
			t.Errorf("the ruleset still names %s after its instance went:\n%s", gone, rs)
		}
	}
	if d := n.deleteTables(); !strings.Contains(d, "delete table inet gpucloud") || !strings.Contains(d, "delete table bridge gpucloud") {
		t.Fatalf("delete script %q", d)
	}
}
