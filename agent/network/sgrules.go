package network

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/agentapi"
)

// Security groups on a host (issue 19). Each network a host carries has a
// router network namespace on that host, where every local instance's
// veth ends (routed: a /32 route per instance, proxy ARP, the subnets'
// gateways on the router itself), beside the overlay device that reaches
// the other hosts' instances and the transit link to the host. The
// groups of the network's local instances become one nftables table in
// that namespace, which GroupRuleset writes and the caller loads with
// "nft -f -" in one transaction, replacing the table's previous version.
//
// The table enforces what AWS's security groups do: rules are stateful
// and allow only. A packet of a connection conntrack already knows passes
// (so revoking a rule stops new connections while established ones go
// on); a new one from a local instance must match an egress rule of one
// of its groups, and a new one to a local instance an ingress rule of one
// of its groups; between two local instances it must match both. The
// table's chains:
//
//   - prerouting (priority raw, before conntrack): a packet from a local
//     instance's interface carries that instance's MAC and IPv4 address,
//     or it is dropped (anti-spoofing; ARP is not an inet family's to
//     filter and is left to the routed design, where a neighbour entry on
//     one instance's link cannot capture another's /32 route).
//   - forward: established and related packets pass, invalid ones are
//     dropped; a packet from a local instance's interface goes to
//     out_IFACE, every other one to deliver.
//   - out_IFACE: jumps to the egress chain of each of the instance's
//     groups, ge_GROUP, whose rules go to deliver on a match; a packet
//     that none matched is dropped.
//   - deliver: a packet to a local instance's interface goes to in_IFACE;
//     every other one (to the overlay device, to the transit link) is
//     accepted: the destination's own host, or the world, decides.
//   - in_IFACE: jumps to the ingress chain of each of the instance's
//     groups, gi_GROUP, whose rules accept on a match; a packet that none
//     matched is dropped.
//   - input: from a local instance's interface, only established and
//     related packets, echo requests to the gateways and the services
//     RulesetOptions names reach the router itself.
//
// Dispatch to an instance's chains is one verdict-map lookup by interface
// name, a group's rules are in one chain shared by its members, and a
// peer list of more than one address is one named interval set, peers_N,
// shared by every rule with that list (the rules that name the same
// group), so a host with 1,000 rules over 200 instances loads its table
// in one short transaction (BenchmarkGroupRuleset1000).

// LocalPort is a local instance's port on its network's router: the
// instance, the router-side name of its veth, and the address and MAC the
// instance must send from.
type LocalPort struct {
	InstanceID string
	Iface      string
	Addr       netip.Addr
	MAC        string
}

// RulesetOptions are what GroupRuleset needs besides the network.
type RulesetOptions struct {
	// Gateways are the router's addresses that instances may ping; the
	// network's subnet gateways are added to them.
	Gateways []netip.Addr
	// Services are the router's own services that local instances may
	// reach at the gateways (the DNS resolver, say); none by default.
	Services []GatewayService
}

// GatewayService is a service the router offers at its gateways: a
// protocol ("tcp" or "udp") and a port.
type GatewayService struct {
	Protocol string
	Port     uint16
}

