package service

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// CheckSubnetSpec validates what can be checked without the store.
func CheckSubnetSpec(spec *api.CreateSubnetRequest) error {
	if spec.Network == "" {
		return Field("network", "is required: the ID of one of the tenant's networks")
	}
	if err := CheckName("name", spec.Name, true); err != nil {
		return err
	}
	if _, err := ParseNetworkCIDR("cidr", spec.CIDR); err != nil {
		return err
	}
	if err := CheckName("zone", spec.Zone, true); err != nil {
		return err
	}
	return CheckTags("tags", spec.Tags)
}

// CreateSubnet creates a subnet of one of the tenant's networks for actor
// a; idempotent by key as Volumes.Create is. Its CIDR lies inside the
// network's and overlaps no other subnet of the network
// (invalid_argument naming the other), its name is unique in the network
// (conflict), and its zone is one the cloud has hosts in (any name while
// no host has joined).
func (s *Networks) CreateSubnet(ctx context.Context, a Actor, spec api.CreateSubnetRequest, key string) (out *cloud.Subnet, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckSubnetSpec(&spec); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(sub *cloud.Subnet) error {
		var d KeyDiffs
		d.String("network", sub.NetworkID, spec.Network)
		d.String("name", sub.Name, spec.Name)
		d.String("cidr", sub.CIDR, spec.CIDR)
		d.String("zone", sub.Zone, spec.Zone)
		d.Map("tags", sub.Tags, spec.Tags)
		return d.Err("subnet", sub.ID)
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Subnet, error) { return tx.SubnetByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		sub := &cloud.Subnet{ID: NewID(SubnetPrefix), TenantID: tenant, NetworkID: spec.Network, Name: spec.Name,
			CIDR: spec.CIDR, Zone: spec.Zone, Tags: spec.Tags, IdempotencyKey: key, CreatedAt: s.now()}
		if err := checkSubnetPlace(ctx, tx, sub); err != nil {
			return err
		}
		if err := createSubnet(ctx, tx, sub, a.ID, true); err != nil {
			return asKeyRace(err, key)
		}
		out, created = sub, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Subnet, error) {
		return tx.GetSubnet(ctx, id)
	}, same)
	return out, created && err == nil, err
}

// checkSubnetPlace checks a new subnet against its network, the network's
// other subnets and the cloud's zones.
func checkSubnetPlace(ctx context.Context, tx cloud.Tx, sub *cloud.Subnet) error {
	n, err := tx.GetNetwork(ctx, sub.NetworkID)
	if cloud.IsNotFound(err) || err == nil && n.TenantID != sub.TenantID {
		return refNotFound("network", "network", sub.NetworkID)
	}
	if err != nil {
		return err
	}
	np, err := mustPrefix("network", n.ID, n.CIDR)
	if err != nil {
		return err
	}
	sp, _ := ParseNetworkCIDR("cidr", sub.CIDR)
	if sp.Bits() < np.Bits() || !np.Contains(sp.Addr()) {
		return Field("cidr", "%s is not inside network %s's %s", sub.CIDR, n.ID, n.CIDR)
	}
	others, err := tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: n.TenantID, NetworkID: n.ID})
	if err != nil {
		return err
	}
	if len(others) >= MaxSubnetsPerNetwork {
		return limitErr(fmt.Sprintf("network %s has %d subnets, the most it may have; delete one first", n.ID, len(others)), MaxSubnetsPerNetwork)
	}
	for _, o := range others {
		if o.Name == sub.Name {
			return nameTaken("subnet", sub.Name, o.ID)
		}
		op, err := mustPrefix("subnet", o.ID, o.CIDR)
		if err != nil {
			return err
		}
		if op.Overlaps(sp) {
			return &cloud.Error{Code: cloud.Invalid,
				Message: fmt.Sprintf("cidr: %s overlaps subnet %s (%s, %s) of network %s", sub.CIDR, o.ID, o.Name, o.CIDR, n.ID),
				Details: map[string]any{"field": "cidr", "subnet_id": o.ID}}
		}
	}
	return knownZone(ctx, tx, sub.Zone)
}

// knownZone refuses a zone no host of the cloud is in, when hosts have
// joined: the subnet's instances could never be placed.
func knownZone(ctx context.Context, tx cloud.Tx, zone string) error {
	hosts, err := tx.ListHosts(ctx)
	if err != nil || len(hosts) == 0 {
		return err
	}
	zones := map[string]bool{}
	for _, h := range hosts {
		zones[h.Spec.Zone] = true
	}
	if zones[zone] {
		return nil
	}
	known := make([]string, 0, len(zones))
	for z := range zones {
		known = append(known, z)
	}
	sort.Strings(known)
	return &cloud.Error{Code: cloud.Invalid, Message: fmt.Sprintf("zone: no host of this cloud is in zone %s (its zones: %v)", Quote(zone), known),
		Details: map[string]any{"field": "zone", "known": known}}
}

// GetSubnet reads a subnet actor a may see.
func (s *Networks) GetSubnet(ctx context.Context, a Actor, id string) (*cloud.Subnet, error) {
	var out *cloud.Subnet
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		out, err = Visible(ctx, a, "subnet", id, tx.GetSubnet)
		return err
	})
	return out, err
}

// ListSubnets answers the subnets actor a may see, in ID order: a
// member's own tenant's, an admin's every tenant's or tenant's; of one
// network when network is not empty (another tenant's network is
// not_found).
func (s *Networks) ListSubnets(ctx context.Context, a Actor, tenant, network string) ([]*cloud.Subnet, error) {
	var out []*cloud.Subnet
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		if network != "" {
			if _, err := Visible(ctx, a, "network", network, tx.GetNetwork); err != nil {
				return err
			}
		}
		out, err = tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: t, NetworkID: network})
		if out == nil {
			out = []*cloud.Subnet{}
		}
		return err
	})
	return out, err
}

// DeleteSubnet deletes a subnet that has no instance that is not
// terminated (a conflict naming them) and that no spot request that may
// still launch names. The default subnet goes with the
// default network only.
func (s *Networks) DeleteSubnet(ctx context.Context, a Actor, id string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		sub, err := Visible(ctx, a, "subnet", id, tx.GetSubnet)
		if err != nil {
			return err
		}
		if sub.Default {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "subnet " + sub.ID + " is the default subnet; it goes with its network (delete network " + sub.NetworkID + ")",
				Details: map[string]any{"network_id": sub.NetworkID}}
		}
		if err := notInUse(ctx, tx, "subnet", sub.ID, cloud.InstanceFilter{TenantID: sub.TenantID, SubnetID: sub.ID}); err != nil {
			return err
		}
		if err := notNamedBySpot(ctx, tx, sub.TenantID, "subnet", sub.ID, func(r *cloud.SpotRequest) bool { return r.Subnet == sub.ID }); err != nil {
			return err
		}
		if err := tx.DeleteSubnet(ctx, sub.ID); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventSubnetDeleted, TenantID: sub.TenantID, Actor: a.ID,
			Reason: "subnet " + sub.ID + " (" + sub.Name + ", " + sub.CIDR + ") deleted"})
	})
}
