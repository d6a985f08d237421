package autoscale

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

var g0 = time.Date(2024, 3, 4, 12, 0, 0, 0, time.UTC) // a Monday, noon

const step10 = 10 * time.Second

func ip(v int) *int             { return &v }
func fp(v float64) *float64     { return &v }
func usd(s string) money.Micros { return money.MustParse(s) }

// newGroup is a group of offering "a" (then "b") in zones z1, z2 with
// one target tracking policy at 0.5 on GPU utilization.
func newGroup(mut ...func(*cloud.Group)) *cloud.Group {
	g := &cloud.Group{ID: "g1", Name: "web", Min: 0, Max: 20, Desired: 2,
		Template: cloud.GroupTemplate{Offerings: []string{"a", "b"}, Zones: []string{"z1", "z2"}},
		Policies: []cloud.ScalingPolicy{{Name: "util", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.5}},
		Mixed:    cloud.MixedInstances{OnDemandPercent: 100},
	}
	for _, m := range mut {
		m(g)
	}
	return g
}

// testPools: a is $10/h on demand, spot $3 in z1 and $4 in z2; b is $20
// and $6/$7. Room is unbounded.
func testPools() []Pool {
	return []Pool{
		{Offering: "a", Zone: "z1", OnDemand: usd("10"), Spot: usd("3"), FreeOnDemand: -1, FreeSpot: -1},
		{Offering: "a", Zone: "z2", OnDemand: usd("10"), Spot: usd("4"), FreeOnDemand: -1, FreeSpot: -1},
		{Offering: "b", Zone: "z1", OnDemand: usd("20"), Spot: usd("6"), FreeOnDemand: -1, FreeSpot: -1},
		{Offering: "b", Zone: "z2", OnDemand: usd("20"), Spot: usd("7"), FreeOnDemand: -1, FreeSpot: -1},
	}
}

// warmMember runs since an hour before now.
func warmMember(id string, market cloud.Market, zone string, now time.Time) Member {
	return Member{ID: id, Offering: "a", Zone: zone, Market: market, State: cloud.Running,
		CreatedAt: now.Add(-2 * time.Hour), RunningSince: now.Add(-time.Hour), GPU: 0.5, CPU: 0.2, HasUtil: true}
}

func fleetOf(n int, now time.Time) []Member {
	var ms []Member
	for i := 0; i < n; i++ {
		ms = append(ms, warmMember(fmt.Sprintf("m%02d", i), cloud.MarketOnDemand, "z1", now))
	}
	return ms
}

func withLoad(now time.Time, gpu float64) *History {
	h := NewHistory()
	h.Add("load:gpu", now, gpu)
	h.Add("load:cpu", now, gpu/2)
	return h
}

func count(ls []Launch, market cloud.Market) int {
	n := 0
	for _, l := range ls {
		if l.Market == market {
			n++
		}
	}
	return n
}

func TestPlanTargetTracking(t *testing.T) {
	for _, c := range []struct {
		name    string
		metric  string
		target  float64
		gpu     float64
		cpu     float64
		custom  float64
		members int
		want    int
	}{
		{"gpu scale out", cloud.MetricGPUUtilization, 0.5, 2.6, 0, 0, 4, 6},
		{"gpu exact", cloud.MetricGPUUtilization, 0.5, 2.0, 0, 0, 4, 4},
		{"cpu", cloud.MetricCPUUtilization, 0.5, 0.1, 3.1, 0, 4, 7},
		{"gpu_cpu takes the larger", cloud.MetricGPUOrCPU, 0.5, 1.0, 2.2, 0, 4, 5},
		{"custom queue per instance", "custom:queue", 10, 0, 0, 95, 4, 10},
		{"custom scales from zero", "custom:queue", 10, 0, 0, 15, 0, 2},
		{"max", cloud.MetricGPUUtilization, 0.1, 5, 0, 0, 4, 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := newGroup(func(g *cloud.Group) {
				g.Desired = c.members
				g.Policies[0].Metric, g.Policies[0].Target = c.metric, c.target
			})
			h := NewHistory()
			h.Add("load:gpu", g0, c.gpu)
			h.Add("load:cpu", g0, c.cpu)
			h.Add("custom:queue", g0, c.custom)
			p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: fleetOf(c.members, g0), Pools: testPools(), History: h})
			if p.Desired != c.want || len(p.Launch) != max(0, c.want-c.members) || len(p.Release) != 0 {
				t.Fatalf("desired %d with %d launches, %d releases; want %d (%+v)", p.Desired, len(p.Launch), len(p.Release), c.want, p.Decision)
			}
			if p.Changed != (c.want != c.members) || p.Decision.From != c.members || p.Decision.To != c.want {
				t.Fatalf("decision %+v", p.Decision)
			}
			if c.want == 20 && p.Decision.Limit != "max" {
				t.Fatalf("limit %q, want max", p.Decision.Limit)
			}
			if c.want != c.members && c.want != 20 && p.Decision.Policy != "util" {
				t.Fatalf("policy %q", p.Decision.Policy)
			}
		})
	}
}

// TestPlanStabilization: scale-out at once, scale-in only after a window
// of lower recommendations, and always the highest of the window.
func TestPlanStabilization(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for iter := 0; iter < 20; iter++ {
		window := time.Duration(30+rng.IntN(600)) * time.Second
		g := newGroup(func(g *cloud.Group) {
			g.Max, g.Desired = 1000, 1+rng.IntN(10)
			g.Timing.StabilizationSeconds = int(window / time.Second)
		})
		st := NewGroupState()
		h := NewHistory()
		type rc struct {
			at time.Time
			n  int
		}
		recs := []rc{{g0, g.Desired}} // a fresh state holds the desired for a window
		load := rng.Float64() * 10
		for i := 0; i < 300; i++ {
			now := g0.Add(time.Duration(i) * step10)
			load = max(0, load+rng.NormFloat64())
			if rng.IntN(30) == 0 {
				load = rng.Float64() * 20
			}
			// A new minute each step, so Last is this step's load.
			h.Add("load:gpu", now.Add(time.Duration(i)*time.Minute), load)
			p := PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(g.Desired, now), Pools: testPools(), History: h})
			recs = append(recs, rc{now, wantFor(float64(float32(load)), 0.5)})
			hi := 0
			for _, r := range recs {
				if r.at.After(now.Add(-window)) {
					hi = max(hi, r.n)
				}
			}
			if p.Desired != hi {
				t.Fatalf("iter %d step %d (window %v): desired %d, highest recommendation of the window %d", iter, i, window, p.Desired, hi)
			}
			g.Desired = p.Desired
		}
	}
}

func TestPlanWarmup(t *testing.T) {
	g := newGroup(func(g *cloud.Group) { g.Desired = 4; g.Timing.WarmupSeconds = 600 })
	ms := fleetOf(4, g0)
	// Two members still warming up (running 5 minutes), two booting:
	// nothing is ready: target tracking has nothing to go by and holds.
	for i := range ms {
		ms[i].RunningSince = g0.Add(-5 * time.Minute)
		if i >= 2 {
			ms[i].State, ms[i].RunningSince = cloud.Starting, time.Time{}
		}
	}
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: withLoad(g0, 0)})
	if p.Desired != 4 || len(p.Release) != 0 || !strings.Contains(p.Decision.Reason, "no member warm") || p.Decision.Metrics["ready"] != 0 {
		t.Fatalf("warming: %+v", p)
	}
	// Step scaling: utilization is the mean over the two ready members
	// (0.9), and +50% applies to all four counted.
	ms[0].RunningSince, ms[1].RunningSince = g0.Add(-time.Hour), g0.Add(-time.Hour)
	g.Policies = []cloud.ScalingPolicy{{Name: "steps", Type: cloud.PolicyStep, Metric: cloud.MetricGPUUtilization, Target: 0.6,
		Steps: []cloud.StepAdjustment{{Lower: fp(0.2), Change: 50}, {Lower: fp(0.1), Upper: fp(0.2), Change: 10}, {Upper: fp(-0.3), Change: -25}}}}
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: withLoad(g0, 1.8)})
	if p.Desired != 6 || p.Decision.Metrics[cloud.MetricGPUUtilization] != 0.9 || p.Decision.Metrics["ready"] != 2 {
		t.Fatalf("step: %+v", p.Decision)
	}
}

