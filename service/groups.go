package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// Autoscaling groups (docs/AUTOSCALING.md): the tenant's side (Groups:
// create, read, update, set the desired capacity, delete, here; the rules
// of a group in groups_rules.go; events and custom metrics in
// groups_events.go; Instances.SetProtection in groups_members.go), the
// group state machine (groups_state.go), the members' launches and notices
// (groups_members.go), and the apply of the group controller's plans
// (groups_plan.go).

// Limits and defaults of groups.
const (
	// MaxGroupSize bounds a group's max.
	MaxGroupSize = 1000
	// MaxGroupsPerTenant bounds a tenant's groups that are not deleted.
	// cloud.Quota counts instances and GPUs only, so this limit is fixed
	// rather than a quota; a group's members count against the tenant's
	// instance and GPU quotas like any instance.
	MaxGroupsPerTenant = 100
	// MaxMetricPoints bounds the points of one PutMetrics call.
	MaxMetricPoints = 100
	// MetricMaxAge and MetricMaxAhead bound a published point's time
	// around the server's now.
	MetricMaxAge   = time.Hour
	MetricMaxAhead = 5 * time.Minute
	// ReservedTagPrefix starts the tags gpucloud writes itself; a tenant's
	// tags may not use it.
	ReservedTagPrefix = "gpucloud:"
	// TagGroup and TagGroupName are set on every member of a group: the
	// group's ID and name.
	TagGroup     = ReservedTagPrefix + "group"
	TagGroupName = ReservedTagPrefix + "group-name"
	// DefaultGroupCooldown is the cooldown when Timing.CooldownSeconds is
	// 0 (cloud.GroupTiming).
	DefaultGroupCooldown = 300 * time.Second
	// ManualPolicy names the decisions a tenant made with SetDesired.
	ManualPolicy = "manual"
	// MaxGroupDecisions bounds Status.Decisions (newest kept).
	MaxGroupDecisions = 20
	// RecentGroupEvents is how many events Describe answers.
	RecentGroupEvents = 20

	maxGroupOfferings = 8
	maxGroupPolicies  = 16
	maxMetricNameLen  = 64
	maxTimingSeconds  = 24 * 3600
	maxNoticeSeconds  = 3600
	// groupTags is how many tags a launch adds to the template's.
	groupTags = 2
)

// Create creates a group for actor a, active, with a group event; the
// group controller launches its members. With an idempotency key, a retry
// answers the group the first call created (created false) and writes
// nothing; the same key with a request that differs in any field is a
// Conflict naming the fields (min, max and desired are compared only
// until the controller first resizes the group: after that they are its).
// A tenant holds at most MaxGroupsPerTenant groups that are not deleted
// (quota_exceeded), and a group whose min cannot fit the tenant's
// instance or GPU quota with any of its offerings is quota_exceeded too.
func (s *Groups) Create(ctx context.Context, a Actor, spec api.CreateGroupRequest, key string) (out *cloud.Group, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckGroupSpec(s.cat, &spec); err != nil {
		return nil, false, err
	}
	if err := s.checkRegistry("template.image", spec.Template.Image); err != nil {
		return nil, false, err
	}
	spec.Tags = addSystemTags(ctx, spec.Tags)
	same := func(g *cloud.Group) error { return sameGroup(g, &spec) }
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		if err := checkTemplateNetwork(ctx, tx, tenant, &spec.Template); err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Group, error) { return tx.GroupByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		live, err := tx.ListGroups(ctx, cloud.GroupFilter{TenantID: tenant, States: []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting}})
		if err != nil {
			return err
		}
		if len(live) >= MaxGroupsPerTenant {
			return &cloud.Error{Code: cloud.QuotaExceeded,
				Message: fmt.Sprintf("group limit reached: tenant holds %d of %d groups (deleted ones do not count)", len(live), MaxGroupsPerTenant),
				Details: map[string]any{"resource": "groups", "limit": MaxGroupsPerTenant, "used": len(live), "requested": 1}}
		}
		g := newGroup(&spec)
		if err := groupQuota(ctx, tx, s.cat, tenant, g); err != nil {
			return err
		}
		now := s.now()
		g.ID, g.TenantID, g.IdempotencyKey, g.CreatedAt, g.UpdatedAt = NewID(GroupPrefix), tenant, key, now, now
		if err := tx.CreateGroup(ctx, g); err != nil {
			return asKeyRace(err, key)
		}
		if err := appendGroupEvent(ctx, tx, g, cloud.EventGroup, a.ID, now, fmt.Sprintf("group %s created: min %d, max %d, desired %d, offerings %s",
			g.Name, g.Min, g.Max, g.Desired, strings.Join(g.Template.Offerings, ", ")), nil); err != nil {
			return err
		}
		out, created = g, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Group, error) { return tx.GetGroup(ctx, id) }, same)
	return out, created && err == nil, err
}

