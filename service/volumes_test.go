package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// vaFixture is the scaffolding of the volume and address tests: services
// over a fresh store with two tenants (acme and globex), a member of each,
// and an admin of a third tenant.
type vaFixture struct {
	t                   *testing.T
	st                  cloud.Store
	clock               *testkit.Clock
	svc                 *service.Services
	acme, globex, admin service.Actor
}

func newVAFixture(t *testing.T, st cloud.Store, opts service.Options) *vaFixture {
	t.Helper()
	f := &vaFixture{t: t, st: st, clock: testkit.NewClock(testkit.Epoch)}
	opts.Now = f.clock.Now
	f.svc = service.New(st, nil, opts)
	ctx := context.Background()
	tenant := func(name string) string {
		// Names are unique in a store, which a test may share between
		// fixtures.
		id := service.NewID(service.TenantPrefix)
		tn := &cloud.Tenant{ID: id, Name: name + "-" + id[len(service.TenantPrefix):], CreatedAt: f.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateTenant(ctx, tn) }); err != nil {
			t.Fatalf("create tenant %s: %v", name, err)
		}
		return tn.ID
	}
	f.acme = service.Actor{ID: "u-acme", TenantID: tenant("acme"), Role: cloud.RoleMember}
	f.globex = service.Actor{ID: "u-globex", TenantID: tenant("globex"), Role: cloud.RoleMember}
	f.admin = service.Actor{ID: "u-admin", TenantID: tenant("ops"), Role: cloud.RoleAdmin}
	return f
}

// unchanged fails the test when the counts moved since before.
func (f *vaFixture) unchanged(before testkit.Rows, what string) {
	f.t.Helper()
	if after := f.counts(); after != before {
		f.t.Errorf("%s wrote: %+v -> %+v", what, before, after)
	}
}

// instance creates an instance of a for the tests to attach and
// associate things to.
func (f *vaFixture) instance(a service.Actor, zones ...string) *cloud.Instance {
	f.t.Helper()
	in, _, err := f.svc.Instances.Create(context.Background(), a, api.CreateInstanceRequest{Offering: "l4.1x", Zones: zones}, "")
	if err != nil {
		f.t.Fatalf("create instance: %v", err)
	}
	return in
}

// place moves a pending instance to scheduled on a new host of zone, as
// the scheduler would: it holds an allocation and has the zone.
func (f *vaFixture) place(in *cloud.Instance, zone string) *cloud.Instance {
	f.t.Helper()
	ctx := context.Background()
	spec := fleet.MockHost("h-"+in.ID, "L4", 1)
	spec.Zone = zone
	h := &cloud.Host{ID: spec.ID, State: fleet.Schedulable, Spec: *spec, LastHeartbeat: f.clock.Now()}
	if err := f.st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutHost(ctx, h) }); err != nil {
		f.t.Fatalf("put host: %v", err)
	}
	return testkit.Move(f.t, f.st, in.ID, cloud.Scheduled, &fleet.Placement{ID: in.ID, HostID: h.ID}, f.clock.Now())
}

