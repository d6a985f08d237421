package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// world is a store with two tenants (a member each) and an admin, and the
// services over it on a test clock.
type world struct {
	st         cloud.Store
	svc        *service.Services
	clock      *testkit.Clock
	admin      service.Actor
	acme, glob service.Actor
}

func newWorld(t *testing.T, st cloud.Store) *world {
	t.Helper()
	w := &world{st: st, clock: testkit.NewClock(testkit.Epoch),
		admin: service.Actor{ID: "u-admin", TenantID: "tn-op", Role: cloud.RoleAdmin},
		acme:  service.Actor{ID: "u-acme", TenantID: "tn-acme", Role: cloud.RoleMember},
		glob:  service.Actor{ID: "u-glob", TenantID: "tn-glob", Role: cloud.RoleMember}}
	w.svc = service.New(st, catalog.Default(), service.Options{Now: w.clock.Now})
	ctx := context.Background()
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		for _, tn := range []string{"tn-op", "tn-acme", "tn-glob"} {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: tn, Name: tn, CreatedAt: testkit.Epoch}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// rows is what a failed call must not have changed.
func (w *world) rows(t *testing.T) testkit.Rows { return testkit.CountRows(t, w.st) }

func (w *world) volume(t *testing.T, tenant, id, zone string) {
	t.Helper()
	ctx := context.Background()
	if err := w.st.Tx(ctx, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: id, TenantID: tenant, Name: id, SizeGiB: 10, Zone: zone, CreatedAt: testkit.Epoch})
	}); err != nil {
		t.Fatal(err)
	}
}

// TestCreateInstanceKeyConflicts: the same idempotency key with a request
// that differs in any one field is a conflict naming that field, and
// writes nothing; the identical request answers the first instance.
func TestCreateInstanceKeyConflicts(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		w.volume(t, "tn-acme", "v-1", "zone-a")
		w.volume(t, "tn-acme", "v-2", "zone-a")
		base := api.CreateInstanceRequest{Name: "train", Offering: "h100.1x", Image: "ghcr.io/acme/train:1", Zones: []string{"zone-a"},
			Labels: []string{"driver>=550"}, Command: []string{"python", "train.py"}, Env: map[string]string{"EPOCHS": "3"},
			Volumes: []string{"v-1"}, Tags: map[string]string{"team": "nlp"}, Publish: []int{8888}}
		cases := []struct {
			field  string
			change func(*api.CreateInstanceRequest)
		}{
			{"name", func(s *api.CreateInstanceRequest) { s.Name = "train2" }},
			{"offering", func(s *api.CreateInstanceRequest) { s.Offering = "h100.2x" }},
			{"image", func(s *api.CreateInstanceRequest) { s.Image = "ghcr.io/acme/train:2" }},
			{"zones", func(s *api.CreateInstanceRequest) { s.Zones = []string{"zone-a", "zone-b"} }},
			{"labels", func(s *api.CreateInstanceRequest) { s.Labels = []string{"driver>=560"} }},
			{"command", func(s *api.CreateInstanceRequest) { s.Command = []string{"python", "eval.py"} }},
			{"env", func(s *api.CreateInstanceRequest) { s.Env = map[string]string{"EPOCHS": "4"} }},
			{"volumes", func(s *api.CreateInstanceRequest) { s.Volumes = []string{"v-2"} }},
			{"tags", func(s *api.CreateInstanceRequest) { s.Tags = nil }},
			{"publish", func(s *api.CreateInstanceRequest) { s.Publish = []int{8888, 6006} }},
		}
		first, created, err := w.svc.Instances.Create(ctx, w.acme, clone(base), "key-1")
		if err != nil || !created {
			t.Fatalf("first create: %v, created %v", err, created)
		}
		for _, c := range cases {
			spec := clone(base)
			c.change(&spec)
			before := w.rows(t)
			_, _, err := w.svc.Instances.Create(ctx, w.acme, spec, "key-1")
			ce, ok := err.(*cloud.Error)
			if !ok || ce.Code != cloud.Conflict {
				t.Errorf("%s differs: %v, want a conflict", c.field, err)
				continue
			}
			if fields, _ := ce.Details["fields"].([]string); !slices.Equal(fields, []string{c.field}) || ce.Details["existing_id"] != first.ID {
				t.Errorf("%s differs: details %v", c.field, ce.Details)
			}
			if w.rows(t) != before {
				t.Errorf("%s differs: the refused create wrote something", c.field)
			}
		}
		again, created, err := w.svc.Instances.Create(ctx, w.acme, clone(base), "key-1")
		if err != nil || created || again.ID != first.ID {
			t.Errorf("identical retry: %v, created %v, id %s (first %s)", err, created, again.ID, first.ID)
		}
		// The key is the tenant's: another tenant's same key is another instance.
		spec := clone(base)
		spec.Volumes = nil
		other, created, err := w.svc.Instances.Create(ctx, w.glob, spec, "key-1")
		if err != nil || !created || other.ID == first.ID {
			t.Errorf("another tenant's key: %v, created %v", err, created)
		}
	})
}

