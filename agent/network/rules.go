package network

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// deleteTables is the nft script that deletes the network's tables,
// whether or not they exist (declaring a table first makes its deletion
// safe).
func (n *Network) deleteTables() string {
	var b strings.Builder
	for _, family := range []string{"inet", "bridge"} {
		fmt.Fprintf(&b, "table %s %s\ndelete table %s %s\n", family, n.cfg.Table, family, n.cfg.Table)
	}
	return b.String()
}

// ruleset is the network's nftables ruleset for the instances it knows
// (the package comment says what each chain does). Chains run just before
// the host's own filter chains: a packet they drop is dropped whatever the
// host's rules say; one they accept still passes the host's rules.
func (n *Network) ruleset() string {
	br, veth := n.bridgePrefix()+"*", n.vethPrefix()+"*"
	tenants := slices.SortedFunc(maps.Values(n.tenants), func(a, b *tenantNet) int { return strings.Compare(a.bridge, b.bridge) })
	insts := slices.SortedFunc(maps.Values(n.insts), func(a, b *instance) int { return strings.Compare(a.veth, b.veth) })
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

	w("table inet %s {", n.cfg.Table)
	w("\tset blocked {")
	w("\t\ttype ipv4_addr; flags interval; auto-merge")
	w("\t\telements = { %s }", prefixes(n.blocked))
	w("\t}")
	w("\tset allowed {")
	w("\t\ttype ipv4_addr; flags interval; auto-merge")
	if len(n.cfg.Allowed) > 0 {
		w("\t\telements = { %s }", prefixes(n.cfg.Allowed))
	}
	w("\t}")
	// The host itself: nothing from an instance but replies.
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter - 10; policy accept;")
	w("\t\tiifname { %q, %q } ct state established,related accept", br, veth)
	w("\t\tiifname { %q, %q } drop", br, veth)
	w("\t}")
	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter - 10; policy accept;")
	w("\t\tiifname %q drop", veth) // a port outside its bridge: a setup cut short
	w("\t\tiifname %q jump from_instance", br)
	w("\t\toifname { %q, %q } jump to_instance", br, veth)
	w("\t}")
	w("\tchain from_instance {")
	for _, t := range tenants {
		// A tenant sends from its own block only, and reaches its own
		// bridge (bridged traffic passes here on hosts with
		// br_netfilter).
		w("\t\tiifname %q ip saddr != %s drop", t.bridge, t.block)
		w("\t\tiifname %q oifname %q accept", t.bridge, t.bridge)
	}
	w("\t\tmeta nfproto != ipv4 drop")
	w("\t\tct state established,related accept")
	w("\t\toifname { %q, %q } drop", br, veth) // another tenant's instances
	w("\t\tip daddr @allowed accept")
	w("\t\tip daddr @blocked drop")
	w("\t\taccept")
	w("\t}")
	w("\tchain to_instance {")
	w("\t\tct state established,related accept")
	w("\t\tdrop")
	w("\t}")
	w("\tchain postrouting {")
	w("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	w("\t\tip saddr %s oifname != %q masquerade", n.cfg.Subnet, br)
	w("\t}")
	w("}")

	// Each instance's port: its own MAC and address only, IPv4 and ARP.
	w("table bridge %s {", n.cfg.Table)
	w("\tchain prerouting {")
	w("\t\ttype filter hook prerouting priority filter; policy accept;")
	for _, in := range insts {
		mac := macOf(in.addr)
		w("\t\tiifname %q ether saddr %s arp saddr ip %s accept", in.veth, mac, in.addr)
		w("\t\tiifname %q ether saddr %s ip saddr %s accept", in.veth, mac, in.addr)
	}
	w("\t\tiifname %q drop", veth)
	w("\t}")
	w("}")
	return b.String()
}

func prefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.Masked().String()
	}
	return strings.Join(s, ", ")
}
