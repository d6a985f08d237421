package client

import (
	"context"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/rest"
)

// CreatePlacementGroup creates a placement group; idemKey as for
// CreateInstance.
func (c *Client) CreatePlacementGroup(ctx context.Context, req api.CreatePlacementGroupRequest, idemKey string) (*cloud.PlacementGroup, error) {
	var out cloud.PlacementGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "POST", Path: "/v1/placement-groups", Body: req, Header: idemHeader(idemKey), Out: &out})
	return rest.NilOnErr(&out, err)
}

// PlacementGroups lists live placement groups: the caller's tenant's, or
// for an admin one tenant's (tenant not empty) or every tenant's.
func (c *Client) PlacementGroups(ctx context.Context, tenant string) ([]*cloud.PlacementGroup, error) {
	var out api.PlacementGroupList
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: "/v1/placement-groups" + rest.Query("tenant", tenant), Out: &out})
	return out.PlacementGroups, err
}

// GetPlacementGroup reads a placement group (a deleted one too).
func (c *Client) GetPlacementGroup(ctx context.Context, id string) (*cloud.PlacementGroup, error) {
	var out cloud.PlacementGroup
	_, _, err := c.r.Do(ctx, rest.Call{Method: "GET", Path: rest.PathOf("placement-groups", id), Out: &out})
	return rest.NilOnErr(&out, err)
}

// DeletePlacementGroup deletes a placement group no live instance is in.
func (c *Client) DeletePlacementGroup(ctx context.Context, id string) error {
	_, _, err := c.r.Do(ctx, rest.Call{Method: "DELETE", Path: rest.PathOf("placement-groups", id)})
	return err
}