func clone(s api.CreateInstanceRequest) api.CreateInstanceRequest {
	s.Zones, s.Labels, s.Command, s.Volumes = slices.Clone(s.Zones), slices.Clone(s.Labels), slices.Clone(s.Command), slices.Clone(s.Volumes)
	s.Publish = slices.Clone(s.Publish)
	return s
}

// TestCreateInstanceRules: the one create path checks quota and the one
// volume rule, whoever calls it.
func TestCreateInstanceRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		w.volume(t, "tn-acme", "v-a", "zone-a")
		w.volume(t, "tn-glob", "v-g", "")
		cases := []struct {
			name string
			who  service.Actor
			spec api.CreateInstanceRequest
			want cloud.Code
		}{
			{"ok", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{"v-a"}}, ""},
			{"volume already attached", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{"v-a"}}, cloud.Conflict},
			{"another tenant's volume", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{"v-g"}}, cloud.Invalid},
			{"missing volume", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{"v-none"}}, cloud.Invalid},
			{"unknown offering", w.acme, api.CreateInstanceRequest{Offering: "nope"}, cloud.Invalid},
			{"member names another tenant", w.acme, api.CreateInstanceRequest{Tenant: "tn-glob", Offering: "h100.1x"}, cloud.NotFound},
			{"admin for a tenant", w.admin, api.CreateInstanceRequest{Tenant: "tn-glob", Offering: "h100.1x"}, ""},
			{"bad label", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Labels: []string{"=="}}, cloud.Invalid},
			{"NUL in command", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Command: []string{"a\x00b"}}, cloud.Invalid},
			{"bad image", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Image: "ghcr.io/acme/Train"}, cloud.Invalid},
			{"image", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Image: "ghcr.io/acme/train:1"}, ""},
			{"published ports", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Publish: []int{8888, 6006, 65535, 1}}, ""},
			{"port 0", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Publish: []int{0}}, cloud.Invalid},
			{"port over 65535", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Publish: []int{65536}}, cloud.Invalid},
			{"a port twice", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Publish: []int{8888, 8888}}, cloud.Invalid},
			{"nine ports", w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Publish: []int{1, 2, 3, 4, 5, 6, 7, 8, 9}}, cloud.Invalid},
		}
		for _, c := range cases {
			before := w.rows(t)
			in, _, err := w.svc.Instances.Create(ctx, c.who, c.spec, "")
			if got := cloud.ErrorCode(err); got != c.want {
				t.Errorf("%s: %v, want code %q", c.name, err, c.want)
				continue
			}
			after := w.rows(t)
			if c.want != "" && (after.Instances != before.Instances || after.Events != before.Events) {
				t.Errorf("%s: refused create wrote something", c.name)
			}
			// Its creation's event, and one per volume attached.
			if c.want == "" && (in.State != cloud.Pending || in.Market != cloud.MarketOnDemand || after.Instances != before.Instances+1 ||
				after.Events != before.Events+1+len(in.Volumes)) {
				t.Errorf("%s: created %+v with %d rows, %d events", c.name, in, after.Instances-before.Instances, after.Events-before.Events)
			}
		}
		// A volume attached to a terminated instance may be attached again
		// (spot relaunches depend on it).
		ins, _, _ := w.svc.Instances.List(ctx, w.acme, service.InstanceQuery{Limit: 10})
		var holder *cloud.Instance
		for _, in := range ins {
			if len(in.Volumes) == 1 {
				holder = in
			}
		}
		testkit.Move(t, st, holder.ID, cloud.Terminated, nil, w.clock.Now())
		if _, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Volumes: []string{"v-a"}}, ""); err != nil {
			t.Errorf("volume of a terminated instance: %v", err)
		}
		// Quota: one instance more than the quota is refused.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.PutQuota(ctx, &cloud.Quota{TenantID: "tn-glob", Instances: 1})
		}); err != nil {
			t.Fatal(err)
		}
		_, _, err := w.svc.Instances.Create(ctx, w.glob, api.CreateInstanceRequest{Offering: "h100.1x"}, "")
		if cloud.ErrorCode(err) != cloud.QuotaExceeded {
			t.Errorf("over quota: %v", err)
		}
	})
}

