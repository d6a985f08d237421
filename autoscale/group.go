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
	// LeavingUntil: when a notice's end is known, when it ends; the
	// member serves until then (the gpucloud policy counts what it
	// served when it measures its own unmet demand).
	LeavingUntil time.Time
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
	// gc is each gpucloud policy's memory; boots the latest boot times
	// measured (bootSeen: the members measured).
	gc       map[string]*gcState
	gcp      *gcConfig // nil: gcParams (the cross-validation tries others)
	boots    []time.Duration
	bootSeen map[string]bool
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
		gc:       map[string]*gcState{},
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
	// fresh: the state is new (its first step); window is the
	// stabilization window.
	fresh  bool
	window time.Duration
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
	if in.Group == nil || st == nil {
		return Plan{}
	}
	if st.cooldown == nil {
		*st = *NewGroupState()
	}
	if in.History == nil {
		in.History = NewHistory()
	}
	p := newPlanner(st, in)
	plan := Plan{}
	base, recs := p.cronActions(&plan)
	dynamic, dyn := p.dynamicRecs(base, &plan)
	d := p.recommend(base, append(recs, dyn...), dynamic)
	d = p.clampLimits(d)
	d, released := p.idleRelease(d)
	// 7. Health.
	plan.Backoff = nextBackoff(p.g.Status.Backoff, in.Failed, p.counted, d, p.now)
	blocked := plan.Backoff != nil && p.now.Before(plan.Backoff.Until)
	if blocked {
		p.say("launches wait until %s: %s", plan.Backoff.Until.UTC().Format(time.RFC3339), plan.Backoff.Reason)
	}
	// 8. Reconciliation.
	r := p.reconcile(d, blocked)
	plan.Launch = r.launch
	plan.Release = append(released, r.release...)
	plan.Desired = r.desired
	p.decide(&plan)
	return plan
}

// newPlanner starts a step: a fresh state takes the group's desired as
// its first recommendation and its decisions' times as the step
// policies' cooldowns; then (1.) it counts the members not leaving, and
// the ready ones among them.
func newPlanner(st *GroupState, in GroupInput) *planner {
	g := in.Group
	p := &planner{st: st, in: in, g: g, now: in.Now, minC: g.Min, maxC: g.Max,
		warmup: seconds(g.Timing.WarmupSeconds, DefaultGroupWarmup), metrics: map[string]float64{},
		fresh: !st.started, window: seconds(g.Timing.StabilizationSeconds, DefaultGroupStabilization)}
	if p.fresh {
		st.window.reset(p.now, g.Desired)
		for _, d := range g.Status.Decisions {
			if d.Policy != "" && d.Time.After(st.cooldown[d.Policy]) {
				st.cooldown[d.Policy] = d.Time
			}
		}
	}
	st.observeBoot(in.Members)
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
	return p
}

