package autoscale

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Cron is a parsed five-field cron expression in a time zone: the
// schedule of a scheduled policy.
//
// Fields, in order: minute (0-59), hour (0-23), day of month (1-31),
// month (1-12 or JAN-DEC), day of week (0-7, 0 and 7 are Sunday, or
// SUN-SAT); names are case-insensitive. Each field is a comma-separated
// list of items; an item is "*", a value, or a range "a-b", optionally
// followed by "/step" ("*/15", "10-50/20", and "5/15", which is 5-59/15).
// The macros @yearly (@annually), @monthly, @weekly, @daily (@midnight)
// and @hourly stand for their usual expressions.
//
// As in Vixie cron, when both the day of month and the day of week are
// restricted (neither begins with "*"), a day matches when either does;
// otherwise both must.
//
// Daylight saving time, also as in Vixie cron: an expression whose minute
// and hour fields both begin with something other than "*" is a
// fixed-time job. When the clocks go forward, a fixed-time job whose
// time was skipped fires at the first minute after the gap (02:30 fires
// at 03:00 on the spring-forward day in Europe and the US); when they go
// back, it does not fire again in the repeated hour. Any other expression
// (an interval such as "*/10 * * * *" or "0 * * * *") fires at every
// minute whose local time matches: not in the skipped hour, twice in the
// repeated one.
type Cron struct {
	expr   string
	loc    *time.Location
	minute uint64 // bit i: minute i
	hour   uint32
	dom    uint32 // bit i: day i (1..31)
	month  uint16 // bit i: month i (1..12)
	dow    uint8  // bit i: weekday i (0 = Sunday)
	// domStar and dowStar: the field begins with "*" (Vixie's rule).
	domStar, dowStar bool
	// fixed: neither the minute nor the hour field begins with "*".
	fixed bool
}

var cronMacros = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
)

// LoadCron parses expr in the IANA time zone tz (empty: UTC).
func LoadCron(expr, tz string) (*Cron, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil {
			return nil, fmt.Errorf("time zone %q: %v", tz, err)
		}
		loc = l
	}
	return ParseCron(expr, loc)
}

// ParseCron parses a five-field cron expression (or a macro) in loc (nil:
// UTC). Errors name the field.
func ParseCron(expr string, loc *time.Location) (*Cron, error) {
	if loc == nil {
		loc = time.UTC
	}
	src := strings.TrimSpace(expr)
	if m, ok := cronMacros[strings.ToLower(src)]; ok {
		src = m
	}
	f := strings.Fields(src)
	if len(f) != 5 {
		return nil, fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week), got %d", expr, len(f))
	}
	c := &Cron{expr: strings.TrimSpace(expr), loc: loc}
	specs := []struct {
		name     string
		lo, hi   int
		names    []string
		namesLo  int
		wrapHigh bool // 7 is 0 (day of week)
	}{
		{name: "minute", lo: 0, hi: 59},
		{name: "hour", lo: 0, hi: 23},
		{name: "day of month", lo: 1, hi: 31},
		{name: "month", lo: 1, hi: 12, names: monthNames, namesLo: 1},
		{name: "day of week", lo: 0, hi: 7, names: dayNames, namesLo: 0, wrapHigh: true},
	}
	var bits [5]uint64
	for i, sp := range specs {
		b, err := parseCronField(f[i], sp.lo, sp.hi, sp.names, sp.namesLo)
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s field %q: %v", expr, sp.name, f[i], err)
		}
		if sp.wrapHigh && b&(1<<7) != 0 {
			b = b&^(1<<7) | 1
		}
		bits[i] = b
	}
	c.minute, c.hour, c.dom, c.month, c.dow = bits[0], uint32(bits[1]), uint32(bits[2]), uint16(bits[3]), uint8(bits[4])
	c.domStar, c.dowStar = strings.HasPrefix(f[2], "*"), strings.HasPrefix(f[4], "*")
	c.fixed = !strings.HasPrefix(f[0], "*") && !strings.HasPrefix(f[1], "*")
	return c, nil
}

func parseCronField(s string, lo, hi int, names []string, namesLo int) (uint64, error) {
	var bits uint64
	for _, item := range strings.Split(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("empty item")
		}
		rng, stepStr, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepStr)
			if err != nil || n < 1 || n > hi-lo+1 {
				return 0, fmt.Errorf("step %q: want 1..%d", stepStr, hi-lo+1)
			}
			step = n
		}
		var a, b int
		switch {
		case rng == "*":
			a, b = lo, hi
		case strings.Contains(rng, "-"):
			x, y, _ := strings.Cut(rng, "-")
			var err error
			if a, err = cronValue(x, lo, hi, names, namesLo); err != nil {
				return 0, err
			}
			if b, err = cronValue(y, lo, hi, names, namesLo); err != nil {
				return 0, err
			}
			if a > b {
				return 0, fmt.Errorf("range %q: start after end", rng)
			}
		default:
			v, err := cronValue(rng, lo, hi, names, namesLo)
			if err != nil {
				return 0, err
			}
			a, b = v, v
			if hasStep {
				b = hi // "5/15" is "5-59/15"
			}
		}
		for v := a; v <= b; v += step {
			bits |= 1 << uint(v)
		}
	}
	return bits, nil
}