func TestPlanStepCooldown(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired = 4
		g.Timing.CooldownSeconds = 120
		g.Timing.StabilizationSeconds = 1
		g.Policies = []cloud.ScalingPolicy{{Name: "steps", Type: cloud.PolicyStep, Metric: cloud.MetricGPUUtilization, Target: 0.5,
			Steps: []cloud.StepAdjustment{{Lower: fp(0.2), Change: 10}, {Upper: fp(-0.2), Change: -50}}}}
	})
	st := NewGroupState()
	var actions []int
	for i := 0; i < 60; i++ {
		now := g0.Add(time.Duration(i) * step10)
		util := 0.9
		if i >= 30 {
			util = 0.1
		}
		h := withLoad(now, util*float64(g.Desired))
		p := PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(g.Desired, now), Pools: testPools(), History: h})
		if p.Desired != g.Desired {
			actions = append(actions, i)
		}
		g.Desired = p.Desired
	}
	// +1 at 0, 12, 24 (cooldown 12 steps); at 30 the load falls but the
	// cooldown runs to 36: -50% then, and at 48.
	if want := []int{0, 12, 24, 36, 48}; !slices.Equal(actions, want) {
		t.Fatalf("actions at steps %v, want %v", actions, want)
	}
	// A fresh state takes the cooldown from the group's decisions.
	g.Status.Decisions = []cloud.GroupDecision{{Time: g0, Policy: "steps"}}
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0.Add(time.Minute), Group: g, Members: fleetOf(g.Desired, g0), Pools: testPools(), History: withLoad(g0, 0.1)})
	if p.Changed {
		t.Fatalf("a rebuilt state ignored the cooldown: %+v", p.Decision)
	}
}

func TestPlanScheduled(t *testing.T) {
	// 09:00 Berlin on weekdays: min 4, max 30, desired 6; 18:00: min 1.
	g := newGroup(func(g *cloud.Group) {
		g.Min, g.Max, g.Desired = 1, 20, 1
		g.Policies = []cloud.ScalingPolicy{
			{Name: "morning", Type: cloud.PolicyScheduled, Cron: "0 9 * * MON-FRI", TimeZone: "Europe/Berlin", SetMin: ip(4), SetMax: ip(30), SetDesired: ip(6)},
			{Name: "evening", Type: cloud.PolicyScheduled, Cron: "0 18 * * *", TimeZone: "Europe/Berlin", SetMin: ip(1), SetDesired: ip(1)},
		}
	})
	st := NewGroupState()
	nine := time.Date(2024, 3, 4, 8, 0, 0, 0, time.UTC) // 09:00 CET
	fired := 0
	for now := nine.Add(-time.Minute); now.Before(nine.Add(time.Minute)); now = now.Add(step10) {
		p := PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(g.Desired, now), Pools: testPools(), History: withLoad(now, 0.1)})
		if p.Min != nil || p.Max != nil {
			fired++
			if *p.Min != 4 || *p.Max != 30 || p.Desired != 6 || len(p.Launch) != 5 || p.Decision.Policy != "morning" ||
				!strings.Contains(p.Decision.Reason, "morning") {
				t.Fatalf("at %v: %+v min %v max %v", now, p, *p.Min, *p.Max)
			}
			g.Min, g.Max, g.Desired = *p.Min, *p.Max, p.Desired
		}
	}
	if fired != 1 {
		t.Fatalf("fired %d times around 09:00", fired)
	}
	// With a target policy the scheduled desired is a recommendation: it
	// holds for the window even though the target wants 1.
	g.Min, g.Max, g.Desired = 1, 20, 1
	g.Policies = append(g.Policies, cloud.ScalingPolicy{Name: "util", Type: cloud.PolicyTarget, Target: 0.5})
	st = NewGroupState()
	for i := 0; i < 60; i++ {
		now := nine.Add(-time.Minute + time.Duration(i)*step10)
		p := PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(g.Desired, now), Pools: testPools(), History: withLoad(now, 0.2)})
		if p.Min != nil {
			g.Min, g.Max = *p.Min, *p.Max
		}
		g.Desired = p.Desired
		switch elapsed := now.Sub(nine); {
		case elapsed < 0 && p.Desired != 1, elapsed >= 0 && elapsed < 300*time.Second && p.Desired != 6:
			t.Fatalf("%v after 09:00: desired %d (%s)", elapsed, p.Desired, p.Decision.Reason)
		case elapsed >= 300*time.Second && p.Desired != 4: // down to the new min
			t.Fatalf("%v after 09:00: desired %d, want min 4 (%s)", elapsed, p.Desired, p.Decision.Reason)
		}
	}
	// A rebuilt state catches up with an action of the last 5 minutes,
	// unless the group's decisions show it was applied.
	g.Min, g.Max, g.Desired = 1, 20, 1
	g.Policies = g.Policies[:1]
	p := PlanGroup(NewGroupState(), GroupInput{Now: nine.Add(3 * time.Minute), Group: g, Members: fleetOf(1, nine), Pools: testPools(), History: withLoad(nine, 0)})
	if p.Min == nil || *p.Min != 4 {
		t.Fatalf("no catch-up: %+v", p)
	}
	g.Status.Decisions = []cloud.GroupDecision{{Time: nine.Add(5 * time.Second), Policy: "morning"}}
	p = PlanGroup(NewGroupState(), GroupInput{Now: nine.Add(3 * time.Minute), Group: g, Members: fleetOf(1, nine), Pools: testPools(), History: withLoad(nine, 0)})
	if p.Min != nil {
		t.Fatalf("fired twice: %+v", p)
	}
	p = PlanGroup(NewGroupState(), GroupInput{Now: nine.Add(6 * time.Minute), Group: newGroup(func(x *cloud.Group) { x.Policies = g.Policies }),
		Members: fleetOf(2, nine), Pools: testPools(), History: withLoad(nine, 0)})
	if p.Min != nil {
		t.Fatalf("caught up with an action 6 minutes old: %+v", p)
	}
	// A max below the min lowers the min when only the max is set.
	g.Status.Decisions = nil
	g.Min, g.Max, g.Desired = 5, 10, 5
	g.Policies = []cloud.ScalingPolicy{{Name: "night", Type: cloud.PolicyScheduled, Cron: "* * * * *", SetMax: ip(2)}}
	p = PlanGroup(NewGroupState(), GroupInput{Now: nine, Group: g, Members: fleetOf(5, nine), Pools: testPools(), History: withLoad(nine, 0)})
	if p.Max == nil || *p.Max != 2 || p.Min == nil || *p.Min != 2 || p.Desired != 2 || len(p.Release) != 3 {
		t.Fatalf("max below min: %+v", p)
	}
}

