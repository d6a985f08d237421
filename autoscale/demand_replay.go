package autoscale

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Series is a demand series: GPUs wanted during each step, the step i
// covering [Start+i·Interval, Start+(i+1)·Interval).
type Series struct {
	Start    time.Time
	Interval time.Duration
	GPUs     []float64
}

// Time is the start of step i.
func (s Series) Time(i int) time.Time { return s.Start.Add(time.Duration(i) * s.Interval) }

// DefaultHistory is the history prefix of a series of n steps: seven days
// or a tenth of the series, whichever is shorter.
func DefaultHistory(n int, interval time.Duration) int {
	return min(int(7*24*time.Hour/interval), n/10)
}

// Prices give a dollar figure for the capacity: OnDemand and Spot per
// GPU-hour. Capacity is split as a mixed group would: the first
// OnDemandBase instances on demand, then OnDemandPercent of the rest
// (rounded up) on demand and the remainder on spot. Spot reclaims are
// not modelled.
type Prices struct {
	OnDemand, Spot  money.Micros
	OnDemandBase    int
	OnDemandPercent int
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Config is the replay's group (UnitGPUs, Boot, limits, ...).
	Config Config
	// HistorySteps is the prefix that only feeds the policies; the
	// figures cover the steps after it. Negative means DefaultHistory.
	HistorySteps int
	// Prices, when not nil, add a cost to each result.
	Prices *Prices
	// KeepTrace keeps each step's capacity in Result.Capacity.
	KeepTrace bool
	// Steps, when not nil, is called with every step, history included.
	Steps func(i int, st Step)
	// gc, when not nil, replaces the gpucloud policy's constants (the
	// cross-validation test).
	gc *gcConfig
}

// Step is one step of a replay, as `--trace` writes it: at the step's
// start, the members the planner saw and what it decided.
type Step struct {
	Time time.Time
	// Demand is the GPUs wanted during the step (the planner has not seen
	// it yet: it decides from the steps before).
	Demand float64
	// Ready members are running (usable); Booting are launched and not
	// running yet; Leaving are under a scale-in notice (paid, serving).
	Ready, Booting, Leaving int
	// Desired is the decision; Launched and Released what it did.
	Desired, Launched, Released int
	// Policy, Limit and Reason are the decision's (cloud.GroupDecision).
	Policy, Limit, Reason string
}

// Result holds one policy's figures over the evaluated steps.
type Result struct {
	Policy            string  `json:"policy"`
	DemandGPUHours    float64 `json:"demand_gpu_hours"`
	CapacityGPUHours  float64 `json:"capacity_gpu_hours"`
	ShortfallGPUHours float64 `json:"shortfall_gpu_hours"`
	IdleGPUHours      float64 `json:"idle_gpu_hours"`
	ScalingActions    int     `json:"scaling_actions"`
	CostVsOracle      float64 `json:"cost_vs_oracle"`
	// ShortfallPercent is ShortfallGPUHours as a percentage of demand.
	ShortfallPercent float64 `json:"shortfall_percent"`
	// PeakInstances is the most instances held (paid) at once.
	PeakInstances int `json:"peak_instances"`
	// Cost is the paid capacity at Prices; nil without prices.
	Cost         *money.Micros `json:"cost,omitempty"`
	OnDemandCost *money.Micros `json:"on_demand_cost,omitempty"`
	SpotCost     *money.Micros `json:"spot_cost,omitempty"`
	// Capacity is the instances paid for in each step of the whole
	// series (history included), with ReplayOptions.KeepTrace.
	Capacity []int32 `json:"-"`
}

// Validate checks that a series can be replayed.
func (s Series) Validate() error {
	if s.Interval <= 0 {
		return fmt.Errorf("autoscale: series interval %v: must be positive", s.Interval)
	}
	if s.Interval%time.Second != 0 {
		return fmt.Errorf("autoscale: series interval %v: must be whole seconds", s.Interval)
	}
	if len(s.GPUs) < 2 {
		return errors.New("autoscale: a series needs at least two steps")
	}
	if s.Interval > maxSpan/time.Duration(len(s.GPUs)-1) {
		return fmt.Errorf("autoscale: %d steps of %v: a series spans at most %v", len(s.GPUs), s.Interval, maxSpan)
	}
	for i, v := range s.GPUs {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("autoscale: step %d (%s): demand %v is not a finite non-negative number", i, s.Time(i).Format(time.RFC3339), v)
		}
	}
	return nil
}