func cronValue(s string, lo, hi int, names []string, namesLo int) (int, error) {
	for i, n := range names {
		if strings.EqualFold(s, n) {
			return namesLo + i, nil
		}
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if v < lo || v > hi {
		return 0, fmt.Errorf("%d out of range %d-%d", v, lo, hi)
	}
	return v, nil
}

// String is the expression as given.
func (c *Cron) String() string { return c.expr }

// Location is the cron's time zone.
func (c *Cron) Location() *time.Location { return c.loc }

// matchWall reports whether a wall-clock time (fields read as given)
// matches the fields.
func (c *Cron) matchWall(month time.Month, day, hour, minute int, wd time.Weekday) bool {
	if c.minute&(1<<uint(minute)) == 0 || c.hour&(1<<uint(hour)) == 0 || c.month&(1<<uint(month)) == 0 {
		return false
	}
	return c.matchDay(day, wd)
}

func (c *Cron) matchDay(day int, wd time.Weekday) bool {
	d := c.dom&(1<<uint(day)) != 0
	w := c.dow&(1<<uint(wd)) != 0
	if c.domStar || c.dowStar {
		return d && w
	}
	return d || w
}

// FiresAt reports whether the cron fires at the minute starting at m
// (m is truncated to the minute), with the daylight saving rules of Cron.
func (c *Cron) FiresAt(m time.Time) bool {
	m = m.Truncate(time.Minute)
	w := m.In(c.loc)
	if c.matchWall(w.Month(), w.Day(), w.Hour(), w.Minute(), w.Weekday()) {
		return !c.fixed || !c.repeated(m, w)
	}
	if !c.fixed {
		return false
	}
	// The first minute after the clocks went forward: fire for the wall
	// minutes the jump skipped.
	p := m.Add(-time.Minute).In(c.loc)
	_, o1 := w.Zone()
	_, o0 := p.Zone()
	if o1 <= o0 {
		return false
	}
	base := time.Date(p.Year(), p.Month(), p.Day(), p.Hour(), p.Minute(), 0, 0, time.UTC)
	for k := 1; k <= (o1-o0)/60; k++ {
		s := base.Add(time.Duration(k) * time.Minute)
		if c.matchWall(s.Month(), s.Day(), s.Hour(), s.Minute(), s.Weekday()) {
			return true
		}
	}
	return false
}

// repeated reports whether the wall time w of m already happened earlier
// (the clocks went back within the last three hours).
func (c *Cron) repeated(m time.Time, w time.Time) bool {
	_, o1 := w.Zone()
	_, o0 := m.Add(-3 * time.Hour).In(c.loc).Zone()
	if o0 <= o1 {
		return false
	}
	e := m.Add(-time.Duration(o0-o1) * time.Second).In(c.loc)
	return e.Day() == w.Day() && e.Hour() == w.Hour() && e.Minute() == w.Minute()
}

// cronLookBack bounds how far back Fired looks.
const cronLookBack = 24 * time.Hour

// Fired returns the latest minute in (prev, now] at which the cron fires,
// looking back at most a day from now; ok is false when it does not fire
// in that span.
func (c *Cron) Fired(prev, now time.Time) (at time.Time, ok bool) {
	start := prev.Truncate(time.Minute).Add(time.Minute)
	if lb := now.Add(-cronLookBack).Truncate(time.Minute); start.Before(lb) {
		start = lb
	}
	for m := now.Truncate(time.Minute); !m.Before(start); m = m.Add(-time.Minute) {
		if m.After(prev) && c.FiresAt(m) {
			return m, true
		}
	}
	return time.Time{}, false
}

// cronSearch bounds Next: five years covers every leap day.
const cronSearch = 5 * 366 * 24 * time.Hour

// Next returns the first minute after t at which the cron fires, or the
// zero time when it does not fire within five years (February 30th).
func (c *Cron) Next(t time.Time) time.Time {
	m := t.Truncate(time.Minute).Add(time.Minute)
	end := m.Add(cronSearch)
	for m.Before(end) {
		if c.FiresAt(m) {
			return m
		}
		w := m.In(c.loc)
		// Jump over minutes that cannot fire. Jumps land on the old
		// offset's hour boundaries, where clocks change, so the first
		// minute after a gap is never jumped over.
		jump := 1
		switch {
		case c.month&(1<<uint(w.Month())) == 0 || !c.matchDay(w.Day(), w.Weekday()):
			toMidnight := 24*60 - (w.Hour()*60 + w.Minute())
			jump = max(toMidnight-180, 60-w.Minute())
		case c.hour&(1<<uint(w.Hour())) == 0:
			jump = 60 - w.Minute()
		}
		m = m.Add(time.Duration(jump) * time.Minute)
	}
	return time.Time{}
}
