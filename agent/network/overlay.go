//go:build linux

package network

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/gpucloud/gpucloud/agent/runtime"
	"github.com/gpucloud/gpucloud/agentapi"
)

// The kernel overlay: the Driver built now (docs/NETWORK.md describes it
// at length, and how an OVN driver would map).
//
// Every network with an instance on the host has a router namespace
// ("gc<cloud>-n<vni>"). It holds the network's VXLAN device (VNI, UDP
// OverlayConfig.Port, local address the host's underlay address, no
// learning, no multicast group), made in the host's namespace and moved
// in, so that its UDP socket stays on the host's underlay; one end of a
// veth per local instance, whose other end is eth0 in the instance's
// namespace ("gc<cloud>-<instance>"); and the transit veth to the host,
// its way out. The router namespace routes: each local instance has a
// /32 route to its veth (with proxy ARP on, so that the instance's ARP
// for any address of its subnet is answered by the router), each remote
// endpoint a /32 route through the VXLAN device, a permanent neighbour
// entry giving the MAC of its host's VXLAN device (derived from that
// host's underlay address, so every host computes every other's) and an
// FDB entry sending that MAC to the host's underlay address. The
// subnets' gateways are addresses of the router's loopback. Nothing is
// flooded or learnt.
//
// The state is the host's: the namespaces' names and the links' aliases
// say what is whose, so that a restarted agent finds its networks and
// instances (New), and Reconcile drops what is no longer wanted.

// Overlay is the kernel overlay driver of one host.
type Overlay struct {
	cfg     OverlayConfig
	mtu     int    // the instances'
	rps     string // the instances' veths' receive steering mask (rpsMask; "": none, OverlayConfig.SteerReceive)
	blocked []netip.Prefix
	vtepMAC net.HardwareAddr

	mu      sync.Mutex
	insts   map[string]*ovInst
	routers map[uint32]*router
	views   map[uint32]agentapi.HostNetwork
	served  map[netip.Addr]served // the public addresses the host serves
}

var _ Driver = (*Overlay)(nil)

// ovInst is a local instance on a network.
type ovInst struct {
	id     string
	vni    uint32
	veth   string // the router's end
	addr   netip.Addr
	mac    net.HardwareAddr
	subnet netip.Prefix
	gw     netip.Addr
	public netip.Addr // as Setup gave it; the view's endpoint overrides
}

// router is a network's router namespace on the host.
type router struct {
	vni     uint32
	netID   string
	cidr    netip.Prefix
	vxlan   string
	transit string       // the host's end; the router's is transitIf
	link    netip.Prefix // the transit /30
}

// Names inside a router namespace.
const (
	transitIf = "transit"
	kindVXLAN = "vxlan"
	kindInst  = "instance"
	kindTrans = "transit"
)

