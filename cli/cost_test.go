package cli

import (
	"context"
	"net"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cliconfig"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/testkit"
)

// bareAmount matches an amount printed without its currency sign: two
// decimals not after "$", and not a percentage.
var bareAmount = regexp.MustCompile(`(^|[^$\d,.])(\d{1,3}(,\d{3})+|\d+)\.\d{2}([^\d%]|$)`)

// articleArgs is the articles' example: $12/h, 12 h/day, 30 days, 25% off.
var articleArgs = []string{"cost", "estimate", "--price-per-hour", "12", "--hours-per-day", "12", "--days", "30", "--reserved-discount", "25"}

func TestCostEstimateTable(t *testing.T) {
	out := mustRun(t, articleArgs...)
	if got := tableRow(t, out, "PLAN"); !reflect.DeepEqual(got, []string{"PLAN", "TOTAL", "BILLED", "PER USED HOUR", "SAVINGS", "NOTE"}) {
		t.Errorf("header %q", got)
	}
	// Every row's total is what its BILLED column says, in one money
	// format; a reservation held for 12 h/day of use has two rows, each
	// saying what it assumes, instead of one total and a note that
	// contradicts it.
	for _, want := range [][]string{
		{"on demand", "$4,320.00", "360 h × $12.0000/h", "$12.0000", "-", "-"},
		{"reserved 25% off (24 h/day)", "$6,480.00", "720 h × $9.0000/h", "$18.0000", "-50%", "a reservation bills every hour; breaks even at 75% utilisation"},
		{"reserved 25% off (used hours)", "$3,240.00", "360 h × $9.0000/h", "$9.0000", "25%", "only if other work uses the 360 reserved hours this workload leaves idle"},
		{"retainer", "$3,888.00", "720 h × $1.2000/h + 360 h × $8.4000/h", "$10.8000", "10%", "a fee of 10% of on demand every hour, usage 30% off; breaks even at 33.34% utilisation"},
	} {
		if got := tableRow(t, out, want[0]); !reflect.DeepEqual(got, want) {
			t.Errorf("row\n got %q\nwant %q", got, want)
		}
	}
	// Spot with the defaults: 60% off, 0.05 reclaims/h, 10m checkpoints,
	// 2m restarts: 362.1 h at 4.80, and not --interruptible.
	sp := tableRow(t, out, "spot")
	if !reflect.DeepEqual(sp[:5], []string{"spot", "$1,738.08", "362.1 h × $4.8000/h", "$4.8280", "59.77%"}) ||
		!strings.HasPrefix(sp[5], "unsuitable:") || !strings.HasSuffix(sp[5], "18 expected reclaims add 2.1 h of lost work and restarts") {
		t.Errorf("spot row %q", sp)
	}
	for _, s := range []string{"1 instance at $12.0000/h on demand, 12 h/day for 30 days: 360 of 720 instance-hours used (50% utilisation).", "Offline estimate; spot at $4.8000/h."} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "1y") {
		t.Errorf("--reserved-discount should replace the built-in options:\n%s", out)
	}
	// One money format: no amount without its currency sign.
	if bare := bareAmount.FindString(out); bare != "" {
		t.Errorf("output has an amount without its currency sign, %q:\n%s", bare, out)
	}
}

