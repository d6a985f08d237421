package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// groupSpec is a valid group of every feature.
func groupSpec() api.CreateGroupRequest {
	two, ten := 2, 10
	return api.CreateGroupRequest{Name: "web",
		Template: cloud.GroupTemplate{Offerings: []string{"l4.1x", "l40s.1x"}, Image: "ghcr.io/acme/web:1",
			Command: []string{"python", "serve.py"}, Env: map[string]string{"PORT": "8080"}, Zones: []string{"zone-a", "zone-b"},
			Labels: []string{"driver>=550"}, Tags: map[string]string{"team": "web"}},
		Min: 1, Max: 8, Desired: &two,
		Policies: []cloud.ScalingPolicy{
			{Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.6},
			{Name: "queue", Type: cloud.PolicyTarget, Metric: "custom:queue", Target: 10},
			{Name: "night", Type: cloud.PolicyScheduled, Cron: "0 20 * * 1-5", TimeZone: "Asia/Shanghai", SetDesired: &ten},
		},
		Mixed:         cloud.MixedInstances{Spot: true, OnDemandBase: 1, OnDemandPercent: 25, MaxSpotPriceRatio: 80},
		Timing:        cloud.GroupTiming{CooldownSeconds: 120, NoticeSeconds: 60},
		BudgetPerHour: money.MustParse("12.50"),
		IdleRelease:   &cloud.IdleRelease{Threshold: 0.1, IdleSeconds: 1800},
	}
}

// cloneGroupSpec copies the spec's lists and maps, so that a case may
// change them.
func cloneGroupSpec(s api.CreateGroupRequest) api.CreateGroupRequest {
	t := &s.Template
	t.Offerings, t.Command, t.Zones, t.Labels = slices.Clone(t.Offerings), slices.Clone(t.Command), slices.Clone(t.Zones), slices.Clone(t.Labels)
	t.Env, t.Tags = maps.Clone(t.Env), maps.Clone(t.Tags)
	s.Policies = slices.Clone(s.Policies)
	if s.IdleRelease != nil {
		r := *s.IdleRelease
		s.IdleRelease = &r
	}
	if s.Desired != nil {
		d := *s.Desired
		s.Desired = &d
	}
	return s
}

// wantField checks an invalid_argument naming field.
func groupField(t *testing.T, err error, field string) {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != cloud.Invalid || ce.Details["field"] != field {
		t.Errorf("err = %v, want invalid_argument on %s", err, field)
		return
	}
	if !strings.HasPrefix(ce.Message, field) {
		t.Errorf("message %q does not start with the field %s", ce.Message, field)
	}
}

func groupCode(t *testing.T, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return ce
}

func (w *world) group(t *testing.T, a service.Actor, name string) *cloud.Group {
	t.Helper()
	spec := groupSpec()
	spec.Name = name
	g, created, err := w.svc.Groups.Create(context.Background(), a, spec, "")
	if err != nil || !created {
		t.Fatalf("create group %s: %v", name, err)
	}
	return g
}

