// The demand half's policies and their configuration.
//
// Time model. A policy is called at the start of each step of the series
// (Input.Now) and sees the demand of the steps before it (Input.Past), never
// the step that is starting. A scale-out is usable Boot after the decision;
// a scale-in takes effect at once. docs/AUTOSCALING.md has the semantics.

package autoscale

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

// DefaultPolicy is the policy a new group gets.
const DefaultPolicy = "gpucloud"

// Input is what a policy sees at one decision.
type Input struct {
	// Now is the time of the decision, the start of the step that begins.
	Now time.Time
	// Interval is the spacing of the history.
	Interval time.Duration
	// Past is the demand in GPUs of each step before Now, oldest first;
	// Past[len(Past)-1] covers [Now-Interval, Now). Calls to one policy
	// must pass a history that only grows (the same series, appended).
	Past []float64
	// Ready is the number of usable instances; Booting those launched
	// but not usable yet. Both are paid for.
	Ready, Booting int
}

// Decision is a policy's answer with the values that led to it.
type Decision struct {
	// Desired is the capacity to hold, in instances, after the limits.
	Desired int `json:"desired"`
	// Raw is the policy's own recommendation before stabilization,
	// cooldown and limits.
	Raw int `json:"raw"`
	// Limit names the limit that cut the decision: "min", "max",
	// "budget", or "" when none did.
	Limit string `json:"limit,omitempty"`
	// Forecast is the demand (GPUs) the policy planned for, when it
	// forecasts; 0 otherwise.
	Forecast float64 `json:"forecast,omitempty"`
}

// Policy decides one group's capacity. A Policy keeps state about the
// history it has seen (profiles, windows), so each group or replay needs
// its own, made by New.
type Policy interface {
	Name() string
	Decide(in Input) Decision
}

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

// clamp applies the limits to v and names the one that cut it.
func (l Limits) clamp(v int) (int, string) {
	if v < l.Min {
		return l.Min, "min"
	}
	if a := l.Affordable(); a >= 0 && a < l.Max && v > a {
		return a, "budget"
	}
	if v > l.Max {
		return l.Max, "max"
	}
	return v, ""
}

// Config holds every policy's settings; each policy reads its own.
// Zero values take the defaults (Defaults).
type Config struct {
	// UnitGPUs is the GPUs per instance.
	UnitGPUs int
	// Limits bound every decision.
	Limits Limits
	// Boot is the time from a scale-out decision to usable capacity.
	Boot time.Duration
	// Buffer is how much earlier than Boot a forecast acts (EC2's
	// SchedulingBufferTime; default 5 minutes).
	Buffer time.Duration
	// TargetUtilization is target tracking's target (default 0.7).
	TargetUtilization float64
	// ScaleInWindow is the scale-in stabilization window of target and
	// gpucloud (the HPA's scaleDown stabilizationWindowSeconds; default
	// 5 minutes).
	ScaleInWindow time.Duration
	// Cooldown blocks step's next action after one (default 5 minutes).
	Cooldown time.Duration
	// LearnSteps is how many steps of the latest history the scheduled
	// policy learns its WeekSchedule from, once they are there and again every
	// week after. 0 means one week.
	LearnSteps int
	// WeekSchedule, when not nil, is the scheduled policy's given
	// capacity per hour of the week (index 0 is Sunday 00:00–01:00 in the series' zone).
	WeekSchedule *WeekSchedule
	// SafetySigmas is gpucloud's margin over its forecast, in standard
	// deviations of its own recent forecast error (default 2).
	SafetySigmas float64
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
		c.ScaleInWindow = 5 * time.Minute
	}
	if c.Cooldown == 0 {
		c.Cooldown = 5 * time.Minute
	}
	if c.SafetySigmas == 0 {
		c.SafetySigmas = 2
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.UnitGPUs < 1:
		return fmt.Errorf("autoscale: unit GPUs %d: must be at least 1", c.UnitGPUs)
	case c.Boot < 0 || c.Buffer < 0 || c.ScaleInWindow < 0 || c.Cooldown < 0:
		return errors.New("autoscale: boot, buffer, window and cooldown must not be negative")
	case !(c.TargetUtilization > 0 && c.TargetUtilization <= 1):
		return fmt.Errorf("autoscale: target utilization %v: want more than 0 and at most 1", c.TargetUtilization)
	case !(c.SafetySigmas >= 0 && c.SafetySigmas <= 10):
		return fmt.Errorf("autoscale: safety sigmas %v: want 0..10", c.SafetySigmas)
	case c.LearnSteps < 0:
		return fmt.Errorf("autoscale: learn steps %d is negative", c.LearnSteps)
	}
	return c.Limits.Validate()
}

var constructors = map[string]func(Config) Policy{
	"target":     newTarget,
	"step":       newStep,
	"scheduled":  newWeeklySchedule,
	"predictive": newPredictive,
	"gpucloud":   newGPUCloud,
}

// Policies lists the policy names, the default first.
func Policies() []string {
	out := []string{DefaultPolicy}
	var rest []string
	for name := range constructors {
		if name != DefaultPolicy {
			rest = append(rest, name)
		}
	}
	sort.Strings(rest)
	return append(out, rest...)
}

// New makes a fresh policy by name with cfg (zero fields defaulted).
func New(name string, cfg Config) (Policy, error) {
	mk, ok := constructors[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("unknown autoscaling policy %q (known: %s)", name, strings.Join(Policies(), ", "))
	}
	cfg = cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
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

// windowMax is the largest value pushed within a trailing time window,
// kept as a monotone deque: O(1) amortized per push.
type windowMax struct {
	window time.Duration
	at     []time.Time
	val    []int
}

// push adds v at t and returns the largest value in (t-window, t].
func (w *windowMax) push(t time.Time, v int) int {
	for len(w.val) > 0 && w.val[len(w.val)-1] <= v {
		w.val, w.at = w.val[:len(w.val)-1], w.at[:len(w.at)-1]
	}
	w.val, w.at = append(w.val, v), append(w.at, t)
	cut := 0
	for cut < len(w.at)-1 && !w.at[cut].After(t.Add(-w.window)) {
		cut++
	}
	if cut > 0 {
		// Shift rather than reslice so the backing arrays stay small.
		n := copy(w.at, w.at[cut:])
		copy(w.val, w.val[cut:])
		w.at, w.val = w.at[:n], w.val[:n]
	}
	return w.val[0]
}
