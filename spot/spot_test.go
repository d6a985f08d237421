package spot

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// randSupply draws a pool with capacity 0..200, consistent counts and an
// on-demand price from one micro to $40/h; Prev is zero a tenth of the
// time, else anywhere from 0 to twice the on-demand price.
func randSupply(r *rand.Rand) Supply {
	capacity := r.IntN(201)
	s := Supply{
		Pool:            cloud.Pool{Offering: "h100.8x", Zone: "zone-a"},
		Capacity:        capacity,
		Free:            r.IntN(capacity + 1),
		SpotPending:     r.IntN(50),
		OnDemandPending: r.IntN(50),
		Reserved:        r.IntN(50),
		OnDemandPrice:   money.Micros(1 + r.Int64N(40_000_000)),
	}
	s.SpotRunning = r.IntN(capacity - s.Free + 1)
	if r.IntN(10) != 0 {
		s.Prev = money.Micros(r.Int64N(int64(s.OnDemandPrice)*2 + 1))
	}
	return s
}

// randConfig is the default config a third of the time, else random valid
// basis points.
func randConfig(r *rand.Rand) Config {
	if r.IntN(3) == 0 {
		return DefaultConfig()
	}
	return Config{
		FloorBP:       1 + r.Int64N(10_000),
		SmoothingBP:   1 + r.Int64N(10_000),
		MaxStepBP:     1 + r.Int64N(10_000),
		NoticeSeconds: 30 + r.IntN(600),
	}
}

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.FloorBP != 3000 || c.SmoothingBP != 2500 || c.MaxStepBP != 1000 || c.NoticeSeconds != 120 {
		t.Fatalf("defaults %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config (all defaults): %v", err)
	}
	if got := (Config{}).Notice().Seconds(); got != 120 {
		t.Errorf("zero config notice %vs", got)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{FloorBP: -1}, "floor -1 bp"},
		{Config{FloorBP: 10_001}, "floor 10001 bp"},
		{Config{SmoothingBP: -5}, "smoothing -5 bp"},
		{Config{MaxStepBP: 20_000}, "max step 20000 bp"},
		{Config{NoticeSeconds: 29}, "notice 29s: want at least 30s"},
		{Config{NoticeSeconds: -1}, "notice -1s"},
	} {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.c, err, tc.want)
		}
	}
	if err := (Config{FloorBP: 10_000, SmoothingBP: 10_000, MaxStepBP: 10_000, NoticeSeconds: 30}).Validate(); err != nil {
		t.Errorf("bounds: %v", err)
	}
}

// TestCurveTable checks the table of the package documentation: the target
// at each utilization, as a share of on-demand, with the default floor.
func TestCurveTable(t *testing.T) {
	const od = 10_000 // micros, so that the price is the share in bp
	for _, row := range []struct {
		utilPct int
		shareBP money.Micros
	}{{0, 3000}, {25, 3109}, {50, 3875}, {60, 4512}, {70, 5401}, {80, 6584}, {90, 8103}, {95, 9002}, {100, 10_000}} {
		s := Supply{Capacity: 100, Free: 100 - row.utilPct, OnDemandPrice: od}
		if got := Target(s, DefaultConfig()); got != row.shareBP {
			t.Errorf("utilization %d%%: target %d bp, want %d", row.utilPct, got, row.shareBP)
		}
	}
}