// groupQuota refuses a group whose min cannot fit the tenant's quota:
// min instances over the instance quota, or min members of every offering
// over its GPU model's quota.
func groupQuota(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, tenant string, g *cloud.Group) error {
	q, err := GetQuota(ctx, tx, tenant)
	if err != nil || g.Min == 0 {
		return err
	}
	if q.Instances > 0 && g.Min > q.Instances {
		return &cloud.Error{Code: cloud.QuotaExceeded,
			Message: fmt.Sprintf("the group's min %d is above the tenant's instance quota %d", g.Min, q.Instances),
			Details: map[string]any{"resource": "instances", "limit": q.Instances, "requested": g.Min, "field": "min"}}
	}
	if len(q.GPUs) == 0 && q.GPUsPerModel == 0 {
		return nil
	}
	var need []string
	for _, name := range g.Template.Offerings {
		o, err := cat.Offering(name)
		if err != nil {
			continue
		}
		model, n := GPUDemand(cat, o)
		limit := GPULimit(q, model)
		if model == "" || n == 0 || limit == 0 || float64(g.Min)*n <= limit+quotaEpsilon {
			return nil
		}
		need = append(need, fmt.Sprintf("%s needs %.3g %s GPUs of %.3g", o.Name, float64(g.Min)*n, model, limit))
	}
	return &cloud.Error{Code: cloud.QuotaExceeded,
		Message: fmt.Sprintf("the group's min %d does not fit the tenant's GPU quota with any of its offerings: %s", g.Min, strings.Join(need, "; ")),
		Details: map[string]any{"resource": "gpus", "requested": g.Min, "field": "min"}}
}

// appendGroupEvent appends an event of a group (its details carry
// "group_id", and extra's keys).
func appendGroupEvent(ctx context.Context, tx cloud.Tx, g *cloud.Group, kind cloud.EventKind, actor string, now time.Time,
	reason string, extra map[string]any) error {
	d := map[string]any{"group_id": g.ID}
	maps.Copy(d, extra)
	details, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: kind, TenantID: g.TenantID, Actor: actor,
		Reason: reason, Details: details})
}

// sameGroup reports a conflict when an idempotency key is reused for a
// group that differs in any field the request sent (the spec normalized
// as CheckGroupSpec leaves it). Min, max and desired are compared only
// while the controller has not resized the group (Status.LastActionAt
// zero): a retry after it did still answers the group.
func sameGroup(old *cloud.Group, spec *api.CreateGroupRequest) error {
	var d KeyDiffs
	d.String("name", old.Name, spec.Name)
	ot, st := old.Template, spec.Template
	d.Strings("template.offerings", ot.Offerings, st.Offerings)
	d.String("template.image", ot.Image, st.Image)
	d.Strings("template.command", ot.Command, st.Command)
	d.Map("template.env", ot.Env, st.Env)
	d.Strings("template.zones", ot.Zones, st.Zones)
	d.Strings("template.labels", ot.Labels, st.Labels)
	d.Map("template.tags", ot.Tags, st.Tags)
	Value(&d, "template.volume_gib", ot.VolumeGiB, st.VolumeGiB)
	d.String("template.subnet", ot.Subnet, st.Subnet)
	d.Strings("template.security_groups", ot.SecurityGroups, st.SecurityGroups)
	d.Map("tags", old.Tags, spec.Tags)
	if old.Status.LastActionAt.IsZero() {
		Value(&d, "min", old.Min, spec.Min)
		Value(&d, "max", old.Max, spec.Max)
		Value(&d, "desired", old.Desired, *spec.Desired)
	}
	if !sameJSON(old.Policies, spec.Policies, len(old.Policies) == 0 && len(spec.Policies) == 0) {
		d.Add("policies", render(old.Policies), render(spec.Policies))
	}
	Value(&d, "mixed", old.Mixed, spec.Mixed)
	Value(&d, "timing", old.Timing, spec.Timing)
	Value(&d, "budget_per_hour", old.BudgetPerHour, spec.BudgetPerHour)
	if !sameJSON(old.IdleRelease, spec.IdleRelease, old.IdleRelease == nil && spec.IdleRelease == nil) {
		d.Add("idle_release", render(old.IdleRelease), render(spec.IdleRelease))
	}
	return d.Err("group", old.ID)
}

