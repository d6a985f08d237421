package service

import (
	"context"
	"fmt"
	"slices"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// A spot request's private network: the subnet and security groups of
// every launch, checked when the request is made with the rules of an
// instance create (the same functions), so that a request the rules
// would refuse is refused at once rather than at its first relaunch.

// checkSpotNetworkSpec validates a spot request's subnet and groups
// without the store, as an instance create's (checkNetworkSpec).
func checkSpotNetworkSpec(spec *api.CreateSpotRequestRequest) error {
	return checkNetworkSpec(&api.CreateInstanceRequest{Subnet: spec.Subnet, SecurityGroups: spec.SecurityGroups})
}

// checkSpotNetwork checks a spot request's subnet and groups in the
// store before anything is written: the tenant's subnet, else not_found
// (tenantSubnet); groups of the tenant in the subnet's network
// (instanceGroups); and the zone rule. A subnet with a zone is where
// every launch runs, so a pool restricted to another zone is
// invalid_argument naming the pool: every pool, not only the first,
// since backups and relaunches may use any of them. A pool without a
// zone launches in the subnet's. Groups without a subnet are the default
// network's, which may not exist yet: the first launch, in the same
// transaction, checks them as an instance create does.
func checkSpotNetwork(ctx context.Context, tx cloud.Tx, tenant string, spec *api.CreateSpotRequestRequest) error {
	if spec.Subnet == "" {
		return nil
	}
	sub, err := tenantSubnet(ctx, tx, tenant, spec.Subnet)
	if err != nil {
		return err
	}
	if sub.Zone != "" {
		for i, p := range spec.Pools {
			if p.Zone == "" || p.Zone == sub.Zone {
				continue
			}
			field := fmt.Sprintf("pools[%d].zone", i)
			return &cloud.Error{Code: cloud.Invalid,
				Message: fmt.Sprintf("%s: pool %s is in zone %s, and subnet %s in zone %s, where every launch of the request runs; give pools in zone %s or without a zone, or another subnet",
					field, p, p.Zone, sub.ID, sub.Zone, sub.Zone),
				Details: map[string]any{"field": field, "subnet_id": sub.ID, "subnet_zone": sub.Zone}}
		}
	}
	if len(spec.SecurityGroups) == 0 {
		return nil
	}
	_, err = instanceGroups(ctx, tx, &cloud.Instance{TenantID: tenant, SecurityGroupIDs: spec.SecurityGroups}, sub)
	return err
}

// liveSpotStates are the states of a spot request that may still launch.
var liveSpotStates = []cloud.SpotRequestState{cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled}

// notNamedBySpot answers a conflict naming a spot request of tenant that
// may still launch and whose network match says names kind id, when there
// is one: its next launch would be refused, so, as with a volume
// (Volumes.Delete), the request is cancelled first.
func notNamedBySpot(ctx context.Context, tx cloud.Tx, tenant, kind, id string, match func(*cloud.SpotRequest) bool) error {
	rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{TenantID: tenant, States: liveSpotStates})
	if err != nil {
		return err
	}
	for _, r := range rs {
		if match(r) {
			return &cloud.Error{Code: cloud.Conflict,
				Message: kind + " " + id + " is named by spot request " + r.ID + " (" + string(r.State) + "), which may launch in it; cancel the request first",
				Details: map[string]any{"spot_request_id": r.ID}}
		}
	}
	return nil
}

// spotNamesNetwork reports whether spot request r names one of subs or
// groups (a network's).
func spotNamesNetwork(subs []*cloud.Subnet, groups []*cloud.SecurityGroup) func(*cloud.SpotRequest) bool {
	return func(r *cloud.SpotRequest) bool {
		return slices.ContainsFunc(subs, func(s *cloud.Subnet) bool { return s.ID == r.Subnet }) ||
			slices.ContainsFunc(groups, func(g *cloud.SecurityGroup) bool { return slices.Contains(r.SecurityGroups, g.ID) })
	}
}