// dailyHistory is `days` of a clean daily cycle of load:gpu ending at end:
// 2 instances' worth at night, 10 at 15:00 (per minute).
func dailyHistory(end time.Time, days int) *History {
	h := NewHistory()
	for m := days * 24 * 60; m > 0; m-- {
		at := end.Add(-time.Duration(m) * time.Minute)
		hr := float64(at.Hour()) + float64(at.Minute())/60
		h.Add("load:gpu", at, 6-4*math.Cos(2*math.Pi*(hr-3)/24))
	}
	return h
}

func TestPlanPredictive(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Max = 100
		g.Policies = []cloud.ScalingPolicy{{Name: "fc", Type: cloud.PolicyPredictive, Target: 0.5, BufferSeconds: 1800}}
	})
	// 20 hours: not enough.
	now := time.Date(2024, 3, 4, 10, 0, 0, 0, time.UTC)
	p := PlanGroup(NewGroupState(), GroupInput{Now: now, Group: g, Members: fleetOf(2, now), Pools: testPools(), History: dailyHistory(now, 0)})
	if p.Changed || p.Forecast != nil {
		t.Fatalf("no history: %+v", p)
	}
	h := NewHistory()
	for m := 20 * 60; m > 0; m-- {
		h.Add("load:gpu", now.Add(-time.Duration(m)*time.Minute), 3)
	}
	p = PlanGroup(NewGroupState(), GroupInput{Now: now, Group: g, Members: fleetOf(2, now), Pools: testPools(), History: h})
	if p.Changed || !strings.Contains(p.Decision.Reason, "needs 24h") || !strings.Contains(p.Decision.Reason, "20h") {
		t.Fatalf("20 hours: %+v", p.Decision)
	}
	// Three days of the cycle at 10:00, rising: the forecast half an hour
	// ahead is above the load now.
	h = dailyHistory(now, 3)
	st := NewGroupState()
	p = PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(2, now), Pools: testPools(), History: h})
	loadNow, _, _ := h.Last("load:gpu")
	ahead := 6 - 4*math.Cos(2*math.Pi*(10.5-3)/24)
	if p.Desired != wantFor(ahead, 0.5) || p.Desired <= wantFor(loadNow, 0.5) || p.Decision.Policy != "fc" {
		t.Fatalf("desired %d, want %d (load now %.2f wants %d): %+v", p.Desired, wantFor(ahead, 0.5), loadNow, wantFor(loadNow, 0.5), p.Decision)
	}
	if len(p.Forecast) != ForecastHours || math.Abs(p.Decision.Forecast-ahead/0.5) > 0.5 {
		t.Fatalf("forecast %v, decision forecast %v, want about %v", len(p.Forecast), p.Decision.Forecast, ahead/0.5)
	}
	// The hourly forecast peaks at 15:00 (hour 5 from 10:00), ~20 instances.
	peak := 0
	for i, v := range p.Forecast[:24] {
		if v > p.Forecast[peak] {
			peak = i
		}
	}
	if peak < 4 || peak > 5 || math.Abs(p.Forecast[peak]-20) > 1.5 {
		t.Fatalf("forecast peak %v at hour %d: %v", p.Forecast[peak], peak, p.Forecast[:24])
	}
	// The next step feeds the new minute only, and agrees.
	h.Add("load:gpu", now, loadNow)
	p2 := PlanGroup(st, GroupInput{Now: now.Add(time.Minute), Group: g, Members: fleetOf(p.Desired, now), Pools: testPools(), History: h})
	if p2.Desired < p.Desired || st.fc["load:gpu"].next != unixMinute(now.Add(time.Minute)) {
		t.Fatalf("next step: %d, fed to %d", p2.Desired, st.fc["load:gpu"].next)
	}
	// Forecast only: the forecast is there, the desired is not changed.
	g.Policies[0].ForecastOnly = true
	p = PlanGroup(NewGroupState(), GroupInput{Now: now, Group: g, Members: fleetOf(2, now), Pools: testPools(), History: h})
	if p.Changed || len(p.Forecast) != ForecastHours || !strings.Contains(p.Decision.Reason, "forecast only") {
		t.Fatalf("forecast only: %+v", p)
	}
}

func TestPlanIdleRelease(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Min, g.Desired = 2, 6
		g.Policies = nil
		g.IdleRelease = &cloud.IdleRelease{Threshold: 0.05, IdleSeconds: 1800}
	})
	ms := fleetOf(6, g0)
	ms[0].IdleSince = g0.Add(-time.Hour)
	ms[1].IdleSince = g0.Add(-40 * time.Minute)
	ms[2].IdleSince = g0.Add(-2 * time.Hour)
	ms[2].Held = true                           // locked: never released
	ms[3].IdleSince = g0.Add(-10 * time.Minute) // not long enough
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: withLoad(g0, 0)})
	want := []Release{{"m00", cloud.ReclaimIdle}, {"m01", cloud.ReclaimIdle}}
	if !slices.Equal(p.Release, want) || p.Desired != 4 || len(p.Launch) != 0 || p.Decision.Policy != "idle-release" {
		t.Fatalf("idle: %+v", p)
	}
	// Down to min only.
	for i := range ms {
		ms[i].IdleSince = g0.Add(-time.Hour)
	}
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: withLoad(g0, 0)})
	if len(p.Release) != 4 || p.Desired != 2 {
		t.Fatalf("to min: %+v", p)
	}
	for _, r := range p.Release {
		if r.InstanceID == "m02" {
			t.Fatal("released a held member")
		}
	}
}

