package cli

import (
	"testing"
	"time"
)

// TestStamp: a detail view's time says how long ago it was, or how far
// off it is when it is to come (a job's expiry, a launch hold).
func TestStamp(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	old := clockNow
	clockNow = func() time.Time { return now }
	t.Cleanup(func() { clockNow = old })
	for _, c := range []struct {
		at   time.Time
		want string
	}{
		{time.Time{}, "-"},
		{now.Add(-90 * time.Second), "2026-12-06T11:58:30Z (1m ago)"},
		{now, "2026-12-06T12:00:00Z (0s ago)"},
		{now.Add(24 * time.Hour), "2026-12-07T12:00:00Z (in 24h)"},
		{now.Add(5 * time.Minute), "2026-12-06T12:05:00Z (in 5m)"},
		{now.Add(72 * time.Hour), "2026-12-09T12:00:00Z (in 3d)"},
	} {
		if got := stamp(c.at); got != c.want {
			t.Errorf("stamp(%v) = %q, want %q", c.at, got, c.want)
		}
	}
}
