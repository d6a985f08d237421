package autoscale

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// TestGPUCloudUnmetCountsNotice: the gpucloud policy's own measure of the
// load it did not hold counts a member under notice until its notice
// ends, not for every minute it measures: on hourly steps, a member
// released at the top of the hour served two of its sixty minutes.
func TestGPUCloudUnmetCountsNotice(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	measure := func(until time.Time) (unmet, load float64) {
		g := newGroup(func(g *cloud.Group) {
			g.Min, g.Max, g.Desired = 0, 10, 2
			g.Policies = []cloud.ScalingPolicy{{Name: "gc", Type: cloud.PolicyGPUCloud, Metric: DemandMetric, Target: 8}}
		})
		h := NewHistory()
		// Two days of 16 GPUs wanted, a point an hour, as a replay of
		// hourly steps publishes them.
		for at := now.Add(-48 * time.Hour); at.Before(now); at = at.Add(time.Hour) {
			h.Add(DemandMetric, at, 16)
		}
		since := now.Add(-72 * time.Hour)
		members := []Member{
			{ID: "a", Offering: "replay", State: cloud.Running, RunningSince: since},
			{ID: "b", Offering: "replay", State: cloud.Running, RunningSince: since, Leaving: true, LeavingUntil: until},
		}
		st := NewGroupState()
		PlanGroup(st, GroupInput{Now: now, Group: g, History: h, Members: members,
			Current: map[string]float64{DemandMetric: 16}})
		gs := st.gc[PolicyLabel(g, 0)]
		if gs == nil {
			t.Fatal("the policy kept no state")
		}
		return gs.unmet, gs.load
	}
	// Its notice ends two minutes into the last hour: the 58 minutes
	// after it were 8 GPUs short.
	unmet, load := measure(now.Add(-58 * time.Minute))
	if !(unmet > 0) || !(load > 0) {
		t.Fatalf("released two minutes into the hour: unmet %g of load %g; want some unmet", unmet, load)
	}
	// The share it reads is the share of minutes short, by the week's
	// weights: 58 of the 2,880 minutes fed, each short by half the load.
	alpha := 1.0 / (7 * 24 * 60)
	want := 0.0
	for i := range 48 * 60 {
		short := 0.0
		if i >= 48*60-58 {
			short = 8
		}
		want += alpha * (short - want)
	}
	if d := unmet - want; d > 1e-9 || d < -1e-9 {
		t.Errorf("unmet %g, want %g", unmet, want)
	}
	// A notice with no known end, or one that ends after the hour: the
	// member held its share throughout.
	for _, until := range []time.Time{{}, now.Add(time.Minute)} {
		if unmet, _ := measure(until); unmet != 0 {
			t.Errorf("notice until %v: unmet %g, want 0", until, unmet)
		}
	}
}

// TestGPUCloudMarginCalibration: for normal errors a margin of each kind
// is z standard deviations, and a rare error far in the tail (a burst's
// start) widens it in proportion to its size, not to its square.
func TestGPUCloudMarginCalibration(t *testing.T) {
	c := gcParams
	noise := func(seed uint64, sigma float64) *gcErr {
		r := rand.New(rand.NewPCG(seed, 1))
		e := &gcErr{}
		for i := range 3 * 24 * 60 {
			e.add(sigma*r.NormFloat64(), 1, int64(i), 1, c.slotDays)
		}
		return e
	}
	for _, tc := range []struct {
		sigma, z float64
	}{{1, 1}, {4, 1}, {4, 2.5}, {0.3, 0.5}} {
		m := noise(7, tc.sigma).margins(tc.z, 3*24*60, 1, 1, &c)
		for k, v := range m {
			if want := tc.z * tc.sigma; math.Abs(v-want) > 0.15*want {
				t.Errorf("σ %v, z %v: %s margin %.3f, want about %.3f", tc.sigma, tc.z, gcKindNames[k], v, want)
			}
		}
	}
	// One error of k σ on the same noise: the widening of the two days'
	// margin grows as k, so doubling k about doubles it.
	widen := func(k float64) float64 {
		base := noise(9, 1).margins(1, 3*24*60, 1, 1, &c)[gcByAll]
		e := noise(9, 1)
		e.add(k, 1, 3*24*60, 1, c.slotDays)
		return e.margins(1, 3*24*60+1, 1, 1, &c)[gcByAll] - base
	}
	w10, w20 := widen(10), widen(20)
	if r := w20 / w10; r < 1.8 || r > 2.4 {
		t.Fatalf("an error of 10σ widens the margin by %.4f and one of 20σ by %.4f: ratio %.2f, want about 2 (the mean, not the mean square)", w10, w20, r)
	}
}
