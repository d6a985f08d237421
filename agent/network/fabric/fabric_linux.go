//go:build linux

package fabric

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// netnsDir is where named network namespaces live.
const netnsDir = "/var/run/netns"

// lockDir holds the fabrics' lock files.
const lockDir = "/run"

// cmdTimeout bounds one run of ip or nft.
const cmdTimeout = 30 * time.Second

// Fabric is a fabric New built. Its methods are safe from any goroutine.
type Fabric struct {
	cfg     Config
	prefix  netip.Prefix
	gateway netip.Addr
	hosts   []Host

	mu     sync.Mutex
	owner  *os.File // the identity's lock, held until Close
	closed bool
}

// Hosts returns the fabric's hosts, host i at index i.
func (f *Fabric) Hosts() []Host { return append([]Host(nil), f.hosts...) }

// Gateway is the fabric's address in the agent's namespace, on its
// bridge: the hosts' default route.
func (f *Fabric) Gateway() netip.Addr { return f.gateway }

// Prefix is the fabric's prefix.
func (f *Fabric) Prefix() netip.Prefix { return f.prefix }

// MTU is the MTU of the fabric's links.
func (f *Fabric) MTU() int { return f.cfg.MTU }

// Cloud is the fabric's identity.
func (f *Fabric) Cloud() string { return f.cfg.Cloud }

// Route routes dst, in the agent's namespace, to host i over the fabric
// (through its underlay address), replacing a route of the fabric's to
// dst: how an address a host answers for (a public address it DNATs to an
// instance) is reached from the agent's namespace and through it. The
// route is on the fabric's bridge and goes with it; Unroute removes it
// earlier. dst may not overlap the fabric's prefix.
func (f *Fabric) Route(dst netip.Prefix, i int) error {
	r, err := f.route(dst)
	if err != nil {
		return err
	}
	if i < 0 || i >= len(f.hosts) {
		return fmt.Errorf("fabric: route %v: no host %d", dst, i)
	}
	r.Gw = f.hosts[i].Underlay.AsSlice()
	if err := netlink.RouteReplace(r); err != nil {
		return fmt.Errorf("fabric: route %v via host %d: %w", dst, i, err)
	}
	return nil
}

// Unroute removes the fabric's route to dst, if there is one.
func (f *Fabric) Unroute(dst netip.Prefix) error {
	r, err := f.route(dst)
	if err != nil {
		return err
	}
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("fabric: remove route %v: %w", dst, err)
	}
	return nil
}

// route is the fabric's route to dst, without its gateway.
func (f *Fabric) route(dst netip.Prefix) (*netlink.Route, error) {
	if !dst.IsValid() || !dst.Addr().Is4() || dst != dst.Masked() || dst.Overlaps(f.prefix) || dst.Bits() == 0 {
		return nil, fmt.Errorf("fabric: route %v: want an IPv4 prefix outside the fabric's %v, not a default route", dst, f.prefix)
	}
	br, err := netlink.LinkByName(BridgeName(f.cfg.Cloud))
	if err != nil {
		return nil, fmt.Errorf("fabric: route %v: %w", dst, err)
	}
	return &netlink.Route{LinkIndex: br.Attrs().Index, Dst: ipNet(dst.Addr(), dst.Bits())}, nil
}