// instanceNow reads an instance as stored.
func (f *vaFixture) instanceNow(id string) *cloud.Instance {
	f.t.Helper()
	in, err := f.svc.Instances.Get(context.Background(), f.admin, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

// vaCode checks err's code and returns the *cloud.Error (nil when err
// is not one).
func vaCode(t *testing.T, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	if got := cloud.ErrorCode(err); got != code {
		t.Fatalf("error %v, want %s", err, code)
	}
	ce, _ := err.(*cloud.Error)
	if ce == nil {
		t.Fatalf("error %T %v is not a *cloud.Error", err, err)
	}
	return ce
}

// vaKeyConflict checks the conflict of an idempotency key reused for
// another create: it names the first resource and exactly fields.
func vaKeyConflict(t *testing.T, err error, existing string, fields ...string) {
	t.Helper()
	ce := vaCode(t, err, cloud.Conflict)
	if ce.Details["existing_id"] != existing {
		t.Errorf("details %v, want existing_id %s", ce.Details, existing)
	}
	if got, _ := ce.Details["fields"].([]string); !slices.Equal(got, fields) {
		t.Errorf("details fields %v, want %v", ce.Details["fields"], fields)
	}
}

// vaHidden checks that err answers exactly as a missing resource of
// kind would: not_found naming the kind and the ID asked for.
func vaHidden(t *testing.T, err error, kind, id string) {
	t.Helper()
	ce := vaCode(t, err, cloud.NotFound)
	missing := service.NotFound(kind, id).(*cloud.Error)
	if ce.Message != missing.Message || ce.Details["kind"] != kind || ce.Details["id"] != id {
		t.Errorf("error %v, want it to read like a missing %s: %v", ce, kind, missing)
	}
}

func TestVolumeCreateIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		first := api.CreateVolumeRequest{Name: "data", SizeGiB: 100, Zone: "zone-a"}
		before := f.counts()
		v, created, err := f.svc.Volumes.Create(ctx, f.acme, first, "vol-1")
		if err != nil || !created || v.TenantID != f.acme.TenantID || v.Name != "data" {
			t.Fatalf("create = %+v, %v, %v", v, created, err)
		}
		after := f.counts()
		if after.Volumes != before.Volumes+1 || after.Events != before.Events+1 || after.Usage != before.Usage+1 {
			t.Errorf("create: %+v -> %+v, want one volume, one event, one usage entry", before, after)
		}

		// The identical request, and the same one naming the tenant, is a
		// retry: the first volume, nothing written.
		for _, tc := range []struct {
			name  string
			actor service.Actor
			spec  api.CreateVolumeRequest
		}{
			{"identical", f.acme, first},
			{"tenant sent by the member", f.acme, api.CreateVolumeRequest{Tenant: f.acme.TenantID, Name: "data", SizeGiB: 100, Zone: "zone-a"}},
			{"tenant sent by an admin", f.admin, api.CreateVolumeRequest{Tenant: f.acme.TenantID, Name: "data", SizeGiB: 100, Zone: "zone-a"}},
		} {
			again, created, err := f.svc.Volumes.Create(ctx, tc.actor, tc.spec, "vol-1")
			if err != nil || created || again.ID != v.ID {
				t.Errorf("%s: %+v, created %v, %v; want volume %s again", tc.name, again, created, err, v.ID)
			}
			f.unchanged(after, tc.name)
		}

		// Each field that differs is a conflict naming it alone.
		for _, tc := range []struct {
			field string
			spec  api.CreateVolumeRequest
		}{
			{"name", api.CreateVolumeRequest{Name: "logs", SizeGiB: 100, Zone: "zone-a"}},
			{"size_gib", api.CreateVolumeRequest{Name: "data", SizeGiB: 200, Zone: "zone-a"}},
			{"zone", api.CreateVolumeRequest{Name: "data", SizeGiB: 100, Zone: "zone-b"}},
			{"zone", api.CreateVolumeRequest{Name: "data", SizeGiB: 100}},
		} {
			_, _, err := f.svc.Volumes.Create(ctx, f.acme, tc.spec, "vol-1")
			vaKeyConflict(t, err, v.ID, tc.field)
			f.unchanged(after, "a reused key differing in "+tc.field)
		}

		// Keys are the tenant's: another tenant's create under the same key
		// is its own volume, whoever asks for it.
		for _, tc := range []struct {
			name  string
			actor service.Actor
			spec  api.CreateVolumeRequest
		}{
			{"globex member", f.globex, first},
			{"admin for globex", f.admin, api.CreateVolumeRequest{Tenant: f.globex.TenantID, Name: "data", SizeGiB: 100, Zone: "zone-a"}},
		} {
			g, created, err := f.svc.Volumes.Create(ctx, tc.actor, tc.spec, "vol-1")
			if err != nil || g.TenantID != f.globex.TenantID || g.ID == v.ID {
				t.Errorf("%s: %+v, created %v, %v; want a globex volume", tc.name, g, created, err)
			}
		}
		if c := f.counts(); c.Volumes != after.Volumes+1 {
			t.Errorf("globex's key made %d volumes, want 1", c.Volumes-after.Volumes)
		}
	})
}

func TestVolumeCreateChecks(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		before := f.counts()
		for _, tc := range []struct {
			field string
			spec  api.CreateVolumeRequest
			key   string
		}{
			{"size_gib", api.CreateVolumeRequest{Name: "data"}, ""},
			{"size_gib", api.CreateVolumeRequest{Name: "data", SizeGiB: -5}, ""},
			{"size_gib", api.CreateVolumeRequest{Name: "data", SizeGiB: 1 << 40}, ""},
			{"name", api.CreateVolumeRequest{SizeGiB: 10}, ""},
			{"zone", api.CreateVolumeRequest{Name: "data", SizeGiB: 10, Zone: "bad zone"}, ""},
			{"Idempotency-Key", api.CreateVolumeRequest{Name: "data", SizeGiB: 10}, "a b"},
		} {
			_, _, err := f.svc.Volumes.Create(ctx, f.acme, tc.spec, tc.key)
			if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != tc.field {
				t.Errorf("%+v: %v, want field %s", tc.spec, ce, tc.field)
			}
		}
		_, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Tenant: f.globex.TenantID, Name: "data", SizeGiB: 1}, "")
		vaHidden(t, err, "tenant", f.globex.TenantID)
		f.unchanged(before, "rejected creates")
	})
}

