package autoscale

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// decisions replays name over s and returns every decision.
func decisions(t *testing.T, name string, s Series, opt ReplayOptions) []Decision {
	t.Helper()
	var out []Decision
	opt.Decisions = func(i int, d Decision) {
		if i != len(out) {
			t.Fatalf("decision for step %d, want %d", i, len(out))
		}
		out = append(out, d)
	}
	if _, err := Replay(name, s, opt); err != nil {
		t.Fatal(err)
	}
	return out
}

// randomSeries is a short random demand series: a random walk with jumps.
func randomSeries(rng *rand.Rand, n int, interval time.Duration) Series {
	v := rng.Float64() * 100
	g := make([]float64, n)
	for i := range g {
		v = max(0, v+rng.NormFloat64()*5)
		if rng.Float64() < 0.02 {
			v = rng.Float64() * 200
		}
		g[i] = v
	}
	return Series{Start: t0.Add(time.Duration(rng.IntN(1000)) * time.Hour), Interval: interval, GPUs: g}
}

// randomLimits are valid random limits, sometimes with a budget.
func randomLimits(rng *rand.Rand) Limits {
	l := Limits{Min: rng.IntN(4)}
	l.Max = l.Min + rng.IntN(30)
	if rng.IntN(2) == 0 {
		price := money.Micros(1+rng.IntN(20)) * money.Unit
		l.Budget = &Budget{InstancePrice: price, PerHour: price*money.Micros(l.Min) + money.Micros(rng.Int64N(int64(40*price)))}
	}
	return l
}

