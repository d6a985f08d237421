//go:build linux

package network

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agentapi"
)

// The overlay's nftables rules: one table of the driver's
// ("gpucloud_<cloud>", inet) in the host's namespace, for the transit
// links; in each router namespace, the security groups' table
// (GroupRuleset, "gpucloud_<cloud>") and the overlay's own
// ("gpucloud_<cloud>_ov", inet and arp). Each script replaces its tables
// whole, in one `nft -f -` transaction run in its namespace.

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
// links, the way out of the networks, and for its VXLAN packets, which
// are not tracked: nothing reaches the host itself from a router but
// replies; blocked destinations (the host's networks, the underlay, the
// transit links, VXLAN's port) are dropped unless allowed; nothing new
// enters a transit link from the host's side but connections to a
// public address the host serves, through its router's link (from
// outside or from another router); what leaves the host from a router
// is masqueraded to the host's address.
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
	// The public addresses the host serves, each with the transit link
	// of its router (overlay_public.go).
	var pubs []string
	for _, a := range slices.SortedFunc(maps.Keys(o.served), netip.Addr.Compare) {
		if r := o.routers[o.served[a].vni]; r != nil {
			pubs = append(pubs, fmt.Sprintf("%s . %q", a, r.transit))
		}
	}
	w("\tset publics {")
	w("\t\ttype ipv4_addr . ifname")
	if len(pubs) > 0 {
		w("\t\telements = { %s }", strings.Join(pubs, ", "))
	}
	w("\t}")
	w("\tset allowed {")
	w("\t\ttype ipv4_addr; flags interval; auto-merge")
	if len(o.cfg.Allowed) > 0 {
		w("\t\telements = { %s }", prefixes(o.cfg.Allowed))
	}
	w("\t}")
	// The VXLAN packets between hosts need no connection tracking: it
	// would only cost each of them a lookup (what they carry is tracked
	// in the routers).
	w("\tchain raw_prerouting {")
	w("\t\ttype filter hook prerouting priority raw; policy accept;")
	w("\t\tip daddr %s udp dport %d notrack", o.cfg.Underlay, o.cfg.Port)
	w("\t}")
	w("\tchain raw_output {")
	w("\t\ttype filter hook output priority raw; policy accept;")
	w("\t\tip saddr %s udp dport %d notrack", o.cfg.Underlay, o.cfg.Port)
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
	w("\t\tip daddr . oifname @publics accept")
	w("\t\toifname @transits drop")
	w("\t\tudp dport %d drop", o.cfg.Port)
	w("\t\tip daddr @allowed accept")
	w("\t\tip daddr @blocked drop")
	w("\t\taccept")
	w("\t}")
	w("\tchain to_router {")
	w("\t\tct state established,related accept")
	w("\t\tip daddr . oifname @publics accept")
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
	script, err := o.routerScript(r)
	if err != nil {
		return fmt.Errorf("network %s: %w", r.netID, err)
	}
	return o.nftIn(ctx, o.routerNS(r.vni), script)
}