// sameJSON compares two values by their JSON; empty says both are empty.
func sameJSON(a, b any, empty bool) bool {
	if empty {
		return true
	}
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}

// Get reads a group actor a may see; another tenant's answers like a
// missing one. Deleted groups are still read (the audit).
func (s *Groups) Get(ctx context.Context, a Actor, id string) (*cloud.Group, error) {
	var g *cloud.Group
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		g, err = Visible(ctx, a, "group", id, tx.GetGroup)
		return err
	})
	return g, err
}

// GroupDetail is a group with its members (the instances of the group
// that are not terminated, in ID order) and its newest events (at most
// RecentGroupEvents, oldest first).
type GroupDetail struct {
	Group   *cloud.Group
	Members []*cloud.Instance
	Events  []*cloud.Event
}

// Describe reads a group actor a may see with its members and recent
// events, in one transaction.
func (s *Groups) Describe(ctx context.Context, a Actor, id string) (*GroupDetail, error) {
	var out *GroupDetail
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		g, err := Visible(ctx, a, "group", id, tx.GetGroup)
		if err != nil {
			return err
		}
		members, err := tx.ListInstances(ctx, cloud.InstanceFilter{GroupID: g.ID, States: LiveStates})
		if err != nil {
			return err
		}
		evs, err := lastGroupEvents(ctx, tx, g, RecentGroupEvents)
		if err != nil {
			return err
		}
		out = &GroupDetail{Group: g, Members: members, Events: evs}
		return nil
	})
	return out, err
}

// List answers the groups of a tenant (a member's own, an admin's of
// tenant, every tenant's when empty) in ID order, only those in states
// when any are given, else those not deleted.
func (s *Groups) List(ctx context.Context, a Actor, tenant string, states ...cloud.GroupState) ([]*cloud.Group, error) {
	if len(states) == 0 {
		states = []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting}
	}
	out := []*cloud.Group{}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = out[:0]
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		gs, err := tx.ListGroups(ctx, cloud.GroupFilter{TenantID: t, States: states})
		out = append(out, gs...)
		return err
	})
	return out, err
}

// activeGroup reads a group actor a may change, in tx: visible, at the
// version the caller read (ifMatch, 0: any), and active (a deleting or
// deleted group is a conflict).
func activeGroup(ctx context.Context, tx cloud.Tx, a Actor, id string, ifMatch int64) (*cloud.Group, error) {
	g, err := Visible(ctx, a, "group", id, tx.GetGroup)
	if err != nil {
		return nil, err
	}
	if err := CheckVersion("group", id, ifMatch, g.Version); err != nil {
		return nil, err
	}
	if g.State != cloud.GroupActive {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "group " + Quote(id) + " is " + string(g.State) + "; it can no longer change",
			Details: map[string]any{"state": g.State}}
	}
	return g, nil
}

// groupTx runs fn in a transaction that writes a group the caller did
// not pin with If-Match (ifMatch 0) again, up to twice, when the write
// lost a race with another writer (the group controller): the caller
// asked for a change, not for a version.
func (s *Groups) groupTx(ctx context.Context, ifMatch int64, fn func(cloud.Tx) error) error {
	err := s.tx(ctx, fn)
	for try := 0; try < 2 && ifMatch == 0 && cloud.IsConflict(err); try++ {
		err = s.tx(ctx, fn)
	}
	return err
}

