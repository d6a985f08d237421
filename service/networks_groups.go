package service

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// maxDescriptionLen bounds a security group's and a rule's description.
const maxDescriptionLen = 255

// CheckSecurityGroupSpec validates what can be checked without the store.
func CheckSecurityGroupSpec(spec *api.CreateSecurityGroupRequest) error {
	if spec.Network == "" {
		return Field("network", "is required: the ID of one of the tenant's networks")
	}
	if err := CheckName("name", spec.Name, true); err != nil {
		return err
	}
	if err := CheckText("description", spec.Description, maxDescriptionLen); err != nil {
		return err
	}
	return CheckTags("tags", spec.Tags)
}

// CreateSecurityGroup creates a security group in one of the tenant's
// networks for actor a; idempotent by key as Volumes.Create is. As on
// AWS, a new group allows all egress (one rule to 0.0.0.0/0) and no
// ingress. Its name is unique in the network (conflict).
func (s *Networks) CreateSecurityGroup(ctx context.Context, a Actor, spec api.CreateSecurityGroupRequest, key string) (out *cloud.SecurityGroup, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckSecurityGroupSpec(&spec); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(g *cloud.SecurityGroup) error {
		var d KeyDiffs
		d.String("network", g.NetworkID, spec.Network)
		d.String("name", g.Name, spec.Name)
		d.String("description", g.Description, spec.Description)
		d.Map("tags", g.Tags, spec.Tags)
		return d.Err("security group", g.ID)
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.SecurityGroup, error) { return tx.SecurityGroupByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		if err := checkGroupPlace(ctx, tx, tenant, spec.Network, spec.Name); err != nil {
			return err
		}
		g := &cloud.SecurityGroup{ID: NewID(SecurityGroupPrefix), TenantID: tenant, NetworkID: spec.Network, Name: spec.Name,
			Description: spec.Description, Ingress: []cloud.SecurityRule{},
			Egress: []cloud.SecurityRule{{ID: NewID(RulePrefix), Protocol: cloud.ProtocolAll, CIDR: "0.0.0.0/0"}},
			Tags:   spec.Tags, IdempotencyKey: key, CreatedAt: s.now()}
		if err := createGroup(ctx, tx, g, a.ID, true); err != nil {
			return asKeyRace(err, key)
		}
		out, created = g, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.SecurityGroup, error) {
		return tx.GetSecurityGroup(ctx, id)
	}, same)
	return out, created && err == nil, err
}

// checkGroupPlace checks a new group's network (the tenant's), its name
// (unique in the network) and the network's group count.
func checkGroupPlace(ctx context.Context, tx cloud.Tx, tenant, network, name string) error {
	n, err := tx.GetNetwork(ctx, network)
	if cloud.IsNotFound(err) || err == nil && n.TenantID != tenant {
		return refNotFound("network", "network", network)
	}
	if err != nil {
		return err
	}
	gs, err := tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: tenant, NetworkID: n.ID})
	if err != nil {
		return err
	}
	if len(gs) >= MaxGroupsPerNetwork {
		return limitErr(fmt.Sprintf("network %s has %d security groups, the most it may have; delete one first", n.ID, len(gs)), MaxGroupsPerNetwork)
	}
	for _, g := range gs {
		if g.Name == name {
			return nameTaken("security group", name, g.ID)
		}
	}
	return nil
}

// GetSecurityGroup reads a security group actor a may see.
func (s *Networks) GetSecurityGroup(ctx context.Context, a Actor, id string) (*cloud.SecurityGroup, error) {
	var out *cloud.SecurityGroup
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		out, err = Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		return err
	})
	return out, err
}

// ListSecurityGroups answers the security groups actor a may see, in ID
// order, as ListSubnets answers subnets.
func (s *Networks) ListSecurityGroups(ctx context.Context, a Actor, tenant, network string) ([]*cloud.SecurityGroup, error) {
	var out []*cloud.SecurityGroup
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
		out, err = tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: t, NetworkID: network})
		if out == nil {
			out = []*cloud.SecurityGroup{}
		}
		return err
	})
	return out, err
}

// DeleteSecurityGroup deletes a security group that no instance that is
// not terminated is a member of, no other group's rule names and no spot
// request that may still launch names (a conflict naming them). A network's default group goes with its network
// only.
func (s *Networks) DeleteSecurityGroup(ctx context.Context, a Actor, id string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "security group", id, tx.GetSecurityGroup)
		if err != nil {
			return err
		}
		if g.Default {
			return &cloud.Error{Code: cloud.Conflict,
				Message: "security group " + g.ID + " is its network's default group; it goes with the network (delete network " + g.NetworkID + ")",
				Details: map[string]any{"network_id": g.NetworkID}}
		}
		if err := notInUse(ctx, tx, "security group", g.ID, cloud.InstanceFilter{TenantID: g.TenantID, SecurityGroupID: g.ID}); err != nil {
			return err
		}
		if err := notNamed(ctx, tx, g); err != nil {
			return err
		}
		if err := notNamedBySpot(ctx, tx, g.TenantID, "security group", g.ID, func(r *cloud.SpotRequest) bool { return slices.Contains(r.SecurityGroups, g.ID) }); err != nil {
			return err
		}
		if err := tx.DeleteSecurityGroup(ctx, g.ID); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: s.now(), Kind: EventSecurityGroupDeleted, TenantID: g.TenantID, Actor: a.ID,
			Reason: "security group " + g.ID + " (" + g.Name + ") deleted"})
	})
}

// notNamed answers a conflict naming the rules of other groups of g's
// network that name g as their peer, when there are any.
func notNamed(ctx context.Context, tx cloud.Tx, g *cloud.SecurityGroup) error {
	gs, err := tx.ListSecurityGroups(ctx, cloud.SecurityGroupFilter{TenantID: g.TenantID, NetworkID: g.NetworkID})
	if err != nil {
		return err
	}
	var refs []string
	for _, o := range gs {
		if o.ID == g.ID {
			continue
		}
		for _, r := range append(append([]cloud.SecurityRule{}, o.Ingress...), o.Egress...) {
			if r.GroupID == g.ID {
				refs = append(refs, o.ID+"/"+r.ID)
			}
		}
	}
	if len(refs) == 0 {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "security group " + g.ID + " is named by rules " + strings.Join(refs, ", ") + "; revoke them first",
		Details: map[string]any{"rules": refs}}
}