func TestVolumeTenantIsolation(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 10}, "")
		if err != nil {
			t.Fatal(err)
		}
		in := f.instance(f.acme)
		gin := f.instance(f.globex)
		const missing = "v-0000000000000000"

		// Globex's member sees nothing of acme's volume, and changes nothing.
		before := f.counts()
		for _, id := range []string{v.ID, missing} {
			_, err := f.svc.Volumes.Get(ctx, f.globex, id)
			vaHidden(t, err, "volume", id)
			_, err = f.svc.Volumes.Attach(ctx, f.globex, id, gin.ID)
			vaHidden(t, err, "volume", id)
			_, err = f.svc.Volumes.Detach(ctx, f.globex, id)
			vaHidden(t, err, "volume", id)
			_, err = f.svc.Volumes.Delete(ctx, f.globex, id)
			vaHidden(t, err, "volume", id)
		}
		if vs, err := f.svc.Volumes.List(ctx, f.globex, ""); err != nil || len(vs) != 0 {
			t.Errorf("globex lists %v, %v", vs, err)
		}
		_, err = f.svc.Volumes.List(ctx, f.globex, f.acme.TenantID)
		vaHidden(t, err, "tenant", f.acme.TenantID)
		// Nor does acme's member attach its volume to globex's instance.
		_, err = f.svc.Volumes.Attach(ctx, f.acme, v.ID, gin.ID)
		vaHidden(t, err, "instance", gin.ID)
		f.unchanged(before, "another tenant's reads and changes")

		// An admin reads and changes it.
		if got, err := f.svc.Volumes.Get(ctx, f.admin, v.ID); err != nil || got.ID != v.ID {
			t.Errorf("admin get = %+v, %v", got, err)
		}
		if vs, err := f.svc.Volumes.List(ctx, f.admin, f.acme.TenantID); err != nil || len(vs) != 1 || vs[0].ID != v.ID {
			t.Errorf("admin lists acme's: %v, %v", vs, err)
		}
		if vs, err := f.svc.Volumes.List(ctx, f.admin, ""); err != nil || len(vs) != 1 {
			t.Errorf("admin lists every tenant's: %v, %v", vs, err)
		}
		// An admin sees both, but a volume goes to its own tenant's
		// instances only.
		before = f.counts()
		_, err = f.svc.Volumes.Attach(ctx, f.admin, v.ID, gin.ID)
		if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "instance_id" {
			t.Errorf("admin attaches across tenants: %v", ce)
		}
		f.unchanged(before, "admin attaches across tenants")
		if got, err := f.svc.Volumes.Attach(ctx, f.admin, v.ID, in.ID); err != nil || got.InstanceID != in.ID {
			t.Errorf("admin attach = %+v, %v", got, err)
		}
		if got, err := f.svc.Volumes.Detach(ctx, f.admin, v.ID); err != nil || got.InstanceID != "" {
			t.Errorf("admin detach = %+v, %v", got, err)
		}
		evs, _, err := f.svc.Instances.Events(ctx, f.acme, in.ID, 0, 100)
		if err != nil || len(evs) != 3 || evs[1].Kind != service.EventVolumeAttached || evs[2].Kind != service.EventVolumeDetached ||
			evs[1].Actor != f.admin.ID {
			t.Errorf("instance events after the admin's attach and detach: %v, %v", evs, err)
		}
	})
}

