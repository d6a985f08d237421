package storetest

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Autoscaling groups (cloud.GroupTx): groups with versions, idempotency
// keys and names unique among a tenant's live groups; metric points;
// the controller's saved histories; and the group fields of instances.

// fullGroup has every field set. Its times have nanoseconds and a zone, and
// its template's empty lists and maps are nil, which is what JSON keeps of
// them (see testGroupNormalization for the rest).
func fullGroup(id, tenant, name, key string) *cloud.Group {
	lo, hi := 0.1, 0.3
	return &cloud.Group{
		ID: id, TenantID: tenant, Name: name,
		Template: cloud.GroupTemplate{
			Offerings: []string{"h100.8x", "a100.8x"}, Image: "ghcr.io/acme/train:1",
			Command: []string{"python", "train.py"}, Env: map[string]string{"NCCL_DEBUG": "INFO", "EMPTY": ""},
			Zones: []string{"eu-1a"}, Labels: []string{"ib"}, Tags: map[string]string{"team": "ml", "ünïcode": "✓"},
			VolumeGiB: 500,
		},
		Min: 1, Max: 10, Desired: 3,
		Policies: []cloud.ScalingPolicy{
			{Name: "gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.1 + 0.2},
			{Name: "burst", Type: cloud.PolicyStep, Metric: cloud.MetricGPUOrCPU, Target: 0.7, CooldownSeconds: 60,
				Steps: []cloud.StepAdjustment{{Upper: &lo, Change: -10}, {Lower: &lo, Upper: &hi, Change: 20}, {Lower: &hi, Change: 50}}},
			{Name: "nights", Type: cloud.PolicyScheduled, Cron: "0 22 * * 1-5", TimeZone: "Europe/Paris",
				SetMin: ptr(0), SetMax: ptr(2), SetDesired: ptr(0)},
			{Name: "forecast", Type: cloud.PolicyPredictive, Metric: "custom:queue", Target: 12, ForecastOnly: true,
				BufferSeconds: 300},
		},
		Mixed: cloud.MixedInstances{OnDemandBase: 1, OnDemandPercent: 25, Spot: true, MaxSpotPriceRatio: 70,
			CapacityRebalance: true},
		Timing:        cloud.GroupTiming{CooldownSeconds: 300, WarmupSeconds: 120, StabilizationSeconds: 600, NoticeSeconds: 90},
		BudgetPerHour: bigMoney,
		IdleRelease:   &cloud.IdleRelease{Threshold: 0.05, IdleSeconds: 1800},
		State:         cloud.GroupActive,
		Status: cloud.GroupStatus{
			Decisions: []cloud.GroupDecision{
				{Time: t0, From: 1, To: 3, Policy: "gpu", Metrics: map[string]float64{"gpu_utilization": 0.91},
					Forecast: 2.5, Reason: "utilization 0.91 above 0.3"},
				{Time: t0.Add(time.Minute), From: 3, To: 3, Limit: "max", Reason: "held"},
			},
			Backoff:      &cloud.GroupBackoff{Failures: 2, Until: t0.Add(5 * time.Minute), Reason: "image pull failed"},
			LastActionAt: t0, LaunchSeq: 7, Message: "launched 2",
		},
		IdempotencyKey: key,
		CreatedAt:      t0, UpdatedAt: t0.Add(time.Second),
	}
}

// smallGroup is a fixed-size group with nothing optional set.
func smallGroup(id, tenant, name string) *cloud.Group {
	return &cloud.Group{ID: id, TenantID: tenant, Name: name, Template: cloud.GroupTemplate{Offerings: []string{"l4.1x"}},
		Min: 2, Max: 2, Desired: 2, State: cloud.GroupActive, CreatedAt: t0, UpdatedAt: t0}
}

// stored is what the stores keep of a fixture group: its times in UTC
// microseconds.
func stored(g *cloud.Group) *cloud.Group {
	c := *g
	c.CreatedAt, c.UpdatedAt, c.Status.LastActionAt = us(g.CreatedAt), us(g.UpdatedAt), us(g.Status.LastActionAt)
	if g.Status.Decisions != nil {
		c.Status.Decisions = append([]cloud.GroupDecision(nil), g.Status.Decisions...)
		for i := range c.Status.Decisions {
			c.Status.Decisions[i].Time = us(c.Status.Decisions[i].Time)
		}
	}
	if g.Status.Backoff != nil {
		b := *g.Status.Backoff
		b.Until = us(b.Until)
		c.Status.Backoff = &b
	}
	return &c
}

func getGroup(t *testing.T, s cloud.Store, id string) *cloud.Group {
	t.Helper()
	return mustRead(t, s, func(tx cloud.Tx) (*cloud.Group, error) { return tx.GetGroup(ctx, id) })
}

func groupIDs(t *testing.T, s cloud.Store, f cloud.GroupFilter) []string {
	t.Helper()
	gs := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Group, error) { return tx.ListGroups(ctx, f) })
	out := []string{}
	want := []cloud.RowVersion{}
	for _, g := range gs {
		out = append(out, g.ID)
		want = append(want, cloud.RowVersion{ID: g.ID, Version: g.Version})
	}
	// GroupVersions reads the same rows, their IDs and versions alone.
	vs := mustRead(t, s, func(tx cloud.Tx) ([]cloud.RowVersion, error) { return tx.GroupVersions(ctx, f) })
	wantEqual(t, fmt.Sprintf("GroupVersions(%+v)", f), vs, want)
	return out
}