func TestPlanBackoff(t *testing.T) {
	g := newGroup(func(g *cloud.Group) { g.Min, g.Max, g.Desired = 4, 4, 4; g.Policies = nil })
	now := g0
	var delays []time.Duration
	for i := 0; i < 9; i++ {
		// One member fails each time a launch is allowed.
		in := GroupInput{Now: now, Group: g, Members: fleetOf(3, now), Failed: 1, Pools: testPools(), History: withLoad(now, 0)}
		p := PlanGroup(NewGroupState(), in)
		if p.Backoff == nil || len(p.Launch) != 0 || !strings.Contains(p.Decision.Reason, "launches wait") {
			t.Fatalf("failure %d: %+v", i, p)
		}
		delays = append(delays, p.Backoff.Until.Sub(now))
		g.Status.Backoff = p.Backoff
		// Before Until: nothing; at Until: the replacement.
		in.Failed, in.Now = 0, p.Backoff.Until.Add(-time.Second)
		if q := PlanGroup(NewGroupState(), in); len(q.Launch) != 0 || q.Backoff == nil || *q.Backoff != *p.Backoff {
			t.Fatalf("during backoff: %+v", q)
		}
		in.Now = p.Backoff.Until
		if q := PlanGroup(NewGroupState(), in); len(q.Launch) != 1 || q.Backoff == nil {
			t.Fatalf("after backoff: %+v", q)
		}
		now = p.Backoff.Until
	}
	want := []time.Duration{10, 20, 40, 80, 160, 320, 600, 600, 600}
	for i := range want {
		want[i] *= time.Second
	}
	if !slices.Equal(delays, want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	// All running, no failure: cleared. A member still booting: kept.
	in := GroupInput{Now: now, Group: g, Members: fleetOf(4, now), Pools: testPools(), History: withLoad(now, 0)}
	in.Members[3].State, in.Members[3].RunningSince = cloud.Starting, time.Time{}
	if p := PlanGroup(NewGroupState(), in); p.Backoff == nil || p.Backoff.Failures != 9 {
		t.Fatalf("booting: %+v", p.Backoff)
	}
	in.Members[3] = warmMember("m03", cloud.MarketOnDemand, "z1", now)
	if p := PlanGroup(NewGroupState(), in); p.Backoff != nil {
		t.Fatalf("not cleared: %+v", p.Backoff)
	}
}

func TestOnDemandShare(t *testing.T) {
	mx := cloud.MixedInstances{Spot: true, OnDemandBase: 2, OnDemandPercent: 25}
	for n, want := range []int{0, 1, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5} {
		if got := OnDemandShare(mx, n); got != want {
			t.Errorf("share(%d) = %d, want %d", n, got, want)
		}
	}
	if OnDemandShare(cloud.MixedInstances{OnDemandPercent: 0}, 5) != 5 {
		t.Error("spot off is all on demand")
	}
}

func TestPlanMixedLaunches(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired, g.Min = 0, 10
		g.Policies = nil
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 2, OnDemandPercent: 25}
	})
	pools := testPools()
	pools[2].Spot = usd("1")   // b/z1: cheapest spot,
	pools[2].ReclaimRate = 0.5 // but reclaimed often: 1×(1+5) = 6 > 3
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Pools: pools, History: NewHistory()})
	if p.Desired != 10 || len(p.Launch) != 10 || count(p.Launch, cloud.MarketOnDemand) != 4 {
		t.Fatalf("launches %+v", p.Launch)
	}
	byPool := map[string]int{}
	for _, l := range p.Launch {
		if l.Market == cloud.MarketOnDemand && (l.Offering != "a" || l.Zone != "z1") {
			t.Fatalf("on demand in %s/%s, want the first offering's first zone", l.Offering, l.Zone)
		}
		if l.Market == cloud.MarketSpot {
			byPool[l.Offering+"/"+l.Zone]++
		}
	}
	// Six spot, spread: three in a/z1 ($3), three in a/z2 ($4).
	if byPool["a/z1"] != 3 || byPool["a/z2"] != 3 {
		t.Fatalf("spot spread %v", byPool)
	}
	// A pool over the price ratio and one full are not used.
	pools = testPools()
	pools[0].Spot = usd("8.5") // 85% of $10
	pools[1].FreeSpot = 0
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Pools: pools, History: NewHistory()})
	for _, l := range p.Launch {
		if l.Market == cloud.MarketSpot && l.Offering != "b" {
			t.Fatalf("spot launched in %s/%s", l.Offering, l.Zone)
		}
	}
	// On-demand room: the next offering when the first is full.
	pools = testPools()
	pools[0].FreeOnDemand, pools[1].FreeOnDemand = 1, 0
	g.Mixed.Spot = false
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Pools: pools, History: NewHistory()})
	if len(p.Launch) != 10 || p.Launch[0].Offering != "a" || p.Launch[1].Offering != "b" || p.Launch[1].Zone != "z1" {
		t.Fatalf("on-demand room: %+v", p.Launch)
	}
	// No room anywhere: nothing, and the decision says so; desired stays.
	for i := range pools {
		pools[i].FreeOnDemand = 0
	}
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Pools: pools, History: NewHistory()})
	if len(p.Launch) != 0 || p.Desired != 10 || !strings.Contains(p.Decision.Reason, "no room") {
		t.Fatalf("no room: %+v", p)
	}
}

// simGroup is a small simulated controller: it applies plans, boots
// launches, ends notices, and fails members at random.
type simGroup struct {
	g       *cloud.Group
	st      *GroupState
	h       *History
	pools   []Pool
	members []Member
	now     time.Time
	seq     int
	boot    time.Duration
	notice  time.Duration
	leaveAt map[string]time.Time
	failed  int
}

func newSim(g *cloud.Group, pools []Pool, now time.Time) *simGroup {
	return &simGroup{g: g, st: NewGroupState(), h: NewHistory(), pools: pools, now: now,
		boot: time.Minute, notice: 2 * time.Minute, leaveAt: map[string]time.Time{}}
}

func (s *simGroup) input() GroupInput {
	return GroupInput{Now: s.now, Group: s.g, Members: slices.Clone(s.members), Failed: s.failed, Pools: s.pools, History: s.h}
}

func (s *simGroup) apply(p Plan) {
	for _, l := range p.Launch {
		s.seq++
		s.members = append(s.members, Member{ID: fmt.Sprintf("i%04d", s.seq), Offering: l.Offering, Zone: l.Zone, Market: l.Market,
			State: cloud.Pending, CreatedAt: s.now})
	}
	for _, r := range p.Release {
		for i := range s.members {
			if s.members[i].ID == r.InstanceID {
				s.members[i].Leaving = true
				s.leaveAt[r.InstanceID] = s.now.Add(s.notice)
			}
		}
	}
	if p.Min != nil {
		s.g.Min = *p.Min
	}
	if p.Max != nil {
		s.g.Max = *p.Max
	}
	s.g.Desired = p.Desired
	s.g.Status.Backoff = p.Backoff
	s.failed = 0
}

// advance moves time on: booted members run, notices end.
func (s *simGroup) advance(dt time.Duration) {
	s.now = s.now.Add(dt)
	kept := s.members[:0]
	for _, m := range s.members {
		if at, ok := s.leaveAt[m.ID]; ok && !s.now.Before(at) {
			delete(s.leaveAt, m.ID)
			continue
		}
		if m.State != cloud.Running && !m.Leaving && s.now.Sub(m.CreatedAt) >= s.boot {
			m.State, m.RunningSince = cloud.Running, s.now
		}
		kept = append(kept, m)
	}
	s.members = kept
}

func (s *simGroup) running() int {
	n := 0
	for _, m := range s.members {
		if !m.Leaving && m.State == cloud.Running {
			n++
		}
	}
	return n
}

// TestPlanPriceRatioMove: spot members of a pool whose price passes the
// ratio are replaced, the replacement launched first and the old one
// released once the replacement runs; running capacity never drops.
func TestPlanPriceRatioMove(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired, g.Min = 4, 4
		g.Policies = nil
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 0, OnDemandPercent: 0}
	})
	s := newSim(g, testPools(), g0)
	for i := 0; i < 20; i++ { // settle
		s.apply(PlanGroup(s.st, s.input()))
		s.advance(step10)
	}
	if s.running() != 4 {
		t.Fatalf("settled with %d running", s.running())
	}
	inZ1 := 0
	for _, m := range s.members {
		if m.Zone == "z1" && m.Offering == "a" {
			inZ1++
		}
	}
	s.pools[0].Spot = usd("9") // a/z1: 90% of on demand
	var launchedAt, releasedAt []int
	for i := 0; i < 30; i++ {
		before := s.running()
		p := PlanGroup(s.st, s.input())
		if len(p.Launch) > 0 {
			launchedAt = append(launchedAt, i)
			for _, l := range p.Launch {
				if l.Offering == "a" && l.Zone == "z1" && l.Market == cloud.MarketSpot {
					t.Fatalf("replacement into the expensive pool: %+v", l)
				}
				if l.Reason != cloud.ReclaimPriceMove {
					t.Fatalf("launch reason %q", l.Reason)
				}
			}
		}
		moved := 0
		for _, r := range p.Release {
			if r.Reason != cloud.ReclaimPriceMove {
				t.Fatalf("release %+v", r)
			}
			moved++
		}
		if moved > 0 {
			releasedAt = append(releasedAt, i)
		}
		s.apply(p)
		if after := s.running(); after < min(before, p.Desired) {
			t.Fatalf("step %d: running %d -> %d", i, before, after)
		}
		s.advance(step10)
	}
	if len(launchedAt) == 0 || len(releasedAt) == 0 || releasedAt[0] <= launchedAt[0] {
		t.Fatalf("launches at %v, releases at %v (%d in the pool)", launchedAt, releasedAt, inZ1)
	}
	for _, m := range s.members {
		if m.Offering == "a" && m.Zone == "z1" && !m.Leaving {
			t.Fatalf("%s still in the expensive pool", m.ID)
		}
	}
}

