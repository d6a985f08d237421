package network

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
)

// The untracked fast path of security groups (issue 19's throughput
// goal). Conntrack is what a stateful rule costs: every packet of every
// connection is looked up, and on a two-vCPU host that was about a
// quarter of the overlay's throughput. Where statefulness cannot change
// a verdict, the table skips it, as AWS does for its "untracked" flows:
// when a local instance's groups allow every protocol both to a peer
// (egress) and from it (ingress), any packet between the two passes the
// instance's side whichever of them opened the connection, so the
// router neither tracks nor filters that pair's packets beyond
// anti-spoofing. The default group (all traffic among its members, all
// egress) is exactly that, so the members of a training cluster talk
// without conntrack, while a narrower group stays stateful.
//
// Only pairs inside the network's CIDR are untracked (public addresses
// and the world need conntrack for their NAT), never the router's own
// addresses (its services stay stateful), and a packet between two local
// instances is untracked only when both ends allow it. Revoking such a
// rule takes the pair out of the set: the connection's next packet is
// tracked and, seen by conntrack for the first time, is new, so the
// group's remaining rules decide, and an open connection the rules no
// longer allow stops at once (AWS documents the same for its untracked
// flows), unlike a tracked one, which goes on.

// sgUntracked returns the prefixes, inside cidr, that the groups ids
// (of one local instance) allow every protocol to and from: sorted and
// disjoint.
func sgUntracked(cidr netip.Prefix, groups map[string]sgGroup, ids []string) []netip.Prefix {
	var in, out []netip.Prefix
	for _, id := range ids {
		g := groups[id]
		for _, r := range g.ingress {
			if r.all {
				in = append(in, r.nets...)
			}
		}
		for _, r := range g.egress {
			if r.all {
				out = append(out, r.nets...)
			}
		}
	}
	if len(in) == 0 || len(out) == 0 {
		return nil
	}
	both := sgIntersect(sgNormalize(in), sgNormalize(out))
	return sgIntersect(both, []netip.Prefix{cidr.Masked()})
}

// sgIntersect returns the addresses in both a and b, each sorted and
// disjoint (sgNormalize), as prefixes, sorted and disjoint. Two prefixes
// overlap only when one holds the other, so the intersection is made of
// the longer of each overlapping pair; a sweep over both lists, advancing
// the one that ends first, finds the pairs in one pass.
func sgIntersect(a, b []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for i, j := 0, 0; i < len(a) && j < len(b); {
		x, y := a[i], b[j]
		switch {
		case x.Overlaps(y) && x.Bits() >= y.Bits():
			out = append(out, x)
			i++
		case x.Overlaps(y):
			out = append(out, y)
			j++
		case sgLast(x).Less(sgLast(y)):
			i++
		default:
			j++
		}
	}
	return out
}

// sgLast returns the last address of an IPv4 prefix.
func sgLast(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint64(binary.BigEndian.Uint32(a[:])) | (uint64(1)<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(a[:], uint32(v))
	return netip.AddrFrom4(a)
}

// sgUntrackedElems writes the pairs each port (sorted) may exchange
// untracked, untracked[i] being port i's prefixes, as the elements of an
// interval set of (local address . peer prefix); none if no port has any.
func sgUntrackedElems(ports []sgPort, untracked [][]netip.Prefix) []string {
	var elems []string
	for i, p := range ports {
		for _, q := range untracked[i] {
			elems = append(elems, p.Addr.String()+" . "+sgPrefixString(q))
		}
	}
	return elems
}

// writeUntracked writes the fast path's sets and its chain, which the
// prerouting chain enters (goto) for packets that passed anti-spoofing
// and for those from the overlay device: it returns, leaving the packet
// to conntrack and the forward chain's rules, unless every local
// instance the packet comes from or goes to may exchange it with the
// other end untracked, and it does not go to or come from the router's
// gateways.
func writeUntracked(w func(string, ...any), ports []sgPort, gws []netip.Addr, elems []string) {
	locals := make([]string, len(ports))
	for i, p := range ports {
		locals[i] = p.Addr.String()
	}
	w("\tset locals {")
	w("\t\ttype ipv4_addr;")
	w("\t\telements = { %s }", strings.Join(locals, ", "))
	w("\t}")
	w("\tset untracked {")
	w("\t\ttype ipv4_addr . ipv4_addr; flags interval;")
	w("\t\telements = { %s }", strings.Join(elems, ", "))
	w("\t}")
	w("\tchain untracked {")
	if len(gws) > 0 {
		gw := sgAddrSet(gws)
		w("\t\tip saddr %s return", gw)
		w("\t\tip daddr %s return", gw)
	}
	w("\t\tip saddr @locals ip saddr . ip daddr != @untracked return")
	w("\t\tip daddr @locals ip daddr . ip saddr != @untracked return")
	w("\t\tip saddr != @locals ip daddr != @locals return")
	w("\t\tnotrack")
	w("\t}")
}

// sgFastPath computes the untracked pairs of the ports (sorted), whose
// groups are portGroups, in network cidr ("" or unparsable: none, every
// connection is tracked).
func sgFastPath(cidr string, ports []sgPort, groups map[string]sgGroup, portGroups [][]string) []string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil
	}
	untracked := make([][]netip.Prefix, len(ports))
	for i := range ports {
		untracked[i] = sgUntracked(p, groups, portGroups[i])
	}
	return sgUntrackedElems(ports, untracked)
}

// sgOverlayName validates RulesetOptions.Overlay.
func sgOverlayName(name string) error {
	if name != "" && !sgName(name, 15) {
		return fmt.Errorf("security groups: bad overlay interface name %q", name)
	}
	return nil
}
