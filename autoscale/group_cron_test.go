package autoscale

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones below load without a system tz database
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestCronParse(t *testing.T) {
	utc := time.UTC
	from := time.Date(2024, 1, 1, 0, 0, 30, 0, utc) // a Monday
	for _, c := range []struct {
		expr string
		next []string // the first firings after from, RFC 3339 in UTC
	}{
		{"* * * * *", []string{"2024-01-01T00:01:00Z", "2024-01-01T00:02:00Z"}},
		{"*/15 * * * *", []string{"2024-01-01T00:15:00Z", "2024-01-01T00:30:00Z"}},
		{"5/20 * * * *", []string{"2024-01-01T00:05:00Z", "2024-01-01T00:25:00Z", "2024-01-01T00:45:00Z", "2024-01-01T01:05:00Z"}},
		{"10-50/20 8 * * *", []string{"2024-01-01T08:10:00Z", "2024-01-01T08:30:00Z", "2024-01-01T08:50:00Z", "2024-01-02T08:10:00Z"}},
		{"0 9 * * MON-FRI", []string{"2024-01-01T09:00:00Z", "2024-01-02T09:00:00Z", "2024-01-03T09:00:00Z", "2024-01-04T09:00:00Z", "2024-01-05T09:00:00Z", "2024-01-08T09:00:00Z"}},
		{"0 9 * * 1-5", []string{"2024-01-01T09:00:00Z"}},
		{"0 0 * * sun,SAT", []string{"2024-01-06T00:00:00Z", "2024-01-07T00:00:00Z", "2024-01-13T00:00:00Z"}},
		{"0 0 * * 7", []string{"2024-01-07T00:00:00Z"}},
		{"30 18 1,15 * *", []string{"2024-01-01T18:30:00Z", "2024-01-15T18:30:00Z", "2024-02-01T18:30:00Z"}},
		{"0 0 1 jan-mar/2 *", []string{"2024-03-01T00:00:00Z", "2025-01-01T00:00:00Z"}},
		{"0 0 29 2 *", []string{"2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z"}},
		// Day of month and day of week both restricted: either matches.
		{"0 12 13 * FRI", []string{"2024-01-05T12:00:00Z", "2024-01-12T12:00:00Z", "2024-01-13T12:00:00Z", "2024-01-19T12:00:00Z"}},
		// One of them "*": both must (here the 13th only when a Friday).
		{"0 12 13 * *", []string{"2024-01-13T12:00:00Z"}},
		{"0 12 */2 * FRI", []string{"2024-01-05T12:00:00Z", "2024-01-19T12:00:00Z"}},
		{"@hourly", []string{"2024-01-01T01:00:00Z"}},
		{"@daily", []string{"2024-01-02T00:00:00Z"}},
		{"@weekly", []string{"2024-01-07T00:00:00Z"}},
		{"@monthly", []string{"2024-02-01T00:00:00Z"}},
		{"@YEARLY", []string{"2025-01-01T00:00:00Z"}},
		{"  0   6  * * *  ", []string{"2024-01-01T06:00:00Z"}},
	} {
		cr, err := ParseCron(c.expr, utc)
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		at := from
		for _, want := range c.next {
			at = cr.Next(at)
			if got := at.UTC().Format(time.RFC3339); got != want {
				t.Errorf("%q: next %s, want %s", c.expr, got, want)
				break
			}
		}
	}
	for _, c := range []struct{ expr, field string }{
		{"", "want 5 fields"},
		{"* * * *", "want 5 fields"},
		{"* * * * * *", "want 5 fields"},
		{"60 * * * *", "minute field"},
		{"* 24 * * *", "hour field"},
		{"* * 0 * *", "day of month field"},
		{"* * 32 * *", "day of month field"},
		{"* * * 13 *", "month field"},
		{"* * * FOO *", "month field"},
		{"* * * * 8", "day of week field"},
		{"* * * * MON-FOO", "day of week field"},
		{"*/0 * * * *", "minute field"},
		{"*/61 * * * *", "minute field"},
		{"5-1 * * * *", "start after end"},
		{"1,,2 * * * *", "empty item"},
		{"a * * * *", "not a number"},
		{"@every 5m", "want 5 fields"},
	} {
		_, err := ParseCron(c.expr, utc)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%q: error %v, want one naming %q", c.expr, err, c.field)
		}
	}
	if c, err := ParseCron("0 0 30 2 *", utc); err != nil || !c.Next(from).IsZero() {
		t.Errorf("February 30th: %v, next %v", err, c.Next(from))
	}
	if _, err := LoadCron("0 9 * * *", "Mars/Olympus"); err == nil || !strings.Contains(err.Error(), "time zone") {
		t.Errorf("a bad zone: %v", err)
	}
}

func TestCronTimeZones(t *testing.T) {
	// 09:00 in Berlin is 08:00 UTC in winter and 07:00 UTC in summer.
	c, err := LoadCron("0 9 * * MON-FRI", "Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct{ from, want string }{
		{"2024-01-01T00:00:00Z", "2024-01-01T08:00:00Z"},
		{"2024-07-01T00:00:00Z", "2024-07-01T07:00:00Z"},
		{"2024-07-05T08:00:00Z", "2024-07-08T07:00:00Z"}, // Friday after 09:00: Monday
	} {
		from, _ := time.Parse(time.RFC3339, x.from)
		if got := c.Next(from).UTC().Format(time.RFC3339); got != x.want {
			t.Errorf("Berlin from %s: %s, want %s", x.from, got, x.want)
		}
	}
	// A zone with a half-hour offset: Kolkata is UTC+05:30.
	c, _ = LoadCron("0 9 * * *", "Asia/Kolkata")
	if got := c.Next(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)).UTC().Format(time.RFC3339); got != "2024-01-01T03:30:00Z" {
		t.Errorf("Kolkata: %s", got)
	}
	// Empty zone is UTC.
	c, _ = LoadCron("0 9 * * *", "")
	if c.Location() != time.UTC {
		t.Error("empty zone is not UTC")
	}
}

