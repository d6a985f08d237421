package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Autoscaling groups (docs/AUTOSCALING.md): the tenant's side (Groups:
// create, read, update, set the desired capacity, delete, publish custom
// metrics; Instances.SetProtection) and the functions over a cloud.Tx the
// group controller composes in its own transactions (LaunchGroupMember,
// NoticeGroupMember, and WithdrawGroupNotice in groupnotice.go).

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

// GroupSpec is what a tenant asks for when it creates a group. It has the
// fields of the API's create request, so that a handler converts one into
// the other.
type GroupSpec struct {
	// Tenant is for admins creating a group for another tenant; members
	// leave it empty.
	Tenant   string
	Name     string
	Template cloud.GroupTemplate
	Min, Max int
	// Desired defaults to Min.
	Desired       *int
	Policies      []cloud.ScalingPolicy
	Mixed         cloud.MixedInstances
	Timing        cloud.GroupTiming
	BudgetPerHour money.Micros
	// Tags are the group's own; members carry Template.Tags.
	Tags        map[string]string
	IdleRelease *cloud.IdleRelease
}

// GroupPatch is a change to a group: nil fields are left as they are.
// Template replaces the whole template and applies to launches from now
// on: running members keep what they were launched with. Policies
// replaces every policy (an empty list removes them). An IdleRelease with
// a zero threshold and zero seconds removes idle release; a zero
// BudgetPerHour removes the budget. When Min or Max change and Desired is
// not given, Desired is brought within the new bounds.
type GroupPatch struct {
	Min, Max, Desired *int
	Template          *cloud.GroupTemplate
	Policies          *[]cloud.ScalingPolicy
	Mixed             *cloud.MixedInstances
	Timing            *cloud.GroupTiming
	BudgetPerHour     *money.Micros
	IdleRelease       *cloud.IdleRelease
}

// CheckGroupSpec validates what can be checked without the store and
// normalizes the spec: template offerings to their canonical names, label
// selectors to their canonical spelling, Desired to Min when absent,
// policies without a name to their type ("target", then "target-2", ...).
func CheckGroupSpec(cat *catalog.Catalog, spec *GroupSpec) error {
	if err := CheckName("name", spec.Name, true); err != nil {
		return err
	}
	if err := checkTemplate(cat, &spec.Template); err != nil {
		return err
	}
	if spec.Desired == nil {
		d := spec.Min
		spec.Desired = &d
	}
	if err := checkSizes(spec.Min, spec.Max, *spec.Desired); err != nil {
		return err
	}
	spec.Policies = namePolicies(spec.Policies)
	if err := CheckTags("tags", spec.Tags); err != nil {
		return err
	}
	return validateGroup(spec.group())
}

// group is the spec as a group, for validation and creation.
func (spec *GroupSpec) group() *cloud.Group {
	g := &cloud.Group{Name: spec.Name, Template: spec.Template, Min: spec.Min, Max: spec.Max,
		Policies: spec.Policies, Mixed: spec.Mixed, Timing: spec.Timing, BudgetPerHour: spec.BudgetPerHour,
		IdleRelease: spec.IdleRelease, Tags: spec.Tags, State: cloud.GroupActive}
	if spec.Desired != nil {
		g.Desired = *spec.Desired
	}
	return g
}

