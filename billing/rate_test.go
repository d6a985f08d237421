package billing

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

const od = cloud.MarketOnDemand

// The articles' example: an H100 node at $12/h, 12 hours a day for 30
// days, is $4,320.00 on demand; with a 25% discount on the hours used
// (covered at $9, no hourly fee) it is $3,240.00.
func TestRateArticleExample(t *testing.T) {
	nov := Month(2026, time.November)
	var l ledger
	for d := 0; d < 30; d++ {
		start := nov.Start.Add(day(d) + 8*time.Hour)
		l.inst("acme", "i-1", "h100.8x", "us-east-1a", od, start, start.Add(12*time.Hour))
	}
	in := Input{Period: nov, AsOf: nov.End, Prices: NewPriceBook(basePrices(), nil), Usage: l.us}
	inv := invoiceOf(mustRate(t, in), "acme")
	if inv == nil || inv.Total != usd("4320") || inv.Total.Cents() != "4320.00" || !inv.Final || inv.Month != "2026-11" {
		t.Fatalf("on demand: %+v", inv)
	}
	if ls := linesOf(inv, CategoryCompute); len(ls) != 1 || ls[0].Quantity != 30*12*3600 || ls[0].Model != ModelOnDemand ||
		ls[0].Description != "h100.8x on demand, us-east-1a" {
		t.Errorf("lines %+v", inv.Lines)
	}

	c := &cloud.Commitment{ID: "c-1", TenantID: "acme", Plan: cloud.PlanRetainer, Offering: "h100.8x", Quantity: 1,
		UsageRate: usd("9"), Start: nov.Start.Add(-day(10)), End: nov.End.Add(day(300))}
	in.Commitments = []*cloud.Commitment{c}
	res := mustRate(t, in)
	inv = invoiceOf(res, "acme")
	if inv.Total.Cents() != "3240.00" {
		t.Fatalf("with commitment: total %s, lines %+v", inv.Total, inv.Lines)
	}
	if len(inv.Lines) != 1 || inv.Lines[0].Model != ModelRetainer || inv.Lines[0].CommitmentID != "c-1" ||
		inv.Lines[0].Description != "retainer c-1 (h100.8x) coverage" {
		t.Errorf("lines %+v", inv.Lines)
	}
	if len(res.Coverage) != 360 {
		t.Fatalf("%d coverage hours", len(res.Coverage))
	}
	for _, h := range res.Coverage {
		if h.Seconds != 3600 || h.CommitmentID != "c-1" {
			t.Fatalf("coverage %+v", h)
		}
	}
	// A reservation bought the same way: 25% off for every hour of the
	// term, used or not.
	r, err := NewCommitment(CommitmentSpec{TenantID: "acme", Plan: "reservation", Offering: "h100.8x", Quantity: 1, Term: OneYear,
		Payment: cloud.PaymentNoUpfront, Start: nov.Start}, usd("12"), nov.Start)
	if err != nil {
		t.Fatal(err)
	}
	r.ID = "r-1"
	in.Commitments = []*cloud.Commitment{r}
	inv = invoiceOf(mustRate(t, in), "acme")
	if inv.Total.Cents() != "6480.00" { // 720 h × $9
		t.Errorf("reservation: total %s, lines %+v", inv.Total, inv.Lines)
	}
}