// firings lists the minutes in [from, to) at which c fires, in UTC.
func firings(c *Cron, from, to time.Time) []string {
	var out []string
	for m := from; m.Before(to); m = m.Add(time.Minute) {
		if c.FiresAt(m) {
			out = append(out, m.UTC().Format("15:04"))
		}
	}
	return out
}

func TestCronDST(t *testing.T) {
	ny := mustZone(t, "America/New_York")
	// 2024-03-10: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
	day := time.Date(2024, 3, 10, 4, 0, 0, 0, time.UTC) // 23:00 EST the day before
	end := day.Add(6 * time.Hour)
	for _, c := range []struct {
		expr string
		want string // UTC minutes
	}{
		// Fixed time in the skipped hour: at 03:00 EDT.
		{"30 2 * * *", "07:00"},
		// Fixed time after the gap: at its time only.
		{"0 3 * * *", "07:00"},
		{"30 3 * * *", "07:30"},
		// Fixed time before it.
		{"30 1 * * *", "06:30"},
		// Interval: not in the skipped hour.
		{"*/30 * * * *", "04:00 04:30 05:00 05:30 06:00 06:30 07:00 07:30 08:00 08:30 09:00 09:30"},
		{"30 * * * *", "04:30 05:30 06:30 07:30 08:30 09:30"},
	} {
		cr, err := ParseCron(c.expr, ny)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(firings(cr, day, end), " "); got != c.want {
			t.Errorf("spring forward %q: %s, want %s", c.expr, got, c.want)
		}
	}
	// 2024-11-03: 02:00 EDT goes back to 01:00 EST; 01:00-01:59 happens
	// twice (05:00-05:59 and 06:00-06:59 UTC).
	day = time.Date(2024, 11, 3, 4, 0, 0, 0, time.UTC) // 00:00 EDT
	end = day.Add(5 * time.Hour)
	for _, c := range []struct{ expr, want string }{
		{"30 1 * * *", "05:30"}, // once
		{"0 2 * * *", "07:00"},
		{"30 * * * *", "04:30 05:30 06:30 07:30 08:30"}, // twice at 01:30
		{"*/30 1 * * *", "05:00 05:30 06:00 06:30"},     // interval
	} {
		cr, _ := ParseCron(c.expr, ny)
		if got := strings.Join(firings(cr, day, end), " "); got != c.want {
			t.Errorf("fall back %q: %s, want %s", c.expr, got, c.want)
		}
	}
	// Next agrees with FiresAt across the change.
	cr, _ := ParseCron("30 2 * * *", ny)
	if got := cr.Next(time.Date(2024, 3, 9, 12, 0, 0, 0, time.UTC)).UTC().Format(time.RFC3339); got != "2024-03-10T07:00:00Z" {
		t.Errorf("next over spring forward: %s", got)
	}
	cr, _ = ParseCron("30 1 * * *", ny)
	if got := cr.Next(time.Date(2024, 11, 3, 5, 30, 0, 0, time.UTC)).UTC().Format(time.RFC3339); got != "2024-11-04T06:30:00Z" {
		t.Errorf("next after the first 01:30 of fall back: %s", got)
	}
}

func TestCronFired(t *testing.T) {
	c, _ := ParseCron("0 9 * * *", time.UTC)
	at := time.Date(2024, 1, 1, 9, 0, 0, 0, time.UTC)
	for _, x := range []struct {
		prev, now time.Duration // from 09:00
		fired     bool
	}{
		{-5 * time.Second, 5 * time.Second, true},
		{-10 * time.Second, 0, true},              // (prev, now]: now included
		{0, 10 * time.Second, false},              // prev excluded
		{-time.Hour, -time.Second, false},         // before
		{time.Second, time.Minute, false},         // after
		{-48 * time.Hour, time.Hour, true},        // a long gap: within a day of now
		{-48 * time.Hour, -25 * time.Hour, false}, // nothing in range
		{-time.Minute - time.Second, -time.Minute + time.Second, false},
	} {
		got, ok := c.Fired(at.Add(x.prev), at.Add(x.now))
		if ok != x.fired || ok && !got.Equal(at) {
			t.Errorf("(%v, %v]: %v %v, want %v", x.prev, x.now, got, ok, x.fired)
		}
	}
	// Several firings in range: the latest.
	c, _ = ParseCron("*/10 * * * *", time.UTC)
	if got, ok := c.Fired(at, at.Add(35*time.Minute)); !ok || !got.Equal(at.Add(30*time.Minute)) {
		t.Errorf("latest of several: %v %v", got, ok)
	}
	// Every 10 seconds for a day: each firing is seen exactly once.
	c, _ = ParseCron("*/7 * * * *", mustZone(t, "Europe/Berlin"))
	n := 0
	prev := at.Add(-10 * time.Second)
	for now := at.Add(10 * time.Second); now.Before(at.Add(24 * time.Hour)); now = now.Add(10 * time.Second) {
		if _, ok := c.Fired(prev, now); ok {
			n++
		}
		prev = now
	}
	if want := 24 * 9; n != want { // 0,7,...,56: nine an hour
		t.Errorf("%d firings in a day, want %d", n, want)
	}
}
