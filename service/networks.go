package service

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// Networks creates, reads and deletes a tenant's private networks (VPCs),
// their subnets and security groups, and changes the groups' rules
// (issue 19). Instances get their place on a network where they are
// created (CreateInstance, networks_instances.go).
type Networks struct{ base }

// Event kinds of networks, subnets and security groups.
const (
	EventNetworkCreated       cloud.EventKind = "network.created"
	EventNetworkDeleted       cloud.EventKind = "network.deleted"
	EventSubnetCreated        cloud.EventKind = "subnet.created"
	EventSubnetDeleted        cloud.EventKind = "subnet.deleted"
	EventSecurityGroupCreated cloud.EventKind = "security_group.created"
	EventSecurityGroupDeleted cloud.EventKind = "security_group.deleted"
	EventSecurityGroupChanged cloud.EventKind = "security_group.rules"
)

// MaxNetworksPerTenant bounds a tenant's networks, MaxSubnetsPerNetwork
// and MaxGroupsPerNetwork a network's subnets and security groups.
const (
	MaxNetworksPerTenant = 20
	MaxSubnetsPerNetwork = 100
	MaxGroupsPerNetwork  = 100
)

// refNotFound is the not_found error of a resource a request names in
// field: missing, or another tenant's (the two answer alike).
func refNotFound(field, kind, id string) error {
	return &cloud.Error{Code: cloud.NotFound, Message: field + ": " + kind + " " + Quote(id) + " not found",
		Details: map[string]any{"field": field, "kind": kind, "id": id}}
}

// limitErr is the quota_exceeded error of a count limit.
func limitErr(msg string, limit int) error {
	return &cloud.Error{Code: cloud.QuotaExceeded, Message: msg, Details: map[string]any{"limit": limit}}
}

// CheckDNSLabel validates a name that is part of DNS names: 1 to 63
// lowercase letters, digits and '-', starting and ending with a letter or
// digit.
func CheckDNSLabel(field, s string) error {
	if s == "" {
		return Field(field, "is required")
	}
	if !isDNSLabel(s) {
		return Field(field, "%s is not a DNS label: 1 to 63 lowercase letters, digits and '-', starting and ending with a letter or digit", Quote(s))
	}
	return nil
}

func isDNSLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// CheckNetworkSpec validates what can be checked without the store.
func CheckNetworkSpec(spec *api.CreateNetworkRequest) error {
	if err := CheckDNSLabel("name", spec.Name); err != nil {
		return err
	}
	if spec.Name == DefaultName {
		return Field("name", "%s is the name of the tenant's default network, made on first use", Quote(DefaultName))
	}
	if _, err := ParseNetworkCIDR("cidr", spec.CIDR); err != nil {
		return err
	}
	return CheckTags("tags", spec.Tags)
}

// CreateNetwork creates a network for actor a, with its default security
// group; idempotent by key as Volumes.Create is. A name the tenant uses
// for another network is a conflict.
func (s *Networks) CreateNetwork(ctx context.Context, a Actor, spec api.CreateNetworkRequest, key string) (out *cloud.Network, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckNetworkSpec(&spec); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(n *cloud.Network) error {
		var d KeyDiffs
		d.String("name", n.Name, spec.Name)
		d.String("cidr", n.CIDR, spec.CIDR)
		d.Map("tags", n.Tags, spec.Tags)
		return d.Err("network", n.ID)
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Network, error) { return tx.NetworkByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		ns, err := tx.ListNetworks(ctx, cloud.NetworkFilter{TenantID: tenant})
		if err != nil {
			return err
		}
		if len(ns) >= MaxNetworksPerTenant {
			return limitErr(fmt.Sprintf("the tenant has %d networks, the most it may have; delete one first", len(ns)), MaxNetworksPerTenant)
		}
		for _, n := range ns {
			if n.Name == spec.Name {
				return nameTaken("network", spec.Name, n.ID)
			}
		}
		n := &cloud.Network{ID: NewID(NetworkPrefix), TenantID: tenant, Name: spec.Name, CIDR: spec.CIDR,
			Tags: spec.Tags, IdempotencyKey: key, CreatedAt: s.now()}
		if err := createNetwork(ctx, tx, n, a.ID, true); err != nil {
			return asKeyRace(err, key)
		}
		out, created = n, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Network, error) {
		return tx.GetNetwork(ctx, id)
	}, same)
	return out, created && err == nil, err
}

// nameTaken is the conflict of a name already in use in its scope.
func nameTaken(kind, name, other string) error {
	return &cloud.Error{Code: cloud.Conflict, Message: kind + " name " + Quote(name) + " is taken by " + other,
		Details: map[string]any{"field": "name", "existing_id": other}}
}