func createGroups(t *testing.T, s cloud.Store, gs ...*cloud.Group) {
	t.Helper()
	inTx(t, s, func(tx cloud.Tx) error {
		for _, g := range gs {
			if err := tx.CreateGroup(ctx, g); err != nil {
				return err
			}
		}
		return nil
	})
}

// testGroups creates g-1 (the full fixture, key "k") and g-2 of t-1 and
// g-0 of t-2, then updates and lists them.
func testGroups(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	full := fullGroup("g-1", "t-1", "train", "k")
	small := smallGroup("g-0", "t-2", "train") // another tenant's group of the same name
	small.Version = 9                          // ignored: a new group has version 1
	empty := smallGroup("g-2", "t-1", "empty")
	empty.Policies = []cloud.ScalingPolicy{}
	createGroups(t, s, full, small, empty)
	for _, g := range []*cloud.Group{full, small, empty} {
		if g.Version != 1 {
			t.Errorf("%s: CreateGroup set Version %d, want 1", g.ID, g.Version)
		}
		wantEqual(t, "GetGroup "+g.ID, getGroup(t, s, g.ID), g)
	}
	want := stored(fullGroup("g-1", "t-1", "train", "k"))
	want.Version = 1
	wantEqual(t, "the fixture round-trips, its times in UTC microseconds", full, want)
	if empty.Policies == nil || len(empty.Policies) != 0 || small.Policies != nil {
		t.Errorf("empty and nil policies must stay apart: %#v, %#v", empty.Policies, small.Policies)
	}
	byKey := mustRead(t, s, func(tx cloud.Tx) (*cloud.Group, error) { return tx.GroupByKey(ctx, "t-1", "k") })
	wantEqual(t, "GroupByKey", byKey, full)
	for _, c := range []struct{ tenant, key string }{{"t-2", "k"}, {"t-1", "other"}, {"t-1", ""}} {
		_, err := read(t, s, func(tx cloud.Tx) (*cloud.Group, error) { return tx.GroupByKey(ctx, c.tenant, c.key) })
		wantCode(t, fmt.Sprintf("GroupByKey(%q, %q)", c.tenant, c.key), err, cloud.NotFound, "")
	}
	_, err := read(t, s, func(tx cloud.Tx) (*cloud.Group, error) { return tx.GetGroup(ctx, "g-9") })
	wantCode(t, "a missing group", err, cloud.NotFound, "group g-9 not found")
	groupUpdates(t, s)
	groupLists(t, s)
}

// groupUpdates updates g-1: the version is checked and bumped, the fixed
// fields are kept.
func groupUpdates(t *testing.T, s cloud.Store) {
	cur := getGroup(t, s, "g-1")
	cur.Name, cur.State, cur.Min, cur.Max, cur.Desired = "train-2", cloud.GroupDeleting, 0, 4, 0
	cur.Policies, cur.IdleRelease, cur.BudgetPerHour = nil, nil, 0
	cur.Template.Offerings = []string{"h200.8x"}
	cur.Mixed, cur.Timing = cloud.MixedInstances{}, cloud.GroupTiming{NoticeSeconds: 30}
	cur.Status.Decisions = append(cur.Status.Decisions, cloud.GroupDecision{Time: t0.Add(time.Hour), From: 3, To: 0,
		Reason: "deleting"})
	cur.Status.Backoff, cur.Status.LaunchSeq = nil, 8
	cur.UpdatedAt = t0.Add(time.Hour)
	cur.TenantID, cur.IdempotencyKey, cur.CreatedAt = "t-2", "other", t0.Add(time.Hour)
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, cur) })
	if cur.Version != 2 {
		t.Errorf("UpdateGroup set Version %d, want 2", cur.Version)
	}
	if tm := cur.Status.Decisions[2].Time; tm != us(t0.Add(time.Hour)) {
		t.Errorf("UpdateGroup: a decision's time is %v, want it in UTC microseconds", tm)
	}
	got := getGroup(t, s, "g-1")
	exp := *cur
	exp.TenantID, exp.IdempotencyKey, exp.CreatedAt = "t-1", "k", us(t0)
	exp.UpdatedAt = us(t0.Add(time.Hour))
	wantEqual(t, "the update is written, the fixed fields are not", got, &exp)

	stale := *got
	stale.Version, stale.Desired = 1, 1
	err := try(s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, &stale) })
	wantCode(t, "a stale version", err, cloud.Conflict, "group g-1")
	if ce, ok := err.(*cloud.Error); !ok || ce.Details["version"] != int64(2) {
		t.Errorf("the conflict carries the stored version: %#v", err)
	}
	wantEqual(t, "a stale update changes nothing", getGroup(t, s, "g-1"), got)
	missing := smallGroup("g-9", "t-1", "nine")
	missing.Version = 1
	wantCode(t, "updating a missing group", try(s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, missing) }),
		cloud.NotFound, "group g-9 not found")
}

