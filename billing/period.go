package billing

import (
	"fmt"
	"time"
)

// Period is a billing period [Start, End) in UTC, a calendar month.
type Period struct{ Start, End time.Time }

// Month is the period of calendar month m of year in UTC.
func Month(year int, m time.Month) Period {
	start := time.Date(year, m, 1, 0, 0, 0, 0, time.UTC)
	return Period{Start: start, End: start.AddDate(0, 1, 0)}
}

// ParseMonth reads a month in the form "2026-12".
func ParseMonth(s string) (Period, error) {
	bad := func(why string) (Period, error) {
		return Period{}, fmt.Errorf("billing: month %q: %s (want YYYY-MM, e.g. 2026-12)", s, why)
	}
	if len(s) != 7 || s[4] != '-' {
		return bad("not in the form YYYY-MM")
	}
	year, month := 0, 0
	for i, c := range s {
		if i == 4 {
			continue
		}
		if c < '0' || c > '9' {
			return bad("not in the form YYYY-MM")
		}
		if i < 4 {
			year = year*10 + int(c-'0')
		} else {
			month = month*10 + int(c-'0')
		}
	}
	if year < 1970 {
		return bad("year before 1970")
	}
	if month < 1 || month > 12 {
		return bad("month out of range 01..12")
	}
	return Month(year, time.Month(month)), nil
}

// Name is the period's month as "2026-12".
func (p Period) Name() string { return p.Start.UTC().Format("2006-01") }