// GroupRuleset returns the nft script that replaces table (family inet)
// with the security-group rules of network hn for its local instances
// local (the package's comment on security groups says what the table
// does). The script deletes the table if it exists and makes it anew, in
// one transaction when loaded with "nft -f -". Its text depends only on
// its input's content, not on its order: the caller may skip loading a
// script equal to the one it loaded last.
//
// A local instance takes its groups from its endpoint in hn.Endpoints
// (none if it has no endpoint); a group that hn.SecurityGroups lacks has
// no rules. Both deny rather than fail: what a host does not know, it
// does not allow. Bad input (a table, interface or group name nft cannot
// take, a bad address, MAC, CIDR, protocol or port range, a duplicate
// interface, address or group) is an error naming it, and no script.
func GroupRuleset(table string, hn agentapi.HostNetwork, local []LocalPort, opts RulesetOptions) (string, error) {
	if !sgName(table, 64) || !sgLetter(table[0]) {
		return "", fmt.Errorf("security groups: bad table name %q", table)
	}
	ports, err := sgPorts(local)
	if err != nil {
		return "", err
	}
	groups, err := sgGroups(hn.SecurityGroups)
	if err != nil {
		return "", err
	}
	gws, err := sgGateways(hn, opts.Gateways)
	if err != nil {
		return "", err
	}
	services, err := sgServices(opts.Services)
	if err != nil {
		return "", err
	}
	// Each local instance's groups, sorted; only those groups' chains
	// are written.
	endpoints := make(map[string]agentapi.Endpoint, len(hn.Endpoints))
	for _, e := range hn.Endpoints {
		endpoints[e.InstanceID] = e
	}
	portGroups := make([][]string, len(ports))
	used := map[string]bool{}
	for i, p := range ports {
		var ids []string
		for _, id := range endpoints[p.InstanceID].SecurityGroups {
			if !sgName(id, 200) {
				return "", fmt.Errorf("security groups: instance %s: bad group ID %q", p.InstanceID, id)
			}
			if _, ok := groups[id]; ok {
				ids = append(ids, id)
				used[id] = true
			}
		}
		slices.Sort(ids)
		portGroups[i] = slices.Compact(ids)
	}

	// The used groups' chains, their peer sets named: a group's
	// members are the peers of every rule that names it, and one set
	// for them all is cheaper to load than one for each rule.
	var chains strings.Builder
	var sets []string
	setNames := map[string]string{}
	wc := func(dir, id string, rules []sgRule) {
		fmt.Fprintf(&chains, "\tchain %s_%s {\n", dir, id)
		for _, r := range rules {
			if len(r.peers) < 2 {
				fmt.Fprintf(&chains, "\t\t%s\n", r.inline())
				continue
			}
			elems := strings.Join(r.peers, ", ")
			name, ok := setNames[elems]
			if !ok {
				name = fmt.Sprintf("peers_%d", len(sets))
				setNames[elems] = name
				sets = append(sets, elems)
			}
			fmt.Fprintf(&chains, "\t\t%s @%s %s\n", r.field, name, r.rest)
		}
		chains.WriteString("\t}\n")
	}
	for _, id := range slices.Sorted(maps.Keys(used)) {
		wc("ge", id, groups[id].egress)
		wc("gi", id, groups[id].ingress)
	}

	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("table inet %s", table)
	w("delete table inet %s", table)
	w("table inet %s {", table)
	for i, elems := range sets {
		w("\tset peers_%d {", i)
		w("\t\ttype ipv4_addr; flags interval;")
		w("\t\telements = { %s }", elems)
		w("\t}")
	}

	w("\tchain prerouting {")
	w("\t\ttype filter hook prerouting priority raw; policy accept;")
	if len(ports) > 0 {
		elems := make([]string, len(ports))
		for i, p := range ports {
			elems[i] = fmt.Sprintf("%q . %s . %s", p.Iface, p.MAC, p.Addr)
		}
		w("\t\tiifname . ether saddr . ip saddr { %s } accept", strings.Join(elems, ", "))
		w("\t\tiifname %s drop", sgIfaceSet(ports))
	}
	w("\t}")

	w("\tchain input {")
	w("\t\ttype filter hook input priority filter; policy accept;")
	if len(ports) > 0 {
		w("\t\tiifname %s jump input_instance", sgIfaceSet(ports))
	}
	w("\t}")
	w("\tchain input_instance {")
	w("\t\tct state established,related accept")
	if len(gws) > 0 {
		gw := sgAddrSet(gws)
		w("\t\tip daddr %s icmp type echo-request accept", gw)
		if len(services) > 0 {
			w("\t\tip daddr %s meta l4proto . th dport { %s } accept", gw, strings.Join(services, ", "))
		}
	}
	w("\t\tdrop")
	w("\t}")

	w("\tchain forward {")
	w("\t\ttype filter hook forward priority filter; policy accept;")
	w("\t\tct state established,related accept")
	w("\t\tct state invalid drop")
	if len(ports) > 0 {
		w("\t\tiifname vmap { %s }", sgVmap(ports, "out_"))
	}
	w("\t\tgoto deliver")
	w("\t}")
	w("\tchain deliver {")
	if len(ports) > 0 {
		w("\t\toifname vmap { %s }", sgVmap(ports, "in_"))
	}
	w("\t\taccept")
	w("\t}")

	for i, p := range ports {
		w("\tchain out_%s {", p.Iface)
		for _, id := range portGroups[i] {
			w("\t\tjump ge_%s", id)
		}
		w("\t\tdrop")
		w("\t}")
		w("\tchain in_%s {", p.Iface)
		for _, id := range portGroups[i] {
			w("\t\tjump gi_%s", id)
		}
		w("\t\tdrop")
		w("\t}")
	}

	b.WriteString(chains.String())
	w("}")
	return b.String(), nil
}