// NewOverlay checks the configuration and the tools, finds the networks
// and instances an earlier agent left on the host, and writes the host's
// rules. It removes nothing: Reconcile does.
func NewOverlay(ctx context.Context, cfg OverlayConfig) (*Overlay, error) {
	if !validCloud(cfg.Cloud) {
		return nil, fmt.Errorf("overlay: cloud identity %q: want 1 to %d of a-z and 0-9", cfg.Cloud, MaxCloudLen)
	}
	if !cfg.Underlay.Is4() {
		return nil, fmt.Errorf("overlay: underlay address %v: want an IPv4 address of the host", cfg.Underlay)
	}
	if !cfg.TransitPool.IsValid() {
		cfg.TransitPool = DefaultTransitPool
	}
	cfg.TransitPool = cfg.TransitPool.Masked()
	if !cfg.TransitPool.Addr().Is4() || cfg.TransitPool.Bits() > 30 {
		return nil, fmt.Errorf("overlay: transit pool %s: want an IPv4 prefix of /30 or more", cfg.TransitPool)
	}
	if cfg.Port == 0 {
		cfg.Port = DefaultVXLANPort
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("overlay: VXLAN port %d", cfg.Port)
	}
	for _, p := range slices.Concat(cfg.Blocked, cfg.Allowed) {
		if !p.IsValid() || !p.Addr().Is4() {
			return nil, fmt.Errorf("overlay: destination %s: want an IPv4 prefix", p)
		}
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	var err error
	if cfg.IP, err = findTool(cfg.IP, "ip", "iproute2"); err != nil {
		return nil, err
	}
	if cfg.NFT, err = findTool(cfg.NFT, "nft", "nftables"); err != nil {
		return nil, err
	}
	o := &Overlay{cfg: cfg, insts: map[string]*ovInst{}, routers: map[uint32]*router{}, views: map[uint32]agentapi.HostNetwork{}}
	o.vtepMAC = vtepMAC(cfg.Underlay)
	hh, err := o.handle("")
	if err != nil {
		return nil, err
	}
	defer hh.Close()
	under, mtu, err := underlayLink(hh, cfg.Underlay)
	if err != nil {
		return nil, err
	}
	if cfg.UnderlayMTU == 0 {
		cfg.UnderlayMTU = mtu
	}
	if cfg.UnderlayMTU-OverlayOverhead < 576 {
		return nil, fmt.Errorf("overlay: underlay MTU %d leaves instances less than 576", cfg.UnderlayMTU)
	}
	o.cfg = cfg
	o.mtu = cfg.UnderlayMTU - OverlayOverhead
	if cfg.SteerReceive {
		o.rps = rpsMask()
	}
	o.blocked = slices.Concat([]netip.Prefix{cfg.TransitPool, under.Masked()}, DefaultBlocked, cfg.Blocked)
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, err := o.load(); err != nil {
		return nil, err
	}
	if err := o.applyHost(ctx); err != nil {
		return nil, err
	}
	if err := o.syncPublic(ctx); err != nil {
		return nil, err
	}
	return o, nil
}

// underlayLink finds the host's interface that holds the underlay
// address: its subnet and MTU.
func underlayLink(h *netlink.Handle, a netip.Addr) (netip.Prefix, int, error) {
	addrs, err := h.AddrList(nil, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return netip.Prefix{}, 0, fmt.Errorf("overlay: the host's addresses: %w", err)
	}
	for _, ad := range addrs {
		ip, ok := netip.AddrFromSlice(ad.IP.To4())
		if !ok || ip != a {
			continue
		}
		l, err := h.LinkByIndex(ad.LinkIndex)
		if err != nil {
			return netip.Prefix{}, 0, fmt.Errorf("overlay: the underlay's interface: %w", err)
		}
		ones, _ := ad.Mask.Size()
		return netip.PrefixFrom(ip, ones), l.Attrs().MTU, nil
	}
	return netip.Prefix{}, 0, fmt.Errorf("overlay: no interface of the host holds the underlay address %s", a)
}

// Names of what the driver makes.
func (o *Overlay) prefix() string { return "gc" + o.cfg.Cloud }
func (o *Overlay) table() string  { return "gpucloud_" + o.cfg.Cloud }

// nsPrefix begins the names of the driver's namespaces: "gc<cloud>-",
// or "gc<cloud>.<hash>-" with a HostNetns (hash: of its name), since
// namespaces are named machine-wide and the hosts that share a machine
// (gpucloud up, the tests) share a cloud.
func (o *Overlay) nsPrefix() string {
	if o.cfg.HostNetns == "" {
		return o.prefix() + "-"
	}
	sum := sha256.Sum256([]byte(o.cfg.HostNetns))
	return o.prefix() + "." + hex.EncodeToString(sum[:3]) + "-"
}
func (o *Overlay) routerNS(vni uint32) string {
	return o.nsPrefix() + "n" + strconv.FormatUint(uint64(vni), 10)
}
func (o *Overlay) instNS(id string) string { return o.nsPrefix() + id }

// NetnsPath is the path of an instance's network namespace.
func (o *Overlay) NetnsPath(id string) string { return filepath.Join(NetnsDir, o.instNS(id)) }

// ifName is a name of the driver's for key, of kind (a letter): at most
// 15 characters, the next hash while taken says it is.
func (o *Overlay) ifName(kind byte, key string, taken func(string) bool) string {
	p := o.prefix() + string(kind)
	n := min(15-len(p), 8)
	for i := 0; ; i++ {
		k := key
		if i > 0 {
			k += "#" + strconv.Itoa(i)
		}
		sum := sha256.Sum256([]byte(k))
		name := p + hex.EncodeToString(sum[:])[:n]
		if taken == nil || !taken(name) {
			return name
		}
	}
}

// alias is the alias of one of the driver's links.
func (o *Overlay) alias(kind string, v url.Values) string {
	v.Set("cloud", o.cfg.Cloud)
	v.Set("kind", kind)
	return aliasPrefix + v.Encode()
}

// parseAlias reads a link's alias: ok when it is the driver's.
func (o *Overlay) parseAlias(a string) (url.Values, bool) {
	rest, found := strings.CutPrefix(a, aliasPrefix)
	if !found {
		return nil, false
	}
	v, err := url.ParseQuery(rest)
	if err != nil || v.Get("cloud") != o.cfg.Cloud {
		return nil, false
	}
	return v, true
}

// handle opens a netlink handle in a named namespace ("" is the host's).
func (o *Overlay) handle(ns string) (*netlink.Handle, error) {
	if ns == "" {
		ns = o.cfg.HostNetns
		if ns == "" {
			return netlink.NewHandle()
		}
	}
	fd, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("overlay: namespace %s: %w", ns, err)
	}
	defer fd.Close()
	h, err := netlink.NewHandleAt(fd)
	if err != nil {
		return nil, fmt.Errorf("overlay: namespace %s: %w", ns, err)
	}
	return h, nil
}

// hostNS is the path of the host's namespace ("" for the agent's own).
func (o *Overlay) hostNS() string {
	if o.cfg.HostNetns == "" {
		return ""
	}
	return filepath.Join(NetnsDir, o.cfg.HostNetns)
}

func nsExists(name string) bool {
	_, err := os.Lstat(filepath.Join(NetnsDir, name))
	return err == nil
}

