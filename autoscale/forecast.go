package autoscale

import (
	"math"
	"time"
)

// The seasonal forecaster of the predictive and gpucloud policies: the
// planner feeds it a minute at a time from the group's History (observe,
// in group_forecast.go's feed), reads hourly points of it (pointAt) and
// the highest forecast of a horizon (maxOver).

const (
	// minSlot is the finest slot of the seasonal profiles.
	minSlot = 10 * time.Minute
	// levelSpan is the recent stretch whose mean is the forecast's level.
	levelSpan = 5 * time.Minute
	// weekDecay and dayDecay are the weight one period's observations of
	// a slot keep after one more period: a half-life of one week for the
	// weekly profile, about three days for the daily one.
	weekDecay = 0.5
	dayDecay  = 0.8
)

// profile is a seasonal profile: one exponentially weighted mean per slot
// of a period (a day or a week).
type profile struct {
	slot   time.Duration
	period time.Duration
	val    []float64
	set    []bool
	alpha  float64 // per observation
}

func newProfile(period, slot, interval time.Duration, decay float64) profile {
	n := int((period + slot - 1) / slot)
	perSlot := max(1.0, float64(slot)/float64(interval))
	return profile{
		slot: slot, period: period,
		val: make([]float64, n), set: make([]bool, n),
		alpha: 1 - math.Pow(decay, 1/perSlot),
	}
}

// offset is t's position in the period: the time since the period began
// (Sunday 00:00 for a week, 00:00 for a day) in t's zone.
func offset(t time.Time, period time.Duration) time.Duration {
	h, m, s := t.Clock()
	d := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(s)*time.Second
	if period > 24*time.Hour {
		d += time.Duration(t.Weekday()) * 24 * time.Hour
	}
	return d
}

func (p *profile) observe(t time.Time, v float64) {
	i := int(offset(t, p.period) / p.slot)
	if !p.set[i] {
		p.val[i], p.set[i] = v, true
		return
	}
	p.val[i] += p.alpha * (v - p.val[i])
}

// at is the profile at t, interpolated between slot centres; ok is false
// when either slot has no data yet.
func (p *profile) at(t time.Time) (float64, bool) {
	x := float64(offset(t, p.period))/float64(p.slot) - 0.5
	k := int(math.Floor(x))
	f := x - float64(k)
	n := len(p.val)
	a, b := ((k%n)+n)%n, ((k+1)%n+n)%n
	if !p.set[a] || !p.set[b] {
		return 0, false
	}
	return p.val[a]*(1-f) + p.val[b]*f, true
}

// forecaster predicts demand from its own history: the recent level plus
// the seasonal change between now and the forecast time, from a daily
// profile of the forecast's day type and (after a week of history) a
// weekly profile.
//
// There are two daily profiles, one of weekdays and one of weekends
// (Saturday and Sunday in the time's zone), each learning from its own
// days only. A single daily profile learned Saturday from Friday and
// Monday from Sunday: on a load that is lower at the weekend (as a
// cluster's often is), it was off by much of the weekly swing at the
// start of each day type, and every margin paid for it.
type forecaster struct {
	interval time.Duration
	week     profile
	// day holds the daily profiles by day type (weekday, weekend).
	day    [2]profile
	seen   int
	recent []float64 // the last levelSteps observations, a ring
	levelN int
}

func newForecaster(interval time.Duration) *forecaster {
	slot := max(interval, minSlot)
	n := max(1, int((levelSpan+interval/2)/interval))
	return &forecaster{
		interval: interval,
		week:     newProfile(7*24*time.Hour, slot, interval, weekDecay),
		day: [2]profile{newProfile(24*time.Hour, slot, interval, dayDecay),
			newProfile(24*time.Hour, slot, interval, dayDecay)},
		recent: make([]float64, n),
	}
}

// dayType is 1 on Saturday and Sunday, 0 on other days, in t's zone.
func dayType(t time.Time) int {
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		return 1
	}
	return 0
}

// seasonal is the profile value at t: the mean of the weekly profile and
// the daily one of t's day type once a week has been seen, the daily one
// before; the other day type's daily profile until t's has data.
func (f *forecaster) seasonal(t time.Time) (float64, bool) {
	dt := dayType(t)
	d, ok := f.day[dt].at(t)
	if !ok {
		if d, ok = f.day[1-dt].at(t); !ok {
			return 0, false
		}
	}
	if time.Duration(f.seen)*f.interval >= 7*24*time.Hour {
		if w, ok := f.week.at(t); ok {
			return (w + d) / 2, true
		}
	}
	return d, true
}

// maxOver is the highest forecast demand of the steps starting at now,
// now+interval, ... up to and including now+horizon.
func (f *forecaster) maxOver(now time.Time, horizon time.Duration) float64 {
	if f.levelN == 0 {
		return 0
	}
	level := 0.0
	for i := 0; i < f.levelN; i++ {
		level += f.recent[i]
	}
	level /= float64(f.levelN)
	// The level is the mean of the last levelN steps, each observed at
	// its start time: it stands for the mean of those times.
	ref := now.Add(-time.Duration(f.levelN+1) * f.interval / 2)
	base, okRef := f.seasonal(ref)
	best := 0.0
	for t := now; !t.After(now.Add(horizon)); t = t.Add(f.interval) {
		v := level
		if s, ok := f.seasonal(t); ok && okRef {
			v += s - base
		}
		best = max(best, v)
	}
	return best
}

// observe feeds one observation at t to the forecaster.
func (f *forecaster) observe(t time.Time, v float64) {
	f.week.observe(t, v)
	f.day[dayType(t)].observe(t, v)
	f.recent[f.seen%len(f.recent)] = v
	f.levelN = min(f.levelN+1, len(f.recent))
	f.seen++
}

// pointAt is the forecast for t made at now (from the minutes before
// now): the mean of the last five minutes plus the seasonal change from
// their time to t, as maxOver computes it, floored at 0.
func (f *forecaster) pointAt(now, t time.Time) float64 {
	if f.levelN == 0 {
		return 0
	}
	level := 0.0
	for i := 0; i < f.levelN; i++ {
		level += f.recent[i]
	}
	level /= float64(f.levelN)
	ref := now.Add(-time.Duration(f.levelN+1) * f.interval / 2)
	if base, ok := f.seasonal(ref); ok {
		if s, ok := f.seasonal(t); ok {
			level += s - base
		}
	}
	return max(0, level)
}

// level is the mean of the latest observations (up to five minutes'),
// the forecast's starting point.
func (f *forecaster) level() float64 {
	if f.levelN == 0 {
		return 0
	}
	v := 0.0
	for i := 0; i < f.levelN; i++ {
		v += f.recent[i]
	}
	return v / float64(f.levelN)
}