// checkTemplate validates a launch template as an instance's request is
// validated (CheckInstanceSpec: zones, label selectors, command,
// environment, tags), with errors naming "template.<field>". It clones
// the template's lists and maps, so that normalizing does not change the
// caller's.
func checkTemplate(cat *catalog.Catalog, t *cloud.GroupTemplate) error {
	t.Offerings, t.Zones, t.Labels, t.Command = slices.Clone(t.Offerings), slices.Clone(t.Zones),
		slices.Clone(t.Labels), slices.Clone(t.Command)
	t.Env, t.Tags = maps.Clone(t.Env), maps.Clone(t.Tags)
	if len(t.Offerings) == 0 || len(t.Offerings) > maxGroupOfferings {
		return Field("template.offerings", "%d offerings; give 1 to %d, the first preferred (GET /v1/offerings lists them)",
			len(t.Offerings), maxGroupOfferings)
	}
	for i, name := range t.Offerings {
		field := fmt.Sprintf("template.offerings[%d]", i)
		o, err := offeringOf(cat, field, name)
		if err != nil {
			return err
		}
		if slices.Contains(t.Offerings[:i], o.Name) {
			return Field(field, "offering %s is given twice", o.Name)
		}
		t.Offerings[i] = o.Name
	}
	var err error
	if t.Image, err = CheckImage("template.image", t.Image); err != nil {
		return err
	}
	is := InstanceSpec{Offering: t.Offerings[0], Zones: t.Zones, Labels: t.Labels, Command: t.Command, Env: t.Env, Tags: t.Tags}
	if _, err := CheckInstanceSpec(cat, &is); err != nil {
		return prefixField(err, "template.")
	}
	if len(t.Tags) > maxTags-groupTags {
		return Field("template.tags", "%d tags; the limit is %d (a launch adds %d of its own)", len(t.Tags), maxTags-groupTags, groupTags)
	}
	for k := range t.Tags {
		if strings.HasPrefix(k, ReservedTagPrefix) {
			return Field("template.tags", "tag %s uses the reserved prefix %s", Quote(k), Quote(ReservedTagPrefix))
		}
	}
	if t.VolumeGiB < 0 || t.VolumeGiB > maxVolumeGiB {
		return Field("template.volume_gib", "%d is out of range 0..%d (0: no volume)", t.VolumeGiB, maxVolumeGiB)
	}
	return nil
}

// prefixField returns err with prefix before the field its details name
// (and its message starts with); other errors pass.
func prefixField(err error, prefix string) error {
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		return err
	}
	f, ok := ce.Details["field"].(string)
	if !ok {
		return err
	}
	out := &cloud.Error{Code: ce.Code, Message: ce.Message, Details: maps.Clone(ce.Details)}
	out.Details["field"] = prefix + f
	if strings.HasPrefix(out.Message, f) {
		out.Message = prefix + out.Message
	}
	return out
}

// checkSizes validates min <= desired <= max <= MaxGroupSize.
func checkSizes(lo, hi, desired int) error {
	switch {
	case lo < 0:
		return Field("min", "%d is negative", lo)
	case hi < 0 || hi > MaxGroupSize:
		return Field("max", "%d is out of range 0..%d", hi, MaxGroupSize)
	case lo > hi:
		return &cloud.Error{Code: cloud.Invalid, Message: fmt.Sprintf("min: %d is above max %d", lo, hi),
			Details: map[string]any{"field": "min", "min": lo, "max": hi}}
	case desired < lo || desired > hi:
		return desiredOutside(desired, lo, hi)
	}
	return nil
}

// desiredOutside is the error of a desired capacity outside the group's
// bounds; its details carry them.
func desiredOutside(n, lo, hi int) error {
	return &cloud.Error{Code: cloud.Invalid,
		Message: fmt.Sprintf("desired: %d is outside the group's bounds: min %d, max %d", n, lo, hi),
		Details: map[string]any{"field": "desired", "desired": n, "min": lo, "max": hi}}
}

// namePolicies gives every policy without a name its type as its name,
// numbered from the second of a type on ("target", "target-2"). It
// returns a copy.
func namePolicies(ps []cloud.ScalingPolicy) []cloud.ScalingPolicy {
	if len(ps) == 0 {
		return nil
	}
	out := slices.Clone(ps)
	taken := map[string]bool{}
	for _, p := range out {
		taken[p.Name] = true
	}
	for i := range out {
		if out[i].Name != "" {
			continue
		}
		name := out[i].Type
		for n := 2; taken[name]; n++ {
			name = out[i].Type + "-" + strconv.Itoa(n)
		}
		out[i].Name, taken[name] = name, true
	}
	return out
}

