package billing

import (
	"fmt"
	"strconv"

	"github.com/gpucloud/gpucloud/money"
)

// How an invoice's lines are shown to people (the CLI's table, the
// console's invoice): lines that differ only in unit price are summed, and
// each quantity is in the unit its price is per, so that quantity × unit
// price reads as the amount.

// LineGroup is invoice lines that differ only in unit price (a spot
// pool's seconds at each price in force), summed: Line holds the sums
// and the first line's other fields, Lines the lines summed, in invoice
// order.
type LineGroup struct {
	Line
	Lines []Line
}

// Prices is how many unit prices the group sums (its lines).
func (g LineGroup) Prices() int { return len(g.Lines) }

// AveragePrice is the group's average unit price, rounded to a micro: its
// amount over its quantity in the price's unit.
func (g LineGroup) AveragePrice() money.Micros {
	per := int64(money.SecondsPerHour)
	if g.Unit == UnitGiBSecond {
		per = money.SecondsPerMonth
	}
	if g.Quantity == 0 || g.Unit == UnitEach {
		return g.UnitPrice
	}
	avg, err := money.MulDiv(g.Amount, per, g.Quantity)
	if err != nil {
		return g.UnitPrice
	}
	return avg
}

// GroupLines sums consecutive lines that differ only in unit price (lines
// are in invoice order, which puts them next to each other), unless
// detail asks for every line alone. Amounts add exactly, so the total is
// the same either way.
func GroupLines(lines []Line, detail bool) []LineGroup {
	var out []LineGroup
	for _, l := range lines {
		if n := len(out); !detail && n > 0 {
			p := &out[n-1]
			if p.Category == l.Category && p.Model == l.Model && p.Offering == l.Offering && p.Zone == l.Zone &&
				p.CommitmentID == l.CommitmentID && p.Unit == l.Unit && p.Description == l.Description && p.EndpointID == l.EndpointID {
				p.Quantity += l.Quantity
				p.Amount += l.Amount
				p.Lines = append(p.Lines, l)
				continue
			}
		}
		out = append(out, LineGroup{Line: l, Lines: []Line{l}})
	}
	return out
}

// FormatQuantity renders a line's quantity in the unit its price is per
// (FormatUnitPrice): hours for time-metered lines, GiB-months for
// storage, so that quantity × unit price is the amount. Under one unit,
// four decimals keep what was billed visible: "1.50 h", "0.0167 h",
// "5.00 GiB-month", "<0.0001 GiB-month".
func FormatQuantity(l Line) string {
	switch l.Unit {
	case UnitSecond:
		return secondsIn(l.Quantity, money.SecondsPerHour) + " h"
	case UnitGiBSecond:
		return secondsIn(l.Quantity, money.SecondsPerMonth) + " GiB-month"
	case UnitUnitSecond:
		return secondsIn(l.Quantity, money.SecondsPerHour) + " unit-h"
	}
	return strconv.FormatInt(l.Quantity, 10)
}

// FormatUnitPrice renders a line's unit price with what it is per:
// "$1.0761/h", "$0.1000/GiB-month", "$5.0000 each".
func FormatUnitPrice(l Line) string {
	return money.FormatPrice(l.UnitPrice) + l.PriceUnit()
}

// secondsIn renders seconds in units of per seconds (an hour, a billing
// month), computed in integers and rounded half up: two decimals from one
// unit up, four below it, and "<0.0001" for a quantity too small for
// that: secondsIn(5400, 3600) is "1.50", secondsIn(60, 3600) "0.0167".
func secondsIn(seconds, per int64) string {
	sign := ""
	if seconds < 0 {
		sign, seconds = "-", -seconds
	}
	decimals, scale := 2, int64(100)
	if seconds < per {
		decimals, scale = 4, 10_000
	}
	v := (seconds*scale*2 + per) / (2 * per)
	if v == 0 && seconds > 0 {
		return sign + "<0.0001"
	}
	return fmt.Sprintf("%s%d.%0*d", sign, v/scale, decimals, v%scale)
}
