package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"

	"github.com/gpucloud/gpucloud/cloud"
)

// Event kinds of address actions.
const (
	EventAddressAllocated     cloud.EventKind = "address.allocated"
	EventAddressAssociated    cloud.EventKind = "address.associated"
	EventAddressDisassociated cloud.EventKind = "address.disassociated"
	EventAddressReleased      cloud.EventKind = "address.released"
)

// parseAddressPool parses Options.AddressPool: an IPv4 CIDR block,
// DefaultAddressPool when empty.
func parseAddressPool(s string) (netip.Prefix, error) {
	if s == "" {
		s = DefaultAddressPool
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("address pool %q is not a CIDR block such as %s", s, DefaultAddressPool)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("address pool %q is not IPv4", s)
	}
	return p.Masked(), nil
}

// poolRange returns the first and last address the pool hands out: a block
// of /30 or larger keeps its network and broadcast addresses back, as a
// subnet would; /31 and /32 hand out every address (RFC 3021).
func poolRange(p netip.Prefix) (first, last netip.Addr) {
	first = p.Addr()
	a := first.As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	n := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	n |= host
	last = netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)})
	if p.Bits() <= 30 {
		first, last = first.Next(), last.Prev()
	}
	return first, last
}

// lowestFree returns the lowest address of the pool that held does not
// contain, or false when every address is held.
func lowestFree(p netip.Prefix, held map[netip.Addr]bool) (netip.Addr, bool) {
	first, last := poolRange(p)
	for a := first; a.IsValid() && a.Compare(last) <= 0; a = a.Next() {
		if !held[a] {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// addressRetries bounds how often an allocation is retried when another
// one took the chosen address first.
const addressRetries = 5

// errAddressTaken restarts an allocation whose address was taken meanwhile.
var errAddressTaken = errors.New("address taken meanwhile")

// allocateAddress handles POST /v1/addresses: the lowest free address of
// the pool, in a zone, optionally associated with one of the tenant's live
// instances at once. An exhausted pool is insufficient_capacity. With an
// Idempotency-Key, a retry answers the address the first call allocated,
// with 200 instead of 201 (released or not, wherever it is associated
// now); the same key with another zone or instance is a conflict.
func (s *api) allocateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var req AllocateAddressRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	if err := checkName("zone", req.Zone, false); err != nil {
		return err
	}
	asked, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	if s.addrPoolErr != nil {
		return fmt.Errorf("allocate address: %w", s.addrPoolErr)
	}
	var out *cloud.Address
	created := false
	for range addressRetries {
		err = s.tx(r.Context(), func(tx cloud.Tx) error {
			ctx := r.Context()
			out, created = nil, false
			tenant, err := s.scope(ctx, tx, p, asked, p.TenantID)
			if err != nil {
				return err
			}
			// Every address, to find the key's and the free ones.
			all, err := tx.ListAddresses(ctx, "")
			if err != nil {
				return err
			}
			if key != "" {
				for _, a := range all {
					if a.TenantID == tenant && a.IdempotencyKey == key {
						out = a
						return sameAddress(a, &req)
					}
				}
			}
			zone := req.Zone
			var in *cloud.Instance
			if req.InstanceID != "" {
				if in, err = associable(ctx, tx, p, tenant, req.InstanceID); err != nil {
					return err
				}
				if err := sameZone(zone, in); err != nil {
					return err
				}
				if zone == "" {
					zone = in.Zone
				}
			}
			held := map[netip.Addr]bool{}
			for _, a := range all {
				if a.ReleasedAt == nil {
					if ip, err := netip.ParseAddr(a.IP); err == nil {
						held[ip] = true
					}
				}
			}
			ip, ok := lowestFree(s.addrPool, held)
			if !ok {
				return &cloud.Error{Code: cloud.InsufficientCapacity,
					Message: fmt.Sprintf("every address of the pool %s is allocated; release one (DELETE /v1/addresses/{id}) or ask the operator for a larger pool", s.addrPool),
					Details: map[string]any{"pool": s.addrPool.String(), "allocated": len(held)}}
			}
			now := s.now()
			a := &cloud.Address{ID: newID("eip-"), TenantID: tenant, IP: ip.String(), Zone: zone, CreatedAt: now,
				IdempotencyKey: key}
			if in != nil {
				a.InstanceID = in.ID
			}
			if err := tx.CreateAddress(ctx, a); err != nil {
				// Another allocation took the IP: try the next free one.
				// A taken key is a keyRace, not an IP conflict.
				if err = asKeyRace(err, key); cloud.IsConflict(err) {
					return errAddressTaken
				}
				return err
			}
			reason := "address " + a.ID + " (" + a.IP + ") allocated"
			if in != nil {
				reason += " and associated with instance " + in.ID
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventAddressAllocated, TenantID: tenant,
				InstanceID: a.InstanceID, Actor: p.UserID, Reason: reason}); err != nil {
				return err
			}
			out, created = a, true
			return nil
		})
		if !errors.Is(err, errAddressTaken) {
			break
		}
	}
	if errors.Is(err, errAddressTaken) {
		return &cloud.Error{Code: cloud.Conflict, Message: "other allocations kept taking the chosen address; retry",
			Details: map[string]any{"pool": s.addrPool.String()}}
	}
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.Address, error) { return tx.GetAddress(r.Context(), id) }, func(a *cloud.Address) error { return sameAddress(a, &req) })
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/addresses/"+out.ID, out)
	return nil
}

