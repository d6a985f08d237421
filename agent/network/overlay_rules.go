//go:build linux

package network

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// The overlay's nftables rules: one table of the driver's
// ("gpucloud_<cloud>", inet) in the host's namespace, for the transit
// links, and one in each router namespace (inet and arp), for the
// network's instances. Each is replaced whole, in one `nft -f -`
// transaction run in its namespace.

// nftIn runs an nft script in a namespace ("" is the host's).
func (o *Overlay) nftIn(ctx context.Context, ns, script string) error {
	if ns == "" {
		ns = o.cfg.HostNetns
	}
	var err error
	if ns == "" {
		_, err = run(ctx, []byte(script), o.cfg.NFT, "-f", "-")
	} else {
		_, err = run(ctx, []byte(script), o.cfg.IP, "netns", "exec", ns, o.cfg.NFT, "-f", "-")
	}
	if err != nil {
		return fmt.Errorf("overlay rules: %w", err)
	}
	return nil
}

// resetTables is the script that empties the driver's tables of the
// families (declaring a table first makes its deletion safe).
func (o *Overlay) resetTables(families ...string) string {
	var b strings.Builder
	for _, f := range families {
		fmt.Fprintf(&b, "table %s %s\ndelete table %s %s\n", f, o.table(), f, o.table())
	}
	return b.String()
}

// applyHost replaces the host's table.
func (o *Overlay) applyHost(ctx context.Context) error {
	return o.nftIn(ctx, "", o.resetTables("inet")+o.hostRules())
}

