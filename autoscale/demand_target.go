package autoscale

import "math"

// target is target tracking as on EC2 and in the HPA: the capacity that
// brings utilization to the target, ceil(load / (target × unit)), where
// load is the demand of the last step. A scale-out applies at once; a
// scale-in takes the highest recommendation of the stabilization window
// (the HPA's scaleDown stabilizationWindowSeconds; EC2 target tracking
// scales in conservatively too). Booting instances are not in the metric
// (warm-up): the recommendation is computed from demand, not from the
// utilization of the instances that happen to be ready.
type target struct {
	cfg    Config
	window windowMax
}

func newTarget(cfg Config) Policy {
	return &target{cfg: cfg, window: windowMax{window: cfg.ScaleInWindow}}
}

func (p *target) Name() string { return "target" }

func (p *target) Decide(in Input) Decision {
	raw := 0
	if n := len(in.Past); n > 0 {
		raw = instancesFor(in.Past[n-1]/p.cfg.TargetUtilization, p.cfg.UnitGPUs)
	}
	d := Decision{Raw: raw}
	d.Desired, d.Limit = p.cfg.Limits.clamp(p.window.push(in.Now, raw))
	return d
}

// stepAdjustment is one row of a step policy: when utilization is at
// least Lower (and below the next row's Lower), change capacity by
// Percent of the current capacity, by at least one instance.
type stepAdjustment struct {
	Lower   float64
	Percent int
}

// step is step scaling on the utilization of the ready instances, with
// the adjustments below and a cooldown after every action (the simple
// scaling semantics of EC2: no action until the cooldown has passed).
// Booting instances are left out of the metric (warm-up) but count in
// the capacity that an adjustment is a percentage of.
type step struct {
	cfg        Config
	out        []stepAdjustment // ascending Lower
	inBelow    float64
	inPercent  int
	lastAction int64 // unix nanoseconds of the last action; math.MinInt64 = none
}

func newStep(cfg Config) Policy {
	t := cfg.TargetUtilization
	return &step{
		cfg: cfg,
		out: []stepAdjustment{
			{Lower: t + 0.1, Percent: 10},
			{Lower: t + 0.2, Percent: 30},
			{Lower: t + 0.3, Percent: 50},
		},
		inBelow:    t - 0.2,
		inPercent:  -10,
		lastAction: math.MinInt64,
	}
}

func (p *step) Name() string { return "step" }

func (p *step) Decide(in Input) Decision {
	current := in.Ready + in.Booting
	raw := current
	if n := len(in.Past); n > 0 {
		load := in.Past[n-1]
		u := math.Inf(1)
		if in.Ready > 0 {
			u = load / float64(in.Ready*p.cfg.UnitGPUs)
		} else if load == 0 {
			u = 0
		}
		pct := 0
		for _, a := range p.out {
			if u >= a.Lower {
				pct = a.Percent
			}
		}
		if pct == 0 && u < p.inBelow {
			pct = p.inPercent
		}
		if pct != 0 {
			delta := int(math.Ceil(math.Abs(float64(current*pct)) / 100))
			delta = max(delta, 1)
			if pct < 0 {
				delta = -delta
			}
			raw = max(current+delta, 0)
		}
	}
	d := Decision{Raw: raw}
	want := raw
	now := in.Now.UnixNano()
	if p.lastAction != math.MinInt64 && now-p.lastAction < int64(p.cfg.Cooldown) {
		want = current
	}
	d.Desired, d.Limit = p.cfg.Limits.clamp(want)
	if d.Desired != current {
		p.lastAction = now
	}
	return d
}
