// The demand half's configuration and its named policies: each is a
// live group's policy list (cloud.ScalingPolicy) on the demand metric,
// run by the group planner (PlanGroup) in Replay.

package autoscale

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// DefaultPolicy is the replay's default policy and the one
// docs/AUTOSCALING.md recommends: over its series it leaves little demand
// unmet at the lowest capacity of the named policies. A live group runs it
// by naming it (cloud.PolicyGPUCloud); a group that names no policy keeps
// the size it is given.
const DefaultPolicy = cloud.PolicyGPUCloud

// DemandMetric is the custom metric the replay publishes: the GPUs wanted
// in the step just ended. A live group that publishes its demand the same
// way (POST /v1/metrics, name demand_gpus) runs the replay's policies.
const DemandMetric = cloud.CustomMetricPrefix + "demand_gpus"

// Budget is a spending ceiling: the group never holds more instances
// than PerHour buys at InstancePrice per instance-hour.
type Budget struct {
	PerHour       money.Micros
	InstancePrice money.Micros
}

// Limits bound every decision.
type Limits struct {
	Min, Max int
	// Budget, when not nil, caps the capacity at what it affords.
	Budget *Budget
}

// Affordable is the number of instances the budget pays for, or -1
// without a budget.
func (l Limits) Affordable() int {
	if l.Budget == nil {
		return -1
	}
	n := int64(l.Budget.PerHour / l.Budget.InstancePrice)
	if n > math.MaxInt32 {
		n = math.MaxInt32
	}
	return int(n)
}

// Ceiling is the most instances the limits allow: Max, or less when the
// budget affords less.
func (l Limits) Ceiling() int {
	if a := l.Affordable(); a >= 0 && a < l.Max {
		return a
	}
	return l.Max
}

// Validate checks the limits. A budget that affords fewer than Min
// instances is an error: the two limits could not both hold.
func (l Limits) Validate() error {
	switch {
	case l.Min < 0:
		return fmt.Errorf("autoscale: min %d is negative", l.Min)
	case l.Max < l.Min:
		return fmt.Errorf("autoscale: max %d is below min %d", l.Max, l.Min)
	}
	if b := l.Budget; b != nil {
		if b.InstancePrice <= 0 {
			return fmt.Errorf("autoscale: budget needs a positive instance price, got %s", b.InstancePrice)
		}
		if b.PerHour < 0 {
			return fmt.Errorf("autoscale: budget %s per hour is negative", b.PerHour)
		}
		if a := l.Affordable(); a < l.Min {
			return fmt.Errorf("autoscale: a budget of %s per hour affords %d instances at %s, fewer than min %d",
				b.PerHour, a, b.InstancePrice, l.Min)
		}
	}
	return nil
}

// Config holds the replay's group: its size, timing and policies. Zero
// values take the defaults (Defaults).
type Config struct {
	// UnitGPUs is the GPUs per instance (default 8).
	UnitGPUs int
	// Limits are the group's min and max, and its budget.
	Limits Limits
	// Boot is the time from a launch to a running, usable member.
	Boot time.Duration
	// Buffer is how much earlier than Boot a forecast acts (EC2's
	// SchedulingBufferTime; default 5 minutes): the gpucloud and
	// predictive policies' buffer_seconds (predictive's is Boot+Buffer,
	// since it does not measure the boot).
	Buffer time.Duration
	// TargetUtilization is target tracking's and step's target (default
	// 0.7): target GPUs per instance are UnitGPUs times it.
	TargetUtilization float64
	// ScaleInWindow is the group's stabilization window (default 5
	// minutes), Cooldown its cooldown (default 5 minutes), and Notice the
	// scale-in notice (default 120 s): a member given notice is paid for
	// and serves until it ends.
	ScaleInWindow, Cooldown, Notice time.Duration
	// Protected: the first Protected members launched are protected from
	// scale-in. LockFor: each member holds a completion lock for this
	// long after it is running (a job that must finish); the planner
	// releases neither, and a notice is withdrawn from a member that
	// takes its lock, as the group controller does.
	Protected int
	LockFor   time.Duration
	// Policies, when not empty, are the group's policies instead of the
	// named one's (any live policy type; metrics must be DemandMetric).
	Policies []cloud.ScalingPolicy
}