// TestInstancesTenancy: another tenant's member can neither read nor
// change an instance (it answers like a missing one); an admin can.
func TestInstancesTenancy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		in, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "h100.1x", Env: map[string]string{"HF_TOKEN": "secret"}}, "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.svc.Instances.Get(ctx, w.glob, in.ID); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("glob reads acme's instance: %v", err)
		}
		if _, _, err := w.svc.Instances.Events(ctx, w.glob, in.ID, 0, 10); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("glob reads acme's events: %v", err)
		}
		for _, a := range []service.Action{service.Stop, service.Start, service.Terminate} {
			if _, err := w.svc.Instances.Act(ctx, w.glob, in.ID, a, 0); cloud.ErrorCode(err) != cloud.NotFound {
				t.Errorf("glob %ss acme's instance: %v", a.Verb, err)
			}
		}
		if list, _, err := w.svc.Instances.List(ctx, w.glob, service.InstanceQuery{Limit: 10}); err != nil || len(list) != 0 {
			t.Errorf("glob lists %d instances (%v)", len(list), err)
		}
		if _, _, err := w.svc.Instances.List(ctx, w.glob, service.InstanceQuery{Tenant: "tn-acme", Limit: 10}); cloud.ErrorCode(err) != cloud.NotFound {
			t.Errorf("glob lists acme's: %v", err)
		}
		if _, _, err := w.svc.Instances.EventLog(ctx, w.acme, cloud.EventFilter{}); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Errorf("a member reads the event trail: %v", err)
		}
		if got, err := w.svc.Instances.Get(ctx, w.admin, in.ID); err != nil || got.ID != in.ID {
			t.Errorf("admin reads: %v", err)
		}
		if got, err := w.svc.Instances.Act(ctx, w.acme, in.ID, service.Stop, 0); err != nil || got.State != cloud.Stopped {
			t.Errorf("acme stops its own: %v", err)
		}
		w.clock.Advance(time.Second)
		if _, err := w.svc.Instances.Act(ctx, w.acme, in.ID, service.Start, 1); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("stale If-Match: %v", err)
		}
	})
}

// TestListNewestFirst: pages of NewestFirst run from the newest instance
// to the oldest across pages, each instance once; another tenant's
// instance as the cursor lists nothing of the caller's.
func TestListNewestFirst(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		var created []string
		for range 7 {
			w.clock.Advance(time.Second)
			in, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "h100.1x"}, "")
			if err != nil {
				t.Fatal(err)
			}
			created = append(created, in.ID)
		}
		other, _, err := w.svc.Instances.Create(ctx, w.glob, api.CreateInstanceRequest{Offering: "h100.1x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		after := ""
		for pages := 0; pages < 10; pages++ {
			list, next, err := w.svc.Instances.List(ctx, w.acme, service.InstanceQuery{Limit: 3, After: after, NewestFirst: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, in := range list {
				got = append(got, in.ID)
			}
			if next == "" {
				break
			}
			after = next
		}
		want := slices.Clone(created)
		slices.Reverse(want)
		if !slices.Equal(got, want) {
			t.Errorf("pages of 3, newest first: %v, want %v", got, want)
		}
		if list, _, err := w.svc.Instances.List(ctx, w.acme, service.InstanceQuery{Limit: 3, After: other.ID, NewestFirst: true}); err != nil || len(list) != 0 {
			t.Errorf("another tenant's instance as the cursor: %d instances (%v), want none", len(list), err)
		}
	})
}
