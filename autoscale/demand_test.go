package autoscale

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

var t0 = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// steps replays name over s and returns every step.
func steps(t *testing.T, name string, s Series, opt ReplayOptions) ([]Step, Result) {
	t.Helper()
	var out []Step
	opt.Steps = func(i int, st Step) {
		if i != len(out) {
			t.Fatalf("step %d, want %d", i, len(out))
		}
		out = append(out, st)
	}
	r, err := Replay(name, s, opt)
	if err != nil {
		t.Fatal(err)
	}
	return out, r
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
	if got[0] != DefaultPolicy || len(got) != 4 {
		t.Fatalf("Policies() = %v", got)
	}
	for _, name := range got {
		pols, err := PolicySpec(name, Config{})
		if err != nil || len(pols) != 1 || pols[0].Type != name {
			t.Errorf("PolicySpec(%q) = %v, %v", name, pols, err)
		}
		// Every named policy is a live group's policy list.
		if err := ValidateGroup(ReplayGroup(Config{}, pols)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := PolicySpec("nope", Config{}); err == nil || !strings.Contains(err.Error(), "gpucloud") {
		t.Errorf("unknown policy: %v", err)
	}
}

func TestLimits(t *testing.T) {
	b := &Budget{PerHour: 25 * money.Unit, InstancePrice: 8 * money.Unit}
	l := Limits{Min: 1, Max: 10, Budget: b}
	if l.Affordable() != 3 || l.Ceiling() != 3 {
		t.Fatalf("affordable %d ceiling %d, want 3 3", l.Affordable(), l.Ceiling())
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

// TestInvariants: over random series, limits and settings, every
// policy's every decision stays within min, max and the budget, and the
// members held never pass max.
func TestInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 30; iter++ {
		interval := []time.Duration{time.Minute, 5 * time.Minute, time.Hour}[rng.IntN(3)]
		s := randomSeries(rng, 200+rng.IntN(300), interval)
		lim := randomLimits(rng)
		cfg := Config{
			UnitGPUs: 1 + rng.IntN(8), Limits: lim, Boot: time.Duration(rng.IntN(20)) * time.Minute,
			TargetUtilization: 0.3 + 0.7*rng.Float64(), Notice: time.Duration(1+rng.IntN(300)) * time.Second,
		}
		for _, name := range Policies() {
			ss, _ := steps(t, name, s, ReplayOptions{Config: cfg, HistorySteps: -1})
			for i, st := range ss {
				if st.Desired < lim.Min || st.Desired > lim.Max {
					t.Fatalf("iter %d %s step %d: desired %d outside [%d, %d]", iter, name, i, st.Desired, lim.Min, lim.Max)
				}
				if a := lim.Affordable(); a >= 0 && st.Desired > a {
					t.Fatalf("iter %d %s step %d: desired %d past the budget's %d", iter, name, i, st.Desired, a)
				}
				if st.Ready+st.Booting > lim.Max {
					t.Fatalf("iter %d %s step %d: %d+%d members past max %d", iter, name, i, st.Ready, st.Booting, lim.Max)
				}
			}
		}
	}
}

// TestStabilization: target holds a drop for the window, then falls at
// once; the members released stay (paid) for the notice.
func TestStabilization(t *testing.T) {
	g := make([]float64, 40)
	for i := range g {
		g[i] = 56 // 56/0.7 = 80 GPUs = 10 instances of 8
		if i >= 10 {
			g[i] = 5.6 // 1 instance
		}
	}
	ss, _ := steps(t, "target", Series{Start: t0, Interval: time.Minute, GPUs: g}, ReplayOptions{HistorySteps: 0})
	// Step 10 is the last to see 56: its recommendation holds while it is
	// in the window (t-5m, t], through step 14.
	for i := 1; i <= 14; i++ {
		if ss[i].Desired != 10 {
			t.Errorf("step %d: %d, want 10", i, ss[i].Desired)
		}
	}
	if ss[15].Desired != 1 || ss[15].Released != 9 {
		t.Errorf("step 15: desired %d released %d, want 1 9 (window over)", ss[15].Desired, ss[15].Released)
	}
	// The notice is 120 s: the nine leave at step 17.
	if ss[16].Leaving != 9 || ss[17].Leaving != 9 || ss[18].Leaving != 0 || ss[18].Ready != 1 {
		t.Errorf("steps 16..18: leaving %d %d %d, ready %d", ss[16].Leaving, ss[17].Leaving, ss[18].Leaving, ss[18].Ready)
	}
}

// TestCooldown: step never acts twice within its cooldown.
func TestCooldown(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := randomSeries(rng, 1000, time.Minute)
	cfg := Config{Cooldown: 7 * time.Minute, Boot: 3 * time.Minute}
	last := -1000
	actions := 0
	ss, _ := steps(t, "step", s, ReplayOptions{Config: cfg, HistorySteps: 0})
	for i, st := range ss {
		if i > 0 && st.Desired != ss[i-1].Desired && st.Policy == "step" {
			if i-last < 7 {
				t.Fatalf("step %d: acted %d minutes after the last action", i, i-last)
			}
			last = i
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
	for iter := 0; iter < 4; iter++ {
		interval := []time.Duration{time.Minute, time.Hour}[iter%2]
		s := Synthetic(SyntheticConfig{Interval: interval, Steps: 3000, Seed: uint64(iter)})
		k := 1500 + rng.IntN(1000)
		alt := Series{Start: s.Start, Interval: s.Interval, GPUs: append([]float64(nil), s.GPUs...)}
		for i := k + 1; i < len(alt.GPUs); i++ {
			alt.GPUs[i] = rng.Float64() * 1000
		}
		for _, name := range Policies() {
			opt := ReplayOptions{Config: Config{Boot: 5 * time.Minute}, HistorySteps: -1}
			a, _ := steps(t, name, s, opt)
			b, _ := steps(t, name, alt, opt)
			// Step k+1 decides from steps 0..k: it must not change either.
			for i := 0; i <= k+1; i++ {
				a[i].Demand, b[i].Demand = 0, 0
				if a[i] != b[i] {
					t.Fatalf("%s %v: step %d decided %+v and %+v; the series differ only after step %d", name, interval, i, a[i], b[i], k)
				}
			}
			changed := false
			for i := k + 2; i < len(a); i++ {
				changed = changed || a[i].Desired != b[i].Desired
			}
			if !changed {
				t.Fatalf("%s: no decision after step %d changed: the test shows nothing", name, k)
			}
		}
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

// BenchmarkReplayMonth replays 30 days of one-minute steps (43,200) per
// policy through the group planner: ns/op over steps is the planner's
// cost per step.
func BenchmarkReplayMonth(b *testing.B) {
	s := Synthetic(SyntheticConfig{Steps: 30 * 24 * 60, Seed: 1})
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
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(len(s.GPUs)), "µs/step")
			b.ReportMetric(r.ShortfallPercent, "short%")
			b.ReportMetric(r.CostVsOracle, "xoracle")
		})
	}
}

// TestReplayAccounting: tiny series whose figures are computed by hand.
func TestReplayAccounting(t *testing.T) {
	close := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	// Target at 100% on 8-GPU instances, 5-minute boot, 1-minute window,
	// 120 s notice: demand 8 GPUs, then 24 from step 10, then 0 from 20.
	g := make([]float64, 30)
	for i := range g {
		switch {
		case i < 10:
			g[i] = 8
		case i < 20:
			g[i] = 24
		}
	}
	s := Series{Start: t0, Interval: time.Minute, GPUs: g}
	cfg := Config{TargetUtilization: 1, Boot: 5 * time.Minute, ScaleInWindow: time.Minute}
	ss, r := steps(t, "target", s, ReplayOptions{Config: cfg, HistorySteps: 6})
	// Step 1 launches one (usable at 6); step 11 sees 24 and launches two
	// (usable at 16): steps 10..15 are 16 GPUs short. Step 21 sees 0 and
	// releases the three: their notice ends at step 23 (the round there
	// still sees them, and ends them), paid through step 22.
	if ss[1].Launched != 1 || ss[11].Launched != 2 || ss[21].Released != 3 || ss[22].Leaving != 3 || ss[23].Leaving != 3 ||
		ss[24].Leaving != 0 {
		t.Fatalf("steps: %+v", ss)
	}
	wantShort := 6 * 16 / 60.0
	// Paid over the evaluated steps 6..29: 6..10 one, 11..22 three.
	wantCap := (5*8 + 12*24) / 60.0
	if !close(r.ShortfallGPUHours, wantShort) || !close(r.CapacityGPUHours, wantCap) || r.ScalingActions != 2 || r.PeakInstances != 3 {
		t.Errorf("got %+v; want short %v capacity %v, 2 actions, peak 3", r, wantShort, wantCap)
	}

	// Hourly steps: a launch 5 minutes into the hour serves its last 55,
	// and a notice of 120 s is paid for 2 minutes of the next step.
	h := Series{Start: t0, Interval: time.Hour, GPUs: []float64{8, 8, 24, 24, 24, 0, 0}}
	_, r = steps(t, "target", h, ReplayOptions{Config: cfg, HistorySteps: 2})
	// Step 2 is short 16 for the hour; step 3 launches at its start and is
	// short 16 for 5 minutes. Paid: step 2 one, 3 one + two from 0:00, 4
	// and 5 three; step 6 releases, and the three stay 2 minutes.
	if want := 16 + 16*5/60.0; !close(r.ShortfallGPUHours, want) {
		t.Errorf("hourly shortfall %v, want %v", r.ShortfallGPUHours, want)
	}
	if want := 8 + 24*3 + 24*2/60.0; !close(r.CapacityGPUHours, want) {
		t.Errorf("hourly capacity %v, want %v", r.CapacityGPUHours, want)
	}
}

// TestProtectedNotReleased: a protected member and a locked one are never
// given notice; scale-in takes the others.
func TestProtectedNotReleased(t *testing.T) {
	g := []float64{40, 40, 40, 40, 40, 40, 40, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	s := Series{Start: t0, Interval: time.Minute, GPUs: g}
	for _, c := range []struct {
		name     string
		cfg      Config
		released int
	}{
		{"none held", Config{TargetUtilization: 1, Boot: time.Minute, ScaleInWindow: time.Minute}, 5},
		{"two protected", Config{TargetUtilization: 1, Boot: time.Minute, ScaleInWindow: time.Minute, Protected: 2}, 3},
		{"all locked", Config{TargetUtilization: 1, Boot: time.Minute, ScaleInWindow: time.Minute, LockFor: time.Hour}, 0},
	} {
		ss, _ := steps(t, "target", s, ReplayOptions{Config: c.cfg, HistorySteps: 0})
		rel := 0
		for _, st := range ss {
			rel += st.Released
		}
		if rel != c.released || ss[len(ss)-1].Ready != 5-c.released {
			t.Errorf("%s: released %d, %d ready at the end; want %d", c.name, rel, ss[len(ss)-1].Ready, c.released)
		}
	}
}

// TestOracle: the oracle holds each step's need within min and max, and
// pays for each instance from a boot before the step that needs it.
func TestOracle(t *testing.T) {
	close := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	s := Series{Start: t0, Interval: time.Hour, GPUs: []float64{0, 1, 9, 16, 17, 0}}
	pr := &Prices{OnDemand: money.MustParse("2.50"), Spot: money.MustParse("1.00"), OnDemandBase: 1, OnDemandPercent: 50}
	for _, c := range []struct {
		name        string
		cfg         Config
		capGPUh     float64
		shortGPUh   float64
		actions     int
		onDemandGPU float64 // on-demand GPU-hours, with pr
	}{
		// Needs 1, 2, 2, 3, 0 after the history: GPU-hours 8+16+16+24+0.
		{"no boot", Config{}, 64, 0, 4, 0},
		// A 30-minute boot: the second instance is paid from 1:30, the
		// third from 3:30.
		{"boot 30m", Config{Boot: 30 * time.Minute}, 64 + 4 + 4, 0, 4, 0},
		// Max 2: step 4 is 1 GPU short; min 1: step 5 holds one.
		{"min 1 max 2", Config{Limits: Limits{Min: 1, Max: 2}}, 8 + 16 + 16 + 16 + 8, 1, 2, 0},
	} {
		o, err := Oracle(s, ReplayOptions{Config: c.cfg, HistorySteps: 1, Prices: pr})
		if err != nil {
			t.Fatal(err)
		}
		if !close(o.CapacityGPUHours, c.capGPUh) || !close(o.ShortfallGPUHours, c.shortGPUh) || o.ScalingActions != c.actions {
			t.Errorf("%s: %+v; want capacity %v short %v actions %d", c.name, o, c.capGPUh, c.shortGPUh, c.actions)
		}
	}
	// On demand: 1, 1+1, 1+1, 1+1 = 7 instance-hours; spot 0, 0, 0, 1.
	o, _ := Oracle(s, ReplayOptions{HistorySteps: 1, Prices: pr})
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
		"sub-minute":  {Series{Start: t0, Interval: 30 * time.Second, GPUs: []float64{1, 2}}, ReplayOptions{}},
		"metric": {good, ReplayOptions{Config: Config{Policies: []cloud.ScalingPolicy{
			{Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: 0.5}}}}},
	} {
		if _, err := Replay("gpucloud", c.s, c.opt); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
