// Package fabric is the wire between simulated hosts on one machine: a
// network namespace per host, each with an underlay address on a Linux
// bridge in the agent's namespace, so that an overlay between the hosts
// crosses a real (virtual) wire, as it would between machines. `gpucloud
// up` and the end-to-end tests make one per cloud.
//
// What a fabric of cloud C (Config.Cloud) with hosts 0..n-1 makes, all in
// names derived from C, so that the fabrics of two clouds on one machine
// never touch each other:
//
//   - in the agent's namespace, the bridge "gcCf" (BridgeName), holding
//     the fabric's gateway, the first address of its prefix; forwarding on
//     for the bridge; the bridge in the interface group Group;
//   - per host i, the network namespace "gcChI" (HostNetns) with the end
//     "fab0" (HostLink) of a veth pair whose other end, "gcChI" too, is a
//     port of the bridge; in the namespace, the underlay address (the
//     prefix's (i+2)-th address) on fab0 with the fabric's MTU, a default
//     route through the gateway, the loopback up, IPv4 forwarding on and
//     loose reverse-path filtering, as on a machine that routes for the
//     instances it runs;
//   - the nftables table "inet gpucloud_C_fabric" (Table) in the agent's
//     namespace: what leaves the fabric's prefix through any other
//     interface is masqueraded, as a machine's traffic leaves through
//     its router; nothing is forwarded between the fabric and another
//     fabric's bridge (any interface of Group); and no new connection from
//     the fabric reaches the agent's namespace itself (its addresses and
//     services: the server listens there), only replies to connections
//     the agent's namespace opened. No other table is touched.
//
// Route sends a prefix outside the fabric (a public address a host
// answers for) from the agent's namespace to a host, by a route on the
// bridge that goes with it.
//
// Every link carries the alias "gpucloud-fabric:C" (Alias), and so does the
// loopback of each host namespace: that is how New, after a crash, and
// Close find what is the fabric's, and nothing else. A fabric is held by
// one process at a time: New locks a file of its identity under /run for
// the fabric's life (a crashed process lets it go), and refuses to start
// while another process holds it. New removes what an earlier fabric of
// the same identity left (a crash), then builds; it refuses, with a clear
// error and having changed nothing, a prefix that overlaps an address or
// a route of the machine, and a name that something other than the fabric
// holds.
package fabric

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
)

const (
	// MaxCloudLen is the longest Config.Cloud.
	MaxCloudLen = 6
	// HostLink is the name of a host's link to the fabric, in its
	// namespace.
	HostLink = "fab0"
	// AliasPrefix begins the alias of every link the fabric makes,
	// followed by the cloud's identity.
	AliasPrefix = "gpucloud-fabric:"
	// Group is the interface group of every fabric's bridge, whatever
	// its cloud ("gcfb"): each fabric's table refuses to forward
	// between its bridge and any other of the group.
	Group uint32 = 0x67636662
	// DefaultMTU is the fabric's MTU unless Config.MTU says otherwise.
	DefaultMTU = 1500
	// MaxHosts bounds Config.Hosts: the hosts of a /24 after its network
	// address and the gateway.
	MaxHosts = 253
)

// DefaultRange is where a fabric's prefix is chosen from when
// Config.Prefix is not set: a /24 of it, chosen by the cloud's identity.
var DefaultRange = netip.MustParsePrefix("100.96.0.0/12")

// Config configures a fabric.
type Config struct {
	// Cloud is the cloud's short identity: 1 to MaxCloudLen of [a-z0-9].
	// Every name the fabric makes derives from it.
	Cloud string
	// Hosts is the number of host namespaces (1 to MaxHosts).
	Hosts int
	// Prefix is the fabric's IPv4 prefix: the gateway is its first
	// address, host i's underlay address its (i+2)-th. Unset: a /24 of
	// DefaultRange, the first from DefaultPrefix on that overlaps no
	// address or route of the machine.
	Prefix netip.Prefix
	// MTU of the bridge and the host links (DefaultMTU).
	MTU int
	// IP and NFT are the ip(8) and nft(8) programs (default: found in
	// PATH, /usr/sbin or /sbin).
	IP, NFT string
	// Log receives warnings (slog.Default()).
	Log *slog.Logger
}