// validateGroup checks a group's rules: the service's own bounds on a
// request (policy count, timing and mix bounds, policy names, custom
// metric names as PutMetrics takes them, a mix that names spot fields only
// when it uses spot), then the planner's rules (autoscale.ValidateGroup:
// sizes, policies, cron and time zones, steps, mix, idle release,
// budget), whose "field: message" errors become invalid_argument errors
// naming the field.
func validateGroup(g *cloud.Group) error {
	if len(g.Policies) > maxGroupPolicies {
		return Field("policies", "%d policies; the limit is %d", len(g.Policies), maxGroupPolicies)
	}
	for i, p := range g.Policies {
		field := fmt.Sprintf("policies[%d]", i)
		if err := CheckName(field+".name", p.Name, false); err != nil {
			return err
		}
		if name, ok := strings.CutPrefix(p.Metric, cloud.CustomMetricPrefix); ok {
			if err := CheckMetricName(field+".metric", name); err != nil {
				return err
			}
		}
		if p.CooldownSeconds > maxTimingSeconds {
			return Field(field+".cooldown_seconds", "%d is above %d", p.CooldownSeconds, maxTimingSeconds)
		}
	}
	m := g.Mixed
	switch {
	case m.OnDemandBase > MaxGroupSize:
		return Field("mixed.on_demand_base", "%d is above %d", m.OnDemandBase, MaxGroupSize)
	case !m.Spot && (m.OnDemandBase != 0 || m.OnDemandPercent != 0 || m.MaxSpotPriceRatio != 0 || m.CapacityRebalance):
		return Field("mixed.spot", "is false, so the group is all on demand: set spot to use on_demand_base, on_demand_percent, max_spot_price_ratio or capacity_rebalance")
	}
	for _, t := range []struct {
		field string
		v, hi int
	}{
		{"timing.cooldown_seconds", g.Timing.CooldownSeconds, maxTimingSeconds},
		{"timing.warmup_seconds", g.Timing.WarmupSeconds, maxTimingSeconds},
		{"timing.stabilization_seconds", g.Timing.StabilizationSeconds, maxTimingSeconds},
		{"timing.notice_seconds", g.Timing.NoticeSeconds, maxNoticeSeconds},
	} {
		if t.v > t.hi {
			return Field(t.field, "%d is above %d", t.v, t.hi)
		}
	}
	if r := g.IdleRelease; r != nil && r.IdleSeconds > maxTimingSeconds {
		return Field("idle_release.idle_seconds", "%d is above %d", r.IdleSeconds, maxTimingSeconds)
	}
	return ruleError(autoscale.ValidateGroup(g))
}

// ruleError turns the planner's "field: message" error into an
// invalid_argument naming the field.
func ruleError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	field, _, ok := strings.Cut(msg, ": ")
	if !ok || field == "" || strings.ContainsAny(field, " \t") {
		return &cloud.Error{Code: cloud.Invalid, Message: msg, Details: map[string]any{}}
	}
	return &cloud.Error{Code: cloud.Invalid, Message: msg, Details: map[string]any{"field": field}}
}

// CheckMetricName validates a custom metric's name: 1 to 64 of a-z, 0-9,
// '_', '.' and '-', and none of the metrics gpucloud measures itself
// (gpu_utilization, ...), which a tenant may not forge.
func CheckMetricName(field, name string) error {
	if name == "" || len(name) > maxMetricNameLen {
		return Field(field, "%s: a metric name has 1 to %d characters", Quote(name), maxMetricNameLen)
	}
	switch name {
	case cloud.MetricGPUUtilization, cloud.MetricCPUUtilization, cloud.MetricGPUOrCPU:
		return Field(field, "%s is a metric gpucloud measures itself; give a custom metric another name", Quote(name))
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			hint := ""
			if strings.HasPrefix(name, cloud.CustomMetricPrefix) {
				hint = " (leave out " + cloud.CustomMetricPrefix + ": policies name custom metrics with it, publishers do not)"
			}
			return Field(field, "%s: use a-z, 0-9, '_', '.' and '-'%s", Quote(name), hint)
		}
	}
	return nil
}