func TestTargetEdges(t *testing.T) {
	c := DefaultConfig()
	od := money.MustParse("19.92")
	for _, tc := range []struct {
		name string
		s    Supply
		want money.Micros
	}{
		{"idle pool", Supply{Capacity: 10, Free: 10, OnDemandPrice: od}, money.MustParse("5.976")},
		{"no capacity", Supply{Capacity: 0, OnDemandPrice: od}, od},
		{"no capacity, no demand", Supply{OnDemandPrice: od, Prev: money.MustParse("6")}, od},
		{"full", Supply{Capacity: 10, Free: 0, OnDemandPrice: od}, od},
		{"over-demanded", Supply{Capacity: 10, Free: 5, OnDemandPending: 20, OnDemandPrice: od}, od},
		{"reservations count", Supply{Capacity: 10, Free: 10, Reserved: 10, OnDemandPrice: od}, od},
		{"spot pending counts", Supply{Capacity: 10, Free: 10, SpotPending: 10, OnDemandPrice: od}, od},
		{"half full", Supply{Capacity: 10, Free: 5, OnDemandPrice: od}, money.MustParse("5.976") + money.MustParse("1.743")},
		{"free above capacity", Supply{Capacity: 10, Free: 15, OnDemandPrice: od}, money.MustParse("5.976")},
		{"zero price", Supply{Capacity: 10, Free: 3}, 0},
	} {
		if got := Target(tc.s, c); got != tc.want {
			t.Errorf("%s: target %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestPropertyClearWithinBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		s, c := randSupply(r), randConfig(r)
		floor := Floor(s.OnDemandPrice, c)
		tg, got := Target(s, c), Clear(s, c)
		if tg < floor || tg > s.OnDemandPrice {
			t.Fatalf("%+v %+v: target %s outside [%s, %s]", s, c, tg, floor, s.OnDemandPrice)
		}
		if got < floor || got > s.OnDemandPrice {
			t.Fatalf("%+v %+v: clear %s outside [%s, %s]", s, c, got, floor, s.OnDemandPrice)
		}
	}
}

func TestPropertyTargetMonotone(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	inputs := []struct {
		name string
		bump func(*Supply, int)
	}{
		{"used (less free)", func(s *Supply, n int) { s.Free = max(s.Free-n, 0) }},
		{"spot pending", func(s *Supply, n int) { s.SpotPending += n }},
		{"on-demand pending", func(s *Supply, n int) { s.OnDemandPending += n }},
		{"reserved", func(s *Supply, n int) { s.Reserved += n }},
		{"spot running (no effect)", func(s *Supply, n int) { s.SpotRunning += n }},
	}
	for i := 0; i < 100_000; i++ {
		s, c := randSupply(r), randConfig(r)
		in := inputs[r.IntN(len(inputs))]
		more := s
		in.bump(&more, 1+r.IntN(20))
		if a, b := Target(s, c), Target(more, c); b < a {
			t.Fatalf("%s: target fell from %s to %s\n%+v\n%+v", in.name, a, b, s, more)
		}
	}
}

func TestPropertyStepBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200_000; i++ {
		s, c := randSupply(r), randConfig(r)
		floor := Floor(s.OnDemandPrice, c)
		if s.Prev < floor || s.Prev > s.OnDemandPrice {
			continue
		}
		got, tg := Clear(s, c), Target(s, c)
		step := MaxStep(s.OnDemandPrice, c)
		if d := got - s.Prev; d > step || -d > step {
			t.Fatalf("%+v %+v: moved %s from %s, max step %s", s, c, d, s.Prev, step)
		}
		// Toward the target, never past it.
		if s.Prev <= tg && (got < s.Prev || got > tg) || s.Prev >= tg && (got > s.Prev || got < tg) {
			t.Fatalf("%+v %+v: %s -> %s, target %s", s, c, s.Prev, got, tg)
		}
	}
}

func TestPropertyConverges(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 5_000; i++ {
		s, c := randSupply(r), randConfig(r)
		tg := Target(s, c)
		// Whole max steps, then a geometric approach at SmoothingBP a
		// clearing (ln of a $40 gap in micros is under 18), then single
		// micros once smoothing rounds to nothing (under 5000/SmoothingBP).
		limit := int(10_000/c.MaxStepBP + 20*10_000/c.SmoothingBP + 5_000/c.SmoothingBP + 2)
		n := 0
		for ; n < limit && s.Prev != tg; n++ {
			s.Prev = Clear(s, c)
		}
		if s.Prev != tg {
			t.Fatalf("%+v %+v: after %d clearings at %s, target %s", s, c, limit, s.Prev, tg)
		}
		if got := Clear(s, c); got != tg {
			t.Fatalf("settled price moved: %s -> %s", tg, got)
		}
	}
}

func TestConvergenceSpeed(t *testing.T) {
	// From the floor to on-demand of $20/h with the defaults: ten steps
	// of at most $2, then a quarter of the remaining gap at a time.
	s := Supply{Capacity: 8, Free: 0, OnDemandPrice: money.MustParse("20")}
	s.Prev = Floor(s.OnDemandPrice, DefaultConfig())
	n := 0
	for ; s.Prev != s.OnDemandPrice; n++ {
		next := Clear(s, DefaultConfig())
		if n == 0 && next-s.Prev != money.MustParse("2") {
			t.Errorf("first step %s, want the max step 2.00", next-s.Prev)
		}
		s.Prev = next
	}
	if n > 80 {
		t.Errorf("%d clearings to converge", n)
	}
	t.Logf("floor to on-demand in %d clearings", n)
}

func TestFloorWhenEmpty(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for i := 0; i < 10_000; i++ {
		s, c := randSupply(r), randConfig(r)
		s.Capacity = 1 + r.IntN(200)
		s.Free, s.SpotRunning, s.SpotPending, s.OnDemandPending, s.Reserved, s.Prev = s.Capacity, 0, 0, 0, 0, 0
		if got, want := Clear(s, c), Floor(s.OnDemandPrice, c); got != want {
			t.Fatalf("%+v %+v: empty pool clears at %s, floor %s", s, c, got, want)
		}
	}
}

func TestDeterministic(t *testing.T) {
	gen := func() []money.Micros {
		r := rand.New(rand.NewPCG(11, 12))
		ss := make([]Supply, 5_000)
		for i := range ss {
			ss[i] = randSupply(r)
		}
		return ClearAll(ss, DefaultConfig(), nil)
	}
	a, b := gen(), gen()
	if len(a) != 5_000 || fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("ClearAll is not deterministic")
	}
	r := rand.New(rand.NewPCG(11, 12))
	for i := range a {
		if s := randSupply(r); Clear(s, DefaultConfig()) != a[i] {
			t.Fatalf("pool %d: ClearAll %s, Clear %s", i, a[i], Clear(s, DefaultConfig()))
		}
	}
}

