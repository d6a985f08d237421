package advise

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/money"
)

// A property test: random workloads against random markets over the
// built-in catalog. Whatever the inputs, every option must hold the
// model, obey the article's rules, cost what a reference computation in
// exact rationals says, respect the deadline and the budget, and be
// ranked; every offering must be accounted for.

func randWorkload(rng *rand.Rand) Workload {
	w := Workload{
		Precision: Precisions[rng.IntN(len(Precisions))],
		Task:      []Task{Training, Inference}[rng.IntN(2)],
		Nodes:     []int{1, 1, 1, 2, 3, 8}[rng.IntN(6)],
		PerDay:    time.Duration(1+rng.IntN(24*60)) * time.Minute,
		Days:      1 + rng.IntN(120),
	}
	if w.Task == Training && !w.Precision.trainable() {
		w.Precision = BF16
	}
	switch rng.IntN(3) {
	case 0:
		w.MemoryMiB = 1 + rng.Int64N(2_000*1024)
	default:
		w.Params = []int64{125_000_000, 1_000_000_000, 3_000_000_000, 7_000_000_000, 13_000_000_000, 70_000_000_000, 405_000_000_000}[rng.IntN(7)]
	}
	if rng.IntN(2) == 0 {
		w.CheckpointInterval = time.Duration(1+rng.IntN(240)) * time.Minute
	}
	if rng.IntN(4) == 0 {
		w.Deadline = time.Duration(w.Days)*24*time.Hour + time.Duration(rng.IntN(48)-24)*time.Hour
		w.Deadline = max(w.Deadline, time.Hour)
	}
	if rng.IntN(4) == 0 {
		w.Budget = money.Micros(1 + rng.Int64N(100_000)*int64(money.Unit))
	}
	return w
}

func randMarket(rng *rand.Rand, cat *catalog.Catalog) *MarketView {
	m := &MarketView{Source: "random", Offerings: map[string]Quote{},
		VolumePerGiBMonth: money.Micros(rng.Int64N(200_000)), Terms: CommitmentTerms{NoCommitments: rng.IntN(5) == 0}}
	zones := []string{"z1", "z2", "z3"}
	for _, o := range cat.Offerings() {
		if rng.IntN(10) == 0 {
			continue
		}
		q := Quote{OnDemand: money.Micros(rng.Int64N(30 * int64(money.Unit)))}
		for _, z := range zones[:rng.IntN(len(zones)+1)] {
			q.Spot = append(q.Spot, SpotQuote{Zone: z, Price: money.Micros(rng.Int64N(int64(q.OnDemand) + 1)),
				ReclaimRateBP: rng.Int64N(20_000), RateKnown: rng.IntN(4) != 0})
		}
		if rng.IntN(3) != 0 {
			h := rng.IntN(5)
			q.Availability = &Availability{Hosts: h, FitsNow: rng.IntN(h + 1)}
		}
		m.Offerings[o.Name] = q
	}
	return m
}

// cost is price × seconds / 3600 in exact rationals, rounded half away
// from zero to a micro, as money.MulDiv rounds.
func refCost(price money.Micros, seconds int64) money.Micros {
	r := new(big.Rat).SetFrac(new(big.Int).Mul(big.NewInt(int64(price)), big.NewInt(seconds)), big.NewInt(3600))
	r.Add(r, big.NewRat(1, 2))
	q := new(big.Int).Quo(r.Num(), r.Denom()) // non-negative: floor
	return money.Micros(q.Int64())
}

func TestAdviseProperties(t *testing.T) {
	cat := catalog.Default()
	const seed = 12
	rng := rand.New(rand.NewPCG(seed, 2026))
	for i := range 400 {
		w := randWorkload(rng)
		m := randMarket(rng, cat)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			a, err := Advise(w, m, cat)
			if err != nil {
				t.Fatalf("seed %d: %+v: %v", seed, w, err)
			}
			checkAdvice(t, cat, w, m, a)
			b, _ := Advise(w, m, cat)
			if !reflect.DeepEqual(a, b) {
				t.Error("two calls gave different advice")
			}
		})
	}
}

