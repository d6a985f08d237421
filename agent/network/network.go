// Package network is the instance network of the container runtime: it
// implements containerd.NetworkHook, giving each instance a network
// namespace of its own with one interface, a route out through the host
// (NAT), a link to the instances of the same tenant on the host, and
// nothing else.
//
// # Design
//
// Each tenant with instances on the host has a Linux bridge of its own
// (IfPrefix+"b"+hash), which holds the gateway address of the tenant's
// block of the host's instance subnet (Config.Subnet, 10.88.0.0/16; one
// /24 per tenant by default, Config.TenantBits). Each instance gets a
// network namespace (/var/run/netns/<Table>-<instance>) and a veth pair:
// the host end (IfPrefix+"v"+hash) is a port of its tenant's bridge, the
// other end is eth0 in the namespace, with the next free address of the
// block, a MAC derived from it, and a default route via the gateway.
// Instances of one tenant share a layer-2 segment and reach each other
// directly; instances of different tenants are on different bridges, so
// anything between them would have to be routed by the host, which the
// rules below refuse. A bridge per tenant (rather than one bridge with
// per-port rules) keeps tenants apart at layer 2 too: no ARP, broadcast or
// MAC-table traffic crosses between them, and a tenant is identified in
// the rules by the interface its packets arrive on, which a workload
// cannot forge, rather than by addresses.
//
// The rules are nftables rules in two tables of the agent's own
// (Config.Table, "gpucloud"): `inet` and `bridge`. The whole ruleset is
// generated from the instances the network knows and replaced in one
// `nft -f -` transaction after every change, so it is never half-applied,
// and a restarted agent rewrites it from what is on the host:
//
//   - input: nothing from an instance bridge reaches the host itself (any
//     of its addresses, the gateway's included), except replies to
//     connections the host opened. The agent's and the server's ports on
//     the host are thus out of reach, and so is every other service;
//   - forward: an instance may send only from its tenant's block; traffic
//     between two tenants' bridges, IPv6, and new connections into an
//     instance are dropped; traffic out to Config.Blocked destinations
//     (DefaultBlocked: private, shared, loopback, link-local and multicast
//     ranges, and the instance subnet) is dropped unless Config.Allowed
//     says otherwise; everything else goes out;
//   - postrouting: what leaves the host from the instance subnet is
//     masqueraded to the host's address on the way out;
//   - bridge prerouting: each instance's port accepts only IPv4 and ARP
//     from the instance's own MAC and address, so that a workload with raw
//     sockets cannot pose as its neighbour.
//
// The metadata endpoint needs none of this: the container runtime serves it
// inside the instance's namespace, on an address of its loopback.
//
// The state is the host's: bridges and host-side veths carry an alias
// naming their table, tenant, instance and address, so that New finds the
// instances of an earlier agent and Reconcile removes what is no longer
// wanted.
//
// The host must forward IPv4 on its uplink for instances to reach the
// outside (sysctl net.ipv4.ip_forward=1, or Config.Forwarding); the
// network turns forwarding on for its own bridges.
package network

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpucloud/gpucloud/agent/runtime"
)

// Defaults of Config.
const (
	DefaultTable      = "gpucloud"
	DefaultIfPrefix   = "gc"
	DefaultTenantBits = 24
	// NetnsDir is where ip(8) keeps named network namespaces.
	NetnsDir = "/var/run/netns"
	// InstanceIf is the instance's interface inside its namespace.
	InstanceIf = "eth0"
)

// DefaultSubnet is the host's instance subnet when Config.Subnet is unset.
var DefaultSubnet = netip.MustParsePrefix("10.88.0.0/16")