// sameAddress reports a conflict when an idempotency key is reused for
// another allocation. The zone is fixed at allocation; the association is
// not, so the instance is compared only when the request names one (a
// retry after a disassociation or release is then a conflict, which
// says where the address is now).
func sameAddress(old *cloud.Address, req *AllocateAddressRequest) error {
	var d keyDiffs
	// Without a zone or an instance the first call asked for no zone;
	// with an instance alone it took the instance's.
	if req.Zone != "" || req.InstanceID == "" {
		d.addString("zone", old.Zone, req.Zone)
	}
	if req.InstanceID != "" {
		d.addString("instance_id", old.InstanceID, req.InstanceID)
	}
	return d.err("address", old.ID, old.ID)
}

// bodyOrQueryTenant is the tenant a create asks for, in its body or as
// ?tenant; the two must agree when both are given.
func bodyOrQueryTenant(r *http.Request, body string) (string, error) {
	if q := r.URL.Query().Get("tenant"); q != "" {
		if body != "" && body != q {
			return "", field("tenant", "the body says %s and ?tenant says %s", quote(body), quote(q))
		}
		return q, nil
	}
	return body, nil
}

// associable reads an instance an address may be associated with: one of
// the tenant's instances that is not terminated. A missing instance and
// another tenant's answer the same.
func associable(ctx context.Context, tx cloud.Tx, p principal, tenant, id string) (*cloud.Instance, error) {
	in, err := tx.GetInstance(ctx, id)
	if cloud.IsNotFound(err) || err == nil && (!p.visible(in.TenantID) || in.TenantID != tenant) {
		return nil, field("instance_id", "instance %s not found", quote(id))
	}
	if err != nil {
		return nil, err
	}
	if in.State == cloud.Terminated {
		return nil, &cloud.Error{Code: cloud.Conflict,
			Message: "instance " + in.ID + " is terminated; an address goes with a live instance",
			Details: map[string]any{"field": "instance_id", "state": in.State}}
	}
	return in, nil
}

// sameZone refuses to put an address of one zone on an instance placed in
// another.
func sameZone(zone string, in *cloud.Instance) error {
	if zone != "" && in.Zone != "" && zone != in.Zone {
		return field("instance_id", "instance %s is in zone %s and the address in zone %s", in.ID, in.Zone, zone)
	}
	return nil
}