// TestGroupCreate creates a group with every feature, and refuses every
// invalid field with an invalid_argument that names it, writing nothing.
func TestGroupCreate(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		before := w.rows(t)
		g, created, err := w.svc.Groups.Create(ctx, w.acme, groupSpec(), "")
		if err != nil || !created {
			t.Fatalf("create = %v, %v", created, err)
		}
		if !strings.HasPrefix(g.ID, service.GroupPrefix) || g.TenantID != "tn-acme" || g.State != cloud.GroupActive ||
			g.Desired != 2 || g.Version != 1 || g.Policies[0].Name != "target" || g.Template.Offerings[1] != "l40s.1x" {
			t.Errorf("group = %+v", g)
		}
		after := w.rows(t)
		if after.Groups != before.Groups+1 || after.Events != before.Events+1 || after.Instances != before.Instances {
			t.Errorf("rows %+v -> %+v: want one group and one event", before, after)
		}
		evs, _, err := w.svc.Groups.Events(ctx, w.acme, g.ID, 0, 0)
		if err != nil || len(evs) != 1 || evs[0].Kind != cloud.EventGroup || evs[0].Actor != "u-acme" {
			t.Errorf("events = %v, %v", evs, err)
		}
		// Desired defaults to min; the image is kept in canonical form.
		plain := api.CreateGroupRequest{Name: "plain", Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}, Image: "python:3.12"}, Min: 3, Max: 5}
		if p, _, err := w.svc.Groups.Create(ctx, w.acme, plain, ""); err != nil || p.Desired != 3 || p.Mixed.Spot ||
			p.Template.Image != "docker.io/library/python:3.12" {
			t.Errorf("plain = %+v, %v", p, err)
		}
		// A live name is the tenant's once.
		_, _, err = w.svc.Groups.Create(ctx, w.acme, groupSpec(), "")
		groupCode(t, err, cloud.Conflict)
		if g2, _, err := w.svc.Groups.Create(ctx, w.glob, groupSpec(), ""); err != nil || g2.TenantID != "tn-glob" {
			t.Errorf("another tenant's group of that name = %+v, %v", g2, err)
		}

		one := 1
		for _, tc := range []struct {
			field string
			edit  func(s *api.CreateGroupRequest)
		}{
			{"name", func(s *api.CreateGroupRequest) { s.Name = "" }},
			{"name", func(s *api.CreateGroupRequest) { s.Name = "no spaces" }},
			{"template.offerings", func(s *api.CreateGroupRequest) { s.Template.Offerings = nil }},
			{"template.offerings[0]", func(s *api.CreateGroupRequest) { s.Template.Offerings[0] = "h900.1x" }},
			{"template.offerings[1]", func(s *api.CreateGroupRequest) { s.Template.Offerings[1] = "l4.1x" }},
			{"template.image", func(s *api.CreateGroupRequest) { s.Template.Image = "a b" }},
			{"template.image", func(s *api.CreateGroupRequest) { s.Template.Image = "ghcr.io/acme/Web:1" }},
			{"template.zones[1]", func(s *api.CreateGroupRequest) { s.Template.Zones[1] = "zone b" }},
			{"template.labels[0]", func(s *api.CreateGroupRequest) { s.Template.Labels[0] = "driver>=" }},
			{"template.env", func(s *api.CreateGroupRequest) { s.Template.Env["1BAD"] = "x" }},
			{"template.command[1]", func(s *api.CreateGroupRequest) { s.Template.Command[1] = "a\x00b" }},
			{"template.tags", func(s *api.CreateGroupRequest) { s.Template.Tags["gpucloud:group"] = "x" }},
			{"template.volume_gib", func(s *api.CreateGroupRequest) { s.Template.VolumeGiB = -1 }},
			{"min", func(s *api.CreateGroupRequest) { s.Min = -1 }},
			{"min", func(s *api.CreateGroupRequest) { s.Min, s.Desired = 9, nil }},
			{"max", func(s *api.CreateGroupRequest) { s.Max = service.MaxGroupSize + 1 }},
			{"desired", func(s *api.CreateGroupRequest) { d := 9; s.Desired = &d }},
			{"desired", func(s *api.CreateGroupRequest) { d := 0; s.Desired = &d }},
			{"policies[0].type", func(s *api.CreateGroupRequest) { s.Policies[0].Type = "magic" }},
			{"policies[0].metric", func(s *api.CreateGroupRequest) { s.Policies[0].Metric = "memory" }},
			{"policies[0].metric", func(s *api.CreateGroupRequest) { s.Policies[0].Metric = "custom:Queue" }},
			{"policies[0].target", func(s *api.CreateGroupRequest) { s.Policies[0].Target = 1.5 }},
			{"policies[1].target", func(s *api.CreateGroupRequest) { s.Policies[1].Target = 0 }},
			{"policies[2].name", func(s *api.CreateGroupRequest) { s.Policies[2].Name = "queue" }},
			{"policies[2].cron", func(s *api.CreateGroupRequest) { s.Policies[2].Cron = "0 25 * * *" }},
			{"policies[2].cron", func(s *api.CreateGroupRequest) { s.Policies[2].Cron = "0 20 * *" }},
			{"policies[2].time_zone", func(s *api.CreateGroupRequest) { s.Policies[2].TimeZone = "Mars/Olympus" }},
			{"policies[2]", func(s *api.CreateGroupRequest) { s.Policies[2].SetDesired = nil }},
			{"policies[2].set_max", func(s *api.CreateGroupRequest) { s.Policies[2].SetMin = &one; z := 0; s.Policies[2].SetMax = &z }},
			{"policies[0].steps", func(s *api.CreateGroupRequest) { s.Policies[0].Type = cloud.PolicyStep }},
			{"mixed.on_demand_percent", func(s *api.CreateGroupRequest) { s.Mixed.OnDemandPercent = 101 }},
			{"mixed.spot", func(s *api.CreateGroupRequest) { s.Mixed.Spot = false }},
			{"mixed.max_spot_price_ratio", func(s *api.CreateGroupRequest) { s.Mixed.MaxSpotPriceRatio = 150 }},
			{"timing.notice_seconds", func(s *api.CreateGroupRequest) { s.Timing.NoticeSeconds = 7200 }},
			{"timing.cooldown_seconds", func(s *api.CreateGroupRequest) { s.Timing.CooldownSeconds = -1 }},
			{"idle_release.threshold", func(s *api.CreateGroupRequest) { s.IdleRelease.Threshold = 1.5 }},
			{"idle_release.idle_seconds", func(s *api.CreateGroupRequest) { s.IdleRelease.IdleSeconds = 0 }},
			{"budget_per_hour", func(s *api.CreateGroupRequest) { s.BudgetPerHour = -1 }},
			{"Idempotency-Key", nil},
		} {
			spec, key := cloneGroupSpec(groupSpec()), ""
			spec.Name = "bad"
			if tc.edit != nil {
				tc.edit(&spec)
			} else {
				key = "white space"
			}
			before := w.rows(t)
			_, _, err := w.svc.Groups.Create(ctx, w.acme, spec, key)
			groupField(t, err, tc.field)
			if w.rows(t) != before {
				t.Errorf("%s: the refused create wrote something", tc.field)
			}
		}
	})
}