// A stopped instance costs nothing, but its volume and address bill all
// month.
func TestRateStoppedInstanceKeepsStorage(t *testing.T) {
	var l ledger
	l.inst("acme", "i-1", "h100.8x", "z1", od, ts(-day(3)), ts(-day(2)))
	l.vol("acme", "vol-1", 500, ts(-day(5)))
	l.addr("acme", "addr-1", ts(-day(5)))
	inv := invoiceOf(mustRate(t, Input{Period: dec, AsOf: dec.End.Add(time.Hour), Prices: NewPriceBook(basePrices(), nil), Usage: l.us}), "acme")
	if inv == nil || len(linesOf(inv, CategoryCompute)) != 0 || len(linesOf(inv, CategoryMinimum)) != 0 {
		t.Fatalf("invoice %+v", inv)
	}
	secs := int64(31 * 24 * 3600)
	v, a := linesOf(inv, CategoryVolume), linesOf(inv, CategoryAddress)
	if len(v) != 1 || v[0].Quantity != 500*secs || v[0].Unit != UnitGiBSecond || v[0].UnitPrice != usd("0.08") {
		t.Errorf("volume lines %+v", v)
	}
	// 500 GiB × $0.08 × 744 h / 730 h.
	if want, _ := money.MulDiv(usd("40"), 744, 730); v[0].Amount != want {
		t.Errorf("volume amount %s, want %s", v[0].Amount, want)
	}
	if len(a) != 1 || a[0].Quantity != secs || a[0].Amount != usd("3.72") {
		t.Errorf("address lines %+v", a)
	}
}

func TestRateMinimum(t *testing.T) {
	prices := NewPriceBook(append(basePrices(), computePrice("h100.8x", "", "36", ts(time.Hour))), []cloud.SpotPrice{
		{Pool: cloud.Pool{Offering: "h100.8x", Zone: "z1"}, Time: ts(-time.Hour), Price: usd("3.6")},
	})
	for _, c := range []struct {
		name         string
		market       cloud.Market
		spans        []time.Time
		asOf         time.Time
		compute, min int64
		minPrice     money.Micros
	}{
		{"10s", od, []time.Time{ts(10 * time.Minute), ts(10*time.Minute + 10*time.Second)}, dec.End, 10, 50, usd("12")},
		{"59s", od, []time.Time{ts(10 * time.Minute), ts(10*time.Minute + 59*time.Second)}, dec.End, 59, 1, usd("12")},
		{"60s", od, []time.Time{ts(10 * time.Minute), ts(11 * time.Minute)}, dec.End, 60, 0, 0},
		{"same second", od, []time.Time{ts(10 * time.Minute), ts(10*time.Minute + 300*time.Millisecond)}, dec.End, 0, 60, usd("12")},
		// Sub-second bounds truncate: 0.9 s..30.1 s is seconds 0..30.
		{"truncated", od, []time.Time{ts(900 * time.Millisecond), ts(30*time.Second + 100*time.Millisecond)}, dec.End, 30, 30, usd("12")},
		// The minimum is priced when the interval ends, after a change.
		{"at end price", od, []time.Time{ts(time.Hour - 20*time.Second), ts(time.Hour + 10*time.Second)}, dec.End, 30, 30, usd("36")},
		{"two starts", od, []time.Time{ts(0), ts(5 * time.Second), ts(time.Minute), ts(time.Minute + 5*time.Second)}, dec.End, 10, 110, usd("12")},
		{"open", od, []time.Time{ts(day(3))}, ts(day(3) + 10*time.Second), 10, 0, 0},
		{"spot", cloud.MarketSpot, []time.Time{ts(10 * time.Minute), ts(10*time.Minute + 20*time.Second)}, dec.End, 20, 40, usd("3.6")},
		// Began in November: 30 s there, 20 s here, the minimum here.
		{"across months", od, []time.Time{ts(-30 * time.Second), ts(20 * time.Second)}, dec.End, 20, 10, usd("12")},
		// Ends in January: no minimum in December.
		{"ends next month", od, []time.Time{dec.End.Add(-20 * time.Second)}, dec.End, 20, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var l ledger
			l.inst("acme", "i-1", "h100.8x", "z1", c.market, c.spans...)
			inv := invoiceOf(mustRate(t, Input{Period: dec, AsOf: c.asOf, Prices: prices, Usage: l.us}), "acme")
			var compute, min int64
			for _, l := range linesOf(inv, CategoryCompute) {
				compute += l.Quantity
			}
			ms := linesOf(inv, CategoryMinimum)
			for _, l := range ms {
				min += l.Quantity
				if l.UnitPrice != c.minPrice || l.Model != string(c.market) || l.Unit != UnitSecond {
					t.Errorf("minimum line %+v, want price %s", l, c.minPrice)
				}
			}
			if compute != c.compute || min != c.min {
				t.Errorf("compute %d s, minimum %d s; want %d, %d (lines %+v)", compute, min, c.compute, c.min, inv)
			}
		})
	}
	// The November invoice of the interval across months: 30 s, no
	// minimum (the interval was still open at the end of November).
	var l ledger
	l.inst("acme", "i-1", "h100.8x", "z1", od, ts(-30*time.Second), ts(20*time.Second))
	nov := Month(2026, time.November)
	inv := invoiceOf(mustRate(t, Input{Period: nov, AsOf: dec.End, Prices: prices, Usage: l.us}), "acme")
	if len(inv.Lines) != 1 || inv.Lines[0].Category != CategoryCompute || inv.Lines[0].Quantity != 30 {
		t.Errorf("November: %+v", inv.Lines)
	}
}