// checkNetwork checks an instance's place on its network.
func checkNetwork(n *runtime.Network) error {
	switch {
	case n.VNI == 0 || n.VNI >= 1<<24:
		return fmt.Errorf("VNI %d: want 1 to 2^24-1", n.VNI)
	case !n.CIDR.IsValid() || !n.CIDR.Addr().Is4():
		return fmt.Errorf("network CIDR %v: want IPv4", n.CIDR)
	case !n.Subnet.IsValid() || !n.CIDR.Contains(n.Subnet.Addr()) || n.Subnet.Bits() < n.CIDR.Bits() || n.Subnet.Bits() > 30:
		return fmt.Errorf("subnet %v: want a prefix of %v of at most /30", n.Subnet, n.CIDR)
	case !n.Subnet.Contains(n.Addr) || n.Addr == n.Subnet.Masked().Addr():
		return fmt.Errorf("address %v: want a host address of subnet %v", n.Addr, n.Subnet)
	case !n.Subnet.Contains(n.Gateway) || n.Gateway == n.Addr:
		return fmt.Errorf("gateway %v: want another address of subnet %v", n.Gateway, n.Subnet)
	}
	mac, err := net.ParseMAC(n.MAC)
	if err != nil || len(mac) != 6 || mac[0]&1 != 0 {
		return fmt.Errorf("MAC %q: want a unicast Ethernet address", n.MAC)
	}
	return nil
}

// Setup implements Driver.
func (o *Overlay) Setup(ctx context.Context, instanceID string, n *runtime.Network) (string, error) {
	if err := checkID("instance", instanceID); err != nil {
		return "", err
	}
	if isRouterSuffix(instanceID) {
		return "", fmt.Errorf("instance network: instance id %q: taken by the router namespaces' names", instanceID)
	}
	if n == nil {
		return "", fmt.Errorf("instance network of %s: no network", instanceID)
	}
	if err := checkNetwork(n); err != nil {
		return "", fmt.Errorf("instance network of %s: %w", instanceID, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.teardown(ctx, instanceID); err != nil {
		return "", err
	}
	if err := o.setup(ctx, instanceID, n); err != nil {
		err = errors.Join(err, o.teardown(ctx, instanceID))
		if r := o.routers[n.VNI]; r != nil && !o.used(n.VNI) {
			err = errors.Join(err, o.dropRouter(ctx, r)) // made for this instance
		}
		err = errors.Join(err, o.syncPublic(ctx))
		return "", fmt.Errorf("instance network of %s: %w", instanceID, err)
	}
	if err := o.syncPublic(ctx); err != nil {
		return "", fmt.Errorf("instance network of %s: %w", instanceID, err)
	}
	return o.NetnsPath(instanceID), nil
}

// isRouterSuffix says whether a name after the namespace prefix is a
// router's ("n" and digits).
func isRouterSuffix(s string) bool {
	d, ok := strings.CutPrefix(s, "n")
	if !ok || d == "" {
		return false
	}
	_, err := strconv.ParseUint(d, 10, 32)
	return err == nil
}

func (o *Overlay) setup(ctx context.Context, id string, n *runtime.Network) error {
	r := o.routers[n.VNI]
	if r != nil && (r.netID != n.ID || r.cidr != n.CIDR.Masked()) {
		return fmt.Errorf("VNI %d is network %s (%s) on this host, not %s (%s)", n.VNI, r.netID, r.cidr, n.ID, n.CIDR)
	}
	if r == nil {
		var err error
		if r, err = o.newRouter(ctx, n); err != nil {
			return err
		}
	}
	for _, in := range o.insts {
		if in.vni == n.VNI && in.addr == n.Addr {
			return fmt.Errorf("address %s is instance %s's on this host", n.Addr, in.id)
		}
	}
	mac, _ := net.ParseMAC(n.MAC)
	in := &ovInst{id: id, vni: n.VNI, addr: n.Addr, mac: mac, subnet: n.Subnet.Masked(), gw: n.Gateway, public: n.Public}
	rns, ins := o.routerNS(n.VNI), o.instNS(id)
	if _, err := run(ctx, nil, o.cfg.IP, "netns", "add", ins); err != nil {
		return err
	}
	rh, err := o.handle(rns)
	if err != nil {
		return err
	}
	defer rh.Close()
	ifd, err := netns.GetFromName(ins)
	if err != nil {
		return err
	}
	defer ifd.Close()
	in.veth = o.ifName('v', "instance:"+id, func(s string) bool { _, err := rh.LinkByName(s); return err == nil })
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: in.veth, MTU: o.mtu},
		PeerName:         InstanceIf,
		PeerHardwareAddr: mac,
		PeerNamespace:    netlink.NsFd(int(ifd)),
		PeerMTU:          uint32(o.mtu),
	}
	if err := rh.LinkAdd(veth); err != nil {
		return fmt.Errorf("add the instance's veth: %w", err)
	}
	o.insts[id] = in
	l, err := rh.LinkByName(in.veth)
	if err != nil {
		return err
	}
	if err := rh.LinkSetAlias(l, o.alias(kindInst, url.Values{"instance": {id}, "addr": {in.addr.String()}, "mac": {mac.String()},
		"subnet": {in.subnet.String()}, "gateway": {in.gw.String()}})); err != nil {
		return err
	}
	if err := rh.LinkSetUp(l); err != nil {
		return err
	}
	o.steer(ctx, rns, in.veth)
	if err := rh.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet(in.addr), Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("route to the instance: %w", err)
	}
	if err := rh.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: in.addr.AsSlice(), HardwareAddr: mac}); err != nil {
		return fmt.Errorf("the instance's neighbour entry: %w", err)
	}
	if err := o.gateways(rh, n.VNI); err != nil {
		return err
	}
	// The instance's side.
	if err := inNS(filepath.Join(NetnsDir, ins), func() error {
		return writeSysctls(map[string]string{"net/ipv6/conf/all/disable_ipv6": "1", "net/ipv6/conf/default/disable_ipv6": "1"})
	}); err != nil {
		return err
	}
	ih, err := netlink.NewHandleAt(ifd)
	if err != nil {
		return err
	}
	defer ih.Close()
	lo, err := ih.LinkByName("lo")
	if err != nil {
		return err
	}
	if err := ih.LinkSetUp(lo); err != nil {
		return err
	}
	eth, err := ih.LinkByName(InstanceIf)
	if err != nil {
		return err
	}
	if err := ih.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(in.addr, in.subnet.Bits()))}); err != nil {
		return fmt.Errorf("the instance's address: %w", err)
	}
	if err := ih.LinkSetUp(eth); err != nil {
		return err
	}
	if err := ih.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: in.gw.AsSlice()}); err != nil {
		return fmt.Errorf("the instance's default route: %w", err)
	}
	o.steer(ctx, ins, InstanceIf)
	if err := o.program(rh, r); err != nil {
		return err
	}
	return o.applyRouter(ctx, r)
}