// sgPort is a validated LocalPort.
type sgPort struct {
	InstanceID, Iface, MAC string
	Addr                   netip.Addr
}

// sgPorts validates the local ports and sorts them by interface.
func sgPorts(local []LocalPort) ([]sgPort, error) {
	ports := make([]sgPort, 0, len(local))
	ifaces, addrs, ids := map[string]bool{}, map[netip.Addr]bool{}, map[string]bool{}
	for _, l := range local {
		if !sgName(l.Iface, 15) {
			return nil, fmt.Errorf("security groups: instance %s: bad interface name %q", l.InstanceID, l.Iface)
		}
		if l.InstanceID == "" || ids[l.InstanceID] {
			return nil, fmt.Errorf("security groups: interface %s: missing or duplicate instance ID %q", l.Iface, l.InstanceID)
		}
		if ifaces[l.Iface] {
			return nil, fmt.Errorf("security groups: instance %s: duplicate interface %s", l.InstanceID, l.Iface)
		}
		if !l.Addr.Is4() || l.Addr.IsUnspecified() {
			return nil, fmt.Errorf("security groups: instance %s: bad address %q", l.InstanceID, l.Addr)
		}
		if addrs[l.Addr] {
			return nil, fmt.Errorf("security groups: instance %s: duplicate address %s", l.InstanceID, l.Addr)
		}
		hw, err := net.ParseMAC(l.MAC)
		if err != nil || len(hw) != 6 {
			return nil, fmt.Errorf("security groups: instance %s: bad MAC %q", l.InstanceID, l.MAC)
		}
		ids[l.InstanceID], ifaces[l.Iface], addrs[l.Addr] = true, true, true
		ports = append(ports, sgPort{InstanceID: l.InstanceID, Iface: l.Iface, MAC: hw.String(), Addr: l.Addr})
	}
	slices.SortFunc(ports, func(a, b sgPort) int { return strings.Compare(a.Iface, b.Iface) })
	return ports, nil
}

// sgGroup is a group's rules, sorted and without duplicates.
type sgGroup struct {
	ingress, egress []sgRule
}

// sgRule is a rule of a group's chain: field (the address it matches)
// among peers, set elements (none: any address), then rest (its other
// matches and its verdict).
type sgRule struct {
	field string
	peers []string
	rest  string
}

// inline is the rule with its peers as an anonymous set; it orders rules.
func (r sgRule) inline() string {
	switch len(r.peers) {
	case 0:
		return r.rest
	case 1:
		return r.field + " " + r.peers[0] + " " + r.rest
	}
	return r.field + " { " + strings.Join(r.peers, ", ") + " } " + r.rest
}

// sgGroups validates the groups and writes their rules.
func sgGroups(in []agentapi.GroupRules) (map[string]sgGroup, error) {
	groups := make(map[string]sgGroup, len(in))
	for _, g := range in {
		if !sgName(g.ID, 200) {
			return nil, fmt.Errorf("security groups: bad group ID %q", g.ID)
		}
		if _, ok := groups[g.ID]; ok {
			return nil, fmt.Errorf("security groups: group %s twice", g.ID)
		}
		var out sgGroup
		var err error
		if out.ingress, err = sgRules(g.ID, "ingress", g.Ingress); err != nil {
			return nil, err
		}
		if out.egress, err = sgRules(g.ID, "egress", g.Egress); err != nil {
			return nil, err
		}
		groups[g.ID] = out
	}
	return groups, nil
}