// groupLists lists the groups in ID order; a tenant sees only its own.
func groupLists(t *testing.T, s cloud.Store) {
	for _, c := range []struct {
		desc string
		f    cloud.GroupFilter
		want []string
	}{
		{"all groups (ID order)", cloud.GroupFilter{}, []string{"g-0", "g-1", "g-2"}},
		{"by tenant", cloud.GroupFilter{TenantID: "t-1"}, []string{"g-1", "g-2"}},
		{"another tenant", cloud.GroupFilter{TenantID: "t-2"}, []string{"g-0"}},
		{"by state", cloud.GroupFilter{States: []cloud.GroupState{cloud.GroupActive}}, []string{"g-0", "g-2"}},
		{"by states and tenant", cloud.GroupFilter{TenantID: "t-1",
			States: []cloud.GroupState{cloud.GroupDeleting, cloud.GroupDeleted}}, []string{"g-1"}},
		{"nothing matches", cloud.GroupFilter{TenantID: "t-9"}, []string{}},
		{"by IDs", cloud.GroupFilter{IDs: []string{"g-2", "g-0", "g-9"}}, []string{"g-0", "g-2"}},
		{"by IDs and tenant", cloud.GroupFilter{TenantID: "t-1", IDs: []string{"g-2", "g-0"}}, []string{"g-2"}},
	} {
		wantEqual(t, c.desc, groupIDs(t, s, c.f), c.want)
	}
	other := getGroup(t, s, "g-0")
	wantEqual(t, "another tenant's group is its own row", other.TenantID+"/"+other.Name, "t-2/train")
}

// testGroupNormalization checks that a write leaves the caller's group as
// it reads back: empty lists and maps of the documents become what JSON
// keeps of them, and the given values are copied, not shared.
func testGroupNormalization(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	g := smallGroup("g-1", "t-1", "a")
	g.Template.Env, g.Template.Command = map[string]string{}, []string{}
	backoff := &cloud.GroupBackoff{Failures: 1, Until: t0}
	idle := &cloud.IdleRelease{Threshold: 0.1, IdleSeconds: 60}
	g.Status.Backoff, g.IdleRelease = backoff, idle
	createGroups(t, s, g)
	wantEqual(t, "CreateGroup normalizes the group to what reads back", getGroup(t, s, "g-1"), g)
	if g.Template.Env != nil || g.Template.Command != nil {
		t.Errorf("the template's empty env and command are %#v and %#v, want nil (what JSON keeps)",
			g.Template.Env, g.Template.Command)
	}
	if g.Status.Backoff == backoff || backoff.Until != t0 || g.IdleRelease == idle {
		t.Errorf("CreateGroup must normalize copies, not the caller's shared values")
	}
	g.Template.Tags = map[string]string{}
	g.Status.Decisions = []cloud.GroupDecision{{Time: t0, Reason: "r", Metrics: map[string]float64{}}}
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, g) })
	wantEqual(t, "UpdateGroup normalizes the group to what reads back", getGroup(t, s, "g-1"), g)
}

func testGroupIdempotency(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	first := fullGroup("g-1", "t-1", "train", "k")
	createGroups(t, s, first)
	for _, c := range []struct {
		desc string
		g    *cloud.Group
	}{
		{"a repeated key", smallGroup("g-2", "t-1", "other")},
		// The key is looked up before the name: a retry is a retry, not a
		// clash with the group it created.
		{"a repeated key and name", smallGroup("g-2", "t-1", "train")},
		{"a repeated key and ID", smallGroup("g-1", "t-1", "train")},
	} {
		c.g.IdempotencyKey = "k"
		wantExisting(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateGroup(ctx, c.g) }), "g-1")
		wantEqual(t, c.desc+": the struct now holds the first group", c.g, first)
	}
	// A retry in a transaction that goes on: it wrote nothing, so the
	// transaction can still commit other work.
	inTx(t, s, func(tx cloud.Tx) error {
		g := smallGroup("g-3", "t-1", "x")
		g.IdempotencyKey = "k"
		if err := tx.CreateGroup(ctx, g); !cloud.IsConflict(err) {
			return fmt.Errorf("retry in a transaction: %v, want a Conflict", err)
		}
		return tx.CreateGroup(ctx, smallGroup("g-4", "t-1", "y"))
	})
	// Keys are per tenant; the empty key never conflicts.
	other := smallGroup("g-5", "t-2", "train")
	other.IdempotencyKey = "k"
	createGroups(t, s, other, smallGroup("g-6", "t-1", "z1"), smallGroup("g-7", "t-1", "z2"))
	wantEqual(t, "groups after the retries", groupIDs(t, s, cloud.GroupFilter{}),
		[]string{"g-1", "g-4", "g-5", "g-6", "g-7"})
	// A deleted group still holds its key.
	del := getGroup(t, s, "g-1")
	del.State = cloud.GroupDeleted
	inTx(t, s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, del) })
	retry := smallGroup("g-8", "t-1", "train")
	retry.IdempotencyKey = "k"
	wantExisting(t, "a repeated key of a deleted group",
		try(s, func(tx cloud.Tx) error { return tx.CreateGroup(ctx, retry) }), "g-1")
	wantEqual(t, "the struct holds the deleted group", retry, del)
	// A duplicate ID without a key is a plain conflict.
	err := try(s, func(tx cloud.Tx) error { return tx.CreateGroup(ctx, smallGroup("g-4", "t-1", "new")) })
	wantCode(t, "a duplicate ID", err, cloud.Conflict, "group g-4 already exists")
	if ce, ok := err.(*cloud.Error); ok && ce.Details["existing_id"] != nil {
		t.Errorf("a duplicate ID carries existing_id %v", ce.Details["existing_id"])
	}
}

