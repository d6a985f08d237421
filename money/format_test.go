package money

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestFormatAmount(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "$0.00"},
		{"12", "$12.00"},
		{"4320", "$4,320.00"},
		{"999.999", "$1,000.00"},
		{"0.004999", "$0.00"},
		{"0.005", "$0.01"}, // half away from zero
		{"1234567.891", "$1,234,567.89"},
		{"-4320.5", "-$4,320.50"},
		{"-0.125", "-$0.13"},
	} {
		if got := FormatAmount(MustParse(tc.in)); got != tc.want {
			t.Errorf("FormatAmount(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFormatPrice(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0", "$0.0000"},
		{"2.49", "$2.4900"},
		{"19.92", "$19.9200"},
		{"7.968", "$7.9680"},
		{"0.255714", "$0.2557"}, // a list price of 1.79/7
		{"0.07425", "$0.0743"},  // half away from zero
		{"0.000125", "$0.0001"},
		{"0.00005", "$0.0001"},
		{"0.00004", "$0.00004"}, // four decimals would say zero
		{"0.000001", "$0.000001"},
		{"1200", "$1,200.0000"},
		{"9999.99995", "$10,000.0000"},
		{"-1.5", "-$1.5000"},
	} {
		if got := FormatPrice(MustParse(tc.in)); got != tc.want {
			t.Errorf("FormatPrice(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRoundToCents(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []string
		total string
		want  []string
	}{
		{"empty", nil, "0", nil},
		{"whole cents stay", []string{"1.25", "0.10"}, "1.35", []string{"1.25", "0.10"}},
		// Each line alone rounds to 0.14 (0.41 in all) under a total of 0.40:
		// the line that lost the least gives its cent back.
		{"three lines over the total", []string{"0.135", "0.135", "0.13"}, "0.40", []string{"0.14", "0.13", "0.13"}},
		{"largest remainder wins", []string{"0.104", "0.106", "0.100"}, "0.31", []string{"0.10", "0.11", "0.10"}},
		{"ties go to earlier lines", []string{"0.005", "0.005"}, "0.01", []string{"0.01", "0.00"}},
		{"total rounds up", []string{"0.003", "0.003", "0.003", "0.003"}, "0.012", []string{"0.01", "0.00", "0.00", "0.00"}},
		{"one line is the total", []string{"57.625"}, "57.625", []string{"57.63"}},
		{"a credit", []string{"1.006", "-0.503", "-0.503"}, "0", []string{"1.00", "-0.50", "-0.50"}},
		{"negative total", []string{"-0.135", "-0.135", "-0.13"}, "-0.40", []string{"-0.13", "-0.14", "-0.13"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lines := parseAll(tc.lines)
			got := RoundToCents(lines, MustParse(tc.total))
			if want := parseAll(tc.want); !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Errorf("RoundToCents(%v, %s) = %v, want %v", tc.lines, tc.total, got, want)
			}
			if !slices.Equal(lines, parseAll(tc.lines)) {
				t.Errorf("RoundToCents modified its lines: %v", lines)
			}
		})
	}
}

// TestRoundToCentsProperty checks random bills whose exact lines add up
// to their total: the rounded lines add up to the rounded total, each is a
// whole number of cents, and each is within one cent of its exact amount.
func TestRoundToCentsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 0xc0))
	for i := range 2000 {
		n := rng.IntN(40)
		lines := make([]Micros, n)
		var total Micros
		for j := range lines {
			switch rng.IntN(4) {
			case 0: // a tiny line, under a cent
				lines[j] = Micros(rng.Int64N(int64(Cent)))
			case 1: // a credit
				lines[j] = -Micros(rng.Int64N(100 * int64(Unit)))
			case 2: // exactly half a cent over
				lines[j] = Micros(rng.Int64N(1000))*Cent + Cent/2
			default:
				lines[j] = Micros(rng.Int64N(10_000 * int64(Unit)))
			}
			total += lines[j]
		}
		got := RoundToCents(lines, total)
		if len(got) != n {
			t.Fatalf("case %d: %d lines in, %d out", i, n, len(got))
		}
		var sum Micros
		for j, g := range got {
			if g%Cent != 0 {
				t.Fatalf("case %d: line %d rounded to %s, not whole cents", i, j, g)
			}
			if d := g - lines[j]; d <= -Cent || d >= Cent {
				t.Fatalf("case %d: line %d of %s rounded to %s, a cent or more away", i, j, lines[j], g)
			}
			sum += g
		}
		if sum != total.Round(Cent) {
			t.Fatalf("case %d: rounded lines %v add up to %s, the total %s rounds to %s", i, got, sum, total, total.Round(Cent))
		}
	}
}

func parseAll(ss []string) []Micros {
	out := make([]Micros, len(ss))
	for i, s := range ss {
		out[i] = MustParse(s)
	}
	return out
}