// TestPlanSpotFallbackAndBack: with no spot room the group runs on
// demand; when spot returns the on-demand members above the share are
// replaced by spot, launch first.
func TestPlanSpotFallbackAndBack(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired, g.Min = 6, 6
		g.Policies = nil
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 1, OnDemandPercent: 20}
	})
	pools := testPools()
	for i := range pools {
		pools[i].FreeSpot = 0
	}
	s := newSim(g, pools, g0)
	p := PlanGroup(s.st, s.input())
	if count(p.Launch, cloud.MarketOnDemand) != 6 || !strings.Contains(p.Decision.Reason, "spot unavailable") {
		t.Fatalf("fallback: %+v", p)
	}
	s.apply(p)
	for i := 0; i < 10; i++ {
		s.advance(step10)
		s.apply(PlanGroup(s.st, s.input()))
	}
	s.pools[1].FreeSpot = 3
	s.pools[3].FreeSpot = -1
	for i := 0; i < 30; i++ {
		s.advance(step10)
		before := s.running()
		p := PlanGroup(s.st, s.input())
		s.apply(p)
		if s.running() < min(before, 6) {
			t.Fatalf("step %d: running %d -> %d", i, before, s.running())
		}
	}
	od, spot := 0, 0
	for _, m := range s.members {
		if m.Leaving {
			continue
		}
		if m.Market == cloud.MarketSpot {
			spot++
		} else {
			od++
		}
	}
	// share(6) = 1 + ceil(5×0.2) = 2 on demand.
	if od != 2 || spot != 4 {
		t.Fatalf("back to spot: %d on demand, %d spot", od, spot)
	}
}

func TestPlanRebalance(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired = 3
		g.Policies = nil
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandPercent: 0, CapacityRebalance: true}
	})
	ms := []Member{warmMember("s1", cloud.MarketSpot, "z1", g0), warmMember("s2", cloud.MarketSpot, "z2", g0), warmMember("s3", cloud.MarketSpot, "z1", g0)}
	ms[0].Rebalance = true
	st := NewGroupState()
	p := PlanGroup(st, GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: NewHistory()})
	if len(p.Launch) != 1 || p.Launch[0].Reason != ReleaseRebalance || len(p.Release) != 0 {
		t.Fatalf("first step: %+v", p)
	}
	// The replacement runs: s1 goes.
	ms = append(ms, warmMember("s4", cloud.MarketSpot, p.Launch[0].Zone, g0))
	p = PlanGroup(st, GroupInput{Now: g0.Add(time.Minute), Group: g, Members: ms, Pools: testPools(), History: NewHistory()})
	if len(p.Launch) != 0 || !slices.Equal(p.Release, []Release{{"s1", ReleaseRebalance}}) {
		t.Fatalf("second step: %+v", p)
	}
	// Without CapacityRebalance nothing happens.
	g.Mixed.CapacityRebalance = false
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms[:3], Pools: testPools(), History: NewHistory()})
	if len(p.Launch)+len(p.Release) != 0 {
		t.Fatalf("rebalance off: %+v", p)
	}
}

func TestPlanBudget(t *testing.T) {
	// $35/h: on demand at $10 affords 3, more only as spot.
	g := newGroup(func(g *cloud.Group) {
		g.Desired = 2
		g.BudgetPerHour = usd("35")
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 2, OnDemandPercent: 0}
	})
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: fleetOf(2, g0), Pools: testPools(), History: withLoad(g0, 5)})
	// Wants 10; 2 on demand ($20) + spot at $3, $4, $3, $4... : $20+3+4+3+4 = $34.
	if p.Desired != 6 || len(p.Launch) != 4 || count(p.Launch, cloud.MarketSpot) != 4 || p.Decision.Limit != "budget" ||
		!strings.Contains(p.Decision.Reason, "budget") {
		t.Fatalf("budget: %+v", p)
	}
	// Prices rise: the members cost more than the budget: released, down
	// to min.
	pools := testPools()
	for i := range pools {
		pools[i].OnDemand = usd("15")
	}
	g.Min = 1
	g.Desired = 3
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: fleetOf(3, g0), Pools: pools, History: withLoad(g0, 1.5)})
	if p.Desired != 2 || len(p.Release) != 1 || p.Decision.Limit != "budget" {
		t.Fatalf("prices rose: %+v", p)
	}
}

func TestPlanScaleInOrder(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Desired = 8
		g.Policies = nil
		g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 0, OnDemandPercent: 50}
	})
	ms := []Member{
		warmMember("od1", cloud.MarketOnDemand, "z1", g0),
		warmMember("od2", cloud.MarketOnDemand, "z1", g0),
		warmMember("od3", cloud.MarketOnDemand, "z1", g0),
		warmMember("od4", cloud.MarketOnDemand, "z1", g0),
		warmMember("s-z1", cloud.MarketSpot, "z1", g0), // $3
		warmMember("s-z2", cloud.MarketSpot, "z2", g0), // $4
		warmMember("s-z2-busy", cloud.MarketSpot, "z2", g0),
		warmMember("s-boot", cloud.MarketSpot, "z1", g0),
	}
	ms[6].GPU = 0.95
	ms[7].State, ms[7].RunningSince, ms[7].CreatedAt = cloud.Starting, time.Time{}, g0.Add(-time.Minute)
	ms[1].GPU = 0.1 // the least utilized on-demand member
	ms[3].Held = true
	ms[2].CreatedAt = g0.Add(-90 * time.Minute) // od3 is newer than od1
	var order []string
	for d := 7; d >= 0; d-- {
		g.Desired = d
		p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: ms, Pools: testPools(), History: NewHistory()})
		gone := map[string]bool{}
		for _, o := range order {
			gone[o] = true
		}
		for _, r := range p.Release {
			if !gone[r.InstanceID] {
				order = append(order, r.InstanceID)
			}
			if r.InstanceID == "od4" {
				t.Fatal("released a held member")
			}
		}
	}
	// The mix (50%: on demand ceil(d/2)) says which market gives one up;
	// within it: booting first, spot in the most expensive pool, the
	// least utilized, the newest. 8 -> 7: spot (the booting one); 6: on
	// demand (the least utilized); 5: spot in z2, the idler one; 4: on
	// demand, the newer; 3: spot in z2; 2: on demand; 1: spot; 0: the
	// held one stays.
	want := []string{"s-boot", "od2", "s-z2", "od3", "s-z2-busy", "od1", "s-z1"}
	if !slices.Equal(order, want) {
		t.Fatalf("scale-in order %v, want %v", order, want)
	}
}

