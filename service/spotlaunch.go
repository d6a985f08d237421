package service

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// LaunchSpot creates the next instance of spot request r in pool through
// CreateInstance (so the quota and the volume rule are the API's): pending,
// market spot, with the request's image, command, environment, tags and volumes
// (the workload finds the request's ID in its metadata document), on the
// request's subnet with its security groups (the tenant's defaults when it
// names none; a private address from the subnet); and it
// records the launch on r (State open, InstanceID, Launches) and writes r.
// A launch that CreateInstance refuses changes nothing, and so does one
// of a request that is closed or cancelled (a conflict).
func LaunchSpot(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, r *cloud.SpotRequest, pool cloud.Pool, actor string, now time.Time) (*cloud.Instance, error) {
	if !CanMoveSpotRequest(r.State, cloud.SpotOpen) {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "spot request " + Quote(r.ID) + " is " + string(r.State) + "; it launches no more"}
	}
	in := &cloud.Instance{TenantID: r.TenantID, Name: r.Name, Offering: pool.Offering,
		Market: cloud.MarketSpot, SpotRequestID: r.ID, Image: r.Image, Command: slices.Clone(r.Command), Env: maps.Clone(r.Env),
		Volumes: slices.Clone(r.Volumes), Tags: maps.Clone(r.Tags), CreatedAt: now,
		SubnetID: r.Subnet, SecurityGroupIDs: slices.Clone(r.SecurityGroups)}
	if pool.Zone != "" {
		in.Zones = []string{pool.Zone}
	}
	if err := CreateInstance(ctx, tx, cat, in, actor, "spot request "+r.ID+" launch in pool "+pool.String()); err != nil {
		return nil, err
	}
	r.InstanceID = in.ID
	r.Launches++
	if err := setSpotRequest(ctx, tx, r, cloud.SpotOpen, "", now); err != nil {
		return nil, err
	}
	return in, nil
}
