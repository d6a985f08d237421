package estimate

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/money"
)

// article is the articles' example: $12/h, 12 h/day, 30 days.
func article() Workload {
	return Workload{PricePerHour: money.MustParse("12"), SecondsPerDay: 12 * 3600, Days: 30, Count: 1}
}

func row(t *testing.T, c *Comparison, plan string) Row {
	t.Helper()
	for _, r := range c.Rows {
		if r.Plan == plan {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", plan, c.Rows)
	return Row{}
}

func TestArticleExample(t *testing.T) {
	w := article()
	w.ReservedDiscountsBP = []int64{2500}
	c, err := Compare(w)
	if err != nil {
		t.Fatal(err)
	}
	if c.InstanceSeconds != 360*3600 || c.UtilisationBP != 5000 {
		t.Errorf("usage %d s, utilisation %d bp", c.InstanceSeconds, c.UtilisationBP)
	}
	var plans []string
	for _, r := range c.Rows {
		plans = append(plans, r.Plan)
	}
	if got := strings.Join(plans, ", "); got != "on demand, reserved 25% off, retainer, spot" {
		t.Errorf("plans %s", got)
	}
	od := row(t, c, "on demand")
	if od.Total.Cents() != "4320.00" || od.Total != money.MustParse("4320") || od.PerHour != money.MustParse("12") || od.SavingsBP != 0 {
		t.Errorf("on demand %+v", od)
	}
	r := row(t, c, "reserved 25% off")
	if r.Total.Cents() != "3240.00" || r.Total != money.MustParse("3240") || r.PerHour != money.MustParse("9") || r.SavingsBP != 2500 {
		t.Errorf("reserved %+v", r)
	}
	if r.HeldTotal != money.MustParse("6480") || r.HeldSavingsBP != -5000 || r.BreakEvenBP != 7500 || r.Kind != KindReservation {
		t.Errorf("reserved held %+v", r)
	}
	if want := "total counts the used hours only; held 24 h/day, as a commitment is billed: $6,480.00; breaks even at 75% utilisation"; r.Note != want {
		t.Errorf("note %q, want %q", r.Note, want)
	}
	// Retainer: 10% of $12 for 720 h = $864, plus 360 h at $8.40 = $3,024.
	ret := row(t, c, "retainer")
	if ret.Total != money.MustParse("3888") || ret.HeldTotal != money.MustParse("864") || ret.SavingsBP != 1000 ||
		ret.PerHour != money.MustParse("10.80") || ret.BreakEvenBP != 3334 {
		t.Errorf("retainer %+v", ret)
	}
	// Spot at the default 60% off, no reclaims: 360 h at $4.80.
	sp := row(t, c, "spot")
	if sp.Total != money.MustParse("1728") || c.SpotPrice != money.MustParse("4.80") || sp.SavingsBP != 6000 || !sp.Unsuitable || sp.DiscountBP != 6000 {
		t.Errorf("spot %+v", sp)
	}
	if !strings.HasPrefix(sp.Note, "unsuitable: ") {
		t.Errorf("spot note %q", sp.Note)
	}
	if c.Workload.RetainerFeeBP != 1000 || c.Workload.RetainerDiscountBP != 3000 || c.Workload.SpotDiscountBP != 6000 {
		t.Errorf("defaults not filled in: %+v", c.Workload)
	}
}

func TestDefaultReservationOptions(t *testing.T) {
	c, err := Compare(article())
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		plan  string
		total string
		held  string
	}{
		{"reserved 1y no upfront", "3240.00", "6480.00"},
		{"reserved 1y partial upfront", "3024.00", "6048.00"},
		{"reserved 1y all upfront", "2808.00", "5616.00"},
		{"reserved 3y no upfront", "2376.00", "4752.00"},
		{"reserved 3y partial upfront", "2160.00", "4320.00"},
		{"reserved 3y all upfront", "1944.00", "3888.00"},
	}
	if len(c.Rows) != 1+len(want)+2 {
		t.Fatalf("%d rows", len(c.Rows))
	}
	for i, w := range want {
		r := c.Rows[1+i]
		if r.Plan != w.plan || r.Total.Cents() != w.total || r.HeldTotal.Cents() != w.held {
			t.Errorf("row %d: %s %s held %s, want %+v", i+1, r.Plan, r.Total.Cents(), r.HeldTotal.Cents(), w)
		}
		if !strings.Contains(r.Note, "the term commits") {
			t.Errorf("%s: note %q does not mention the term", r.Plan, r.Note)
		}
	}
	if r := row(t, c, "reserved 3y all upfront"); r.BreakEvenBP != 4500 || r.TermDays != 1095 {
		t.Errorf("3y all upfront %+v", r)
	}
}

func TestSpotOverhead(t *testing.T) {
	w := article()
	w.InterruptionTolerant = true
	w.ReclaimRateBP = 500             // 0.05 reclaims per hour
	w.CheckpointIntervalSeconds = 600 // 10 min: 5 min lost per reclaim
	w.RestartOverheadSeconds = 120    // 2 min
	c, err := Compare(w)
	if err != nil {
		t.Fatal(err)
	}
	// 360 h × 0.05 = 18 reclaims × 7 min = 126 min = 2.1 h more, at $4.80.
	sp := row(t, c, "spot")
	if sp.ExpectedReclaimsMilli != 18_000 || sp.OverheadSeconds != 7560 {
		t.Errorf("reclaims %d milli, overhead %d s", sp.ExpectedReclaimsMilli, sp.OverheadSeconds)
	}
	if sp.Total != money.MustParse("1738.08") || sp.Unsuitable {
		t.Errorf("spot %+v", sp)
	}
	if sp.SavingsBP != 5977 { // 1 − 1738.08/4320 = 59.77%
		t.Errorf("savings %d bp", sp.SavingsBP)
	}
	if want := "at $4.8000/h; 18 expected reclaims cost 2.1 h more"; sp.Note != want {
		t.Errorf("note %q, want %q", sp.Note, want)
	}
	if sp.PerHour != money.MustParse("4.828") { // 1738.08 / 360
		t.Errorf("per hour %s", sp.PerHour)
	}

	// An explicit spot price; fractional reclaims round once.
	w.SpotPrice = money.MustParse("5")
	w.Count = 3
	w.ReclaimRateBP = 7 // 0.0007/h: 1080 h × 0.0007 = 0.756 reclaims
	c, err = Compare(w)
	if err != nil {
		t.Fatal(err)
	}
	sp = row(t, c, "spot")
	// 0.756 × (300 + 120) s = 317.52 s → 318 s; 1080 h + 318 s at $5.
	if sp.ExpectedReclaimsMilli != 756 || sp.OverheadSeconds != 318 || sp.Total != money.MustParse("5400.441667") || sp.DiscountBP != 0 {
		t.Errorf("spot %+v", sp)
	}
}

func TestRetainerNeverCheaper(t *testing.T) {
	w := article()
	w.RetainerFeeBP, w.RetainerDiscountBP = 3000, 3000
	c, err := Compare(w)
	if err != nil {
		t.Fatal(err)
	}
	if r := row(t, c, "retainer"); r.BreakEvenBP != 0 || !strings.Contains(r.Note, "never cheaper") || r.SavingsBP >= 0 {
		t.Errorf("retainer %+v", r)
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Workload)
		want string
	}{
		{"zero hours", func(w *Workload) { w.SecondsPerDay = 0 }, "hours per day: must be more than 0"},
		{"negative hours", func(w *Workload) { w.SecondsPerDay = -3600 }, "hours per day: must be more than 0"},
		{"over 24 h/day", func(w *Workload) { w.SecondsPerDay = 25 * 3600 }, "hours per day: must be at most 24, got 25"},
		{"zero days", func(w *Workload) { w.Days = 0 }, "days: must be 1..3653, got 0"},
		{"negative days", func(w *Workload) { w.Days = -1 }, "days: must be 1..3653, got -1"},
		{"zero count", func(w *Workload) { w.Count = 0 }, "count: must be 1..1000000, got 0"},
		{"negative count", func(w *Workload) { w.Count = -2 }, "count: must be 1..1000000"},
		{"no price", func(w *Workload) { w.PricePerHour = 0 }, "price per hour: must be more than 0"},
		{"reserved discount over 100%", func(w *Workload) { w.ReservedDiscountsBP = []int64{2500, 10_001} }, "reserved discount: must be 0%..100%, got 100.01%"},
		{"spot discount over 100%", func(w *Workload) { w.SpotDiscountBP = 12_000 }, "spot discount: must be 0%..100%, got 120%"},
		{"retainer discount negative", func(w *Workload) { w.RetainerDiscountBP = -1 }, "retainer discount: must be 0%..100%, got -0.01%"},
		{"retainer fee over 100%", func(w *Workload) { w.RetainerFeeBP = 10_001 }, "retainer fee"},
		{"negative checkpoint", func(w *Workload) { w.CheckpointIntervalSeconds = -1 }, "checkpoint interval"},
		{"negative restart", func(w *Workload) { w.RestartOverheadSeconds = -1 }, "restart overhead"},
		{"reclaim rate", func(w *Workload) { w.ReclaimRateBP = 10_001 }, "reclaim rate: must be 0..1 per hour, got 1.0001"},
		{"negative spot price", func(w *Workload) { w.SpotPrice = -1 }, "spot price"},
	} {
		w := article()
		tc.edit(&w)
		_, err := Compare(w)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%s: %T is not a *FieldError", tc.name, err)
		}
	}
	// Every problem at once.
	err := (&Workload{}).Validate()
	for _, f := range []string{"price per hour", "hours per day", "days", "count"} {
		if err == nil || !strings.Contains(err.Error(), f+":") {
			t.Errorf("zero workload: error %v lacks %q", err, f)
		}
	}
	// The limits.
	w := article()
	w.SecondsPerDay, w.Days, w.Count = 86400, MaxDays, MaxCount
	w.ReservedDiscountsBP = []int64{0, 10_000}
	w.ReclaimRateBP, w.CheckpointIntervalSeconds, w.RestartOverheadSeconds = MaxReclaimRateBP, 600, 120
	w.InterruptionTolerant = true
	c, err := Compare(w)
	if err != nil {
		t.Fatalf("at the limits: %v", err)
	}
	// Hourly reclaims that each cost three weeks of work: the overhead is
	// 252 × the usage.
	w2 := article()
	w2.ReclaimRateBP, w2.CheckpointIntervalSeconds, w2.RestartOverheadSeconds = MaxReclaimRateBP, MaxDurationSeconds, MaxDurationSeconds
	c2, err := Compare(w2)
	if err != nil {
		t.Fatalf("longest durations: %v", err)
	}
	if r := row(t, c2, "spot"); r.OverheadSeconds != 360*3600*252 || r.ExpectedReclaimsMilli != 360_000 {
		t.Errorf("spot %+v", r)
	}
	// At the limits of everything the amounts overflow: an error, not a
	// wrong number.
	w.CheckpointIntervalSeconds, w.RestartOverheadSeconds = MaxDurationSeconds, MaxDurationSeconds
	if _, err := Compare(w); !errors.Is(err, money.ErrOverflow) {
		t.Errorf("error %v, want overflow", err)
	}
	if r := row(t, c, "reserved 100% off"); r.Total != 0 || r.SavingsBP != 10_000 {
		t.Errorf("free reservation %+v", r)
	}
	if r := row(t, c, "reserved 0% off"); r.Total != row(t, c, "on demand").Total {
		t.Errorf("0%% reservation %+v", r)
	}
}

func TestOverflowIsAnError(t *testing.T) {
	w := article()
	w.PricePerHour = money.Micros(1 << 62)
	if _, err := Compare(w); !errors.Is(err, money.ErrOverflow) {
		t.Errorf("error %v, want overflow", err)
	}
}

func TestFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Percent(2500), "25%"}, {Percent(1250), "12.5%"}, {Percent(7), "0.07%"}, {Percent(-1), "-0.01%"},
		{Hours(7560), "2.1"}, {Hours(43200), "12"}, {Hours(1), "0.0002"}, {Hours(0), "0"},
		{rate(500), "0.05"}, {milli(1500), "1.5"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