func TestPlanFixedSizeAndRestart(t *testing.T) {
	g := newGroup(func(g *cloud.Group) { g.Min, g.Max, g.Desired = 3, 3, 3; g.Policies = nil })
	p := PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: fleetOf(2, g0), Pools: testPools(), History: NewHistory()})
	if p.Desired != 3 || len(p.Launch) != 1 || p.Changed || p.Launch[0].Reason != "replace" {
		t.Fatalf("fixed size: %+v", p)
	}
	// Manual: set-desired is obeyed.
	g = newGroup(func(g *cloud.Group) { g.Policies, g.Desired = nil, 1 })
	p = PlanGroup(NewGroupState(), GroupInput{Now: g0, Group: g, Members: fleetOf(4, g0), Pools: testPools(), History: NewHistory()})
	if p.Desired != 1 || len(p.Release) != 3 {
		t.Fatalf("manual: %+v", p)
	}
	// A rebuilt state does not scale in for a window.
	g = newGroup(func(g *cloud.Group) { g.Desired = 8 })
	st := NewGroupState()
	for i := 0; i < 40; i++ {
		now := g0.Add(time.Duration(i) * step10)
		p = PlanGroup(st, GroupInput{Now: now, Group: g, Members: fleetOf(g.Desired, now), Pools: testPools(), History: withLoad(now, 0.5)})
		if elapsed := now.Sub(g0); elapsed < 300*time.Second && p.Desired != 8 || elapsed >= 300*time.Second && p.Desired != 1 {
			t.Fatalf("%v after the restart: %d", elapsed, p.Desired)
		}
		g.Desired = p.Desired
	}
}

// TestPlanInvariants simulates random groups under random load, prices,
// room, failures and protection, and checks every plan.
func TestPlanInvariants(t *testing.T) {
	seed := uint64(21)
	if v := os.Getenv("PLAN_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	rng := rand.New(rand.NewPCG(seed, 22))
	for iter := 0; iter < 60; iter++ {
		g := randomGroup(rng)
		if err := ValidateGroup(g); err != nil {
			t.Fatalf("iter %d: a random group is invalid: %v", iter, err)
		}
		pools := testPools()
		s := newSim(g, pools, g0.Add(time.Duration(rng.IntN(1000))*time.Hour))
		s.boot = time.Duration(20+rng.IntN(200)) * time.Second
		load := rng.Float64() * 8
		for i := 0; i < 150; i++ {
			// The world moves.
			load = max(0, load+rng.NormFloat64()*0.7)
			for j := range s.pools {
				if rng.IntN(20) == 0 {
					s.pools[j].Spot = money.Micros(float64(s.pools[j].OnDemand) * (0.2 + 0.8*rng.Float64()))
				}
				if rng.IntN(20) == 0 {
					s.pools[j].FreeSpot = []int{-1, 0, 1, 3}[rng.IntN(4)]
				}
			}
			for j := range s.members {
				m := &s.members[j]
				if rng.IntN(30) == 0 {
					m.Held = !m.Held
				}
				if rng.IntN(40) == 0 && m.Market == cloud.MarketSpot {
					m.Rebalance = true
				}
				m.GPU, m.HasUtil = rng.Float64(), m.State == cloud.Running
				if rng.IntN(20) == 0 && m.State == cloud.Running && g.IdleRelease != nil {
					m.IdleSince = s.now.Add(-time.Duration(rng.IntN(7200)) * time.Second)
				}
			}
			if rng.IntN(25) == 0 && len(s.members) > 0 {
				k := rng.IntN(len(s.members))
				s.members = slices.Delete(s.members, k, k+1)
				s.failed++
			}
			s.h.Add("load:gpu", s.now, load)
			s.h.Add("load:cpu", s.now, load*rng.Float64())
			s.h.Add("custom:queue", s.now, load*10)
			in := s.input()
			p := PlanGroup(s.st, in)
			checkPlan(t, fmt.Sprintf("iter %d step %d", iter, i), in, p)
			s.apply(p)
			s.advance(step10)
		}
	}
}

func randomGroup(rng *rand.Rand) *cloud.Group {
	g := newGroup()
	g.Min = rng.IntN(4)
	g.Max = g.Min + rng.IntN(15)
	g.Desired = g.Min + rng.IntN(g.Max-g.Min+1)
	g.Timing = cloud.GroupTiming{StabilizationSeconds: rng.IntN(400), WarmupSeconds: rng.IntN(200), CooldownSeconds: rng.IntN(200)}
	g.Mixed = cloud.MixedInstances{Spot: rng.IntN(3) > 0, OnDemandBase: rng.IntN(3), OnDemandPercent: rng.IntN(101),
		MaxSpotPriceRatio: []int{0, 50, 90}[rng.IntN(3)], CapacityRebalance: rng.IntN(2) == 0}
	if rng.IntN(2) == 0 {
		g.BudgetPerHour = money.Micros(10+rng.IntN(150)) * money.Unit
	}
	if rng.IntN(3) == 0 {
		g.IdleRelease = &cloud.IdleRelease{Threshold: 0.1, IdleSeconds: 600}
	}
	g.Policies = nil
	if rng.IntN(4) > 0 {
		g.Policies = append(g.Policies, cloud.ScalingPolicy{Name: "t", Type: cloud.PolicyTarget,
			Metric: []string{"", cloud.MetricGPUUtilization, cloud.MetricGPUOrCPU, "custom:queue"}[rng.IntN(4)], Target: 0.3 + 0.6*rng.Float64()})
		if g.Policies[0].Metric == "custom:queue" {
			g.Policies[0].Target = 10
		}
	}
	if rng.IntN(3) == 0 {
		g.Policies = append(g.Policies, cloud.ScalingPolicy{Name: "s", Type: cloud.PolicyStep, Target: 0.5,
			Steps: []cloud.StepAdjustment{{Lower: fp(0.2), Change: 50}, {Upper: fp(-0.2), Change: -30}}})
	}
	if rng.IntN(3) == 0 {
		g.Policies = append(g.Policies, cloud.ScalingPolicy{Name: "c", Type: cloud.PolicyScheduled,
			Cron: fmt.Sprintf("*/%d * * * *", 1+rng.IntN(5)), SetDesired: ip(g.Min + rng.IntN(g.Max-g.Min+1))})
	}
	return g
}

// checkPlan checks what must hold after every plan.
func checkPlan(t *testing.T, where string, in GroupInput, p Plan) {
	t.Helper()
	g := in.Group
	minC, maxC := g.Min, g.Max
	if p.Min != nil {
		minC = *p.Min
	}
	if p.Max != nil {
		maxC = *p.Max
	}
	if p.Desired < minC || p.Desired > maxC {
		t.Fatalf("%s: desired %d outside [%d, %d]: %+v", where, p.Desired, minC, maxC, p.Decision)
	}
	byID := map[string]Member{}
	for _, m := range in.Members {
		byID[m.ID] = m
	}
	released := map[string]bool{}
	for _, r := range p.Release {
		m, ok := byID[r.InstanceID]
		switch {
		case !ok:
			t.Fatalf("%s: released unknown %s", where, r.InstanceID)
		case m.Held:
			t.Fatalf("%s: released held %s", where, r.InstanceID)
		case m.Leaving:
			t.Fatalf("%s: released %s, already leaving", where, r.InstanceID)
		case released[r.InstanceID]:
			t.Fatalf("%s: released %s twice", where, r.InstanceID)
		}
		switch r.Reason {
		case cloud.ReclaimScaleIn, cloud.ReclaimIdle, cloud.ReclaimPriceMove, ReleaseRebalance:
		default:
			t.Fatalf("%s: release reason %q", where, r.Reason)
		}
		released[r.InstanceID] = true
	}
	pool := func(off, zone string) *Pool {
		for i := range in.Pools {
			if in.Pools[i].Offering == off && in.Pools[i].Zone == zone {
				return &in.Pools[i]
			}
		}
		return nil
	}
	price := func(off, zone string, market cloud.Market) money.Micros {
		pl := pool(off, zone)
		if market == cloud.MarketSpot {
			return pl.Spot
		}
		return pl.OnDemand
	}
	blocked := p.Backoff != nil && in.Now.Before(p.Backoff.Until)
	if in.Failed > 0 && !blocked {
		t.Fatalf("%s: failures without a backoff: %+v", where, p.Backoff)
	}
	if blocked && len(p.Launch) > 0 {
		t.Fatalf("%s: launches during a backoff: %+v backoff %+v failed %d now %v", where, p, g.Status.Backoff, in.Failed, in.Now)
	}
	ratio := SpotPriceRatio(g.Mixed)
	var counted, launched money.Micros
	runningBefore, runningAfter, idle := 0, 0, 0
	od, heldSpot := 0, 0
	for _, m := range in.Members {
		if m.Leaving {
			continue
		}
		counted += price(m.Offering, m.Zone, m.Market)
		run := m.State == cloud.Running && !m.RunningSince.IsZero()
		if run {
			runningBefore++
		}
		if released[m.ID] {
			if slices.Contains(p.Release, Release{m.ID, cloud.ReclaimIdle}) && run {
				idle++
			}
			continue
		}
		if run {
			runningAfter++
		}
		if m.Market != cloud.MarketSpot {
			od++
		} else if m.Held {
			heldSpot++
		}
	}
	for _, l := range p.Launch {
		pl := pool(l.Offering, l.Zone)
		if pl == nil {
			t.Fatalf("%s: launch into unknown pool %+v", where, l)
		}
		if l.Market == cloud.MarketSpot && (pl.FreeSpot == 0 || OverRatio(*pl, ratio) || pl.Spot == 0) {
			t.Fatalf("%s: spot launch into %+v", where, *pl)
		}
		launched += price(l.Offering, l.Zone, l.Market)
		if l.Market != cloud.MarketSpot {
			od++
		}
	}
	if b := g.BudgetPerHour; b > 0 && len(p.Launch) > 0 && counted+launched > b {
		t.Fatalf("%s: members %s + launches %s past the budget %s", where, counted, launched, b)
	}
	if p.Decision.Limit != "budget" && runningAfter < min(p.Desired, runningBefore-idle) {
		t.Fatalf("%s: running %d -> %d with desired %d: %+v", where, runningBefore, runningAfter, p.Desired, p)
	}
	if !blocked && g.BudgetPerHour == 0 && heldSpot == 0 && od < OnDemandShare(g.Mixed, p.Desired) {
		t.Fatalf("%s: %d on demand after the plan, the mix wants %d of %d", where, od, OnDemandShare(g.Mixed, p.Desired), p.Desired)
	}
	if p.Changed != (p.Desired != g.Desired) || p.Decision.From != g.Desired || p.Decision.To != p.Desired || p.Decision.Reason == "" {
		t.Fatalf("%s: decision %+v", where, p.Decision)
	}
}

// TestPlanOddInputs: specs ValidateGroup would refuse and snapshots with
// gaps plan something without a panic.
func TestPlanOddInputs(t *testing.T) {
	odd := []func(*cloud.Group, *GroupInput){
		func(g *cloud.Group, in *GroupInput) { in.Pools = nil },
		func(g *cloud.Group, in *GroupInput) { in.History = nil },
		func(g *cloud.Group, in *GroupInput) { g.Template.Offerings = nil },
		func(g *cloud.Group, in *GroupInput) { g.Min, g.Max = 5, 2 },
		func(g *cloud.Group, in *GroupInput) { g.Desired = -3 },
		func(g *cloud.Group, in *GroupInput) {
			g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: -2, OnDemandPercent: 300}
		},
		func(g *cloud.Group, in *GroupInput) { g.Policies[0].Target = 0 },
		func(g *cloud.Group, in *GroupInput) { g.Policies[0].Type = "nope" },
		func(g *cloud.Group, in *GroupInput) {
			g.Policies = []cloud.ScalingPolicy{{Type: cloud.PolicyScheduled, Cron: "bad"}, {Type: cloud.PolicyStep, Target: 0.5}}
		},
		func(g *cloud.Group, in *GroupInput) { in.Members[0].Offering, in.Members[0].Zone = "zzz", "" },
		func(g *cloud.Group, in *GroupInput) {
			g.IdleRelease = &cloud.IdleRelease{Threshold: 0.5, IdleSeconds: -1}
		},
		func(g *cloud.Group, in *GroupInput) { g.BudgetPerHour = 1 },
		func(g *cloud.Group, in *GroupInput) {
			in.Failed = 1000
			g.Status.Backoff = &cloud.GroupBackoff{Failures: 1 << 40}
		},
	}
	for i, f := range odd {
		g := newGroup()
		in := GroupInput{Now: g0, Group: g, Members: fleetOf(3, g0), Pools: testPools(), History: withLoad(g0, 2)}
		f(g, &in)
		p := PlanGroup(NewGroupState(), in)
		if p.Decision.Reason == "" {
			t.Errorf("case %d: no reason", i)
		}
	}
	if p := PlanGroup(NewGroupState(), GroupInput{Now: g0}); p.Desired != 0 || p.Launch != nil {
		t.Errorf("no group: %+v", p)
	}
	var st GroupState // the zero value works too
	PlanGroup(&st, GroupInput{Now: g0, Group: newGroup(), Pools: testPools()})
}

