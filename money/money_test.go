package money

import (
	"encoding/json"
	"math"
	"testing"
)

func TestParseAndString(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Micros
		out  string
	}{
		{"12", 12_000_000, "12.00"},
		{"12.5", 12_500_000, "12.50"},
		{"$0.000125", 125, "0.000125"},
		{"-3.20", -3_200_000, "-3.20"},
		{"0", 0, "0.00"},
		{".5", 500_000, "0.50"},
		{"4320.", 4_320_000_000, "4320.00"},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
			continue
		}
		if got.String() != c.out {
			t.Errorf("%d.String() = %q, want %q", got, got.String(), c.out)
		}
	}
	for _, bad := range []string{"", "$", ".", "1.0000001", "abc", "1e3", "1.2.3", "99999999999999999999", "--1"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func TestMulDivRounding(t *testing.T) {
	for _, c := range []struct {
		a        Micros
		num, den int64
		want     Micros
	}{
		{12_000_000, 3600, 3600, 12_000_000},
		{1, 1, 2, 1},   // half rounds away from zero
		{-1, 1, 2, -1}, // both ways
		{1, 1, 3, 0},
		{2, 1, 3, 1},
		{12_000_000, 1, 3600, 3333}, // one second at $12/h
		{math.MaxInt64, 2, 4, Micros(math.MaxInt64/2 + 1)},
	} {
		got, err := MulDiv(c.a, c.num, c.den)
		if err != nil || got != c.want {
			t.Errorf("MulDiv(%d,%d,%d) = %d, %v; want %d", c.a, c.num, c.den, got, err, c.want)
		}
	}
	if _, err := MulDiv(math.MaxInt64, 3, 1); err != ErrOverflow {
		t.Errorf("overflow not reported: %v", err)
	}
	if _, err := MulDiv(1, 1, 0); err == nil {
		t.Error("division by zero accepted")
	}
}

func TestArticleExample(t *testing.T) {
	// $12/h, 12 h a day for 30 days.
	od := PerHour(MustParse("12"), 12*30*3600)
	if od.Cents() != "4320.00" {
		t.Fatalf("on demand = %s", od.Cents())
	}
	if r := od - BasisPoints(od, 2500); r.Cents() != "3240.00" {
		t.Fatalf("25%% off = %s", r.Cents())
	}
}

func TestJSONRoundTrip(t *testing.T) {
	b, _ := json.Marshal(struct{ P Micros }{MustParse("2.49")})
	if string(b) != `{"P":"2.49"}` {
		t.Fatalf("json = %s", b)
	}
	var v struct{ P Micros }
	if err := json.Unmarshal([]byte(`{"P":3.5}`), &v); err != nil || v.P != 3_500_000 {
		t.Fatalf("number: %v %v", v.P, err)
	}
	if err := json.Unmarshal([]byte(`{"P":"1.0000001"}`), &v); err == nil {
		t.Fatal("7 decimals accepted")
	}
}

func TestCentsAndRound(t *testing.T) {
	for _, c := range []struct {
		m    Micros
		want string
	}{{4_999, "0.00"}, {5_000, "0.01"}, {-5_000, "-0.01"}, {1_234_567, "1.23"}, {1_235_000, "1.24"}} {
		if got := c.m.Cents(); got != c.want {
			t.Errorf("%d.Cents() = %q, want %q", c.m, got, c.want)
		}
	}
}