// hostRules are the host's rules for the traffic of the routers' transit
// links, the way out of the networks: nothing reaches the host itself
// but replies; blocked destinations (the host's networks, the underlay,
// the transit links, VXLAN's port) are dropped unless allowed; nothing
// new enters a transit link from the host's side; what leaves the host
// from a router is masqueraded to the host's address.
func (o *Overlay) hostRules() string {
	var transits []string
	for _, r := range o.routers {
		transits = append(transits, r.transit)
	}
	slices.Sort(transits)
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("table inet %s {", o.table())
	w("\tset transits {")
	w("\t\ttype ifname")
	if len(transits) > 0 {
		w("\t\telements = { %s }", quoted(transits))
	}
	w("\t}")
	w("\tset blocked {")
	w("\t\ttype ipv4_addr; flags interval; auto-merge")
	w("\t\telements = { %s }", prefixes(o.blocked))
	w("\t}")
	w("\tset allowed {")
	w("\t\ttype ipv4_addr; flags interval; auto-merge")
	if len(o.cfg.Allowed) > 0 {
		w("\t\telements = { %s }", prefixes(o.cfg.Allowed))
	}
	w("\t}")
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter - 10; policy accept;")
	w("\t\tiifname @transits ct state established,related accept")
	w("\t\tiifname @transits drop")
	w("\t}")
	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter - 10; policy accept;")
	w("\t\tiifname @transits jump from_router")
	w("\t\toifname @transits jump to_router")
	w("\t}")
	w("\tchain from_router {")
	w("\t\tct state established,related accept")
	w("\t\tmeta nfproto != ipv4 drop")
	w("\t\toifname @transits drop")
	w("\t\tudp dport %d drop", o.cfg.Port)
	w("\t\tip daddr @allowed accept")
	w("\t\tip daddr @blocked drop")
	w("\t\taccept")
	w("\t}")
	w("\tchain to_router {")
	w("\t\tct state established,related accept")
	w("\t\tdrop")
	w("\t}")
	w("\tchain postrouting {")
	w("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	w("\t\tip saddr %s oifname != @transits masquerade", o.cfg.TransitPool)
	w("\t}")
	w("}")
	return b.String()
}

// applyRouter replaces a router namespace's tables.
func (o *Overlay) applyRouter(ctx context.Context, r *router) error {
	return o.nftIn(ctx, o.routerNS(r.vni), o.resetTables("inet", "arp")+o.routerRules(r))
}

// routerRules are a router's rules:
//
//   - each local instance sends only from its own MAC and address, IPv4
//     and ARP only; the VXLAN device delivers only from the network's
//     remote endpoints;
//   - the router itself answers nothing but ICMP echo to its gateways
//     and replies;
//   - forwarded: replies; new traffic between the network's endpoints
//     (local to local or remote, remote to local); from a local instance
//     to the outside through the transit link (masqueraded there; the
//     host's rules decide what the outside is). Everything else is
//     dropped: traffic to addresses of the network that no endpoint
//     has, from the outside, between remote endpoints.
func (o *Overlay) routerRules(r *router) string {
	var insts []*ovInst
	gws := map[netip.Addr]bool{}
	for _, in := range o.insts {
		if in.vni == r.vni {
			insts = append(insts, in)
			gws[in.gw] = true
		}
	}
	slices.SortFunc(insts, func(a, b *ovInst) int { return strings.Compare(a.veth, b.veth) })
	var endpoints, remotes []netip.Addr
	var veths []string
	for _, in := range insts {
		endpoints = append(endpoints, in.addr)
		veths = append(veths, in.veth)
	}
	for _, e := range o.remotes(r) {
		endpoints = append(endpoints, e.addr)
		remotes = append(remotes, e.addr)
	}
	gateways := slices.SortedFunc(maps.Keys(gws), netip.Addr.Compare)

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	set := func(name, typ string, elems string) {
		w("\tset %s {", name)
		w("\t\ttype %s", typ)
		if elems != "" {
			w("\t\telements = { %s }", elems)
		}
		w("\t}")
	}
	w("table inet %s {", o.table())
	set("instances", "ifname", quoted(veths))
	set("endpoints", "ipv4_addr", addrList(endpoints))
	set("remotes", "ipv4_addr", addrList(remotes))
	set("gateways", "ipv4_addr", addrList(gateways))
	w("\tchain prerouting {")
	w("\t\ttype filter hook prerouting priority raw; policy accept;")
	for _, in := range insts {
		w("\t\tiifname %q ether saddr != %s drop", in.veth, in.mac)
		w("\t\tiifname %q meta nfproto != ipv4 drop", in.veth)
		w("\t\tiifname %q ip saddr != %s drop", in.veth, in.addr)
	}
	w("\t\tiifname %q meta nfproto != ipv4 drop", r.vxlan)
	w("\t\tiifname %q ip saddr != @remotes drop", r.vxlan)
	w("\t}")
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy drop;")
	w("\t\tiif \"lo\" accept")
	w("\t\tct state established,related accept")
	w("\t\tiifname @instances ip daddr @gateways icmp type echo-request accept")
	w("\t\tiifname %q ip daddr @gateways icmp type echo-request accept", r.vxlan)
	w("\t}")
	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter; policy drop;")
	w("\t\tct state established,related accept")
	w("\t\tiifname @instances ip daddr @endpoints oifname @instances accept")
	w("\t\tiifname @instances ip daddr @endpoints oifname %q accept", r.vxlan)
	w("\t\tiifname %q ip daddr @endpoints oifname @instances accept", r.vxlan)
	w("\t\tiifname @instances oifname %q ip daddr != %s accept", transitIf, r.cidr)
	w("\t}")
	w("\tchain postrouting {")
	w("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	w("\t\toifname %q masquerade", transitIf)
	w("\t}")
	w("}")
	// ARP: an instance answers and asks as itself only.
	w("table arp %s {", o.table())
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy accept;")
	for _, in := range insts {
		w("\t\tiifname %q arp saddr ether != %s drop", in.veth, in.mac)
		w("\t\tiifname %q arp saddr ip != %s drop", in.veth, in.addr)
	}
	w("\t}")
	w("}")
	return b.String()
}

// quoted joins names as nft strings.
func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// addrList joins addresses for an nft set.
func addrList(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