func (o ReplayOptions) history(s Series) (int, error) {
	h := o.HistorySteps
	if h < 0 {
		h = DefaultHistory(len(s.GPUs), s.Interval)
	}
	if h >= len(s.GPUs) {
		return 0, fmt.Errorf("autoscale: history of %d steps leaves nothing of a %d-step series to evaluate", h, len(s.GPUs))
	}
	return h, nil
}

// Oracle is the capacity a clairvoyant holds: each step exactly its
// demand rounded up to whole instances, within min and max (and the
// budget), each instance launched Config.Boot before the step that needs
// it and paid from then, and given its notice ahead so that it goes as
// soon as no step needs it. Its shortfall is zero unless max or the
// budget cut it.
func Oracle(s Series, opt ReplayOptions) (Result, error) {
	cfg := opt.Config.Defaults()
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	hist, err := opt.history(s)
	if err != nil {
		return Result{}, err
	}
	need := make([]int, len(s.GPUs))
	ceil := cfg.Limits.Ceiling()
	for i, v := range s.GPUs {
		need[i] = max(cfg.Limits.Min, min(ceil, instancesFor(v, cfg.UnitGPUs)))
	}
	acc := newAccount(s, cfg, opt.Prices)
	secs := int64(s.Interval / time.Second)
	boot := int64(cfg.Boot / time.Second)
	for i, v := range s.GPUs {
		// Over the step, the instances paid are its own need and, from
		// Boot before each later step's start, that step's.
		held, at := need[i], int64(0)
		var segs []segment
		for j := i + 1; j < len(s.GPUs); j++ {
			from := int64(j-i)*secs - boot // seconds into step i
			if from >= secs {
				break
			}
			from = max(0, from)
			if need[j] > held {
				if from > at {
					segs = append(segs, segment{secs: from - at, paid: held, usable: need[i]})
				}
				held, at = need[j], from
			}
		}
		segs = append(segs, segment{secs: secs - at, paid: held, usable: need[i]})
		if opt.KeepTrace {
			acc.res.Capacity = append(acc.res.Capacity, int32(held))
		}
		if i < hist {
			continue
		}
		if i > 0 && need[i] != need[i-1] {
			acc.res.ScalingActions++
		}
		acc.step(v, segs)
	}
	acc.res.Policy = "oracle"
	r := acc.finish()
	r.CostVsOracle = 1
	return r, nil
}

// segment is a stretch of a step with a constant number of instances
// paid for and usable.
type segment struct {
	secs         int64
	paid, usable int
}

// simMember is one member of the replay's group.
type simMember struct {
	id             string
	created, ready time.Time
	// gone is the end of its notice (zero: none).
	gone      time.Time
	protected bool
}

// ReplayGroup is the group the replay runs policies on: cfg's limits,
// timing and budget, one pool, and the policies given.
func ReplayGroup(cfg Config, policies []cloud.ScalingPolicy) *cloud.Group {
	cfg = cfg.Defaults()
	g := &cloud.Group{ID: "replay", Name: "replay", Template: cloud.GroupTemplate{Offerings: []string{"replay"}},
		Min: cfg.Limits.Min, Max: cfg.Limits.Max, Desired: cfg.Limits.Min, Policies: policies,
		Timing: cloud.GroupTiming{CooldownSeconds: int(cfg.Cooldown / time.Second),
			StabilizationSeconds: int(cfg.ScaleInWindow / time.Second), NoticeSeconds: int(cfg.Notice / time.Second)},
		State: cloud.GroupActive}
	if b := cfg.Limits.Budget; b != nil {
		g.BudgetPerHour = b.PerHour
	}
	return g
}

// ReplayPools is the replay group's one pool: unbounded, on demand, at
// the budget's instance price.
func ReplayPools(cfg Config) []Pool {
	p := Pool{Offering: "replay", FreeOnDemand: -1, FreeSpot: -1}
	if b := cfg.Limits.Budget; b != nil {
		p.OnDemand = b.InstancePrice
	}
	return []Pool{p}
}