// newRouter makes a network's router namespace: its VXLAN device, its
// transit link to the host, forwarding on.
func (o *Overlay) newRouter(ctx context.Context, n *runtime.Network) (_ *router, err error) {
	r := &router{vni: n.VNI, netID: n.ID, cidr: n.CIDR.Masked()}
	rns := o.routerNS(n.VNI)
	hh, err := o.handle("")
	if err != nil {
		return nil, err
	}
	defer hh.Close()
	taken := func(s string) bool { _, err := hh.LinkByName(s); return err == nil }
	key := "vni:" + strconv.FormatUint(uint64(n.VNI), 10)
	r.vxlan, r.transit = o.ifName('x', key, taken), o.ifName('t', key, taken)
	if r.link, err = o.freeTransit(hh); err != nil {
		return nil, err
	}
	if _, err := run(ctx, nil, o.cfg.IP, "netns", "add", rns); err != nil {
		return nil, err
	}
	o.routers[n.VNI] = r
	defer func() {
		if err != nil {
			err = errors.Join(err, o.dropRouter(ctx, r))
		}
	}()
	if err := inNS(filepath.Join(NetnsDir, rns), func() error {
		return writeSysctls(map[string]string{
			"net/ipv4/ip_forward":                "1",
			"net/ipv4/conf/default/proxy_arp":    "1",
			"net/ipv4/conf/all/rp_filter":        "0",
			"net/ipv4/conf/default/rp_filter":    "0",
			"net/ipv6/conf/all/disable_ipv6":     "1",
			"net/ipv6/conf/default/disable_ipv6": "1",
		})
	}); err != nil {
		return nil, err
	}
	rfd, err := netns.GetFromName(rns)
	if err != nil {
		return nil, err
	}
	defer rfd.Close()
	rh, err := netlink.NewHandleAt(rfd)
	if err != nil {
		return nil, err
	}
	defer rh.Close()
	if lo, err := rh.LinkByName("lo"); err != nil {
		return nil, err
	} else if err := rh.LinkSetUp(lo); err != nil {
		return nil, err
	}

	// The transit link.
	vv := url.Values{"vni": {strconv.FormatUint(uint64(n.VNI), 10)}, "network": {n.ID}, "cidr": {r.cidr.String()}}
	if err := hh.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: r.transit}, PeerName: transitIf, PeerNamespace: netlink.NsFd(int(rfd))}); err != nil {
		return nil, fmt.Errorf("add the transit link %s: %w", r.transit, err)
	}
	ht, err := hh.LinkByName(r.transit)
	if err != nil {
		return nil, err
	}
	tv := url.Values{"vni": vv["vni"], "link": {r.link.String()}}
	if err := hh.LinkSetAlias(ht, o.alias(kindTrans, tv)); err != nil {
		return nil, err
	}
	hostEnd, routerEnd := r.link.Addr().Next(), r.link.Addr().Next().Next()
	if err := hh.AddrAdd(ht, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(hostEnd, 30))}); err != nil {
		return nil, fmt.Errorf("the transit link's address: %w", err)
	}
	if err := inNS(o.hostNS(), func() error {
		_ = writeSysctl("net/ipv6/conf/"+r.transit+"/disable_ipv6", "1")
		return writeSysctl("net/ipv4/conf/"+r.transit+"/forwarding", "1")
	}); err != nil {
		return nil, err
	}
	if err := hh.LinkSetUp(ht); err != nil {
		return nil, err
	}
	rt, err := rh.LinkByName(transitIf)
	if err != nil {
		return nil, err
	}
	if err := rh.AddrAdd(rt, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(routerEnd, 30))}); err != nil {
		return nil, err
	}
	if err := rh.LinkSetUp(rt); err != nil {
		return nil, err
	}
	if err := rh.RouteAdd(&netlink.Route{LinkIndex: rt.Attrs().Index, Gw: hostEnd.AsSlice()}); err != nil {
		return nil, fmt.Errorf("the router's default route: %w", err)
	}

	// The VXLAN device: made on the host, whose namespace keeps its UDP
	// socket, then moved into the router.
	vx := &netlink.Vxlan{
		LinkAttrs: netlink.LinkAttrs{Name: r.vxlan, MTU: o.mtu, HardwareAddr: o.vtepMAC},
		VxlanId:   int(n.VNI),
		SrcAddr:   o.cfg.Underlay.AsSlice(),
		Port:      o.cfg.Port,
		Learning:  false,
	}
	if err := hh.LinkAdd(vx); err != nil {
		if errors.Is(err, os.ErrExist) || strings.Contains(err.Error(), "exists") {
			return nil, fmt.Errorf("VXLAN %d on UDP port %d is taken on the host (another cloud's overlay on the same namespace and port?): %w", n.VNI, o.cfg.Port, err)
		}
		return nil, fmt.Errorf("add the VXLAN device: %w", err)
	}
	hv, err := hh.LinkByName(r.vxlan)
	if err != nil {
		return nil, err
	}
	if err := hh.LinkSetAlias(hv, o.alias(kindVXLAN, vv)); err != nil {
		_ = hh.LinkDel(hv)
		return nil, err
	}
	if err := hh.LinkSetNsFd(hv, int(rfd)); err != nil {
		_ = hh.LinkDel(hv)
		return nil, fmt.Errorf("move the VXLAN device into the router: %w", err)
	}
	rv, err := rh.LinkByName(r.vxlan)
	if err != nil {
		return nil, err
	}
	if err := rh.LinkSetUp(rv); err != nil {
		return nil, err
	}
	if err := o.applyHost(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// freeTransit is the first /30 of the pool that no router of the driver
// has and no address or route of the host overlaps.
func (o *Overlay) freeTransit(hh *netlink.Handle) (netip.Prefix, error) {
	var used []netip.Prefix
	for _, r := range o.routers {
		used = append(used, r.link)
	}
	if addrs, err := hh.AddrList(nil, netlink.FAMILY_V4); err == nil || errors.Is(err, netlink.ErrDumpInterrupted) {
		for _, a := range addrs {
			if p, ok := prefixOf(a.IPNet); ok {
				used = append(used, p.Masked())
			}
		}
	}
	if routes, err := hh.RouteList(nil, netlink.FAMILY_V4); err == nil || errors.Is(err, netlink.ErrDumpInterrupted) {
		for _, rt := range routes {
			if p, ok := prefixOf(rt.Dst); ok && p.Bits() > 0 {
				used = append(used, p)
			}
		}
	}
	base := o.cfg.TransitPool.Addr().As4()
	start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
	count := uint32(1) << (30 - o.cfg.TransitPool.Bits())
	for i := range count {
		v := start + i*4
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), 30)
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /30 left in the transit pool %s", o.cfg.TransitPool)
}