// Update changes a group actor a may see (see api.UpdateGroupRequest: nil fields are left as they are); ifMatch, when
// not zero, is the version the caller read: a stale one is a conflict. A
// template change applies to launches from now on: running members keep
// what they were launched with until they are replaced. A patch that
// changes nothing answers the group unchanged; any other change writes a
// group event naming the fields.
func (s *Groups) Update(ctx context.Context, a Actor, id string, patch api.UpdateGroupRequest, ifMatch int64) (*cloud.Group, error) {
	if patch.Template != nil {
		t := *patch.Template
		if err := checkTemplate(s.cat, &t); err != nil {
			return nil, err
		}
		if err := s.checkRegistry("template.image", t.Image); err != nil {
			return nil, err
		}
		patch.Template = &t
	}
	if patch.Policies != nil {
		ps := namePolicies(*patch.Policies)
		patch.Policies = &ps
	}
	var out *cloud.Group
	err := s.groupTx(ctx, ifMatch, func(tx cloud.Tx) error {
		out = nil
		g, err := activeGroup(ctx, tx, a, id, ifMatch)
		if err != nil {
			return err
		}
		if patch.Template != nil {
			if err := checkTemplateNetwork(ctx, tx, g.TenantID, patch.Template); err != nil {
				return err
			}
		}
		was := *g
		changed := applyGroupPatch(&patch, g)
		if err := checkSizes(g.Min, g.Max, g.Desired); err != nil {
			return err
		}
		if err := validateGroup(g); err != nil {
			return err
		}
		if len(changed) == 0 {
			out = g
			return nil
		}
		if g.Min > was.Min || !slices.Equal(g.Template.Offerings, was.Template.Offerings) {
			if err := groupQuota(ctx, tx, s.cat, g.TenantID, g); err != nil {
				return err
			}
		}
		now := s.now()
		g.UpdatedAt = now
		if err := writeGroup(ctx, tx, g, was.State); err != nil {
			return err
		}
		reason := fmt.Sprintf("group %s updated: %s", g.Name, strings.Join(changed, ", "))
		if slices.Contains(changed, "template") {
			reason += " (the template applies to new launches)"
		}
		if err := appendGroupEvent(ctx, tx, g, cloud.EventGroup, a.ID, now, reason, map[string]any{"fields": changed}); err != nil {
			return err
		}
		out = g
		return nil
	})
	return out, err
}

// applyGroupPatch changes g as the patch asks, and returns the names of
// the fields that changed. A desired capacity the patch leaves out is
// brought within the new bounds.
func applyGroupPatch(patch *api.UpdateGroupRequest, g *cloud.Group) []string {
	var changed []string
	set := func(field string, differs bool, apply func()) {
		if differs {
			changed = append(changed, field)
			apply()
		}
	}
	if p := patch.Template; p != nil {
		set("template", !sameJSON(g.Template, *p, false), func() { g.Template = *p })
	}
	if p := patch.Min; p != nil {
		set("min", *p != g.Min, func() { g.Min = *p })
	}
	if p := patch.Max; p != nil {
		set("max", *p != g.Max, func() { g.Max = *p })
	}
	if p := patch.Desired; p != nil {
		set("desired", *p != g.Desired, func() { g.Desired = *p })
	} else if g.Min >= 0 && g.Min <= g.Max {
		set("desired", g.Desired < g.Min || g.Desired > g.Max, func() { g.Desired = min(max(g.Desired, g.Min), g.Max) })
	}
	if p := patch.Policies; p != nil {
		set("policies", !sameJSON(g.Policies, *p, len(g.Policies) == 0 && len(*p) == 0), func() { g.Policies = *p })
	}
	if p := patch.Mixed; p != nil {
		set("mixed", *p != g.Mixed, func() { g.Mixed = *p })
	}
	if p := patch.Timing; p != nil {
		set("timing", *p != g.Timing, func() { g.Timing = *p })
	}
	if p := patch.BudgetPerHour; p != nil {
		set("budget_per_hour", *p != g.BudgetPerHour, func() { g.BudgetPerHour = *p })
	}
	if p := patch.IdleRelease; p != nil {
		var want *cloud.IdleRelease
		if *p != (cloud.IdleRelease{}) {
			r := *p
			want = &r
		}
		set("idle_release", !sameJSON(g.IdleRelease, want, g.IdleRelease == nil && want == nil), func() { g.IdleRelease = want })
	}
	return changed
}