// TestGroupLimits: a tenant's groups are bounded, and a min that cannot
// fit the tenant's quota is refused; both quota_exceeded, writing nothing.
func TestGroupLimits(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.PutQuota(ctx, &cloud.Quota{TenantID: "tn-acme", Instances: 4, GPUs: map[string]float64{"L4": 2}})
		}); err != nil {
			t.Fatal(err)
		}
		spec := api.CreateGroupRequest{Name: "big", Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}}, Min: 5, Max: 6}
		before := w.rows(t)
		ce := groupCode(t, createErr(w.svc.Groups.Create(ctx, w.acme, spec, "")), cloud.QuotaExceeded)
		if ce.Details["resource"] != "instances" {
			t.Errorf("details %v", ce.Details)
		}
		spec.Min = 3
		ce = groupCode(t, createErr(w.svc.Groups.Create(ctx, w.acme, spec, "")), cloud.QuotaExceeded)
		if ce.Details["resource"] != "gpus" {
			t.Errorf("details %v", ce.Details)
		}
		if w.rows(t) != before {
			t.Error("refused creates wrote something")
		}
		// With a second offering of another model, min fits.
		spec.Template.Offerings = append(spec.Template.Offerings, "h100.1x")
		if _, _, err := w.svc.Groups.Create(ctx, w.acme, spec, ""); err != nil {
			t.Fatalf("with a second offering: %v", err)
		}
		// The group count.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			for i := range service.MaxGroupsPerTenant - 1 {
				g := &cloud.Group{ID: fmt.Sprintf("asg-fill%03d", i), TenantID: "tn-glob", Name: fmt.Sprintf("g%d", i),
					Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}}, Max: 1, State: cloud.GroupActive, CreatedAt: testkit.Epoch}
				if err := tx.CreateGroup(ctx, g); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		last := w.group(t, w.glob, "last")
		before = w.rows(t)
		ce = groupCode(t, createErr(w.svc.Groups.Create(ctx, w.glob, groupSpec(), "")), cloud.QuotaExceeded)
		if ce.Details["resource"] != "groups" || ce.Details["limit"] != service.MaxGroupsPerTenant {
			t.Errorf("details %v", ce.Details)
		}
		if w.rows(t) != before {
			t.Error("the refused create wrote something")
		}
		// A deleting group still counts; a deleted one does not.
		if _, err := w.svc.Groups.Delete(ctx, w.glob, last.ID, 0); err != nil {
			t.Fatal(err)
		}
		groupCode(t, createErr(w.svc.Groups.Create(ctx, w.glob, groupSpec(), "")), cloud.QuotaExceeded)
		markDeleted(t, st, last.ID)
		if _, _, err := w.svc.Groups.Create(ctx, w.glob, groupSpec(), ""); err != nil {
			t.Errorf("after a group was deleted: %v", err)
		}
	})
}

func createErr[T any](_ T, _ bool, err error) error { return err }

// markDeleted does what the controller does once a deleting group has no
// member left.
func markDeleted(t *testing.T, st cloud.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if err := st.Tx(ctx, func(tx cloud.Tx) error {
		g, err := tx.GetGroup(ctx, id)
		if err != nil {
			return err
		}
		g.State, g.Min, g.Desired = cloud.GroupDeleted, 0, 0
		return tx.UpdateGroup(ctx, g)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestGroupIdempotency: the same key and request answer the first group;
// a request that differs in one field is a conflict naming it. Once the
// controller has resized the group, its sizes are no longer compared.
func TestGroupIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		first, created, err := w.svc.Groups.Create(ctx, w.acme, groupSpec(), "k1")
		if err != nil || !created {
			t.Fatal(err)
		}
		before := w.rows(t)
		for _, tc := range []struct {
			field string
			edit  func(s *api.CreateGroupRequest)
		}{
			{"name", func(s *api.CreateGroupRequest) { s.Name = "api" }},
			{"template.offerings", func(s *api.CreateGroupRequest) { s.Template.Offerings = s.Template.Offerings[:1] }},
			{"template.image", func(s *api.CreateGroupRequest) { s.Template.Image = "ghcr.io/acme/web:2" }},
			{"template.command", func(s *api.CreateGroupRequest) { s.Template.Command = nil }},
			{"template.env", func(s *api.CreateGroupRequest) { s.Template.Env["PORT"] = "9090" }},
			{"template.zones", func(s *api.CreateGroupRequest) { s.Template.Zones = s.Template.Zones[:1] }},
			{"template.labels", func(s *api.CreateGroupRequest) { s.Template.Labels = nil }},
			{"template.tags", func(s *api.CreateGroupRequest) { s.Template.Tags = nil }},
			{"template.volume_gib", func(s *api.CreateGroupRequest) { s.Template.VolumeGiB = 100 }},
			{"min", func(s *api.CreateGroupRequest) { s.Min = 2 }},
			{"max", func(s *api.CreateGroupRequest) { s.Max = 9 }},
			{"desired", func(s *api.CreateGroupRequest) { s.Desired = nil }},
			{"policies", func(s *api.CreateGroupRequest) { s.Policies = s.Policies[:2] }},
			{"mixed", func(s *api.CreateGroupRequest) { s.Mixed.OnDemandBase = 2 }},
			{"timing", func(s *api.CreateGroupRequest) { s.Timing.WarmupSeconds = 60 }},
			{"budget_per_hour", func(s *api.CreateGroupRequest) { s.BudgetPerHour = 0 }},
			{"idle_release", func(s *api.CreateGroupRequest) { s.IdleRelease = nil }},
		} {
			spec := cloneGroupSpec(groupSpec())
			tc.edit(&spec)
			g, created, err := w.svc.Groups.Create(ctx, w.acme, spec, "k1")
			ce := groupCode(t, err, cloud.Conflict)
			if created || g != nil && g.ID != first.ID {
				t.Errorf("%s: created %v, %+v", tc.field, created, g)
			}
			if fields, _ := ce.Details["fields"].([]string); !slices.Equal(fields, []string{tc.field}) || ce.Details["existing_id"] != first.ID {
				t.Errorf("%s: details %v (%s)", tc.field, ce.Details, ce.Message)
			}
		}
		again, created, err := w.svc.Groups.Create(ctx, w.acme, groupSpec(), "k1")
		if err != nil || created || again.ID != first.ID {
			t.Errorf("retry = %+v, %v, %v", again, created, err)
		}
		if w.rows(t) != before {
			t.Error("retries and conflicts wrote something")
		}
		// The controller scales the group: a retry still answers it.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			g, err := tx.GetGroup(ctx, first.ID)
			if err != nil {
				return err
			}
			g.Desired, g.Status.LastActionAt = 5, w.clock.Now()
			return tx.UpdateGroup(ctx, g)
		}); err != nil {
			t.Fatal(err)
		}
		if again, created, err := w.svc.Groups.Create(ctx, w.acme, groupSpec(), "k1"); err != nil || created || again.Desired != 5 {
			t.Errorf("retry after a scaling action = %+v, %v, %v", again, created, err)
		}
		// Keys are the tenant's; an admin for acme uses acme's.
		forAcme := groupSpec()
		forAcme.Tenant = "tn-acme"
		if again, created, err := w.svc.Groups.Create(ctx, w.admin, forAcme, "k1"); err != nil || created || again.ID != first.ID {
			t.Errorf("admin retry for acme = %+v, %v, %v", again, created, err)
		}
		if g, created, err := w.svc.Groups.Create(ctx, w.glob, groupSpec(), "k1"); err != nil || !created || g.ID == first.ID {
			t.Errorf("another tenant's key = %+v, %v, %v", g, created, err)
		}
	})
}

