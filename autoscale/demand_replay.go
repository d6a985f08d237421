package autoscale

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

// Series is a demand series: GPUs wanted during each step, the step i
// covering [Start+i·Interval, Start+(i+1)·Interval).
type Series struct {
	Start    time.Time
	Interval time.Duration
	GPUs     []float64
}

// Time is the start of step i.
func (s Series) Time(i int) time.Time { return s.Start.Add(time.Duration(i) * s.Interval) }

// DefaultHistory is the history prefix of a series of n steps: seven days
// or a tenth of the series, whichever is shorter.
func DefaultHistory(n int, interval time.Duration) int {
	return min(int(7*24*time.Hour/interval), n/10)
}

// Prices give a dollar figure for the capacity: OnDemand and Spot per
// GPU-hour. Capacity is split as a mixed group would: the first
// OnDemandBase instances on demand, then OnDemandPercent of the rest
// (rounded up) on demand and the remainder on spot. Spot reclaims are
// not modelled.
type Prices struct {
	OnDemand, Spot  money.Micros
	OnDemandBase    int
	OnDemandPercent int
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Config is passed to each policy (UnitGPUs, Boot, limits, ...).
	Config Config
	// HistorySteps is the prefix that only feeds the policies; the
	// figures cover the steps after it. Negative means DefaultHistory.
	HistorySteps int
	// Prices, when not nil, add a cost to each result.
	Prices *Prices
	// KeepTrace keeps each step's capacity in Result.Capacity.
	KeepTrace bool
	// Decisions, when not nil, is called with every decision.
	Decisions func(step int, d Decision)
}

// Result holds one policy's figures over the evaluated steps.
type Result struct {
	Policy            string  `json:"policy"`
	DemandGPUHours    float64 `json:"demand_gpu_hours"`
	CapacityGPUHours  float64 `json:"capacity_gpu_hours"`
	ShortfallGPUHours float64 `json:"shortfall_gpu_hours"`
	IdleGPUHours      float64 `json:"idle_gpu_hours"`
	ScalingActions    int     `json:"scaling_actions"`
	CostVsOracle      float64 `json:"cost_vs_oracle"`
	// ShortfallPercent is ShortfallGPUHours as a percentage of demand.
	ShortfallPercent float64 `json:"shortfall_percent"`
	// PeakInstances is the most instances held (paid) at once.
	PeakInstances int `json:"peak_instances"`
	// Cost is the paid capacity at Prices; nil without prices.
	Cost         *money.Micros `json:"cost,omitempty"`
	OnDemandCost *money.Micros `json:"on_demand_cost,omitempty"`
	SpotCost     *money.Micros `json:"spot_cost,omitempty"`
	// Capacity is the instances paid for in each step of the whole
	// series (history included), with ReplayOptions.KeepTrace.
	Capacity []int32 `json:"-"`
}

// Validate checks that a series can be replayed.
func (s Series) Validate() error {
	if s.Interval <= 0 {
		return fmt.Errorf("autoscale: series interval %v: must be positive", s.Interval)
	}
	if s.Interval%time.Second != 0 {
		return fmt.Errorf("autoscale: series interval %v: must be whole seconds", s.Interval)
	}
	if len(s.GPUs) < 2 {
		return errors.New("autoscale: a series needs at least two steps")
	}
	if s.Interval > maxSpan/time.Duration(len(s.GPUs)-1) {
		return fmt.Errorf("autoscale: %d steps of %v: a series spans at most %v", len(s.GPUs), s.Interval, maxSpan)
	}
	for i, v := range s.GPUs {
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("autoscale: step %d (%s): demand %v is not a finite non-negative number", i, s.Time(i).Format(time.RFC3339), v)
		}
	}
	return nil
}

func (o ReplayOptions) history(s Series) (int, error) {
	h := o.HistorySteps
	if h < 0 {
		h = DefaultHistory(len(s.GPUs), s.Interval)
	}
	if h >= len(s.GPUs) {
		return 0, fmt.Errorf("autoscale: history of %d steps leaves nothing of a %d-step series to evaluate", h, len(s.GPUs))
	}
	return h, nil
}

// Oracle is the capacity that knows the future: each step exactly its
// demand rounded up to whole instances. Its shortfall is zero.
func Oracle(s Series, opt ReplayOptions) (Result, error) {
	cfg := opt.Config.Defaults()
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	if err := cfg.validate(); err != nil {
		return Result{}, err
	}
	hist, err := opt.history(s)
	if err != nil {
		return Result{}, err
	}
	acc := newAccount(s, cfg, opt.Prices)
	prev := -1
	for i, v := range s.GPUs {
		n := instancesFor(v, cfg.UnitGPUs)
		if opt.KeepTrace {
			acc.res.Capacity = append(acc.res.Capacity, int32(n))
		}
		if i < hist {
			prev = n
			continue
		}
		if prev >= 0 && n != prev {
			acc.res.ScalingActions++
		}
		prev = n
		acc.add(v, n, float64(n*cfg.UnitGPUs), acc.step_)
	}
	acc.res.Policy = "oracle"
	r := acc.finish()
	r.CostVsOracle = 1
	return r, nil
}

// launch is capacity on its way: n instances usable from ready.
type launch struct {
	ready time.Time
	n     int
}