// Defaults returns c with every zero field set to its default.
func (c Config) Defaults() Config {
	if c.UnitGPUs == 0 {
		c.UnitGPUs = 8
	}
	if c.Limits.Max == 0 && c.Limits.Min == 0 && c.Limits.Budget == nil {
		c.Limits.Max = math.MaxInt32
	}
	if c.Buffer == 0 {
		c.Buffer = 5 * time.Minute
	}
	if c.TargetUtilization == 0 {
		c.TargetUtilization = 0.7
	}
	if c.ScaleInWindow == 0 {
		c.ScaleInWindow = DefaultGroupStabilization
	}
	if c.Cooldown == 0 {
		c.Cooldown = DefaultGroupCooldown
	}
	if c.Notice == 0 {
		c.Notice = 120 * time.Second
	}
	return c
}

func (c Config) validate() error {
	whole := func(d time.Duration) bool { return d%time.Second == 0 }
	switch {
	case c.UnitGPUs < 1:
		return fmt.Errorf("autoscale: unit GPUs %d: must be at least 1", c.UnitGPUs)
	case c.Boot < 0 || c.Buffer < 0 || c.ScaleInWindow < 0 || c.Cooldown < 0 || c.Notice < 0 || c.LockFor < 0:
		return errors.New("autoscale: boot, buffer, window, cooldown, notice and lock must not be negative")
	case !whole(c.Boot) || !whole(c.Buffer) || !whole(c.ScaleInWindow) || !whole(c.Cooldown) || !whole(c.Notice) || !whole(c.LockFor):
		return errors.New("autoscale: boot, buffer, window, cooldown, notice and lock must be whole seconds")
	case !(c.TargetUtilization > 0 && c.TargetUtilization <= 1):
		return fmt.Errorf("autoscale: target utilization %v: want more than 0 and at most 1", c.TargetUtilization)
	case c.Protected < 0:
		return fmt.Errorf("autoscale: protected %d is negative", c.Protected)
	}
	return c.Limits.Validate()
}

// presets are the named policies: each a live group's policy list.
var presets = map[string]func(Config) []cloud.ScalingPolicy{
	cloud.PolicyGPUCloud: func(c Config) []cloud.ScalingPolicy {
		return []cloud.ScalingPolicy{{Name: "gpucloud", Type: cloud.PolicyGPUCloud, Metric: DemandMetric,
			Target: float64(c.UnitGPUs), BufferSeconds: int(c.Buffer / time.Second)}}
	},
	cloud.PolicyPredictive: func(c Config) []cloud.ScalingPolicy {
		return []cloud.ScalingPolicy{{Name: "predictive", Type: cloud.PolicyPredictive, Metric: DemandMetric,
			Target: float64(c.UnitGPUs), BufferSeconds: int((c.Boot + c.Buffer) / time.Second)}}
	},
	cloud.PolicyTarget: func(c Config) []cloud.ScalingPolicy {
		return []cloud.ScalingPolicy{{Name: "target", Type: cloud.PolicyTarget, Metric: DemandMetric,
			Target: c.TargetUtilization * float64(c.UnitGPUs)}}
	},
	// step: +10% at target+0.1, +30% at +0.2, +50% at +0.3, -10% under
	// target-0.2 (utilization of the members held, in GPUs per member).
	cloud.PolicyStep: func(c Config) []cloud.ScalingPolicy {
		u := float64(c.UnitGPUs)
		f := func(v float64) *float64 { v *= u; return &v }
		return []cloud.ScalingPolicy{{Name: "step", Type: cloud.PolicyStep, Metric: DemandMetric,
			Target: c.TargetUtilization * u, CooldownSeconds: int(c.Cooldown / time.Second),
			Steps: []cloud.StepAdjustment{
				{Lower: f(0.1), Upper: f(0.2), Change: 10},
				{Lower: f(0.2), Upper: f(0.3), Change: 30},
				{Lower: f(0.3), Change: 50},
				{Upper: f(-0.2), Change: -10},
			}}}
	},
}

// Policies lists the named policies, the default first.
func Policies() []string {
	out := []string{DefaultPolicy}
	var rest []string
	for name := range presets {
		if name != DefaultPolicy {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// PolicySpec is the policy list of a named policy with cfg (zero fields
// defaulted), or cfg.Policies when it has some.
func PolicySpec(name string, cfg Config) ([]cloud.ScalingPolicy, error) {
	cfg = cfg.Defaults()
	if len(cfg.Policies) > 0 {
		return cfg.Policies, nil
	}
	mk, ok := presets[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("unknown autoscaling policy %q (known: %s)", name, strings.Join(Policies(), ", "))
	}
	return mk(cfg), nil
}

// instancesFor is the whole instances that hold gpus.
func instancesFor(gpus float64, unit int) int {
	if !(gpus > 0) {
		return 0
	}
	n := math.Ceil(gpus/float64(unit) - 1e-9)
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}
