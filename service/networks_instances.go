package service

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// MaxInstanceGroups is how many security groups an instance may have.
const MaxInstanceGroups = 5

// checkNetworkSpec validates the network fields of an instance create
// without the store.
func checkNetworkSpec(spec *api.CreateInstanceRequest) error {
	if err := CheckText("subnet", spec.Subnet, maxNameLen); err != nil {
		return err
	}
	if len(spec.SecurityGroups) > MaxInstanceGroups {
		return Field("security_groups", "%d groups; an instance has 1 to %d", len(spec.SecurityGroups), MaxInstanceGroups)
	}
	for i, g := range spec.SecurityGroups {
		field := fmt.Sprintf("security_groups[%d]", i)
		if g == "" || slices.Contains(spec.SecurityGroups[:i], g) {
			return Field(field, "security group IDs must be non-empty and given once")
		}
		if err := CheckText(field, g, maxNameLen); err != nil {
			return err
		}
	}
	return nil
}

// subnetZone rewrites a create's zones to its subnet's zone, when the
// request names a subnet that has one: the subnet's zone is where the
// instance runs, and zones that exclude it are invalid_argument. A
// missing subnet, or another tenant's, is not_found.
func subnetZone(ctx context.Context, tx cloud.Tx, tenant string, spec *api.CreateInstanceRequest) error {
	if spec.Subnet == "" {
		return nil
	}
	sub, err := batchOf(ctx).subnet(ctx, tx, tenant, spec.Subnet)
	if err != nil {
		return err
	}
	if sub.Zone == "" {
		return nil
	}
	if len(spec.Zones) > 0 && !slices.Contains(spec.Zones, sub.Zone) {
		return Field("zones", "subnet %s is in zone %s, which the zones %v exclude", sub.ID, sub.Zone, spec.Zones)
	}
	spec.Zones = []string{sub.Zone}
	return nil
}

// tenantSubnet reads subnet id of tenant; a missing one and another
// tenant's are not_found.
func tenantSubnet(ctx context.Context, tx cloud.Tx, tenant, id string) (*cloud.Subnet, error) {
	sub, err := tx.GetSubnet(ctx, id)
	if cloud.IsNotFound(err) || err == nil && sub.TenantID != tenant {
		return nil, refNotFound("subnet", "subnet", id)
	}
	return sub, err
}

// placeOnNetwork gives in, an instance about to be created, its place on
// a private network: its subnet (in.SubnetID, else the tenant's default
// subnet, made on first need), its security groups (in.SecurityGroupIDs,
// one to five of the subnet's network, else the network's default group),
// the subnet's zone as its only zone, and a private address from the
// subnet (allocateAddresses). The subnet is read once and written once (a
// write that also keeps a network deleted meanwhile from getting the
// instance: it finds the subnet gone); its held addresses are read only
// once its allocation has wrapped.
func placeOnNetwork(ctx context.Context, tx cloud.Tx, in *cloud.Instance, actor string) (*cloud.Subnet, error) {
	b := batchOf(ctx)
	var sub *cloud.Subnet
	var err error
	if in.SubnetID == "" {
		sub, err = b.defaultSubnet(ctx, tx, in.TenantID, actor, in.CreatedAt)
	} else {
		sub, err = b.subnet(ctx, tx, in.TenantID, in.SubnetID)
	}
	if err != nil {
		return nil, err
	}
	groups, err := instanceGroups(ctx, tx, in, sub)
	if err != nil {
		return nil, err
	}
	if sub.Zone != "" {
		if len(in.Zones) > 0 && !slices.Contains(in.Zones, sub.Zone) {
			return nil, Field("zones", "subnet %s is in zone %s, which the zones %v exclude", sub.ID, sub.Zone, in.Zones)
		}
		in.Zones = []string{sub.Zone}
	}
	in.NetworkID, in.SubnetID, in.SecurityGroupIDs = sub.NetworkID, sub.ID, groups
	if deferring(ctx, in) != nil {
		return sub, nil // the batch's flush gives the address
	}
	addrs, err := allocateAddresses(ctx, tx, sub, 1)
	if err != nil {
		return nil, err
	}
	in.PrivateAddress = addrs[0].String()
	return sub, nil
}

