package cli

import (
	"reflect"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/money"
)

// articleArgs is the articles' example: $12/h, 12 h/day, 30 days, 25% off.
var articleArgs = []string{"cost", "estimate", "--price-per-hour", "12", "--hours-per-day", "12", "--days", "30", "--reserved-discount", "25"}

func TestCostEstimateTable(t *testing.T) {
	out := mustRun(t, articleArgs...)
	if got := tableRow(t, out, "PLAN"); !reflect.DeepEqual(got, []string{"PLAN", "TOTAL", "PER HOUR", "SAVINGS", "NOTE"}) {
		t.Errorf("header %q", got)
	}
	if got := tableRow(t, out, "on demand"); !reflect.DeepEqual(got[:4], []string{"on demand", "4,320.00", "12.00", "-"}) {
		t.Errorf("on demand row %q", got)
	}
	want := []string{"reserved 25% off", "3,240.00", "9.00", "25%", "held 24 h/day: 6480.00; breaks even at 75% utilisation"}
	if got := tableRow(t, out, "reserved 25% off"); !reflect.DeepEqual(got, want) {
		t.Errorf("reserved row %q, want %q", got, want)
	}
	if got := tableRow(t, out, "retainer"); !reflect.DeepEqual(got[:4], []string{"retainer", "3,888.00", "10.80", "10%"}) {
		t.Errorf("retainer row %q", got)
	}
	// Spot with the defaults: 60% off, 0.05 reclaims/h, 10m checkpoints,
	// 2m restarts: 362.1 h at 4.80, and not --interruptible.
	sp := tableRow(t, out, "spot")
	if !reflect.DeepEqual(sp[:4], []string{"spot", "1,738.08", "4.83", "59.77%"}) || !strings.HasPrefix(sp[4], "unsuitable:") {
		t.Errorf("spot row %q", sp)
	}
	for _, s := range []string{"1 instance at 12.00/h on demand, 12 h/day for 30 days: 360 instance-hours, 50% utilisation.", "Offline estimate; spot at 4.80/h."} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "1y") {
		t.Errorf("--reserved-discount should replace the built-in options:\n%s", out)
	}
}

func TestCostEstimateJSON(t *testing.T) {
	out := mustRun(t, append(articleArgs, "-o", "json", "--interruptible", "--reserved-discount", "12.5")...)
	var got struct {
		PriceSource     string `json:"price_source"`
		InstanceSeconds int64  `json:"instance_seconds"`
		SpotPrice       string `json:"spot_price"`
		Workload        struct {
			PricePerHour        string  `json:"price_per_hour"`
			SecondsPerDay       int64   `json:"seconds_per_day"`
			ReservedDiscountsBP []int64 `json:"reserved_discounts_bp"`
			ReclaimRateBP       int64   `json:"reclaim_rate_bp"`
		} `json:"workload"`
		Rows []struct {
			Plan        string `json:"plan"`
			Total       string `json:"total"`
			PerHour     string `json:"per_hour"`
			SavingsBP   int64  `json:"savings_bp"`
			HeldTotal   string `json:"held_total"`
			BreakEvenBP int64  `json:"break_even_bp"`
			Unsuitable  bool   `json:"unsuitable"`
		} `json:"rows"`
	}
	decodeJSON(t, out, &got)
	if got.PriceSource != "--price-per-hour" || got.InstanceSeconds != 1_296_000 || got.SpotPrice != "4.80" {
		t.Errorf("header %+v", got)
	}
	if w := got.Workload; w.PricePerHour != "12.00" || w.SecondsPerDay != 43200 || !reflect.DeepEqual(w.ReservedDiscountsBP, []int64{2500, 1250}) || w.ReclaimRateBP != 500 {
		t.Errorf("workload %+v", w)
	}
	type row = struct{ plan, total, perHour, held string }
	var rows []row
	for _, r := range got.Rows {
		rows = append(rows, row{r.Plan, r.Total, r.PerHour, r.HeldTotal})
	}
	want := []row{
		{"on demand", "4320.00", "12.00", ""},
		{"reserved 25% off", "3240.00", "9.00", "6480.00"},
		{"reserved 12.5% off", "3780.00", "10.50", "7560.00"},
		{"retainer", "3888.00", "10.80", "864.00"},
		{"spot", "1738.08", "4.828", ""},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows\n%+v\nwant\n%+v", rows, want)
	}
	if r := got.Rows[1]; r.SavingsBP != 2500 || r.BreakEvenBP != 7500 {
		t.Errorf("reserved %+v", r)
	}
	if got.Rows[4].Unsuitable {
		t.Error("spot unsuitable for an --interruptible workload")
	}
	// Exact money strings: the raw JSON has them quoted, never as floats.
	if !strings.Contains(out, `"total": "4320.00"`) || !strings.Contains(out, `"total": "3240.00"`) {
		t.Errorf("totals are not exact strings:\n%s", out)
	}

	var y map[string]any
	if err := yaml.Unmarshal([]byte(mustRun(t, append(articleArgs, "-o", "yaml")...)), &y); err != nil {
		t.Fatal(err)
	}
	if rows, _ := y["rows"].([]any); len(rows) != 4 || rows[1].(map[string]any)["total"] != "3240.00" {
		t.Errorf("yaml rows %v", y["rows"])
	}
}

