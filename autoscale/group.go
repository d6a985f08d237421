package autoscale

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// Defaults of a group's timing and mix, applied where the spec leaves a
// field 0.
const (
	DefaultGroupCooldown      = 300 * time.Second
	DefaultGroupWarmup        = 300 * time.Second
	DefaultGroupStabilization = 300 * time.Second
	DefaultPredictiveBuffer   = 300 * time.Second
	DefaultMaxSpotPriceRatio  = 80
	// PredictiveMinHistory is the history a predictive policy needs
	// before it acts (as on EC2).
	PredictiveMinHistory = 24 * time.Hour
	// ForecastHours is the length of Plan.Forecast and of
	// ForecastReport.AheadValues, at one value per hour.
	ForecastHours = 48
	// BackoffBase and BackoffMax bound the relaunch backoff: the n-th
	// consecutive step with failures waits BackoffBase·2^(n-1), at most
	// BackoffMax.
	BackoffBase = 10 * time.Second
	BackoffMax  = 10 * time.Minute
	// ReleaseRebalance is the release reason of a member replaced after a
	// rebalance recommendation.
	ReleaseRebalance = cloud.ReclaimRebalance
	// cronCatchUp: a rebuilt GroupState applies scheduled actions that
	// fired this long before its first step (and after the group's last
	// decision by that policy).
	cronCatchUp = 5 * time.Minute
)

// Member is one live member of a group as the controller sees it.
type Member struct {
	ID             string
	Offering, Zone string
	Market         cloud.Market
	State          cloud.State
	CreatedAt      time.Time
	// RunningSince is when it became running (zero: not yet: booting).
	RunningSince time.Time
	// Held: protected or locked (cloud.ScaleIn.Held). The planner never
	// releases a held member.
	Held bool
	// Leaving: under a scale-in or reclaim notice with Action set, or
	// stopping/terminating: on its way out, not counted as capacity.
	Leaving bool
	// Rebalance: a rebalance recommendation (an Interruption with an
	// empty Action, reason rebalance).
	Rebalance bool
	// GPU and CPU utilization (0..1) of its last sample; HasUtil false
	// when none yet.
	GPU, CPU float64
	HasUtil  bool
	// IdleSince: since when its GPU utilization has stayed under the
	// group's idle threshold (zero: not idle). The controller tracks it.
	IdleSince time.Time
}

// Pool is one offering in one zone, with the market's prices and room.
type Pool struct {
	Offering, Zone string
	// OnDemand is the on-demand price per instance-hour (0: unknown).
	OnDemand money.Micros
	// Spot is the current spot price per instance-hour; 0: no spot
	// market in this pool.
	Spot money.Micros
	// ReclaimRate is the recent reclaims per instance-hour (0..).
	ReclaimRate float64
	// FreeOnDemand and FreeSpot: how many more instances of this offering
	// fit in this zone now, per market (-1: unknown or unbounded).
	FreeOnDemand, FreeSpot int
}

// GroupInput is the snapshot the controller builds for one step.
type GroupInput struct {
	Now time.Time
	// Group is the spec: Min, Max, Desired, Policies, Mixed, Timing,
	// BudgetPerHour, IdleRelease and Status are read.
	Group *cloud.Group
	// Members: every live member (pending..running, stopping,
	// terminating); failed and terminated ones are not members.
	Members []Member
	// Failed: members that failed or were lost since the last step.
	Failed int
	// Pools: one per template offering × zone.
	Pools []Pool
	// History holds the group's metrics. Per step the controller adds
	// "load:gpu" (the sum of the GPU utilization of the members warm
	// past Timing.WarmupSeconds, in instances), "load:cpu" likewise,
	// "ready" (the number of such members), and "custom:NAME" (the
	// latest value published).
	History *History
	// Current, when it holds a series, is that series' newest
	// observation (the controller's latest samples of this step): target
	// and step policies read it, as the HPA reads current metrics, rather
	// than the mean of the History's newest minute, which mixes in the
	// samples before a change. Absent series are read from the History.
	Current map[string]float64
}

// Plan is what the controller carries out for one step: launches first,
// then releases (scale-in notices), then the new desired capacity, min
// and max, backoff and decision.
type Plan struct {
	// Desired is the new desired capacity: within min..max (min wins over
	// the budget), and within the budget otherwise.
	Desired int
	// Min and Max, when set, are the group's new min and max (a scheduled
	// action changed them).
	Min, Max *int
	// Decision explains the step: From (the group's Desired) and To;
	// Policy, the winning policy's label (PolicyLabel), or
	// "stabilization" (a scale-in held by the window), "idle-release",
	// "set-desired", "limits"; Limit, the limit that cut it ("min",
	// "max", "budget"); Metrics: "capacity" (members counted), "ready"
	// (warm members) and each dynamic policy's metric (a utilization as
	// the mean over ready members, a custom metric as published, and
	// "custom:NAME/instance" per counted member for step scaling);
	// Forecast, the highest predictive forecast in instances; Reason,
	// the reasons joined by "; ". The controller writes it as an event
	// when Desired, Min or Max change.
	Decision cloud.GroupDecision
	// Changed: Desired differs from the group's.
	Changed bool
	Launch  []Launch
	// Release lists members to give a scale-in notice; never a held one.
	Release []Release
	// Backoff is the group's new backoff state (nil: none).
	Backoff *cloud.GroupBackoff
	// Forecast is the predictive forecast in instances (load / target)
	// for the next 48 hours, one value per hour (each hour's mean), when
	// the group has a predictive policy with enough history.
	Forecast []float64
}