// DefaultBlocked are the destinations instances may not reach through the
// host, whatever Config.Blocked adds: the host's own networks and their
// neighbours (private, shared and link-local ranges, where the control
// plane, other hosts' agents and a cloud provider's own metadata service
// live), loopback, multicast and reserved addresses. Config.Allowed opens
// exceptions.
var DefaultBlocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// Config configures the network. The zero value of each field takes its
// default.
type Config struct {
	// Subnet is the host's instance subnet (DefaultSubnet), IPv4. It must
	// not overlap the host's other networks.
	Subnet netip.Prefix
	// TenantBits is the prefix length of each tenant's block of Subnet
	// (DefaultTenantBits: a /24, 253 instances of one tenant on the host;
	// at most 30). Subnet holds 2^(TenantBits-Subnet.Bits()) tenants.
	TenantBits int
	// Table names the nftables tables (inet and bridge) and begins the
	// names of the instances' network namespaces (DefaultTable).
	Table string
	// IfPrefix begins the names of the bridges (IfPrefix+"b") and veths
	// (IfPrefix+"v") the network makes (DefaultIfPrefix); the rules match
	// every interface so named, so the prefix is reserved on the host. At
	// most 6 characters.
	IfPrefix string
	// Blocked are destinations instances may not reach, besides
	// DefaultBlocked and Subnet: the server's address when it is public,
	// say.
	Blocked []netip.Prefix
	// Allowed are exceptions to the blocked destinations (a shared
	// dataset server on the host's private network). They never open
	// another tenant's instances or the host itself.
	Allowed []netip.Prefix
	// Forwarding turns on IPv4 forwarding on the host (net.ipv4.ip_forward),
	// which instances need to reach the outside. Without it the network
	// turns forwarding on for its bridges only, and warns when the host
	// does not forward.
	Forwarding bool
	// IP and NFT are the ip(8) and nft(8) programs ("ip" and "nft" in
	// PATH, then /usr/sbin and /sbin).
	IP, NFT string
	// Log receives warnings (slog.Default()).
	Log *slog.Logger
}

// Network is the instance network of one host. It is safe for concurrent
// use.
type Network struct {
	cfg     Config
	blocked []netip.Prefix

	mu      sync.Mutex
	insts   map[string]*instance
	tenants map[string]*tenantNet
}

// instance is one instance's network.
type instance struct {
	id, tenant string
	addr       netip.Addr
	veth       string
}

// tenantNet is one tenant's bridge and block.
type tenantNet struct {
	tenant string
	bridge string
	block  netip.Prefix
}

// Info is what the network gave an instance.
type Info struct {
	Tenant string
	// Addr is the instance's address; Prefix its tenant's block, whose
	// first address, Gateway, is the bridge's.
	Addr    netip.Addr
	Prefix  netip.Prefix
	Gateway netip.Addr
	// Netns is the path of the instance's network namespace.
	Netns string
	// Veth and Bridge are the host's interfaces of the instance.
	Veth, Bridge string
}

