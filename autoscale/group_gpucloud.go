package autoscale

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// The gpucloud policy (cloud.PolicyGPUCloud), the default. It recommends
// the largest of three figures, in instances at the policy's target:
//
//   - a reactive floor: the load now;
//   - the smaller of two forecasts of the highest load until capacity
//     launched now, and the next decision's, is usable (the step since
//     the last decision, plus the members' measured boot time, plus
//     BufferSeconds):
//     the seasonal one (the `predictive` forecaster), capped so that it
//     adds to the recent level no more than the load has risen within
//     such a horizon over the last day; and the reactive one, the load
//     now. Each has a margin from its own record: the mean plus z
//     standard deviations of the highest load of each past decision's
//     horizon less what that forecast said, over two days and over six
//     hours, whichever is larger. The one with the smaller total wins, so
//     that when the seasonal forecast errs more than the last value does
//     (small, spiky load; a change of regime), the policy is reactive
//     with a margin that fits the load's own jumps;
//   - none other: scale-in is stabilized by the group's window.
//
// z is gcSigmas times an adaptive scale in [gcScaleMin, gcScaleMax]: the
// policy keeps a week's exponentially weighted share of the load its
// usable members did not hold (each minute's load above the members
// running then, at the target), and the scale falls while that share is
// under gcTargetUnmet and rises while it is above. It is scored by the
// minute, from the History, so the group's decision interval does not
// change it.
//
// Constants were chosen by cross-validation over a set of series
// (docs/AUTOSCALING.md, "Figures").
var gcParams = gcConfig{
	sigmas:      2,
	targetUnmet: 0.003,
	gain:        4,
	scaleMin:    0,
	scaleMax:    3,
}

// gcConfig holds the gpucloud policy's constants (a variable so that the
// cross-validation test can try others).
type gcConfig struct {
	sigmas, targetUnmet, gain, scaleMin, scaleMax float64
}

// DefaultBoot is the boot time the gpucloud policy assumes before it has
// seen a member become running.
const DefaultBoot = 5 * time.Minute

// gcMaxHorizon bounds the horizon the policy keeps minutes for.
const gcMaxHorizon = 24 * time.Hour

// gcState is one gpucloud policy's memory.
type gcState struct {
	fs fcState
	// ring holds the latest minutes' load, ring[m%len] for minute m.
	ring []float64
	// plans are the decisions not scored yet, oldest first.
	plans []gcPlan
	// seasonal and naive are the two forecasts' error records.
	seasonal, naive gcErr
	// rise is the highest rise over a horizon seen within the last day.
	rise floatWindowMax
	// unmet and load: a week's weighted load not held, and load.
	unmet, load, scale float64
	lastPlan           int64
}

type gcErr struct{ slow, fast errStats }

func (e *gcErr) add(v, gapMinutes float64) {
	e.slow.alpha = min(1, gapMinutes/(48*60))
	e.fast.alpha = min(1, gapMinutes/(6*60))
	e.slow.add(v)
	e.fast.add(v)
}

func (e *gcErr) margin(z float64) float64 {
	if e.slow.n == 0 {
		return 0
	}
	return max(0, e.slow.bound(z), e.fast.bound(z))
}