// New builds the fabric of cfg.Cloud: it removes what an earlier fabric of
// the same identity left (a process that crashed), checks that no name it
// needs is held by anything else and that its prefix overlaps no address
// or route of the machine, then makes the bridge, the table and the hosts.
// A failure removes what New made.
func New(ctx context.Context, cfg Config) (*Fabric, error) {
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
	// One fabric at a time chooses its prefix and takes it on this
	// machine; the lock is held for that only.
	all, err := lockFile(ctx, filepath.Join(lockDir, "gpucloud-fabric.lock"), true)
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	defer all.Close()
	owner, err := lockFile(ctx, ownerLock(cfg.Cloud), false)
	if errors.Is(err, errLocked) {
		pid, _ := os.ReadFile(ownerLock(cfg.Cloud))
		return nil, fmt.Errorf("%w (pid %s): the fabric of cloud %s; is another gpucloud up of the same cloud (data directory or database) running? Stop it first",
			ErrInUse, strings.TrimSpace(string(pid)), cfg.Cloud)
	}
	if err != nil {
		return nil, fmt.Errorf("fabric: %w", err)
	}
	_ = owner.Truncate(0)
	_, _ = owner.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	f := &Fabric{cfg: cfg, owner: owner}
	if err := f.removeOwn(ctx); err != nil {
		f.release()
		return nil, fmt.Errorf("fabric: remove what an earlier fabric of cloud %s left: %w", cfg.Cloud, err)
	}
	if err := f.checkNames(); err != nil {
		f.release()
		return nil, err
	}
	if f.prefix, err = choosePrefix(cfg.Cloud, cfg.Prefix); err != nil {
		f.release()
		return nil, err
	}
	f.gateway = nth(f.prefix, 1)
	for i := range cfg.Hosts {
		f.hosts = append(f.hosts, Host{Netns: HostNetns(cfg.Cloud, i), Underlay: nth(f.prefix, i+2)})
	}
	if err := f.build(ctx); err != nil {
		if rerr := f.removeOwn(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
		f.release()
		return nil, err
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil && strings.TrimSpace(string(b)) == "0" {
		cfg.Log.Warn("fabric: this machine does not forward IPv4 (net.ipv4.ip_forward=0): the fabric's hosts reach each other, but replies from outside reach them only through links that forward; set it (sysctl net.ipv4.ip_forward=1)")
	}
	return f, nil
}

// Close removes everything the fabric made: the hosts' namespaces and
// links, the bridge and the table; and lets its identity go. It is
// idempotent.
func (f *Fabric) Close(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.removeOwn(ctx)
	f.release()
	if err != nil {
		return fmt.Errorf("fabric: close: %w", err)
	}
	return nil
}

// release lets the identity's lock go, removing its file.
func (f *Fabric) release() {
	if f.owner == nil {
		return
	}
	_ = os.Remove(ownerLock(f.cfg.Cloud))
	_ = f.owner.Close()
	f.owner = nil
}

// ownerLock is the lock file of a cloud's fabric.
func ownerLock(cloud string) string {
	return filepath.Join(lockDir, "gpucloud-fabric-"+cloud+".lock")
}

var errLocked = errors.New("locked")

// lockFile opens (creating) and locks path exclusively: waiting until ctx
// ends when wait, else errLocked when another holds it. The lock is the
// file's at path: one removed while being locked is opened again.
func lockFile(ctx context.Context, path string, wait bool) (*os.File, error) {
	for {
		fd, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		err = unix.Flock(int(fd.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) {
			fd.Close()
			if !wait {
				return nil, errLocked
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("wait for %s: %w", path, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			fd.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder before may have removed the file while this one
		// waited: then the lock held is of a file no one else finds.
		var held, now unix.Stat_t
		if unix.Fstat(int(fd.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return fd, nil
		}
		fd.Close()
	}
}

// checkNames refuses names the fabric needs that something else holds;
// the fabric's own were removed before.
func (f *Fabric) checkNames() error {
	foreign := func(name string) error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return nil
		}
		return fmt.Errorf("fabric: interface %s exists and is not the fabric of cloud %s (alias %q); remove it, or give this cloud another identity",
			name, f.cfg.Cloud, l.Attrs().Alias)
	}
	if err := foreign(BridgeName(f.cfg.Cloud)); err != nil {
		return err
	}
	for i := range f.cfg.Hosts {
		name := HostNetns(f.cfg.Cloud, i)
		if err := foreign(name); err != nil {
			return err
		}
		if _, err := os.Lstat(filepath.Join(netnsDir, name)); err == nil {
			return fmt.Errorf("fabric: network namespace %s exists and is not the fabric of cloud %s; remove it (ip netns del %s) if it is nobody's",
				name, f.cfg.Cloud, name)
		}
	}
	return nil
}

// choosePrefix returns want when it overlaps nothing of the machine's, or
// when want is unset the first /24 of DefaultRange from cloud's that
// overlaps nothing.
func choosePrefix(cloud string, want netip.Prefix) (netip.Prefix, error) {
	taken, err := machinePrefixes()
	if err != nil {
		return netip.Prefix{}, err
	}
	overlap := func(p netip.Prefix) string {
		for _, t := range taken {
			if t.p.Overlaps(p) {
				return t.what
			}
		}
		return ""
	}
	if want.IsValid() {
		if what := overlap(want); what != "" {
			return netip.Prefix{}, fmt.Errorf("fabric %v overlaps %s; pass --fabric-prefix", want, what)
		}
		return want, nil
	}
	n := 1 << (24 - DefaultRange.Bits())
	for k := range n {
		if p := candidate(cloud, k); overlap(p) == "" {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("fabric: every /24 of %v overlaps an address or a route of this machine (%s); pass --fabric-prefix",
		DefaultRange, overlap(DefaultPrefix(cloud)))
}

// held is a prefix of the machine's, and what holds it.
type held struct {
	p    netip.Prefix
	what string
}

// machinePrefixes lists the IPv4 addresses (with their subnets) and routes
// (of every table, but default routes) of the agent's namespace.
func machinePrefixes() ([]held, error) {
	links := map[int]string{}
	ls, err := retryDump(netlink.LinkList)
	if err != nil {
		return nil, fmt.Errorf("fabric: list interfaces: %w", err)
	}
	for _, l := range ls {
		links[l.Attrs().Index] = l.Attrs().Name
	}
	dev := func(i int) string {
		if name, ok := links[i]; ok {
			return " on dev " + name
		}
		return ""
	}
	var out []held
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return netlink.AddrList(nil, netlink.FAMILY_V4) })
	if err != nil {
		return nil, fmt.Errorf("fabric: list addresses: %w", err)
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IPNet); ok {
			out = append(out, held{p.Masked(), fmt.Sprintf("address %v%s", p, dev(a.LinkIndex))})
		}
	}
	routes, err := retryDump(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("fabric: list routes: %w", err)
	}
	for _, r := range routes {
		p, ok := prefixOf(r.Dst)
		if !ok || p.Bits() == 0 {
			continue
		}
		what := "route " + p.String() + dev(r.LinkIndex)
		if r.Table != unix.RT_TABLE_MAIN && r.Table != 0 {
			what += " (table " + strconv.Itoa(r.Table) + ")"
		}
		out = append(out, held{p.Masked(), what})
	}
	return out, nil
}

// retryDump runs a netlink dump again while the kernel says it was
// interrupted (the tables changed meanwhile).
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var (
		v   []T
		err error
	)
	for range 5 {
		if v, err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return v, err
		}
	}
	return v, err
}

func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	if n == nil {
		return netip.Prefix{}, false
	}
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok || !a.Unmap().Is4() {
		return netip.Prefix{}, false
	}
	ones, bits := n.Mask.Size()
	if bits != 32 && bits != 128 {
		return netip.Prefix{}, false
	}
	if bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, 32)}
}