// sgRules writes a group's rules of one direction: an ingress rule
// matches the source address and accepts, an egress rule matches the
// destination and goes on to the destination's ingress rules (deliver).
// A rule without peers allows nothing and is left out.
func sgRules(group, dir string, rules []agentapi.RuleSpec) ([]sgRule, error) {
	field, verdict := "ip saddr", "accept"
	if dir == "egress" {
		field, verdict = "ip daddr", "goto deliver"
	}
	var out []sgRule
	for i, r := range rules {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("security groups: group %s: %s rule %d: %s", group, dir, i+1, fmt.Sprintf(format, args...))
		}
		var match string
		switch r.Protocol {
		case "all", "icmp":
			if r.FromPort != 0 || r.ToPort != 0 {
				return nil, bad("protocol %s takes no ports (%d-%d)", r.Protocol, r.FromPort, r.ToPort)
			}
			if r.Protocol == "icmp" {
				match = "icmp type echo-request"
			}
		case "tcp", "udp":
			switch {
			case r.FromPort == 0 && r.ToPort == 0:
				match = "meta l4proto " + r.Protocol
			case r.FromPort < 1 || r.ToPort > 65535 || r.FromPort > r.ToPort:
				return nil, bad("bad port range %d-%d", r.FromPort, r.ToPort)
			case r.FromPort == r.ToPort:
				match = fmt.Sprintf("%s dport %d", r.Protocol, r.FromPort)
			default:
				match = fmt.Sprintf("%s dport %d-%d", r.Protocol, r.FromPort, r.ToPort)
			}
		default:
			return nil, bad("bad protocol %q", r.Protocol)
		}
		peers := make([]netip.Prefix, 0, len(r.Peers))
		for _, s := range r.Peers {
			p, err := netip.ParsePrefix(s)
			if err != nil || !p.Addr().Is4() {
				return nil, bad("bad CIDR %q", s)
			}
			peers = append(peers, p.Masked())
		}
		if len(peers) == 0 {
			continue
		}
		rest := verdict
		if match != "" {
			rest = match + " " + verdict
		}
		out = append(out, sgRule{field: field, peers: sgPrefixElems(peers), rest: rest})
	}
	slices.SortFunc(out, func(a, b sgRule) int { return strings.Compare(a.inline(), b.inline()) })
	return slices.CompactFunc(out, func(a, b sgRule) bool { return a.inline() == b.inline() }), nil
}

// sgPrefixElems writes prefixes as the elements of an nft interval set:
// sorted, without those inside another (an interval set refuses
// overlaps), an address without its /32; none when one is 0.0.0.0/0
// (every address matches, so there is nothing to match).
func sgPrefixElems(ps []netip.Prefix) []string {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return cmp.Compare(a.Bits(), b.Bits())
	})
	var kept []netip.Prefix
	for _, p := range ps {
		if p.Bits() == 0 {
			return nil
		}
		// Sorted by address then length, a prefix that contains p comes
		// before it; since prefixes nest or are disjoint, the last kept
		// one is the only candidate.
		if n := len(kept); n > 0 && kept[n-1].Overlaps(p) {
			continue
		}
		kept = append(kept, p)
	}
	s := make([]string, len(kept))
	for i, p := range kept {
		if p.IsSingleIP() {
			s[i] = p.Addr().String()
		} else {
			s[i] = p.String()
		}
	}
	return s
}

// sgGateways validates the gateways and adds the subnets' own.
func sgGateways(n agentapi.HostNetwork, extra []netip.Addr) ([]netip.Addr, error) {
	gws := slices.Clone(extra)
	for _, a := range gws {
		if !a.Is4() {
			return nil, fmt.Errorf("security groups: bad gateway address %q", a)
		}
	}
	for _, s := range n.Subnets {
		if s.Gateway == "" {
			continue
		}
		a, err := netip.ParseAddr(s.Gateway)
		if err != nil || !a.Is4() {
			return nil, fmt.Errorf("security groups: subnet %s: bad gateway %q", s.ID, s.Gateway)
		}
		gws = append(gws, a)
	}
	slices.SortFunc(gws, netip.Addr.Compare)
	return slices.Compact(gws), nil
}

// sgServices validates the gateway services and writes them as set
// elements (protocol . port), sorted.
func sgServices(in []GatewayService) ([]string, error) {
	var out []string
	for _, s := range in {
		if (s.Protocol != "tcp" && s.Protocol != "udp") || s.Port == 0 {
			return nil, fmt.Errorf("security groups: bad gateway service %s/%d", s.Protocol, s.Port)
		}
		out = append(out, fmt.Sprintf("%s . %d", s.Protocol, s.Port))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// sgAddrSet writes addresses, sorted and without duplicates, as an
// anonymous set (one without braces).
func sgAddrSet(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	if len(s) == 1 {
		return s[0]
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

func sgIfaceSet(ports []sgPort) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("%q", p.Iface)
	}
	return "{ " + strings.Join(s, ", ") + " }"
}

// sgVmap writes the verdict map from each port's interface to its chain
// named prefix+interface.
func sgVmap(ports []sgPort, prefix string) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("%q : goto %s%s", p.Iface, prefix, p.Iface)
	}
	return strings.Join(s, ", ")
}

func sgLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// sgName says whether s, at most max bytes, can name a table, chain or
// interface in the script unquoted: ASCII letters, digits, '_', '-' and
// '.', starting with a letter or digit.
func sgName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i, c := range []byte(s) {
		switch {
		case sgLetter(c), c >= '0' && c <= '9':
		case i > 0 && (c == '_' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}