func TestRatePriceChangeMidInterval(t *testing.T) {
	prices := append(basePrices(),
		computePrice("h100.1x", "", "3", ts(12*time.Hour)),
		// A zonal price from 14:00:00.5, in force from 14:00:01.
		computePrice("h100.1x", "z1", "4", ts(14*time.Hour+500*time.Millisecond)),
	)
	var l ledger
	l.inst("acme", "i-1", "h100.1x", "z1", od, ts(11*time.Hour), ts(15*time.Hour))
	l.inst("acme", "i-2", "h100.1x", "z2", od, ts(11*time.Hour), ts(15*time.Hour))
	inv := invoiceOf(mustRate(t, Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(prices, nil), Usage: l.us}), "acme")
	type q struct {
		zone  string
		price money.Micros
		secs  int64
	}
	var got []q
	for _, l := range inv.Lines {
		got = append(got, q{l.Zone, l.UnitPrice, l.Quantity})
	}
	want := []q{
		{"z1", usd("2"), 3600}, {"z1", usd("3"), 7201}, {"z1", usd("4"), 3599},
		{"z2", usd("2"), 3600}, {"z2", usd("3"), 3 * 3600},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lines %+v, want %+v", got, want)
	}
	// $2 + $3×7201/3600 + $4×3599/3600 + $2 + $9.
	if inv.Total != usd("2")+usd("6.000833")+usd("3.998889")+usd("11") {
		t.Errorf("total %s", inv.Total)
	}
}

func TestRateSpot(t *testing.T) {
	pool := cloud.Pool{Offering: "h100.8x", Zone: "z1"}
	prices := NewPriceBook(basePrices(), []cloud.SpotPrice{
		{Pool: pool, Time: ts(time.Hour), Price: usd("4")},
		{Pool: pool, Time: ts(2 * time.Hour), Price: usd("20")}, // above on demand: capped at $12
		{Pool: pool, Time: ts(3 * time.Hour), Price: usd("5")},
	})
	if p, ok := prices.Spot(pool, ts(2*time.Hour+time.Minute)); !ok || p != usd("12") {
		t.Errorf("capped spot price %s, %v", p, ok)
	}
	if _, ok := prices.Spot(pool, ts(time.Hour-time.Nanosecond)); ok {
		t.Error("spot price before the first point")
	}
	var l ledger
	l.inst("acme", "s-1", "h100.8x", "z1", cloud.MarketSpot, ts(30*time.Minute), ts(4*time.Hour))
	// Commitments never cover spot.
	c := &cloud.Commitment{ID: "c-1", TenantID: "acme", Plan: cloud.PlanReservation, Offering: "h100", Quantity: 5,
		Start: ts(-day(1)), End: ts(day(10))}
	res := mustRate(t, Input{Period: dec, AsOf: dec.End, Prices: prices, Usage: l.us, Commitments: []*cloud.Commitment{c}})
	inv := invoiceOf(res, "acme")
	want := map[money.Micros]int64{usd("12"): 1800 + 3600, usd("4"): 3600, usd("5"): 3600}
	got := map[money.Micros]int64{}
	for _, l := range linesOf(inv, CategoryCompute) {
		if l.Model != ModelSpot || l.CommitmentID != "" || l.Description != "spot h100.8x/z1" {
			t.Errorf("line %+v", l)
		}
		got[l.UnitPrice] += l.Quantity
	}
	if !reflect.DeepEqual(got, want) || len(res.Coverage) != 0 {
		t.Errorf("spot seconds by price %v, want %v; coverage %v", got, want, res.Coverage)
	}
}