// Launch is one new instance.
type Launch struct {
	Offering, Zone string
	Market         cloud.Market
	// Reason: "scale-out", "replace" (a member released or failed),
	// "rebalance", "price-ratio" or "mix" (back to the mix's share).
	Reason string
}

// Release is a member to give a scale-in notice.
type Release struct {
	InstanceID string
	// Reason: cloud.ReclaimScaleIn, cloud.ReclaimIdle,
	// cloud.ReclaimPriceMove, or ReleaseRebalance.
	Reason string
}

// GroupState is the planner's memory across steps for one group: the
// stabilization window, each step policy's cooldown, each scheduled
// policy's last fire, each predictive policy's forecaster. Make one per
// group with NewGroupState. It may be lost (a controller restart) and is
// rebuilt on the first step of a fresh one:
//
//   - the stabilization window starts with the group's Desired as a
//     recommendation, so a fresh state scales in no earlier than a window
//     after it starts;
//   - a step policy's cooldown runs from the latest decision in
//     Group.Status.Decisions that names it;
//   - a scheduled policy applies an action that fired within 5 minutes
//     before the first step, unless a decision in Group.Status naming it
//     is as recent, or the group was created after it;
//   - forecasters are trained again from the History (up to 14 days).
//
// A GroupState is not safe for concurrent use; one goroutine plans a
// group at a time.
type GroupState struct {
	started     bool
	prevNow     time.Time
	lastDesired int
	window      stabilizer
	cooldown    map[string]time.Time
	cronLast    map[string]time.Time
	crons       map[string]*cronEntry
	fc          map[string]*fcState
	buf         []float64
}

type cronEntry struct {
	expr, tz string
	c        *Cron
	err      error
}

// NewGroupState returns a fresh state.
func NewGroupState() *GroupState {
	return &GroupState{
		cooldown: map[string]time.Time{},
		cronLast: map[string]time.Time{},
		crons:    map[string]*cronEntry{},
		fc:       map[string]*fcState{},
	}
}

// stabilizer keeps the highest recommendation of a trailing window: a
// monotone deque of (time, value), values strictly decreasing.
type stabilizer struct {
	at  []time.Time
	val []int
}

func (s *stabilizer) push(t time.Time, v int) {
	for len(s.val) > 0 && s.val[len(s.val)-1] <= v {
		s.val, s.at = s.val[:len(s.val)-1], s.at[:len(s.at)-1]
	}
	s.val, s.at = append(s.val, v), append(s.at, t)
}

// max is the highest value pushed in (t-window, t]; ok false when none.
func (s *stabilizer) max(t time.Time, window time.Duration) (int, bool) {
	cut := 0
	for cut < len(s.at) && !s.at[cut].After(t.Add(-window)) {
		cut++
	}
	if cut > 0 {
		n := copy(s.at, s.at[cut:])
		copy(s.val, s.val[cut:])
		s.at, s.val = s.at[:n], s.val[:n]
	}
	if len(s.val) == 0 {
		return 0, false
	}
	return s.val[0], true
}

func (s *stabilizer) reset(t time.Time, v int) {
	s.at, s.val = s.at[:0], s.val[:0]
	s.push(t, v)
}

// seconds is a spec's seconds field with its default.
func seconds(v int, def time.Duration) time.Duration {
	if v <= 0 {
		return def
	}
	return time.Duration(v) * time.Second
}

// PolicyLabel is how decisions and the planner's state name policy i of
// g: its Name, or "TYPE#i" when it has none.
func PolicyLabel(g *cloud.Group, i int) string {
	if p := g.Policies[i]; p.Name != "" {
		return p.Name
	}
	return fmt.Sprintf("%s#%d", g.Policies[i].Type, i)
}

// OnDemandShare is how many of n instances the mix puts on demand: the
// first OnDemandBase, then OnDemandPercent of the rest rounded up; all of
// them when Spot is off.
func OnDemandShare(m cloud.MixedInstances, n int) int {
	if !m.Spot {
		return n
	}
	if n <= m.OnDemandBase {
		return max(n, 0)
	}
	rest := n - m.OnDemandBase
	return max(0, min(n, m.OnDemandBase+(rest*m.OnDemandPercent+99)/100))
}

// rec is one policy's recommendation.
type rec struct {
	label string
	n     int
	why   string
}

// planner holds one step's working values.
type planner struct {
	st          *GroupState
	in          GroupInput
	g           *cloud.Group
	now         time.Time
	warmup      time.Duration
	counted     []*Member
	idle        []*Member // released idle this step: still paid for
	ready       int
	minC, maxC  int
	reasons     []string
	metrics     map[string]float64
	forecast    float64
	hasForecast bool
	limit       string
	policy      string
}