func TestClearAllReusesOut(t *testing.T) {
	ss := []Supply{
		{Capacity: 4, Free: 4, OnDemandPrice: money.MustParse("10")},
		{Capacity: 4, Free: 0, OnDemandPrice: money.MustParse("10"), Prev: money.MustParse("5")},
	}
	out := make([]money.Micros, 7, 8)
	got := ClearAll(ss, Config{}, out)
	if len(got) != 2 || &got[0] != &out[0] {
		t.Fatalf("ClearAll did not reuse out: len %d", len(got))
	}
	if got[0] != money.MustParse("3") || got[1] != money.MustParse("6") {
		t.Errorf("prices %v, want [3.00 6.00]", got)
	}
	if n := testing.AllocsPerRun(100, func() { out = ClearAll(ss, DefaultConfig(), out) }); n != 0 {
		t.Errorf("%v allocations per ClearAll", n)
	}
}

func TestClearPrevOutOfRange(t *testing.T) {
	c := DefaultConfig()
	// On-demand price cut from $20 to $10 with the last price at $18: the
	// price comes back into range first, then steps toward the target.
	s := Supply{Capacity: 10, Free: 10, OnDemandPrice: money.MustParse("10"), Prev: money.MustParse("18")}
	if got := Clear(s, c); got != money.MustParse("9") {
		t.Errorf("clear %s, want 9.00 (10.00 less the max step)", got)
	}
	s.Prev = 1 // below the floor of 3.00
	if got := Clear(s, c); got != money.MustParse("3") {
		t.Errorf("clear %s, want the floor 3.00", got)
	}
}

func TestSmallestStep(t *testing.T) {
	// A one-micro gap still closes: smoothing would round the move to 0.
	s := Supply{Capacity: 10, Free: 10, OnDemandPrice: money.MustParse("10")}
	s.Prev = Target(s, DefaultConfig()) + 1
	if got := Clear(s, DefaultConfig()); got != s.Prev-1 {
		t.Errorf("clear %s from %s", got, s.Prev)
	}
	// A pool priced at 4 micros: MaxStepBP rounds to 0, MaxStep is 1.
	if got := MaxStep(4, DefaultConfig()); got != 1 {
		t.Errorf("max step %d", got)
	}
}

func TestRiskOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Supply
		want Risk
	}{
		{"no pressure", Supply{Capacity: 10, Free: 0, SpotRunning: 10}, 0},
		{"no pressure, spot pending", Supply{Capacity: 10, Free: 0, SpotRunning: 10, SpotPending: 5}, 0},
		{"quarter of free", Supply{Capacity: 10, Free: 8, OnDemandPending: 1, Reserved: 1}, 2500},
		{"at threshold", Supply{Capacity: 100, Free: 40, OnDemandPending: 30}, 7500},
		{"just above", Supply{Capacity: 100, Free: 40, OnDemandPending: 31}, 7750},
		{"all free claimed", Supply{Capacity: 10, Free: 4, Reserved: 4}, MaxRisk},
		{"shortfall", Supply{Capacity: 10, Free: 1, OnDemandPending: 6}, MaxRisk},
		{"no free room", Supply{Capacity: 10, Free: 0, OnDemandPending: 1}, MaxRisk},
		{"negative counts", Supply{Free: -3, OnDemandPending: -1}, 0},
	} {
		if got := RiskOf(tc.s); got != tc.want {
			t.Errorf("%s: risk %v, want %v", tc.name, got, tc.want)
		}
	}
	if RebalanceAt.Rebalance() || !(RebalanceAt + 1).Rebalance() {
		t.Error("Rebalance is not 'above RebalanceAt'")
	}
	if s := Risk(7550).String(); s != "75.50%" {
		t.Errorf("String %q", s)
	}
}

func TestPropertyRisk(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for i := 0; i < 100_000; i++ {
		s := randSupply(r)
		a := RiskOf(s)
		if a < 0 || a > MaxRisk {
			t.Fatalf("%+v: risk %v", s, a)
		}
		more := s
		switch r.IntN(3) {
		case 0:
			more.OnDemandPending++
		case 1:
			more.Reserved++
		default:
			more.Free = max(more.Free-1, 0)
		}
		if b := RiskOf(more); b < a {
			t.Fatalf("risk fell from %v to %v with more pressure\n%+v\n%+v", a, b, s, more)
		}
	}
}

func BenchmarkClearAll10kPools(b *testing.B) {
	r := rand.New(rand.NewPCG(15, 16))
	ss := make([]Supply, 10_000)
	for i := range ss {
		ss[i] = randSupply(r)
	}
	out := make([]money.Micros, 0, len(ss))
	c := DefaultConfig()
	b.ReportAllocs()
	for b.Loop() {
		out = ClearAll(ss, c, out)
	}
}
