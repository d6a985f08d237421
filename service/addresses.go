package service

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Event kinds of address actions.
const (
	EventAddressAllocated     cloud.EventKind = "address.allocated"
	EventAddressAssociated    cloud.EventKind = "address.associated"
	EventAddressDisassociated cloud.EventKind = "address.disassociated"
	EventAddressReleased      cloud.EventKind = "address.released"
)

// ParseAddressPool parses Options.AddressPool: an IPv4 CIDR block,
// DefaultAddressPool when empty. A server can call it at start to warn
// of an unusable pool; Allocate fails with its error.
func ParseAddressPool(s string) (netip.Prefix, error) {
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

// Allocate allocates for actor a the lowest free address of the pool
// (Options.AddressPool), in a zone, optionally associated at once with one
// of the tenant's instances that is not terminated (the zone then
// defaults to the instance's), and appends its address.allocated event;
// the store starts its usage with it. An exhausted pool is
// insufficient_capacity; an unusable one fails every allocation (internal:
// the operator must fix it). With an idempotency key, a retry answers the
// address the first call allocated (created false), released or not and
// wherever it is associated now, and writes nothing; the same key with a
// request that differs in a field it sent is a Conflict naming the fields.
func (s *Addresses) Allocate(ctx context.Context, a Actor, spec api.AllocateAddressRequest, key string) (out *cloud.Address, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckName("zone", spec.Zone, false); err != nil {
		return nil, false, err
	}
	if err := CheckTags("tags", spec.Tags); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	pool, err := ParseAddressPool(s.opts.AddressPool)
	if err != nil {
		return nil, false, &cloud.Error{Code: cloud.Internal, Message: "allocate address: " + err.Error(),
			Details: map[string]any{"pool": s.opts.AddressPool}}
	}
	for range addressRetries {
		err = s.tx(ctx, func(tx cloud.Tx) error {
			out, created, err = s.allocateIn(ctx, tx, a, spec, key, pool)
			return err
		})
		if !errors.Is(err, errAddressTaken) {
			break
		}
	}
	if errors.Is(err, errAddressTaken) {
		return nil, false, &cloud.Error{Code: cloud.Conflict, Message: "other allocations kept taking the chosen address; retry",
			Details: map[string]any{"pool": pool.String()}}
	}
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Address, error) { return tx.GetAddress(ctx, id) },
		func(old *cloud.Address) error { return sameAddress(old, &spec) })
	return out, created && err == nil, err
}

// allocateIn allocates one address in tx: the key's address if the tenant
// used the key before, else the pool's lowest free address, associated
// with the instance the request names. errAddressTaken: a concurrent
// allocation took the address (the caller retries).
func (s *Addresses) allocateIn(ctx context.Context, tx cloud.Tx, a Actor, spec api.AllocateAddressRequest, key string, pool netip.Prefix) (*cloud.Address, bool, error) {
	tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
	if err != nil {
		return nil, false, err
	}
	// Every address, to find the key's and the free ones.
	all, err := tx.ListAddresses(ctx, "")
	if err != nil {
		return nil, false, err
	}
	if key != "" {
		for _, old := range all {
			if old.TenantID == tenant && old.IdempotencyKey == key {
				return old, false, sameAddress(old, &spec)
			}
		}
	}
	zone := spec.Zone
	var in *cloud.Instance
	if spec.InstanceID != "" {
		if in, err = associable(ctx, tx, a, tenant, spec.InstanceID); err != nil {
			return nil, false, err
		}
		if err := sameZone(zone, in); err != nil {
			return nil, false, err
		}
		if zone == "" {
			zone = in.Zone
		}
	}
	ip, err := freeAddress(pool, all)
	if err != nil {
		return nil, false, err
	}
	now := s.now()
	ad := &cloud.Address{ID: NewID(AddressPrefix), TenantID: tenant, IP: ip.String(), Zone: zone, Tags: spec.Tags, CreatedAt: now,
		IdempotencyKey: key}
	if in != nil {
		ad.InstanceID = in.ID
	}
	if err := tx.CreateAddress(ctx, ad); err != nil {
		// Another allocation took the IP: try the next free one.
		// A taken key is a keyRace, not an IP conflict.
		if err = asKeyRace(err, key); cloud.IsConflict(err) {
			return nil, false, errAddressTaken
		}
		return nil, false, err
	}
	reason := "address " + ad.ID + " (" + ad.IP + ") allocated"
	if in != nil {
		reason += " and associated with instance " + in.ID
	}
	if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventAddressAllocated, TenantID: tenant,
		InstanceID: ad.InstanceID, Actor: a.ID, Reason: reason}); err != nil {
		return nil, false, err
	}
	return ad, true, nil
}

// freeAddress is the pool's lowest address that no unreleased address
// holds, or InsufficientCapacity.
func freeAddress(pool netip.Prefix, all []*cloud.Address) (netip.Addr, error) {
	held := map[netip.Addr]bool{}
	for _, old := range all {
		if old.ReleasedAt == nil {
			if ip, err := netip.ParseAddr(old.IP); err == nil {
				held[ip] = true
			}
		}
	}
	ip, ok := lowestFree(pool, held)
	if !ok {
		return netip.Addr{}, &cloud.Error{Code: cloud.InsufficientCapacity,
			Message: fmt.Sprintf("every address of the pool %s is allocated; release one (DELETE /v1/addresses/{id}) or ask the operator for a larger pool", pool),
			Details: map[string]any{"pool": pool.String(), "allocated": len(held)}}
	}
	return ip, nil
}