// Replay runs a fresh policy over the series and accounts for its
// capacity. At the start of each step the policy decides from the
// demand before it; a scale-out is usable Config.Boot later (so it may
// serve only the end of a long step), a scale-in cancels launches still
// booting first and then takes ready instances away at once. Every
// instance held, booting or ready, is paid for.
func Replay(name string, s Series, opt ReplayOptions) (Result, error) {
	if err := s.Validate(); err != nil {
		return Result{}, err
	}
	p, err := New(name, opt.Config)
	if err != nil {
		return Result{}, err
	}
	hist, err := opt.history(s)
	if err != nil {
		return Result{}, err
	}
	oracle, err := Oracle(s, ReplayOptions{Config: opt.Config, HistorySteps: hist})
	if err != nil {
		return Result{}, err
	}
	cfg := opt.Config.Defaults()
	acc := newAccount(s, cfg, opt.Prices)
	if opt.KeepTrace {
		acc.res.Capacity = make([]int32, 0, len(s.GPUs))
	}
	var (
		ready   int
		pending []launch // ordered by ready time
	)
	for i := range s.GPUs {
		now := s.Time(i)
		// Launches that became usable by now.
		for len(pending) > 0 && !pending[0].ready.After(now) {
			ready += pending[0].n
			pending = pending[1:]
		}
		booting := 0
		for _, l := range pending {
			booting += l.n
		}
		d := p.Decide(Input{Now: now, Interval: s.Interval, Past: s.GPUs[:i:i], Ready: ready, Booting: booting})
		if opt.Decisions != nil {
			opt.Decisions(i, d)
		}
		held := ready + booting
		switch {
		case d.Desired > held:
			l := launch{ready: now.Add(cfg.Boot), n: d.Desired - held}
			if cfg.Boot == 0 {
				ready += l.n
			} else {
				pending = append(pending, l)
			}
		case d.Desired < held:
			cut := held - d.Desired
			for cut > 0 && len(pending) > 0 {
				last := &pending[len(pending)-1]
				k := min(cut, last.n)
				last.n -= k
				cut -= k
				if last.n == 0 {
					pending = pending[:len(pending)-1]
				}
			}
			ready -= cut
		}
		if opt.KeepTrace {
			acc.res.Capacity = append(acc.res.Capacity, int32(d.Desired))
		}
		if i < hist {
			continue
		}
		if d.Desired != held {
			acc.res.ScalingActions++
		}
		acc.stepPending(s.GPUs[i], ready, pending, now)
	}
	acc.res.Policy = p.Name()
	r := acc.finish()
	if oracle.CapacityGPUHours > 0 {
		r.CostVsOracle = r.CapacityGPUHours / oracle.CapacityGPUHours
	}
	return r, nil
}

// account sums GPU-seconds over the evaluated steps.
type account struct {
	s      Series
	cfg    Config
	prices *Prices
	step_  float64 // seconds per step
	// GPU-seconds.
	demand, capacity, shortfall float64
	// Instance-seconds, integers so that the cost is exact.
	odSec, spotSec int64
	res            Result
}

func newAccount(s Series, cfg Config, prices *Prices) *account {
	return &account{s: s, cfg: cfg, prices: prices, step_: s.Interval.Seconds()}
}

// stepPending accounts one step in which the pending launches become
// usable at their ready times.
func (a *account) stepPending(demand float64, ready int, pending []launch, start time.Time) {
	held := ready
	for _, l := range pending {
		held += l.n
	}
	a.res.PeakInstances = max(a.res.PeakInstances, held)
	end := start.Add(a.s.Interval)
	at, usable := start, ready
	short := 0.0
	for _, l := range pending {
		if !l.ready.Before(end) {
			break
		}
		seg := l.ready.Sub(at).Seconds()
		short += max(0, demand-float64(usable*a.cfg.UnitGPUs)) * seg
		at, usable = l.ready, usable+l.n
	}
	short += max(0, demand-float64(usable*a.cfg.UnitGPUs)) * end.Sub(at).Seconds()
	a.addShort(demand, held, short)
}

func (a *account) add(demand float64, held int, usableGPUs, secs float64) {
	a.res.PeakInstances = max(a.res.PeakInstances, held)
	a.addShort(demand, held, max(0, demand-usableGPUs)*secs)
}

func (a *account) addShort(demand float64, held int, short float64) {
	a.demand += demand * a.step_
	a.capacity += float64(held*a.cfg.UnitGPUs) * a.step_
	a.shortfall += short
	if p := a.prices; p != nil {
		od := min(held, p.OnDemandBase)
		if rest := held - od; rest > 0 {
			od += (rest*p.OnDemandPercent + 99) / 100
		}
		secs := int64(a.s.Interval / time.Second)
		a.odSec += int64(od) * secs
		a.spotSec += int64(held-od) * secs
	}
}

func (a *account) finish() Result {
	r := a.res
	r.DemandGPUHours = a.demand / 3600
	r.CapacityGPUHours = a.capacity / 3600
	r.ShortfallGPUHours = a.shortfall / 3600
	// Capacity is served demand plus idle; demand is served plus short.
	r.IdleGPUHours = max(0, (a.capacity-a.demand+a.shortfall)/3600)
	if a.demand > 0 {
		r.ShortfallPercent = 100 * a.shortfall / a.demand
	}
	if p := a.prices; p != nil {
		unit := int64(a.cfg.UnitGPUs)
		od := mulPerHour(p.OnDemand, a.odSec*unit)
		spot := mulPerHour(p.Spot, a.spotSec*unit)
		total := od + spot
		r.Cost, r.OnDemandCost, r.SpotCost = &total, &od, &spot
	}
	return r
}

// mulPerHour is price per GPU-hour times GPU-seconds, rounded once.
func mulPerHour(price money.Micros, gpuSeconds int64) money.Micros {
	v, err := money.MulDiv(price, gpuSeconds, money.SecondsPerHour)
	if err != nil {
		// More than 2^63 micros: nine trillion dollars.
		panic(err)
	}
	return v
}