// New checks the tools and the configuration, finds the instances an
// earlier agent left on the host, and writes the rules for them. It
// removes nothing: Reconcile does, once the caller knows which instances
// still run.
func New(ctx context.Context, cfg Config) (*Network, error) {
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	cfg.Subnet = cfg.Subnet.Masked()
	if cfg.TenantBits == 0 {
		cfg.TenantBits = DefaultTenantBits
	}
	if cfg.Table == "" {
		cfg.Table = DefaultTable
	}
	if cfg.IfPrefix == "" {
		cfg.IfPrefix = DefaultIfPrefix
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	var err error
	if cfg.IP, err = findTool(cfg.IP, "ip", "iproute2"); err != nil {
		return nil, err
	}
	if cfg.NFT, err = findTool(cfg.NFT, "nft", "nftables"); err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, insts: map[string]*instance{}, tenants: map[string]*tenantNet{}}
	n.blocked = append(append([]netip.Prefix{cfg.Subnet}, DefaultBlocked...), cfg.Blocked...)
	if cfg.Forwarding {
		if err := writeSysctl("net/ipv4/ip_forward", "1"); err != nil {
			return nil, fmt.Errorf("instance network: turn IPv4 forwarding on: %w", err)
		}
	} else if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(b)) == "0" {
		cfg.Log.Warn("instance network: the host does not forward IPv4 (net.ipv4.ip_forward=0): replies from the outside reach instances only through links that forward; set it (sysctl net.ipv4.ip_forward=1)")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, err := n.load(ctx); err != nil {
		return nil, err
	}
	if err := n.apply(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func (c *Config) check() error {
	if !c.Subnet.Addr().Is4() {
		return fmt.Errorf("instance network: subnet %s: want IPv4", c.Subnet)
	}
	if c.TenantBits < c.Subnet.Bits() || c.TenantBits > 30 || c.TenantBits-c.Subnet.Bits() > 16 {
		return fmt.Errorf("instance network: tenant blocks of /%d in %s: want a prefix length from %d to 30, at most 2^16 blocks", c.TenantBits, c.Subnet, c.Subnet.Bits())
	}
	if !validName(c.Table, 32) {
		return fmt.Errorf("instance network: table %q: want 1 to 32 letters, digits or '_'", c.Table)
	}
	if !validName(c.IfPrefix, 6) {
		return fmt.Errorf("instance network: interface prefix %q: want 1 to 6 letters, digits or '_'", c.IfPrefix)
	}
	for _, p := range slices.Concat(c.Blocked, c.Allowed) {
		if !p.IsValid() || !p.Addr().Is4() {
			return fmt.Errorf("instance network: destination %s: want an IPv4 prefix", p)
		}
	}
	return nil
}

func validName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// Names of what the network makes.
func (n *Network) bridgePrefix() string { return n.cfg.IfPrefix + "b" }
func (n *Network) vethPrefix() string   { return n.cfg.IfPrefix + "v" }
func (n *Network) netnsName(id string) string {
	return n.cfg.Table + "-" + id
}

// NetnsPath is the path of an instance's network namespace.
func (n *Network) NetnsPath(id string) string {
	return filepath.Join(NetnsDir, n.netnsName(id))
}

// ifName is an interface name for key: prefix and 8 hex digits of its
// hash, the next hash (of key#1, key#2...) while the name is taken.
func ifName(prefix, key string, taken func(string) bool) string {
	for i := 0; ; i++ {
		k := key
		if i > 0 {
			k += "#" + strconv.Itoa(i)
		}
		sum := sha256.Sum256([]byte(k))
		name := prefix + hex.EncodeToString(sum[:4])
		if !taken(name) {
			return name
		}
	}
}

// macOf is the MAC of an instance's interface: locally administered,
// 02:00 followed by its IPv4 address.
func macOf(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", b[0], b[1], b[2], b[3])
}

// Instance returns what the network gave an instance.
func (n *Network) Instance(id string) (Info, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	in := n.insts[id]
	if in == nil {
		return Info{}, false
	}
	t := n.tenants[in.tenant]
	info := Info{Tenant: in.tenant, Addr: in.addr, Netns: n.NetnsPath(id), Veth: in.veth}
	if t != nil {
		info.Prefix, info.Gateway, info.Bridge = t.block, t.block.Addr().Next(), t.bridge
	}
	return info, true
}

// Instances returns the IDs of the instances the network knows, sorted.
func (n *Network) Instances() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.insts))
}

// checkID checks an instance or tenant ID: it becomes part of a file name
// and of an interface alias (at most 255 bytes in all).
func checkID(kind, id string) error {
	limit := 64 // tenants
	if kind == "instance" {
		limit = 80 // containerd takes 76
	}
	ok := id != "" && id != "." && id != ".." && len(id) <= limit
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("instance network: %s id %q: want 1 to %d letters, digits, '.', '_' or '-'", kind, id, limit)
	}
	return nil
}