// TestGroupsTenancy: another tenant's group and instances answer exactly
// like missing ones, to every call, and nothing is written.
func TestGroupsTenancy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		g := w.group(t, w.acme, "web")
		in, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		two := 2
		before := w.rows(t)
		for _, id := range []string{g.ID, "asg-missing"} {
			for name, err := range map[string]error{
				"get":      groupErr(w.svc.Groups.Get(ctx, w.glob, id)),
				"describe": groupErr(w.svc.Groups.Describe(ctx, w.glob, id)),
				"update":   groupErr(w.svc.Groups.Update(ctx, w.glob, id, api.UpdateGroupRequest{Desired: &two}, 0)),
				"desired":  groupErr(w.svc.Groups.SetDesired(ctx, w.glob, id, 2, false)),
				"delete":   groupErr(w.svc.Groups.Delete(ctx, w.glob, id, 0)),
				"events":   func() error { _, _, err := w.svc.Groups.Events(ctx, w.glob, id, 0, 0); return err }(),
				"metrics":  w.svc.Groups.PutMetrics(ctx, w.glob, id, []api.MetricPoint{{Name: "queue", Value: 1}}),
				"forecast": groupErr(w.svc.Groups.Forecast(ctx, w.glob, id)),
			} {
				ce := groupCode(t, err, cloud.NotFound)
				if ce.Message != `group "`+id+`" not found` {
					t.Errorf("%s %s: %q", name, id, ce.Message)
				}
			}
		}
		for _, id := range []string{in.ID, "i-missing"} {
			ce := groupCode(t, groupErr(w.svc.Instances.SetProtection(ctx, w.glob, id, true)), cloud.NotFound)
			if ce.Message != `instance "`+id+`" not found` {
				t.Errorf("protect %s: %q", id, ce.Message)
			}
		}
		if w.rows(t) != before {
			t.Error("another tenant's calls wrote something")
		}
		// Lists: a member its own; an admin every tenant's or one's; a
		// member naming another tenant gets not_found.
		w.group(t, w.glob, "api")
		for _, c := range []struct {
			a      service.Actor
			tenant string
			want   int
		}{{w.acme, "", 1}, {w.glob, "", 1}, {w.admin, "", 2}, {w.admin, "tn-glob", 1}, {w.acme, "tn-acme", 1}} {
			gs, err := w.svc.Groups.List(ctx, c.a, c.tenant)
			if err != nil || len(gs) != c.want {
				t.Errorf("%s lists %q: %d groups, %v; want %d", c.a.ID, c.tenant, len(gs), err, c.want)
			}
		}
		groupCode(t, groupErr(w.svc.Groups.List(ctx, w.acme, "tn-glob")), cloud.NotFound)
		// The admin acts on any tenant's group.
		if _, err := w.svc.Groups.SetDesired(ctx, w.admin, g.ID, 3, false); err != nil {
			t.Errorf("admin set desired: %v", err)
		}
		if err := w.svc.Groups.PutMetrics(ctx, w.admin, g.ID, []api.MetricPoint{{Name: "queue", Value: 1}}); err != nil {
			t.Errorf("admin put metrics: %v", err)
		}
	})
}

func groupErr[T any](_ T, err error) error { return err }