// routerScript is the script that replaces a router's tables: the
// security groups of its local instances (GroupRuleset, in table
// gpucloud_<cloud>: anti-spoofing, the groups' stateful rules, what
// reaches the router itself), from the last view of the network (none
// yet: no group, so nothing new passes), and the overlay's own table
// (gpucloud_<cloud>_ov, inet and arp), whose rules hold whatever the
// groups say:
//
//   - the VXLAN device delivers IPv4 from the network's remote endpoints
//     only, to local instances only, and reaches nothing of the router
//     itself but ICMP echo to its gateways and replies;
//   - nothing new comes in through the transit link (the host's side)
//     but connections to the public addresses of local instances, whose
//     destination is rewritten to the instance's private address
//     (overlay_public.go), for the groups to decide;
//   - what leaves through the transit link is not for the network's own
//     addresses (those that no endpoint has), and is masqueraded to the
//     router's transit address;
//   - a local instance answers and asks ARP as itself only.
func (o *Overlay) routerScript(r *router) (string, error) {
	var insts []*ovInst
	gws := map[netip.Addr]bool{}
	for _, in := range o.insts {
		if in.vni == r.vni {
			insts = append(insts, in)
			gws[in.gw] = true
		}
	}
	slices.SortFunc(insts, func(a, b *ovInst) int { return strings.Compare(a.veth, b.veth) })
	var remotes []netip.Addr
	for _, e := range o.remotes(r) {
		remotes = append(remotes, e.addr)
	}
	var veths []string
	ports := make([]LocalPort, 0, len(insts))
	for _, in := range insts {
		veths = append(veths, in.veth)
		ports = append(ports, LocalPort{InstanceID: in.id, Iface: in.veth, Addr: in.addr, MAC: in.mac.String()})
	}
	gateways := slices.SortedFunc(maps.Keys(gws), netip.Addr.Compare)
	pubs, privs := o.routerPublics(r)
	pubMap := make([]string, len(pubs))
	for i := range pubs {
		pubMap[i] = fmt.Sprintf("%s : %s", pubs[i], privs[i])
	}
	hn, ok := o.views[r.vni]
	if !ok || hn.ID != r.netID {
		hn = agentapi.HostNetwork{ID: r.netID, VNI: r.vni, CIDR: r.cidr.String()}
	}
	groups, err := GroupRuleset(o.table(), hn, ports, RulesetOptions{Gateways: gateways})
	if err != nil {
		return "", err
	}

	var b strings.Builder
	b.WriteString(groups)
	ov := o.table() + "_ov"
	for _, f := range []string{"inet", "arp"} {
		fmt.Fprintf(&b, "table %s %s\ndelete table %s %s\n", f, ov, f, ov)
	}
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	set := func(name, typ string, elems string) {
		w("\tset %s {", name)
		w("\t\ttype %s", typ)
		if elems != "" {
			w("\t\telements = { %s }", elems)
		}
		w("\t}")
	}
	w("table inet %s {", ov)
	set("instances", "ifname", quoted(veths))
	set("remotes", "ipv4_addr", addrList(remotes))
	set("gateways", "ipv4_addr", addrList(gateways))
	set("publics", "ipv4_addr", addrList(pubs))
	w("\tmap public_in {")
	w("\t\ttype ipv4_addr : ipv4_addr")
	if len(pubMap) > 0 {
		w("\t\telements = { %s }", strings.Join(pubMap, ", "))
	}
	w("\t}")
	w("\tchain prerouting {")
	w("\t\ttype filter hook prerouting priority raw; policy accept;")
	w("\t\tiifname %q meta nfproto != ipv4 drop", r.vxlan)
	w("\t\tiifname %q ip saddr != @remotes drop", r.vxlan)
	w("\t}")
	w("\tchain public_in {")
	w("\t\ttype nat hook prerouting priority dstnat; policy accept;")
	w("\t\tiifname %q dnat ip to ip daddr map @public_in", transitIf)
	w("\t}")
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy accept;")
	w("\t\tiifname { %q, %q } ct state established,related accept", r.vxlan, transitIf)
	w("\t\tiifname %q ip daddr @gateways icmp type echo-request accept", r.vxlan)
	w("\t\tiifname { %q, %q } drop", r.vxlan, transitIf)
	w("\t}")
	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter; policy accept;")
	w("\t\tiifname %q oifname != @instances drop", r.vxlan)
	w("\t\tiifname %q ct state new ct original ip daddr != @publics drop", transitIf)
	w("\t\toifname %q ip daddr %s drop", transitIf, r.cidr)
	w("\t}")
	w("\tchain postrouting {")
	w("\t\ttype nat hook postrouting priority srcnat; policy accept;")
	w("\t\toifname %q masquerade", transitIf)
	w("\t}")
	w("}")
	w("table arp %s {", ov)
	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy accept;")
	for _, in := range insts {
		w("\t\tiifname %q arp saddr ether != %s drop", in.veth, in.mac)
		w("\t\tiifname %q arp saddr ip != %s drop", in.veth, in.addr)
	}
	w("\t}")
	w("}")
	return b.String(), nil
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