func (p *planner) say(format string, a ...any) {
	p.reasons = append(p.reasons, fmt.Sprintf(format, a...))
}

// PlanGroup decides one step of a group. It is pure: the same state and
// input give the same plan, and only st changes. The steps:
//
//  1. Capacity counts the members not Leaving. Ready members are running
//     and past Timing.WarmupSeconds (default 300 s) since RunningSince.
//  2. Scheduled policies whose cron fired in (previous step's Now, Now]
//     set Min, Max and Desired (Plan.Min, Plan.Max when they change; a
//     min above the max raises the max, a max below the min lowers the
//     min when the action set only the max). A policy that fired several
//     times counts once (the latest).
//  3. Dynamic policies recommend; the largest recommendation wins (as on
//     EC2); a policy with nothing to say abstains:
//     - target tracking on metric M with target T recommends
//     ceil(load(M)/T): gpu_utilization reads "load:gpu",
//     cpu_utilization "load:cpu", gpu_cpu_utilization the larger of
//     the two, custom:NAME the series "custom:NAME" (value / T). Loads
//     are the newest minute's mean. It abstains without data, or when
//     a utilization metric has no ready member while members exist
//     (all booting or warming up: nothing measured yet).
//     - step scaling compares the metric with T: for utilization
//     metrics the mean over ready members (load / ready), for custom
//     ones the value per counted member. The adjustment whose
//     [Lower, Upper) holds metric−T changes the counted capacity by
//     Change percent, rounded up, at least one instance. After it acts
//     (recommends something other than the current desired) it
//     abstains for CooldownSeconds (default the group's, 300 s).
//     - predictive forecasts the policy's load per minute from the
//     History with the `predictive` forecaster (daily and weekly
//     profiles) and recommends ceil(the highest forecast from Now to
//     Now+BufferSeconds (default 300 s) / T). It needs 24 hours of
//     history or abstains (the decision says how much there is);
//     ForecastOnly computes the forecast (Plan.Forecast) and abstains.
//     A scheduled SetDesired that fired, and a Desired the tenant set
//     since the last step, count as recommendations too.
//  4. Scale-out applies at once; scale-in is stabilized: the desired is
//     the highest recommendation of the last Timing.StabilizationSeconds
//     (default 300 s). When every policy abstains, or the group has no
//     dynamic policy (fixed size, manual, scheduled only), Desired stays
//     as set.
//  5. Limits: Desired is clamped to [Min, Max] (Decision.Limit "min" or
//     "max").
//  6. Idle release (Group.IdleRelease): members idle (IdleSince) for at
//     least IdleSeconds, not held, are released oldest idle first
//     (reason idle), down to Min; Desired becomes at most the capacity
//     left, and the stabilization window restarts from it.
//  7. Health: Failed > 0 starts or extends the backoff (see
//     nextBackoff); while Now < Backoff.Until nothing is launched.
//  8. Reconciliation (see reconcile): the members to keep, the launches
//     to reach Desired in the on-demand/spot mix, the releases, the
//     price-ratio and rebalance replacements, and the budget.
func PlanGroup(st *GroupState, in GroupInput) Plan {
	g := in.Group
	if g == nil || st == nil {
		return Plan{}
	}
	if st.cooldown == nil {
		*st = *NewGroupState()
	}
	if in.History == nil {
		in.History = NewHistory()
	}
	now := in.Now
	fresh := !st.started
	window := seconds(g.Timing.StabilizationSeconds, DefaultGroupStabilization)
	if fresh {
		st.window.reset(now, g.Desired)
		for _, d := range g.Status.Decisions {
			if d.Policy != "" && d.Time.After(st.cooldown[d.Policy]) {
				st.cooldown[d.Policy] = d.Time
			}
		}
	}
	p := &planner{st: st, in: in, g: g, now: now, minC: g.Min, maxC: g.Max,
		warmup: seconds(g.Timing.WarmupSeconds, DefaultGroupWarmup), metrics: map[string]float64{}}
	for i := range in.Members {
		m := &in.Members[i]
		if m.Leaving {
			continue
		}
		p.counted = append(p.counted, m)
		if p.warm(m) {
			p.ready++
		}
	}
	p.metrics["capacity"] = float64(len(p.counted))
	p.metrics["ready"] = float64(p.ready)

	plan := Plan{}
	base := g.Desired
	var recs []rec
	// 2. Scheduled actions.
	for i, pol := range g.Policies {
		if pol.Type != cloud.PolicyScheduled {
			continue
		}
		label := PolicyLabel(g, i)
		if sd, ok := p.scheduled(label, pol, fresh); ok {
			base = sd
			recs = append(recs, rec{label: label, n: sd, why: fmt.Sprintf("scheduled %s set desired %d", label, sd)})
		}
	}
	if p.minC != g.Min {
		v := p.minC
		plan.Min = &v
	}
	if p.maxC != g.Max {
		v := p.maxC
		plan.Max = &v
	}
	// 3. Dynamic policies.
	dynamic := false
	for i, pol := range g.Policies {
		label := PolicyLabel(g, i)
		var r rec
		var ok bool
		switch pol.Type {
		case cloud.PolicyTarget:
			dynamic = true
			r, ok = p.target(label, pol)
		case cloud.PolicyStep:
			dynamic = true
			r, ok = p.step(label, pol, base)
		case cloud.PolicyPredictive:
			dynamic = dynamic || !pol.ForecastOnly
			r, ok = p.predictive(label, pol, &plan)
		}
		if ok {
			recs = append(recs, r)
		}
	}
	d := base
	if !fresh && g.Desired != st.lastDesired && dynamic {
		recs = append(recs, rec{label: "set-desired", n: g.Desired, why: fmt.Sprintf("desired set to %d", g.Desired)})
	}
	if dynamic && len(recs) > 0 {
		best := recs[0]
		for _, r := range recs[1:] {
			if r.n > best.n {
				best = r
			}
		}
		st.window.push(now, best.n)
		held, _ := st.window.max(now, window)
		d = max(best.n, held)
		p.policy = best.label
		p.reasons = append(p.reasons, best.why)
		if d > best.n {
			p.say("scale-in stabilized: %d is the highest recommendation of the last %s", d, window)
			p.policy = "stabilization"
		}
	} else if len(recs) > 0 {
		// Scheduled only: the last action that fired wins.
		p.policy = recs[len(recs)-1].label
		p.reasons = append(p.reasons, recs[len(recs)-1].why)
	} else if dynamic {
		_, _ = st.window.max(now, window) // expire old recommendations
	}
	// 5. Limits.
	switch {
	case d < p.minC:
		d, p.limit = p.minC, "min"
		p.say("min %d", p.minC)
	case d > p.maxC:
		d, p.limit = p.maxC, "max"
		p.say("max %d", p.maxC)
	}
	// 6. Idle release.
	var released []Release
	if ir := g.IdleRelease; ir != nil && ir.IdleSeconds > 0 {
		var idle []*Member
		for _, m := range p.counted {
			if !m.Held && !m.IdleSince.IsZero() && now.Sub(m.IdleSince) >= time.Duration(ir.IdleSeconds)*time.Second {
				idle = append(idle, m)
			}
		}
		if k := min(len(idle), len(p.counted)-p.minC); k > 0 {
			sort.SliceStable(idle, func(a, b int) bool {
				if !idle[a].IdleSince.Equal(idle[b].IdleSince) {
					return idle[a].IdleSince.Before(idle[b].IdleSince)
				}
				return idle[a].ID < idle[b].ID
			})
			gone := map[string]bool{}
			for _, m := range idle[:k] {
				released = append(released, Release{InstanceID: m.ID, Reason: cloud.ReclaimIdle})
				gone[m.ID] = true
				p.idle = append(p.idle, m)
			}
			kept := p.counted[:0:0]
			for _, m := range p.counted {
				if !gone[m.ID] {
					kept = append(kept, m)
				}
			}
			size := max(d, len(p.counted))
			p.counted = kept
			if nd := min(d, max(p.minC, size-k)); nd != d {
				d = nd
				p.policy = "idle-release"
			}
			st.window.reset(now, d)
			p.say("idle release: %d member(s) under %.0f%% GPU for %s", k, ir.Threshold*100, time.Duration(ir.IdleSeconds)*time.Second)
		}
	}
	// 7. Health.
	plan.Backoff = nextBackoff(g.Status.Backoff, in.Failed, p.counted, d, now)
	blocked := plan.Backoff != nil && now.Before(plan.Backoff.Until)
	if blocked {
		p.say("launches wait until %s: %s", plan.Backoff.Until.UTC().Format(time.RFC3339), plan.Backoff.Reason)
	}
	// 8. Reconciliation.
	r := p.reconcile(d, blocked)
	plan.Launch = r.launch
	plan.Release = append(released, r.release...)
	plan.Desired = r.desired
	plan.Changed = plan.Desired != g.Desired
	if plan.Changed && p.policy == "" {
		p.policy = "limits"
	}
	for k, v := range p.metrics {
		p.metrics[k] = math.Round(v*1e4) / 1e4
	}
	plan.Decision = cloud.GroupDecision{Time: now, From: g.Desired, To: plan.Desired, Policy: p.policy,
		Limit: p.limit, Metrics: p.metrics, Reason: strings.Join(p.reasons, "; ")}
	if p.hasForecast {
		plan.Decision.Forecast = math.Round(p.forecast*1e4) / 1e4
	}
	if plan.Decision.Reason == "" {
		plan.Decision.Reason = fmt.Sprintf("holds %d", plan.Desired)
	}
	st.started, st.prevNow, st.lastDesired = true, now, plan.Desired
	return plan
}