// TestGroupUpdate: patches, If-Match, bounds, and what a deleting group
// still allows.
func TestGroupUpdate(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		g := w.group(t, w.acme, "web")
		ptr := func(n int) *int { return &n }

		// Raising min brings desired along; the event names the fields.
		up, err := w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Min: ptr(3)}, g.Version)
		if err != nil || up.Min != 3 || up.Desired != 3 || up.Version != g.Version+1 {
			t.Fatalf("min 3 = %+v, %v", up, err)
		}
		evs, _, _ := w.svc.Groups.Events(ctx, w.acme, g.ID, 0, 0)
		if last := evs[len(evs)-1]; !strings.Contains(last.Reason, "min, desired") {
			t.Errorf("event %q", last.Reason)
		}
		// A stale If-Match, bad bounds and bad fields write nothing.
		before := w.rows(t)
		groupCode(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Max: ptr(4)}, g.Version)), cloud.Conflict)
		groupField(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Desired: ptr(9)}, 0)), "desired")
		groupField(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Max: ptr(2)}, 0)), "min")
		groupField(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{
			Template: &cloud.GroupTemplate{Offerings: []string{"nope"}}}, 0)), "template.offerings[0]")
		groupField(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{
			Policies: &[]cloud.ScalingPolicy{{Type: "x"}}}, 0)), "policies[0].type")
		// Nothing to change: answered unchanged.
		same, err := w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Min: ptr(3), Mixed: &up.Mixed}, 0)
		if err != nil || same.Version != up.Version {
			t.Errorf("no-op update = %+v, %v", same, err)
		}
		if w.rows(t) != before {
			t.Error("refused or empty updates wrote something")
		}
		// Template, policies, budget and idle release; {} removes idle
		// release, [] the policies.
		tmpl := cloud.GroupTemplate{Offerings: []string{"H100.1x"}, VolumeGiB: 50}
		zero := money.Micros(0)
		up, err = w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Template: &tmpl, Policies: &[]cloud.ScalingPolicy{},
			BudgetPerHour: &zero, IdleRelease: &cloud.IdleRelease{}}, 0)
		if err != nil || up.Template.Offerings[0] != "h100.1x" || up.Template.VolumeGiB != 50 || len(up.Policies) != 0 ||
			up.BudgetPerHour != 0 || up.IdleRelease != nil {
			t.Errorf("update = %+v, %v", up, err)
		}

		// Set desired: within bounds, a manual decision, cooldown.
		groupField(t, groupErr(w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 9, false)), "desired")
		ce := groupCode(t, groupErr(w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 2, false)), cloud.Invalid)
		if ce.Details["min"] != 3 || ce.Details["max"] != 8 {
			t.Errorf("bounds details %v", ce.Details)
		}
		sd, err := w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 5, true)
		if err != nil || sd.Desired != 5 || len(sd.Status.Decisions) != 1 || sd.Status.Decisions[0].Policy != service.ManualPolicy ||
			sd.Status.Decisions[0].From != 3 || !sd.Status.LastActionAt.Equal(w.clock.Now()) {
			t.Fatalf("set desired = %+v, %v", sd, err)
		}
		ce = groupCode(t, groupErr(w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 6, true)), cloud.Conflict)
		if ce.Details["cooldown_until"] == nil {
			t.Errorf("cooldown details %v", ce.Details)
		}
		if sd, err := w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 6, false); err != nil || sd.Desired != 6 {
			t.Errorf("without honoring the cooldown = %+v, %v", sd, err)
		}
		w.clock.Advance(121 * time.Second) // the group's cooldown is 120 s
		if sd, err := w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 4, true); err != nil || sd.Desired != 4 {
			t.Errorf("after the cooldown = %+v, %v", sd, err)
		}
		before = w.rows(t)
		if sd, err := w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 4, true); err != nil || sd.Desired != 4 {
			t.Errorf("same desired = %+v, %v", sd, err)
		}
		if w.rows(t) != before {
			t.Error("setting the same desired capacity wrote something")
		}

		// Delete: deleting; again unchanged; no more changes.
		del, err := w.svc.Groups.Delete(ctx, w.acme, g.ID, 0)
		if err != nil || del.State != cloud.GroupDeleting {
			t.Fatalf("delete = %+v, %v", del, err)
		}
		before = w.rows(t)
		if again, err := w.svc.Groups.Delete(ctx, w.acme, g.ID, 0); err != nil || again.Version != del.Version {
			t.Errorf("delete again = %+v, %v", again, err)
		}
		groupCode(t, groupErr(w.svc.Groups.Update(ctx, w.acme, g.ID, api.UpdateGroupRequest{Max: ptr(9)}, 0)), cloud.Conflict)
		groupCode(t, groupErr(w.svc.Groups.SetDesired(ctx, w.acme, g.ID, 5, false)), cloud.Conflict)
		if w.rows(t) != before {
			t.Error("changes of a deleting group wrote something")
		}
		if gs, _ := w.svc.Groups.List(ctx, w.acme, ""); len(gs) != 1 || gs[0].State != cloud.GroupDeleting {
			t.Errorf("list while deleting = %v", gs)
		}
		markDeleted(t, st, g.ID)
		if gs, _ := w.svc.Groups.List(ctx, w.acme, ""); len(gs) != 0 {
			t.Errorf("list after deleted = %v", gs)
		}
		if gs, _ := w.svc.Groups.List(ctx, w.acme, "", cloud.GroupDeleted); len(gs) != 1 {
			t.Errorf("list of deleted = %v", gs)
		}
		if err := w.svc.Groups.PutMetrics(ctx, w.acme, g.ID, []api.MetricPoint{{Name: "q", Value: 1}}); cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("metrics of a deleted group: %v", err)
		}
	})
}

