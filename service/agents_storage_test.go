package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// putVolume stores a volume of a's tenant of size GiB.
func (f *ahFixture) putVolume(a service.Actor, size int64) *cloud.Volume {
	f.t.Helper()
	ctx := context.Background()
	vol := &cloud.Volume{ID: service.NewID(service.VolumePrefix), TenantID: a.TenantID, Name: "data", SizeGiB: size, CreatedAt: f.clock.Now()}
	if err := f.st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateVolume(ctx, vol) }); err != nil {
		f.t.Fatal(err)
	}
	return vol
}

// TestAgentsAssignmentVolumeSizes: an assignment carries the size of
// each of its volumes, which a host that keeps each volume in a
// filesystem of its size needs.
func TestAgentsAssignmentVolumeSizes(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		f.putHost("h-a", 2)
		small, big := f.putVolume(f.acme, 1), f.putVolume(f.acme, 250)
		shared := &cloud.Volume{ID: service.NewID(service.VolumePrefix), TenantID: f.acme.TenantID, Name: "ckpt", SizeGiB: 3,
			Kind: cloud.VolumeShared, CreatedAt: f.clock.Now()}
		ctx := context.Background()
		h := f.host("h-a")
		h.Spec.Labels = map[string]string{service.LabelSharedVolumes: "true"}
		if err := f.st.Tx(ctx, func(tx cloud.Tx) error {
			if err := tx.PutHost(ctx, h); err != nil {
				return err
			}
			return tx.CreateVolume(ctx, shared)
		}); err != nil {
			t.Fatal(err)
		}
		with := f.placed(f.acme, "h-a", cloud.Running, small.ID, shared.ID, big.ID)
		without := f.placed(f.globex, "h-a", cloud.Running)
		as, err := f.svc.Agents.Assignments(context.Background(), service.AgentActor("h-a"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]int64{with.ID: {small.ID: 1, shared.ID: 3, big.ID: 250}, without.ID: nil}
		if len(as) != len(want) {
			t.Fatalf("%d assignments, want %d", len(as), len(want))
		}
		for _, a := range as {
			if wantShared := map[string]string{with.ID: shared.ID}[a.InstanceID]; strings.Join(a.SharedVolumes, ",") != wantShared {
				t.Errorf("%s: shared volumes %v, want %q", a.InstanceID, a.SharedVolumes, wantShared)
			}
			w, ok := want[a.InstanceID]
			if !ok || len(a.VolumeSizes) != len(w) {
				t.Errorf("%s: volume sizes %v, want %v", a.InstanceID, a.VolumeSizes, w)
				continue
			}
			for id, size := range w {
				if a.VolumeSizes[id] != size {
					t.Errorf("%s: volume %s of %d GiB, want %d", a.InstanceID, id, a.VolumeSizes[id], size)
				}
			}
		}
	})
}

// TestAgentsAssignmentInstanceStore: an assignment carries its offering's
// instance store, as the server's catalog has it (an operator's file may
// change a built-in offering's), and none for an offering without one.
func TestAgentsAssignmentInstanceStore(t *testing.T) {
	cat, err := catalog.Load(strings.NewReader(`offerings:
  - {name: l4.1x, mode: gpu, model: L4, gpus: 1, vcpus: 8, memory_mib: 32768, instance_store_gib: 50}
  - {name: l4.bare, mode: gpu, model: L4, gpus: 1, vcpus: 8, memory_mib: 32768}
`), "catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		f.putHost("h-a", 4)
		byDefault := f.placedOffering(f.acme, "h-a", "l4.2x", cloud.Running)
		f.svc = service.New(st, cat, service.Options{Now: f.clock.Now})
		overridden := f.placed(f.acme, "h-a", cloud.Running)
		bare := f.placedOffering(f.globex, "h-a", "l4.bare", cloud.Stopping)
		as, err := f.svc.Agents.Assignments(context.Background(), service.AgentActor("h-a"))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{byDefault.ID: 400, overridden.ID: 50, bare.ID: 0}
		if len(as) != len(want) {
			t.Fatalf("%d assignments, want %d", len(as), len(want))
		}
		for _, a := range as {
			if w, ok := want[a.InstanceID]; !ok || a.InstanceStoreGiB != w {
				t.Errorf("%s (%s): instance store %d GiB, want %d", a.InstanceID, a.Offering, a.InstanceStoreGiB, w)
			}
		}
		// Only the host's agent reads them.
		if _, err := f.svc.Agents.Assignments(context.Background(), f.acme); err == nil {
			t.Error("a tenant read a host's assignments")
		}
	})
}