// warm reports whether m is ready: running and past the warm-up.
func (p *planner) warm(m *Member) bool {
	return m.State == cloud.Running && !m.RunningSince.IsZero() && p.now.Sub(m.RunningSince) >= p.warmup
}

// scheduled checks one scheduled policy and applies it when it fired;
// it returns the desired it set, if any.
func (p *planner) scheduled(label string, pol cloud.ScalingPolicy, fresh bool) (int, bool) {
	st := p.st
	e := st.crons[label]
	if e == nil || e.expr != pol.Cron || e.tz != pol.TimeZone {
		e = &cronEntry{expr: pol.Cron, tz: pol.TimeZone}
		e.c, e.err = LoadCron(pol.Cron, pol.TimeZone)
		st.crons[label] = e
	}
	if e.err != nil {
		p.say("scheduled %s: %v", label, e.err)
		return 0, false
	}
	last, ok := st.cronLast[label]
	if !ok {
		last = st.prevNow
		if fresh {
			last = p.now.Add(-cronCatchUp)
			if p.g.CreatedAt.After(last) {
				last = p.g.CreatedAt
			}
			for _, d := range p.g.Status.Decisions {
				if d.Policy == label && d.Time.After(last) {
					last = d.Time
				}
			}
		}
	}
	st.cronLast[label] = p.now
	at, fired := e.c.Fired(last, p.now)
	if !fired {
		return 0, false
	}
	var parts []string
	if pol.SetMin != nil {
		p.minC = *pol.SetMin
		parts = append(parts, fmt.Sprintf("min %d", p.minC))
	}
	if pol.SetMax != nil {
		p.maxC = *pol.SetMax
		parts = append(parts, fmt.Sprintf("max %d", p.maxC))
	}
	if p.minC > p.maxC {
		if pol.SetMax != nil && pol.SetMin == nil {
			p.minC = p.maxC
		} else {
			p.maxC = p.minC
		}
	}
	if pol.SetDesired != nil {
		parts = append(parts, fmt.Sprintf("desired %d", *pol.SetDesired))
	}
	p.say("scheduled %s (%s) fired at %s: %s", label, e.c, at.In(e.c.Location()).Format("2006-01-02 15:04 MST"),
		strings.Join(parts, ", "))
	if p.policy == "" {
		p.policy = label
	}
	if pol.SetDesired != nil {
		return *pol.SetDesired, true
	}
	return 0, false
}

