package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestSchedulerPlacementGroups: a cluster group's members share a rack
// (placed in one step, before either commits), the one that does not fit
// on that rack waits with the group as its reason, and a spread group's
// members land on different hosts.
func TestSchedulerPlacementGroups(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for r := range 3 {
			for i := range 2 {
				h := fleet.MockNVLinkHost(fmt.Sprintf("h-r%d-%d", r, i), "H100-80GB-SXM", 8)
				h.Rack = fmt.Sprintf("rack-%d", r)
				if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
					return err
				}
			}
		}
		for _, g := range []*cloud.PlacementGroup{
			{ID: "pg-c", TenantID: "t1", Name: "train", Strategy: cloud.PlacementCluster, CreatedAt: t0},
			{ID: "pg-s", TenantID: "t1", Name: "serve", Strategy: cloud.PlacementSpread, CreatedAt: t0},
		} {
			if err := tx.CreatePlacementGroup(ctx, g); err != nil {
				return err
			}
		}
		for i := range 3 {
			for _, in := range []*cloud.Instance{
				{ID: fmt.Sprintf("c%d", i), Offering: "h100.8x", PlacementGroupID: "pg-c"},
				{ID: fmt.Sprintf("s%d", i), Offering: "h100.1x", PlacementGroupID: "pg-s"},
			} {
				in.TenantID, in.State, in.CreatedAt, in.UpdatedAt = "t1", cloud.Pending, t0, t0
				if err := tx.CreateInstance(ctx, in); err != nil {
					return err
				}
			}
		}
		return nil
	})
	s := newScheduler(st)
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	rackOf := func(host string) string { return s.Fleet().Host(host).Rack }
	c0, c1, c2 := get(t, st, "c0"), get(t, st, "c1"), get(t, st, "c2")
	placed := []*cloud.Instance{}
	for _, in := range []*cloud.Instance{c0, c1, c2} {
		if in.State == cloud.Scheduled {
			placed = append(placed, in)
		}
	}
	if len(placed) != 2 || rackOf(placed[0].HostID) != rackOf(placed[1].HostID) {
		t.Fatalf("cluster members: %s@%s %s@%s %s@%s; want two on one rack", c0.State, c0.HostID, c1.State, c1.HostID, c2.State, c2.HostID)
	}
	for _, in := range []*cloud.Instance{c0, c1, c2} {
		if in.State == cloud.Pending && !strings.Contains(in.Reason, "placement group train (cluster)") {
			t.Errorf("the cluster member that does not fit its rack waits with %q", in.Reason)
		}
	}
	hosts := map[string]bool{}
	for i := range 3 {
		in := get(t, st, fmt.Sprintf("s%d", i))
		if in.State != cloud.Scheduled || hosts[in.HostID] {
			t.Errorf("spread member s%d: %s on %s; hosts so far %v", i, in.State, in.HostID, hosts)
		}
		hosts[in.HostID] = true
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
}