// Replay runs policy name (a named policy, or Config.Policies under that
// label) over the series on a simulated group, through the group planner
// the group controller calls (PlanGroup), and accounts for its capacity.
// At the start of each step the demand of the step before is published
// as the custom metric DemandMetric and the planner decides, as the
// controller's round would, from the group's members (booting, running,
// leaving; protected or locked ones held). A launch runs Config.Boot
// later; a member released gets Config.Notice, during which it is paid
// for and serves, and then goes. Every member is paid for from its
// launch until it goes.
func Replay(name string, s Series, opt ReplayOptions) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if s.Interval < time.Minute || s.Interval%time.Minute != 0 {
		return Result{}, fmt.Errorf("autoscale: series interval %v: the replay needs whole minutes (the group's history is by the minute)", s.Interval)
	}
	cfg := opt.Config.Defaults()
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	pols, err := PolicySpec(name, cfg)
	if err != nil {
		return Result{}, err
	}
	g := ReplayGroup(cfg, pols)
	if err := ValidateGroup(g); err != nil {
		return Result{}, fmt.Errorf("autoscale: policy %s: %w", name, err)
	}
	for i, p := range pols {
		if p.Type != cloud.PolicyScheduled && p.Metric != DemandMetric {
			return Result{}, fmt.Errorf("autoscale: policies[%d]: metric %q: the replay publishes only %s", i, p.Metric, DemandMetric)
		}
	}
	hist, err := opt.history(s)
	if err != nil {
		return Result{}, err
	}
	oracle, err := Oracle(s, ReplayOptions{Config: opt.Config, HistorySteps: hist})
	if err != nil {
		return Result{}, err
	}
	g.CreatedAt = s.Start
	acc := newAccount(s, cfg, opt.Prices)
	if opt.KeepTrace {
		acc.res.Capacity = make([]int32, 0, len(s.GPUs))
	}
	st, h, pools := NewGroupState(), NewHistory(), ReplayPools(cfg)
	st.gcp = opt.gc
	var ms []*simMember
	launched := 0
	for i := range s.GPUs {
		now := s.Time(i)
		in := GroupInput{Now: now, Group: g, Pools: pools, History: h}
		if i > 0 {
			h.Add(DemandMetric, s.Time(i-1), s.GPUs[i-1])
			in.Current = map[string]float64{DemandMetric: s.GPUs[i-1]}
		}
		step := Step{Time: now, Demand: s.GPUs[i]}
		for _, m := range ms {
			mb := Member{ID: m.id, Offering: "replay", Market: cloud.MarketOnDemand, State: cloud.Pending, CreatedAt: m.created}
			if !now.Before(m.ready) {
				mb.State, mb.RunningSince = cloud.Running, m.ready
			}
			mb.Held = m.held(now, cfg)
			mb.Leaving, mb.LeavingUntil = !m.gone.IsZero(), m.gone
			switch {
			case mb.Leaving:
				step.Leaving++
			case mb.State == cloud.Running:
				step.Ready++
			default:
				step.Booting++
			}
			in.Members = append(in.Members, mb)
		}
		plan := PlanGroup(st, in)
		g.Desired = plan.Desired
		if plan.Min != nil {
			g.Min = *plan.Min
		}
		if plan.Max != nil {
			g.Max = *plan.Max
		}
		for range plan.Launch {
			launched++
			ms = append(ms, &simMember{id: fmt.Sprintf("m%d", launched), created: now, ready: now.Add(cfg.Boot),
				protected: launched <= cfg.Protected})
		}
		for _, r := range plan.Release {
			for _, m := range ms {
				if m.id == r.InstanceID && m.gone.IsZero() {
					m.gone = now.Add(cfg.Notice)
				}
			}
		}
		// As the controller's round does after planning: a notice is
		// withdrawn from a member that took its lock, and a member whose
		// notice has ended goes.
		kept := ms[:0]
		for _, m := range ms {
			switch {
			case m.gone.IsZero():
			case m.held(now, cfg):
				m.gone = time.Time{}
			case !m.gone.After(now):
				continue
			}
			kept = append(kept, m)
		}
		clear(ms[len(kept):])
		ms = kept
		step.Desired, step.Launched, step.Released = plan.Desired, len(plan.Launch), len(plan.Release)
		step.Policy, step.Limit, step.Reason = plan.Decision.Policy, plan.Decision.Limit, plan.Decision.Reason
		if opt.Steps != nil {
			opt.Steps(i, step)
		}
		if opt.KeepTrace {
			acc.res.Capacity = append(acc.res.Capacity, int32(len(ms)))
		}
		if i < hist {
			continue
		}
		if len(plan.Launch)+len(plan.Release) > 0 {
			acc.res.ScalingActions++
		}
		acc.step(s.GPUs[i], segments(ms, now, s.Interval))
	}
	acc.res.Policy = name
	r := acc.finish()
	if oracle.CapacityGPUHours > 0 {
		r.CostVsOracle = r.CapacityGPUHours / oracle.CapacityGPUHours
	}
	return r, nil
}

