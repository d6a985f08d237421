package sqlstore

import (
	"context"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Placement groups: cloud.PlacementGroupTx.

// ---- placement groups ----

const placementGroupCols = "id, tenant_id, name, strategy, by_rack, tags, idempotency_key, created_at, deleted_at"

func scanPlacementGroup(sc scanner) (*cloud.PlacementGroup, error) {
	var g cloud.PlacementGroup
	err := sc.Scan(&g.ID, &g.TenantID, &g.Name, &g.Strategy, &g.ByRack, jsonCol{&g.Tags}, &g.IdempotencyKey,
		timeCol{&g.CreatedAt}, nullTimeCol{&g.DeletedAt})
	return &g, err
}

// CreatePlacementGroup is idempotent by key as CreateInstance is; the key
// is looked up before the name, so that a retry is a retry, not a name
// conflict with the group it created.
func (t *tx) CreatePlacementGroup(ctx context.Context, g *cloud.PlacementGroup) error {
	switch {
	case g.ID == "":
		return invalidf("placement group has no id")
	case g.TenantID == "":
		return invalidf("placement group %s has no tenant", g.ID)
	case g.Name == "":
		return invalidf("placement group %s has no name", g.ID)
	case g.Strategy != cloud.PlacementCluster && g.Strategy != cloud.PlacementSpread:
		return invalidf("placement group %s: strategy %q is not cluster or spread", g.ID, g.Strategy)
	}
	if g.IdempotencyKey != "" {
		found := true
		old, err := one(ctx, t, "find placement group by idempotency key", func() error { found = false; return nil },
			"SELECT "+placementGroupCols+" FROM placement_groups WHERE tenant_id = ? AND idempotency_key = ?"+
				" AND idempotency_key <> ''", []any{g.TenantID, g.IdempotencyKey}, scanPlacementGroup)
		if err != nil {
			return err
		}
		if found {
			key := g.IdempotencyKey
			*g = *old
			return idempotencyConflict("placement group", old.ID, key)
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", g.TenantID); err != nil {
		return err
	}
	var other string
	taken := true
	if err := t.get(ctx, "find placement group by name", func() error { taken = false; return nil },
		"SELECT id FROM placement_groups WHERE tenant_id = ? AND name = ? AND deleted_at IS NULL",
		[]any{g.TenantID, g.Name}, &other); err != nil {
		return err
	}
	if taken {
		return &cloud.Error{Code: cloud.Conflict,
			Message: "tenant " + g.TenantID + " already has a placement group named " + strconv.Quote(g.Name) +
				" (" + other + "); a name is free again once its group is deleted",
			Details: map[string]any{"name": g.Name, "placement_group_id": other}}
	}
	tags, err := jsonArg("placement group "+g.ID+" tags", g.Tags)
	if err != nil {
		return err
	}
	created := normTime(g.CreatedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create placement group "+g.ID,
		"INSERT INTO placement_groups ("+placementGroupCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		g.ID, g.TenantID, g.Name, string(g.Strategy), g.ByRack, tags, g.IdempotencyKey, d.timeArg(created),
		d.nullTimeArg(normTimePtr(g.DeletedAt)))
	if err != nil {
		return err
	}
	if n == 0 {
		return conflictf("placement group %s already exists", g.ID)
	}
	g.CreatedAt, g.DeletedAt = created, normTimePtr(g.DeletedAt)
	return nil
}

func (t *tx) GetPlacementGroup(ctx context.Context, id string) (*cloud.PlacementGroup, error) {
	return one(ctx, t, "get placement group "+id, func() error { return notFoundf("placement group %s not found", id) },
		"SELECT "+placementGroupCols+" FROM placement_groups WHERE id = ?", []any{id}, scanPlacementGroup)
}

func (t *tx) ListPlacementGroups(ctx context.Context, tenantID string) ([]*cloud.PlacementGroup, error) {
	q, args := "SELECT "+placementGroupCols+" FROM placement_groups", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list placement groups", q+" ORDER BY id", args, scanPlacementGroup)
}

func (t *tx) DeletePlacementGroup(ctx context.Context, id string, at time.Time) error {
	n, err := t.execN(ctx, "delete placement group "+id,
		"UPDATE placement_groups SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL", t.s.d.timeArg(normTime(at)), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("placement group %s not found", id)
	}
	return nil
}