// cronActions (2.) applies the scheduled policies that fired: it returns
// the desired the step starts from (the group's, or the last SetDesired
// that fired) with a recommendation per action that set one, and puts
// changed bounds in plan.
func (p *planner) cronActions(plan *Plan) (base int, recs []rec) {
	g := p.g
	base = g.Desired
	for i, pol := range g.Policies {
		if pol.Type != cloud.PolicyScheduled {
			continue
		}
		label := PolicyLabel(g, i)
		if sd, ok := p.cronAction(label, pol, p.fresh); ok {
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
	return base, recs
}

// dynamicRecs (3.) asks the target, step and predictive policies for
// their recommendations, in the group's order; dynamic says whether the
// group has a policy that may act (a forecast-only predictive one does
// not).
func (p *planner) dynamicRecs(base int, plan *Plan) (dynamic bool, recs []rec) {
	for i, pol := range p.g.Policies {
		label := PolicyLabel(p.g, i)
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
			r, ok = p.predictive(label, pol, plan)
		case cloud.PolicyGPUCloud:
			dynamic = true
			r, ok = p.gpucloud(label, pol)
		}
		if ok {
			recs = append(recs, r)
		}
	}
	return dynamic, recs
}

// recommend (3. and 4.) picks the desired from the recommendations: with
// a dynamic policy, the largest, a Desired the tenant set since the last
// step counting as one, and scale-in stabilized over the window; with
// scheduled actions only, the last that fired; else base.
func (p *planner) recommend(base int, recs []rec, dynamic bool) int {
	g, st, now := p.g, p.st, p.now
	if !p.fresh && g.Desired != st.lastDesired && dynamic {
		recs = append(recs, rec{label: "set-desired", n: g.Desired, why: fmt.Sprintf("desired set to %d", g.Desired)})
	}
	switch {
	case dynamic && len(recs) > 0:
		best := recs[0]
		for _, r := range recs[1:] {
			if r.n > best.n {
				best = r
			}
		}
		st.window.push(now, best.n)
		held, _ := st.window.max(now, p.window)
		d := max(best.n, held)
		p.policy = best.label
		p.reasons = append(p.reasons, best.why)
		if d > best.n {
			p.say("scale-in stabilized: %d is the highest recommendation of the last %s", d, p.window)
			p.policy = "stabilization"
		}
		return d
	case len(recs) > 0:
		// Scheduled only: the last action that fired wins.
		p.policy = recs[len(recs)-1].label
		p.reasons = append(p.reasons, recs[len(recs)-1].why)
	case dynamic:
		_, _ = st.window.max(now, p.window) // expire old recommendations
	}
	return base
}

// clampLimits (5.) clamps d to [min, max].
func (p *planner) clampLimits(d int) int {
	switch {
	case d < p.minC:
		d, p.limit = p.minC, "min"
		p.say("min %d", p.minC)
	case d > p.maxC:
		d, p.limit = p.maxC, "max"
		p.say("max %d", p.maxC)
	}
	return d
}

// idleRelease (6.) releases the members idle for the group's
// IdleRelease, oldest idle first, down to min: they leave p.counted, and
// the desired becomes at most the capacity left, from which the
// stabilization window restarts.
func (p *planner) idleRelease(d int) (int, []Release) {
	ir := p.g.IdleRelease
	if ir == nil || ir.IdleSeconds <= 0 {
		return d, nil
	}
	var idle []*Member
	for _, m := range p.counted {
		if !m.Held && !m.IdleSince.IsZero() && p.now.Sub(m.IdleSince) >= time.Duration(ir.IdleSeconds)*time.Second {
			idle = append(idle, m)
		}
	}
	k := min(len(idle), len(p.counted)-p.minC)
	if k <= 0 {
		return d, nil
	}
	sort.SliceStable(idle, func(a, b int) bool {
		if !idle[a].IdleSince.Equal(idle[b].IdleSince) {
			return idle[a].IdleSince.Before(idle[b].IdleSince)
		}
		return idle[a].ID < idle[b].ID
	})
	var released []Release
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
	p.st.window.reset(p.now, d)
	p.say("idle release: %d member(s) under %.0f%% GPU for %s", k, ir.Threshold*100, time.Duration(ir.IdleSeconds)*time.Second)
	return d, released
}

// decide fills the plan's Changed and Decision from the step's working
// values, and remembers the step in the state.
func (p *planner) decide(plan *Plan) {
	g := p.g
	plan.Changed = plan.Desired != g.Desired
	if plan.Changed && p.policy == "" {
		p.policy = "limits"
	}
	for k, v := range p.metrics {
		p.metrics[k] = math.Round(v*1e4) / 1e4
	}
	plan.Decision = cloud.GroupDecision{Time: p.now, From: g.Desired, To: plan.Desired, Policy: p.policy,
		Limit: p.limit, Metrics: p.metrics, Reason: strings.Join(p.reasons, "; ")}
	if p.hasForecast {
		plan.Decision.Forecast = math.Round(p.forecast*1e4) / 1e4
	}
	if plan.Decision.Reason == "" {
		plan.Decision.Reason = fmt.Sprintf("holds %d", plan.Desired)
	}
	p.st.started, p.st.prevNow, p.st.lastDesired = true, p.now, plan.Desired
}

// warm reports whether m is ready: running and past the warm-up.
func (p *planner) warm(m *Member) bool {
	return m.State == cloud.Running && !m.RunningSince.IsZero() && p.now.Sub(m.RunningSince) >= p.warmup
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