// testGroupNames: a live group's name is unique per tenant; a deleted
// group frees it.
func testGroupNames(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1", "t-2")
	createGroups(t, s, smallGroup("g-1", "t-1", "web"), smallGroup("g-2", "t-1", "batch"),
		smallGroup("g-3", "t-2", "web"))
	nameConflict := func(desc string, err error) {
		t.Helper()
		wantCode(t, desc, err, cloud.Conflict, `group named "web"`)
		if ce, ok := err.(*cloud.Error); ok && ce.Details["existing_id"] != nil {
			t.Errorf("%s: a name conflict carries existing_id %v (it is no idempotent retry)", desc, ce.Details["existing_id"])
		}
	}
	create := func(g *cloud.Group) error { return try(s, func(tx cloud.Tx) error { return tx.CreateGroup(ctx, g) }) }
	update := func(g *cloud.Group) error { return try(s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, g) }) }

	nameConflict("a live name", create(smallGroup("g-4", "t-1", "web")))
	withKey := smallGroup("g-4", "t-1", "web")
	withKey.IdempotencyKey = "new"
	nameConflict("a live name with a new key", create(withKey))
	// A transaction that met a name conflict can go on.
	inTx(t, s, func(tx cloud.Tx) error {
		if err := tx.CreateGroup(ctx, smallGroup("g-4", "t-1", "web")); !cloud.IsConflict(err) {
			return fmt.Errorf("a live name in a transaction: %v, want a Conflict", err)
		}
		return tx.CreateGroup(ctx, smallGroup("g-5", "t-1", "other"))
	})
	renamed := getGroup(t, s, "g-2")
	renamed.Name = "web"
	nameConflict("a rename to a live name", update(renamed))
	wantEqual(t, "the refused rename changed nothing", getGroup(t, s, "g-2").Name, "batch")

	// Deleting still holds the name; deleted frees it.
	g1 := getGroup(t, s, "g-1")
	g1.State = cloud.GroupDeleting
	if err := update(g1); err != nil {
		t.Fatalf("deleting: %v", err)
	}
	nameConflict("the name of a deleting group", create(smallGroup("g-6", "t-1", "web")))
	g1.State = cloud.GroupDeleted
	if err := update(g1); err != nil {
		t.Fatalf("deleted: %v", err)
	}
	if err := create(smallGroup("g-6", "t-1", "web")); err != nil {
		t.Fatalf("the name of a deleted group: %v", err)
	}
	// Two deleted groups may share a name; a deleted one that comes back
	// to life may not take a live name.
	g6 := getGroup(t, s, "g-6")
	g6.State = cloud.GroupDeleted
	if err := update(g6); err != nil {
		t.Fatalf("a second deleted web: %v", err)
	}
	if err := create(smallGroup("g-7", "t-1", "web")); err != nil {
		t.Fatalf("a third web: %v", err)
	}
	g1.State = cloud.GroupActive
	nameConflict("reviving a deleted group onto a live name", update(g1))
	// A group keeps its own name through updates.
	g7 := getGroup(t, s, "g-7")
	g7.Desired = 2
	if err := update(g7); err != nil {
		t.Errorf("an update that keeps the name: %v", err)
	}
	wantEqual(t, "t-1's groups", groupIDs(t, s, cloud.GroupFilter{TenantID: "t-1"}),
		[]string{"g-1", "g-2", "g-5", "g-6", "g-7"})
	wantEqual(t, "t-1's live groups", groupIDs(t, s, cloud.GroupFilter{TenantID: "t-1",
		States: []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting}}), []string{"g-2", "g-5", "g-7"})
}