// gateways makes the router's loopback hold exactly the gateways of its
// local instances' subnets.
func (o *Overlay) gateways(rh *netlink.Handle, vni uint32) error {
	want := map[netip.Addr]bool{}
	for _, in := range o.insts {
		if in.vni == vni {
			want[in.gw] = true
		}
	}
	lo, err := rh.LinkByName("lo")
	if err != nil {
		return err
	}
	addrs, err := rh.AddrList(lo, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP.To4())
		if ip.IsLoopback() {
			continue
		}
		if want[ip] {
			delete(want, ip)
			continue
		}
		if err := rh.AddrDel(lo, &a); err != nil {
			return err
		}
	}
	for gw := range want {
		if err := rh.AddrAdd(lo, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(gw, 32)), Scope: int(netlink.SCOPE_UNIVERSE)}); err != nil {
			return fmt.Errorf("gateway %s: %w", gw, err)
		}
	}
	return nil
}

// Address implements runtime.Addresser: the instance's private address.
func (o *Overlay) Address(id string) (netip.Addr, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if in := o.insts[id]; in != nil {
		return in.addr, true
	}
	return netip.Addr{}, false
}

// Instances returns the IDs of the instances the driver knows, sorted.
func (o *Overlay) Instances() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.insts))
}

// MTU is the instances' MTU.
func (o *Overlay) MTU() int { return o.mtu }

// Teardown implements Driver.
func (o *Overlay) Teardown(ctx context.Context, instanceID string) error {
	if err := checkID("instance", instanceID); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return errors.Join(o.teardown(ctx, instanceID), o.syncPublic(ctx))
}

