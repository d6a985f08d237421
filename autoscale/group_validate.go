package autoscale

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// maxBufferSeconds bounds a predictive policy's buffer: the forecast
// reaches 48 hours.
const maxBufferSeconds = 48 * 3600

// ValidateGroup checks every rule of a group's spec that the planner
// relies on. Errors name the field as in the JSON spec, such as
// "policies[1].cron: ..." or "mixed.on_demand_percent: ...":
//
//   - 0 <= min <= desired <= max (min == max is a fixed-size group);
//   - the template has at least one offering, no empty or repeated
//     offering or zone;
//   - budget_per_hour >= 0;
//   - mixed: on_demand_base >= 0, on_demand_percent 0..100,
//     max_spot_price_ratio 0 (default 80) or 1..100;
//   - timing: every field >= 0;
//   - idle_release: threshold in (0, 1), idle_seconds > 0;
//   - policies: a known type; names unique where given; metric empty
//     (gpu_utilization), gpu_utilization, cpu_utilization,
//     gpu_cpu_utilization or custom:NAME; target > 0 (at most 1 for a
//     utilization metric) for target, step, predictive and gpucloud; step: at
//     least one adjustment, each with a non-zero change and lower <
//     upper, none overlapping, cooldown_seconds >= 0; scheduled: a cron
//     that parses and fires, a time zone that loads, at least one of
//     set_min, set_max, set_desired, each >= 0, set_min <= set_desired
//     <= set_max where given; predictive and gpucloud: buffer_seconds
//     0..172800; no
//     field of another type (a cron on a target policy).
func ValidateGroup(g *cloud.Group) error {
	if g == nil {
		return fmt.Errorf("group: missing")
	}
	switch {
	case g.Min < 0:
		return fmt.Errorf("min: %d is negative", g.Min)
	case g.Max < g.Min:
		return fmt.Errorf("max: %d is below min %d", g.Max, g.Min)
	case g.Desired < g.Min || g.Desired > g.Max:
		return fmt.Errorf("desired: %d is outside min..max (%d..%d)", g.Desired, g.Min, g.Max)
	}
	if len(g.Template.Offerings) == 0 {
		return fmt.Errorf("template.offerings: at least one offering is needed")
	}
	if err := uniqueNames("template.offerings", g.Template.Offerings); err != nil {
		return err
	}
	if err := uniqueNames("template.zones", g.Template.Zones); err != nil {
		return err
	}
	if g.BudgetPerHour < 0 {
		return fmt.Errorf("budget_per_hour: %s is negative", g.BudgetPerHour)
	}
	mx := g.Mixed
	switch {
	case mx.OnDemandBase < 0:
		return fmt.Errorf("mixed.on_demand_base: %d is negative", mx.OnDemandBase)
	case mx.OnDemandPercent < 0 || mx.OnDemandPercent > 100:
		return fmt.Errorf("mixed.on_demand_percent: %d is not 0..100", mx.OnDemandPercent)
	case mx.MaxSpotPriceRatio < 0 || mx.MaxSpotPriceRatio > 100:
		return fmt.Errorf("mixed.max_spot_price_ratio: %d is not 1..100 (0: the default %d)", mx.MaxSpotPriceRatio, DefaultMaxSpotPriceRatio)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"cooldown_seconds", g.Timing.CooldownSeconds}, {"warmup_seconds", g.Timing.WarmupSeconds},
		{"stabilization_seconds", g.Timing.StabilizationSeconds}, {"notice_seconds", g.Timing.NoticeSeconds}} {
		if f.v < 0 {
			return fmt.Errorf("timing.%s: %d is negative", f.name, f.v)
		}
	}
	if ir := g.IdleRelease; ir != nil {
		if !(ir.Threshold > 0 && ir.Threshold < 1) {
			return fmt.Errorf("idle_release.threshold: %v is not between 0 and 1", ir.Threshold)
		}
		if ir.IdleSeconds <= 0 {
			return fmt.Errorf("idle_release.idle_seconds: %d must be positive", ir.IdleSeconds)
		}
	}
	names := map[string]int{}
	for i, pol := range g.Policies {
		field := fmt.Sprintf("policies[%d]", i)
		if pol.Name != "" {
			if j, dup := names[pol.Name]; dup {
				return fmt.Errorf("%s.name: %q is also policies[%d]'s name", field, pol.Name, j)
			}
			names[pol.Name] = i
		}
		if err := validatePolicy(field, pol); err != nil {
			return err
		}
	}
	return nil
}

