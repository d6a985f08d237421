package billing

import (
	"strings"
	"testing"
	"time"
)

func TestMonthAndParseMonth(t *testing.T) {
	p := Month(2026, time.December)
	if !p.Start.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !p.End.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("Month(2026, 12) = %v", p)
	}
	if p.Name() != "2026-12" {
		t.Errorf("Name = %q", p.Name())
	}
	if feb := Month(2028, time.February); feb.End.Sub(feb.Start) != 29*24*time.Hour {
		t.Errorf("February 2028 is %s long", feb.End.Sub(feb.Start))
	}
	got, err := ParseMonth("2026-12")
	if err != nil || got != p {
		t.Errorf("ParseMonth(2026-12) = %v, %v", got, err)
	}
	if got, err := ParseMonth("2027-01"); err != nil || got.Name() != "2027-01" {
		t.Errorf("ParseMonth(2027-01) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "2026", "2026-1", "2026-13", "2026-00", "26-12", "2026/12", "2026-12-01", " 2026-12", "abcd-12", "2026-1a", "1969-12", "+026-12"} {
		_, err := ParseMonth(bad)
		if err == nil {
			t.Errorf("ParseMonth(%q) accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), "YYYY-MM") || !strings.Contains(err.Error(), bad) {
			t.Errorf("ParseMonth(%q): unclear error %q", bad, err)
		}
	}
}