// TestGroupEvents: a group's events are its own (not its tenant's other
// groups'), in pages.
func TestGroupEvents(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		a, b := w.group(t, w.acme, "a"), w.group(t, w.acme, "b")
		for n := 3; n <= 7; n++ {
			for _, g := range []*cloud.Group{a, b} {
				if _, err := w.svc.Groups.SetDesired(ctx, w.acme, g.ID, n, false); err != nil {
					t.Fatal(err)
				}
			}
		}
		all, next, err := w.svc.Groups.Events(ctx, w.acme, a.ID, 0, 0)
		if err != nil || len(all) != 6 || next != 0 {
			t.Fatalf("events = %d, %d, %v", len(all), next, err)
		}
		for _, e := range all {
			var d map[string]any
			if json.Unmarshal(e.Details, &d) != nil || d["group_id"] != a.ID {
				t.Errorf("event of another group: %+v", e)
			}
		}
		var paged []*cloud.Event
		var after int64
		for range 10 {
			page, n, err := w.svc.Groups.Events(ctx, w.acme, a.ID, after, 4)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, page...)
			if after = n; after == 0 {
				break
			}
		}
		if len(paged) != 6 || paged[5].ID != all[5].ID {
			t.Errorf("paged %d events", len(paged))
		}
		d, err := w.svc.Groups.Describe(ctx, w.acme, a.ID)
		if err != nil || len(d.Events) != 6 || d.Events[5].ID != all[5].ID || len(d.Members) != 0 {
			t.Errorf("describe = %+v, %v", d, err)
		}
	})
}

// TestPutMetrics: custom points are stored with the group and its tenant;
// every invalid point refuses the whole call.
func TestPutMetrics(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		g := w.group(t, w.acme, "web")
		now := w.clock.Now()
		err := w.svc.Groups.PutMetrics(ctx, w.acme, g.ID, []api.MetricPoint{
			{Name: "queue", Value: 12}, {Name: "queue", Value: 9, At: new(now.Add(-30 * time.Minute))}, {Name: "p99.latency-ms", Value: -1.5}})
		if err != nil {
			t.Fatal(err)
		}
		var ps []cloud.MetricPoint
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			var err error
			ps, err = tx.ListMetrics(ctx, cloud.MetricFilter{GroupID: g.ID})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(ps) != 3 || ps[0].Value != 9 || ps[0].TenantID != "tn-acme" || ps[0].Name != "queue" || !ps[1].At.Equal(now) {
			t.Errorf("points = %+v", ps)
		}
		before := w.rows(t)
		many := make([]api.MetricPoint, service.MaxMetricPoints+1)
		for i := range many {
			many[i] = api.MetricPoint{Name: "q", Value: 1}
		}
		for _, tc := range []struct {
			field string
			ps    []api.MetricPoint
		}{
			{"metrics", nil},
			{"metrics", many},
			{"metrics[1].name", []api.MetricPoint{{Name: "q"}, {Name: "Queue"}}},
			{"metrics[0].name", []api.MetricPoint{{Name: "custom:queue"}}},
			{"metrics[0].name", []api.MetricPoint{{Name: cloud.MetricGPUUtilization}}},
			{"metrics[0].name", []api.MetricPoint{{Name: strings.Repeat("q", 65)}}},
			{"metrics[0].value", []api.MetricPoint{{Name: "q", Value: math.NaN()}}},
			{"metrics[0].value", []api.MetricPoint{{Name: "q", Value: math.Inf(1)}}},
			{"metrics[0].at", []api.MetricPoint{{Name: "q", At: new(now.Add(-61 * time.Minute))}}},
			{"metrics[0].at", []api.MetricPoint{{Name: "q", At: new(now.Add(6 * time.Minute))}}},
		} {
			groupField(t, w.svc.Groups.PutMetrics(ctx, w.acme, g.ID, tc.ps), tc.field)
		}
		groupField(t, w.svc.Groups.PutMetrics(ctx, w.acme, "", []api.MetricPoint{{Name: "q"}}), "group_id")
		if w.rows(t) != before {
			t.Error("refused metrics were written")
		}
	})
}

