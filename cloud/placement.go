package cloud

import (
	"context"
	"time"
)

// PlacementStrategy is how a placement group places its members.
type PlacementStrategy string

const (
	// PlacementCluster keeps members close: on one host's NVLink island
	// when they fit, else on one rack's fabric (InfiniBand or RoCE), as
	// multi-node training needs.
	PlacementCluster PlacementStrategy = "cluster"
	// PlacementSpread keeps members apart: on different hosts, or on
	// different racks with ByRack, so that one failure takes one member.
	PlacementSpread PlacementStrategy = "spread"
)

// PlacementGroup is a set of instances the scheduler places relative to
// each other (Instance.PlacementGroupID). A deleted group keeps its row,
// with DeletedAt set, and frees its name.
type PlacementGroup struct {
	ID       string            `json:"id"`
	TenantID string            `json:"tenant_id"`
	Name     string            `json:"name"`
	Strategy PlacementStrategy `json:"strategy"`
	// ByRack spreads across racks instead of hosts (spread only).
	ByRack    bool              `json:"by_rack,omitempty"`
	Tags      map[string]string `json:"tags,omitempty"`
	CreatedAt time.Time         `json:"created_at"`
	DeletedAt *time.Time        `json:"deleted_at,omitempty"`
	// IdempotencyKey makes a retried create return the first group
	// (unique per tenant; empty: not idempotent).
	IdempotencyKey string `json:"-"`
}

// Owner implements Owned.
func (g *PlacementGroup) Owner() string { return g.TenantID }

// PlacementGroupTx is the store's part for placement groups.
type PlacementGroupTx interface {
	// CreatePlacementGroup inserts a group; Conflict if the tenant has a
	// live group of that name, or the idempotency key was used (the
	// first group is then copied into g, as CreateInstance does).
	CreatePlacementGroup(ctx context.Context, g *PlacementGroup) error
	GetPlacementGroup(ctx context.Context, id string) (*PlacementGroup, error)
	// ListPlacementGroups lists a tenant's groups (deleted ones too) in
	// ID order, every tenant's when tenantID is empty.
	ListPlacementGroups(ctx context.Context, tenantID string) ([]*PlacementGroup, error)
	// DeletePlacementGroup sets DeletedAt; NotFound if there is no live
	// group of that ID.
	DeletePlacementGroup(ctx context.Context, id string, at time.Time) error
}