// Host is one host of a fabric.
type Host struct {
	// Netns is the name of the host's network namespace, under
	// /var/run/netns.
	Netns string
	// Underlay is the host's address on the fabric, on its link
	// HostLink; the prefix's length is the fabric's.
	Underlay netip.Addr
}

// Names of what a fabric of cloud makes.

// BridgeName is the name of the fabric's bridge: "gc<cloud>f".
func BridgeName(cloud string) string { return "gc" + cloud + "f" }

// HostNetns is the name of host i's network namespace, and of its veth's
// end on the bridge: "gc<cloud>h<i>".
func HostNetns(cloud string, i int) string { return "gc" + cloud + "h" + strconv.Itoa(i) }

// Table is the name of the fabric's nftables table (family inet).
func Table(cloud string) string { return "gpucloud_" + cloud + "_fabric" }

// Alias is the alias of the fabric's links.
func Alias(cloud string) string { return AliasPrefix + cloud }

// hostIndex says which host's name (namespace or veth end) name is in a
// fabric of cloud: "gc<cloud>h" and decimal digits.
func hostIndex(cloud, name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "gc"+cloud+"h")
	if !ok || rest == "" || len(rest) > 3 || rest[0] == '0' && rest != "0" {
		return 0, false
	}
	i, err := strconv.Atoi(rest)
	if err != nil || i < 0 {
		return 0, false
	}
	return i, true
}

// ValidCloud reports whether s is a cloud identity a fabric takes.
func ValidCloud(s string) bool {
	if s == "" || len(s) > MaxCloudLen {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// DefaultPrefix is the /24 of DefaultRange where the search for cloud's
// prefix begins: picked by a hash of the identity, so that the fabrics of
// different clouds seldom try the same one first.
func DefaultPrefix(cloud string) netip.Prefix { return candidate(cloud, 0) }

// candidate is the k-th /24 of DefaultRange tried for cloud.
func candidate(cloud string, k int) netip.Prefix {
	sum := sha256.Sum256([]byte(AliasPrefix + cloud))
	n := 1 << (24 - DefaultRange.Bits()) // /24s in the range
	idx := (int(binary.BigEndian.Uint32(sum[:4])) + k) % n
	base := binary.BigEndian.Uint32(DefaultRange.Addr().AsSlice()) + uint32(idx)<<8
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], base)
	return netip.PrefixFrom(netip.AddrFrom4(b), 24)
}

// nth is the n-th address of prefix p (0: its network address).
func nth(p netip.Prefix, n int) netip.Addr {
	b := p.Masked().Addr().As4()
	v := binary.BigEndian.Uint32(b[:]) + uint32(n)
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// check checks a configuration and fills in its defaults.
func (c *Config) check() error {
	if !ValidCloud(c.Cloud) {
		return fmt.Errorf("fabric: cloud identity %q: want 1 to %d of a-z and 0-9", c.Cloud, MaxCloudLen)
	}
	if c.Hosts < 1 || c.Hosts > MaxHosts {
		return fmt.Errorf("fabric: %d hosts: want 1 to %d", c.Hosts, MaxHosts)
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.MTU < 576 || c.MTU > 65535 {
		return fmt.Errorf("fabric: MTU %d: want 576 to 65535", c.MTU)
	}
	if c.Prefix.IsValid() {
		if !c.Prefix.Addr().Is4() {
			return fmt.Errorf("fabric: prefix %v: want an IPv4 prefix", c.Prefix)
		}
		if c.Prefix != c.Prefix.Masked() {
			return fmt.Errorf("fabric: prefix %v: want its network address (%v)", c.Prefix, c.Prefix.Masked())
		}
		// The network address, the gateway, the hosts and the broadcast
		// address.
		if c.Prefix.Bits() > 30 || 1<<(32-c.Prefix.Bits()) < c.Hosts+3 {
			return fmt.Errorf("fabric: prefix %v is too small for a gateway and %d hosts", c.Prefix, c.Hosts)
		}
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return nil
}

// ErrInUse is the error New returns when another process holds the
// fabric of the same identity.
var ErrInUse = errors.New("fabric: in use by another process")