func TestRateNoPrice(t *testing.T) {
	var l ledger
	l.inst("acme", "i-1", "b200.8x", "z9", od, ts(time.Hour), ts(2*time.Hour))
	_, err := Rate(Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(basePrices(), nil), Usage: l.us})
	if err == nil || !strings.Contains(err.Error(), "b200.8x") || !strings.Contains(err.Error(), "z9") ||
		!strings.Contains(err.Error(), "2026-12-01T01:00:00Z") {
		t.Errorf("err = %v", err)
	}
	// A price taking effect mid-interval: the error names the first
	// second without one.
	prices := []*cloud.Price{computePrice("b200.8x", "z9", "30", ts(90*time.Minute))}
	_, err = Rate(Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(prices, nil), Usage: l.us})
	if err == nil || !strings.Contains(err.Error(), "01:00:00") {
		t.Errorf("err = %v", err)
	}
	// No volume price.
	l = ledger{}
	l.vol("acme", "v-1", 10, ts(time.Hour))
	if _, err := Rate(Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(nil, nil), Usage: l.us}); err == nil ||
		!strings.Contains(err.Error(), "volume") {
		t.Errorf("err = %v", err)
	}
	if _, err := Rate(Input{Period: dec}); err == nil {
		t.Error("no price book accepted")
	}
}

func TestRateAsOfAndLedgerQuirks(t *testing.T) {
	var l ledger
	u := cloud.Usage{TenantID: "acme", Kind: cloud.UsageCompute, ResourceID: "i-1", Offering: "h100.1x", Zone: "z1", Market: od}
	l.add(false, ts(10*time.Minute), u) // Off with nothing open: ignored
	l.add(true, ts(time.Hour), u)
	l.add(true, ts(90*time.Minute), u) // second On while open: ignored
	l.add(false, ts(2*time.Hour), u)   // terminate
	l.add(false, ts(3*time.Hour), u)   // repeated Off: nothing accrues after the first
	l.add(true, ts(5*time.Hour), u)
	l.add(false, ts(7*time.Hour), u) // after AsOf: not happened yet
	prices := NewPriceBook(basePrices(), nil)
	asOf := ts(6*time.Hour + 500*time.Millisecond)
	res := mustRate(t, Input{Period: dec, AsOf: asOf, Prices: prices, Usage: l.us, Tenants: []string{"idle", "acme"}})
	if len(res.Invoices) != 2 || res.Invoices[0].TenantID != "acme" || res.Invoices[1].TenantID != "idle" {
		t.Fatalf("invoices %+v", res.Invoices)
	}
	inv := res.Invoices[0]
	if inv.Final || !inv.AsOf.Equal(asOf) || len(inv.Lines) != 1 || inv.Lines[0].Quantity != 2*3600 {
		t.Errorf("as of 06:00: %+v", inv)
	}
	if idle := res.Invoices[1]; idle.Total != 0 || idle.Lines == nil || len(idle.Lines) != 0 {
		t.Errorf("idle invoice %+v", idle)
	}
	ivs := Intervals(l.us, asOf)
	if len(ivs) != 2 || !ivs[0].End.Equal(ts(2*time.Hour)) || ivs[0].Open || !ivs[1].Open || !ivs[1].End.Equal(asOf) ||
		ivs[1].Offering != "h100.1x" || ivs[1].TenantID != "acme" {
		t.Errorf("intervals %+v", ivs)
	}
	inv = invoiceOf(mustRate(t, Input{Period: dec, AsOf: dec.End.Add(day(2)), Prices: prices, Usage: l.us}), "acme")
	if !inv.Final || inv.Lines[0].Quantity != 3*3600 || inv.Total != usd("6") {
		t.Errorf("final: %+v", inv)
	}
	// Clock skew: an On timed before the previous Off starts at it.
	l = ledger{}
	l.inst("acme", "i-1", "h100.1x", "z1", od, ts(time.Hour), ts(2*time.Hour), ts(90*time.Minute), ts(3*time.Hour))
	inv = invoiceOf(mustRate(t, Input{Period: dec, AsOf: dec.End, Prices: prices, Usage: l.us}), "acme")
	if inv.Lines[0].Quantity != 2*3600 {
		t.Errorf("overlapping intervals billed %d s", inv.Lines[0].Quantity)
	}
}