func testGroupErrors(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	createGroups(t, s, smallGroup("g-1", "t-1", "one"))
	before := getGroup(t, s, "g-1")
	for _, c := range []struct {
		desc   string
		change func(*cloud.Group)
		code   cloud.Code
		msg    string
	}{
		{"no id", func(g *cloud.Group) { g.ID = "" }, cloud.Invalid, "no id"},
		{"no tenant", func(g *cloud.Group) { g.TenantID = "" }, cloud.Invalid, "no tenant"},
		{"no name", func(g *cloud.Group) { g.Name = "" }, cloud.Invalid, "no name"},
		{"an unknown state", func(g *cloud.Group) { g.State = "paused" }, cloud.Invalid, "paused"},
		{"no state", func(g *cloud.Group) { g.State = "" }, cloud.Invalid, "state"},
		{"a negative min", func(g *cloud.Group) { g.Min, g.Desired = -1, 0 }, cloud.Invalid, "min -1"},
		{"min above max", func(g *cloud.Group) { g.Min, g.Max, g.Desired = 3, 2, 2 }, cloud.Invalid, "min 3"},
		{"desired under min", func(g *cloud.Group) { g.Min, g.Max, g.Desired = 2, 4, 1 }, cloud.Invalid, "desired 1"},
		{"desired above max", func(g *cloud.Group) { g.Min, g.Max, g.Desired = 0, 4, 5 }, cloud.Invalid, "desired 5"},
		{"a negative budget", func(g *cloud.Group) { g.BudgetPerHour = -1 }, cloud.Invalid, "budget"},
		{"a target that JSON cannot hold", func(g *cloud.Group) {
			g.Policies = []cloud.ScalingPolicy{{Type: cloud.PolicyTarget, Target: math.NaN()}}
		}, cloud.Invalid, ""},
		{"a missing tenant", func(g *cloud.Group) { g.TenantID = "t-9" }, cloud.NotFound, "tenant t-9"},
	} {
		g := smallGroup("g-2", "t-1", "two")
		c.change(g)
		wantCode(t, "create with "+c.desc, try(s, func(tx cloud.Tx) error { return tx.CreateGroup(ctx, g) }), c.code, c.msg)
		if c.code == cloud.NotFound {
			continue // the tenant is fixed at creation: an update ignores it
		}
		u := *before
		c.change(&u)
		if u.ID == "" {
			continue
		}
		wantCode(t, "update with "+c.desc, try(s, func(tx cloud.Tx) error { return tx.UpdateGroup(ctx, &u) }), c.code, c.msg)
	}
	wantEqual(t, "nothing was written", groupIDs(t, s, cloud.GroupFilter{}), []string{"g-1"})
	wantEqual(t, "g-1 is unchanged", getGroup(t, s, "g-1"), before)
	// Zero sizes are valid: a group scaled to nothing.
	zero := smallGroup("g-3", "t-1", "zero")
	zero.Min, zero.Max, zero.Desired = 0, 0, 0
	createGroups(t, s, zero)
}