func TestPolicies(t *testing.T) {
	got := Policies()
	if got[0] != DefaultPolicy || len(got) != 5 {
		t.Fatalf("Policies() = %v", got)
	}
	for _, name := range got {
		p, err := New(name, Config{})
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("nope", Config{}); err == nil || !strings.Contains(err.Error(), "gpucloud") {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestLimits(t *testing.T) {
	b := &Budget{PerHour: 25 * money.Unit, InstancePrice: 8 * money.Unit}
	l := Limits{Min: 1, Max: 10, Budget: b}
	if l.Affordable() != 3 || l.Ceiling() != 3 {
		t.Fatalf("affordable %d ceiling %d, want 3 3", l.Affordable(), l.Ceiling())
	}
	for _, c := range []struct {
		in, want int
		limit    string
	}{{0, 1, "min"}, {2, 2, ""}, {3, 3, ""}, {4, 3, "budget"}, {50, 3, "budget"}} {
		if got, lim := l.clamp(c.in); got != c.want || lim != c.limit {
			t.Errorf("clamp(%d) = %d %q, want %d %q", c.in, got, lim, c.want, c.limit)
		}
	}
	if got, lim := (Limits{Max: 5}).clamp(9); got != 5 || lim != "max" {
		t.Errorf("max: %d %q", got, lim)
	}
	for _, bad := range []Limits{{Min: -1, Max: 1}, {Min: 3, Max: 2}, {Min: 4, Max: 10, Budget: b},
		{Max: 1, Budget: &Budget{PerHour: 1}}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if l.Validate() != nil {
		t.Error(l.Validate())
	}
}

// TestInvariants: over random series, limits and settings, every policy's
// every decision stays within min, max and the budget.
func TestInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 60; iter++ {
		interval := []time.Duration{time.Minute, 5 * time.Minute, time.Hour}[rng.IntN(3)]
		s := randomSeries(rng, 200+rng.IntN(400), interval)
		lim := randomLimits(rng)
		cfg := Config{
			UnitGPUs: 1 + rng.IntN(8), Limits: lim, Boot: time.Duration(rng.IntN(20)) * time.Minute,
			TargetUtilization: 0.3 + 0.7*rng.Float64(), LearnSteps: 1 + rng.IntN(100),
		}
		for _, name := range Policies() {
			for i, d := range decisions(t, name, s, ReplayOptions{Config: cfg, HistorySteps: -1}) {
				if d.Desired < lim.Min || d.Desired > lim.Max {
					t.Fatalf("iter %d %s step %d: desired %d outside [%d, %d]", iter, name, i, d.Desired, lim.Min, lim.Max)
				}
				if a := lim.Affordable(); a >= 0 && d.Desired > a {
					t.Fatalf("iter %d %s step %d: desired %d past the budget's %d", iter, name, i, d.Desired, a)
				}
				if d.Limit == "" && d.Desired != d.Raw && name != "target" && name != "gpucloud" && name != "step" {
					t.Fatalf("iter %d %s step %d: desired %d != raw %d with no limit", iter, name, i, d.Desired, d.Raw)
				}
			}
		}
	}
}

// TestStabilization: target and gpucloud never hold less than the highest
// recommendation of the window (within the limits), so they scale in no
// earlier than the window allows.
func TestStabilization(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for iter := 0; iter < 30; iter++ {
		s := randomSeries(rng, 500, time.Minute)
		window := time.Duration(1+rng.IntN(20)) * time.Minute
		cfg := Config{UnitGPUs: 4, ScaleInWindow: window, Limits: Limits{Max: 1000}}
		for _, name := range []string{"target", "gpucloud"} {
			ds := decisions(t, name, s, ReplayOptions{Config: cfg, HistorySteps: 0})
			w := int(window / time.Minute)
			for i, d := range ds {
				hi := 0
				for j := max(0, i-w+1); j <= i; j++ {
					hi = max(hi, ds[j].Raw)
				}
				if d.Desired != min(hi, 1000) {
					t.Fatalf("%s window %v step %d: desired %d, highest raw in window %d", name, window, i, d.Desired, hi)
				}
			}
		}
	}
	// A drop: target holds 10 instances for the window, then falls at once.
	g := make([]float64, 40)
	for i := range g {
		g[i] = 56 // 56/0.7 = 80 GPUs = 10 instances of 8
		if i >= 10 {
			g[i] = 5.6 // 1 instance
		}
	}
	ds := decisions(t, "target", Series{Start: t0, Interval: time.Minute, GPUs: g}, ReplayOptions{HistorySteps: 0})
	// Step 10 is the last to see 56: its recommendation holds while it is
	// in the window (t-5m, t], through step 14.
	for i := 1; i <= 14; i++ {
		if ds[i].Desired != 10 {
			t.Errorf("step %d: %d, want 10", i, ds[i].Desired)
		}
	}
	if ds[15].Desired != 1 {
		t.Errorf("step 15: %d, want 1 (window over)", ds[15].Desired)
	}
}

// TestCooldown: step never acts twice within its cooldown.
func TestCooldown(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := randomSeries(rng, 2000, time.Minute)
	cfg := Config{Cooldown: 7 * time.Minute, Boot: 3 * time.Minute}
	var last = -1000
	held := 0
	actions := 0
	for i, d := range decisions(t, "step", s, ReplayOptions{Config: cfg, HistorySteps: 0}) {
		if d.Desired != held {
			if i-last < 7 {
				t.Fatalf("step %d: acted %d minutes after the last action", i, i-last)
			}
			last, held = i, d.Desired
			actions++
		}
	}
	if actions < 10 {
		t.Fatalf("only %d actions: the test shows nothing", actions)
	}
}

// TestPastOnly: changing demand after step k changes no decision up to
// k+1, the first that sees step k.
func TestPastOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for iter := 0; iter < 10; iter++ {
		interval := []time.Duration{time.Minute, time.Hour}[iter%2]
		s := Synthetic(SyntheticConfig{Interval: interval, Steps: 3000, Seed: uint64(iter)})
		k := 500 + rng.IntN(2000)
		alt := Series{Start: s.Start, Interval: s.Interval, GPUs: append([]float64(nil), s.GPUs...)}
		for i := k + 1; i < len(alt.GPUs); i++ {
			alt.GPUs[i] = rng.Float64() * 1000
		}
		for _, name := range Policies() {
			opt := ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: -1}
			a, b := decisions(t, name, s, opt), decisions(t, name, alt, opt)
			// Step k+1 decides from steps 0..k: it must not change either.
			for i := 0; i <= k+1; i++ {
				if a[i] != b[i] {
					t.Fatalf("%s %v: step %d decided %+v and %+v; the series differ only after step %d", name, interval, i, a[i], b[i], k)
				}
			}
			changed := false
			for i := k + 2; i < len(a); i++ {
				changed = changed || a[i] != b[i]
			}
			if !changed && name != "scheduled" {
				t.Fatalf("%s: no decision after step %d changed: the test shows nothing", name, k)
			}
		}
	}
}

func TestReplayAccounting(t *testing.T) {
	// 1-minute steps, 8-GPU instances, boot 5 minutes, target 1.0: the
	// demand jumps from 8 to 24 GPUs at step 10.
	g := make([]float64, 30)
	for i := range g {
		g[i] = 8
		if i >= 10 {
			g[i] = 24
		}
	}
	s := Series{Start: t0, Interval: time.Minute, GPUs: g}
	opt := ReplayOptions{Config: Config{TargetUtilization: 1, Boot: 5 * time.Minute, ScaleInWindow: time.Minute}, HistorySteps: 6, KeepTrace: true}
	r, err := Replay("target", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Step 11 sees 24 and launches 2 more, usable at step 16: steps 10..15
	// are 16 GPUs short each.
	// The history (steps 0..5) covers the first launch's boot.
	want := Result{Policy: "target", DemandGPUHours: (4*8 + 20*24) / 60.0, ShortfallGPUHours: 6 * 16 / 60.0,
		ScalingActions: 1, PeakInstances: 3}
	// Paid: steps 6..10 one instance, 11..29 three.
	want.CapacityGPUHours = (5*8 + 19*24) / 60.0
	want.IdleGPUHours = want.CapacityGPUHours - (want.DemandGPUHours - want.ShortfallGPUHours)
	want.ShortfallPercent = 100 * want.ShortfallGPUHours / want.DemandGPUHours
	oracle := (4*8 + 20*24) / 60.0
	want.CostVsOracle = want.CapacityGPUHours / oracle
	close := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !close(r.DemandGPUHours, want.DemandGPUHours) || !close(r.CapacityGPUHours, want.CapacityGPUHours) ||
		!close(r.ShortfallGPUHours, want.ShortfallGPUHours) || !close(r.IdleGPUHours, want.IdleGPUHours) ||
		!close(r.CostVsOracle, want.CostVsOracle) || !close(r.ShortfallPercent, want.ShortfallPercent) ||
		r.ScalingActions != want.ScalingActions || r.PeakInstances != want.PeakInstances {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	if len(r.Capacity) != 30 || r.Capacity[10] != 1 || r.Capacity[11] != 3 {
		t.Errorf("trace %v", r.Capacity)
	}

	// Hourly steps: a launch 5 minutes into the hour serves its last 55.
	h := Series{Start: t0, Interval: time.Hour, GPUs: []float64{8, 8, 24, 24, 24}}
	opt.HistorySteps = 2
	r, err = Replay("target", h, opt)
	if err != nil {
		t.Fatal(err)
	}
	// Step 2 is short 16 for the hour (decided from step 1's 8); step 3
	// launches at its start and is short 16 for 5 minutes.
	if wantShort := 16 + 16*5/60.0; !close(r.ShortfallGPUHours, wantShort) {
		t.Errorf("hourly shortfall %v, want %v", r.ShortfallGPUHours, wantShort)
	}

	// A scale-in cancels booting launches before ready instances.
	d := Series{Start: t0, Interval: time.Minute, GPUs: []float64{80, 0, 0, 0, 0, 0, 0, 0}}
	r, err = Replay("target", d, ReplayOptions{Config: Config{TargetUtilization: 1, Boot: 10 * time.Minute, ScaleInWindow: time.Minute}, HistorySteps: 0, KeepTrace: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Capacity[1] != 10 || r.Capacity[2] != 0 || !close(r.CapacityGPUHours, 80/60.0) {
		t.Errorf("launch then cancel: trace %v, capacity %v GPU-h", r.Capacity, r.CapacityGPUHours)
	}
}

func TestOracleAndPrices(t *testing.T) {
	s := Series{Start: t0, Interval: time.Hour, GPUs: []float64{0, 1, 9, 16, 17}}
	pr := &Prices{OnDemand: money.MustParse("2.50"), Spot: money.MustParse("1.00"), OnDemandBase: 1, OnDemandPercent: 50}
	o, err := Oracle(s, ReplayOptions{HistorySteps: 1, Prices: pr})
	if err != nil {
		t.Fatal(err)
	}
	// Instances 1, 2, 2, 3 after the history's 0 (three changes):
	// GPU-hours 8+16+16+24 = 64.
	if o.CapacityGPUHours != 64 || o.ShortfallGPUHours != 0 || o.CostVsOracle != 1 || o.ScalingActions != 3 {
		t.Fatalf("oracle %+v", o)
	}
	// On demand: 1, 1+1, 1+1, 1+1 = 7 instance-hours; spot 0, 0, 0, 1.
	if *o.OnDemandCost != 7*8*money.MustParse("2.50") || *o.SpotCost != 8*money.Unit || *o.Cost != *o.OnDemandCost+*o.SpotCost {
		t.Fatalf("costs %v %v %v", *o.OnDemandCost, *o.SpotCost, *o.Cost)
	}
}

func TestReplayErrors(t *testing.T) {
	good := Series{Start: t0, Interval: time.Minute, GPUs: []float64{1, 2, 3}}
	for name, c := range map[string]struct {
		s   Series
		opt ReplayOptions
	}{
		"interval":    {Series{Start: t0, GPUs: []float64{1, 2}}, ReplayOptions{}},
		"negative":    {Series{Start: t0, Interval: time.Minute, GPUs: []float64{1, -2}}, ReplayOptions{}},
		"nan":         {Series{Start: t0, Interval: time.Minute, GPUs: []float64{1, math.NaN()}}, ReplayOptions{}},
		"history":     {good, ReplayOptions{HistorySteps: 3}},
		"unit":        {good, ReplayOptions{Config: Config{UnitGPUs: -1}}},
		"budget":      {good, ReplayOptions{Config: Config{Limits: Limits{Min: 2, Max: 3, Budget: &Budget{PerHour: 1, InstancePrice: 1}}}}},
		"target util": {good, ReplayOptions{Config: Config{TargetUtilization: 1.5}}},
		"sub-second":  {Series{Start: t0, Interval: 1500 * time.Millisecond, GPUs: []float64{1, 2}}, ReplayOptions{}},
	} {
		if _, err := Replay("gpucloud", c.s, c.opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestScheduledGiven(t *testing.T) {
	var sch WeekSchedule
	sch[hourOfWeek(t0.Add(2*time.Hour))] = 7 // Monday 02:00
	s := Series{Start: t0, Interval: 30 * time.Minute, GPUs: make([]float64, 10)}
	ds := decisions(t, "scheduled", s, ReplayOptions{Config: Config{WeekSchedule: &sch, Boot: 5 * time.Minute, Buffer: 5 * time.Minute}, HistorySteps: 0})
	// Each step holds the hours it spans through boot+buffer after it:
	// 01:30 reaches into 02:00, 02:30 is in it, 03:00 is not.
	for i, d := range ds {
		want := 0
		if i == 3 || i == 4 || i == 5 {
			want = 7
		}
		if d.Desired != want {
			t.Errorf("step %d (%s): %d, want %d", i, s.Time(i).Format("15:04"), d.Desired, want)
		}
	}
}

// TestForecastLearnsCycle: after two weeks of a clean daily cycle, the
// predictive policy covers a rise that target tracking at 100% would meet
// late, and holds close to the demand.
func TestForecastLearnsCycle(t *testing.T) {
	s := Synthetic(SyntheticConfig{Steps: 21 * 24 * 60, Seed: 9, Noise: 1e-9, BurstsPerWeek: 1e-9})
	opt := ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: 14 * 24 * 60}
	p, err := Replay("predictive", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	opt.Config.TargetUtilization = 1
	tt, err := Replay("target", s, opt)
	if err != nil {
		t.Fatal(err)
	}
	if p.ShortfallGPUHours >= tt.ShortfallGPUHours/2 || p.CostVsOracle > 1.05 {
		t.Errorf("predictive: %.2f GPU-h short at %.3f× oracle; target@1.0: %.2f short", p.ShortfallGPUHours, p.CostVsOracle, tt.ShortfallGPUHours)
	}
}

func TestSynthetic(t *testing.T) {
	c := SyntheticConfig{Steps: 14 * 24 * 60, Seed: 1}
	a, b := Synthetic(c), Synthetic(c)
	c.Seed = 2
	other := Synthetic(c)
	if len(a.GPUs) != c.Steps || a.Interval != time.Minute {
		t.Fatal(len(a.GPUs), a.Interval)
	}
	same, diff := true, false
	for i := range a.GPUs {
		same = same && a.GPUs[i] == b.GPUs[i]
		diff = diff || a.GPUs[i] != other.GPUs[i]
	}
	if !same || !diff {
		t.Fatalf("same seed equal %v, other seed differs %v", same, diff)
	}
	// Daily cycle: 15:00 above 03:00 on weekdays; weekends lower.
	at := func(day, hour int) float64 { return a.GPUs[(day*24+hour)*60] }
	for day := 0; day < 5; day++ { // 2024-01-01 is a Monday
		if at(day, 15) <= at(day, 3)+50 {
			t.Errorf("day %d: 15:00 %v, 03:00 %v", day, at(day, 15), at(day, 3))
		}
	}
	if at(5, 15) >= at(4, 15) {
		t.Errorf("Saturday 15:00 %v not below Friday's %v", at(5, 15), at(4, 15))
	}
}

func TestDemandFromIntervals(t *testing.T) {
	iv := []Interval{
		{Start: 0, End: 120, GPUs: 1},   // steps 0, 1
		{Start: 30, End: 90, GPUs: 2},   // half of step 0, half of step 1
		{Start: 150, End: 170, GPUs: 3}, // a third of step 2
		{Start: 10, End: 10, GPUs: 5},   // empty
	}
	s := DemandFromIntervals(iv, t0, time.Minute)
	want := []float64{2, 2, 1}
	if len(s.GPUs) != len(want) {
		t.Fatalf("%v", s.GPUs)
	}
	for i := range want {
		if s.GPUs[i] != want[i] {
			t.Fatalf("%v, want %v", s.GPUs, want)
		}
	}
	// GPU-hours are kept for random intervals.
	rng := rand.New(rand.NewPCG(1, 1))
	iv = iv[:0]
	total := 0.0
	for range 500 {
		a := rng.Int64N(100000)
		x := Interval{Start: a, End: a + rng.Int64N(20000), GPUs: float64(rng.IntN(8000)) / 1000}
		iv = append(iv, x)
		total += x.GPUs * float64(x.End-x.Start)
	}
	got := 0.0
	for _, v := range DemandFromIntervals(iv, t0, 7*time.Minute).GPUs {
		got += v * 420
	}
	if math.Abs(got-total) > 1e-6*total {
		t.Fatalf("GPU-seconds %v, want %v", got, total)
	}
}

func TestCSV(t *testing.T) {
	in := "time,gpus\n2024-01-01T00:00,1.5\n2024-01-01T00:01,2\n2024-01-01T00:02,0\n"
	s, err := ParseCSV(strings.NewReader(in), "d.csv", CSVOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Start.Equal(t0) || s.Interval != time.Minute || len(s.GPUs) != 3 || s.GPUs[0] != 1.5 {
		t.Fatalf("%+v", s)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, s); err != nil {
		t.Fatal(err)
	}
	back, err := ParseCSV(&b, "back", CSVOptions{})
	if err != nil || !back.Start.Equal(s.Start) || back.Interval != s.Interval || len(back.GPUs) != 3 || back.GPUs[0] != 1.5 {
		t.Fatalf("round trip: %+v %v", back, err)
	}
	custom := "ts,x,demand\n2024-01-01T00:00:00+02:00,a,4\n2024-01-01T01:00:00+02:00,b,5\n"
	s, err = ParseCSV(strings.NewReader(custom), "c", CSVOptions{TimeColumn: "TS", ValueColumn: "demand"})
	if err != nil || s.Interval != time.Hour || s.GPUs[1] != 5 {
		t.Fatalf("custom columns: %+v %v", s, err)
	}
	for _, c := range []struct{ in, want string }{
		{"", "d.csv: empty file"},
		{"when,gpus\n", `d.csv:1: no column "time"`},
		{"time,gpu\n", `d.csv:1: no column "gpus"`},
		{"time,gpus\n2024-01-01T00:00,1\n", "d.csv: 1 data rows"},
		{"time,gpus\n2024-01-01T00:00,1\n01/01/2024,2\n", "d.csv:3: time \"01/01/2024\""},
		{"time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,-2\n", "d.csv:3: gpus \"-2\""},
		{"time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,x\n", "d.csv:3: gpus \"x\""},
		{"time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:00,2\n", "d.csv:3: time 2024-01-01T00:00 repeats line 2"},
		{"time,gpus\n2024-01-01T00:01,1\n2024-01-01T00:00,2\n", "d.csv:3: time 2024-01-01T00:00 is before line 2's"},
		{"time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01,2\n2024-01-01T00:03,2\n", "d.csv:4: time 2024-01-01T00:03 is 2m0s after line 3, but the series' interval is 1m0s"},
		{"time,gpus\n2024-01-01T00:00,1\n2024-01-01T00:01\n", "d.csv:3: 1 fields"},
		{"time,gpus\n2024-01-01T00:00,1\n\"2024,2\n", "d.csv:3:"},
	} {
		_, err := ParseCSV(strings.NewReader(c.in), "d.csv", CSVOptions{})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: error %v, want prefix %q", c.in, err, c.want)
		}
	}
}

// BenchmarkReplayYear replays a year of 1-minute demand for one group.
func BenchmarkReplayYear(b *testing.B) {
	s := Synthetic(SyntheticConfig{Steps: 365 * 24 * 60, Seed: 1})
	for _, name := range Policies() {
		b.Run("policy="+name, func(b *testing.B) {
			var r Result
			for b.Loop() {
				var err error
				if r, err = Replay(name, s, ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: -1}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(s.GPUs)), "steps")
			b.ReportMetric(r.ShortfallPercent, "short%")
			b.ReportMetric(r.CostVsOracle, "xoracle")
		})
	}
}
