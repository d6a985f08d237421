package autoscale

import (
	"fmt"
	"math"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
)

// cronAction checks one scheduled policy, a cron action, and applies it
// when it fired; it returns the desired it set, if any.
func (p *planner) cronAction(label string, pol cloud.ScalingPolicy, fresh bool) (int, bool) {
	st := p.st
	e := st.crons[label]
	if e == nil || e.expr != pol.Cron || e.tz != pol.TimeZone {
		e = &cronEntry{expr: pol.Cron, tz: pol.TimeZone}
		e.c, e.err = LoadCron(pol.Cron, pol.TimeZone)
		st.crons[label] = e
	}
	if e.err != nil {
		p.say("scheduled %s: %v", label, e.err)
		return 0, false
	}
	last, ok := st.cronLast[label]
	if !ok {
		last = st.prevNow
		if fresh {
			last = p.now.Add(-cronCatchUp)
			if p.g.CreatedAt.After(last) {
				last = p.g.CreatedAt
			}
			for _, d := range p.g.Status.Decisions {
				if d.Policy == label && d.Time.After(last) {
					last = d.Time
				}
			}
		}
	}
	st.cronLast[label] = p.now
	at, fired := e.c.Fired(last, p.now)
	if !fired {
		return 0, false
	}
	var parts []string
	if pol.SetMin != nil {
		p.minC = *pol.SetMin
		parts = append(parts, fmt.Sprintf("min %d", p.minC))
	}
	if pol.SetMax != nil {
		p.maxC = *pol.SetMax
		parts = append(parts, fmt.Sprintf("max %d", p.maxC))
	}
	if p.minC > p.maxC {
		if pol.SetMax != nil && pol.SetMin == nil {
			p.minC = p.maxC
		} else {
			p.maxC = p.minC
		}
	}
	if pol.SetDesired != nil {
		parts = append(parts, fmt.Sprintf("desired %d", *pol.SetDesired))
	}
	p.say("scheduled %s (%s) fired at %s: %s", label, e.c, at.In(e.c.Location()).Format("2006-01-02 15:04 MST"),
		strings.Join(parts, ", "))
	if p.policy == "" {
		p.policy = label
	}
	if pol.SetDesired != nil {
		return *pol.SetDesired, true
	}
	return 0, false
}

// metricLoad is the newest value of a policy's metric in instance units
// (utilization metrics) or as published (custom).
func (p *planner) metricLoad(metric string) (float64, bool) {
	switch metric {
	case "", cloud.MetricGPUUtilization:
		return p.latest("load:gpu")
	case cloud.MetricCPUUtilization:
		return p.latest("load:cpu")
	case cloud.MetricGPUOrCPU:
		g, okG := p.latest("load:gpu")
		c, okC := p.latest("load:cpu")
		return max(g, c), okG || okC
	}
	return p.latest(metric)
}

// latest is a series' current observation, or the History's newest
// minute.
func (p *planner) latest(series string) (float64, bool) {
	if v, ok := p.in.Current[series]; ok {
		return v, true
	}
	v, _, ok := p.in.History.Last(series)
	return v, ok
}

func isCustom(metric string) bool { return strings.HasPrefix(metric, cloud.CustomMetricPrefix) }

func metricName(metric string) string {
	if metric == "" {
		return cloud.MetricGPUUtilization
	}
	return metric
}

// wantFor is the instances load asks for at target t.
func wantFor(load, t float64) int {
	if !(t > 0) || !(load > 0) {
		return 0
	}
	// Loads are kept as float32: a tolerance of a millionth keeps a
	// load of exactly k instances at k.
	v := math.Ceil(load/t - 1e-6)
	if v > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(v)
}

func (p *planner) target(label string, pol cloud.ScalingPolicy) (rec, bool) {
	m := metricName(pol.Metric)
	load, ok := p.metricLoad(m)
	if !ok {
		p.say("%s: no %s data yet", label, m)
		return rec{}, false
	}
	if !isCustom(m) {
		if p.ready == 0 && len(p.counted) > 0 {
			p.say("%s: no member warm yet", label)
			return rec{}, false
		}
		if p.ready > 0 {
			p.metrics[m] = load / float64(p.ready)
		}
	} else {
		p.metrics[m] = load
	}
	n := wantFor(load, pol.Target)
	return rec{label: label, n: n, why: fmt.Sprintf("%s: %s load %.2f at target %.2f wants %d", label, m, load, pol.Target, n)}, true
}

func (p *planner) step(label string, pol cloud.ScalingPolicy, current int) (rec, bool) {
	m := metricName(pol.Metric)
	load, ok := p.metricLoad(m)
	if !ok {
		p.say("%s: no %s data yet", label, m)
		return rec{}, false
	}
	var v float64
	if isCustom(m) {
		v = load / float64(max(1, len(p.counted)))
		p.metrics[m+"/instance"] = v
	} else {
		if p.ready == 0 {
			p.say("%s: no member warm yet", label)
			return rec{}, false
		}
		v = load / float64(p.ready)
		p.metrics[m] = v
	}
	cd := seconds(pol.CooldownSeconds, seconds(p.g.Timing.CooldownSeconds, DefaultGroupCooldown))
	if last, ok := p.st.cooldown[label]; ok && p.now.Sub(last) < cd {
		return rec{}, false
	}
	diff := v - pol.Target
	for _, a := range pol.Steps {
		if a.Lower != nil && diff < *a.Lower || a.Upper != nil && diff >= *a.Upper || a.Change == 0 {
			continue
		}
		c := len(p.counted)
		delta := max(1, int(math.Ceil(float64(c*abs(a.Change))/100-1e-9)))
		n := c + delta
		if a.Change < 0 {
			n = max(0, c-delta)
		}
		if n != current {
			p.st.cooldown[label] = p.now
		}
		return rec{label: label, n: n, why: fmt.Sprintf("%s: %s %.2f is %+.2f from target %.2f: %+d%% of %d gives %d",
			label, m, v, diff, pol.Target, a.Change, c, n)}, true
	}
	return rec{}, false
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}
