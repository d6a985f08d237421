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
//     BufferSeconds), each with its margin:
//     the seasonal one (the `predictive` forecaster), capped so that it
//     adds to the recent level no more than the load has risen within
//     such a horizon over the last day; and the reactive one, the load
//     now. The one with the smaller total wins, so that when the seasonal
//     forecast errs more than the last value does (small, spiky load; a
//     change of regime), the policy is reactive with a margin that fits
//     the load's own jumps;
//   - none other: scale-in is stabilized by the group's window.
//
// A margin is conditional: each forecast keeps the record of its errors
// (the highest load of each past decision's horizon less what it said;
// only errors above 0 widen a margin) four ways: by the decision's
// 10-minute slot of the day (a few days; the morning start is charged
// to the morning, not to the night), by the load's level against its
// week's mean (low, usual, high: a burst's start is charged to the
// calm, not to the burst), over two days and over six hours (a change
// of regime). A slot's and a level's record is shrunk towards the two
// days' by prior days. Each way is scored on every decision as a
// quantile loss (capacity above the error, kLoss times load above it),
// and the margin comes from the way with the best score, so a shape
// with no daily pattern uses no slot. The margin is z·√(2π)·m, m the
// record's weighted mean of the errors above 0 (an error below 0 counts
// as 0): for normal errors, z standard deviations; an error far in the
// tail (a burst's start) widens it in proportion, not in its square.
//
// z is sigmas times an adaptive scale in [scaleMin, scaleMax]: the
// policy keeps a week's exponentially weighted share of the load its
// usable members did not hold (each minute's load above the members
// running then, at the target; a member under notice counts until its
// notice ends, Member.LeavingUntil), and the scale falls while that
// share is under targetUnmet and rises while it is above. It is scored
// by the minute, from the History, so the group's decision interval does
// not change it.
//
// sigmas, targetUnmet, gain and prior were chosen by leave-one-shape-out
// cross-validation (TestCrossValidate; docs/AUTOSCALING.md, "Figures");
// the others are design values.
var gcParams = gcConfig{
	sigmas:      1,
	targetUnmet: 0.0045,
	gain:        6,
	scaleMin:    0,
	scaleMax:    3,
	prior:       0.5,
	slotDays:    3,
	kLoss:       30,
}