// metricLoad is the newest value of a policy's metric in instance units
// (utilization metrics) or as published (custom).
func (p *planner) metricLoad(metric string) (float64, bool) {
	switch metric {
	case "", cloud.MetricGPUUtilization:
		return p.latest("load:gpu")
	case cloud.MetricCPUUtilization:
		return p.latest("load:cpu")
	case cloud.MetricGPUOrCPU:
		g, okG := p.latest("load:gpu")
		c, okC := p.latest("load:cpu")
		return max(g, c), okG || okC
	}
	return p.latest(metric)
}

// latest is a series' current observation, or the History's newest
// minute.
func (p *planner) latest(series string) (float64, bool) {
	if v, ok := p.in.Current[series]; ok {
		return v, true
	}
	v, _, ok := p.in.History.Last(series)
	return v, ok
}

func isCustom(metric string) bool { return strings.HasPrefix(metric, cloud.CustomMetricPrefix) }

func metricName(metric string) string {
	if metric == "" {
		return cloud.MetricGPUUtilization
	}
	return metric
}

// wantFor is the instances load asks for at target t.
func wantFor(load, t float64) int {
	if !(t > 0) || !(load > 0) {
		return 0
	}
	// Loads are kept as float32: a tolerance of a millionth keeps a
	// load of exactly k instances at k.
	v := math.Ceil(load/t - 1e-6)
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}

func (p *planner) target(label string, pol cloud.ScalingPolicy) (rec, bool) {
	m := metricName(pol.Metric)
	load, ok := p.metricLoad(m)
	if !ok {
		p.say("%s: no %s data yet", label, m)
		return rec{}, false
	}
	if !isCustom(m) {
		if p.ready == 0 && len(p.counted) > 0 {
			p.say("%s: no member warm yet", label)
			return rec{}, false
		}
		if p.ready > 0 {
			p.metrics[m] = load / float64(p.ready)
		}
	} else {
		p.metrics[m] = load
	}
	n := wantFor(load, pol.Target)
	return rec{label: label, n: n, why: fmt.Sprintf("%s: %s load %.2f at target %.2f wants %d", label, m, load, pol.Target, n)}, true
}

