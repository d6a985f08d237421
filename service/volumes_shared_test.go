package service_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// sharedHost puts a host whose agent reports the shared filesystem.
func (f *vaFixture) sharedHost(id string) {
	f.t.Helper()
	ctx := context.Background()
	spec := fleet.MockHost(id, "L4", 1)
	spec.Labels = map[string]string{service.LabelSharedVolumes: "true"}
	h := &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *spec, LastHeartbeat: f.clock.Now()}
	if err := f.st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) }); err != nil {
		f.t.Fatalf("put host: %v", err)
	}
}

// TestSharedVolumes: a shared volume is refused where no host has the
// shared filesystem; otherwise many instances attach it at once (at
// create and by attach), its delete waits for every one to let go, a
// detach lets all go, and another tenant sees none of it.
func TestSharedVolumes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		spec := api.CreateVolumeRequest{Name: "ckpt", SizeGiB: 10, Kind: cloud.VolumeShared}
		_, _, err := f.svc.Volumes.Create(ctx, f.acme, spec, "")
		if cloud.ErrorCode(err) != cloud.Unavailable {
			t.Fatalf("shared volume with no shared host: %v, want unavailable", err)
		}
		_, _, err = f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "x", SizeGiB: 1, Kind: "tape"}, "")
		if cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("kind tape: %v, want invalid", err)
		}
		blk, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "blk", SizeGiB: 1}, "")
		if err != nil || blk.Kind != cloud.VolumeBlock {
			t.Fatalf("default kind: %+v, %v", blk, err)
		}
		f.sharedHost("h-shared")
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, spec, "")
		if err != nil || v.Kind != cloud.VolumeShared {
			t.Fatalf("create shared: %+v, %v", v, err)
		}
		var ins []*cloud.Instance
		for range 2 {
			in, _, err := f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
			if err != nil {
				t.Fatalf("instance %d with the shared volume: %v", len(ins), err)
			}
			ins = append(ins, in)
		}
		third := f.instance(f.acme)
		if _, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, third.ID); err != nil {
			t.Fatalf("attach to a third instance: %v", err)
		}
		// A block volume still goes to one instance only.
		if _, err := f.svc.Volumes.Attach(ctx, f.acme, blk.ID, ins[0].ID); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Volumes.Attach(ctx, f.acme, blk.ID, ins[1].ID); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("block volume on a second instance: %v, want conflict", err)
		}
		got, err := f.svc.Volumes.Get(ctx, f.acme, v.ID)
		if err != nil || got.InstanceID != "" {
			t.Errorf("shared volume names instance %q (%v), want none", got.InstanceID, err)
		}
		for _, in := range append(ins, third) {
			in, err := f.svc.Instances.Get(ctx, f.acme, in.ID)
			if err != nil || !slices.Contains(in.Volumes, v.ID) {
				t.Errorf("instance %s volumes %v (%v), want %s", in.ID, in.Volumes, err, v.ID)
			}
		}

		// Another tenant: not found, and its instance cannot have it.
		gin := f.instance(f.globex)
		_, err = f.svc.Volumes.Get(ctx, f.globex, v.ID)
		vaHidden(t, err, "volume", v.ID)
		_, err = f.svc.Volumes.Attach(ctx, f.globex, v.ID, gin.ID)
		vaHidden(t, err, "volume", v.ID)
		_, err = f.svc.Volumes.Detach(ctx, f.globex, v.ID)
		vaHidden(t, err, "volume", v.ID)
		_, err = f.svc.Volumes.Delete(ctx, f.globex, v.ID)
		vaHidden(t, err, "volume", v.ID)
		_, _, err = f.svc.Instances.Create(ctx, f.globex, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
		if cloud.ErrorCode(err) != cloud.Invalid {
			t.Errorf("globex instance with acme's shared volume: %v, want invalid (not found)", err)
		}

		if _, err := f.svc.Volumes.Delete(ctx, f.acme, v.ID); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("delete while attached: %v, want conflict", err)
		}
		if _, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil {
			t.Fatalf("detach: %v", err)
		}
		for _, in := range append(ins, third) {
			in, _ := f.svc.Instances.Get(ctx, f.acme, in.ID)
			if slices.Contains(in.Volumes, v.ID) {
				t.Errorf("instance %s still has %s after detach", in.ID, v.ID)
			}
		}
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, v.ID); err != nil {
			t.Errorf("delete after detach: %v", err)
		}
	})
}