// Setup implements containerd.NetworkHook: it makes the instance's
// network namespace and links it to its tenant's bridge, and returns the
// namespace's path. An earlier network of the same instance is torn down
// first. The per-tenant network carries no private network: an instance
// with one (net not nil) is refused (Hook gives it to the Driver).
func (n *Network) Setup(ctx context.Context, instanceID, tenantID string, net *runtime.Network) (string, error) {
	if net != nil {
		return "", fmt.Errorf("instance network of %s: the per-tenant network does not carry private network %s", instanceID, net.ID)
	}
	if err := checkID("instance", instanceID); err != nil {
		return "", err
	}
	if err := checkID("tenant", tenantID); err != nil {
		return "", err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.teardown(ctx, instanceID); err != nil {
		return "", err
	}
	if err := n.setup(ctx, instanceID, tenantID); err != nil {
		// Leave nothing of the instance behind.
		err = errors.Join(err, n.teardown(ctx, instanceID), n.apply(ctx))
		return "", fmt.Errorf("instance network of %s: %w", instanceID, err)
	}
	return n.NetnsPath(instanceID), nil
}

func (n *Network) setup(ctx context.Context, id, tenant string) error {
	var host []string // ip -batch lines run on the host
	t := n.tenants[tenant]
	if t == nil {
		block, ok := n.freeBlock()
		if !ok {
			return fmt.Errorf("no free /%d left in %s for tenant %s", n.cfg.TenantBits, n.cfg.Subnet, tenant)
		}
		t = &tenantNet{tenant: tenant, block: block, bridge: ifName(n.bridgePrefix(), "tenant:"+tenant, n.linkTaken)}
		n.tenants[tenant] = t
		gw := netip.PrefixFrom(block.Addr().Next(), block.Bits())
		host = append(host,
			"link add "+t.bridge+" type bridge",
			"link set dev "+t.bridge+" alias "+quote(n.alias(url.Values{"tenant": {tenant}, "block": {block.String()}})),
			"addr add "+gw.String()+" dev "+t.bridge,
			"link set dev "+t.bridge+" up",
		)
	}
	addr, ok := n.freeAddr(t)
	if !ok {
		return fmt.Errorf("no free address left in tenant %s's block %s", tenant, t.block)
	}
	in := &instance{id: id, tenant: tenant, addr: addr, veth: ifName(n.vethPrefix(), "instance:"+id, n.linkTaken)}
	n.insts[id] = in
	ns := n.netnsName(id)
	host = append(host,
		"netns add "+ns,
		"link add "+in.veth+" type veth peer name "+InstanceIf+" address "+macOf(addr)+" netns "+ns,
		"link set dev "+in.veth+" alias "+quote(n.alias(url.Values{"tenant": {tenant}, "instance": {id}, "addr": {addr.String()}})),
		"link set dev "+in.veth+" master "+t.bridge,
		"link set dev "+in.veth+" up",
	)
	if err := n.ipBatch(ctx, "", host); err != nil {
		return err
	}
	// The bridge forwards for its instances (the uplink must too, for
	// replies); the instance network is IPv4 only.
	if err := writeSysctl("net/ipv4/conf/"+t.bridge+"/forwarding", "1"); err != nil {
		return err
	}
	for _, dev := range []string{t.bridge, in.veth} {
		_ = writeSysctl("net/ipv6/conf/"+dev+"/disable_ipv6", "1") // absent without IPv6
	}
	// The instance's side is IPv4 only too: with IPv6 on, its interfaces
	// would take link-local addresses that nothing here filters.
	if err := inNS(n.NetnsPath(id), disableIPv6); err != nil {
		return fmt.Errorf("turn IPv6 off in the instance's namespace: %w", err)
	}
	gw := t.block.Addr().Next()
	if err := n.ipBatch(ctx, ns, []string{
		"link set dev lo up",
		"addr add " + netip.PrefixFrom(addr, t.block.Bits()).String() + " dev " + InstanceIf,
		"link set dev " + InstanceIf + " up",
		"route add default via " + gw.String() + " dev " + InstanceIf,
	}); err != nil {
		return err
	}
	return n.apply(ctx)
}

// alias is the interface alias that records what a link is for.
func (n *Network) alias(v url.Values) string {
	v.Set("table", n.cfg.Table)
	return aliasPrefix + v.Encode()
}

// aliasPrefix begins the aliases of the network's links.
const aliasPrefix = "gpucloud:"

// quote quotes an argument of an ip -batch line.
func quote(s string) string { return `"` + s + `"` }

// freeBlock is the first tenant block of the subnet that no tenant has.
func (n *Network) freeBlock() (netip.Prefix, bool) {
	used := map[netip.Addr]bool{}
	for _, t := range n.tenants {
		used[t.block.Addr()] = true
	}
	count := 1 << (n.cfg.TenantBits - n.cfg.Subnet.Bits())
	base := n.cfg.Subnet.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	size := uint32(1) << (32 - n.cfg.TenantBits)
	for i := range count {
		v := start + uint32(i)*size
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		if !used[a] {
			return netip.PrefixFrom(a, n.cfg.TenantBits), true
		}
	}
	return netip.Prefix{}, false
}

// freeAddr is the first address of the tenant's block that no instance
// has, after the network address and the gateway, before the broadcast
// address.
func (n *Network) freeAddr(t *tenantNet) (netip.Addr, bool) {
	used := map[netip.Addr]bool{}
	for _, in := range n.insts {
		if in.tenant == t.tenant {
			used[in.addr] = true
		}
	}
	a := t.block.Addr().Next().Next()
	for t.block.Contains(a) {
		if next := a.Next(); !t.block.Contains(next) {
			break // a is the broadcast address
		}
		if !used[a] {
			return a, true
		}
		a = a.Next()
	}
	return netip.Addr{}, false
}

// linkTaken says whether an interface name is in use, by the network or
// on the host.
func (n *Network) linkTaken(name string) bool {
	for _, t := range n.tenants {
		if t.bridge == name {
			return true
		}
	}
	for _, in := range n.insts {
		if in.veth == name {
			return true
		}
	}
	return linkExists(name)
}

// Teardown implements containerd.NetworkHook: it removes the instance's
// veth, namespace and rules, and its tenant's bridge when it was the
// tenant's last instance on the host. Tearing down an instance the
// network does not know removes its namespace if there is one.
func (n *Network) Teardown(ctx context.Context, instanceID string) error {
	if err := checkID("instance", instanceID); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.teardown(ctx, instanceID)
	return errors.Join(err, n.apply(ctx))
}

// teardown removes an instance's links and namespace, without touching
// the rules.
func (n *Network) teardown(ctx context.Context, id string) error {
	var errs []error
	if in := n.insts[id]; in != nil {
		errs = append(errs, n.delLink(ctx, in.veth))
		delete(n.insts, id)
		errs = append(errs, n.dropBridgeIfEmpty(ctx, in.tenant))
	}
	errs = append(errs, n.delNetns(ctx, n.netnsName(id)))
	return errors.Join(errs...)
}

// dropBridgeIfEmpty removes a tenant's bridge once none of its instances
// is left on the host.
func (n *Network) dropBridgeIfEmpty(ctx context.Context, tenant string) error {
	for _, in := range n.insts {
		if in.tenant == tenant {
			return nil
		}
	}
	t := n.tenants[tenant]
	if t == nil {
		return nil
	}
	delete(n.tenants, tenant)
	return n.delLink(ctx, t.bridge)
}

// Reconcile makes the host's instance network what keep says: the
// network of every instance not in keep is torn down, and so is anything
// the network made that belongs to no instance (a veth, bridge or
// namespace left by an agent that stopped halfway); the rules are
// rewritten. The container runtime calls it with the containers that still
// run when it starts.
func (n *Network) Reconcile(ctx context.Context, keep []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	strays, err := n.load(ctx)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, id := range keep {
		want[id] = true
	}
	var errs []error
	for _, l := range strays.links {
		errs = append(errs, n.delLink(ctx, l))
	}
	for _, id := range slices.Sorted(maps.Keys(n.insts)) {
		if !want[id] {
			errs = append(errs, n.teardown(ctx, id))
		}
	}
	for _, id := range keep {
		if n.insts[id] == nil {
			n.cfg.Log.Warn("instance network: the instance runs but its network is gone from the host", "instance", id)
		}
	}
	for _, t := range slices.Sorted(maps.Keys(n.tenants)) {
		errs = append(errs, n.dropBridgeIfEmpty(ctx, t))
	}
	for _, ns := range strays.netns {
		errs = append(errs, n.delNetns(ctx, ns))
	}
	errs = append(errs, n.apply(ctx))
	return errors.Join(errs...)
}

// Destroy removes every instance's network, the bridges and the rules:
// nothing of the network is left on the host.
func (n *Network) Destroy(ctx context.Context) error {
	if err := n.Reconcile(ctx, nil); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.nft(ctx, n.deleteTables())
}
