package httpapi

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
)

func TestVolumes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	before := e.counts()
	for _, req := range []api.CreateVolumeRequest{
		{Name: "data", SizeGiB: 0},
		{Name: "data", SizeGiB: -5},
		{Name: "data", SizeGiB: 1 << 40},
		{Name: "", SizeGiB: 10},
		{Name: "data", SizeGiB: 10, Zone: "bad zone"},
	} {
		_, err := e.acme.CreateVolume(ctx, req, "")
		wantCode(t, err, cloud.Invalid)
	}
	_, err := e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 10, Tenant: e.globexID}, "")
	wantCode(t, err, cloud.NotFound)
	e.unchanged(before, "bad volumes")

	v, err := e.acme.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 100, Zone: "zone-a"}, "")
	if err != nil || v.TenantID != e.acmeID || !strings.HasPrefix(v.ID, "v-") {
		t.Fatalf("CreateVolume = %+v, %v", v, err)
	}
	gv, err := e.admin.CreateVolume(ctx, api.CreateVolumeRequest{Name: "data", SizeGiB: 1, Tenant: e.globexID}, "")
	if err != nil || gv.TenantID != e.globexID {
		t.Fatalf("admin creates for globex: %+v, %v", gv, err)
	}
	if vs, err := e.acme.Volumes(ctx, ""); err != nil || len(vs) != 1 || vs[0].ID != v.ID {
		t.Errorf("acme volumes = %v, %v", vs, err)
	}
	if vs, err := e.admin.Volumes(ctx, ""); err != nil || len(vs) != 2 {
		t.Errorf("admin volumes = %v, %v", vs, err)
	}
	_, err = e.globex.GetVolume(ctx, v.ID)
	wantCode(t, err, cloud.NotFound)

	// Create with the volume attaches it; a second instance cannot have it.
	in, err := e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.acme.GetVolume(ctx, v.ID); got.InstanceID != in.ID {
		t.Errorf("volume attached to %q, want %s", got.InstanceID, in.ID)
	}
	before = e.counts()
	_, err = e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
	wantCode(t, err, cloud.Conflict)
	_, err = e.acme.CreateInstance(ctx, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{gv.ID}}, "")
	wantCode(t, err, cloud.Invalid) // another tenant's volume is "not found" in the body
	_, err = e.globex.DetachVolume(ctx, v.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.DeleteVolume(ctx, v.ID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.DeleteVolume(ctx, v.ID) // attached to a live instance
	wantCode(t, err, cloud.Conflict)
	e.unchanged(before, "volume conflicts")
	// A running instance's volumes do not change under its workload.
	e.setState(in.ID, cloud.Running)
	before = e.counts()
	_, err = e.acme.DetachVolume(ctx, v.ID)
	wantCode(t, err, cloud.Conflict)
	e.unchanged(before, "detach from a running instance")

	// Terminate detaches; then the volume attaches to a stopped instance.
	if _, err := e.acme.TerminateInstance(ctx, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.acme.GetVolume(ctx, v.ID); got.InstanceID != "" {
		t.Errorf("volume still attached to %s after terminate", got.InstanceID)
	}
	other := e.setState(e.mustCreate(e.acme, "l4.1x").ID, cloud.Stopped)
	att, err := e.acme.AttachVolume(ctx, v.ID, other.ID)
	if err != nil || att.InstanceID != other.ID {
		t.Fatalf("attach = %+v, %v", att, err)
	}
	got, _ := e.acme.GetInstance(ctx, other.ID)
	if !slices.Contains(got.Volumes, v.ID) || got.Version != other.Version+1 {
		t.Errorf("instance after attach: volumes %v version %d", got.Volumes, got.Version)
	}
	if again, err := e.acme.AttachVolume(ctx, v.ID, other.ID); err != nil || again.InstanceID != other.ID {
		t.Errorf("attaching again: %+v, %v", again, err)
	}
	third := e.mustCreate(e.acme, "l4.1x")
	for _, tc := range []struct {
		name string
		c    *client.Client
		vol  string
		inst string
		code cloud.Code
	}{
		{"attached elsewhere", e.acme, v.ID, third.ID, cloud.Conflict},
		{"other tenant's instance", e.acme, v.ID, e.mustCreateQuiet(e.globex), cloud.NotFound},
		{"missing instance", e.acme, v.ID, "i-0000000000000000", cloud.NotFound},
		{"missing volume", e.acme, "v-0000000000000000", third.ID, cloud.NotFound},
		{"globex on acme's volume", e.globex, v.ID, third.ID, cloud.NotFound},
		{"no instance", e.acme, v.ID, "", cloud.Invalid},
	} {
		before = e.counts()
		_, err := tc.c.AttachVolume(ctx, tc.vol, tc.inst)
		if cloud.ErrorCode(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		e.unchanged(before, tc.name)
	}
	det, err := e.acme.DetachVolume(ctx, v.ID)
	if err != nil || det.InstanceID != "" {
		t.Fatalf("detach = %+v, %v", det, err)
	}
	if got, _ := e.acme.GetInstance(ctx, other.ID); slices.Contains(got.Volumes, v.ID) {
		t.Errorf("instance still lists the volume: %v", got.Volumes)
	}
	before = e.counts()
	if _, err := e.acme.DetachVolume(ctx, v.ID); err != nil {
		t.Errorf("detaching a detached volume: %v", err)
	}
	e.unchanged(before, "detach again")
	// Zones must agree.
	defer func() {
		// Deleted, it is gone from reads and lists, and a retry is a no-op.
		del, err := e.acme.DeleteVolume(ctx, v.ID)
		if err != nil || del.DeletedAt == nil {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		_, err = e.acme.GetVolume(ctx, v.ID)
		wantCode(t, err, cloud.NotFound)
		before := e.counts()
		if _, err := e.acme.DeleteVolume(ctx, v.ID); err != nil {
			t.Errorf("delete again: %v", err)
		}
		e.unchanged(before, "delete again")

		// Its events outlive it: its tenant and an admin read them, a
		// page at a time; another tenant's member gets not_found.
		var kinds []cloud.EventKind
		o := client.EventsOptions{Limit: 2}
		for {
			page, err := e.acme.VolumeEvents(ctx, v.ID, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range page.Events {
				kinds = append(kinds, ev.Kind)
			}
			if page.Next == "" {
				break
			}
			o.After = page.Next
		}
		// Attached at the instance's creation, detached at its
		// termination, attached to another and detached, deleted.
		want := []cloud.EventKind{service.EventVolumeCreated, service.EventVolumeAttached, service.EventVolumeDetached,
			service.EventVolumeAttached, service.EventVolumeDetached, service.EventVolumeDeleted}
		if !slices.Equal(kinds, want) {
			t.Errorf("volume events %v, want %v", kinds, want)
		}
		if all, err := e.admin.VolumeEvents(ctx, v.ID, client.EventsOptions{}); err != nil || len(all.Events) != len(want) {
			t.Errorf("admin reads %v, %v", all, err)
		}
		_, err = e.globex.VolumeEvents(ctx, v.ID, client.EventsOptions{})
		wantCode(t, err, cloud.NotFound)
		_, err = e.acme.VolumeEvents(ctx, gv.ID, client.EventsOptions{})
		wantCode(t, err, cloud.NotFound)
	}()
	zoned := e.setState(mustCreateReq(t, e.acme, api.CreateInstanceRequest{Offering: "l4.1x", Zones: []string{"zone-b"}}).ID, cloud.Stopped)
	_, err = e.acme.AttachVolume(ctx, v.ID, zoned.ID)
	wantCode(t, err, cloud.Invalid)
}

func (e *env) mustCreateQuiet(c *client.Client) string { return e.mustCreate(c, "l4.1x").ID }

func mustCreateReq(t *testing.T, c *client.Client, req api.CreateInstanceRequest) *cloud.Instance {
	t.Helper()
	in, err := c.CreateInstance(context.Background(), req, "")
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestHosts(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	h := e.putHost("host-1", "H100", 8)
	hs, err := e.admin.Hosts(ctx)
	if err != nil || len(hs) != 1 || len(hs[0].Spec.GPUs) != 8 {
		t.Fatalf("hosts = %+v, %v", hs, err)
	}
	before := e.counts()
	_, err = e.admin.CordonHost(ctx, h.ID, h.Version+1)
	wantCode(t, err, cloud.Conflict)
	_, err = e.admin.CordonHost(ctx, "host-nope", 0)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.CordonHost(ctx, h.ID, 0)
	wantCode(t, err, cloud.PermissionDenied)
	e.unchanged(before, "bad cordons")

	c, err := e.admin.CordonHost(ctx, h.ID, h.Version)
	if err != nil || c.State != fleet.Cordoned || c.Spec.State != fleet.Cordoned || c.Version != h.Version+1 {
		t.Fatalf("cordon = %+v, %v", c, err)
	}
	before = e.counts()
	if again, err := e.admin.CordonHost(ctx, h.ID, 0); err != nil || again.Version != c.Version {
		t.Errorf("cordon again = %+v, %v; want unchanged", again, err)
	}
	e.unchanged(before, "cordon again")
	u, err := e.admin.UncordonHost(ctx, h.ID, 0)
	if err != nil || u.State != fleet.Schedulable {
		t.Fatalf("uncordon = %+v, %v", u, err)
	}
	evs, err := e.admin.Events(ctx, client.EventsOptions{Host: h.ID})
	if err != nil || len(evs.Events) != 2 || evs.Events[0].Kind != EventHostCordoned || evs.Events[1].Kind != EventHostUncordoned {
		t.Errorf("host events = %+v, %v", evs, err)
	}
	// An unhealthy host is not made schedulable by an operator.
	sick := e.putHost("host-2", "L4", 1)
	err = e.store.Tx(ctx, func(tx cloud.Tx) error {
		sick.State = fleet.Unhealthy
		return tx.PutHost(ctx, sick)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.admin.UncordonHost(ctx, sick.ID, 0)
	wantCode(t, err, cloud.Conflict)
}