// build makes the bridge, the table and the hosts.
func (f *Fabric) build(ctx context.Context) error {
	c := f.cfg
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: BridgeName(c.Cloud), MTU: c.MTU, Alias: Alias(c.Cloud), Group: Group}}
	if err := netlink.LinkAdd(br); err != nil {
		return fmt.Errorf("fabric: make bridge %s: %w", br.Name, err)
	}
	brl, err := netlink.LinkByName(br.Name)
	if err != nil {
		return fmt.Errorf("fabric: bridge %s: %w", br.Name, err)
	}
	if brl.Attrs().Alias != Alias(c.Cloud) { // a kernel that took no alias at creation
		if err := netlink.LinkSetAlias(brl, Alias(c.Cloud)); err != nil {
			return fmt.Errorf("fabric: bridge %s: %w", br.Name, err)
		}
	}
	if err := writeSysctl("net/ipv6/conf/"+br.Name+"/disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fabric: bridge %s: %w", br.Name, err)
	}
	if err := netlink.AddrAdd(brl, &netlink.Addr{IPNet: ipNet(f.gateway, f.prefix.Bits())}); err != nil {
		return fmt.Errorf("fabric: bridge %s: address %v: %w", br.Name, f.gateway, err)
	}
	if err := writeSysctl("net/ipv4/conf/"+br.Name+"/forwarding", "1"); err != nil {
		return fmt.Errorf("fabric: bridge %s: forwarding: %w", br.Name, err)
	}
	if err := netlink.LinkSetUp(brl); err != nil {
		return fmt.Errorf("fabric: bridge %s: up: %w", br.Name, err)
	}
	if err := f.nft(ctx, []byte(f.ruleset())); err != nil {
		return err
	}
	for i, h := range f.hosts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := f.makeHost(ctx, i, h, brl.Attrs().Index); err != nil {
			return fmt.Errorf("fabric: host %d (%s): %w", i, h.Netns, err)
		}
	}
	return nil
}

