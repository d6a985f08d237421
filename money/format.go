package money

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Money shown to people has one format, in the CLI's tables and messages,
// the console's pages and the advisor's reasons (-o json, yaml and csv, and
// the API, keep the exact decimal strings of String instead):
//
//   - an amount (a total, a fee paid once, a budget) is in dollars and cents
//     with thousands separators: "$4,320.00", "-$0.13";
//   - a price (per hour, per GiB-month) has four decimals, a hundredth of a
//     cent, and is followed by its unit where it is shown: "$2.4900/h",
//     "$0.2557/h" for 0.255714. A price under half of a hundredth of a cent,
//     which four decimals would show as zero, is shown exactly: "$0.00004/h".
//
// Both round half away from zero. Every amount is USD (billing.Currency).
const currencySign = "$"

// Cent is one cent in micros.
const Cent Micros = 10_000

// FormatAmount prints an amount rounded to cents: "$4,320.00", "-$0.13".
func FormatAmount(m Micros) string {
	return formatMoney(m, 2)
}

// FormatPrice prints a price without its unit: "$2.4900", "$1,200.0000",
// "$0.00004". The caller appends the unit ("/h", "/GiB-month").
func FormatPrice(m Micros) string {
	if m != 0 && m.Round(100) == 0 {
		return formatMoney(m, 6)
	}
	return formatMoney(m, 4)
}

// formatMoney prints m rounded to decimals (2, 4 or 6) with the currency
// sign and thousands separators; six decimals drop trailing zeros.
func formatMoney(m Micros, decimals int) string {
	unit := Micros(1)
	for i := decimals; i < 6; i++ {
		unit *= 10
	}
	r := m.Round(unit)
	sign := ""
	if r < 0 {
		sign, r = "-", -r
	}
	frac := fmt.Sprintf("%06d", int64(r%Unit))[:decimals]
	if decimals == 6 {
		frac = strings.TrimRight(frac, "0")
	}
	return sign + currencySign + thousands(int64(r/Unit)) + "." + frac
}

// thousands prints a non-negative integer with a comma every three digits.
func thousands(v int64) string {
	s := strconv.FormatInt(v, 10)
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// RoundToCents rounds the lines of a bill to whole cents so that the
// rounded lines add up to total rounded to cents (half away from zero), as
// a printed invoice must. It is the largest-remainder method: each line is
// first rounded down to a cent, and the cents still missing go one each to
// the lines that lost the most, earlier lines first among equals. When
// total is the exact sum of lines, as on an invoice, each rounded line is
// within one cent of its exact amount. The result is in micros, every
// value a multiple of Cent; lines is not modified.
func RoundToCents(lines []Micros, total Micros) []Micros {
	out := make([]Micros, len(lines))
	if len(lines) == 0 {
		return out
	}
	rem := make([]Micros, len(lines))
	var floors Micros
	for i, l := range lines {
		f := l / Cent * Cent
		if f > l { // negative with a remainder: floor is one cent lower
			f -= Cent
		}
		out[i], rem[i] = f, l-f
		floors += f
	}
	order := make([]int, len(lines))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rem[order[a]] > rem[order[b]] })
	// missing is in cents; it lies in [0, len(lines)] when total is the
	// sum of lines. Otherwise the cents go round the lines again (or are
	// taken back from the lines with the smallest remainders), so that
	// the sum is still right.
	missing := int64((total.Round(Cent) - floors) / Cent)
	for i := int64(0); missing > 0; i, missing = i+1, missing-1 {
		out[order[i%int64(len(order))]] += Cent
	}
	for i := int64(0); missing < 0; i, missing = i+1, missing+1 {
		out[order[len(order)-1-int(i%int64(len(order)))]] -= Cent
	}
	return out
}