// TestVolumeAttachRule checks that attach and detach follow the volume
// rule of CreateInstance: a volume is attached to an instance only when it
// is the tenant's, not deleted, in the instance's zones, and not attached
// to another instance that is not terminated.
func TestVolumeAttachRule(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 10, Zone: "zone-a"}, "")
		if err != nil {
			t.Fatal(err)
		}
		one := f.instance(f.acme)
		two := f.instance(f.acme)

		before := f.counts()
		_, err = f.svc.Volumes.Attach(ctx, f.acme, v.ID, "")
		if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "instance_id" {
			t.Errorf("no instance: %v", ce)
		}
		f.unchanged(before, "attach without an instance")

		got, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, one.ID)
		if err != nil || got.InstanceID != one.ID {
			t.Fatalf("attach = %+v, %v", got, err)
		}
		if in := f.instanceNow(one.ID); !slices.Equal(in.Volumes, []string{v.ID}) || in.Version != one.Version+1 {
			t.Errorf("instance after attach: volumes %v version %d", in.Volumes, in.Version)
		}
		before = f.counts()
		if again, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, one.ID); err != nil || again.InstanceID != one.ID {
			t.Errorf("attach again = %+v, %v", again, err)
		}
		f.unchanged(before, "attach again")

		// Attached to a live instance: neither attach nor CreateInstance
		// takes it.
		_, err = f.svc.Volumes.Attach(ctx, f.acme, v.ID, two.ID)
		if ce := vaCode(t, err, cloud.Conflict); ce.Details["instance_id"] != one.ID {
			t.Errorf("attached elsewhere: %v", ce)
		}
		_, _, err = f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Volumes: []string{v.ID}}, "")
		vaCode(t, err, cloud.Conflict)
		f.unchanged(before, "attach to a second instance")

		// Zones must agree, as for CreateInstance.
		zoned := f.instance(f.acme, "zone-b")
		_, err = f.svc.Volumes.Attach(ctx, f.acme, v.ID, zoned.ID)
		vaCode(t, err, cloud.Conflict) // still attached to one
		if _, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil {
			t.Fatal(err)
		}
		if in := f.instanceNow(one.ID); len(in.Volumes) != 0 {
			t.Errorf("instance still lists the volume: %v", in.Volumes)
		}
		before = f.counts()
		if again, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil || again.InstanceID != "" {
			t.Errorf("detach again = %+v, %v", again, err)
		}
		_, err = f.svc.Volumes.Attach(ctx, f.acme, v.ID, zoned.ID)
		if ce := vaCode(t, err, cloud.Invalid); ce.Details["field"] != "instance_id" {
			t.Errorf("zones disagree: %v", ce)
		}
		_, _, err = f.svc.Instances.Create(ctx, f.acme, api.CreateInstanceRequest{Offering: "l4.1x", Zones: []string{"zone-b"}, Volumes: []string{v.ID}}, "")
		vaCode(t, err, cloud.Invalid)
		f.unchanged(before, "detach again, and zones that disagree")

		// The volumes of an instance that holds an allocation, or is
		// terminated, do not change.
		if _, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, two.ID); err != nil {
			t.Fatal(err)
		}
		f.place(f.instanceNow(two.ID), "zone-a")
		before = f.counts()
		_, err = f.svc.Volumes.Detach(ctx, f.acme, v.ID)
		vaCode(t, err, cloud.Conflict)
		f.unchanged(before, "detach from a scheduled instance")
		if _, err := f.svc.Instances.Act(ctx, f.acme, one.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		free, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "free", SizeGiB: 1}, "")
		if err != nil {
			t.Fatal(err)
		}
		before = f.counts()
		_, err = f.svc.Volumes.Attach(ctx, f.acme, free.ID, one.ID)
		vaCode(t, err, cloud.Conflict)
		f.unchanged(before, "attach to a terminated instance")

		// A volume that still names a terminated instance is free: it
		// attaches elsewhere, and detaching it leaves the terminated
		// instance's record alone.
		testkit.Move(t, st, two.ID, cloud.Terminating, nil, f.clock.Now())
		testkit.Move(t, st, two.ID, cloud.Terminated, nil, f.clock.Now())
		stale := func() {
			t.Helper()
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				vol, err := tx.GetVolume(ctx, v.ID)
				if err != nil {
					return err
				}
				vol.InstanceID = two.ID
				return tx.UpdateVolume(ctx, vol)
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		stale()
		three := f.instance(f.acme)
		if got, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, three.ID); err != nil || got.InstanceID != three.ID {
			t.Errorf("attach a volume of a terminated instance = %+v, %v", got, err)
		}
		if _, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil {
			t.Fatal(err)
		}
		stale()
		twoBefore := f.instanceNow(two.ID)
		if got, err := f.svc.Volumes.Detach(ctx, f.acme, v.ID); err != nil || got.InstanceID != "" {
			t.Errorf("detach from a terminated instance = %+v, %v", got, err)
		}
		if after := f.instanceNow(two.ID); after.Version != twoBefore.Version || !slices.Equal(after.Volumes, twoBefore.Volumes) {
			t.Errorf("detach changed the terminated instance: %+v -> %+v", twoBefore, after)
		}

		// A deleted volume is a missing one.
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			vol, err := tx.GetVolume(ctx, free.ID)
			if err != nil {
				return err
			}
			now := f.clock.Now()
			vol.DeletedAt = &now
			return tx.UpdateVolume(ctx, vol)
		})
		if err != nil {
			t.Fatal(err)
		}
		before = f.counts()
		_, err = f.svc.Volumes.Get(ctx, f.acme, free.ID)
		vaHidden(t, err, "volume", free.ID)
		_, err = f.svc.Volumes.Attach(ctx, f.acme, free.ID, three.ID)
		vaHidden(t, err, "volume", free.ID)
		if vs, err := f.svc.Volumes.List(ctx, f.acme, ""); err != nil || len(vs) != 1 || vs[0].ID != v.ID {
			t.Errorf("list with a deleted volume = %v, %v", vs, err)
		}
		f.unchanged(before, "a deleted volume")
	})
}