func (p *planner) step(label string, pol cloud.ScalingPolicy, current int) (rec, bool) {
	m := metricName(pol.Metric)
	load, ok := p.metricLoad(m)
	if !ok {
		p.say("%s: no %s data yet", label, m)
		return rec{}, false
	}
	var v float64
	if isCustom(m) {
		v = load / float64(max(1, len(p.counted)))
		p.metrics[m+"/instance"] = v
	} else {
		if p.ready == 0 {
			p.say("%s: no member warm yet", label)
			return rec{}, false
		}
		v = load / float64(p.ready)
		p.metrics[m] = v
	}
	cd := seconds(pol.CooldownSeconds, seconds(p.g.Timing.CooldownSeconds, DefaultGroupCooldown))
	if last, ok := p.st.cooldown[label]; ok && p.now.Sub(last) < cd {
		return rec{}, false
	}
	diff := v - pol.Target
	for _, a := range pol.Steps {
		if a.Lower != nil && diff < *a.Lower || a.Upper != nil && diff >= *a.Upper || a.Change == 0 {
			continue
		}
		c := len(p.counted)
		delta := max(1, int(math.Ceil(float64(c*abs(a.Change))/100-1e-9)))
		n := c + delta
		if a.Change < 0 {
			n = max(0, c-delta)
		}
		if n != current {
			p.st.cooldown[label] = p.now
		}
		return rec{label: label, n: n, why: fmt.Sprintf("%s: %s %.2f is %+.2f from target %.2f: %+d%% of %d gives %d",
			label, m, v, diff, pol.Target, a.Change, c, n)}, true
	}
	return rec{}, false
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// fcState is one predictive policy's forecaster, fed from the History.
type fcState struct {
	f *forecaster
	// next is the unix minute of the next minute to feed (0: none yet).
	next    int64
	ahead   [ForecastHours]float64
	aheadAt int64 // the 10-minute slot the ahead forecast was made in
}

// seriesKey names the load series of a metric ("gpu_cpu" is the larger
// of the GPU and CPU loads).
func seriesKey(metric string) string {
	switch metricName(metric) {
	case cloud.MetricGPUUtilization:
		return "load:gpu"
	case cloud.MetricCPUUtilization:
		return "load:cpu"
	case cloud.MetricGPUOrCPU:
		return "gpu_cpu"
	}
	return metric
}

// loadSpan is the history a series key has.
func loadSpan(h *History, key string) time.Duration {
	if key == "gpu_cpu" {
		return max(h.Span("load:gpu"), h.Span("load:cpu"))
	}
	return h.Span(key)
}

// oldestMinute is the first minute of a series key (ok false: none).
func oldestMinute(h *History, key string) (int64, bool) {
	first := func(name string) (int64, bool) {
		s := h.s[name]
		if s == nil || s.nseg() == 0 {
			return 0, false
		}
		a, _, _ := s.seg(0, false)
		return a, true
	}
	if key != "gpu_cpu" {
		return first(key)
	}
	a, okA := first("load:gpu")
	b, okB := first("load:cpu")
	switch {
	case okA && okB:
		return min(a, b), true
	case okA:
		return a, true
	}
	return b, okB
}

// loadMinutes fills out with the minutes of a series key from minute
// from on.
func loadMinutes(h *History, key string, from int64, out, tmp []float64) {
	if key != "gpu_cpu" {
		if s := h.s[key]; s == nil || !s.minutes(from, out, false) {
			clear(out)
		}
		return
	}
	gpu, cpu := h.s["load:gpu"], h.s["load:cpu"]
	if gpu == nil || !gpu.minutes(from, out, false) {
		clear(out)
	}
	if cpu != nil && cpu.minutes(from, tmp[:len(out)], false) {
		for i := range out {
			out[i] = max(out[i], tmp[i])
		}
	}
}

// observe feeds one observation at t to the forecaster (the
// single-observation form of update).
func (f *forecaster) observe(t time.Time, v float64) {
	f.week.observe(t, v)
	f.day.observe(t, v)
	f.recent[f.seen%len(f.recent)] = v
	f.levelN = min(f.levelN+1, len(f.recent))
	f.seen++
}

// feed brings a forecaster up to the minute before now from h.
func feed(fs *fcState, h *History, key string, now time.Time, buf *[]float64) {
	nowMin := unixMinute(now)
	if fs.f == nil {
		fs.f = newForecaster(time.Minute)
	}
	if fs.next == 0 {
		first, ok := oldestMinute(h, key)
		if !ok {
			return
		}
		fs.next = max(first, nowMin-int64(keepMinutes))
	}
	if fs.next < nowMin-int64(keepMinutes) {
		fs.next = nowMin - int64(keepMinutes)
	}
	n := nowMin - fs.next
	if n <= 0 {
		return
	}
	if cap(*buf) < int(2*n) {
		*buf = make([]float64, 2*n)
	}
	b := (*buf)[:2*n]
	loadMinutes(h, key, fs.next, b[:n], b[n:])
	for i, v := range b[:n] {
		fs.f.observe(minuteTime(fs.next+int64(i)), v)
	}
	fs.next = nowMin
}

// pointAt is the forecast for t made at now (from the minutes before
// now): the mean of the last five minutes plus the seasonal change from
// their time to t, as maxOver computes it, floored at 0.
func (f *forecaster) pointAt(now, t time.Time) float64 {
	if f.levelN == 0 {
		return 0
	}
	level := 0.0
	for i := 0; i < f.levelN; i++ {
		level += f.recent[i]
	}
	level /= float64(f.levelN)
	ref := now.Add(-time.Duration(f.levelN+1) * f.interval / 2)
	if base, ok := f.seasonal(ref); ok {
		if s, ok := f.seasonal(t); ok {
			level += s - base
		}
	}
	return max(0, level)
}

// hourly fills out with the mean forecast (load units) of each hour from
// now, at 10-minute points.
func hourly(f *forecaster, now time.Time, out []float64) {
	for k := range out {
		sum := 0.0
		for j := 0; j < 6; j++ {
			sum += f.pointAt(now, now.Add(time.Duration(k)*time.Hour+time.Duration(j)*10*time.Minute))
		}
		out[k] = sum / 6
	}
}

func (p *planner) predictive(label string, pol cloud.ScalingPolicy, plan *Plan) (rec, bool) {
	key := seriesKey(pol.Metric)
	h := p.in.History
	span := loadSpan(h, key)
	if span < PredictiveMinHistory {
		p.say("%s: %s of %s history, needs %s", label, span.Round(time.Minute), metricName(pol.Metric), PredictiveMinHistory)
		return rec{}, false
	}
	fs := p.st.fc[key]
	if fs == nil {
		fs = &fcState{aheadAt: math.MinInt64}
		p.st.fc[key] = fs
	}
	feed(fs, h, key, p.now, &p.st.buf)
	if fs.f == nil || fs.f.levelN == 0 {
		return rec{}, false
	}
	if slot := unixMinute(p.now) / 10; slot != fs.aheadAt {
		hourly(fs.f, p.now, fs.ahead[:])
		fs.aheadAt = slot
	}
	if plan.Forecast == nil && pol.Target > 0 {
		plan.Forecast = make([]float64, ForecastHours)
		for i, v := range fs.ahead {
			plan.Forecast[i] = v / pol.Target
		}
	}
	fc := fs.f.maxOver(p.now, seconds(pol.BufferSeconds, DefaultPredictiveBuffer))
	want := 0.0
	if pol.Target > 0 {
		want = fc / pol.Target
	}
	if !p.hasForecast || want > p.forecast {
		p.forecast, p.hasForecast = want, true
	}
	if pol.ForecastOnly {
		p.say("%s: forecast %.2f instances (forecast only)", label, want)
		return rec{}, false
	}
	n := wantFor(fc, pol.Target)
	return rec{label: label, n: n, why: fmt.Sprintf("%s: forecast load %.2f within %s at target %.2f wants %d",
		label, fc, seconds(pol.BufferSeconds, DefaultPredictiveBuffer), pol.Target, n)}, true
}

// nextBackoff is the backoff after a step. Failed > 0 extends it: the
// n-th consecutive step with failures (Failures, carried in the group's
// status) waits BackoffBase·2^(n-1), at most BackoffMax, from now. A step
// with no failures, every counted member running and at least the
// desired capacity counted (the replacements came up) clears it; any
// other step keeps it as it was.
func nextBackoff(prev *cloud.GroupBackoff, failed int, counted []*Member, desired int, now time.Time) *cloud.GroupBackoff {
	if failed > 0 {
		n := 1
		if prev != nil {
			n = prev.Failures + 1
		}
		delay := BackoffMax
		if n <= 20 {
			delay = min(BackoffMax, BackoffBase<<(n-1))
		}
		return &cloud.GroupBackoff{Failures: n, Until: now.Add(delay),
			Reason: fmt.Sprintf("%d member(s) failed; %d step(s) with failures in a row: relaunch backoff %s", failed, n, delay)}
	}
	if prev == nil {
		return nil
	}
	if len(counted) < desired {
		b := *prev
		return &b
	}
	for _, m := range counted {
		if m.State != cloud.Running {
			b := *prev
			return &b
		}
	}
	return nil
}

// ForecastReport is the forecast beside the actual load over a group's
// history, for `gpucloud groups forecast`. Values are instances (load /
// target).
type ForecastReport struct {
	// Policy is the policy whose forecaster was replayed, Metric its
	// metric and Target its target; History how much history there was.
	Policy  string
	Metric  string
	Target  float64
	History time.Duration
	// Times are the hours backtested; Actual is each hour's mean load,
	// Forecast the mean the forecaster predicted for it at the hour's
	// start from the history before.
	Times            []time.Time
	Actual, Forecast []float64
	// Ahead are the next ForecastHours hours from now, AheadValues the
	// forecast of each (mean).
	Ahead       []time.Time
	AheadValues []float64
	// MAPE is the mean of |actual−forecast|/actual over the hours with
	// load, in percent; WAPE is Σ|actual−forecast| / Σactual, in
	// percent.
	MAPE, WAPE float64
}

// BacktestForecast replays the forecaster of g's first predictive policy
// (or, without one, of its first target tracking policy: the same metric
// and target) over h up to now: it is trained minute by minute, and at
// each whole hour after the first 24 hours it forecasts the hour to come,
// which is then compared with what happened. It needs 25 hours of
// history.
func BacktestForecast(g *cloud.Group, h *History, now time.Time) (ForecastReport, error) {
	var pol *cloud.ScalingPolicy
	label := ""
	for _, typ := range []string{cloud.PolicyPredictive, cloud.PolicyTarget} {
		for i := range g.Policies {
			if g.Policies[i].Type == typ && pol == nil {
				pol, label = &g.Policies[i], PolicyLabel(g, i)
			}
		}
	}
	if pol == nil {
		return ForecastReport{}, fmt.Errorf("group %s has no predictive or target tracking policy to forecast for", g.Name)
	}
	if !(pol.Target > 0) {
		return ForecastReport{}, fmt.Errorf("policy %s: target %v must be positive", pol.Name, pol.Target)
	}
	key := seriesKey(pol.Metric)
	first, ok := oldestMinute(h, key)
	if !ok {
		return ForecastReport{}, fmt.Errorf("no %s history", metricName(pol.Metric))
	}
	nowMin := unixMinute(now)
	first = max(first, nowMin-int64(keepMinutes))
	if nowMin-first < 25*60 {
		return ForecastReport{}, fmt.Errorf("%s of %s history: a backtest needs 25h", time.Duration(max(0, nowMin-first))*time.Minute, metricName(pol.Metric))
	}
	n := nowMin - first
	vals := make([]float64, 2*n)
	loadMinutes(h, key, first, vals[:n], vals[n:])
	vals = vals[:n]
	f := newForecaster(time.Minute)
	r := ForecastReport{Policy: label, Metric: metricName(pol.Metric), Target: pol.Target,
		History: time.Duration(n) * time.Minute}
	var absErr, sum float64
	var ape float64
	apeN := 0
	hour := make([]float64, 1)
	for i := int64(0); i < n; i++ {
		m := first + i
		if m%60 == 0 && i >= 24*60 && m+60 <= nowMin {
			hourly(f, minuteTime(m), hour)
			fc := hour[0] / pol.Target
			act := 0.0
			for _, v := range vals[i : i+60] {
				act += v
			}
			act /= 60 * pol.Target
			r.Times = append(r.Times, minuteTime(m))
			r.Actual = append(r.Actual, act)
			r.Forecast = append(r.Forecast, fc)
			absErr += math.Abs(act - fc)
			sum += act
			if act > 0 {
				ape += math.Abs(act-fc) / act
				apeN++
			}
		}
		f.observe(minuteTime(m), vals[i])
	}
	if sum > 0 {
		r.WAPE = 100 * absErr / sum
	}
	if apeN > 0 {
		r.MAPE = 100 * ape / float64(apeN)
	}
	ahead := make([]float64, ForecastHours)
	hourly(f, now, ahead)
	for k, v := range ahead {
		r.Ahead = append(r.Ahead, now.Add(time.Duration(k)*time.Hour))
		r.AheadValues = append(r.AheadValues, v/pol.Target)
	}
	return r, nil
}

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
//     utilization metric) for target, step and predictive; step: at
//     least one adjustment, each with a non-zero change and lower <
//     upper, none overlapping, cooldown_seconds >= 0; scheduled: a cron
//     that parses and fires, a time zone that loads, at least one of
//     set_min, set_max, set_desired, each >= 0, set_min <= set_desired
//     <= set_max where given; predictive: buffer_seconds 0..172800; no
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
		{"metric", pol.Metric != "", []string{cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive}},
		{"target", pol.Target != 0, []string{cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive}},
		{"steps", len(pol.Steps) > 0, []string{cloud.PolicyStep}},
		{"cooldown_seconds", pol.CooldownSeconds != 0, []string{cloud.PolicyStep}},
		{"cron", pol.Cron != "", []string{cloud.PolicyScheduled}},
		{"time_zone", pol.TimeZone != "", []string{cloud.PolicyScheduled}},
		{"set_min", pol.SetMin != nil, []string{cloud.PolicyScheduled}},
		{"set_max", pol.SetMax != nil, []string{cloud.PolicyScheduled}},
		{"set_desired", pol.SetDesired != nil, []string{cloud.PolicyScheduled}},
		{"forecast_only", pol.ForecastOnly, []string{cloud.PolicyPredictive}},
		{"buffer_seconds", pol.BufferSeconds != 0, []string{cloud.PolicyPredictive}},
	} {
		if o.set && isType(cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyScheduled, cloud.PolicyPredictive) && !isType(o.types...) {
			return fmt.Errorf("%s.%s: not a field of a %s policy", field, o.name, pol.Type)
		}
	}
	switch pol.Type {
	case cloud.PolicyTarget, cloud.PolicyStep, cloud.PolicyPredictive:
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
		return fmt.Errorf("%s.type: unknown policy type %q (target, step, scheduled, predictive)", field, pol.Type)
	}
	switch pol.Type {
	case cloud.PolicyStep:
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
	case cloud.PolicyScheduled:
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
	case cloud.PolicyPredictive:
		if pol.BufferSeconds < 0 || pol.BufferSeconds > maxBufferSeconds {
			return fmt.Errorf("%s.buffer_seconds: %d is not 0..%d", field, pol.BufferSeconds, maxBufferSeconds)
		}
	}
	return nil
}
