//go:build linux

package network

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// Public addresses (docs/NETWORK.md, "Public addresses"). A local
// instance with a public address PUBLIC is reachable at it through its
// security groups:
//
//   - the host's namespace routes PUBLIC/32 to the router's end of its
//     network's transit link, and its table lets new connections to
//     PUBLIC into that transit link, and no other;
//   - the router's overlay table rewrites the destination of what comes
//     in through the transit link for PUBLIC to the instance's private
//     address (DNAT, prerouting), lets such connections through its
//     forward chain, and leaves them to the groups' table, which decides
//     with the client's own source address and the instance's ingress
//     rules; conntrack reverses the rewrite for replies.
//
// What the instance opens itself leaves as everything else does, through
// the host's masquerade (no source NAT to PUBLIC).
//
// An instance's public address is its endpoint's in the last view of its
// network, or, while that view has no endpoint for it, the one Setup
// gave. The driver does not keep it across its own restart: the first
// Sync brings it back.

// served is a public address the host serves: the network (its router)
// and the private address it forwards to.
type served struct {
	vni  uint32
	inst string
	addr netip.Addr
}

// publicOf is the public address of a local instance (zero: none).
func (o *Overlay) publicOf(in *ovInst) netip.Addr {
	if r := o.routers[in.vni]; r != nil {
		if v, ok := o.views[in.vni]; ok && v.ID == r.netID {
			for _, e := range v.Endpoints {
				if e.InstanceID != in.id {
					continue
				}
				if e.PublicAddress == "" {
					return netip.Addr{}
				}
				a, err := netip.ParseAddr(e.PublicAddress)
				if err != nil {
					o.cfg.Log.Warn("overlay: bad public address in the view", "instance", in.id, "address", e.PublicAddress)
					return netip.Addr{}
				}
				return a
			}
		}
	}
	return in.public
}

// publics are the public addresses the host should serve now. An
// address that cannot be one (not IPv4 unicast, the host's underlay
// address, in the transit pool or in the instance's own network) is
// skipped with a warning, and so is one that an instance earlier in ID
// order already has; warn says whether to log those.
func (o *Overlay) publics(warn bool) map[netip.Addr]served {
	out := map[netip.Addr]served{}
	for _, id := range slices.Sorted(maps.Keys(o.insts)) {
		in := o.insts[id]
		r := o.routers[in.vni]
		p := o.publicOf(in)
		if r == nil || !p.IsValid() {
			continue
		}
		switch {
		case !p.Is4() || !p.IsGlobalUnicast() || p == o.cfg.Underlay || o.cfg.TransitPool.Contains(p) || r.cidr.Contains(p):
			if warn {
				o.cfg.Log.Warn("overlay: public address not served: it cannot be one on this host", "instance", id, "address", p)
			}
			continue
		case out[p].inst != "":
			if warn {
				o.cfg.Log.Warn("overlay: public address not served: another instance has it", "instance", id, "address", p, "other", out[p].inst)
			}
			continue
		}
		out[p] = served{vni: in.vni, inst: id, addr: in.addr}
	}
	return out
}

// routerAddr is the router's end of its transit link.
func (r *router) routerAddr() netip.Addr { return r.link.Addr().Next().Next() }

// syncPublic makes the host serve the public addresses publics says:
// the host's routes to them (on the transit links), its table when the
// set changed, and OnPublic for each address that came or went. The
// routers' DNAT rules are applyRouter's, which reads the same publics.
func (o *Overlay) syncPublic(ctx context.Context) error {
	want := o.publics(true)
	before := o.served
	o.served = want
	var errs []error
	if !maps.Equal(before, want) {
		errs = append(errs, o.applyHost(ctx))
	}
	errs = append(errs, o.publicRoutes(want))
	if f := o.cfg.OnPublic; f != nil {
		for _, a := range slices.SortedFunc(maps.Keys(before), netip.Addr.Compare) {
			if _, ok := want[a]; !ok {
				f(a, false)
			}
		}
		for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
			if _, ok := before[a]; !ok {
				f(a, true)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("overlay: public addresses: %w", err)
	}
	return nil
}

// publicRoutes makes the host's /32 routes through the routers' transit
// links those of want: each address through its router's transit
// address; it removes the others there.
func (o *Overlay) publicRoutes(want map[netip.Addr]served) error {
	hh, err := o.handle("")
	if err != nil {
		return err
	}
	defer hh.Close()
	var errs []error
	for _, vni := range slices.Sorted(maps.Keys(o.routers)) {
		r := o.routers[vni]
		l, err := hh.LinkByName(r.transit)
		if err != nil {
			errs = append(errs, fmt.Errorf("transit link %s: %w", r.transit, err))
			continue
		}
		routes, err := hh.RouteList(l, netlink.FAMILY_V4)
		if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
			errs = append(errs, err)
			continue
		}
		have := map[netip.Addr]bool{}
		for _, rt := range routes {
			p, ok := prefixOf(rt.Dst)
			if !ok || p.Bits() != 32 {
				continue
			}
			gw, _ := netip.AddrFromSlice(rt.Gw.To4())
			if s, ok := want[p.Addr()]; ok && s.vni == vni && gw == r.routerAddr() {
				have[p.Addr()] = true
				continue
			}
			errs = append(errs, ignoreNotFound(hh.RouteDel(&rt)))
		}
		for a, s := range want {
			if s.vni != vni || have[a] {
				continue
			}
			if err := hh.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: hostNet(a), Gw: r.routerAddr().AsSlice()}); err != nil {
				errs = append(errs, fmt.Errorf("route to %s: %w", a, err))
			}
		}
	}
	return errors.Join(errs...)
}

// routerPublics are the public addresses a router forwards, each with
// its instance's private address, sorted.
func (o *Overlay) routerPublics(r *router) (pubs, privs []netip.Addr) {
	all := o.publics(false)
	for _, a := range slices.SortedFunc(maps.Keys(all), netip.Addr.Compare) {
		if s := all[a]; s.vni == r.vni {
			pubs, privs = append(pubs, a), append(privs, s.addr)
		}
	}
	return pubs, privs
}