// Create creates a group for actor a, active, with a group event; the
// group controller launches its members. With an idempotency key, a retry
// answers the group the first call created (created false) and writes
// nothing; the same key with a request that differs in any field is a
// Conflict naming the fields (min, max and desired are compared only
// until the controller first resizes the group: after that they are its).
// A tenant holds at most MaxGroupsPerTenant groups that are not deleted
// (quota_exceeded), and a group whose min cannot fit the tenant's
// instance or GPU quota with any of its offerings is quota_exceeded too.
func (s *Groups) Create(ctx context.Context, a Actor, spec GroupSpec, key string) (out *cloud.Group, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	if err := CheckGroupSpec(s.cat, &spec); err != nil {
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
		g := spec.group()
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
func sameGroup(old *cloud.Group, spec *GroupSpec) error {
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

// Update changes a group actor a may see (see GroupPatch); ifMatch, when
// not zero, is the version the caller read: a stale one is a conflict. A
// template change applies to launches from now on: running members keep
// what they were launched with until they are replaced. A patch that
// changes nothing answers the group unchanged; any other change writes a
// group event naming the fields.
func (s *Groups) Update(ctx context.Context, a Actor, id string, patch GroupPatch, ifMatch int64) (*cloud.Group, error) {
	if patch.Template != nil {
		t := *patch.Template
		if err := checkTemplate(s.cat, &t); err != nil {
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
		was := *g
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

// groupKinds are the event kinds of groups.
var groupKinds = []cloud.EventKind{cloud.EventGroup, cloud.EventGroupScaling}

// eventGroup is the group an event's details name ("group_id"), if any.
func eventGroup(e *cloud.Event) string {
	if len(e.Details) == 0 {
		return ""
	}
	var d struct {
		GroupID string `json:"group_id"`
	}
	if json.Unmarshal(e.Details, &d) != nil {
		return ""
	}
	return d.GroupID
}

// groupEventBatch is how many events a group's event scan reads at once.
const groupEventBatch = 500

// scanGroupEvents calls fn, in ID order, with each event of g after the
// event ID after (its tenant's events of the group kinds whose details
// name g), until fn returns false.
func scanGroupEvents(ctx context.Context, tx cloud.Tx, g *cloud.Group, after int64, fn func(*cloud.Event) bool) error {
	f := cloud.EventFilter{TenantID: g.TenantID, Kinds: groupKinds, AfterID: after, Limit: groupEventBatch}
	for {
		evs, err := tx.ListEvents(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if eventGroup(e) == g.ID && !fn(e) {
				return nil
			}
		}
		if len(evs) < f.Limit {
			return nil
		}
		f.AfterID = evs[len(evs)-1].ID
	}
}

// lastGroupEvents answers the newest n events of g, oldest first.
func lastGroupEvents(ctx context.Context, tx cloud.Tx, g *cloud.Group, n int) ([]*cloud.Event, error) {
	out := []*cloud.Event{}
	err := scanGroupEvents(ctx, tx, g, 0, func(e *cloud.Event) bool {
		out = append(out, e)
		if len(out) > 2*n {
			out = append(out[:0], out[len(out)-n:]...)
		}
		return true
	})
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, err
}

// Events answers one page of the events of a group actor a may see (its
// group and group.scaling events: creation, updates, scaling decisions,
// launches refused, scale-in notices, deletion), after the event ID
// after, at most limit (all when 0), and the after of the next page (0 at
// the end). Its members' own events are theirs (GET
// /v1/instances/{id}/events).
func (s *Groups) Events(ctx context.Context, a Actor, id string, after int64, limit int) (evs []*cloud.Event, next int64, err error) {
	err = s.tx(ctx, func(tx cloud.Tx) error {
		evs, next = []*cloud.Event{}, 0
		g, err := Visible(ctx, a, "group", id, tx.GetGroup)
		if err != nil {
			return err
		}
		return scanGroupEvents(ctx, tx, g, after, func(e *cloud.Event) bool {
			if limit > 0 && len(evs) == limit {
				next = evs[limit-1].ID
				return false
			}
			evs = append(evs, e)
			return true
		})
	})
	return evs, next, err
}

// MetricInput is one point a tenant publishes for a group: a custom
// metric's name (without "custom:"), its value, and when it was measured
// (zero: now).
type MetricInput struct {
	Name  string
	Value float64
	At    time.Time
}

// PutMetrics records custom metric points of a group actor a may see
// (CloudWatch's PutMetricData): 1 to MaxMetricPoints per call, names as
// CheckMetricName, finite values, times from MetricMaxAge before now to
// MetricMaxAhead after it. A policy tracks one as "custom:NAME". All the
// points are written, or none. A deleted group takes none (conflict).
func (s *Groups) PutMetrics(ctx context.Context, a Actor, groupID string, points []MetricInput) error {
	if groupID == "" {
		return Field("group_id", "is required")
	}
	if len(points) == 0 || len(points) > MaxMetricPoints {
		return Field("metrics", "%d points; give 1 to %d", len(points), MaxMetricPoints)
	}
	now := s.now()
	ps := make([]cloud.MetricPoint, len(points))
	for i, p := range points {
		field := fmt.Sprintf("metrics[%d]", i)
		if err := CheckMetricName(field+".name", p.Name); err != nil {
			return err
		}
		if math.IsNaN(p.Value) || math.IsInf(p.Value, 0) {
			return Field(field+".value", "is not a finite number")
		}
		at := p.At
		if at.IsZero() {
			at = now
		}
		if at.Before(now.Add(-MetricMaxAge)) || at.After(now.Add(MetricMaxAhead)) {
			return Field(field+".at", "%s is outside the accepted window: from %s before now to %s after it",
				at.UTC().Format(time.RFC3339), MetricMaxAge, MetricMaxAhead)
		}
		ps[i] = cloud.MetricPoint{Name: p.Name, GroupID: groupID, At: at.UTC(), Value: p.Value}
	}
	return s.tx(ctx, func(tx cloud.Tx) error {
		g, err := Visible(ctx, a, "group", groupID, tx.GetGroup)
		if err != nil {
			return err
		}
		if g.State == cloud.GroupDeleted {
			return &cloud.Error{Code: cloud.Conflict, Message: "group " + Quote(groupID) + " is deleted; it takes no metrics",
				Details: map[string]any{"state": g.State}}
		}
		for i := range ps {
			ps[i].TenantID = g.TenantID
		}
		return tx.AppendMetrics(ctx, ps)
	})
}

// SetProtection sets or clears the scale-in protection of an instance
// actor a may see (any instance; it matters to group members): scale-in
// and idle release never pick a protected instance. The workload's
// completion lock (Agents.SetScaleInLock) is kept as it is. A change
// writes the instance and an instance.scale_in event; asking for what
// already holds changes nothing. A terminated instance is a conflict.
func (s *Instances) SetProtection(ctx context.Context, a Actor, instanceID string, protected bool) (*cloud.Instance, error) {
	var out *cloud.Instance
	set := func() error {
		return s.tx(ctx, func(tx cloud.Tx) error {
			out = nil
			in, err := Visible(ctx, a, "instance", instanceID, tx.GetInstance)
			if err != nil {
				return err
			}
			if in.State == cloud.Terminated {
				return &cloud.Error{Code: cloud.Conflict, Message: "instance " + Quote(instanceID) + " is terminated",
					Details: map[string]any{"state": in.State}}
			}
			out = in
			si := cloud.ScaleIn{}
			if in.ScaleIn != nil {
				si = *in.ScaleIn
			}
			if si.Protected == protected {
				return nil
			}
			si.Protected = protected
			in.ScaleIn = &si
			if !si.Held() {
				in.ScaleIn = nil
			}
			now := s.now()
			in.UpdatedAt = now
			if err := tx.UpdateInstance(ctx, in); err != nil {
				return err
			}
			why := "scale-in protection set by " + a.ID
			if !protected {
				why = "scale-in protection removed by " + a.ID
			}
			return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventInstanceScaleIn, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: in.HostID, Actor: a.ID, Reason: why})
		})
	}
	err := set()
	if cloud.IsConflict(err) && out != nil && out.State != cloud.Terminated {
		// Another writer (the agent's lock, a lifecycle move) changed the
		// instance between the read and the write: read it again.
		err = set()
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LaunchSpec is one launch the group controller decided: an offering of
// the template, a zone ("" for the template's zones), a market, and the
// launch's sequence number (Status.LaunchSeq after it).
type LaunchSpec struct {
	Offering string
	Zone     string
	Market   cloud.Market
	Seq      int64
}

// GroupMemberKey is the idempotency key of launch seq of group id: a
// retried launch finds the instance the first made.
func GroupMemberKey(groupID string, seq int64) string {
	return "group:" + groupID + ":" + strconv.FormatInt(seq, 10)
}

// GroupMemberName is the name of launch seq of g: "<group name>-<seq>",
// the group's name cut so that the whole is a valid name.
func GroupMemberName(g *cloud.Group, seq int64) string {
	suffix := "-" + strconv.FormatInt(seq, 10)
	base := g.Name
	if len(base)+len(suffix) > maxNameLen {
		base = base[:max(maxNameLen-len(suffix), 1)]
	}
	return base + suffix
}

// LaunchGroupMember creates, in tx, the member of group g that launch l
// asks for, through CreateInstance (so the tenant's quota and the volume
// rule apply as to any instance): pending, GroupID set, from the template
// as it is now (command, environment, labels, and the zones when l names
// none), with the template's image, its tags plus TagGroup and
// TagGroupName, named GroupMemberName, with
// idempotency key GroupMemberKey (a launch whose key was used answers the
// instance made then and creates nothing), market l.Market (spot without a
// spot request). When the template has a VolumeGiB, a new volume of that
// size, named like the instance and in l.Zone, is created with a
// volume.created event and attached to it. A launch CreateInstance refuses
// (a quota: quota_exceeded; an unknown offering: invalid_argument) changes
// nothing the caller did not; the caller's transaction decides.
func LaunchGroupMember(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, g *cloud.Group, l LaunchSpec, actor string, now time.Time) (*cloud.Instance, error) {
	key := GroupMemberKey(g.ID, l.Seq)
	if old, err := tx.InstanceByKey(ctx, g.TenantID, key); err == nil {
		if old.GroupID != g.ID {
			return nil, &cloud.Error{Code: cloud.Conflict, Message: "idempotency key " + Quote(key) + " is taken by instance " + old.ID,
				Details: map[string]any{"existing_id": old.ID}}
		}
		return old, nil
	} else if !cloud.IsNotFound(err) {
		return nil, err
	}
	switch l.Market {
	case "":
		l.Market = cloud.MarketOnDemand
	case cloud.MarketOnDemand, cloud.MarketSpot:
	default:
		return nil, Field("market", "unknown market %s", Quote(string(l.Market)))
	}
	t := g.Template
	tags := maps.Clone(t.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[TagGroup], tags[TagGroupName] = g.ID, g.Name
	in := &cloud.Instance{TenantID: g.TenantID, Name: GroupMemberName(g, l.Seq), Offering: l.Offering, Image: t.Image,
		IdempotencyKey: key, Zones: slices.Clone(t.Zones), Labels: slices.Clone(t.Labels), Command: slices.Clone(t.Command),
		Env: maps.Clone(t.Env), Tags: tags, Market: l.Market, GroupID: g.ID, CreatedAt: now}
	if l.Zone != "" {
		in.Zones = []string{l.Zone}
	}
	if t.VolumeGiB > 0 {
		zone := l.Zone
		if zone == "" && len(in.Zones) == 1 {
			zone = in.Zones[0]
		}
		v, err := newMemberVolume(ctx, tx, g, in.Name, key, zone, t.VolumeGiB, actor, now)
		if err != nil {
			return nil, err
		}
		in.Volumes = []string{v.ID}
	}
	where := l.Offering
	if l.Zone != "" {
		where += "/" + l.Zone
	}
	reason := fmt.Sprintf("group %s launch %d: %s in %s", g.Name, l.Seq, l.Market, where)
	if err := CreateInstance(ctx, tx, cat, in, actor, reason); err != nil {
		var race *keyRace
		if errors.As(err, &race) {
			return nil, &cloud.Error{Code: cloud.Conflict, Message: "idempotency key " + Quote(key) + " was taken meanwhile by instance " + race.id,
				Details: map[string]any{"existing_id": race.id}}
		}
		return nil, err
	}
	return in, nil
}

// newMemberVolume creates the volume of a group member in tx, as
// Volumes.Create would (the same checks and event), keyed by the launch.
func newMemberVolume(ctx context.Context, tx cloud.Tx, g *cloud.Group, name, key, zone string, gib int64, actor string, now time.Time) (*cloud.Volume, error) {
	if err := CheckVolumeSpec(&VolumeSpec{Name: name, SizeGiB: gib, Zone: zone}); err != nil {
		return nil, prefixField(err, "template.volume.")
	}
	v := &cloud.Volume{ID: NewID(VolumePrefix), TenantID: g.TenantID, Name: name, SizeGiB: gib, Zone: zone,
		CreatedAt: now, IdempotencyKey: key + ":volume"}
	if err := tx.CreateVolume(ctx, v); err != nil {
		return nil, err
	}
	return v, tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventVolumeCreated, TenantID: g.TenantID, Actor: actor,
		Reason:  "volume " + v.ID + " created for " + name + " of group " + g.Name,
		Details: []byte(fmt.Sprintf(`{"group_id":%q}`, g.ID))})
}

// NoticeGroupMember gives a member of a group chosen for scale-in (or
// idle release, or a move to a cheaper pool: reason, one of cloud's
// Reclaim* reasons) the notice a spot reclaim gives: an Interruption to
// terminate at now+notice, which the agent shows on the metadata
// endpoint's instance-action, and a group.scaling event naming the group.
// The group controller terminates it at the deadline, unless it is
// protected or takes its completion lock first (WithdrawGroupNotice). An
// instance that already has a notice with an action (a spot reclaim)
// keeps it: its deadline stands and nothing is written. A held instance
// (ScaleIn.Held) is never given a notice: conflict.
func NoticeGroupMember(ctx context.Context, tx cloud.Tx, in *cloud.Instance, reason string, notice time.Duration, actor string, now time.Time) error {
	if in.ScaleIn.Held() {
		return &cloud.Error{Code: cloud.Conflict, Message: "instance " + in.ID + " is protected or holds a completion lock: it is never scaled in",
			Details: map[string]any{"instance_id": in.ID}}
	}
	if in.Interruption != nil && in.Interruption.Action != "" {
		return nil
	}
	deadline := now.Add(max(notice, 0))
	in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: reason, NoticedAt: now, Deadline: deadline}
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return err
	}
	details, err := json.Marshal(map[string]any{"group_id": in.GroupID, "reason": reason, "deadline": deadline.UTC()})
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Actor: actor, Details: details,
		Reason: fmt.Sprintf("scale-in notice (%s): terminated at %s unless protected or locked first", reason, deadline.UTC().Format(time.RFC3339))})
}

// Forecast backtests the forecaster of a group's first predictive policy
// (or, without one, of its first target tracking policy) over the history
// the group controller last saved (it saves every 10 minutes): the
// forecast of each past hour beside what happened, with the backtest's
// MAPE and WAPE, and the next 48 hours. A group with less than 25 hours of
// history, or none saved yet, is a conflict that says how much there is.
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
	if doc == nil {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "group " + g.Name +
			" has no saved history yet: the group controller saves it every 10 minutes, and a forecast needs 25 hours of it"}
	}
	h := autoscale.NewHistory()
	if err := h.UnmarshalBinary(doc); err != nil {
		return nil, fmt.Errorf("group %s: saved history: %w", g.ID, err)
	}
	r, err := autoscale.BacktestForecast(g, h, s.now())
	if err != nil {
		return nil, &cloud.Error{Code: cloud.Conflict, Message: "group " + g.Name + ": " + err.Error()}
	}
	return &r, nil
}