// listAddresses handles GET /v1/addresses: the tenant's unreleased
// addresses (admins: every tenant's, or ?tenant's); ?released=true adds the
// released ones.
func (s *api) listAddresses(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	released := false
	switch q.Get("released") {
	case "", "false":
	case "true":
		released = true
	default:
		return field("released", "want true or false, got %s", quote(q.Get("released")))
	}
	out := AddressList{Addresses: []*cloud.Address{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		out.Addresses = []*cloud.Address{}
		tenant, err := s.scope(r.Context(), tx, p, q.Get("tenant"), "")
		if err != nil {
			return err
		}
		as, err := tx.ListAddresses(r.Context(), tenant)
		if err != nil {
			return err
		}
		for _, a := range as {
			if a.ReleasedAt == nil || released {
				out.Addresses = append(out.Addresses, a)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getVisibleAddress reads an address the principal may see; another
// tenant's answers like a missing one.
func getVisibleAddress(ctx context.Context, tx cloud.Tx, p principal, id string) (*cloud.Address, error) {
	a, err := tx.GetAddress(ctx, id)
	if cloud.IsNotFound(err) || err == nil && !p.visible(a.TenantID) {
		return nil, notFound("address", id)
	}
	return a, err
}

// released is the conflict of an action on a released address.
func released(a *cloud.Address) error {
	return &cloud.Error{Code: cloud.Conflict,
		Message: "address " + a.ID + " was released; allocate a new one",
		Details: map[string]any{"released_at": a.ReleasedAt}}
}

// associateAddress handles POST /v1/addresses/{id}/associate. Associating
// an address with the instance it is on changes nothing; one on another
// instance must be disassociated first.
func (s *api) associateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var req AssociateAddressRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	if req.InstanceID == "" {
		return field("instance_id", "is required")
	}
	var out *cloud.Address
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		a, err := getVisibleAddress(ctx, tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		if a.ReleasedAt != nil {
			return released(a)
		}
		in, err := associable(ctx, tx, p, a.TenantID, req.InstanceID)
		if err != nil {
			return err
		}
		out = a
		if a.InstanceID == in.ID {
			return nil
		}
		if a.InstanceID != "" {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "address " + a.ID + " is associated with instance " + a.InstanceID + "; disassociate it first",
				Details: map[string]any{"instance_id": a.InstanceID}}
		}
		if err := sameZone(a.Zone, in); err != nil {
			return err
		}
		a.InstanceID = in.ID
		if err := tx.UpdateAddress(ctx, a); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventAddressAssociated, TenantID: a.TenantID,
			InstanceID: in.ID, Actor: p.UserID, Reason: "address " + a.ID + " (" + a.IP + ") associated"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// disassociateAddress handles POST /v1/addresses/{id}/disassociate;
// disassociating a free address changes nothing.
func (s *api) disassociateAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var out *cloud.Address
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		a, err := getVisibleAddress(ctx, tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		out = a
		if a.InstanceID == "" {
			return nil
		}
		from := a.InstanceID
		a.InstanceID = ""
		if err := tx.UpdateAddress(ctx, a); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventAddressDisassociated, TenantID: a.TenantID,
			InstanceID: from, Actor: p.UserID, Reason: "address " + a.ID + " (" + a.IP + ") disassociated"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// releaseAddress handles DELETE /v1/addresses/{id}: the address stops
// billing and goes back to the pool, disassociated. Releasing a released
// address answers it unchanged.
func (s *api) releaseAddress(w http.ResponseWriter, r *http.Request, p principal) error {
	var out *cloud.Address
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		a, err := getVisibleAddress(ctx, tx, p, r.PathValue("id"))
		if err != nil {
			return err
		}
		out = a
		if a.ReleasedAt != nil {
			return nil
		}
		now := s.now()
		from := a.InstanceID
		a.InstanceID, a.ReleasedAt = "", &now
		if err := tx.UpdateAddress(ctx, a); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventAddressReleased, TenantID: a.TenantID,
			InstanceID: from, Actor: p.UserID, Reason: "address " + a.ID + " (" + a.IP + ") released"})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
