package autoscale

import (
	"fmt"
	"math"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// fcState is one predictive policy's forecaster, fed from the History.
type fcState struct {
	f *forecaster
	// next is the unix minute of the next minute to feed (0: none yet).
	next    int64
	ahead   [ForecastHours]float64
	aheadAt int64 // the 10-minute slot the ahead forecast was made in
}

// seriesKey names the load series of a metric ("gpu_cpu" is the larger
// of the GPU and CPU loads).
func seriesKey(metric string) string {
	switch metricName(metric) {
	case cloud.MetricGPUUtilization:
		return "load:gpu"
	case cloud.MetricCPUUtilization:
		return "load:cpu"
	case cloud.MetricGPUOrCPU:
		return "gpu_cpu"
	}
	return metric
}

// loadSpan is the history a series key has.
func loadSpan(h *History, key string) time.Duration {
	if key == "gpu_cpu" {
		return max(h.Span("load:gpu"), h.Span("load:cpu"))
	}
	return h.Span(key)
}

// oldestMinute is the first minute of a series key (ok false: none).
func oldestMinute(h *History, key string) (int64, bool) {
	first := func(name string) (int64, bool) {
		s := h.s[name]
		if s == nil || s.nseg() == 0 {
			return 0, false
		}
		a, _, _ := s.seg(0, false)
		return a, true
	}
	if key != "gpu_cpu" {
		return first(key)
	}
	a, okA := first("load:gpu")
	b, okB := first("load:cpu")
	switch {
	case okA && okB:
		return min(a, b), true
	case okA:
		return a, true
	}
	return b, okB
}

// loadMinutes fills out with the minutes of a series key from minute
// from on.
func loadMinutes(h *History, key string, from int64, out, tmp []float64) {
	if key != "gpu_cpu" {
		if s := h.s[key]; s == nil || !s.minutes(from, out, false) {
			clear(out)
		}
		return
	}
	gpu, cpu := h.s["load:gpu"], h.s["load:cpu"]
	if gpu == nil || !gpu.minutes(from, out, false) {
		clear(out)
	}
	if cpu != nil && cpu.minutes(from, tmp[:len(out)], false) {
		for i := range out {
			out[i] = max(out[i], tmp[i])
		}
	}
}

// feed brings a forecaster up to the minute before now from h; each
// minute fed is also given to each, when not nil, in order.
func feed(fs *fcState, h *History, key string, now time.Time, buf *[]float64, each func(minute int64, v float64)) {
	nowMin := unixMinute(now)
	if fs.f == nil {
		fs.f = newForecaster(time.Minute)
	}
	if fs.next == 0 {
		first, ok := oldestMinute(h, key)
		if !ok {
			return
		}
		fs.next = max(first, nowMin-int64(keepMinutes))
	}
	if fs.next < nowMin-int64(keepMinutes) {
		fs.next = nowMin - int64(keepMinutes)
	}
	n := nowMin - fs.next
	if n <= 0 {
		return
	}
	if cap(*buf) < int(2*n) {
		*buf = make([]float64, 2*n)
	}
	b := (*buf)[:2*n]
	loadMinutes(h, key, fs.next, b[:n], b[n:])
	for i, v := range b[:n] {
		fs.f.observe(minuteTime(fs.next+int64(i)), v)
		if each != nil {
			each(fs.next+int64(i), v)
		}
	}
	fs.next = nowMin
}

// hourly fills out with the mean forecast (load units) of each hour from
// now, at 10-minute points.
func hourly(f *forecaster, now time.Time, out []float64) {
	for k := range out {
		sum := 0.0
		for j := 0; j < 6; j++ {
			sum += f.pointAt(now, now.Add(time.Duration(k)*time.Hour+time.Duration(j)*10*time.Minute))
		}
		out[k] = sum / 6
	}
}

func (p *planner) predictive(label string, pol cloud.ScalingPolicy, plan *Plan) (rec, bool) {
	key := seriesKey(pol.Metric)
	h := p.in.History
	span := loadSpan(h, key)
	if span < PredictiveMinHistory {
		p.say("%s: %s of %s history, needs %s", label, span.Round(time.Minute), metricName(pol.Metric), PredictiveMinHistory)
		return rec{}, false
	}
	fs := p.st.fc[key]
	if fs == nil {
		fs = &fcState{aheadAt: math.MinInt64}
		p.st.fc[key] = fs
	}
	feed(fs, h, key, p.now, &p.st.buf, nil)
	if fs.f == nil || fs.f.levelN == 0 {
		return rec{}, false
	}
	if slot := unixMinute(p.now) / 10; slot != fs.aheadAt {
		hourly(fs.f, p.now, fs.ahead[:])
		fs.aheadAt = slot
	}
	if plan.Forecast == nil && pol.Target > 0 {
		plan.Forecast = make([]float64, ForecastHours)
		for i, v := range fs.ahead {
			plan.Forecast[i] = v / pol.Target
		}
	}
	fc := fs.f.maxOver(p.now, seconds(pol.BufferSeconds, DefaultPredictiveBuffer))
	want := 0.0
	if pol.Target > 0 {
		want = fc / pol.Target
	}
	if !p.hasForecast || want > p.forecast {
		p.forecast, p.hasForecast = want, true
	}
	if pol.ForecastOnly {
		p.say("%s: forecast %.2f instances (forecast only)", label, want)
		return rec{}, false
	}
	n := wantFor(fc, pol.Target)
	return rec{label: label, n: n, why: fmt.Sprintf("%s: forecast load %.2f within %s at target %.2f wants %d",
		label, fc, seconds(pol.BufferSeconds, DefaultPredictiveBuffer), pol.Target, n)}, true
}

// ForecastReport is the forecast beside the actual load over a group's
// history, for `gpucloud groups forecast`. Values are instances (load /
// target).
type ForecastReport struct {
	// Policy is the policy whose forecaster was replayed, Metric its
	// metric and Target its target; History how much history there was.
	Policy  string
	Metric  string
	Target  float64
	History time.Duration
	// Times are the hours backtested; Actual is each hour's mean load,
	// Forecast the mean the forecaster predicted for it at the hour's
	// start from the history before.
	Times            []time.Time
	Actual, Forecast []float64
	// Ahead are the next ForecastHours hours from now, AheadValues the
	// forecast of each (mean).
	Ahead       []time.Time
	AheadValues []float64
	// MAPE is the mean of |actual−forecast|/actual over the hours with
	// load, in percent; WAPE is Σ|actual−forecast| / Σactual, in
	// percent.
	MAPE, WAPE float64
}

// BacktestHistory is the history BacktestForecast needs: a day to learn
// the daily profile, and an hour to compare a forecast with.
const BacktestHistory = 25 * time.Hour

// ShortHistoryError is BacktestForecast's answer over less history than
// it needs: the same request succeeds once there is enough.
type ShortHistoryError struct {
	// Metric is the metric whose history is short, e.g. gpu_utilization.
	Metric string
	// Have is the history there is; Need, BacktestHistory.
	Have, Need time.Duration
}

func (e *ShortHistoryError) Error() string {
	return fmt.Sprintf("not enough %s history for a forecast: it needs %s, there is %s; try again in %s",
		e.Metric, hoursMinutes(e.Need), hoursMinutes(e.Have), hoursMinutes(e.Need-e.Have))
}

// hoursMinutes writes d as "25h", "2h10m" or "40m".
func hoursMinutes(d time.Duration) string {
	d = d.Round(time.Minute)
	h, m := int(d/time.Hour), int(d%time.Hour/time.Minute)
	switch {
	case h == 0:
		return fmt.Sprintf("%dm", m)
	case m == 0:
		return fmt.Sprintf("%dh", h)
	}
	return fmt.Sprintf("%dh%dm", h, m)
}

// BacktestForecast replays the forecaster of g's first predictive policy
// (or, without one, of its first target tracking policy: the same metric
// and target) over h up to now: it is trained minute by minute, and at
// each whole hour after the first 24 hours it forecasts the hour to come,
// which is then compared with what happened. It needs BacktestHistory
// of history: less is a *ShortHistoryError.
func BacktestForecast(g *cloud.Group, h *History, now time.Time) (ForecastReport, error) {
	var pol *cloud.ScalingPolicy
	label := ""
	for _, typ := range []string{cloud.PolicyPredictive, cloud.PolicyGPUCloud, cloud.PolicyTarget} {
		for i := range g.Policies {
			if g.Policies[i].Type == typ && pol == nil {
				pol, label = &g.Policies[i], PolicyLabel(g, i)
			}
		}
	}
	if pol == nil {
		return ForecastReport{}, fmt.Errorf("group %s has no predictive or target tracking policy to forecast for", g.Name)
	}
	if !(pol.Target > 0) {
		return ForecastReport{}, fmt.Errorf("policy %s: target %v must be positive", pol.Name, pol.Target)
	}
	key := seriesKey(pol.Metric)
	first, ok := oldestMinute(h, key)
	nowMin := unixMinute(now)
	if !ok {
		first = nowMin
	}
	first = max(first, nowMin-int64(keepMinutes))
	if nowMin-first < int64(BacktestHistory/time.Minute) {
		return ForecastReport{}, &ShortHistoryError{Metric: metricName(pol.Metric),
			Have: time.Duration(max(0, nowMin-first)) * time.Minute, Need: BacktestHistory}
	}
	n := nowMin - first
	vals := make([]float64, 2*n)
	loadMinutes(h, key, first, vals[:n], vals[n:])
	vals = vals[:n]
	f := newForecaster(time.Minute)
	r := ForecastReport{Policy: label, Metric: metricName(pol.Metric), Target: pol.Target,
		History: time.Duration(n) * time.Minute}
	var absErr, sum float64
	var ape float64
	apeN := 0
	hour := make([]float64, 1)
	for i := int64(0); i < n; i++ {
		m := first + i
		if m%60 == 0 && i >= 24*60 && m+60 <= nowMin {
			hourly(f, minuteTime(m), hour)
			fc := hour[0] / pol.Target
			act := 0.0
			for _, v := range vals[i : i+60] {
				act += v
			}
			act /= 60 * pol.Target
			r.Times = append(r.Times, minuteTime(m))
			r.Actual = append(r.Actual, act)
			r.Forecast = append(r.Forecast, fc)
			absErr += math.Abs(act - fc)
			sum += act
			if act > 0 {
				ape += math.Abs(act-fc) / act
				apeN++
			}
		}
		f.observe(minuteTime(m), vals[i])
	}
	if sum > 0 {
		r.WAPE = 100 * absErr / sum
	}
	if apeN > 0 {
		r.MAPE = 100 * ape / float64(apeN)
	}
	ahead := make([]float64, ForecastHours)
	hourly(f, now, ahead)
	for k, v := range ahead {
		r.Ahead = append(r.Ahead, now.Add(time.Duration(k)*time.Hour))
		r.AheadValues = append(r.AheadValues, v/pol.Target)
	}
	return r, nil
}