// counts is what a rejected or repeated call must leave as it was.
func (f *vaFixture) counts() testkit.Rows { return testkit.CountRows(f.t, f.st) }

// TestVolumeDelete: a volume attached to a live instance is refused; once
// the instance is terminated the volume is deleted (gone from lists and
// reads, a volume.deleted event, its storage off the ledger), and deleting
// it again answers it unchanged.
func TestVolumeDelete(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		v, _, err := f.svc.Volumes.Create(ctx, f.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 10}, "")
		if err != nil {
			t.Fatal(err)
		}
		in := f.instance(f.acme)
		if _, err := f.svc.Volumes.Attach(ctx, f.acme, v.ID, in.ID); err != nil {
			t.Fatal(err)
		}
		before := f.counts()
		ce := vaCode(t, errOf(f.svc.Volumes.Delete(ctx, f.acme, v.ID)), cloud.Conflict)
		if ce.Details["instance_id"] != in.ID || !strings.Contains(ce.Message, "detach it first") {
			t.Errorf("delete an attached volume: %v", ce)
		}
		f.unchanged(before, "a refused delete")
		if _, err := f.svc.Instances.Act(ctx, f.acme, in.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		// A persistent spot request that may launch again with it holds
		// it too, until the request ends.
		sr := &cloud.SpotRequest{ID: "sr-1", TenantID: f.acme.TenantID, Type: cloud.SpotPersistent, Interruption: cloud.ActionTerminate,
			Pools: []cloud.Pool{{Offering: "l4.1x"}}, Volumes: []string{v.ID}, State: cloud.SpotDisabled,
			CreatedAt: f.clock.Now(), UpdatedAt: f.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.CreateSpotRequest(ctx, sr) }); err != nil {
			t.Fatal(err)
		}
		before = f.counts()
		ce = vaCode(t, errOf(f.svc.Volumes.Delete(ctx, f.acme, v.ID)), cloud.Conflict)
		if ce.Details["spot_request_id"] != "sr-1" {
			t.Errorf("delete a volume of a live spot request: %v", ce)
		}
		f.unchanged(before, "a refused delete")
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			cur, err := tx.GetSpotRequest(ctx, "sr-1")
			if err != nil {
				return err
			}
			cur.State = cloud.SpotCancelled
			return tx.UpdateSpotRequest(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
		del, err := f.svc.Volumes.Delete(ctx, f.acme, v.ID)
		if err != nil || del.DeletedAt == nil || del.InstanceID != "" {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		if vs, err := f.svc.Volumes.List(ctx, f.acme, ""); err != nil || len(vs) != 0 {
			t.Errorf("list after delete: %v, %v", vs, err)
		}
		_, err = f.svc.Volumes.Get(ctx, f.acme, v.ID)
		vaHidden(t, err, "volume", v.ID)
		before = f.counts()
		again, err := f.svc.Volumes.Delete(ctx, f.acme, v.ID)
		if err != nil || again.DeletedAt == nil || !again.DeletedAt.Equal(*del.DeletedAt) {
			t.Errorf("delete again = %+v, %v", again, err)
		}
		f.unchanged(before, "deleting a deleted volume")
		var found bool
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			es, err := tx.ListEvents(ctx, cloud.EventFilter{TenantID: f.acme.TenantID, Kinds: []cloud.EventKind{service.EventVolumeDeleted}})
			found = len(es) == 1
			return err
		}); err != nil || !found {
			t.Errorf("volume.deleted events: found %v, %v", found, err)
		}
	})
}

func errOf[T any](_ T, err error) error { return err }
