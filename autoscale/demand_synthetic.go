package autoscale

import (
	"math"
	"math/rand/v2"
	"time"
)

// SyntheticConfig shapes a synthetic demand series. Zero fields take the
// defaults of Synthetic.
type SyntheticConfig struct {
	Start    time.Time     // default 2024-01-01T00:00Z (a Monday)
	Interval time.Duration // default 1 minute
	Steps    int
	Seed     uint64
	// Base is the mean demand in GPUs (default 400).
	Base float64
	// Daily and Weekly are the amplitudes of the cycles as fractions of
	// Base (default 0.35 and 0.15): demand peaks in the afternoon and is
	// lower at the weekend.
	Daily, Weekly float64
	// Noise is the standard deviation of a slow (mean-reverting, about
	// 30 minutes) noise as a fraction of Base (default 0.03).
	Noise float64
	// BurstsPerWeek is the mean number of bursts (default 3); each adds
	// BurstGPUs (default 0.2 of Base, varied ×0.5–1.5) for 30 minutes to
	// 4 hours.
	BurstsPerWeek float64
	BurstGPUs     float64
	// Trend is the growth of the mean per week as a fraction of Base
	// (negative: a decline); 0 none.
	Trend float64
	// Office, when set, makes demand zero outside 08:00–20:00 on
	// weekdays: idle nights and weekends.
	Office bool
}

// Synthetic makes a seeded demand series with daily and weekly cycles,
// noise and bursts. The same config gives the same series.
func Synthetic(c SyntheticConfig) Series {
	s, _ := syntheticBursts(c)
	return s
}

// bursts are the bursts of a synthetic series: the GPUs each step's burst
// adds (0 outside one), the steps at which one starts and the steps at
// which demand is held at zero (Office); each calm step starts one with
// probability p, of a size uniform in [lo, hi]. noise is each step's
// noise, an AR(1) with coefficient phi per step and standard deviation
// sd.
type bursts struct {
	gpus        []float64
	start, zero []bool
	p, lo, hi   float64
	noise       []float64
	phi, sd     float64
}

// syntheticBursts is Synthetic with the bursts it added (the burst
// bound's input, demand_bound_test.go).
func syntheticBursts(c SyntheticConfig) (Series, bursts) {
	if c.Start.IsZero() {
		c.Start = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.Base == 0 {
		c.Base = 400
	}
	if c.Daily == 0 {
		c.Daily = 0.35
	}
	if c.Weekly == 0 {
		c.Weekly = 0.15
	}
	if c.Noise == 0 {
		c.Noise = 0.03
	}
	if c.BurstsPerWeek == 0 {
		c.BurstsPerWeek = 3
	}
	if c.BurstGPUs == 0 {
		c.BurstGPUs = 0.2 * c.Base
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x9e3779b97f4a7c15))
	dt := c.Interval.Hours()
	// AR(1) with a 30-minute correlation time and stationary std Noise.
	phi := math.Exp(-dt / 0.5)
	innov := c.Noise * c.Base * math.Sqrt(1-phi*phi)
	pBurst := c.BurstsPerWeek * dt / (7 * 24)
	noise := 0.0
	burstLeft, burst := 0.0, 0.0
	out := make([]float64, c.Steps)
	bs := bursts{gpus: make([]float64, c.Steps), start: make([]bool, c.Steps), zero: make([]bool, c.Steps),
		p: pBurst, lo: 0.5 * c.BurstGPUs, hi: 1.5 * c.BurstGPUs,
		noise: make([]float64, c.Steps), phi: phi, sd: c.Noise * c.Base}
	for i := range out {
		t := c.Start.Add(time.Duration(i) * c.Interval)
		h := float64(t.Hour()) + float64(t.Minute())/60
		daily := -math.Cos(2 * math.Pi * (h - 3) / 24) // low at 03:00, high at 15:00
		weekly := 1.0
		if dayType(t) == 1 {
			weekly = -1
		}
		noise = phi*noise + innov*rng.NormFloat64()
		bs.noise[i] = noise
		if burstLeft <= 0 && rng.Float64() < pBurst {
			burst = c.BurstGPUs * (0.5 + rng.Float64())
			burstLeft = 0.5 + 3.5*rng.Float64()
			bs.start[i] = true
		}
		b := 0.0
		if burstLeft > 0 {
			b = burst
			burstLeft -= dt
		}
		weeks := float64(i) * dt / (7 * 24)
		v := c.Base*(1+c.Daily*daily+c.Weekly*weekly+c.Trend*weeks) + noise + b
		if c.Office && (dayType(t) == 1 || t.Hour() < 8 || t.Hour() >= 20) {
			v = 0
			bs.zero[i] = true
		}
		out[i] = max(0, math.Round(v*100)/100)
		if out[i] > 0 {
			bs.gpus[i] = min(b, out[i])
		}
	}
	return Series{Start: c.Start, Interval: c.Interval, GPUs: out}, bs
}

// Interval is a span in which some GPUs were wanted: a pod from its
// creation to its deletion. Times are seconds from an origin.
type Interval struct {
	Start, End int64
	GPUs       float64
}

// DemandFromIntervals is the GPUs wanted over time: each step holds the
// mean of the GPUs of the intervals that overlap it, weighted by the
// overlap, so that GPU-hours are kept. Step 0 starts at origin (second
// 0); the series covers the intervals up to the latest end.
func DemandFromIntervals(iv []Interval, origin time.Time, interval time.Duration) Series {
	step := int64(interval / time.Second)
	var end int64
	for _, x := range iv {
		end = max(end, x.End)
	}
	n := int((end + step - 1) / step)
	// A difference array of GPU-seconds per step, with partial steps at
	// both ends of each interval.
	rate := make([]float64, n+2) // GPUs that start covering from step i on
	part := make([]float64, n+1) // GPU-seconds to add to step i
	for _, x := range iv {
		if x.End <= x.Start || x.GPUs <= 0 || x.Start < 0 {
			continue
		}
		a, b := x.Start/step, x.End/step
		if a == b {
			part[a] += x.GPUs * float64(x.End-x.Start)
			continue
		}
		part[a] += x.GPUs * float64((a+1)*step-x.Start)
		rate[a+1] += x.GPUs
		rate[b] -= x.GPUs
		part[b] += x.GPUs * float64(x.End-b*step)
	}
	out := make([]float64, n)
	cur := 0.0
	for i := range out {
		cur += rate[i]
		// Rounded to micro-GPUs: the running sum leaves float dust.
		out[i] = max(0, math.Round((cur+part[i]/float64(step))*1e6)/1e6)
	}
	return Series{Start: origin, Interval: interval, GPUs: out}
}