func testMetrics(t *testing.T, s cloud.Store) {
	at := func(s int) time.Time { return us(t0.Add(time.Duration(s) * time.Second)) }
	gpu := func(tenant, inst string, s int, v float64) cloud.MetricPoint {
		return cloud.MetricPoint{TenantID: tenant, Name: cloud.MetricGPUUtilization, InstanceID: inst, At: at(s), Value: v}
	}
	custom := func(tenant, group string, s int, v float64) cloud.MetricPoint {
		return cloud.MetricPoint{TenantID: tenant, Name: "custom:queue", GroupID: group, At: at(s), Value: v}
	}
	list := func(f cloud.MetricFilter) []cloud.MetricPoint {
		t.Helper()
		return mustRead(t, s, func(tx cloud.Tx) ([]cloud.MetricPoint, error) { return tx.ListMetrics(ctx, f) })
	}
	wantEqual(t, "no points", list(cloud.MetricFilter{}), []cloud.MetricPoint{})
	first := []cloud.MetricPoint{
		gpu("t-1", "i-1", 10, 0.5), custom("t-1", "g-1", 10, 42), gpu("t-1", "i-2", 0, 0.1+0.2),
		custom("t-2", "g-2", 5, -1.5),
		// A point of both an instance and a group.
		{TenantID: "t-1", Name: cloud.MetricCPUUtilization, InstanceID: "i-1", GroupID: "g-1", At: at(10), Value: 1e-300},
	}
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendMetrics(ctx, first) })
	// A time with nanoseconds and a zone is kept as UTC microseconds.
	inTx(t, s, func(tx cloud.Tx) error {
		return tx.AppendMetrics(ctx, []cloud.MetricPoint{{TenantID: "t-1", Name: "custom:queue", GroupID: "g-1",
			At: t0.Add(20 * time.Second), Value: math.MaxFloat64}})
	})
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendMetrics(ctx, nil) })
	last := custom("t-1", "g-1", 20, math.MaxFloat64)
	all := []cloud.MetricPoint{first[2], first[3], first[0], first[1], first[4], last}
	for _, c := range []struct {
		desc string
		f    cloud.MetricFilter
		want []cloud.MetricPoint
	}{
		{"all, in time then insertion order", cloud.MetricFilter{}, all},
		{"by tenant", cloud.MetricFilter{TenantID: "t-2"}, all[1:2]},
		{"by group", cloud.MetricFilter{GroupID: "g-1"}, []cloud.MetricPoint{first[1], first[4], last}},
		{"by tenant and group", cloud.MetricFilter{TenantID: "t-2", GroupID: "g-1"}, []cloud.MetricPoint{}},
		{"After is strict", cloud.MetricFilter{After: at(10)}, []cloud.MetricPoint{last}},
		{"After with nanoseconds and a zone", cloud.MetricFilter{After: t0.Add(9 * time.Second)}, all[2:]},
		{"a limit", cloud.MetricFilter{TenantID: "t-1", Limit: 3}, []cloud.MetricPoint{first[2], first[0], first[1]}},
		{"everything", cloud.MetricFilter{TenantID: "t-1", GroupID: "g-1", After: at(-1), Limit: 99},
			[]cloud.MetricPoint{first[1], first[4], last}},
	} {
		wantEqual(t, c.desc, list(c.f), c.want)
	}
	_, err := read(t, s, func(tx cloud.Tx) ([]cloud.MetricPoint, error) {
		return tx.ListMetrics(ctx, cloud.MetricFilter{Limit: -1})
	})
	wantCode(t, "a negative limit", err, cloud.Invalid, "")

	// A bad point fails the whole call, wherever it is.
	good := gpu("t-1", "i-1", 30, 1)
	for _, c := range []struct {
		desc string
		p    cloud.MetricPoint
	}{
		{"no tenant", cloud.MetricPoint{Name: "x", InstanceID: "i-1"}},
		{"no name", cloud.MetricPoint{TenantID: "t-1", InstanceID: "i-1"}},
		{"neither instance nor group", cloud.MetricPoint{TenantID: "t-1", Name: "x"}},
		{"NaN", cloud.MetricPoint{TenantID: "t-1", Name: "x", GroupID: "g-1", Value: math.NaN()}},
		{"infinity", cloud.MetricPoint{TenantID: "t-1", Name: "x", GroupID: "g-1", Value: math.Inf(-1)}},
	} {
		for _, batch := range [][]cloud.MetricPoint{{c.p}, {good, c.p}, append(manyPoints(300), c.p)} {
			wantCode(t, c.desc, try(s, func(tx cloud.Tx) error { return tx.AppendMetrics(ctx, batch) }), cloud.Invalid, "")
		}
	}
	wantEqual(t, "refused points wrote nothing", list(cloud.MetricFilter{}), all)

	// More points than one statement holds keep their order.
	many := manyPoints(700)
	inTx(t, s, func(tx cloud.Tx) error { return tx.AppendMetrics(ctx, many) })
	wantEqual(t, "a large batch in insertion order", list(cloud.MetricFilter{TenantID: "t-3"}), many)

	// Pruning is by time, strict, across tenants.
	var n int64
	inTx(t, s, func(tx cloud.Tx) (err error) { n, err = tx.PruneMetrics(ctx, at(10)); return })
	if n != 2 {
		t.Errorf("PruneMetrics removed %d points, want 2", n)
	}
	wantEqual(t, "after pruning", list(cloud.MetricFilter{TenantID: "t-1"}), []cloud.MetricPoint{first[0], first[1], first[4], last})
	inTx(t, s, func(tx cloud.Tx) (err error) { n, err = tx.PruneMetrics(ctx, t0.Add(time.Hour)); return })
	if n != 4+700 {
		t.Errorf("PruneMetrics removed %d points, want %d", n, 4+700)
	}
	wantEqual(t, "after pruning everything", list(cloud.MetricFilter{}), []cloud.MetricPoint{})
	inTx(t, s, func(tx cloud.Tx) (err error) { n, err = tx.PruneMetrics(ctx, t0.Add(time.Hour)); return })
	if n != 0 {
		t.Errorf("pruning nothing removed %d points", n)
	}
}

// manyPoints are n points of tenant t-3, all at one time, so that only the
// insertion order orders them.
func manyPoints(n int) []cloud.MetricPoint {
	out := make([]cloud.MetricPoint, n)
	for i := range out {
		out[i] = cloud.MetricPoint{TenantID: "t-3", Name: cloud.MetricGPUUtilization,
			InstanceID: fmt.Sprintf("i-%03d", n-i), At: us(t0.Add(30 * time.Minute)), Value: float64(i) / 7}
	}
	return out
}