// ruleset is the fabric's nftables table, replaced whole.
func (f *Fabric) ruleset() string {
	br, t := strconv.Quote(BridgeName(f.cfg.Cloud)), Table(f.cfg.Cloud)
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s\ndelete table inet %s\n", t, t)
	fmt.Fprintf(&b, "table inet %s {\n", t)
	// The agent's namespace is not the hosts': only replies to what it
	// opened come in from the fabric.
	fmt.Fprintf(&b, "\tchain input {\n\t\ttype filter hook input priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %s ct state established,related accept\n", br)
	fmt.Fprintf(&b, "\t\tiifname %s drop\n\t}\n", br)
	// Fabrics are separate wires: nothing crosses between two.
	fmt.Fprintf(&b, "\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n")
	fmt.Fprintf(&b, "\t\tiifname %s oifname != %s oifgroup %d drop\n", br, br, Group)
	fmt.Fprintf(&b, "\t\toifname %s iifname != %s iifgroup %d drop\n\t}\n", br, br, Group)
	// The hosts reach the outside as machines behind a router do.
	fmt.Fprintf(&b, "\tchain postrouting {\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n")
	fmt.Fprintf(&b, "\t\tip saddr %v oifname != %s masquerade\n\t}\n}\n", f.prefix, br)
	return b.String()
}

