package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// CheckGroupSpec validates what can be checked without the store and
// normalizes the spec: template offerings to their canonical names, label
// selectors to their canonical spelling, Desired to Min when absent,
// policies without a name to their type ("target", then "target-2", ...).
func CheckGroupSpec(cat *catalog.Catalog, spec *api.CreateGroupRequest) error {
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
	return validateGroup(newGroup(spec))
}

// newGroup is the spec as a group, for validation and creation.
func newGroup(spec *api.CreateGroupRequest) *cloud.Group {
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
	t.Env, t.Tags, t.SecurityGroups = maps.Clone(t.Env), maps.Clone(t.Tags), slices.Clone(t.SecurityGroups)
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
	is := api.CreateInstanceRequest{Offering: t.Offerings[0], Zones: t.Zones, Labels: t.Labels, Command: t.Command, Env: t.Env, Tags: t.Tags,
		Subnet: t.Subnet, SecurityGroups: t.SecurityGroups}
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

// checkTemplateNetwork checks a template's subnet and groups in the store
// as an instance create does (the tenant's subnet, else not_found; groups
// of its network), and sets the template's zones to the subnet's zone
// when it has one. Groups without a subnet are the default network's,
// which may not exist yet: they need the subnet named.
func checkTemplateNetwork(ctx context.Context, tx cloud.Tx, tenant string, t *cloud.GroupTemplate) error {
	if t.Subnet == "" {
		if len(t.SecurityGroups) > 0 {
			return Field("template.security_groups", "need template.subnet: the subnet whose network the groups are of")
		}
		return nil
	}
	spec := api.CreateInstanceRequest{Subnet: t.Subnet, Zones: t.Zones}
	if err := subnetZone(ctx, tx, tenant, &spec); err != nil {
		return prefixField(err, "template.")
	}
	t.Zones = spec.Zones
	if len(t.SecurityGroups) == 0 {
		return nil
	}
	sub, err := tenantSubnet(ctx, tx, tenant, t.Subnet)
	if err != nil {
		return prefixField(err, "template.")
	}
	_, err = instanceGroups(ctx, tx, &cloud.Instance{TenantID: tenant, SecurityGroupIDs: t.SecurityGroups}, sub)
	return prefixField(err, "template.")
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
