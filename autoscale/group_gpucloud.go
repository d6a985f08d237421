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
	prior:       1,
	fastHours:   6,
	slotDays:    3,
	kLoss:       10,
}

// gcConfig holds the gpucloud policy's constants (a variable so that the
// cross-validation test can try others).
type gcConfig struct {
	sigmas, targetUnmet, gain, scaleMin, scaleMax float64
	// prior is how many days of a time of day's own errors weigh as much
	// as the errors of every time of day (the margin's shrinkage).
	prior float64
	// fastHours is the memory of the regime bound (0: none).
	fastHours float64
	oneSided  float64
	slotDays  float64
	kLoss     float64
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

// gcSlotMinutes is the length of a time-of-day slot of the margins;
// gcSlotDays the memory of each slot's record, in days.
const (
	gcSlotMinutes = 10
	gcSlotDays    = 3
)

// gcErr is one forecast's error record: over two days (slow) and the
// last hours (fast) at every time of day, and for each time-of-day slot.
type gcErr struct {
	slow, fast errStats
	slot       [24 * 60 / gcSlotMinutes]slotStats
	// lossSlot and lossAll score the two bounds (score); scored counts.
	lossSlot, lossAll float64
	scored            int
}

// slotStats is the error record of one time-of-day slot; days is how
// many days of it there are (at most gcSlotDays), lastDay the latest.
type slotStats struct {
	errStats
	days    float64
	lastDay int64
}

func slotOf(minute int64) int {
	return int(((minute%(24*60))+24*60)%(24*60)) / gcSlotMinutes
}

func (e *gcErr) add(v, gapMinutes float64, at int64, fastHours, slotDays float64) {
	e.slow.alpha = min(1, gapMinutes/(48*60))
	e.fast.alpha = min(1, gapMinutes/(max(1, fastHours)*60))
	e.slow.add(v)
	e.fast.add(v)
	s := &e.slot[slotOf(at)]
	// Samples of this slot per day: one per decision within it.
	perDay := max(1, gcSlotMinutes/max(1, gapMinutes))
	s.alpha = 1 / (slotDays * perDay)
	s.add(v)
	if day := at / (24 * 60); s.n == 1 || day != s.lastDay {
		s.days, s.lastDay = min(slotDays, s.days+1), day
	}
}

// margins are the two error bounds for a decision at minute at: the
// bound of at's time of day (its errors shrunk towards those of every
// time of day by prior days: a mixture of the two) and the bound of
// every time of day; each at least the bound of the last fastHours (a
// change of regime).
func (e *gcErr) margins(z float64, at int64, c *gcConfig) (slot, all float64) {
	if e.slow.n == 0 {
		return 0, 0
	}
	g, s := &e.slow, &e.slot[slotOf(at)]
	lam := 0.0
	if s.n > 0 {
		lam = s.days / (s.days + max(1e-9, c.prior))
	}
	fast := 0.0
	if c.fastHours > 0 {
		fast = e.fast.bound(z, c)
	}
	if c.oneSided > 0 {
		slot = z * math.Sqrt(2*(lam*s.up2+(1-lam)*g.up2))
	} else {
		m := lam*s.mean + (1-lam)*g.mean
		v := lam*(s.varc+(s.mean-m)*(s.mean-m)) + (1-lam)*(g.varc+(g.mean-m)*(g.mean-m))
		slot = m + z*math.Sqrt(max(0, v))
	}
	return max(0, slot, fast), max(0, g.bound(z, c), fast)
}

// score charges each bound of a decision with its error e: the capacity
// it held above e, and kLoss times the load above it. Both are weighted
// as the slow record is.
func (e *gcErr) score(slot, all, err float64, c *gcConfig) {
	loss := func(m float64) float64 { return max(0, m-err) + c.kLoss*max(0, err-m) }
	a := e.slow.alpha
	if e.scored == 0 {
		a = 1
	}
	e.lossSlot += a * (loss(slot) - e.lossSlot)
	e.lossAll += a * (loss(all) - e.lossAll)
	e.scored++
}

// pick is the bound whose record is the better: the time of day's
// unless every time of day's has cost less.
func (e *gcErr) pick(slot, all float64) float64 {
	if e.scored > 0 && e.lossAll < e.lossSlot {
		return all
	}
	return slot
}

// gcPlan is one decision to score: at minute at, the forecasts for
// minutes [at, to].
type gcPlan struct {
	at, to          int64
	seasonal, naive float64
	gap             float64
	// The bounds of each forecast: of the time of day and of all.
	sSlot, sAll, nSlot, nAll float64
}

// errStats is an exponentially weighted mean and variance.
type errStats struct {
	alpha, mean, varc float64
	// up2 is the weighted mean of the square of the errors above 0.
	up2 float64
	n   int
}

func (s *errStats) add(e float64) {
	u := max(0, e) * max(0, e)
	if s.n == 0 {
		s.mean, s.up2 = e, u
	} else {
		s.up2 += s.alpha * (u - s.up2)
		d := e - s.mean
		s.mean += s.alpha * d
		s.varc = (1 - s.alpha) * (s.varc + s.alpha*d*d)
	}
	s.n++
}

func (s *errStats) bound(z float64, c *gcConfig) float64 {
	if c.oneSided > 0 {
		return z * math.Sqrt(2*s.up2)
	}
	return s.mean + z*math.Sqrt(s.varc)
}

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
	if st.gcp != nil {
		params = *st.gcp
	}
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
			gs.seasonal.add(actual-pl.seasonal, pl.gap, pl.at, params.fastHours, params.slotDays)
			gs.naive.add(actual-pl.naive, pl.gap, pl.at, params.fastHours, params.slotDays)
			gs.seasonal.score(pl.sSlot, pl.sAll, actual-pl.seasonal, &params)
			gs.naive.score(pl.nSlot, pl.nAll, actual-pl.naive, &params)
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
	z := params.sigmas * gs.scale
	sSlot, sAll := gs.seasonal.margins(z, nowMin, &params)
	nSlot, nAll := gs.naive.margins(z, nowMin, &params)
	if nowMin != gs.lastPlan {
		gap := 1.0
		if gs.lastPlan != math.MinInt64 {
			gap = float64(nowMin - gs.lastPlan)
		}
		gs.plans = append(gs.plans, gcPlan{at: nowMin, to: nowMin + hzMin, seasonal: fc, naive: load, gap: gap,
			sSlot: sSlot, sAll: sAll, nSlot: nSlot, nAll: nAll})
		gs.lastPlan = nowMin
	}
	seasonal := fc + gs.seasonal.pick(sSlot, sAll)
	naive := load + gs.naive.pick(nSlot, nAll)
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
