package autoscale

import (
	"math"
	"testing"
	"time"
)

// TestForecastDayTypes: a load that is flat within each day, high on
// weekdays and low at the weekend, is forecast at its own day type's
// level across the change of day type: a Saturday from a Friday night, a
// Monday from a Sunday night.
func TestForecastDayTypes(t *testing.T) {
	load := func(t time.Time) float64 {
		if dayType(t) == 1 {
			return 40
		}
		return 100
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		name    string
		from    time.Time // the forecast is made from the minutes before
		at      time.Time
		want    float64
		atLeast bool
	}{
		{"friday night to saturday, two weeks", time.Date(2024, 1, 12, 23, 0, 0, 0, time.UTC), time.Date(2024, 1, 13, 6, 0, 0, 0, time.UTC), 40, false},
		{"sunday night to monday, two weeks", time.Date(2024, 1, 14, 23, 0, 0, 0, time.UTC), time.Date(2024, 1, 15, 6, 0, 0, 0, time.UTC), 100, false},
		{"friday to saturday, one week (no weekly profile yet)", time.Date(2024, 1, 5, 23, 0, 0, 0, time.UTC), time.Date(2024, 1, 6, 6, 0, 0, 0, time.UTC), 100, true},
		{"wednesday to thursday", time.Date(2024, 1, 10, 23, 0, 0, 0, time.UTC), time.Date(2024, 1, 11, 6, 0, 0, 0, time.UTC), 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newForecaster(time.Minute)
			for m := start; m.Before(tc.from); m = m.Add(time.Minute) {
				f.observe(m, load(m))
			}
			got := f.pointAt(tc.from, tc.at)
			switch {
			case tc.atLeast && got < tc.want-1:
				// Before the first weekend there is no weekend profile:
				// the weekday one stands in for it.
				t.Fatalf("forecast %.1f, want the weekday level %.0f before a weekend was seen", got, tc.want)
			case !tc.atLeast && math.Abs(got-tc.want) > 1:
				t.Fatalf("forecast %.1f, want %.0f", got, tc.want)
			}
		})
	}
}