// teardown removes an instance's veth and namespace, and its network's
// router when it was the last local instance; it rewrites the router's
// rules otherwise.
func (o *Overlay) teardown(ctx context.Context, id string) error {
	var errs []error
	in := o.insts[id]
	if in != nil {
		delete(o.insts, id)
		r := o.routers[in.vni]
		if r != nil {
			if o.used(in.vni) {
				rh, err := o.handle(o.routerNS(in.vni))
				if err == nil {
					if l, err := rh.LinkByName(in.veth); err == nil {
						errs = append(errs, rh.LinkDel(l))
					}
					errs = append(errs, o.gateways(rh, in.vni))
					rh.Close()
				} else {
					errs = append(errs, err)
				}
				errs = append(errs, o.applyRouter(ctx, r))
			} else {
				errs = append(errs, o.dropRouter(ctx, r))
			}
		}
	}
	if ns := o.instNS(id); nsExists(ns) {
		if _, err := run(ctx, nil, o.cfg.IP, "netns", "del", ns); err != nil && nsExists(ns) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// used says whether a local instance is on the network.
func (o *Overlay) used(vni uint32) bool {
	for _, in := range o.insts {
		if in.vni == vni {
			return true
		}
	}
	return false
}

// dropRouter removes a router namespace (its VXLAN device and veths go
// with it) and its transit link, and rewrites the host's rules.
func (o *Overlay) dropRouter(ctx context.Context, r *router) error {
	delete(o.routers, r.vni)
	return errors.Join(o.delRouterObjects(ctx, o.routerNS(r.vni), r.transit), o.applyHost(ctx))
}

func (o *Overlay) delRouterObjects(ctx context.Context, ns, transit string) error {
	var errs []error
	if transit != "" {
		if hh, err := o.handle(""); err == nil {
			if l, err := hh.LinkByName(transit); err == nil {
				errs = append(errs, hh.LinkDel(l))
			}
			hh.Close()
		} else {
			errs = append(errs, err)
		}
	}
	if ns != "" && nsExists(ns) {
		if _, err := run(ctx, nil, o.cfg.IP, "netns", "del", ns); err != nil && nsExists(ns) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sync implements Driver: it records the view and programs each local
// router's remote endpoints and rules from it.
func (o *Overlay) Sync(ctx context.Context, networks []agentapi.HostNetwork) error {
	views := map[uint32]agentapi.HostNetwork{}
	for _, n := range networks {
		views[n.VNI] = n
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.views = views
	var errs []error
	for _, vni := range slices.Sorted(maps.Keys(o.routers)) {
		r := o.routers[vni]
		rh, err := o.handle(o.routerNS(vni))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, o.program(rh, r), o.applyRouter(ctx, r))
		rh.Close()
	}
	errs = append(errs, o.syncPublic(ctx))
	return errors.Join(errs...)
}

// remote is a remote endpoint: its address and its host's underlay.
type remote struct {
	addr, underlay netip.Addr
}

// remotes are the endpoints of a router's network on other hosts, as
// the last view says.
func (o *Overlay) remotes(r *router) []remote {
	v, ok := o.views[r.vni]
	if !ok || v.ID != r.netID {
		return nil
	}
	local := map[netip.Addr]bool{}
	for _, in := range o.insts {
		if in.vni == r.vni {
			local[in.addr] = true
		}
	}
	var out []remote
	seen := map[netip.Addr]bool{}
	for _, e := range v.Endpoints {
		a, err1 := netip.ParseAddr(e.Address)
		u, err2 := netip.ParseAddr(e.Underlay)
		if err1 != nil || err2 != nil || !a.Is4() || !u.Is4() || u == o.cfg.Underlay || local[a] || seen[a] || !r.cidr.Contains(a) {
			continue
		}
		seen[a] = true
		out = append(out, remote{addr: a, underlay: u})
	}
	return out
}

// program makes the router's forwarding entries for remote endpoints
// what the view says: a /32 route through the VXLAN device, a permanent
// neighbour entry (the remote host's VXLAN MAC) and an FDB entry (that
// MAC to the remote host's underlay address) for each; it adds what is
// missing and removes what is no longer wanted, and leaves the local
// instances alone.
func (o *Overlay) program(rh *netlink.Handle, r *router) error {
	vx, err := rh.LinkByName(r.vxlan)
	if err != nil {
		return fmt.Errorf("network %s: the VXLAN device: %w", r.netID, err)
	}
	idx := vx.Attrs().Index
	want := o.remotes(r)
	wantAddr := map[netip.Addr]netip.Addr{}
	wantFDB := map[string]netip.Addr{}
	for _, e := range want {
		wantAddr[e.addr] = e.underlay
		wantFDB[vtepMAC(e.underlay).String()] = e.underlay
	}
	var errs []error
	// Routes.
	routes, err := rh.RouteList(vx, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	have := map[netip.Addr]bool{}
	for _, rt := range routes {
		p, ok := prefixOf(rt.Dst)
		if ok && p.Bits() == 32 && wantAddr[p.Addr()].IsValid() {
			have[p.Addr()] = true
			continue
		}
		errs = append(errs, rh.RouteDel(&rt))
	}
	for a := range wantAddr {
		if !have[a] {
			if err := rh.RouteReplace(&netlink.Route{LinkIndex: idx, Dst: hostNet(a), Scope: netlink.SCOPE_LINK}); err != nil {
				errs = append(errs, fmt.Errorf("route to %s: %w", a, err))
			}
		}
	}
	// Neighbours.
	neighs, err := rh.NeighList(idx, netlink.FAMILY_V4)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	haveN := map[netip.Addr]bool{}
	for _, nb := range neighs {
		a, _ := netip.AddrFromSlice(nb.IP.To4())
		if u := wantAddr[a]; u.IsValid() && nb.State == netlink.NUD_PERMANENT && nb.HardwareAddr.String() == vtepMAC(u).String() {
			haveN[a] = true
			continue
		}
		errs = append(errs, ignoreNotFound(rh.NeighDel(&nb)))
	}
	for a, u := range wantAddr {
		if !haveN[a] {
			if err := rh.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
				IP: a.AsSlice(), HardwareAddr: vtepMAC(u)}); err != nil {
				errs = append(errs, fmt.Errorf("neighbour %s: %w", a, err))
			}
		}
	}
	// FDB.
	fdb, err := rh.NeighList(idx, unix.AF_BRIDGE)
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return err
	}
	haveF := map[string]bool{}
	for _, f := range fdb {
		dst, _ := netip.AddrFromSlice(f.IP.To4())
		if u, ok := wantFDB[f.HardwareAddr.String()]; ok && u == dst {
			haveF[f.HardwareAddr.String()] = true
			continue
		}
		errs = append(errs, ignoreNotFound(rh.NeighDel(&f)))
	}
	for mac, u := range wantFDB {
		if !haveF[mac] {
			hw, _ := net.ParseMAC(mac)
			if err := rh.NeighSet(&netlink.Neigh{LinkIndex: idx, Family: unix.AF_BRIDGE, Flags: netlink.NTF_SELF,
				State: netlink.NUD_PERMANENT, IP: u.AsSlice(), HardwareAddr: hw}); err != nil {
				errs = append(errs, fmt.Errorf("FDB entry %s: %w", mac, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("network %s: forwarding entries: %w", r.netID, err)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if err == nil || errors.Is(err, os.ErrNotExist) || strings.Contains(err.Error(), "no such") {
		return nil
	}
	return err
}

// Reconcile implements Driver.
func (o *Overlay) Reconcile(ctx context.Context, keep []string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	s, err := o.load()
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, id := range keep {
		want[id] = true
	}
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(o.insts)) {
		if !want[id] {
			errs = append(errs, o.teardown(ctx, id))
		}
	}
	for _, vni := range slices.Sorted(maps.Keys(o.routers)) {
		if !o.used(vni) {
			errs = append(errs, o.dropRouter(ctx, o.routers[vni]))
		}
	}
	for _, l := range s.links {
		errs = append(errs, o.delRouterObjects(ctx, "", l))
	}
	for _, ns := range s.netns {
		errs = append(errs, o.delRouterObjects(ctx, ns, ""))
	}
	// The routers left keep the rules they have, so that an agent's
	// restart leaves its instances' traffic alone; those that lost an
	// instance were rewritten by its teardown, with the groups of the
	// view the driver has (none before the first Sync after a restart:
	// nothing new passes there until it comes).
	errs = append(errs, o.applyHost(ctx), o.syncPublic(ctx))
	return errors.Join(errs...)
}

// Destroy implements Driver.
func (o *Overlay) Destroy(ctx context.Context) error {
	if err := o.Reconcile(ctx, nil); err != nil {
		return err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.nftIn(ctx, "", fmt.Sprintf("table inet %s\ndelete table inet %s\n", o.table(), o.table()))
}

// load reads the driver's state from the host: its router namespaces
// with their VXLAN devices and instance veths (by alias), their transit
// links, and the instances' namespaces. It replaces what the driver knew
// and returns what belongs to nothing: routers without a VXLAN device
// or transit link, transit links without a router, namespaces of no
// instance.
func (o *Overlay) load() (strays, error) {
	var s strays
	o.insts, o.routers = map[string]*ovInst{}, map[uint32]*router{}
	hh, err := o.handle("")
	if err != nil {
		return s, err
	}
	defer hh.Close()
	links, err := hh.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return s, fmt.Errorf("overlay: the host's links: %w", err)
	}
	transits := map[uint32]*router{}
	for _, l := range links {
		v, ok := o.parseAlias(l.Attrs().Alias)
		if !ok {
			continue
		}
		vni, err1 := strconv.ParseUint(v.Get("vni"), 10, 24)
		p, err2 := netip.ParsePrefix(v.Get("link"))
		if v.Get("kind") != kindTrans || err1 != nil || err2 != nil || l.Type() != "veth" || transits[uint32(vni)] != nil {
			s.links = append(s.links, l.Attrs().Name)
			continue
		}
		transits[uint32(vni)] = &router{vni: uint32(vni), transit: l.Attrs().Name, link: p}
	}
	ents, err := os.ReadDir(NetnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return s, fmt.Errorf("overlay: %w", err)
	}
	var instNS []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), o.nsPrefix())
		if !ok {
			continue
		}
		if !isRouterSuffix(rest) {
			instNS = append(instNS, e.Name())
			continue
		}
		vni, _ := strconv.ParseUint(rest[1:], 10, 32)
		r := transits[uint32(vni)]
		if r == nil || !o.loadRouter(e.Name(), r) {
			s.netns = append(s.netns, e.Name())
			continue
		}
		delete(transits, uint32(vni))
		o.routers[r.vni] = r
	}
	for _, r := range transits {
		s.links = append(s.links, r.transit)
	}
	for _, ns := range instNS {
		if o.insts[strings.TrimPrefix(ns, o.nsPrefix())] == nil {
			s.netns = append(s.netns, ns)
		}
	}
	return s, nil
}

// loadRouter reads a router namespace: its VXLAN device and its
// instances; false when it is not whole.
func (o *Overlay) loadRouter(ns string, r *router) bool {
	rh, err := o.handle(ns)
	if err != nil {
		return false
	}
	defer rh.Close()
	links, err := rh.LinkList()
	if err != nil {
		return false
	}
	var insts []*ovInst
	for _, l := range links {
		v, ok := o.parseAlias(l.Attrs().Alias)
		if !ok {
			continue
		}
		switch v.Get("kind") {
		case kindVXLAN:
			cidr, err := netip.ParsePrefix(v.Get("cidr"))
			if err != nil || v.Get("vni") != strconv.FormatUint(uint64(r.vni), 10) {
				return false
			}
			r.vxlan, r.netID, r.cidr = l.Attrs().Name, v.Get("network"), cidr
		case kindInst:
			id := v.Get("instance")
			addr, e1 := netip.ParseAddr(v.Get("addr"))
			mac, e2 := net.ParseMAC(v.Get("mac"))
			sub, e3 := netip.ParsePrefix(v.Get("subnet"))
			gw, e4 := netip.ParseAddr(v.Get("gateway"))
			if errors.Join(e1, e2, e3, e4) != nil || checkID("instance", id) != nil || !nsExists(o.instNS(id)) {
				_ = rh.LinkDel(l)
				continue
			}
			insts = append(insts, &ovInst{id: id, vni: r.vni, veth: l.Attrs().Name, addr: addr, mac: mac, subnet: sub, gw: gw})
		}
	}
	if r.vxlan == "" {
		return false
	}
	for _, in := range insts {
		if o.insts[in.id] == nil {
			o.insts[in.id] = in
		}
	}
	return true
}

// hostNet is the /32 of an address.
func hostNet(a netip.Addr) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(32, 32)}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits != 32 {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, ones), true
}

// writeSysctls writes values under /proc/sys (in the calling thread's
// network namespace, for net/ keys).
func writeSysctls(kv map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		if err := writeSysctl(k, kv[k]); err != nil && !(strings.HasPrefix(k, "net/ipv6") && errors.Is(err, os.ErrNotExist)) {
			return err
		}
	}
	return nil
}