func uniqueNames(field string, list []string) error {
	seen := map[string]bool{}
	for i, v := range list {
		switch {
		case v == "":
			return fmt.Errorf("%s[%d]: empty", field, i)
		case seen[v]:
			return fmt.Errorf("%s[%d]: %q is repeated", field, i, v)
		}
		seen[v] = true
	}
	return nil
}

func validMetric(m string) error {
	switch m {
	case "", cloud.MetricGPUUtilization, cloud.MetricCPUUtilization, cloud.MetricGPUOrCPU:
		return nil
	}
	if !isCustom(m) {
		return fmt.Errorf("unknown metric %q (gpu_utilization, cpu_utilization, gpu_cpu_utilization or custom:NAME)", m)
	}
	name := strings.TrimPrefix(m, cloud.CustomMetricPrefix)
	if name == "" || len(name) > 128 {
		return fmt.Errorf("custom metric %q: the name must be 1 to 128 characters", m)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f {
			return fmt.Errorf("custom metric %q: no spaces or control characters", m)
		}
	}
	return nil
}

func validatePolicy(field string, pol cloud.ScalingPolicy) error {
	isType := func(types ...string) bool {
		for _, t := range types {
			if pol.Type == t {
				return true
			}
		}
		return false
	}
	// Fields that belong to other types.
	type owned struct {
		name  string
		set   bool
		types []string
	}
	for _, o := range []owned{
		{"metric", pol.Metric != "", []string{cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive, cloud.PolicyGPUCloud}},
		{"target", pol.Target != 0, []string{cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive, cloud.PolicyGPUCloud}},
		{"steps", len(pol.Steps) > 0, []string{cloud.PolicyStep}},
		{"cooldown_seconds", pol.CooldownSeconds != 0, []string{cloud.PolicyStep}},
		{"cron", pol.Cron != "", []string{cloud.PolicyScheduled}},
		{"time_zone", pol.TimeZone != "", []string{cloud.PolicyScheduled}},
		{"set_min", pol.SetMin != nil, []string{cloud.PolicyScheduled}},
		{"set_max", pol.SetMax != nil, []string{cloud.PolicyScheduled}},
		{"set_desired", pol.SetDesired != nil, []string{cloud.PolicyScheduled}},
		{"forecast_only", pol.ForecastOnly, []string{cloud.PolicyPredictive}},
		{"buffer_seconds", pol.BufferSeconds != 0, []string{cloud.PolicyPredictive, cloud.PolicyGPUCloud}},
	} {
		if o.set && isType(cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyScheduled, cloud.PolicyPredictive, cloud.PolicyGPUCloud) && !isType(o.types...) {
			return fmt.Errorf("%s.%s: not a field of a %s policy", field, o.name, pol.Type)
		}
	}
	switch pol.Type {
	case cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive, cloud.PolicyGPUCloud:
		if err := validMetric(pol.Metric); err != nil {
			return fmt.Errorf("%s.metric: %v", field, err)
		}
		if !(pol.Target > 0) || math.IsInf(pol.Target, 0) {
			return fmt.Errorf("%s.target: %v must be positive", field, pol.Target)
		}
		if !isCustom(pol.Metric) && pol.Target > 1 {
			return fmt.Errorf("%s.target: %v is a utilization: at most 1", field, pol.Target)
		}
	case cloud.PolicyScheduled:
	default:
		return fmt.Errorf("%s.type: unknown policy type %q (target, step, scheduled, predictive, gpucloud)", field, pol.Type)
	}
	switch pol.Type {
	case cloud.PolicyStep:
		return validateSteps(field, pol)
	case cloud.PolicyScheduled:
		return validateCronAction(field, pol)
	case cloud.PolicyPredictive, cloud.PolicyGPUCloud:
		if pol.BufferSeconds < 0 || pol.BufferSeconds > maxBufferSeconds {
			return fmt.Errorf("%s.buffer_seconds: %d is not 0..%d", field, pol.BufferSeconds, maxBufferSeconds)
		}
	}
	return nil
}