// TestCostRowsAroundTheClock: used around the clock, a reservation's used
// hours are its held hours, so it has one row.
func TestCostRowsAroundTheClock(t *testing.T) {
	out := mustRun(t, "cost", "estimate", "--price-per-hour", "2", "--days", "10", "--reserved-discount", "40")
	if got := tableRow(t, out, "reserved 40% off"); !reflect.DeepEqual(got, []string{"reserved 40% off", "$288.00", "240 h × $1.2000/h", "$1.2000", "40%", "breaks even at 60% utilisation"}) {
		t.Errorf("reservation row %q", got)
	}
	if strings.Contains(out, "(24 h/day)") || strings.Contains(out, "(used hours)") {
		t.Errorf("one reservation row expected at 100%% utilisation:\n%s", out)
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
	if got := tableRow(t, out, "on demand"); got[1] != "$28,684.80" || got[2] != "1440 h × $19.9200/h" || got[3] != "$19.9200" {
		t.Errorf("on demand row %q", got)
	}
	if got := tableRow(t, out, "reserved 3y all upfront"); got[1] != "$12,908.16" || got[4] != "55%" ||
		got[5] != "breaks even at 45% utilisation; the term commits 1095 days" {
		t.Errorf("3y row %q", got)
	}
	for _, s := range []string{"2 h100.8x at $19.9200/h on demand, 24 h/day for 30 days: 1440 of 1440 instance-hours used (100% utilisation)", "Offline estimate against the list price of h100.8x; spot at $7.5000/h."} {
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
	if got := tableRow(t, out, "spot"); got[1] != "$240.00" || got[4] != "0%" {
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

// newCostEnv is a billing server whose price book has l4.1x at 1.00/h in
// every zone and 1.20/h in zone-b; pool l4.1x/zone-a at 0.35/h with 100
// spot instance-hours and 3 reclaims in the last week (0.03 an hour), pool
// l4.1x/zone-b at 0.50/h without spot usage; zone-c has no pool. It
// returns the env, a member's token and the clock.
func newCostEnv(t *testing.T) (*cloudEnv, string, *testkit.Clock) {
	t.Helper()
	e := newCloudEnv(t)
	clk := e.clock
	tenant, tok := e.member("acme", "alice")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--amount", "1.00")
	e.ok(e.admin, "prices", "set", "--offering", "l4.1x", "--zone", "zone-b", "--amount", "1.20")
	ctx := context.Background()
	now := clk.Now()
	err := e.st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.AppendSpotPrices(ctx, []cloud.SpotPrice{
			{Pool: cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}, Time: now.Add(-time.Hour), Price: money.MustParse("0.35")},
			{Pool: cloud.Pool{Offering: "l4.1x", Zone: "zone-b"}, Time: now.Add(-time.Hour), Price: money.MustParse("0.50")},
		}); err != nil {
			return err
		}
		return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-spot", TenantID: tenant, Name: "spot", Offering: "l4.1x",
			Market: cloud.MarketSpot, State: cloud.Pending, CreatedAt: now.Add(-200 * time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Walk(t, e.st, "i-spot", cloud.Running, testkit.Via{Zone: "zone-a"}, now.Add(-100*time.Hour))
	err = e.st.Tx(ctx, func(tx cloud.Tx) error {
		for _, ago := range []time.Duration{90, 50, 2, 300} { // the last is before the week
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now.Add(-ago * time.Hour), Kind: cloud.EventSpotInterruption,
				TenantID: tenant, InstanceID: "i-spot", Reason: "test"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return e, tok, clk
}

// costLines returns the two lines above the table of cost estimate.
func costLines(t *testing.T, out string) string {
	t.Helper()
	head, _, ok := strings.Cut(out, "\n\n")
	if !ok {
		t.Fatalf("no blank line before the table:\n%s", out)
	}
	return head
}

func TestCostEstimateLive(t *testing.T) {
	e, tok, _ := newCostEnv(t)
	live := []string{"cost", "estimate", "--offering", "l4.1x", "--zone", "zone-a", "--interruptible"}

	// The on-demand price in force, the pool's spot price and its reclaim
	// rate: 720 h at 1.00; spot 720 h × 0.03 = 21.6 reclaims × (5 + 2) min
	// = 2.52 h more, at 0.35: 252.88.
	out := e.ok(tok, live...)
	want := "Live from " + e.url + ", pool l4.1x/zone-a: on-demand $1.0000/h, spot $0.3500/h, 0.03 reclaims per instance-hour over 7 days."
	if head := costLines(t, out); !strings.Contains(head, want) || strings.Contains(head, "ffline") ||
		!strings.HasPrefix(head, "1 l4.1x at $1.0000/h on demand, 24 h/day for 30 days") {
		t.Errorf("header:\n%s\nwant the line %q", head, want)
	}
	if got := tableRow(t, out, "on demand"); got[1] != "$720.00" {
		t.Errorf("on demand row %q", got)
	}
	if got := tableRow(t, out, "spot"); got[1] != "$252.88" || !strings.Contains(got[5], "21.6 expected reclaims") {
		t.Errorf("spot row %q", got)
	}

	var js struct {
		PriceSource string `json:"price_source"`
		Zone        string `json:"zone"`
		SpotPrice   string `json:"spot_price"`
		Sources     struct {
			Live          bool   `json:"live"`
			Server        string `json:"server"`
			Pool          string `json:"pool"`
			WindowSeconds int64  `json:"window_seconds"`
			OnDemand      string `json:"on_demand"`
			Spot          string `json:"spot"`
			ReclaimRate   string `json:"reclaim_rate"`
		} `json:"sources"`
		Workload struct {
			PricePerHour  string `json:"price_per_hour"`
			ReclaimRateBP int64  `json:"reclaim_rate_bp"`
		} `json:"workload"`
	}
	decodeJSON(t, e.ok(tok, append(live, "-o", "json")...), &js)
	s := js.Sources
	if js.PriceSource != "live from "+e.url || js.Zone != "zone-a" || js.SpotPrice != "0.35" || !s.Live || s.Server != e.url ||
		s.Pool != "l4.1x/zone-a" || s.WindowSeconds != 7*86400 || s.OnDemand != "live" || s.Spot != "live" || s.ReclaimRate != "live" ||
		js.Workload.PricePerHour != "1.00" || js.Workload.ReclaimRateBP != 300 {
		t.Errorf("json %+v", js)
	}

	// A zone with its own price, and a pool without spot usage keeps the
	// --reclaim-rate default; a zone without a pool keeps the spot
	// discount's default too.
	out = e.ok(tok, "cost", "estimate", "--offering", "l4.1x", "--zone", "zone-b")
	want = "Live from " + e.url + ", pool l4.1x/zone-b: on-demand $1.2000/h, spot $0.5000/h, 0.05 reclaims per instance-hour" +
		" (the --reclaim-rate default: no spot usage in the pool over 7 days)."
	if head := costLines(t, out); !strings.Contains(head, want) {
		t.Errorf("zone-b header:\n%s\nwant %q", head, want)
	}
	out = e.ok(tok, "cost", "estimate", "--offering", "l4.1x", "--zone", "zone-c")
	want = "Live from " + e.url + ", pool l4.1x/zone-c: on-demand $1.0000/h, spot $0.4000/h (the --spot-discount default: the pool has no spot price yet)," +
		" 0.05 reclaims per instance-hour (the --reclaim-rate default: no spot usage in the pool over 7 days)."
	if head := costLines(t, out); !strings.Contains(head, want) {
		t.Errorf("zone-c header:\n%s\nwant %q", head, want)
	}

	// Explicit flags win over the live numbers.
	out = e.ok(tok, append(live, "--spot-price", "0.30", "--reclaim-rate", "0.2")...)
	want = "on-demand $1.0000/h, spot $0.3000/h (--spot-price), 0.2 reclaims per instance-hour (--reclaim-rate)."
	if head := costLines(t, out); !strings.Contains(head, want) {
		t.Errorf("explicit flags:\n%s\nwant %q", head, want)
	}
	out = e.ok(tok, append(live, "--spot-discount", "50")...)
	want = "on-demand $1.0000/h, spot $0.5000/h (--spot-discount), 0.03 reclaims per instance-hour over 7 days."
	if head := costLines(t, out); !strings.Contains(head, want) {
		t.Errorf("--spot-discount:\n%s\nwant %q", head, want)
	}
	if got := tableRow(t, out, "spot"); !strings.HasSuffix(got[2], " × $0.5000/h") {
		t.Errorf("spot row with --spot-discount 50 %q", got)
	}

	// The server's settings may come from the environment or the config
	// file, as for every other command.
	t.Setenv(cliconfig.EnvServer, e.url)
	t.Setenv(cliconfig.EnvToken, tok)
	if out := mustRun(t, live...); !strings.Contains(out, "Live from "+e.url) {
		t.Errorf("from the environment:\n%s", out)
	}
}

func TestCostEstimateOfflineFallback(t *testing.T) {
	e, tok, _ := newCostEnv(t)
	args := []string{"cost", "estimate", "--offering", "l4.1x", "--zone", "zone-a"}
	// l4.1x lists at 0.49/h.
	offline := "Offline estimate against the list price of l4.1x; spot at $0.1960/h."
	check := func(desc, out, reason string) {
		t.Helper()
		head := costLines(t, out)
		if !strings.Contains(head, "1 l4.1x at $0.4900/h on demand") || !strings.Contains(head, offline) ||
			strings.Contains(head, "Live") || !strings.Contains(head, reason) {
			t.Errorf("%s:\n%s\nwant offline, saying %q", desc, head, reason)
		}
	}

	check("--offline", e.ok(tok, append(args, "--offline")...), "Offline: list prices (--offline).")

	// No server configured: newBillingEnv clears the environment and
	// points the config file at a path that does not exist.
	out := mustRun(t, args...)
	check("no server", out, "Offline: list prices (no gpucloud server configured).")

	// A server that does not answer.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + l.Addr().String()
	l.Close()
	out = mustRun(t, append([]string{"--server", dead, "--token", tok}, args...)...)
	check("unreachable", out, "cannot reach the gpucloud server at "+dead)

	// A token the server refuses.
	code, out, errOut := e.as("gpc_tk-0_bad", args...)
	if code != 0 || errOut != "" {
		t.Fatalf("bad token: exit %d, stderr %q", code, errOut)
	}
	check("bad token", out, "unauthenticated")

	// Without --zone, no server is asked and nothing is said about it.
	out = e.ok(tok, "cost", "estimate", "--offering", "l4.1x")
	if head := costLines(t, out); !strings.Contains(head, offline) || strings.Contains(head, "Offline:") {
		t.Errorf("without --zone:\n%s", head)
	}
	var js struct {
		PriceSource string `json:"price_source"`
		Sources     struct {
			Live          bool   `json:"live"`
			OnDemand      string `json:"on_demand"`
			Spot          string `json:"spot"`
			ReclaimRate   string `json:"reclaim_rate"`
			OfflineReason string `json:"offline_reason"`
		} `json:"sources"`
	}
	decodeJSON(t, e.ok(tok, append(args, "--offline", "-o", "json")...), &js)
	if s := js.Sources; js.PriceSource != "list price of l4.1x" || s.Live || s.OnDemand != "list price" ||
		s.Spot != "the --spot-discount default" || s.ReclaimRate != "the --reclaim-rate default" || s.OfflineReason != "--offline" {
		t.Errorf("offline json %+v", js)
	}

	e.usage(tok, "--zone needs --offering", "cost", "estimate", "--price-per-hour", "2", "--zone", "zone-a")
	e.usage(tok, "--zone must not be empty", "cost", "estimate", "--offering", "l4.1x", "--zone", " ")
	// Flags are checked before any server is asked.
	e.usage(tok, "--hours-per-day", "cost", "estimate", "--offering", "l4.1x", "--zone", "zone-a", "--hours-per-day", "25")
}

func TestSpotPoolsReclaimColumn(t *testing.T) {
	e, tok, _ := newCostEnv(t)
	out := e.ok(tok, "spot", "pools")
	if got := tableRow(t, out, "POOL"); !reflect.DeepEqual(got, []string{"POOL", "SPOT", "ON-DEMAND", "SAVING", "RECLAIMS/H", "SINCE"}) {
		t.Errorf("header %q", got)
	}
	if got := tableRow(t, out, "l4.1x/zone-a"); got[1] != "$0.3500/h" || got[2] != "$1.0000/h" || got[3] != "65%" || got[4] != "0.03" {
		t.Errorf("zone-a row %q", got)
	}
	if got := tableRow(t, out, "l4.1x/zone-b"); got[2] != "$1.2000/h" || got[4] != "-" {
		t.Errorf("zone-b row %q", got)
	}
	// Over two days: one reclaim in 48 spot instance-hours.
	var pools []api.SpotPool
	decodeJSON(t, e.ok(tok, "spot", "pools", "--window", "48h", "-o", "json"), &pools)
	if len(pools) != 2 || pools[0].Reclaims != 1 || pools[0].SpotSeconds != 48*3600 || pools[0].ReclaimRateBP != 208 ||
		pools[0].WindowSeconds != 48*3600 {
		t.Errorf("pools over 48h %+v", pools)
	}
	for _, w := range []string{"0s", "721h", "1500ms"} {
		e.usage(tok, "--window", "spot", "pools", "--window", w)
	}
}

func TestReclaimsPerHour(t *testing.T) {
	for bp, want := range map[int64]string{0: "0", 1: "0.0001", 310: "0.031", 500: "0.05", 10_000: "1", 13_333: "1.3333", 20_000: "2"} {
		if got := reclaimsPerHour(bp); got != want {
			t.Errorf("reclaimsPerHour(%d) = %q, want %q", bp, got, want)
		}
	}
	for s, want := range map[int64]string{7 * 86400: "7 days", 86400: "1 day", 36 * 3600: "36 hours", 3600: "1 hour", 90: "1m30s"} {
		if got := costWindow(s); got != want {
			t.Errorf("costWindow(%d) = %q, want %q", s, got, want)
		}
	}
}
