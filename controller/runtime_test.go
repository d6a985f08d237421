package controller

import (
	"context"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestImagesNeverLandOnProcessHosts: on a fleet of two identical hosts,
// one running plain processes (runtime=process) and one containers, an
// instance naming an image is placed on the containers host every time,
// one without an image anywhere; the availability counts the hosts that
// could run an image.
func TestImagesNeverLandOnProcessHosts(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for id, kind := range map[string]string{"procs": "process", "ctrs": "containerd"} {
			h := fleet.MockHost(id, "L40S", 2)
			h.Labels = map[string]string{"runtime": kind}
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		for i, img := range []string{"python:3.12", "", "busybox:1"} {
			id := []string{"img-a", "plain", "img-b"}[i]
			if err := tx.CreateInstance(ctx, &cloud.Instance{ID: id, TenantID: "t1", Offering: "l40s.1x", Image: img,
				State: cloud.Pending, CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	s := newScheduler(st)
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"img-a", "img-b"} {
		in := get(t, st, id)
		if in.Placement == nil || in.Placement.HostID != "ctrs" {
			t.Errorf("%s (names an image) placed %+v, want on ctrs", id, in.Placement)
		}
	}
	if in := get(t, st, "plain"); in.Placement == nil {
		t.Errorf("plain not placed")
	}
	if err := s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	a := s.Availability()["l40s.1x"]
	if a.Hosts != 2 || a.Containers != 1 {
		t.Errorf("availability %+v, want 2 hosts of which 1 runs containers", a)
	}
}

// TestSharedVolumesLandOnSharedHosts: of two identical hosts, only one
// mounts the shared filesystem (label shared-volumes); instances with a
// shared volume are placed on it, one with a block volume anywhere.
func TestSharedVolumesLandOnSharedHosts(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for id, labels := range map[string]map[string]string{"plain": nil, "nfs": {"shared-volumes": "true"}} {
			h := fleet.MockHost(id, "L40S", 2)
			h.Labels = labels
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		for _, v := range []*cloud.Volume{{ID: "v-s", TenantID: "t1", Name: "s", SizeGiB: 1, Kind: cloud.VolumeShared, CreatedAt: t0},
			{ID: "v-b", TenantID: "t1", Name: "b", SizeGiB: 1, CreatedAt: t0}} {
			if err := tx.CreateVolume(ctx, v); err != nil {
				return err
			}
		}
		for id, vols := range map[string][]string{"s1": {"v-s"}, "s2": {"v-b", "v-s"}} {
			if err := tx.CreateInstance(ctx, &cloud.Instance{ID: id, TenantID: "t1", Offering: "l40s.1x", Volumes: vols,
				State: cloud.Pending, CreatedAt: t0, UpdatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	if _, err := newScheduler(st).Step(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"s1", "s2"} {
		if in := get(t, st, id); in.Placement == nil || in.Placement.HostID != "nfs" {
			t.Errorf("%s (shared volume) placed %+v, want on nfs", id, in.Placement)
		}
	}
}