// instanceGroups checks the groups an instance names (the tenant's, of
// its subnet's network) or answers the network's default group, which it
// need not read (DefaultGroupID).
func instanceGroups(ctx context.Context, tx cloud.Tx, in *cloud.Instance, sub *cloud.Subnet) ([]string, error) {
	if len(in.SecurityGroupIDs) == 0 {
		return []string{DefaultGroupID(sub.NetworkID)}, nil
	}
	if len(in.SecurityGroupIDs) > MaxInstanceGroups {
		return nil, Field("security_groups", "%d groups; an instance has 1 to %d", len(in.SecurityGroupIDs), MaxInstanceGroups)
	}
	for i, id := range in.SecurityGroupIDs {
		field := fmt.Sprintf("security_groups[%d]", i)
		g, err := tx.GetSecurityGroup(ctx, id)
		if cloud.IsNotFound(err) || err == nil && g.TenantID != in.TenantID {
			return nil, refNotFound(field, "security group", id)
		}
		if err != nil {
			return nil, err
		}
		if g.NetworkID != sub.NetworkID {
			return nil, Field(field, "security group %s is in network %s, and subnet %s in network %s", g.ID, g.NetworkID, sub.ID, sub.NetworkID)
		}
	}
	return slices.Clone(in.SecurityGroupIDs), nil
}

// allocateRereads bounds how often allocateAddresses reads its subnet
// again after a concurrent allocation wrote it first.
const allocateRereads = 32

// allocateAddresses gives the next n free addresses of subnet sub (see
// nextAddress) and writes the subnet's advanced cursor, once. The write
// checks the version read, so that two allocations never take the same
// address: one that a concurrent allocation beat reads the subnet again
// (at read committed it sees the winner's cursor; the winner's row lock
// makes the others wait their turn), and after allocateRereads tries it
// is errNetworkRace, which runs the transaction again. A subnet without n
// free usable addresses is insufficient_capacity, naming the subnet.
func allocateAddresses(ctx context.Context, tx cloud.Tx, sub *cloud.Subnet, n int) ([]netip.Addr, error) {
	for range allocateRereads {
		addrs, err := tryAllocate(ctx, tx, sub, n)
		if !cloud.IsConflict(err) {
			return addrs, err
		}
		fresh, err := tx.GetSubnet(ctx, sub.ID)
		if err != nil {
			return nil, err
		}
		*sub = *fresh
	}
	return nil, errNetworkRace
}

// tryAllocate is one try of allocateAddresses: Conflict when the subnet
// changed since sub was read. The held addresses are read once, when the
// cursor first needs them, and the addresses given here join them.
func tryAllocate(ctx context.Context, tx cloud.Tx, sub *cloud.Subnet, n int) ([]netip.Addr, error) {
	p, err := mustPrefix("subnet", sub.ID, sub.CIDR)
	if err != nil {
		return nil, err
	}
	var held map[netip.Addr]bool
	cursor := sub.Cursor
	out := make([]netip.Addr, 0, n)
	for len(out) < n {
		if held == nil && cursorNeedsHeld(p, cursor) {
			addrs, err := tx.ListSubnetAddresses(ctx, sub.ID)
			if err != nil {
				return nil, err
			}
			held = make(map[netip.Addr]bool, len(addrs)+n)
			for _, s := range addrs {
				if a, err := netip.ParseAddr(s); err == nil {
					held[a] = true
				}
			}
			for _, a := range out {
				held[a] = true
			}
		}
		addr, next, ok := nextAddress(p, cursor, held)
		if !ok {
			return nil, &cloud.Error{Code: cloud.InsufficientCapacity,
				Message: fmt.Sprintf("subnet %s (%s, %s) has no free address: instances that are not terminated hold all %d of its usable addresses; terminate one, or use another subnet",
					sub.ID, sub.Name, sub.CIDR, SubnetCapacity(p)),
				Details: map[string]any{"subnet_id": sub.ID, "cidr": sub.CIDR, "capacity": SubnetCapacity(p)}}
		}
		out = append(out, addr)
		if held != nil {
			held[addr] = true
		}
		cursor = next
	}
	upd := *sub
	upd.Cursor = cursor
	if err := tx.UpdateSubnet(ctx, &upd); err != nil {
		return nil, err
	}
	*sub = upd
	return out, nil
}