func testGroupHistory(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	createGroups(t, s, smallGroup("g-1", "t-1", "a"), smallGroup("g-2", "t-1", "b"))
	get := func(id string) ([]byte, error) {
		return read(t, s, func(tx cloud.Tx) ([]byte, error) { return tx.GroupHistory(ctx, id) })
	}
	put := func(id string, doc []byte) error {
		return try(s, func(tx cloud.Tx) error { return tx.PutGroupHistory(ctx, id, doc) })
	}
	_, err := get("g-1")
	wantCode(t, "no history yet", err, cloud.NotFound, "g-1")
	binary := []byte{0, 1, 2, 0xff, '{', '"'}
	for _, c := range []struct {
		desc string
		id   string
		doc  []byte
	}{
		{"a document", "g-1", []byte(`{"demand":[1,2,3]}`)},
		{"another group's", "g-2", binary},
		{"an overwrite", "g-1", []byte(`{"demand":[4]}`)},
		{"an empty document", "g-2", []byte{}},
		{"a bigger one", "g-2", make([]byte, 1<<20)},
	} {
		if err := put(c.id, c.doc); err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		got, err := get(c.id)
		if err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		wantEqual(t, c.desc, got, c.doc)
	}
	got, _ := get("g-1")
	wantEqual(t, "g-1 kept its own", string(got), `{"demand":[4]}`)
	wantCode(t, "the history of a missing group", put("g-9", []byte("x")), cloud.NotFound, "group g-9")
	_, err = get("g-9")
	wantCode(t, "reading a missing group's history", err, cloud.NotFound, "")
	// The history of a transaction that fails is not saved.
	err = try(s, func(tx cloud.Tx) error {
		if err := tx.PutGroupHistory(ctx, "g-1", []byte("lost")); err != nil {
			return err
		}
		return errSentinel
	})
	if err != errSentinel {
		t.Errorf("Tx = %v, want the sentinel", err)
	}
	got, _ = get("g-1")
	wantEqual(t, "a rolled back put", string(got), `{"demand":[4]}`)
}

// testGroupInstances: an instance's group and scale-in protection
// round-trip through every write, and select instances.
// testGroupInstances checks that instances keep their group and scale-in
// state through CreateInstance, UpdateInstance and UpdateInstances, and
// that the group filters see each change. The steps run in this order on
// one store.
func testGroupInstances(t *testing.T, s cloud.Store) {
	seedTenants(t, s, "t-1")
	groupInstancesCreate(t, s)
	groupInstancesUpdate(t, s)
	groupInstancesBatch(t, s)
}

// groupInstancesCreate creates i-1 and i-2 in g-1, i-3 in g-2 and i-4 in
// no group.
func groupInstancesCreate(t *testing.T, s cloud.Store) {
	lock := &cloud.ScaleLock{Reason: "saving step 1200", At: t0}
	ins := []*cloud.Instance{
		{ID: "i-1", TenantID: "t-1", State: cloud.Running, GroupID: "g-1",
			ScaleIn: &cloud.ScaleIn{Protected: true, Lock: lock}},
		{ID: "i-2", TenantID: "t-1", State: cloud.Running, GroupID: "g-1"},
		{ID: "i-3", TenantID: "t-1", State: cloud.Pending, GroupID: "g-2", ScaleIn: &cloud.ScaleIn{}},
		{ID: "i-4", TenantID: "t-1", State: cloud.Running},
	}
	inTx(t, s, func(tx cloud.Tx) error {
		for _, in := range ins {
			if err := tx.CreateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	if ins[0].ScaleIn.Lock == lock || ins[0].ScaleIn.Lock.At != us(t0) || lock.At != t0 {
		t.Errorf("CreateInstance: the lock must be a normalized copy: %+v (given %+v)", ins[0].ScaleIn.Lock, lock)
	}
	for _, in := range ins {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, in.ID) })
		wantEqual(t, "instance "+in.ID, got, in)
	}
	if ins[1].ScaleIn != nil || ins[2].ScaleIn == nil || ins[2].ScaleIn.Held() {
		t.Errorf("nil and empty scale-in must stay apart: %+v, %+v", ins[1].ScaleIn, ins[2].ScaleIn)
	}
	checkGroupFilters(t, s, "after create", map[string][]string{
		"g-1": {"i-1", "i-2"}, "g-2": {"i-3"}, "g-9": {}, "in a group": {"i-1", "i-2", "i-3"},
		"g-1 running": {"i-1", "i-2"}, "in a group, paged": {"i-2"},
		"by IDs": {"i-2", "i-4"}, "by IDs in a group": {"i-1", "i-2"},
	})
}

