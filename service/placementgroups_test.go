package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func TestPlacementGroupCreate(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		spec := api.CreatePlacementGroupRequest{Name: "train", Strategy: cloud.PlacementCluster, Tags: map[string]string{"team": "nlp"}}
		g, created, err := f.svc.Placement.Create(ctx, f.acme, spec, "pg-1")
		if err != nil || !created || !strings.HasPrefix(g.ID, service.PlacementPrefix) || g.TenantID != f.acme.TenantID ||
			g.Strategy != cloud.PlacementCluster || g.Tags["team"] != "nlp" {
			t.Fatalf("create = %+v, %v, %v", g, created, err)
		}
		// A retry answers the first group; the same key with another
		// request is a conflict naming the field; the same name is taken.
		again, created, err := f.svc.Placement.Create(ctx, f.acme, spec, "pg-1")
		if err != nil || created || again.ID != g.ID {
			t.Errorf("retry = %+v, %v, %v; want %s again", again, created, err, g.ID)
		}
		other := spec
		other.Strategy = cloud.PlacementSpread
		_, _, err = f.svc.Placement.Create(ctx, f.acme, other, "pg-1")
		if ce := vaCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, "strategy") {
			t.Errorf("reused key: %v, want a conflict naming strategy", ce)
		}
		_, _, err = f.svc.Placement.Create(ctx, f.acme, spec, "pg-2")
		vaCode(t, err, cloud.Conflict)

		// Bad input is a typed error naming the field, and writes nothing.
		for _, tc := range []struct {
			name  string
			spec  api.CreatePlacementGroupRequest
			field string
		}{
			{"no name", api.CreatePlacementGroupRequest{Strategy: cloud.PlacementCluster}, "name"},
			{"no strategy", api.CreatePlacementGroupRequest{Name: "x"}, "strategy"},
			{"unknown strategy", api.CreatePlacementGroupRequest{Name: "x", Strategy: "near"}, "strategy"},
			{"by rack on a cluster", api.CreatePlacementGroupRequest{Name: "x", Strategy: cloud.PlacementCluster, ByRack: true}, "by_rack"},
			{"reserved tag", api.CreatePlacementGroupRequest{Name: "x", Strategy: cloud.PlacementSpread, Tags: map[string]string{"gpucloud:stack": "s"}}, "tags"},
		} {
			before := f.counts()
			_, _, err := f.svc.Placement.Create(ctx, f.acme, tc.spec, "")
			if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != tc.field {
				t.Errorf("%s: %v, want field %s", tc.name, ce, tc.field)
			}
			f.unchanged(before, tc.name)
		}

		// An instance joins the group; the group cannot be deleted while
		// the instance lives, and can once it is terminated.
		in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: g.ID}, "")
		if err != nil || in.PlacementGroupID != g.ID {
			t.Fatalf("instance in the group = %+v, %v", in, err)
		}
		err = f.svc.Placement.Delete(ctx, f.acme, g.ID)
		if ce := vaCode(t, err, cloud.Conflict); !strings.Contains(ce.Message, in.ID) {
			t.Errorf("delete with a live member: %v, want a conflict naming %s", ce, in.ID)
		}
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.svc.Placement.Delete(ctx, f.acme, g.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
		gs, err := f.svc.Placement.List(ctx, f.acme, "")
		if err != nil || len(gs) != 0 {
			t.Errorf("list after delete = %v, %v", gs, err)
		}
		vaHidden(t, f.svc.Placement.Delete(ctx, f.acme, g.ID), "placement group", g.ID)
		// The name is free again; a deleted group takes no instance.
		if _, _, err := f.svc.Placement.Create(ctx, f.acme, spec, ""); err != nil {
			t.Errorf("the name of a deleted group: %v", err)
		}
		_, _, err = f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: g.ID}, "")
		if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "placement_group" {
			t.Errorf("instance in a deleted group: %v", ce)
		}
	})
}

// TestPlacementGroupTenantIsolation: another tenant's member can neither
// read, list, delete nor use a group; each answers like a missing one.
func TestPlacementGroupTenantIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		g, _, err := f.svc.Placement.Create(ctx, f.acme, api.CreatePlacementGroupRequest{Name: "train", Strategy: cloud.PlacementCluster}, "")
		if err != nil {
			t.Fatal(err)
		}
		before := f.counts()
		_, err = f.svc.Placement.Get(ctx, f.globex, g.ID)
		vaHidden(t, err, "placement group", g.ID)
		vaHidden(t, f.svc.Placement.Delete(ctx, f.globex, g.ID), "placement group", g.ID)
		if gs, err := f.svc.Placement.List(ctx, f.globex, ""); err != nil || len(gs) != 0 {
			t.Errorf("globex lists %v, %v", gs, err)
		}
		_, err = f.svc.Placement.List(ctx, f.globex, f.acme.TenantID)
		vaHidden(t, err, "tenant", f.acme.TenantID)
		_, _, err = f.svc.Instances.Create(ctx, f.globex, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: g.ID}, "")
		const none = "pg-0000000000000000"
		_, _, missing := f.svc.Instances.Create(ctx, f.globex, api.CreateInstanceRequest{Offering: "l4.1x", PlacementGroup: none}, "")
		ce, ceMissing := vaCode(t, err, cloud.Invalid), vaCode(t, missing, cloud.Invalid)
		if strings.ReplaceAll(ce.Message, g.ID, none) != ceMissing.Message {
			t.Errorf("globex's instance in acme's group: %q; a missing group: %q", ce.Message, ceMissing.Message)
		}
		f.unchanged(before, "another tenant's tries")
		// The admin sees it.
		if got, err := f.svc.Placement.Get(ctx, f.admin, g.ID); err != nil || got.ID != g.ID {
			t.Errorf("admin get = %v, %v", got, err)
		}
	})
}
