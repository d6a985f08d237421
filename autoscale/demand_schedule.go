package autoscale

import "time"

// WeekSchedule is a capacity in instances per hour of the week: index 0
// is Sunday 00:00–01:00 in the zone of the series' times. It is the
// demand replay's "scheduled" policy; a live group's scheduled policies
// are cron actions instead (Cron, planner.cronAction).
type WeekSchedule [168]int

// hourOfWeek is t's index in a WeekSchedule.
func hourOfWeek(t time.Time) int { return int(t.Weekday())*24 + t.Hour() }

// weeklySchedule is the replay's "scheduled" policy: it holds a capacity
// per hour of the week, like a set of cron actions. It is given
// (Config.WeekSchedule) or learned from the latest
// LearnSteps of history (a week by default) as soon as they are there,
// and learned again every week: each hour of the week gets the
// instances that held the highest demand seen in it (hours not seen take
// the peak of their hour of the day, then the overall peak). Like a cron action
// set ahead of need, each step holds the largest capacity of the hours
// from now until Boot+Buffer after the step ends. Until the schedule is
// learned it holds the peak demand seen so far.
type weeklySchedule struct {
	cfg     Config
	sched   *WeekSchedule
	peak    float64 // highest demand seen, before the schedule is learned
	learned bool
	given   bool
	at      int // len(Past) when last learned
}

func newWeeklySchedule(cfg Config) Policy {
	p := &weeklySchedule{cfg: cfg}
	if cfg.WeekSchedule != nil {
		s := *cfg.WeekSchedule
		p.sched, p.learned, p.given = &s, true, true
	}
	return p
}

func (p *weeklySchedule) Name() string { return "scheduled" }

func (p *weeklySchedule) learnSteps(in Input) int {
	if p.cfg.LearnSteps > 0 {
		return p.cfg.LearnSteps
	}
	return max(1, int(7*24*time.Hour/in.Interval))
}

// learn sets the schedule from the last n steps of in.Past.
func (p *weeklySchedule) learn(in Input, n int) {
	var week [168]float64
	var seen [168]bool
	var day [24]float64
	var daySeen [24]bool
	all := 0.0
	from := len(in.Past) - n
	start := in.Now.Add(-time.Duration(n) * in.Interval)
	for i, v := range in.Past[from:] {
		t := start.Add(time.Duration(i) * in.Interval)
		h := hourOfWeek(t)
		if !seen[h] || v > week[h] {
			week[h], seen[h] = v, true
		}
		if !daySeen[t.Hour()] || v > day[t.Hour()] {
			day[t.Hour()], daySeen[t.Hour()] = v, true
		}
		all = max(all, v)
	}
	var s WeekSchedule
	for h := range s {
		v := all
		if seen[h] {
			v = week[h]
		} else if daySeen[h%24] {
			v = day[h%24]
		}
		s[h] = instancesFor(v, p.cfg.UnitGPUs)
	}
	p.sched, p.learned, p.at = &s, true, len(in.Past)
}

func (p *weeklySchedule) Decide(in Input) Decision {
	if !p.given {
		n := p.learnSteps(in)
		week := max(1, int(7*24*time.Hour/in.Interval))
		switch {
		case !p.learned && len(in.Past) >= n, p.learned && len(in.Past)-p.at >= week:
			p.learn(in, n)
		case !p.learned && len(in.Past) > 0:
			p.peak = max(p.peak, in.Past[len(in.Past)-1])
		}
	}
	raw := instancesFor(p.peak, p.cfg.UnitGPUs)
	if p.learned {
		raw = 0
		end := in.Now.Add(in.Interval + p.cfg.Boot + p.cfg.Buffer)
		for t := in.Now.Truncate(time.Hour); t.Before(end); t = t.Add(time.Hour) {
			if t.Add(time.Hour).After(in.Now) {
				raw = max(raw, p.sched[hourOfWeek(t)])
			}
		}
	}
	d := Decision{Raw: raw}
	d.Desired, d.Limit = p.cfg.Limits.clamp(raw)
	return d
}