func TestRateCommitments(t *testing.T) {
	prices := append(basePrices(),
		computePrice("h100.8x", "z2", "16", time.Unix(0, 0)),
		computePrice("a100.8x", "", "10", time.Unix(0, 0)))
	book := NewPriceBook(prices, nil)
	var l ledger
	// Three h100.8x instances 00:00-02:00 in z1 and one in z2, an h100.1x,
	// an a100.8x, all on demand.
	for _, id := range []string{"i-a", "i-b", "i-c"} {
		l.inst("acme", id, "h100.8x", "z1", od, ts(0), ts(2*time.Hour))
	}
	l.inst("acme", "i-d", "h100.8x", "z2", od, ts(0), ts(2*time.Hour))
	l.inst("acme", "i-e", "h100.1x", "z1", od, ts(0), ts(2*time.Hour))
	l.inst("acme", "i-f", "a100.8x", "z1", od, ts(0), ts(2*time.Hour))
	l.inst("other", "i-g", "h100.8x", "z1", od, ts(0), ts(2*time.Hour))
	commits := []*cloud.Commitment{
		// A family retainer for 2 units in any zone: saves $16-$8 on i-d
		// first, then $12-$8 on one of i-a..i-c.
		{ID: "c-2", TenantID: "acme", Plan: cloud.PlanRetainer, Offering: "h100", Quantity: 2, UsageRate: usd("8"),
			Start: ts(-day(1)), End: ts(day(1))},
		// A zonal reservation for one h100.8x in z1 from 00:30: half of
		// the first hour.
		{ID: "c-1", TenantID: "acme", Plan: cloud.PlanReservation, Offering: "h100.8x", Zone: "z1", Quantity: 1,
			HourlyFee: usd("9"), UpfrontFee: usd("100"), Start: ts(30 * time.Minute), End: ts(day(40))},
		// Costs more than on demand: covers nothing.
		{ID: "c-3", TenantID: "acme", Plan: cloud.PlanRetainer, Offering: "a100.8x", Quantity: 1, UsageRate: usd("11"),
			Start: ts(-day(1)), End: ts(day(1))},
	}
	res := mustRate(t, Input{Period: dec, AsOf: ts(day(1)), Prices: book, Usage: l.us, Commitments: commits})
	inv := invoiceOf(res, "acme")
	type k struct {
		model, commit, zone, offering string
		price                         money.Micros
	}
	got := map[k]int64{}
	for _, l := range inv.Lines {
		got[k{l.Model, l.CommitmentID, l.Zone, l.Offering, l.UnitPrice}] += l.Quantity
	}
	want := map[k]int64{
		// c-1 (saving $12) covers i-a from 00:30 and all of hour 2.
		{ModelReserved, "c-1", "z1", "h100.8x", 0}: 1800 + 3600,
		// c-2 covers i-d ($8 saving) and then its second unit covers $4
		// savings: i-b the first hour (i-a is c-1's only from 00:30, and
		// i-a sorts first: its first 1800 s, then i-b's first 1800 s...).
		{ModelRetainer, "c-2", "z2", "h100.8x", usd("8")}: 2 * 3600,
		{ModelRetainer, "c-2", "z1", "h100.8x", usd("8")}: 2 * 3600,
		{ModelOnDemand, "", "z1", "h100.8x", usd("12")}:   6*3600 - 5400 - 7200,
		{ModelOnDemand, "", "z1", "h100.1x", usd("2")}:    2 * 3600,
		{ModelOnDemand, "", "z1", "a100.8x", usd("10")}:   2 * 3600,
		{"reserved", "c-1", "z1", "h100.8x", usd("9")}:    (day(1) - 30*time.Minute).Milliseconds() / 1000,
		{"reserved", "c-1", "z1", "h100.8x", usd("100")}:  1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("lines\n got %v\nwant %v", got, want)
	}
	fee := linesOf(inv, CategoryCommitmentFee)
	up := linesOf(inv, CategoryCommitmentUpfront)
	if len(fee) != 1 || fee[0].Unit != UnitUnitSecond || fee[0].Description != "reservation c-1 (1 x h100.8x, z1) hourly fee" ||
		len(up) != 1 || up[0].Amount != usd("100") || up[0].Unit != UnitEach {
		t.Errorf("fee lines %+v %+v", fee, up)
	}
	cov := map[string]int64{}
	for _, h := range res.Coverage {
		cov[h.CommitmentID+" "+h.Hour.Format("15")] = h.Seconds
	}
	if !reflect.DeepEqual(cov, map[string]int64{"c-1 00": 1800, "c-1 01": 3600, "c-2 00": 7200, "c-2 01": 7200}) {
		t.Errorf("coverage %v", cov)
	}
	if o := invoiceOf(res, "other"); o == nil || o.Total != usd("24") {
		t.Errorf("other tenant: %+v", o)
	}
	// In January: the fee for all of January, no upfront, no coverage.
	jan := Month(2027, time.January)
	inv = invoiceOf(mustRate(t, Input{Period: jan, AsOf: jan.End, Prices: book, Usage: l.us, Commitments: commits}), "acme")
	if len(inv.Lines) != 1 || inv.Lines[0].Category != CategoryCommitmentFee || inv.Lines[0].Quantity != int64(ts(day(40)).Sub(jan.Start)/time.Second) {
		t.Errorf("January %+v", inv.Lines)
	}
}

