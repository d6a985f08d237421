package autoscale

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// benchGroup is one group of the benchmark with what the controller
// would hold for it.
type benchGroup struct {
	st      *GroupState
	in      GroupInput
	members []Member
}

// BenchmarkPlanGroup1000 plans one step of 1,000 groups of 10 members,
// each with target tracking, predictive (on a 14-day history) and
// scheduled policies and a mixed on-demand/spot fleet over four pools.
// An op is one step of all 1,000: the controller's three History.Add
// calls and PlanGroup for each group, 10 seconds of control-plane time
// after the previous op. history-bytes is the size of one group's full
// 14-day History (MarshalBinary).
func BenchmarkPlanGroup1000(b *testing.B) {
	if benchSetup == nil {
		benchSetup = newBench(b)
	}
	x := benchSetup
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for n := 0; n < b.N; n++ {
		x.now = x.now.Add(10 * time.Second)
		x.step++
		for i, bg := range x.groups {
			load := 6.5 + 0.5*math.Sin(float64(x.step)/30+float64(i))
			bg.in.Now = x.now
			bg.in.History.Add("load:gpu", x.now, load)
			bg.in.History.Add("load:cpu", x.now, load/2)
			bg.in.History.Add("ready", x.now, 10)
			PlanGroup(bg.st, bg.in)
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/1e6, "ms/step")
	b.ReportMetric(float64(elapsed.Nanoseconds())/float64(b.N)/float64(len(x.groups)), "ns/group")
	b.ReportMetric(float64(x.historyBytes), "history-bytes")
	b.ReportMetric(float64(x.historyPoints), "history-points")
}

// bench is the benchmark's 1,000 groups, built once: the benchmark
// function runs several times, and each run continues in time.
type bench struct {
	groups        []*benchGroup
	now           time.Time
	step          int
	historyBytes  int
	historyPoints int
}

var benchSetup *bench

func newBench(b *testing.B) *bench {
	const groups = 1000
	full := fullHistory(14, 1)
	doc, err := full.MarshalBinary()
	if err != nil {
		b.Fatal(err)
	}
	now := h0.Add(14 * 24 * time.Hour)
	bg := make([]*benchGroup, groups)
	for i := range bg {
		h := NewHistory()
		if err := h.UnmarshalBinary(doc); err != nil {
			b.Fatal(err)
		}
		g := &cloud.Group{ID: fmt.Sprintf("g%04d", i), Name: "bench", Min: 2, Max: 40, Desired: 10,
			Template: cloud.GroupTemplate{Offerings: []string{"a", "b"}, Zones: []string{"z1", "z2"}},
			Policies: []cloud.ScalingPolicy{
				{Name: "util", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.7},
				{Name: "fc", Type: cloud.PolicyPredictive, Metric: cloud.MetricGPUUtilization, Target: 0.7},
				{Name: "morning", Type: cloud.PolicyScheduled, Cron: "0 8 * * MON-FRI", TimeZone: "Europe/Berlin", SetMin: ip(4)},
				{Name: "evening", Type: cloud.PolicyScheduled, Cron: "0 20 * * *", TimeZone: "Europe/Berlin", SetMin: ip(2)},
			},
			Mixed:         cloud.MixedInstances{Spot: true, OnDemandBase: 2, OnDemandPercent: 30, CapacityRebalance: true},
			BudgetPerHour: usd("500"),
		}
		var ms []Member
		for j := 0; j < 10; j++ {
			market, zone := cloud.MarketSpot, []string{"z1", "z2"}[j%2]
			if j < 4 {
				market = cloud.MarketOnDemand
			}
			m := warmMember(fmt.Sprintf("g%04d-m%02d", i, j), market, zone, now)
			m.GPU = 0.3 + 0.05*float64(j)
			ms = append(ms, m)
		}
		bg[i] = &benchGroup{st: NewGroupState(), members: ms,
			in: GroupInput{Now: now, Group: g, Members: ms, Pools: testPools(), History: h}}
		// The first step trains the forecaster from the history (a
		// restarted controller does this once per group).
		PlanGroup(bg[i].st, bg[i].in)
	}
	return &bench{groups: bg, now: now, historyBytes: len(doc), historyPoints: full.Points()}
}
