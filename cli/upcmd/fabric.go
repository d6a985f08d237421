package upcmd

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gpucloud/gpucloud/agent/network/fabric"
)

// The hosts' fabric: with containers, up gives each container host (the
// simulated hosts, then this machine's GPUs) a network namespace of its
// own on one bridge, agent/network/fabric, so that the traffic between
// hosts crosses a wire as it would between machines. Its names derive from
// the cloud's identity (upCloudID), so that two ups on one machine (other
// --listen and --data-dir) each have their own, and stopping one removes
// only its own.

// upCloudID is the short identity of the cloud up runs, which every name
// of its fabric (and of its hosts' instance networks) derives from: the
// first 6 hex digits of its CA certificate's SHA-256 fingerprint
// ("sha256:<hex>", controlplane.Replica.CAFingerprint). The CA is the
// cloud's, kept in its store: a restart of up on the same data directory
// (or database) has the same identity and takes over what a crashed run
// left; another cloud has another CA.
func upCloudID(fingerprint string) (string, error) {
	h, _ := strings.CutPrefix(strings.ToLower(strings.TrimSpace(fingerprint)), "sha256:")
	h = strings.ReplaceAll(h, ":", "")
	if len(h) < fabric.MaxCloudLen {
		return "", fmt.Errorf("CA fingerprint %q: too short for a cloud identity", fingerprint)
	}
	id := h[:fabric.MaxCloudLen]
	if _, err := hex.DecodeString(id); err != nil {
		return "", fmt.Errorf("CA fingerprint %q: want hex digits", fingerprint)
	}
	return id, nil
}

// parseFabricPrefix reads --fabric-prefix: "" is the default (a free /24
// of fabric.DefaultRange chosen by the cloud's identity).
func parseFabricPrefix(s string) (netip.Prefix, error) {
	if s == "" {
		return netip.Prefix{}, nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("--fabric-prefix %q: want an IPv4 prefix such as 100.100.7.0/24", s)
	}
	if p != p.Masked() {
		return netip.Prefix{}, fmt.Errorf("--fabric-prefix %q: want its network address, %v", s, p.Masked())
	}
	return p, nil
}

// startFabric makes the fabric of hosts container hosts, named from
// u.cloud, on u.fabricPrefix when set. It does nothing for processes.
func (u *upRuntimes) startFabric(ctx context.Context, hosts int) error {
	if u.kind != upRuntimeContainerd || hosts == 0 {
		return nil
	}
	f, err := fabric.New(ctx, fabric.Config{Cloud: u.cloud, Hosts: hosts, Prefix: u.fabricPrefix, Log: u.log})
	if err != nil {
		return err // "fabric: ...", or "fabric P overlaps ...; pass --fabric-prefix"
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = f.Close(ctx)
		return fmt.Errorf("up is shutting down")
	}
	u.fab = f
	u.pubs = &publicRoutes{fab: f, log: u.log, host: map[netip.Addr]int{}}
	return nil
}

// publicRoutes routes each public address a host serves (its overlay's
// OnPublic) to that host over the fabric, in the machine's namespace
// (fabric.Route), so that the machine, and whatever it routes, reaches
// the instance at it through its groups. Its lock is its own: the
// overlays call it with theirs held, and up's close destroys them with
// u.mu held.
type publicRoutes struct {
	fab *fabric.Fabric
	log *slog.Logger

	mu   sync.Mutex
	host map[netip.Addr]int // the host each routed address goes to
}

// onPublic is host i's overlay's OnPublic. An address that another host
// serves since is left routed to that one, whatever order the two hosts'
// news come in.
func (p *publicRoutes) onPublic(i int) func(netip.Addr, bool) {
	return func(a netip.Addr, serving bool) {
		p.mu.Lock()
		defer p.mu.Unlock()
		dst := netip.PrefixFrom(a, a.BitLen())
		if serving {
			if err := p.fab.Route(dst, i); err != nil {
				p.log.Warn("up: route a public address to its host", "address", a, "host", i, "err", err)
				return
			}
			p.host[a] = i
			return
		}
		if h, ok := p.host[a]; !ok || h != i {
			return
		}
		delete(p.host, a)
		if err := p.fab.Unroute(dst); err != nil {
			p.log.Warn("up: remove a public address's route", "address", a, "host", i, "err", err)
		}
	}
}

// hostNetwork is where container host i (in the order forHost made their
// runtimes: the simulated hosts, then this machine's GPUs) lives on the
// fabric: the name of its network namespace (under /var/run/netns) and
// its underlay address there, what an instance network takes as the
// host's namespace and underlay (network.Config's HostNetns and
// Underlay; UnderlayMTU is the fabric's, fabricMTU). Without a fabric
// (processes), or past its hosts, it is "" and the zero address: the
// host is the agent's own namespace.
func (u *upRuntimes) hostNetwork(i int) (netns string, underlay netip.Addr) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fab == nil {
		return "", netip.Addr{}
	}
	hs := u.fab.Hosts()
	if i < 0 || i >= len(hs) {
		return "", netip.Addr{}
	}
	return hs[i].Netns, hs[i].Underlay
}

// fabricMTU is the MTU of the fabric's links (0 without a fabric).
func (u *upRuntimes) fabricMTU() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fab == nil {
		return 0
	}
	return u.fab.MTU()
}

// describeFabric is the line up prints about its fabric ("" without one).
func (u *upRuntimes) describeFabric() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fab == nil {
		return ""
	}
	hs := u.fab.Hosts()
	last := ""
	if len(hs) > 1 {
		last = " to " + hs[len(hs)-1].Netns
	}
	return fmt.Sprintf("hosts' fabric: cloud %s, %v on bridge %s (gateway %v), hosts in network namespaces %s%s (--fabric-prefix)",
		u.fab.Cloud(), u.fab.Prefix(), fabric.BridgeName(u.fab.Cloud()), u.fab.Gateway(), hs[0].Netns, last)
}

// closeFabric removes the fabric; u.mu is held.
func (u *upRuntimes) closeFabric(ctx context.Context) {
	if u.fab == nil {
		return
	}
	if err := u.fab.Close(ctx); err != nil {
		u.log.Warn("up: remove the hosts' fabric", "err", err)
	}
	u.fab, u.pubs = nil, nil
}
