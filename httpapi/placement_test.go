package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

// TestPlacementGroups covers the routes, an instance joining a group, and
// another tenant, which can neither read, list, delete nor use the group.
func TestPlacementGroups(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := e.counts()
	for _, req := range []api.CreatePlacementGroupRequest{
		{Name: "train"},
		{Name: "train", Strategy: "close"},
		{Name: "", Strategy: cloud.PlacementCluster},
		{Name: "train", Strategy: cloud.PlacementCluster, ByRack: true},
	} {
		_, err := e.acme.CreatePlacementGroup(ctx, req, "")
		wantCode(t, err, cloud.Invalid)
	}
	e.unchanged(before, "bad placement groups")

	g, err := e.acme.CreatePlacementGroup(ctx, api.CreatePlacementGroupRequest{Name: "train", Strategy: cloud.PlacementCluster}, "k1")
	if err != nil || g.TenantID != e.acmeID || !strings.HasPrefix(g.ID, "pg-") {
		t.Fatalf("create = %+v, %v", g, err)
	}
	if again, err := e.acme.CreatePlacementGroup(ctx, api.CreatePlacementGroupRequest{Name: "train", Strategy: cloud.PlacementCluster}, "k1"); err != nil || again.ID != g.ID {
		t.Errorf("retry = %+v, %v", again, err)
	}
	in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: g.ID}, "")
	if err != nil || in.PlacementGroupID != g.ID {
		t.Fatalf("instance in the group = %+v, %v", in, err)
	}

	// Globex sees none of it and changes nothing.
	before = e.counts()
	_, err = e.globex.GetPlacementGroup(ctx, g.ID)
	wantCode(t, err, cloud.NotFound)
	wantCode(t, e.globex.DeletePlacementGroup(ctx, g.ID), cloud.NotFound)
	if gs, err := e.globex.PlacementGroups(ctx, ""); err != nil || len(gs) != 0 {
		t.Errorf("globex lists %v, %v", gs, err)
	}
	_, err = e.globex.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: g.ID}, "")
	wantCode(t, err, cloud.Invalid)
	e.unchanged(before, "globex's tries")

	if gs, err := e.admin.PlacementGroups(ctx, e.acmeID); err != nil || len(gs) != 1 || gs[0].ID != g.ID {
		t.Errorf("admin lists %v, %v", gs, err)
	}
	wantCode(t, e.acme.DeletePlacementGroup(ctx, g.ID), cloud.Conflict)
	if _, err := e.acme.TerminateInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.acme.DeletePlacementGroup(ctx, g.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if got, err := e.acme.GetPlacementGroup(ctx, g.ID); err != nil || got.DeletedAt == nil {
		t.Errorf("deleted group reads %+v, %v", got, err)
	}
}