// createNetwork writes network n with its default security group, and
// their events when record is set.
func createNetwork(ctx context.Context, tx cloud.Tx, n *cloud.Network, actor string, record bool) error {
	if err := tx.CreateNetwork(ctx, n); err != nil {
		return err
	}
	if record {
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: n.CreatedAt, Kind: EventNetworkCreated, TenantID: n.TenantID,
			Actor: actor, Reason: "network " + n.ID + " (" + n.Name + ", " + n.CIDR + ") created"}); err != nil {
			return err
		}
	}
	g := &cloud.SecurityGroup{ID: DefaultGroupID(n.ID), TenantID: n.TenantID, NetworkID: n.ID, Name: DefaultName,
		Description: "all traffic among its members, all egress", Default: true, CreatedAt: n.CreatedAt}
	g.Ingress = []cloud.SecurityRule{{ID: NewID(RulePrefix), Protocol: cloud.ProtocolAll, GroupID: g.ID}}
	g.Egress = []cloud.SecurityRule{{ID: NewID(RulePrefix), Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}}
	return createGroup(ctx, tx, g, actor, record)
}

// createGroup writes security group g, and its event when record is set.
func createGroup(ctx context.Context, tx cloud.Tx, g *cloud.SecurityGroup, actor string, record bool) error {
	if err := tx.CreateSecurityGroup(ctx, g); err != nil || !record {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: g.CreatedAt, Kind: EventSecurityGroupCreated, TenantID: g.TenantID,
		Actor: actor, Reason: "security group " + g.ID + " (" + g.Name + ") created in network " + g.NetworkID})
}

// GetNetwork reads a network actor a may see.
func (s *Networks) GetNetwork(ctx context.Context, a Actor, id string) (*cloud.Network, error) {
	var out *cloud.Network
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		out, err = Visible(ctx, a, "network", id, tx.GetNetwork)
		return err
	})
	return out, err
}

// ListNetworks answers the networks actor a may see, in ID order: a
// member's own tenant's, an admin's every tenant's or tenant's. Listing
// one tenant's networks makes its default network when it has none yet
// (first use, as an instance create does).
func (s *Networks) ListNetworks(ctx context.Context, a Actor, tenant string) ([]*cloud.Network, error) {
	var out []*cloud.Network
	err := s.retryNetwork(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		if t != "" {
			if _, err := ensureDefaultNetwork(ctx, tx, t, a.ID, s.now()); err != nil {
				return err
			}
		}
		out, err = tx.ListNetworks(ctx, cloud.NetworkFilter{TenantID: t})
		if out == nil {
			out = []*cloud.Network{}
		}
		return err
	})
	return out, err
}

// DeleteNetwork deletes a network none of whose subnets has an instance
// that is not terminated, and none of whose subnets and groups a spot
// request that may still launch names (a conflict naming them), with its
// subnets and security groups. The default network is deleted like any other; the
// tenant's next need makes a new one.
func (s *Networks) DeleteNetwork(ctx context.Context, a Actor, id string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		n, err := Visible(ctx, a, "network", id, tx.GetNetwork)
		if err != nil {
			return err
		}
		if err := notInUse(ctx, tx, "network", n.ID, cloud.InstanceFilter{TenantID: n.TenantID, NetworkID: n.ID}); err != nil {
			return err
		}
		gs, err := tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: n.TenantID, NetworkID: n.ID})
		if err != nil {
			return err
		}
		subs, err := tx.ListSubnets(ctx, cloud.SubnetFilter{TenantID: n.TenantID, NetworkID: n.ID})
		if err != nil {
			return err
		}
		if err := notNamedBySpot(ctx, tx, n.TenantID, "network", n.ID, spotNamesNetwork(subs, gs)); err != nil {
			return err
		}
		for _, g := range gs {
			if err := tx.DeleteSecurityGroup(ctx, g.ID); err != nil {
				return err
			}
		}
		for _, sub := range subs {
			if err := tx.DeleteSubnet(ctx, sub.ID); err != nil {
				return err
			}
		}
		if err := tx.DeleteNetwork(ctx, n.ID); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventNetworkDeleted, TenantID: n.TenantID, Actor: a.ID,
			Reason: fmt.Sprintf("network %s (%s) deleted with %d subnets and %d security groups", n.ID, n.Name, len(subs), len(gs))})
	})
}

// maxInUseIDs bounds the instance IDs an in-use conflict names.
const maxInUseIDs = 20

// notInUse answers a conflict naming the instances f selects that are not
// terminated, when there are any: kind id is in use by them.
func notInUse(ctx context.Context, tx cloud.Tx, kind, id string, f cloud.InstanceFilter) error {
	f.States = notTerminated
	f.Limit = maxInUseIDs + 1
	ins, err := tx.ListInstances(ctx, f)
	if err != nil || len(ins) == 0 {
		return err
	}
	ids := make([]string, 0, len(ins))
	for _, in := range ins[:min(len(ins), maxInUseIDs)] {
		ids = append(ids, in.ID)
	}
	more := ""
	if len(ins) > maxInUseIDs {
		more = " and more"
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: kind + " " + id + " is in use by instances " + strings.Join(ids, ", ") + more + "; terminate them first",
		Details: map[string]any{"instance_ids": ids}}
}
