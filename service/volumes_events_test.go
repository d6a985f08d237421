package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestVolumeEvents: a volume's events are its life (created, attached,
// detached, deleted), its detached copies and the direct copies reported
// of it, and no other volume's; paged; readable after its deletion; and
// another tenant's member gets not_found, as for a missing volume, while
// an admin reads them.
func TestVolumeEvents(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 1}, "")
		if err != nil {
			t.Fatal(err)
		}
		other, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "other", SizeGiB: 1}, "")
		if err != nil {
			t.Fatal(err)
		}
		in := f.instance(f.acme)
		for _, id := range []string{v.ID, other.ID} {
			if _, err := f.svc.Volumes.Attach(ctx, f.acme, id, in.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := f.svc.Volumes.Detach(ctx, f.acme, id); err != nil {
				t.Fatal(err)
			}
		}
		for _, id := range []string{v.ID, other.ID} {
			vol, err := f.svc.Volumes.Get(ctx, f.acme, id)
			if err != nil {
				t.Fatal(err)
			}
			route := &service.VolumeRoute{Volume: vol, HostID: "h-1"}
			ses := service.NewID(service.SessionPrefix)
			if err := f.svc.Files.AuditVolumeSession(ctx, f.acme, route, ses, false, "volumes cp", 0); err != nil {
				t.Fatal(err)
			}
			if err := f.svc.Files.AuditVolumeSession(ctx, f.acme, route, ses, true, "closed", time.Second); err != nil {
				t.Fatal(err)
			}
		}
		// What an agent's report of a direct copy records
		// (Sessions.DirectReports; its checks are TestDirectReports').
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.AppendEvent(ctx, &cloud.Event{Time: time.Now(), Kind: cloud.EventSessionDirect, TenantID: v.TenantID,
				HostID: "h-1", Actor: f.acme.ID, Reason: "files: direct", Details: []byte(`{"volume_id":"` + v.ID + `","bytes_in":5}`)})
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Volumes.Delete(ctx, f.acme, v.ID); err != nil {
			t.Fatal(err)
		}
		want := []cloud.EventKind{service.EventVolumeCreated, service.EventVolumeAttached, service.EventVolumeDetached,
			service.EventVolumeFilesStarted, service.EventVolumeFilesEnded, cloud.EventSessionDirect, service.EventVolumeDeleted}
		kinds := func(evs []*cloud.Event) []cloud.EventKind {
			var out []cloud.EventKind
			for _, e := range evs {
				out = append(out, e.Kind)
			}
			return out
		}
		for _, a := range []service.Actor{f.acme, f.admin} {
			evs, next, err := f.svc.Volumes.Events(ctx, a, v.ID, 0, 0)
			if err != nil || next != 0 || !slices.Equal(kinds(evs), want) {
				t.Fatalf("%s reads %v, next %d, %v; want %v", a.ID, kinds(evs), next, err, want)
			}
			for _, e := range evs {
				if e.TenantID != v.TenantID || details(t, e)["volume_id"] != v.ID {
					t.Errorf("event %+v is not of %s", e, v.ID)
				}
			}
		}
		// Paged: three and three and one.
		var paged []*cloud.Event
		after := int64(0)
		for range 4 {
			page, next, err := f.svc.Volumes.Events(ctx, f.acme, v.ID, after, 3)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, page...)
			if next == 0 {
				break
			}
			after = next
		}
		if !slices.Equal(kinds(paged), want) {
			t.Errorf("paged by 3: %v", kinds(paged))
		}
		// The other volume's are its own.
		if evs, _, err := f.svc.Volumes.Events(ctx, f.acme, other.ID, 0, 0); err != nil || len(evs) != 5 {
			t.Errorf("the other volume's events: %v, %v", kinds(evs), err)
		}

		// Globex's member: not_found, as for a missing volume.
		const missing = "v-0000000000000000"
		for _, id := range []string{v.ID, other.ID, missing} {
			evs, _, err := f.svc.Volumes.Events(ctx, f.globex, id, 0, 0)
			vaHidden(t, err, "volume", id)
			if len(evs) != 0 {
				t.Errorf("globex reads %d events of %s", len(evs), id)
			}
		}
	})
}