// sameAddress reports a conflict when an idempotency key is reused for
// another allocation. The zone is fixed at allocation; the association is
// not, so the instance is compared only when the request names one (a
// retry after a disassociation or release is then a conflict, which says
// where the address is now). The tenant needs no comparison: it chose the
// key's address.
func sameAddress(old *cloud.Address, spec *api.AllocateAddressRequest) error {
	var d KeyDiffs
	// Without a zone or an instance the first call asked for no zone;
	// with an instance alone it took the instance's.
	if spec.Zone != "" || spec.InstanceID == "" {
		d.String("zone", old.Zone, spec.Zone)
	}
	if spec.InstanceID != "" {
		d.String("instance_id", old.InstanceID, spec.InstanceID)
	}
	d.Map("tags", old.Tags, spec.Tags)
	return d.Err("address", old.ID)
}

// associable reads an instance an address of tenant may be associated
// with: one of the tenant's instances that actor a sees and that is not
// terminated. A missing instance and another tenant's answer the same.
func associable(ctx context.Context, tx cloud.Tx, a Actor, tenant, id string) (*cloud.Instance, error) {
	in, err := tx.GetInstance(ctx, id)
	if cloud.IsNotFound(err) || err == nil && (!a.Sees(in.TenantID) || in.TenantID != tenant) {
		return nil, Field("instance_id", "instance %s not found", Quote(id))
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
		return Field("instance_id", "instance %s is in zone %s and the address in zone %s", in.ID, in.Zone, zone)
	}
	return nil
}

// List answers the addresses actor a may see, in ID order: a member's own
// tenant's; an admin's every tenant's, or tenant's when it is not empty.
// Released addresses are left out unless released is true.
func (s *Addresses) List(ctx context.Context, a Actor, tenant string, released bool) ([]*cloud.Address, error) {
	var out []*cloud.Address
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = []*cloud.Address{}
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		as, err := tx.ListAddresses(ctx, t)
		if err != nil {
			return err
		}
		for _, ad := range as {
			if ad.ReleasedAt == nil || released {
				out = append(out, ad)
			}
		}
		return nil
	})
	return out, err
}

// Get reads an address actor a may see, released or not.
func (s *Addresses) Get(ctx context.Context, a Actor, id string) (*cloud.Address, error) {
	var out *cloud.Address
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		out, err = Visible(ctx, a, "address", id, tx.GetAddress)
		return err
	})
	return out, err
}

// releasedErr is the conflict of an action on a released address.
func releasedErr(ad *cloud.Address) error {
	return &cloud.Error{Code: cloud.Conflict,
		Message: "address " + ad.ID + " was released; allocate a new one",
		Details: map[string]any{"released_at": ad.ReleasedAt}}
}

// Associate associates address id with instance instanceID (see
// associable; the zones must agree) and appends an address.associated
// event. Associating an address with the instance it is on changes
// nothing; one on another instance must be disassociated first, and a
// released one takes no instance.
func (s *Addresses) Associate(ctx context.Context, a Actor, id, instanceID string) (*cloud.Address, error) {
	if instanceID == "" {
		return nil, Field("instance_id", "is required")
	}
	var out *cloud.Address
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ad, err := Visible(ctx, a, "address", id, tx.GetAddress)
		if err != nil {
			return err
		}
		if ad.ReleasedAt != nil {
			return releasedErr(ad)
		}
		in, err := associable(ctx, tx, a, ad.TenantID, instanceID)
		if err != nil {
			return err
		}
		out = ad
		if ad.InstanceID == in.ID {
			return nil
		}
		if ad.InstanceID != "" {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "address " + ad.ID + " is associated with instance " + ad.InstanceID + "; disassociate it first",
				Details: map[string]any{"instance_id": ad.InstanceID}}
		}
		if err := sameZone(ad.Zone, in); err != nil {
			return err
		}
		ad.InstanceID = in.ID
		if err := tx.UpdateAddress(ctx, ad); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventAddressAssociated, TenantID: ad.TenantID,
			InstanceID: in.ID, Actor: a.ID, Reason: "address " + ad.ID + " (" + ad.IP + ") associated"})
	})
	return out, err
}

// Disassociate takes address id off its instance and appends an
// address.disassociated event; disassociating a free address changes
// nothing.
func (s *Addresses) Disassociate(ctx context.Context, a Actor, id string) (*cloud.Address, error) {
	var out *cloud.Address
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ad, err := Visible(ctx, a, "address", id, tx.GetAddress)
		if err != nil {
			return err
		}
		out = ad
		if ad.InstanceID == "" {
			return nil
		}
		from := ad.InstanceID
		ad.InstanceID = ""
		if err := tx.UpdateAddress(ctx, ad); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventAddressDisassociated, TenantID: ad.TenantID,
			InstanceID: from, Actor: a.ID, Reason: "address " + ad.ID + " (" + ad.IP + ") disassociated"})
	})
	return out, err
}

// Release releases address id: it stops billing (the store ends its
// usage) and goes back to the pool, disassociated, and an
// address.released event is appended. Releasing a released address
// answers it unchanged.
func (s *Addresses) Release(ctx context.Context, a Actor, id string) (*cloud.Address, error) {
	var out *cloud.Address
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ad, err := Visible(ctx, a, "address", id, tx.GetAddress)
		if err != nil {
			return err
		}
		out = ad
		if ad.ReleasedAt != nil {
			return nil
		}
		now := s.now()
		from := ad.InstanceID
		ad.InstanceID, ad.ReleasedAt = "", &now
		if err := tx.UpdateAddress(ctx, ad); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventAddressReleased, TenantID: ad.TenantID,
			InstanceID: from, Actor: a.ID, Reason: "address " + ad.ID + " (" + ad.IP + ") released"})
	})
	return out, err
}
