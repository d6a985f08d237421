package service

import (
	"context"
	"strconv"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// MaxPlacementGroupsPerTenant bounds a tenant's live placement groups.
const MaxPlacementGroupsPerTenant = 100

// CheckPlacementGroupSpec validates what can be checked without the store.
func CheckPlacementGroupSpec(spec *api.CreatePlacementGroupRequest) error {
	if err := CheckName("name", spec.Name, true); err != nil {
		return err
	}
	switch spec.Strategy {
	case cloud.PlacementCluster:
		if spec.ByRack {
			return Field("by_rack", "applies to spread groups only; a cluster group keeps its members on one rack already")
		}
	case cloud.PlacementSpread:
	case "":
		return Field("strategy", "is required: cluster (one NVLink island or rack fabric) or spread (different hosts)")
	default:
		return Field("strategy", "%s is not cluster or spread", Quote(string(spec.Strategy)))
	}
	return CheckTags("tags", spec.Tags)
}

// Create creates a placement group for actor a; idempotent by key as
// Volumes.Create is.
func (s *PlacementGroups) Create(ctx context.Context, a Actor, spec api.CreatePlacementGroupRequest, key string) (out *cloud.PlacementGroup, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckPlacementGroupSpec(&spec); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(g *cloud.PlacementGroup) error {
		var d KeyDiffs
		d.String("name", g.Name, spec.Name)
		d.String("strategy", string(g.Strategy), string(spec.Strategy))
		Value(&d, "by_rack", g.ByRack, spec.ByRack)
		d.Map("tags", g.Tags, spec.Tags)
		return d.Err("placement group", g.ID)
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.PlacementGroup, error) {
			gs, err := tx.ListPlacementGroups(ctx, tenant)
			if err != nil {
				return nil, err
			}
			for _, g := range gs {
				if g.IdempotencyKey == k {
					return g, nil
				}
			}
			return nil, cloud.Errorf(cloud.NotFound, "no placement group with key %s", Quote(k))
		}
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		gs, err := tx.ListPlacementGroups(ctx, tenant)
		if err != nil {
			return err
		}
		live := 0
		for _, g := range gs {
			if g.DeletedAt == nil {
				live++
			}
		}
		if live >= MaxPlacementGroupsPerTenant {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: "the tenant has " + strconv.Itoa(live) + " placement groups, the most it may have; delete one first",
				Details: map[string]any{"limit": MaxPlacementGroupsPerTenant}}
		}
		g := &cloud.PlacementGroup{ID: NewID(PlacementPrefix), TenantID: tenant, Name: spec.Name,
			Strategy: spec.Strategy, ByRack: spec.ByRack, Tags: spec.Tags, CreatedAt: s.now(), IdempotencyKey: key}
		if err := tx.CreatePlacementGroup(ctx, g); err != nil {
			return asKeyRace(err, key)
		}
		out, created = g, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.PlacementGroup, error) {
		return tx.GetPlacementGroup(ctx, id)
	}, same)
	return out, created && err == nil, err
}

// Get reads a placement group actor a may see (deleted ones too).
func (s *PlacementGroups) Get(ctx context.Context, a Actor, id string) (*cloud.PlacementGroup, error) {
	var g *cloud.PlacementGroup
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		g, err = Visible(ctx, a, "placement group", id, tx.GetPlacementGroup)
		return err
	})
	return g, err
}

// List answers the live placement groups actor a may see: a member's own
// tenant's, an admin's every tenant's or tenant's.
func (s *PlacementGroups) List(ctx context.Context, a Actor, tenant string) ([]*cloud.PlacementGroup, error) {
	var out []*cloud.PlacementGroup
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = []*cloud.PlacementGroup{}
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		gs, err := tx.ListPlacementGroups(ctx, t)
		if err != nil {
			return err
		}
		for _, g := range gs {
			if g.DeletedAt == nil {
				out = append(out, g)
			}
		}
		return nil
	})
	return out, err
}

// Delete deletes a placement group that no live instance is in: Conflict
// naming one when some is (terminate it, or wait for it to end, first).
func (s *PlacementGroups) Delete(ctx context.Context, a Actor, id string) error {
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "placement group", id, tx.GetPlacementGroup)
		if err != nil {
			return err
		}
		if g.DeletedAt != nil {
			return NotFound("placement group", id)
		}
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: g.TenantID, States: notTerminated})
		if err != nil {
			return err
		}
		for _, in := range ins {
			if in.PlacementGroupID == id {
				return &cloud.Error{Code: cloud.Conflict,
					Message: "placement group " + id + " still has instance " + in.ID + " (" + string(in.State) + "); terminate its instances first",
					Details: map[string]any{"instance_id": in.ID}}
			}
		}
		return tx.DeletePlacementGroup(ctx, id, s.now())
	})
}

// notTerminated are the states of instances that may still run.
var notTerminated = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping,
	cloud.Stopped, cloud.Terminating, cloud.Failed, cloud.Lost}

// checkedPlacementGroup is livePlacementGroup, once per group in a batch
// of creates (createBatch): the group cannot change within the
// transaction.
func checkedPlacementGroup(ctx context.Context, tx cloud.Tx, tenant, id string) error {
	b := batchOf(ctx)
	if b != nil && b.groups[tenant+"/"+id] {
		return nil
	}
	if err := livePlacementGroup(ctx, tx, tenant, id); err != nil {
		return err
	}
	if b != nil {
		if b.groups == nil {
			b.groups = map[string]bool{}
		}
		b.groups[tenant+"/"+id] = true
	}
	return nil
}

// livePlacementGroup checks that id is a live placement group of tenant;
// another tenant's answers exactly as a missing one.
func livePlacementGroup(ctx context.Context, tx cloud.Tx, tenant, id string) error {
	g, err := tx.GetPlacementGroup(ctx, id)
	if err != nil || g.TenantID != tenant || g.DeletedAt != nil {
		if err == nil || cloud.ErrorCode(err) == cloud.NotFound {
			return &cloud.Error{Code: cloud.Invalid, Message: "placement_group: placement group " + id + " not found",
				Details: map[string]any{"field": "placement_group"}}
		}
		return err
	}
	return nil
}