// TestSetProtection sets and clears an instance's protection, keeping the
// workload's lock.
func TestSetProtection(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		in, _, err := w.svc.Instances.Create(ctx, w.acme, api.CreateInstanceRequest{Offering: "l4.1x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		p, err := w.svc.Instances.SetProtection(ctx, w.acme, in.ID, true)
		if err != nil || p.ScaleIn == nil || !p.ScaleIn.Protected || p.Version != in.Version+1 {
			t.Fatalf("protect = %+v, %v", p, err)
		}
		evs, _, _ := w.svc.Instances.Events(ctx, w.acme, in.ID, 0, 100)
		if last := evs[len(evs)-1]; last.Kind != cloud.EventInstanceScaleIn || last.Actor != "u-acme" {
			t.Errorf("event = %+v", last)
		}
		before := w.rows(t)
		if again, err := w.svc.Instances.SetProtection(ctx, w.acme, in.ID, true); err != nil || again.Version != p.Version {
			t.Errorf("protect again = %+v, %v", again, err)
		}
		if w.rows(t) != before {
			t.Error("protecting a protected instance wrote something")
		}
		// A lock the workload holds stays when protection goes.
		lock := &cloud.ScaleLock{Reason: "saving", At: w.clock.Now()}
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			cur, err := tx.GetInstance(ctx, in.ID)
			if err != nil {
				return err
			}
			cur.ScaleIn.Lock = lock
			return tx.UpdateInstance(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
		un, err := w.svc.Instances.SetProtection(ctx, w.admin, in.ID, false)
		if err != nil || un.ScaleIn == nil || un.ScaleIn.Protected || un.ScaleIn.Lock == nil || un.ScaleIn.Lock.Reason != "saving" {
			t.Errorf("unprotect = %+v, %v", un, err)
		}
		if _, err := w.svc.Instances.Act(ctx, w.acme, in.ID, service.Terminate, 0); err != nil {
			t.Fatal(err)
		}
		groupCode(t, groupErr(w.svc.Instances.SetProtection(ctx, w.acme, in.ID, true)), cloud.Conflict)
	})
}

// TestLaunchGroupMember: the controller's launch builds the member from
// the template through CreateInstance, once per sequence number, with its
// volume; the quota refuses it as any instance.
func TestLaunchGroupMember(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		spec := groupSpec()
		spec.Template.VolumeGiB = 20
		g, _, err := w.svc.Groups.Create(ctx, w.acme, spec, "")
		if err != nil {
			t.Fatal(err)
		}
		cat, now := catalog.Default(), w.clock.Now()
		launch := func(l service.LaunchSpec) (*cloud.Instance, error) {
			var in *cloud.Instance
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				var err error
				in, err = service.LaunchGroupMember(ctx, tx, cat, g, l, "groups", now)
				return err
			})
			return in, err
		}
		before := w.rows(t)
		in, err := launch(service.LaunchSpec{Offering: "l40s.1x", Zone: "zone-b", Market: cloud.MarketSpot, Seq: 1})
		if err != nil {
			t.Fatal(err)
		}
		if in.GroupID != g.ID || in.Name != "web-1" || in.Market != cloud.MarketSpot || in.SpotRequestID != "" ||
			in.State != cloud.Pending || in.Offering != "l40s.1x" || !slices.Equal(in.Zones, []string{"zone-b"}) ||
			in.Tags[service.TagGroup] != g.ID || in.Tags[service.TagGroupName] != "web" || in.Tags["team"] != "web" ||
			in.Image != "ghcr.io/acme/web:1" || len(in.Tags) != 3 || in.Env["PORT"] != "8080" || len(in.Volumes) != 1 {
			t.Errorf("member = %+v", in)
		}
		after := w.rows(t)
		if after.Instances != before.Instances+1 || after.Volumes != before.Volumes+1 || after.Attached != before.Attached+1 ||
			after.Events != before.Events+3 {
			t.Errorf("rows %+v -> %+v: want an instance with its attached volume, three events (the volume's creation and attachment, the instance's creation)", before, after)
		}
		var v *cloud.Volume
		_ = st.Tx(ctx, func(tx cloud.Tx) error { v, err = tx.GetVolume(ctx, in.Volumes[0]); return err })
		if v == nil || v.SizeGiB != 20 || v.Zone != "zone-b" || v.InstanceID != in.ID || v.TenantID != "tn-acme" {
			t.Errorf("volume = %+v", v)
		}
		// The same sequence number answers the same member.
		before = w.rows(t)
		if again, err := launch(service.LaunchSpec{Offering: "l40s.1x", Zone: "zone-b", Market: cloud.MarketSpot, Seq: 1}); err != nil || again.ID != in.ID {
			t.Errorf("relaunch = %+v, %v", again, err)
		}
		if w.rows(t) != before {
			t.Error("a repeated launch wrote something")
		}
		// The quota applies.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.PutQuota(ctx, &cloud.Quota{TenantID: "tn-acme", Instances: 1})
		}); err != nil {
			t.Fatal(err)
		}
		before = w.rows(t)
		if _, err := launch(service.LaunchSpec{Offering: "l4.1x", Seq: 2}); cloud.ErrorCode(err) != cloud.QuotaExceeded {
			t.Errorf("launch over quota: %v", err)
		}
		if w.rows(t) != before {
			t.Error("a refused launch wrote something")
		}
		// The member's own volume is deleted with it (its storage stops
		// being billed); a volume the tenant attached is not.
		own, _, err := w.svc.Volumes.Create(ctx, w.acme, api.CreateVolumeRequest{Name: "data", SizeGiB: 5, Zone: "zone-b"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			cur, err := tx.GetInstance(ctx, in.ID)
			if err != nil {
				return err
			}
			o, err := tx.GetVolume(ctx, own.ID)
			if err != nil {
				return err
			}
			o.InstanceID = in.ID
			cur.Volumes = append(cur.Volumes, own.ID)
			if err := tx.UpdateVolume(ctx, o); err != nil {
				return err
			}
			return tx.UpdateInstance(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Walk(t, st, in.ID, cloud.Terminated, testkit.Via{}, w.clock.Now())
		_ = st.Tx(ctx, func(tx cloud.Tx) error { v, err = tx.GetVolume(ctx, in.Volumes[0]); return err })
		if v == nil || v.DeletedAt == nil || v.InstanceID != "" {
			t.Errorf("member volume after the member terminated: %+v", v)
		}
		_ = st.Tx(ctx, func(tx cloud.Tx) error { v, err = tx.GetVolume(ctx, own.ID); return err })
		if v == nil || v.DeletedAt != nil || v.InstanceID != "" {
			t.Errorf("the tenant's volume after the member terminated: %+v", v)
		}
		// A long name is cut to fit.
		long := *g
		long.Name = strings.Repeat("n", 63)
		if name := service.GroupMemberName(&long, 123); len(name) != 63 || !strings.HasSuffix(name, "n-123") {
			t.Errorf("member name %q", name)
		}
	})
}

