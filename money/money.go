// Package money is gpucloud's currency arithmetic. Amounts are integer
// micro-units (one millionth of the currency unit, USD by default), never
// floats: a price of $2.49 per hour is 2_490_000 micros, and every product
// with a quantity is rounded once, half away from zero, by MulDiv.
package money

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// Micros is an amount of money in micro-units of the currency.
type Micros int64

// Unit is one currency unit (one dollar) in micros.
const Unit Micros = 1_000_000

// Common units of time in seconds, for per-hour and per-month rates. A
// billing month for per-GiB-month prices is 730 hours (8,760 / 12), as
// the large clouds use, so that a GiB costs the same in February as in
// March.
const (
	SecondsPerHour  = 3600
	SecondsPerMonth = 730 * 3600
)

// ErrOverflow is returned when a product does not fit in an int64.
var ErrOverflow = errors.New("money: amount overflows int64 micros")

// Parse reads a decimal amount such as "12", "12.5", "$0.000125" or
// "-3.20". At most six decimals are accepted: gpucloud never rounds an
// amount it was given.
func Parse(s string) (Micros, error) {
	orig := s
	s = strings.TrimSpace(s)
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	s = strings.TrimPrefix(s, "$")
	s = strings.ReplaceAll(s, "_", "")
	if s == "" {
		return 0, fmt.Errorf("money: %q is not an amount", orig)
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if hasDot && frac == "" && whole == "" {
		return 0, fmt.Errorf("money: %q is not an amount", orig)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("money: %q has more than 6 decimals", orig)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("money: %q is not an amount", orig)
			}
		}
	}
	var w uint64
	if whole != "" {
		var err error
		w, err = strconv.ParseUint(whole, 10, 64)
		if err != nil || w > math.MaxInt64/uint64(Unit) {
			return 0, fmt.Errorf("money: %q is too large", orig)
		}
	}
	f := uint64(0)
	if frac != "" {
		f, _ = strconv.ParseUint((frac + "000000")[:6], 10, 64)
	}
	v := int64(w)*int64(Unit) + int64(f)
	if neg {
		v = -v
	}
	return Micros(v), nil
}

// MustParse is Parse for constants in code and tests; it panics on error.
func MustParse(s string) Micros {
	m, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return m
}

// String prints the amount with at least two decimals and no more than it
// needs: "12.00", "0.000125", "-3.20".
func (m Micros) String() string {
	sign := ""
	u := uint64(m)
	if m < 0 {
		sign, u = "-", uint64(-m)
	}
	whole, frac := u/uint64(Unit), u%uint64(Unit)
	fs := fmt.Sprintf("%06d", frac)
	fs = strings.TrimRight(fs, "0")
	for len(fs) < 2 {
		fs += "0"
	}
	return sign + strconv.FormatUint(whole, 10) + "." + fs
}

// Cents prints the amount rounded to cents, as an invoice total is shown:
// "4320.00", "-0.13".
func (m Micros) Cents() string {
	r := m.Round(10_000)
	sign := ""
	if r < 0 {
		sign, r = "-", -r
	}
	return fmt.Sprintf("%s%d.%02d", sign, int64(r/Unit), int64(r%Unit)/10_000)
}

// Round rounds to a multiple of unit micros (10_000 is a cent), half away
// from zero.
func (m Micros) Round(unit Micros) Micros {
	if unit <= 1 {
		return m
	}
	return m/unit*unit + roundHalf(m%unit, unit)
}

func roundHalf(rem, unit Micros) Micros {
	switch {
	case rem*2 >= unit:
		return unit
	case rem*2 <= -unit:
		return -unit
	}
	return 0
}

// MarshalJSON writes the amount as a JSON string ("12.50"), so that no
// client parses it into a float by accident.
func (m Micros) MarshalJSON() ([]byte, error) {
	return json.Marshal(m.String())
}

// UnmarshalJSON reads a JSON string or number with at most six decimals.
func (m *Micros) UnmarshalJSON(b []byte) error {
	var s string
	if len(b) > 0 && b[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	} else {
		s = string(b)
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MarshalYAML writes the amount as a string, like MarshalJSON.
func (m Micros) MarshalYAML() (any, error) { return m.String(), nil }

// UnmarshalText reads an amount (YAML, flags).
func (m *Micros) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// MulDiv returns a*num/den rounded half away from zero, computed in 128
// bits so that no intermediate product overflows. den must be positive.
// ErrOverflow is returned when the result does not fit in an int64.
func MulDiv(a Micros, num, den int64) (Micros, error) {
	if den <= 0 {
		return 0, fmt.Errorf("money: MulDiv by non-positive %d", den)
	}
	neg := (a < 0) != (num < 0)
	ua, un := abs64(int64(a)), abs64(num)
	hi, lo := bits.Mul64(ua, un)
	ud := uint64(den)
	if hi >= ud {
		return 0, ErrOverflow
	}
	q, r := bits.Div64(hi, lo, ud)
	if r >= ud-r { // r*2 >= den without overflow
		q++
	}
	if q > math.MaxInt64 {
		return 0, ErrOverflow
	}
	if neg && q != 0 {
		return -Micros(q), nil
	}
	return Micros(q), nil
}

// PerHour rates an hourly price for a number of seconds: price*seconds/3600,
// rounded. It panics on overflow, which needs more than 2^63 micros.
func PerHour(pricePerHour Micros, seconds int64) Micros {
	v, err := MulDiv(pricePerHour, seconds, SecondsPerHour)
	if err != nil {
		panic(err)
	}
	return v
}

// BasisPoints returns m*bp/10,000 rounded: BasisPoints(m, 2500) is 25% of
// m. Discounts are kept in basis points so that 12.5% is exact.
func BasisPoints(m Micros, bp int64) Micros {
	v, err := MulDiv(m, bp, 10_000)
	if err != nil {
		panic(err)
	}
	return v
}

func abs64(v int64) uint64 {
	if v < 0 {
		return uint64(-v)
	}
	return uint64(v)
}