// gcConfig holds the gpucloud policy's constants (a variable so that the
// cross-validation test can try others).
type gcConfig struct {
	sigmas, targetUnmet, gain, scaleMin, scaleMax float64
	// prior is how many days of a time of day's own errors weigh as much
	// as the errors of every time of day (the margin's shrinkage).
	prior    float64
	slotDays float64
	kLoss    float64
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

// gcSlotMinutes is the length of a time-of-day slot of the margins.
const gcSlotMinutes = 10

// The kinds of error record a margin may come from (gcErr.margins).
const (
	gcBySlot  = iota // the decision's time of day
	gcByLevel        // the load's level against its week's mean
	gcByAll          // every decision of two days
	gcByFast         // every decision of the last six hours
	gcKinds
)

var gcKindNames = [gcKinds]string{"time of day", "level", "two days", "six hours"}

// gcLevel is the level bucket of a load against its week's mean: low
// (under 3/4), usual, high (over 4/3).
func gcLevel(load, mean float64) int {
	switch {
	case !(mean > 0) || load < 0.75*mean:
		return 0
	case load > mean*4/3:
		return 2
	}
	return 1
}

// gcErr is one forecast's error record: over two days and over the last
// six hours at every time of day, for each time-of-day slot, and for
// each level bucket; and each kind of margin's score.
type gcErr struct {
	slow, fast errStats
	slot       [24 * 60 / gcSlotMinutes]errStats
	level      [3]errStats
	// loss scores each kind of margin (score); scored counts.
	loss   [gcKinds]float64
	scored int
}

func slotOf(minute int64) int {
	return int(((minute%(24*60))+24*60)%(24*60)) / gcSlotMinutes
}

// add records the error v of a decision at minute at, gapMinutes after
// the one before, made at level bucket lvl. A slot's record keeps
// slotDays days (it gets one decision a day per gapMinutes of it), a
// level's two days of its own decisions.
func (e *gcErr) add(v, gapMinutes float64, at int64, lvl int, slotDays float64) {
	e.slow.alpha = min(1, gapMinutes/(48*60))
	e.fast.alpha = min(1, gapMinutes/(6*60))
	e.slow.add(v)
	e.fast.add(v)
	s := &e.slot[slotOf(at)]
	s.alpha = 1 / (slotDays * max(1, gcSlotMinutes/max(1, gapMinutes)))
	s.add(v)
	l := &e.level[lvl]
	l.alpha = e.slow.alpha
	l.add(v)
}

// margins are the error bounds of each kind for a decision at minute at
// and level bucket lvl: z·√(2π)·m where m is the weighted mean of the
// errors above 0 of that record (for normal errors about 0, z standard
// deviations). A slot's or a level's record is shrunk towards
// the two days' by the weight of prior days of decisions (a mixture).
func (e *gcErr) margins(z float64, at int64, lvl int, gapMinutes float64, c *gcConfig) (out [gcKinds]float64) {
	if e.slow.n == 0 {
		return out
	}
	g := e.slow.up
	shrunk := func(s *errStats, days float64) float64 {
		lam := days / (days + max(1e-9, c.prior))
		return lam*s.up + (1-lam)*g
	}
	sl := &e.slot[slotOf(at)]
	// Days of a slot's record: one decision a day per gap within it.
	perDay := max(1, gcSlotMinutes/max(1, gapMinutes))
	out[gcBySlot] = shrunk(sl, min(c.slotDays, float64(sl.n)/perDay))
	lv := &e.level[lvl]
	out[gcByLevel] = shrunk(lv, min(2, float64(lv.n)*gapMinutes/(24*60)))
	out[gcByAll] = g
	out[gcByFast] = e.fast.up
	for k := range out {
		out[k] = z * sqrt2Pi * out[k]
	}
	return out
}

// score charges each kind's margin of a decision with the decision's
// error err: the capacity it held above err, and kLoss times the load
// above it, weighted as the two days' record is.
func (e *gcErr) score(m [gcKinds]float64, err float64, c *gcConfig) {
	a := e.slow.alpha
	if e.scored == 0 {
		a = 1
	}
	for k, v := range m {
		l := max(0, v-err) + c.kLoss*max(0, err-v)
		e.loss[k] += a * (l - e.loss[k])
	}
	e.scored++
}

// pick is the kind of margin with the best score (the time of day's
// until one is scored).
func (e *gcErr) pick() int {
	best := gcBySlot
	if e.scored == 0 {
		return best
	}
	for k := range e.loss {
		if e.loss[k] < e.loss[best] {
			best = k
		}
	}
	return best
}

// gcPlan is one decision to score: at minute at, the forecasts for
// minutes [at, to], and the margins of each kind of each.
type gcPlan struct {
	at, to          int64
	seasonal, naive float64
	gap             float64
	lvl             int
	sm, nm          [gcKinds]float64
}

// errStats is an exponentially weighted mean of the errors above 0 (an
// under-forecast; an error below 0 counts as 0 and does not widen a
// margin). It is the mean and not the mean square (until 2026-12-08)
// so that a rare large error, such as a burst's start that no forecast
// sees, widens the margin of every later decision in proportion to its
// size, not to its square.
type errStats struct {
	alpha, up float64
	n         int
}

// sqrt2Pi turns the mean of the errors above 0 into the standard
// deviation of normal errors: E[max(0, e)] = σ/√(2π).
var sqrt2Pi = math.Sqrt(2 * math.Pi)

func (s *errStats) add(e float64) {
	u := max(0, e)
	if s.n == 0 {
		s.up = u
	} else {
		s.up += s.alpha * (u - s.up)
	}
	s.n++
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
	// minute: those leaving serve until their notice ends (down), which
	// on hourly steps is minutes into the hour being measured.
	var up, down []time.Time
	for i := range p.in.Members {
		if mb := &p.in.Members[i]; mb.State == cloud.Running && !mb.RunningSince.IsZero() {
			up = append(up, mb.RunningSince)
			if mb.Leaving && !mb.LeavingUntil.IsZero() {
				down = append(down, mb.LeavingUntil)
			}
		}
	}
	byTime := func(ts []time.Time) { sort.Slice(ts, func(a, b int) bool { return ts[a].Before(ts[b]) }) }
	byTime(up)
	byTime(down)
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
			gs.seasonal.add(actual-pl.seasonal, pl.gap, pl.at, pl.lvl, params.slotDays)
			gs.naive.add(actual-pl.naive, pl.gap, pl.at, pl.lvl, params.slotDays)
			gs.seasonal.score(pl.sm, actual-pl.seasonal, &params)
			gs.naive.score(pl.nm, actual-pl.naive, &params)
			gs.rise.push(pl.at, actual-pl.naive, 24*60)
		}
		t := minuteTime(mi)
		usable := sort.Search(len(up), func(i int) bool { return up[i].After(t) }) -
			sort.Search(len(down), func(i int) bool { return down[i].After(t) })
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
	gap := 1.0
	if gs.lastPlan != math.MinInt64 {
		gap = max(1, float64(nowMin-gs.lastPlan))
	}
	z := params.sigmas * gs.scale
	lvl := gcLevel(load, gs.load)
	sm := gs.seasonal.margins(z, nowMin, lvl, gap, &params)
	nm := gs.naive.margins(z, nowMin, lvl, gap, &params)
	if nowMin != gs.lastPlan {
		gs.plans = append(gs.plans, gcPlan{at: nowMin, to: nowMin + hzMin, seasonal: fc, naive: load, gap: gap, lvl: lvl, sm: sm, nm: nm})
		gs.lastPlan = nowMin
	}
	sk, nk := gs.seasonal.pick(), gs.naive.pick()
	seasonal := fc + sm[sk]
	naive := load + nm[nk]
	want, which := seasonal, "forecast (margin of "+gcKindNames[sk]+")"
	if naive < seasonal {
		want, which = naive, "last value (margin of "+gcKindNames[nk]+")"
	}
	n := max(wantFor(want, pol.Target), wantFor(load, pol.Target))
	if fw := want / pol.Target; !p.hasForecast || fw > p.forecast {
		p.forecast, p.hasForecast = fw, true
	}
	return rec{label: label, n: n, why: fmt.Sprintf("%s: %s %.2f with its margin within %s (boot %s), load %.2f at target %.2f wants %d",
		label, which, want, hz, st.boot(), load, pol.Target, n)}, true
}