// held reports whether m is protected or holds its completion lock at t.
func (m *simMember) held(t time.Time, cfg Config) bool {
	return m.protected || cfg.LockFor > 0 && !t.Before(m.ready) && t.Before(m.ready.Add(cfg.LockFor))
}

// segments splits the step from start into stretches of constant paid
// and usable members: a member is paid until its notice ends and usable
// from its ready time until then.
func segments(ms []*simMember, start time.Time, interval time.Duration) []segment {
	end := start.Add(interval)
	cuts := []time.Time{start, end}
	for _, m := range ms {
		for _, t := range []time.Time{m.ready, m.gone} {
			if t.After(start) && t.Before(end) {
				cuts = append(cuts, t)
			}
		}
	}
	sort.Slice(cuts, func(a, b int) bool { return cuts[a].Before(cuts[b]) })
	var out []segment
	for k := 0; k+1 < len(cuts); k++ {
		a, b := cuts[k], cuts[k+1]
		if !b.After(a) {
			continue
		}
		sg := segment{secs: int64(b.Sub(a) / time.Second)}
		for _, m := range ms {
			if !m.gone.IsZero() && !m.gone.After(a) {
				continue
			}
			sg.paid++
			if !m.ready.After(a) {
				sg.usable++
			}
		}
		out = append(out, sg)
	}
	return out
}

// account sums GPU-seconds over the evaluated steps.
type account struct {
	s      Series
	cfg    Config
	prices *Prices
	step_  float64 // seconds per step
	// GPU-seconds.
	demand, capacity, shortfall float64
	// Instance-seconds, integers so that the cost is exact.
	odSec, spotSec int64
	res            Result
}

func newAccount(s Series, cfg Config, prices *Prices) *account {
	return &account{s: s, cfg: cfg, prices: prices, step_: s.Interval.Seconds()}
}

// step accounts one step: its demand against each segment's usable
// instances, and the instances paid.
func (a *account) step(demand float64, segs []segment) {
	unit := float64(a.cfg.UnitGPUs)
	a.demand += demand * a.step_
	for _, sg := range segs {
		a.res.PeakInstances = max(a.res.PeakInstances, sg.paid)
		a.capacity += float64(sg.paid) * unit * float64(sg.secs)
		a.shortfall += max(0, demand-float64(sg.usable)*unit) * float64(sg.secs)
		if p := a.prices; p != nil {
			od := min(sg.paid, p.OnDemandBase)
			if rest := sg.paid - od; rest > 0 {
				od += (rest*p.OnDemandPercent + 99) / 100
			}
			a.odSec += int64(od) * sg.secs
			a.spotSec += int64(sg.paid-od) * sg.secs
		}
	}
}

func (a *account) finish() Result {
	r := a.res
	r.DemandGPUHours = a.demand / 3600
	r.CapacityGPUHours = a.capacity / 3600
	r.ShortfallGPUHours = a.shortfall / 3600
	// Capacity is served demand plus idle; demand is served plus short.
	r.IdleGPUHours = max(0, (a.capacity-a.demand+a.shortfall)/3600)
	if a.demand > 0 {
		r.ShortfallPercent = 100 * a.shortfall / a.demand
	}
	if p := a.prices; p != nil {
		unit := int64(a.cfg.UnitGPUs)
		od := mulPerHour(p.OnDemand, a.odSec*unit)
		spot := mulPerHour(p.Spot, a.spotSec*unit)
		total := od + spot
		r.Cost, r.OnDemandCost, r.SpotCost = &total, &od, &spot
	}
	return r
}

// mulPerHour is price per GPU-hour times GPU-seconds, rounded once.
func mulPerHour(price money.Micros, gpuSeconds int64) money.Micros {
	v, err := money.MulDiv(price, gpuSeconds, money.SecondsPerHour)
	if err != nil {
		// More than 2^63 micros: nine trillion dollars.
		panic(err)
	}
	return v
}
