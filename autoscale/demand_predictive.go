package autoscale

import (
	"math"
	"time"
)

// horizon is how far ahead a decision must cover: it is usable after
// boot and the next decision's capacity only a step later.
func horizon(cfg Config, interval time.Duration) time.Duration {
	steps := (cfg.Boot + cfg.Buffer + interval - 1) / interval
	return steps * interval
}

// predictive sizes the group to its own forecast: the highest forecast
// demand from now until the capacity of the next decision is usable,
// plus the buffer (EC2's SchedulingBufferTime). Unlike EC2's predictive
// scaling, which only raises the minimum, it also scales in on the
// forecast, at once; gpucloud is the combination with a reactive floor.
type predictive struct {
	cfg Config
	f   *forecaster
}

func newPredictive(cfg Config) Policy { return &predictive{cfg: cfg} }

func (p *predictive) Name() string { return "predictive" }

func (p *predictive) Decide(in Input) Decision {
	if p.f == nil {
		p.f = newForecaster(in.Interval)
	}
	p.f.update(in)
	fc := p.f.maxOver(in.Now, horizon(p.cfg, in.Interval))
	d := Decision{Raw: instancesFor(fc, p.cfg.UnitGPUs), Forecast: fc}
	d.Desired, d.Limit = p.cfg.Limits.clamp(d.Raw)
	return d
}

// errStats is an exponentially weighted mean and variance.
type errStats struct {
	alpha, mean, varc float64
	n                 int
}

func (s *errStats) add(e float64) {
	if s.n == 0 {
		s.mean = e
	} else {
		d := e - s.mean
		s.mean += s.alpha * d
		s.varc = (1 - s.alpha) * (s.varc + s.alpha*d*d)
	}
	s.n++
}

func (s *errStats) bound(z float64) float64 { return s.mean + z*math.Sqrt(s.varc) }

// gpucloud is the default policy: the larger of
//   - the forecast (as predictive) plus a safety margin of SafetySigmas
//     standard deviations of its own past error, where the error is the
//     highest actual demand of a decision's horizon less what was
//     planned, over two time scales (two days and six hours, whichever is
//     larger, so that a noisy spell widens the margin quickly), and
//   - a reactive floor: the instances that hold the last step's demand;
//
// with scale-in stabilized over ScaleInWindow, as target tracking. The
// margin adapts: the policy keeps a week's exponentially weighted share
// of demand its usable capacity missed (demand above the ready
// instances) and scales SafetySigmas by a factor in [0.25, 2] that falls
// while that share is under targetUnmet (0.3%) and rises while it is
// above, so a smooth series is not charged the margin a noisy one needs.
type gpucloud struct {
	cfg         Config
	f           *forecaster
	window      windowMax
	planned     []float64 // planned[i%len]: the forecast of decision i
	slow, fast  errStats
	horizonSize int // steps in a horizon, counting the first
	// unmet and demand are exponentially weighted sums of the demand
	// the usable capacity missed and of the demand; scale adapts the
	// margin so that their ratio stays near targetUnmet.
	unmet, demand, scale, alpha float64
}

// targetUnmet is the share of demand the adaptive margin aims to leave
// unmet.
const targetUnmet = 0.003

func newGPUCloud(cfg Config) Policy {
	return &gpucloud{cfg: cfg, window: windowMax{window: cfg.ScaleInWindow}}
}

func (p *gpucloud) Name() string { return "gpucloud" }

func (p *gpucloud) Decide(in Input) Decision {
	h := horizon(p.cfg, in.Interval)
	if p.f == nil {
		p.f = newForecaster(in.Interval)
		p.horizonSize = int(h/in.Interval) + 1
		p.planned = make([]float64, p.horizonSize+1)
		p.slow.alpha = min(1, float64(in.Interval)/float64(48*time.Hour))
		p.fast.alpha = min(1, float64(in.Interval)/float64(6*time.Hour))
		p.alpha = min(1, float64(in.Interval)/float64(7*24*time.Hour))
		p.scale = 1
	}
	p.f.update(in)
	n := len(in.Past)
	// Score the decision whose horizon has just been fully observed.
	if s := n - p.horizonSize; s >= 0 {
		actual := 0.0
		for _, v := range in.Past[s:n] {
			actual = max(actual, v)
		}
		e := actual - p.planned[s%len(p.planned)]
		p.slow.add(e)
		p.fast.add(e)
	}
	if n > 0 {
		d := in.Past[n-1]
		short := max(0, d-float64(in.Ready*p.cfg.UnitGPUs))
		p.unmet += p.alpha * (short - p.unmet)
		p.demand += p.alpha * (d - p.demand)
		if p.demand > 0 {
			r := p.unmet/p.demand/targetUnmet - 1
			p.scale *= math.Exp(p.alpha * 4 * max(-1, min(3, r)))
			p.scale = max(0.25, min(2, p.scale))
		}
	}
	fc := p.f.maxOver(in.Now, h)
	p.planned[n%len(p.planned)] = fc
	margin := 0.0
	if p.slow.n > 0 {
		z := p.cfg.SafetySigmas * p.scale
		margin = max(0, p.slow.bound(z), p.fast.bound(z))
	}
	raw := instancesFor(fc+margin, p.cfg.UnitGPUs)
	if n > 0 {
		raw = max(raw, instancesFor(in.Past[n-1], p.cfg.UnitGPUs))
	}
	d := Decision{Raw: raw, Forecast: fc + margin}
	d.Desired, d.Limit = p.cfg.Limits.clamp(p.window.push(in.Now, raw))
	return d
}