func TestBacktestForecast(t *testing.T) {
	g := newGroup(func(g *cloud.Group) {
		g.Policies = []cloud.ScalingPolicy{{Name: "fc", Type: cloud.PolicyPredictive, Metric: cloud.MetricGPUUtilization, Target: 0.7}}
	})
	h := fullHistory(14, 5) // a synthetic daily and weekly cycle with noise and bursts
	now := h0.Add(14 * 24 * time.Hour)
	r, err := BacktestForecast(g, h, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d hours backtested: MAPE %.1f%%, WAPE %.1f%%", len(r.Times), r.MAPE, r.WAPE)
	if len(r.Times) < 12*24 || len(r.Actual) != len(r.Times) || len(r.Forecast) != len(r.Times) {
		t.Fatalf("%d hours", len(r.Times))
	}
	if r.WAPE <= 0 || r.WAPE > 8 || r.MAPE > 10 {
		t.Fatalf("WAPE %.2f%% MAPE %.2f%%", r.WAPE, r.MAPE)
	}
	if len(r.Ahead) != ForecastHours || len(r.AheadValues) != ForecastHours || !r.Ahead[0].Equal(now) {
		t.Fatalf("ahead %d %d", len(r.Ahead), len(r.AheadValues))
	}
	// The backtest matches the actual series' scale: load / target.
	mean := 0.0
	for _, v := range r.Actual {
		mean += v
	}
	mean /= float64(len(r.Actual))
	if mean < 30 || mean > 70 { // 400 GPUs / 8 = 50 instances at 0.7 / 0.7
		t.Fatalf("mean actual %v", mean)
	}
	// Too little history is a *ShortHistoryError that says how much is
	// needed and how much there is.
	for _, c := range []struct {
		name string
		h    *History
		have time.Duration
		msg  string
	}{
		{"none", NewHistory(), 0, "not enough gpu_utilization history for a forecast: it needs 25h, there is 0m; try again in 25h"},
		{"one day", dailyHistory(now, 1), 24 * time.Hour, "not enough gpu_utilization history for a forecast: it needs 25h, there is 24h; try again in 1h"},
	} {
		_, err := BacktestForecast(g, c.h, now)
		var short *ShortHistoryError
		if !errors.As(err, &short) || short.Have != c.have || short.Need != BacktestHistory || err.Error() != c.msg {
			t.Errorf("%s: %v (%+v), want %q", c.name, err, short, c.msg)
		}
	}
	g.Policies = nil
	if _, err := BacktestForecast(g, h, now); err == nil {
		t.Fatal("no policy: no error")
	}
}

func TestValidateGroup(t *testing.T) {
	ok := func() *cloud.Group {
		return newGroup(func(g *cloud.Group) {
			g.Policies = append(g.Policies,
				cloud.ScalingPolicy{Name: "steps", Type: cloud.PolicyStep, Metric: "custom:queue", Target: 5,
					Steps: []cloud.StepAdjustment{{Lower: fp(0), Upper: fp(10), Change: 20}, {Lower: fp(10), Change: 50}, {Upper: fp(-2), Change: -10}}},
				cloud.ScalingPolicy{Name: "night", Type: cloud.PolicyScheduled, Cron: "0 22 * * *", TimeZone: "America/New_York", SetMin: ip(0), SetDesired: ip(1)},
				cloud.ScalingPolicy{Name: "fc", Type: cloud.PolicyPredictive, Metric: cloud.MetricGPUOrCPU, Target: 0.6, BufferSeconds: 600},
			)
			g.Mixed = cloud.MixedInstances{Spot: true, OnDemandBase: 1, OnDemandPercent: 30, MaxSpotPriceRatio: 70}
			g.IdleRelease = &cloud.IdleRelease{Threshold: 0.05, IdleSeconds: 900}
		})
	}
	if err := ValidateGroup(ok()); err != nil {
		t.Fatal(err)
	}
	if err := ValidateGroup(newGroup(func(g *cloud.Group) {
		g.Policies = []cloud.ScalingPolicy{{Type: cloud.PolicyGPUCloud, Metric: "custom:demand_gpus", Target: 8, BufferSeconds: 60}}
	})); err != nil {
		t.Fatalf("gpucloud: %v", err)
	}
	if err := ValidateGroup(newGroup(func(g *cloud.Group) { g.Min, g.Max, g.Desired, g.Policies = 2, 2, 2, nil })); err != nil {
		t.Fatalf("fixed size: %v", err)
	}
	for _, c := range []struct {
		field string
		mut   func(*cloud.Group)
	}{
		{"min:", func(g *cloud.Group) { g.Min = -1 }},
		{"max:", func(g *cloud.Group) { g.Max = -1 }},
		{"desired:", func(g *cloud.Group) { g.Desired = 21 }},
		{"template.offerings:", func(g *cloud.Group) { g.Template.Offerings = nil }},
		{"template.offerings[1]:", func(g *cloud.Group) { g.Template.Offerings = []string{"a", "a"} }},
		{"template.zones[0]:", func(g *cloud.Group) { g.Template.Zones = []string{""} }},
		{"budget_per_hour:", func(g *cloud.Group) { g.BudgetPerHour = -1 }},
		{"mixed.on_demand_base:", func(g *cloud.Group) { g.Mixed.OnDemandBase = -1 }},
		{"mixed.on_demand_percent:", func(g *cloud.Group) { g.Mixed.OnDemandPercent = 101 }},
		{"mixed.max_spot_price_ratio:", func(g *cloud.Group) { g.Mixed.MaxSpotPriceRatio = 120 }},
		{"timing.warmup_seconds:", func(g *cloud.Group) { g.Timing.WarmupSeconds = -5 }},
		{"timing.stabilization_seconds:", func(g *cloud.Group) { g.Timing.StabilizationSeconds = -5 }},
		{"idle_release.threshold:", func(g *cloud.Group) { g.IdleRelease.Threshold = 1 }},
		{"idle_release.threshold:", func(g *cloud.Group) { g.IdleRelease.Threshold = 0 }},
		{"idle_release.idle_seconds:", func(g *cloud.Group) { g.IdleRelease.IdleSeconds = 0 }},
		{"policies[0].type:", func(g *cloud.Group) { g.Policies[0].Type = "magic" }},
		{"policies[1].name:", func(g *cloud.Group) { g.Policies[1].Name = "util" }},
		{"policies[0].metric:", func(g *cloud.Group) { g.Policies[0].Metric = "memory" }},
		{"policies[0].metric:", func(g *cloud.Group) { g.Policies[0].Metric = "custom:" }},
		{"policies[0].metric:", func(g *cloud.Group) { g.Policies[0].Metric = "custom:a b" }},
		{"policies[0].target:", func(g *cloud.Group) { g.Policies[0].Target = 0 }},
		{"policies[0].target:", func(g *cloud.Group) { g.Policies[0].Target = 1.5 }},
		{"policies[0].cron:", func(g *cloud.Group) { g.Policies[0].Cron = "* * * * *" }},
		{"policies[1].steps:", func(g *cloud.Group) { g.Policies[1].Steps = nil }},
		{"policies[1].steps[1]:", func(g *cloud.Group) { g.Policies[1].Steps[1].Lower = fp(5) }},
		{"policies[1].steps[0]:", func(g *cloud.Group) { g.Policies[1].Steps[0].Upper = fp(0) }},
		{"policies[1].steps[2].change_percent:", func(g *cloud.Group) { g.Policies[1].Steps[2].Change = 0 }},
		{"policies[1].cooldown_seconds:", func(g *cloud.Group) { g.Policies[1].CooldownSeconds = -1 }},
		{"policies[2].cron:", func(g *cloud.Group) { g.Policies[2].Cron = "0 25 * * *" }},
		{"policies[2].cron:", func(g *cloud.Group) { g.Policies[2].Cron = "0 0 31 2 *" }},
		{"policies[2].time_zone:", func(g *cloud.Group) { g.Policies[2].TimeZone = "Nowhere/Town" }},
		{"policies[2]:", func(g *cloud.Group) { g.Policies[2].SetMin, g.Policies[2].SetDesired = nil, nil }},
		{"policies[2].set_min:", func(g *cloud.Group) { g.Policies[2].SetMin = ip(-1) }},
		{"policies[2].set_max:", func(g *cloud.Group) { g.Policies[2].SetMax = ip(0); g.Policies[2].SetMin = ip(1) }},
		{"policies[2].set_desired:", func(g *cloud.Group) { g.Policies[2].SetMax = ip(0) }},
		{"policies[2].metric:", func(g *cloud.Group) { g.Policies[2].Metric = cloud.MetricGPUUtilization }},
		{"policies[3].buffer_seconds:", func(g *cloud.Group) { g.Policies[3].BufferSeconds = -1 }},
		{"policies[3].steps:", func(g *cloud.Group) { g.Policies[3].Steps = g.Policies[1].Steps }},
		{"policies[3].buffer_seconds:", func(g *cloud.Group) {
			g.Policies[3].Type, g.Policies[3].BufferSeconds = cloud.PolicyGPUCloud, maxBufferSeconds+1
		}},
		{"policies[3].target:", func(g *cloud.Group) { g.Policies[3].Type, g.Policies[3].Target = cloud.PolicyGPUCloud, 0 }},
		{"policies[3].forecast_only:", func(g *cloud.Group) {
			g.Policies[3].Type, g.Policies[3].ForecastOnly = cloud.PolicyGPUCloud, true
		}},
	} {
		g := ok()
		c.mut(g)
		err := ValidateGroup(g)
		if err == nil || !strings.HasPrefix(err.Error(), c.field) {
			t.Errorf("want an error on %s, got %v", c.field, err)
		}
	}
}