// TestNoticeGroupMember: the scale-in notice is an interruption with a
// deadline and a group.scaling event; a held member gets none, and a spot
// reclaim's notice stands.
func TestNoticeGroupMember(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		g := w.group(t, w.acme, "web")
		now := w.clock.Now()
		var ins []*cloud.Instance
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			for seq := range int64(3) {
				in, err := service.LaunchGroupMember(ctx, tx, catalog.Default(), g, service.LaunchSpec{Offering: "l4.1x", Seq: seq + 1}, "groups", now)
				if err != nil {
					return err
				}
				ins = append(ins, in)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		notice := func(id string) (*cloud.Instance, error) {
			var in *cloud.Instance
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				var err error
				if in, err = tx.GetInstance(ctx, id); err != nil {
					return err
				}
				return service.NoticeGroupMember(ctx, tx, in, cloud.ReclaimScaleIn, 2*time.Minute, "groups", now)
			})
			return in, err
		}
		in, err := notice(ins[0].ID)
		if err != nil || in.Interruption == nil || in.Interruption.Action != cloud.ActionTerminate ||
			in.Interruption.Reason != cloud.ReclaimScaleIn || !in.Interruption.Deadline.Equal(now.Add(2*time.Minute)) {
			t.Fatalf("notice = %+v, %v", in, err)
		}
		evs, _, _ := w.svc.Groups.Events(ctx, w.acme, g.ID, 0, 0)
		// The event names the member, by ID and name.
		want := "scale-in notice (scale-in) to member " + in.ID + " (" + in.Name + "): terminated at "
		if last := evs[len(evs)-1]; last.Kind != cloud.EventGroupScaling || last.InstanceID != in.ID || in.Name == "" ||
			!strings.HasPrefix(last.Reason, want) {
			t.Errorf("event = %+v, want a reason starting %q", last, want)
		}
		if _, err := w.svc.Instances.SetProtection(ctx, w.acme, ins[1].ID, true); err != nil {
			t.Fatal(err)
		}
		groupCode(t, groupErr(notice(ins[1].ID)), cloud.Conflict)
		// A reclaim's notice stands.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			cur, err := tx.GetInstance(ctx, ins[2].ID)
			if err != nil {
				return err
			}
			cur.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimCapacity, NoticedAt: now, Deadline: now.Add(time.Minute)}
			return tx.UpdateInstance(ctx, cur)
		}); err != nil {
			t.Fatal(err)
		}
		before := w.rows(t)
		if in, err := notice(ins[2].ID); err != nil || in.Interruption.Reason != cloud.ReclaimCapacity {
			t.Errorf("notice over a reclaim = %+v, %v", in, err)
		}
		if w.rows(t) != before {
			t.Error("a notice over a reclaim wrote something")
		}
	})
}

// TestGroupForecast backtests a saved history: none saved and too short
// are unavailable, saying so; 30 hours of a daily cycle give a backtest of
// the hours after the first day, with a small error, and 48 hours ahead.
func TestGroupForecast(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		w := newWorld(t, st)
		ctx := context.Background()
		g := w.group(t, w.acme, "web")
		// Not enough history is unavailable (it comes with time), never a
		// conflict, and says how much is needed and how much there is.
		ce := groupCode(t, groupErr(w.svc.Groups.Forecast(ctx, w.acme, g.ID)), cloud.Unavailable)
		if !strings.Contains(ce.Message, "no saved history") || !strings.Contains(ce.Message, "needs 25 hours") {
			t.Errorf("no history: %q", ce.Message)
		}
		save := func(hours int) {
			h := autoscale.NewHistory()
			end := w.clock.Now()
			for m := hours * 60; m > 0; m-- {
				at := end.Add(-time.Duration(m) * time.Minute)
				day := float64(at.Hour()*60+at.Minute()) / (24 * 60)
				// 1 to 5 instances' worth of load at 0.6 each.
				h.Add("load:gpu", at, 0.6*(3+2*math.Sin(2*math.Pi*day)))
			}
			doc, err := h.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Tx(ctx, func(tx cloud.Tx) error { return tx.PutGroupHistory(ctx, g.ID, doc) }); err != nil {
				t.Fatal(err)
			}
		}
		save(10)
		ce = groupCode(t, groupErr(w.svc.Groups.Forecast(ctx, w.acme, g.ID)), cloud.Unavailable)
		if !strings.Contains(ce.Message, "it needs 25h, there is 10h") || fmt.Sprint(ce.Details["history_seconds"]) != "36000" {
			t.Errorf("10 hours of history: %q %v", ce.Message, ce.Details)
		}
		save(30)
		r, err := w.svc.Groups.Forecast(ctx, w.acme, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(r.Times); n < 4 || n > 6 || len(r.Actual) != n || len(r.Forecast) != n {
			t.Fatalf("%d backtested hours (%d actual, %d forecast), want about 5", n, len(r.Actual), len(r.Forecast))
		}
		if len(r.Ahead) != autoscale.ForecastHours || len(r.AheadValues) != autoscale.ForecastHours {
			t.Fatalf("%d hours ahead, want %d", len(r.Ahead), autoscale.ForecastHours)
		}
		if r.Metric != cloud.MetricGPUUtilization || r.Target != 0.6 || r.History < 29*time.Hour {
			t.Errorf("report of %s at %v over %v", r.Metric, r.Target, r.History)
		}
		for i, a := range r.Actual {
			if a < 0.9 || a > 5.1 {
				t.Errorf("hour %v: actual %.2f instances, outside the cycle's 1..5", r.Times[i], a)
			}
		}
		if !(r.WAPE >= 0 && r.WAPE < 60) || math.IsNaN(r.MAPE) {
			t.Errorf("MAPE %.1f%%, WAPE %.1f%%", r.MAPE, r.WAPE)
		}
		// The admin may read it; another tenant may not (above).
		if _, err := w.svc.Groups.Forecast(ctx, w.admin, g.ID); err != nil {
			t.Errorf("admin: %v", err)
		}
	})
}