// rpsMask is the receive packet steering mask (a sysfs cpumask: hex words
// of 32 bits, comma-separated) of every CPU the agent may run on, or ""
// on one CPU, where there is nothing to spread.
func rpsMask() string {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return ""
	}
	return cpuMask(set)
}

// cpuMask is set as a sysfs cpumask, "" if it holds fewer than two CPUs.
func cpuMask(set unix.CPUSet) string {
	if set.Count() < 2 {
		return ""
	}
	const cpus = len(unix.CPUSet{}) * 64
	words := make([]uint32, cpus/32)
	for c := range cpus {
		if set.IsSet(c) {
			words[c/32] |= 1 << (c % 32)
		}
	}
	top := len(words) - 1
	for top > 0 && words[top] == 0 {
		top--
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%x", words[top])
	for i := top - 1; i >= 0; i-- {
		fmt.Fprintf(&b, ",%08x", words[i])
	}
	return b.String()
}

// steer spreads what an instance's veth end receives over the CPUs
// (receive packet steering on each of its receive queues, o.rps), in the
// namespace ns, when OverlayConfig.SteerReceive asks for it. A veth hands
// a packet to its peer on the sender's CPU, which then carries it through
// the router, the VXLAN device and the host's stack as well; steered,
// that work goes to the CPU of the packet's flow hash, at the price of an
// interrupt to that CPU per packet (docs/BENCHMARKS.md, the overlay's
// knobs, and "Receive steering, measured again"). A failure costs only
// throughput: it is logged, not returned.
func (o *Overlay) steer(ctx context.Context, ns, ifname string) {
	if o.rps == "" {
		return
	}
	// ip netns exec mounts the namespace's own /sys.
	const script = `for q in /sys/class/net/"$1"/queues/rx-*/rps_cpus; do [ -e "$q" ] || continue; echo "$2" > "$q" || exit 1; done`
	if _, err := run(ctx, nil, o.cfg.IP, "netns", "exec", ns, "sh", "-c", script, "sh", ifname, o.rps); err != nil {
		o.cfg.Log.Warn("overlay: receive packet steering", "netns", ns, "interface", ifname, "err", err)
	}
}