// checkGroupFilters lists the instances with each group filter (want is
// keyed by the filter's name) through ListInstances, InstanceIDs and
// InstanceVersions.
func checkGroupFilters(t *testing.T, s cloud.Store, desc string, want map[string][]string) {
	t.Helper()
	for _, c := range []struct {
		name string
		f    cloud.InstanceFilter
	}{
		{"g-1", cloud.InstanceFilter{GroupID: "g-1"}},
		{"g-2", cloud.InstanceFilter{GroupID: "g-2"}},
		{"g-9", cloud.InstanceFilter{GroupID: "g-9"}},
		{"in a group", cloud.InstanceFilter{InGroup: true}},
		{"g-1 running", cloud.InstanceFilter{GroupID: "g-1", States: []cloud.State{cloud.Running}}},
		{"in a group, paged", cloud.InstanceFilter{InGroup: true, AfterID: "i-1", Limit: 1}},
		{"by IDs", cloud.InstanceFilter{IDs: []string{"i-4", "i-2", "i-9"}}},
		{"by IDs in a group", cloud.InstanceFilter{IDs: []string{"i-4", "i-2", "i-1"}, InGroup: true}},
	} {
		got := mustRead(t, s, func(tx cloud.Tx) ([]*cloud.Instance, error) { return tx.ListInstances(ctx, c.f) })
		wantEqual(t, desc+": "+c.name, ids(got), want[c.name])
		only := mustRead(t, s, func(tx cloud.Tx) ([]string, error) { return tx.InstanceIDs(ctx, c.f) })
		wantEqual(t, desc+": "+c.name+" (InstanceIDs)", only, want[c.name])
		vs := mustRead(t, s, func(tx cloud.Tx) ([]cloud.RowVersion, error) { return tx.InstanceVersions(ctx, c.f) })
		wantVs := []cloud.RowVersion{}
		for _, in := range got {
			wantVs = append(wantVs, cloud.RowVersion{ID: in.ID, Version: in.Version})
		}
		wantEqual(t, desc+": "+c.name+" (InstanceVersions)", vs, wantVs)
	}
}

// groupInstancesUpdate has UpdateInstance write both group and scale-in
// state: a lock taken, protection dropped, a member leaving its group.
func groupInstancesUpdate(t *testing.T, s cloud.Store) {
	in := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-2") })
	lock2 := &cloud.ScaleLock{At: t0.Add(time.Minute)}
	in.ScaleIn = &cloud.ScaleIn{Lock: lock2}
	in4 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-4") })
	in4.GroupID = "g-2"
	in1 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-1") })
	in1.GroupID, in1.ScaleIn = "", nil
	inTx(t, s, func(tx cloud.Tx) error {
		for _, in := range []*cloud.Instance{in, in4, in1} {
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
		}
		return nil
	})
	if in.ScaleIn.Lock == lock2 || in.ScaleIn.Lock.At != us(lock2.At) {
		t.Errorf("UpdateInstance: the lock must be a normalized copy: %+v", in.ScaleIn.Lock)
	}
	for _, want := range []*cloud.Instance{in, in4, in1} {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, want.ID) })
		wantEqual(t, "UpdateInstance "+want.ID, got, want)
	}
	checkGroupFilters(t, s, "after UpdateInstance", map[string][]string{
		"g-1": {"i-2"}, "g-2": {"i-3", "i-4"}, "g-9": {}, "in a group": {"i-2", "i-3", "i-4"},
		"g-1 running": {"i-2"}, "in a group, paged": {"i-2"},
		"by IDs": {"i-2", "i-4"}, "by IDs in a group": {"i-2", "i-4"},
	})
}

// groupInstancesBatch has UpdateInstances write them too, in one batch,
// with a stale one left alone.
func groupInstancesBatch(t *testing.T, s cloud.Store) {
	batch := []*cloud.Instance{}
	for _, id := range []string{"i-1", "i-2", "i-3", "i-4"} {
		batch = append(batch, mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, id) }))
	}
	lock3 := &cloud.ScaleLock{Reason: "checkpoint", At: t0.Add(2 * time.Minute)}
	batch[0].GroupID, batch[0].ScaleIn = "g-9", &cloud.ScaleIn{Lock: lock3}
	batch[1].GroupID, batch[1].ScaleIn = "", nil
	batch[2].ScaleIn = &cloud.ScaleIn{Protected: true}
	batch[3].GroupID, batch[3].Version = "g-1", batch[3].Version-1 // stale
	before4 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-4") })
	inTx(t, s, func(tx cloud.Tx) error {
		stale, err := tx.UpdateInstances(ctx, batch)
		if err == nil && fmt.Sprint(stale) != "[i-4]" {
			err = fmt.Errorf("stale: %v, want [i-4]", stale)
		}
		return err
	})
	if batch[0].ScaleIn.Lock == lock3 || batch[0].ScaleIn.Lock.At != us(lock3.At) || lock3.At != t0.Add(2*time.Minute) {
		t.Errorf("UpdateInstances: the lock must be a normalized copy: %+v", batch[0].ScaleIn.Lock)
	}
	for i, want := range batch[:3] {
		got := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, want.ID) })
		wantEqual(t, fmt.Sprintf("UpdateInstances %s", batch[i].ID), got, want)
	}
	got4 := mustRead(t, s, func(tx cloud.Tx) (*cloud.Instance, error) { return tx.GetInstance(ctx, "i-4") })
	wantEqual(t, "a stale instance is left as it was", got4, before4)
	checkGroupFilters(t, s, "after UpdateInstances", map[string][]string{
		"g-1": {}, "g-2": {"i-3", "i-4"}, "g-9": {"i-1"}, "in a group": {"i-1", "i-3", "i-4"},
		"g-1 running": {}, "in a group, paged": {"i-3"},
		"by IDs": {"i-2", "i-4"}, "by IDs in a group": {"i-1", "i-4"},
	})
}