// SetDesired sets a group's desired capacity, as a tenant's scaling
// action: n must be within the group's min and max (invalid_argument whose
// details carry them). With honorCooldown, a group still in its cooldown
// after its last scaling action (Timing.CooldownSeconds, default
// DefaultGroupCooldown) is a conflict whose details carry
// "cooldown_until". The change is recorded as a decision of policy
// ManualPolicy, starts a cooldown, and writes a group.scaling event; the
// group's policies may change it again on the controller's next round.
// Setting the current desired capacity changes nothing.
func (s *Groups) SetDesired(ctx context.Context, a Actor, id string, n int, honorCooldown bool) (*cloud.Group, error) {
	var out *cloud.Group
	err := s.groupTx(ctx, 0, func(tx cloud.Tx) error {
		out = nil
		g, err := activeGroup(ctx, tx, a, id, 0)
		if err != nil {
			return err
		}
		if n < g.Min || n > g.Max {
			return desiredOutside(n, g.Min, g.Max)
		}
		out = g
		if n == g.Desired {
			return nil
		}
		now := s.now()
		if honorCooldown && !g.Status.LastActionAt.IsZero() {
			cool := time.Duration(g.Timing.CooldownSeconds) * time.Second
			if cool == 0 {
				cool = DefaultGroupCooldown
			}
			if until := g.Status.LastActionAt.Add(cool); now.Before(until) {
				return &cloud.Error{Code: cloud.Conflict,
					Message: fmt.Sprintf("group %s is in its cooldown until %s; retry then, or without honor_cooldown", Quote(id), until.UTC().Format(time.RFC3339)),
					Details: map[string]any{"cooldown_until": until.UTC()}}
			}
		}
		from := g.Desired
		reason := "desired capacity set by " + a.ID
		g.Desired, g.Status.LastActionAt, g.UpdatedAt = n, now, now
		g.Status.Decisions = append(slices.Clone(g.Status.Decisions), cloud.GroupDecision{Time: now, From: from, To: n,
			Policy: ManualPolicy, Reason: reason})
		if k := len(g.Status.Decisions); k > MaxGroupDecisions {
			g.Status.Decisions = g.Status.Decisions[k-MaxGroupDecisions:]
		}
		if err := writeGroup(ctx, tx, g, g.State); err != nil {
			return err
		}
		return appendGroupEvent(ctx, tx, g, cloud.EventGroupScaling, a.ID, now,
			fmt.Sprintf("group %s: %d -> %d: %s", g.Name, from, n, reason),
			map[string]any{"from": from, "to": n, "policy": ManualPolicy})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Delete starts deleting a group actor a may see: it goes to deleting,
// with a group event, and launches nothing more; the group controller
// terminates its members and then marks it deleted. Deleting a deleting or
// deleted group answers it unchanged. ifMatch, when not zero, is the
// version the caller read.
func (s *Groups) Delete(ctx context.Context, a Actor, id string, ifMatch int64) (*cloud.Group, error) {
	var out *cloud.Group
	err := s.groupTx(ctx, ifMatch, func(tx cloud.Tx) error {
		out = nil
		g, err := Visible(ctx, a, "group", id, tx.GetGroup)
		if err != nil {
			return err
		}
		if err := CheckVersion("group", id, ifMatch, g.Version); err != nil {
			return err
		}
		out = g
		if g.State != cloud.GroupActive {
			return nil
		}
		now := s.now()
		from := g.State
		g.State, g.UpdatedAt = cloud.GroupDeleting, now
		if err := writeGroup(ctx, tx, g, from); err != nil {
			return err
		}
		return appendGroupEvent(ctx, tx, g, cloud.EventGroup, a.ID, now,
			"group "+g.Name+" deleting: its members are terminated, then it is deleted", nil)
	})
	return out, err
}

// Forecast backtests the forecaster of a group's first predictive policy
// (or, without one, of its first target tracking policy) over the history
// the group controller last saved (it saves every 10 minutes): the
// forecast of each past hour beside what happened, with the backtest's
// MAPE and WAPE, and the next 48 hours. A group with less than
// autoscale.BacktestHistory of history, or none saved yet, is unavailable
// (the same request succeeds later), saying how much is needed and how
// much there is (details history_seconds and needed_seconds); a group
// with no policy to forecast for is a conflict.
func (s *Groups) Forecast(ctx context.Context, a Actor, id string) (*autoscale.ForecastReport, error) {
	var g *cloud.Group
	var doc []byte
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if g, err = Visible(ctx, a, "group", id, tx.GetGroup); err != nil {
			return err
		}
		doc, err = tx.GroupHistory(ctx, g.ID)
		if cloud.IsNotFound(err) {
			doc, err = nil, nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	need := autoscale.BacktestHistory
	if doc == nil {
		return nil, &cloud.Error{Code: cloud.Unavailable, Message: "group " + g.Name + fmt.Sprintf(" has no saved history yet: the group controller saves it every 10 minutes, and a forecast needs %d hours of it; try again later", need/time.Hour),
			Details: map[string]any{"history_seconds": 0, "needed_seconds": int64(need / time.Second)}}
	}
	h := autoscale.NewHistory()
	if err := h.UnmarshalBinary(doc); err != nil {
		return nil, fmt.Errorf("group %s: saved history: %w", g.ID, err)
	}
	r, err := autoscale.BacktestForecast(g, h, s.now())
	var short *autoscale.ShortHistoryError
	if errors.As(err, &short) {
		return nil, &cloud.Error{Code: cloud.Unavailable, Message: "group " + g.Name + ": " + err.Error(),
			Details: map[string]any{"metric": short.Metric, "history_seconds": int64(short.Have / time.Second),
				"needed_seconds": int64(short.Need / time.Second)}}
	}
	if err != nil {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "group " + g.Name + ": " + err.Error()}
	}
	return &r, nil
}
