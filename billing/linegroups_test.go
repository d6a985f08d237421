package billing

import (
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/money"
)

// TestInvoiceLineUnits: a line's quantity is in the unit its price is per.
func TestInvoiceLineUnits(t *testing.T) {
	for _, tc := range []struct {
		line          Line
		qty, price    string
		quantityTimes string // the unit both share
	}{
		{Line{Unit: UnitSecond, Quantity: 5400, UnitPrice: money.MustParse("1")}, "1.50 h", "$1.0000/h", "h"},
		{Line{Unit: UnitSecond, Quantity: 60, UnitPrice: money.MustParse("2.49")}, "0.0167 h", "$2.4900/h", "h"},
		// 50 GiB for 73 hours is 3650 GiB-h, 5 GiB-months of 730 h.
		{Line{Unit: UnitGiBSecond, Quantity: 50 * 73 * 3600, UnitPrice: money.MustParse("0.10")}, "5.00 GiB-month", "$0.1000/GiB-month", "GiB-month"},
		// 100 GiB-h are 0.137 GiB-months.
		{Line{Unit: UnitGiBSecond, Quantity: 100 * 3600, UnitPrice: money.MustParse("0.08")}, "0.1370 GiB-month", "$0.0800/GiB-month", "GiB-month"},
		{Line{Unit: UnitGiBSecond, Quantity: 1, UnitPrice: money.MustParse("0.08")}, "<0.0001 GiB-month", "$0.0800/GiB-month", "GiB-month"},
		{Line{Unit: UnitUnitSecond, Quantity: 7200, UnitPrice: money.MustParse("0.5")}, "2.00 unit-h", "$0.5000/unit-h", "unit-h"},
		{Line{Unit: UnitEach, Quantity: 3, UnitPrice: money.MustParse("5")}, "3", "$5.0000 each", ""},
	} {
		qty, price := FormatQuantity(tc.line), FormatUnitPrice(tc.line)
		if qty != tc.qty || price != tc.price {
			t.Errorf("%s × %d: quantity %q, price %q; want %q, %q", tc.line.Unit, tc.line.Quantity, qty, price, tc.qty, tc.price)
		}
		if tc.quantityTimes != "" && (!strings.HasSuffix(qty, " "+tc.quantityTimes) || !strings.HasSuffix(price, "/"+tc.quantityTimes)) {
			t.Errorf("%s: quantity %q and price %q are in different units", tc.line.Unit, qty, price)
		}
	}
}

// TestGroupLines: lines that differ only in unit price are summed, in
// order, keeping every line for a drill-down; detail keeps them apart;
// the groups' amounts add to the lines'.
func TestGroupLines(t *testing.T) {
	spot := func(zone string, secs int64, price string) Line {
		p := money.MustParse(price)
		return Line{Category: CategoryCompute, Model: ModelSpot, Offering: "a100.2x", Zone: zone, Description: "spot a100.2x/" + zone,
			Quantity: secs, Unit: UnitSecond, UnitPrice: p, Amount: money.Micros(int64(p) * secs / 3600)}
	}
	od := Line{Category: CategoryCompute, Model: ModelOnDemand, Offering: "a100.2x", Description: "on-demand a100.2x",
		Quantity: 7200, Unit: UnitSecond, UnitPrice: money.MustParse("2"), Amount: money.MustParse("4")}
	lines := []Line{od, spot("a", 3600, "1"), spot("a", 1800, "2"), spot("a", 1800, "4"), spot("b", 3600, "1")}
	for _, tc := range []struct {
		name   string
		detail bool
		want   []string // description: prices, quantity, average
	}{
		{"grouped", false, []string{"on-demand a100.2x: 1, 2.00 h, $2.0000/h", "spot a100.2x/a: 3, 2.00 h, $2.0000/h", "spot a100.2x/b: 1, 1.00 h, $1.0000/h"}},
		{"detail", true, []string{"on-demand a100.2x: 1, 2.00 h, $2.0000/h", "spot a100.2x/a: 1, 1.00 h, $1.0000/h",
			"spot a100.2x/a: 1, 0.5000 h, $2.0000/h", "spot a100.2x/a: 1, 0.5000 h, $4.0000/h", "spot a100.2x/b: 1, 1.00 h, $1.0000/h"}},
	} {
		groups := GroupLines(lines, tc.detail)
		var got []string
		var sum, lineSum money.Micros
		for _, g := range groups {
			got = append(got, g.Description+": "+strconv.Itoa(g.Prices())+", "+FormatQuantity(g.Line)+", "+FormatUnitPrice(Line{Unit: g.Unit, UnitPrice: g.AveragePrice()}))
			sum += g.Amount
			for _, l := range g.Lines {
				lineSum += l.Amount
			}
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", tc.name, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
		var want money.Micros
		for _, l := range lines {
			want += l.Amount
		}
		if sum != want || lineSum != want {
			t.Errorf("%s: groups add to %d, their lines to %d, want %d", tc.name, sum, lineSum, want)
		}
	}
}