// makeHost makes host i's namespace and its link to the bridge.
func (f *Fabric) makeHost(ctx context.Context, i int, h Host, bridge int) error {
	c := f.cfg
	if _, err := run(ctx, nil, c.IP, "netns", "add", h.Netns); err != nil {
		return err
	}
	nsh, err := netns.GetFromPath(filepath.Join(netnsDir, h.Netns))
	if err != nil {
		return err
	}
	defer nsh.Close()
	in, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return err
	}
	defer in.Close()
	lo, err := in.LinkByName("lo")
	if err != nil {
		return err
	}
	// The namespace is the fabric's from here: its loopback says so.
	if err := in.LinkSetAlias(lo, Alias(c.Cloud)); err != nil {
		return err
	}
	if err := in.LinkSetUp(lo); err != nil {
		return err
	}
	if err := inNetns(h.Netns, func() error {
		for _, kv := range [][2]string{
			{"net/ipv4/ip_forward", "1"},
			{"net/ipv4/conf/all/rp_filter", "2"},
			{"net/ipv4/conf/default/rp_filter", "2"},
		} {
			if err := writeSysctl(kv[0], kv[1]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: h.Netns, MTU: c.MTU, Alias: Alias(c.Cloud), MasterIndex: bridge},
		PeerName: HostLink, PeerNamespace: netlink.NsFd(nsh)}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("make veth %s: %w", h.Netns, err)
	}
	root, err := netlink.LinkByName(h.Netns)
	if err != nil {
		return err
	}
	if root.Attrs().Alias != Alias(c.Cloud) {
		if err := netlink.LinkSetAlias(root, Alias(c.Cloud)); err != nil {
			return err
		}
	}
	if err := writeSysctl("net/ipv6/conf/"+h.Netns+"/disable_ipv6", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := netlink.LinkSetUp(root); err != nil {
		return err
	}
	fab, err := in.LinkByName(HostLink)
	if err != nil {
		return err
	}
	if err := in.LinkSetAlias(fab, Alias(c.Cloud)); err != nil {
		return err
	}
	if err := in.AddrAdd(fab, &netlink.Addr{IPNet: ipNet(h.Underlay, f.prefix.Bits())}); err != nil {
		return fmt.Errorf("address %v: %w", h.Underlay, err)
	}
	if err := inNetns(h.Netns, func() error {
		return writeSysctl("net/ipv4/conf/"+HostLink+"/rp_filter", "2")
	}); err != nil {
		return err
	}
	if err := in.LinkSetUp(fab); err != nil {
		return err
	}
	if err := in.RouteAdd(&netlink.Route{LinkIndex: fab.Attrs().Index, Gw: f.gateway.AsSlice()}); err != nil {
		return fmt.Errorf("default route via %v: %w", f.gateway, err)
	}
	return nil
}

// removeOwn removes every object of the fabric's identity: the links in
// the agent's namespace with its alias (the hosts' veths go with their
// ends), the host namespaces that are its own, and its table.
func (f *Fabric) removeOwn(ctx context.Context) error {
	c := f.cfg
	var errs []error
	links, err := retryDump(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("list interfaces: %w", err)
	}
	for _, l := range links {
		if l.Attrs().Alias != Alias(c.Cloud) {
			continue
		}
		if err := netlink.LinkDel(l); err != nil && !errors.As(err, new(netlink.LinkNotFoundError)) && !errors.Is(err, unix.ENODEV) {
			errs = append(errs, fmt.Errorf("delete interface %s: %w", l.Attrs().Name, err))
		}
	}
	ents, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range ents {
		if _, ok := hostIndex(c.Cloud, e.Name()); !ok || !ownNetns(c.Cloud, e.Name()) {
			continue
		}
		if _, err := run(ctx, nil, c.IP, "netns", "del", e.Name()); err != nil {
			if _, serr := os.Lstat(filepath.Join(netnsDir, e.Name())); serr == nil {
				errs = append(errs, err)
			}
		}
	}
	out, err := run(ctx, nil, c.NFT, "list", "tables", "inet")
	if err != nil {
		errs = append(errs, err)
	} else if hasTable(out, Table(c.Cloud)) {
		if _, err := run(ctx, nil, c.NFT, "delete", "table", "inet", Table(c.Cloud)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// hasTable says whether `nft list tables inet` listed table name.
func hasTable(list []byte, name string) bool {
	for line := range strings.Lines(string(list)) {
		if strings.TrimSpace(line) == "table inet "+name {
			return true
		}
	}
	return false
}

// ownNetns says whether the named namespace is the fabric's of cloud: its
// loopback carries the fabric's alias, or it holds nothing at all (a
// namespace made by a New that stopped before marking it).
func ownNetns(cloud, name string) bool {
	nsh, err := netns.GetFromPath(filepath.Join(netnsDir, name))
	if err != nil {
		return false
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		return false
	}
	defer h.Close()
	links, err := retryDump(h.LinkList)
	if err != nil {
		return false
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" && l.Attrs().Alias == Alias(cloud) {
			return true
		}
	}
	return len(links) == 1 && links[0].Attrs().Name == "lo" && links[0].Attrs().Flags&net.FlagUp == 0
}

// inNetns runs fn on a thread inside the named network namespace. The
// thread ends with its goroutine unless it got back to its own
// namespace.
func inNetns(name string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		goruntime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			ch <- err
			return
		}
		defer self.Close()
		target, err := os.Open(filepath.Join(netnsDir, name))
		if err != nil {
			ch <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("enter namespace %s: %w", name, err)
			return
		}
		err = fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		}
		ch <- err
	}()
	return <-ch
}

// writeSysctl writes a value under /proc/sys, in the namespace of the
// calling thread.
func writeSysctl(key, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys", key), []byte(value+"\n"), 0o644)
}

// nft loads a ruleset with nft -f -.
func (f *Fabric) nft(ctx context.Context, rules []byte) error {
	if _, err := run(ctx, rules, f.cfg.NFT, "-f", "-"); err != nil {
		return fmt.Errorf("fabric: load table %s: %w", Table(f.cfg.Cloud), err)
	}
	return nil
}

// findTool resolves a program: the configured path, else name in PATH,
// /usr/sbin or /sbin.
func findTool(configured, name, pkg string) (string, error) {
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("fabric: %s: %w", name, err)
		}
		return configured, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("fabric: %s is missing (Debian package %s)", name, pkg)
}

// run runs a program with stdin and returns its standard output; its
// error output is in the error.
func run(ctx context.Context, stdin []byte, prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(out.String())
		}
		return nil, fmt.Errorf("%s %s: %w: %s", filepath.Base(prog), strings.Join(args, " "), err, msg)
	}
	return out.Bytes(), nil
}