func checkAdvice(t *testing.T, cat *catalog.Catalog, w Workload, m *MarketView, a *Advice) {
	t.Helper()
	need := a.Need
	accounted := map[string]bool{}
	for _, e := range a.Excluded {
		accounted[e.Offering] = true
		if e.Reason == "" || e.Dimension == "" {
			t.Errorf("exclusion without a reason: %+v", e)
		}
	}
	for i, o := range a.Options {
		accounted[o.Offering] = true
		if o.Rank != i+1 {
			t.Errorf("option %d has rank %d", i, o.Rank)
		}
		// Memory: the model fits the GPUs it is split over.
		if o.Split < 1 || o.Split > o.GPUs || int64(o.Split)*o.GPUMemoryMiB < need.PerNodeMiB {
			t.Errorf("%s: %d of %d × %d MiB for %d MiB per node", o.Offering, o.Split, o.GPUs, o.GPUMemoryMiB, need.PerNodeMiB)
		}
		if (need.Large || o.Split > 1) && o.GPUMemoryMiB < LargeModelMiB {
			t.Errorf("%s: %d MiB GPUs for a large or split model", o.Offering, o.GPUMemoryMiB)
		}
		md := modelOf(t, cat, o.Offering)
		if w.Task == Training && o.Split > 1 && md.LinkGBps() == 0 {
			t.Errorf("%s: training split over PCIe", o.Offering)
		}
		if w.Nodes > 1 && (md.LinkGBps() == 0 || o.GPUs < hostGPUs) {
			t.Errorf("%s: %d nodes on a non-InfiniBand offering", o.Offering, w.Nodes)
		}
		if SupportOf(ArchOf(md.Name), w.Precision) == Unsupported {
			t.Errorf("%s: %s unsupported on %s", o.Offering, w.Precision, md.Name)
		}
		// Money.
		if o.Compute < 0 || o.Storage < 0 || o.Total != o.Compute+o.Storage {
			t.Errorf("%s %s: compute %s storage %s total %s", o.Offering, o.Mix, o.Compute, o.Storage, o.Total)
		}
		q := m.Offerings[o.Offering]
		if o.OnDemandNodes+o.SpotNodes != w.Nodes {
			t.Errorf("%s %s: %d + %d nodes of %d", o.Offering, o.Mix, o.OnDemandNodes, o.SpotNodes, w.Nodes)
		}
		secs := need.RunSeconds + o.LostSeconds
		if od := refCost(q.OnDemand, int64(w.Nodes)*need.RunSeconds); o.Mix != OnDemand && o.Compute.Round(cent) >= od.Round(cent) {
			t.Errorf("%s %s: %s, no less than on demand %s", o.Offering, o.Mix, o.Compute, od)
		}
		switch o.Mix {
		case OnDemand:
			if want := refCost(q.OnDemand, int64(w.Nodes)*need.RunSeconds); o.Compute != want {
				t.Errorf("%s on demand: %s, want %s", o.Offering, o.Compute, want)
			}
		case Spot, OnDemandSpot:
			if !w.Interruptible() {
				t.Errorf("%s: spot for a workload that cannot be interrupted", o.Offering)
			}
			var pool *SpotQuote
			for i := range q.Spot {
				if q.Spot[i].Zone == o.Zone {
					pool = &q.Spot[i]
				}
			}
			if pool == nil {
				t.Fatalf("%s: no pool %q", o.Offering, o.Zone)
			}
			rate := pool.ReclaimRateBP
			if !pool.RateKnown {
				rate = DefaultReclaimRateBP
			}
			jobRate := int64(o.SpotNodes) * rate
			ckpt := int64(w.CheckpointInterval / time.Second)
			if jobRate*ckpt >= bpHour {
				t.Errorf("%s: spot where a reclaim comes before the first checkpoint", o.Offering)
			}
			lost := new(big.Rat).SetFrac(big.NewInt(need.RunSeconds*jobRate*ckpt), big.NewInt(2*bpHour))
			if f, _ := lost.Float64(); float64(o.LostSeconds) < f-1 || float64(o.LostSeconds) > f+1 {
				t.Errorf("%s: lost %d s, want about %.1f", o.Offering, o.LostSeconds, f)
			}
			want := refCost(pool.Price, int64(o.SpotNodes)*secs) + refCost(q.OnDemand, int64(o.OnDemandNodes)*secs)
			if o.Compute != want {
				t.Errorf("%s %s: %s, want %s", o.Offering, o.Mix, o.Compute, want)
			}
		case Reserved, Retainer:
			if m.Terms.NoCommitments {
				t.Errorf("%s: %s in a market without commitments", o.Offering, o.Mix)
			}
		}
		if w.Deadline > 0 && o.CompletionSeconds > int64(w.Deadline/time.Second) {
			t.Errorf("%s: done in %d s, past the deadline", o.Offering, o.CompletionSeconds)
		}
		if w.Budget > 0 && o.Total > w.Budget {
			t.Errorf("%s: %s over the budget", o.Offering, o.Total)
		}
		for _, d := range []Dimension{DimCompute, DimNetwork, DimStorage, DimPricing, DimAvailability} {
			if !hasReason(o, d, "") {
				t.Errorf("%s %s: no %s reason", o.Offering, o.Mix, d)
			}
		}
		// Ranking: fitting (or unknown) first, then by total.
		if i > 0 {
			p := a.Options[i-1]
			pg, og := p.FitsNow == FitsNo, o.FitsNow == FitsNo
			if pg && !og || pg == og && p.Total > o.Total {
				t.Errorf("rank %d (%s, %s) after rank %d (%s, %s)", o.Rank, o.FitsNow, o.Total, p.Rank, p.FitsNow, p.Total)
			}
		}
		if av := q.Availability; av != nil && av.Hosts == 0 {
			t.Errorf("%s: no host could run it", o.Offering)
		}
	}
	for _, o := range cat.Offerings() {
		if !accounted[o.Name] && o.Mode != catalog.ModeCPU {
			// An offering with neither options nor an exclusion is
			// one whose every mix was left out as not applicable,
			// which cannot happen: on demand always applies.
			t.Errorf("offering %s is neither an option nor excluded", o.Name)
		}
	}
}