// Rating is deterministic: the same snapshot in any order of commitments
// gives the same result, and the JSON of lines is stable.
func TestRateDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		c := randomCase(seed)
		a, err := Rate(c.in)
		if err != nil {
			t.Fatal(err)
		}
		in := c.in
		in.Commitments = append([]*cloud.Commitment(nil), in.Commitments...)
		for i, j := 0, len(in.Commitments)-1; i < j; i, j = i+1, j-1 {
			in.Commitments[i], in.Commitments[j] = in.Commitments[j], in.Commitments[i]
		}
		b, err := Rate(in)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d: results differ", seed)
		}
	}
}

// A commitment covers a second that it makes no cheaper (its rate equals
// the on-demand price), not one it would make dearer.
func TestRateCoverageAtZeroSaving(t *testing.T) {
	var l ledger
	l.inst("acme", "i-1", "h100.1x", "z1", od, ts(0), ts(time.Hour))
	c := &cloud.Commitment{ID: "c-1", TenantID: "acme", Plan: cloud.PlanRetainer, Offering: "h100.1x", Quantity: 1,
		UsageRate: usd("2"), Start: ts(0), End: ts(day(1))}
	res := mustRate(t, Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(basePrices(), nil), Usage: l.us, Commitments: []*cloud.Commitment{c}})
	inv := invoiceOf(res, "acme")
	if len(inv.Lines) != 1 || inv.Lines[0].Model != ModelRetainer || inv.Total != usd("2") || len(res.Coverage) != 1 {
		t.Errorf("at zero saving: %+v, coverage %v", inv.Lines, res.Coverage)
	}
	c.UsageRate = usd("2.000001")
	res = mustRate(t, Input{Period: dec, AsOf: dec.End, Prices: NewPriceBook(basePrices(), nil), Usage: l.us, Commitments: []*cloud.Commitment{c}})
	inv = invoiceOf(res, "acme")
	if len(inv.Lines) != 1 || inv.Lines[0].Model != ModelOnDemand || inv.Total != usd("2") || len(res.Coverage) != 0 {
		t.Errorf("dearer than on demand: %+v, coverage %v", inv.Lines, res.Coverage)
	}
}