// gcPlan is one decision to score: at minute at, the forecasts for
// minutes [at, to].
type gcPlan struct {
	at, to          int64
	seasonal, naive float64
	gap             float64
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

// floatWindowMax is the largest value of a trailing window of minutes: a
// monotone deque.
type floatWindowMax struct {
	at  []int64
	val []float64
}

func (w *floatWindowMax) push(m int64, v float64, window int64) {
	for len(w.val) > 0 && w.val[len(w.val)-1] <= v {
		w.val, w.at = w.val[:len(w.val)-1], w.at[:len(w.at)-1]
	}
	w.val, w.at = append(w.val, v), append(w.at, m)
	cut := 0
	for cut < len(w.at)-1 && w.at[cut] <= m-window {
		cut++
	}
	if cut > 0 {
		n := copy(w.at, w.at[cut:])
		copy(w.val, w.val[cut:])
		w.at, w.val = w.at[:n], w.val[:n]
	}
}

func (w *floatWindowMax) max() (float64, bool) {
	if len(w.val) == 0 {
		return 0, false
	}
	return w.val[0], true
}

// observeBoot records the boot time (creation to running) of members
// seen running for the first time; the estimate is the longest of the
// last eight.
func (st *GroupState) observeBoot(members []Member) {
	if st.bootSeen == nil {
		st.bootSeen = map[string]bool{}
	}
	live := make(map[string]bool, len(members))
	for i := range members {
		m := &members[i]
		live[m.ID] = true
		if m.RunningSince.IsZero() || st.bootSeen[m.ID] {
			continue
		}
		st.bootSeen[m.ID] = true
		b := max(0, min(gcMaxHorizon/2, m.RunningSince.Sub(m.CreatedAt)))
		st.boots = append(st.boots, b)
		if len(st.boots) > 8 {
			st.boots = st.boots[1:]
		}
	}
	for id := range st.bootSeen {
		if !live[id] {
			delete(st.bootSeen, id)
		}
	}
}

// boot is the boot time estimate: DefaultBoot until a member was seen
// become running.
func (st *GroupState) boot() time.Duration {
	if len(st.boots) == 0 {
		return DefaultBoot
	}
	b := time.Duration(0)
	for _, v := range st.boots {
		b = max(b, v)
	}
	return b
}

func (p *planner) gpucloud(label string, pol cloud.ScalingPolicy) (rec, bool) {
	key := seriesKey(pol.Metric)
	m := metricName(pol.Metric)
	load, ok := p.metricLoad(m)
	if !ok || !(pol.Target > 0) {
		p.say("%s: no %s data yet", label, m)
		return rec{}, false
	}
	st := p.st
	gs := st.gc[label]
	if gs == nil {
		gs = &gcState{fs: fcState{aheadAt: math.MinInt64}, ring: make([]float64, int(gcMaxHorizon/time.Minute)+2), scale: 1,
			lastPlan: math.MinInt64}
		st.gc[label] = gs
	}
	step := time.Duration(0)
	if !p.fresh {
		step = max(0, p.now.Sub(st.prevNow))
	}
	hz := min(gcMaxHorizon, step+st.boot()+seconds(pol.BufferSeconds, DefaultPredictiveBuffer))
	hzMin := int64((hz + time.Minute - 1) / time.Minute)
	// Each member's running time, to tell how many were usable in a
	// minute (those leaving still serve until their notice ends).
	var up []time.Time
	for i := range p.in.Members {
		if mb := &p.in.Members[i]; mb.State == cloud.Running && !mb.RunningSince.IsZero() {
			up = append(up, mb.RunningSince)
		}
	}
	sort.Slice(up, func(a, b int) bool { return up[a].Before(up[b]) })
	params := gcParams
	alpha := 1.0 / (7 * 24 * 60)
	feed(&gs.fs, p.in.History, key, p.now, &st.buf, func(mi int64, v float64) {
		gs.ring[mi%int64(len(gs.ring))] = v
		for len(gs.plans) > 0 && gs.plans[0].to <= mi {
			pl := gs.plans[0]
			gs.plans = gs.plans[1:]
			actual := 0.0
			for t := max(pl.at, mi-int64(len(gs.ring))+1); t <= pl.to; t++ {
				actual = max(actual, gs.ring[t%int64(len(gs.ring))])
			}
			gs.seasonal.add(actual-pl.seasonal, pl.gap)
			gs.naive.add(actual-pl.naive, pl.gap)
			gs.rise.push(pl.at, actual-pl.naive, 24*60)
		}
		t := minuteTime(mi)
		usable := sort.Search(len(up), func(i int) bool { return up[i].After(t) })
		short := max(0, v-float64(usable)*pol.Target)
		gs.unmet += alpha * (short - gs.unmet)
		gs.load += alpha * (v - gs.load)
		if gs.load > 0 {
			r := gs.unmet/gs.load/params.targetUnmet - 1
			gs.scale *= math.Exp(alpha * params.gain * max(-1, min(3, r)))
			gs.scale = max(params.scaleMin, min(params.scaleMax, gs.scale))
		}
	})
	if gs.fs.f == nil || gs.fs.f.levelN == 0 {
		p.say("%s: no %s history yet", label, m)
		return rec{}, false
	}
	fc := gs.fs.f.maxOver(p.now, hz)
	level := gs.fs.f.level()
	if rise, ok := gs.rise.max(); ok {
		fc = min(fc, level+max(0, rise))
	}
	nowMin := unixMinute(p.now)
	if nowMin != gs.lastPlan {
		gap := 1.0
		if gs.lastPlan != math.MinInt64 {
			gap = float64(nowMin - gs.lastPlan)
		}
		gs.plans = append(gs.plans, gcPlan{at: nowMin, to: nowMin + hzMin, seasonal: fc, naive: load, gap: gap})
		gs.lastPlan = nowMin
	}
	z := params.sigmas * gs.scale
	seasonal := fc + gs.seasonal.margin(z)
	naive := load + gs.naive.margin(z)
	want, which := seasonal, "forecast"
	if naive < seasonal {
		want, which = naive, "last value"
	}
	n := max(wantFor(want, pol.Target), wantFor(load, pol.Target))
	if fw := want / pol.Target; !p.hasForecast || fw > p.forecast {
		p.forecast, p.hasForecast = fw, true
	}
	return rec{label: label, n: n, why: fmt.Sprintf("%s: %s %.2f with its margin within %s (boot %s), load %.2f at target %.2f wants %d",
		label, which, want, hz, st.boot(), load, pol.Target, n)}, true
}