func TestCostEstimateOffering(t *testing.T) {
	// h100.8x lists at 8 × 2.49 = 19.92/h; around the clock for 30 days.
	out := mustRun(t, "cost", "estimate", "--offering", "h100.8x", "--count", "2", "--spot-price", "7.5")
	if got := tableRow(t, out, "on demand"); got[1] != "28,684.80" || got[2] != "19.92" {
		t.Errorf("on demand row %q", got)
	}
	if got := tableRow(t, out, "reserved 3y all upfront"); got[1] != "12,908.16" || got[3] != "55%" ||
		got[4] != "breaks even at 45% utilisation; the term commits 1095 days" {
		t.Errorf("3y row %q", got)
	}
	for _, s := range []string{"2 h100.8x at 19.92/h on demand, 24 h/day for 30 days: 1440 instance-hours, 100% utilisation", "Offline estimate against the list price of h100.8x; spot at 7.50/h."} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if n := strings.Count(out, "reserved "); n != 6 {
		t.Errorf("%d reservation rows, want the 6 built-in options:\n%s", n, out)
	}
}

func TestCostEstimateSpotDiscountZero(t *testing.T) {
	out := mustRun(t, "cost", "estimate", "--price-per-hour", "10", "--days", "1", "--spot-discount", "0", "--reclaim-rate", "0")
	if got := tableRow(t, out, "spot"); got[1] != "240.00" || got[3] != "0%" {
		t.Errorf("spot row %q", got)
	}
}

func TestCostEstimateUsageErrors(t *testing.T) {
	base := []string{"cost", "estimate", "--price-per-hour", "12"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"cost", "estimate"}, []string{"give one of --offering and --price-per-hour"}},
		{[]string{"cost", "estimate", "--offering", "h100.8x", "--price-per-hour", "3"}, []string{"give one of --offering and --price-per-hour"}},
		{[]string{"cost", "estimate", "--offering", ""}, []string{"--offering"}},
		{[]string{"cost", "estimate", "--offering", "nope.1x"}, []string{"--offering", "nope.1x"}},
		{append(base, "--hours-per-day", "0"), []string{"--hours-per-day: must be more than 0"}},
		{append(base, "--hours-per-day", "-2"), []string{"--hours-per-day", "non-negative"}},
		{append(base, "--hours-per-day", "25"), []string{"--hours-per-day 25: must be at most 24"}},
		{append(base, "--hours-per-day", "0.0001"), []string{"whole number of seconds"}},
		{append(base, "--days", "0"), []string{"--days: must be 1..3653, got 0"}},
		{append(base, "--days", "-3", "--count", "0"), []string{"--days: must be 1..3653, got -3", "--count: must be 1..1000000, got 0"}},
		{append(base, "--reserved-discount", "101"), []string{"--reserved-discount: must be 0%..100%, got 101%"}},
		{append(base, "--reserved-discount", "12.345"), []string{"--reserved-discount", "at most 2 decimals"}},
		{append(base, "--reserved-discount", "abc"), []string{`--reserved-discount "abc"`}},
		{append(base, "--spot-discount", "150"), []string{"--spot-discount: must be 0%..100%"}},
		{append(base, "--spot-price", "4", "--spot-discount", "50"), []string{"give --spot-price or --spot-discount, not both"}},
		{append(base, "--spot-price", "0"), []string{"--spot-price must be more than 0"}},
		{append(base, "--retainer-fee", "0"), []string{"--retainer-fee must be more than 0"}},
		{append(base, "--reclaim-rate", "0.00001"), []string{"--reclaim-rate", "at most 4 decimals"}},
		{append(base, "--reclaim-rate", "2"), []string{"--reclaim-rate: must be 0..1 per hour, got 2"}},
		{append(base, "--checkpoint-interval", "1500ms"), []string{"--checkpoint-interval 1.5s: not a whole number of seconds"}},
		{[]string{"cost", "estimate", "--price-per-hour", "-1"}, []string{"--price-per-hour"}},
		{[]string{"cost", "estimate", "--price-per-hour", "0"}, []string{"--price-per-hour: must be more than 0"}},
		{append(base, "-o", "xml"), []string{`--output "xml"`}},
		{append(base, "stray"), []string{"no arguments"}},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, code, ExitUsage, errOut)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, "--help' for usage.") {
			t.Errorf("%v: stderr %q lacks the error and hint", tc.args, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, w)
			}
		}
		if out != "" {
			t.Errorf("%v: stdout %q", tc.args, out)
		}
	}
}

func TestCostEstimateHelp(t *testing.T) {
	out := mustRun(t, "cost", "estimate", "--help")
	for _, s := range []string{"runs offline", "list", "--offering", "--price-per-hour", "--hours-per-day", "--days", "--count",
		"--interruptible", "--checkpoint-interval", "--restart-overhead", "--reclaim-rate", "--spot-price", "--spot-discount",
		"--reserved-discount", "--retainer-fee", "--retainer-discount", "--output"} {
		if !strings.Contains(out, s) {
			t.Errorf("help lacks %q", s)
		}
	}
	if out := mustRun(t, "--help"); !strings.Contains(out, "cost") {
		t.Errorf("root help lacks cost:\n%s", out)
	}
}

func TestCostThousands(t *testing.T) {
	for in, want := range map[string]string{"0": "0.00", "999.999": "1,000.00", "4320": "4,320.00", "1234567.891": "1,234,567.89", "-4320.5": "-4,320.50", "12": "12.00"} {
		if got := costThousands(money.MustParse(in)); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