// TestAgentsGone: of the IDs an agent names, the deleted volumes, the
// terminated and failed instances and the unknown IDs are gone; live
// volumes and instances in any other state, another tenant's included,
// are not. Only agents may ask, and not for more than MaxGoneIDs at once.
func TestAgentsGone(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 4)
		agent := service.AgentActor("h-a")
		kept, deleted, other := f.putVolume(f.acme, 1), f.putVolume(f.acme, 1), f.putVolume(f.globex, 1)
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, deleted.ID); err != nil {
			t.Fatal(err)
		}
		running := f.placed(f.acme, "h-a", cloud.Running)
		stopped := f.placed(f.globex, "h-a", cloud.Stopping)
		if err := f.svc.Agents.Report(ctx, agent, stopped.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
			t.Fatal(err)
		}
		terminated := f.placed(f.acme, "h-a", cloud.Terminating)
		if err := f.svc.Agents.Report(ctx, agent, terminated.ID, agentapi.StatusReport{Phase: agentapi.PhaseStopped}); err != nil {
			t.Fatal(err)
		}
		failed := f.placed(f.globex, "h-a", cloud.Running)
		if err := f.svc.Agents.Report(ctx, agent, failed.ID, agentapi.StatusReport{Phase: agentapi.PhaseFailed, Message: "x"}); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]cloud.State{stopped.ID: cloud.Stopped, terminated.ID: cloud.Terminated, failed.ID: cloud.Failed} {
			if got := f.instance(id).State; got != want {
				t.Fatalf("instance %s is %s, want %s", id, got, want)
			}
		}

		got, err := f.svc.Agents.Gone(ctx, agent, agentapi.GoneRequest{
			Volumes:   []string{kept.ID, deleted.ID, other.ID, "v-unknown", deleted.ID, ""},
			Instances: []string{running.ID, stopped.ID, terminated.ID, failed.ID, "i-unknown"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{deleted.ID, "v-unknown"}; !slices.Equal(got.Volumes, want) {
			t.Errorf("gone volumes %v, want %v", got.Volumes, want)
		}
		if want := []string{terminated.ID, failed.ID, "i-unknown"}; !slices.Equal(got.Instances, want) {
			t.Errorf("gone instances %v, want %v", got.Instances, want)
		}

		tooMany := make([]string, agentapi.MaxGoneIDs+1)
		for i := range tooMany {
			tooMany[i] = "v-x"
		}
		for _, c := range []struct {
			name string
			a    service.Actor
			req  agentapi.GoneRequest
			code cloud.Code
		}{
			{"a tenant's member", f.acme, agentapi.GoneRequest{Volumes: []string{deleted.ID}}, cloud.PermissionDenied},
			{"an admin", f.admin, agentapi.GoneRequest{}, cloud.PermissionDenied},
			{"too many volumes", agent, agentapi.GoneRequest{Volumes: tooMany}, cloud.Invalid},
			{"too many instances", agent, agentapi.GoneRequest{Instances: tooMany}, cloud.Invalid},
		} {
			_, err := f.svc.Agents.Gone(ctx, c.a, c.req)
			if cloud.ErrorCode(err) != c.code {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
		}
	})
}