// validateSteps checks a step policy: at least one adjustment, each a
// nonzero change over a nonempty [lower, upper), none overlapping, and a
// cooldown that is not negative.
func validateSteps(field string, pol cloud.ScalingPolicy) error {
	if len(pol.Steps) == 0 {
		return fmt.Errorf("%s.steps: at least one adjustment is needed", field)
	}
	if pol.CooldownSeconds < 0 {
		return fmt.Errorf("%s.cooldown_seconds: %d is negative", field, pol.CooldownSeconds)
	}
	type span struct {
		lo, hi float64
		i      int
	}
	var spans []span
	for j, a := range pol.Steps {
		f := fmt.Sprintf("%s.steps[%d]", field, j)
		lo, hi := math.Inf(-1), math.Inf(1)
		if a.Lower != nil {
			lo = *a.Lower
		}
		if a.Upper != nil {
			hi = *a.Upper
		}
		switch {
		case math.IsNaN(lo) || math.IsNaN(hi):
			return fmt.Errorf("%s: bounds must be numbers", f)
		case a.Change == 0:
			return fmt.Errorf("%s.change_percent: must not be 0", f)
		case a.Change < -100:
			return fmt.Errorf("%s.change_percent: %d removes more than all instances", f, a.Change)
		case !(lo < hi):
			return fmt.Errorf("%s: lower %v must be below upper %v", f, lo, hi)
		}
		spans = append(spans, span{lo, hi, j})
	}
	sort.Slice(spans, func(a, b int) bool { return spans[a].lo < spans[b].lo })
	for j := 1; j < len(spans); j++ {
		if spans[j].lo < spans[j-1].hi {
			return fmt.Errorf("%s.steps[%d]: overlaps steps[%d]", field, spans[j].i, spans[j-1].i)
		}
	}
	return nil
}

// validateCronAction checks a scheduled policy: a cron expression that
// fires in a zone that exists, and set_min, set_max and set_desired, at
// least one of them, none negative, consistent with each other.
func validateCronAction(field string, pol cloud.ScalingPolicy) error {
	c, err := LoadCron(pol.Cron, pol.TimeZone)
	if err != nil {
		f := "cron"
		if strings.HasPrefix(err.Error(), "time zone") {
			f = "time_zone"
		}
		return fmt.Errorf("%s.%s: %v", field, f, err)
	}
	if c.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return fmt.Errorf("%s.cron: %q never fires", field, pol.Cron)
	}
	if pol.SetMin == nil && pol.SetMax == nil && pol.SetDesired == nil {
		return fmt.Errorf("%s: a scheduled action sets at least one of set_min, set_max, set_desired", field)
	}
	for _, v := range []struct {
		name string
		p    *int
	}{{"set_min", pol.SetMin}, {"set_max", pol.SetMax}, {"set_desired", pol.SetDesired}} {
		if v.p != nil && *v.p < 0 {
			return fmt.Errorf("%s.%s: %d is negative", field, v.name, *v.p)
		}
	}
	if pol.SetMin != nil && pol.SetMax != nil && *pol.SetMin > *pol.SetMax {
		return fmt.Errorf("%s.set_max: %d is below set_min %d", field, *pol.SetMax, *pol.SetMin)
	}
	if d := pol.SetDesired; d != nil {
		if pol.SetMin != nil && *d < *pol.SetMin {
			return fmt.Errorf("%s.set_desired: %d is below set_min %d", field, *d, *pol.SetMin)
		}
		if pol.SetMax != nil && *d > *pol.SetMax {
			return fmt.Errorf("%s.set_desired: %d is above set_max %d", field, *d, *pol.SetMax)
		}
	}
	return nil
}
