package billing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// benchInput is a month of a large cloud: 1,000 tenants, 1,000,000 ledger
// entries (500,000 On/Off pairs: compute across 50 offerings × 4 zones,
// 30% of it spot, volumes and addresses), ~60 price versions, a 10-minute
// spot history for 200 pools and 200 commitments.
func benchInput(tb testing.TB) Input {
	rng := rand.New(rand.NewPCG(2026, 12))
	p := dec
	epoch := time.Unix(0, 0).UTC()
	zones := []string{"z1", "z2", "z3", "z4"}
	var offerings []string
	for f := range 10 {
		for _, size := range []string{"1x", "2x", "4x", "8x", "metal"} {
			offerings = append(offerings, fmt.Sprintf("f%d.%s", f, size))
		}
	}
	var prices []*cloud.Price
	odPrice := map[string]money.Micros{}
	for _, o := range offerings {
		amt := money.Micros(1+rng.IntN(40)) * money.Unit / 2
		odPrice[o] = amt
		prices = append(prices, &cloud.Price{Kind: cloud.PriceCompute, Offering: o, Amount: amt, EffectiveAt: epoch})
	}
	for range 8 { // zonal prices and changes during the month
		o := offerings[rng.IntN(len(offerings))]
		zone := ""
		if rng.IntN(2) == 0 {
			zone = zones[rng.IntN(len(zones))]
		}
		prices = append(prices, &cloud.Price{Kind: cloud.PriceCompute, Offering: o, Zone: zone, Amount: odPrice[o] * 9 / 10,
			EffectiveAt: randTime(rng, p.Start.Add(-day(5)), p.End)})
	}
	prices = append(prices,
		&cloud.Price{Kind: cloud.PriceVolume, Amount: usd("0.08"), EffectiveAt: epoch},
		&cloud.Price{Kind: cloud.PriceVolume, Amount: usd("0.07"), EffectiveAt: p.Start.Add(day(15))},
		&cloud.Price{Kind: cloud.PriceAddress, Amount: usd("0.005"), EffectiveAt: epoch})
	for i, pr := range prices {
		pr.ID = int64(i + 1)
	}

	// Spot: a point every 10 minutes; the price moves a cent or two at a
	// tenth of them, between 20% and 110% of on demand (capped at it).
	var spot []cloud.SpotPrice
	for _, o := range offerings {
		for _, z := range zones {
			pool := cloud.Pool{Offering: o, Zone: z}
			pr := odPrice[o] * 4 / 10
			for t := p.Start.Add(-10 * time.Minute); t.Before(p.End); t = t.Add(10 * time.Minute) {
				if rng.IntN(10) == 0 {
					pr += money.Micros(rng.IntN(5)-2) * 10_000
					pr = max(odPrice[o]/5, min(pr, odPrice[o]*11/10))
				}
				spot = append(spot, cloud.SpotPrice{Pool: pool, Time: t, Price: pr})
			}
		}
	}

	const tenants, pairsPerTenant = 1000, 500
	type rec struct {
		t time.Time
		u cloud.Usage
	}
	recs := make([]rec, 0, 2*tenants*pairsPerTenant)
	month := p.End.Sub(p.Start)
	for ti := range tenants {
		tenant := fmt.Sprintf("t%04d", ti)
		for j := range pairsPerTenant {
			u := cloud.Usage{TenantID: tenant, ResourceID: fmt.Sprintf("%s-r%03d", tenant, j), Quantity: 1}
			var dur time.Duration
			switch k := rng.IntN(20); {
			case k < 14: // compute: 10 s to 3 days, log-uniform
				u.Kind = cloud.UsageCompute
				u.Offering, u.Zone, u.Market = offerings[rng.IntN(len(offerings))], zones[rng.IntN(len(zones))], cloud.MarketOnDemand
				if rng.IntN(10) < 3 {
					u.Market = cloud.MarketSpot
				}
				dur = time.Duration(10 * math.Exp(rng.Float64()*math.Log(3*86400/10)) * float64(time.Second))
			case k < 17:
				u.Kind, u.Quantity = cloud.UsageVolume, int64(10+rng.IntN(2000))
				dur = time.Hour + time.Duration(rng.Int64N(int64(30*24*time.Hour)))
			default:
				u.Kind = cloud.UsageAddress
				dur = time.Hour + time.Duration(rng.Int64N(int64(30*24*time.Hour)))
			}
			// On/Off both in the ledger, the On possibly in November.
			span := month + 24*time.Hour - dur
			start := p.Start.Add(-24*time.Hour + time.Duration(rng.Int64N(int64(span))))
			on, off := u, u
			on.On = true
			recs = append(recs, rec{start, on}, rec{start.Add(dur), off})
		}
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].t.Before(recs[j].t) })
	usage := make([]*cloud.Usage, len(recs))
	store := make([]cloud.Usage, len(recs))
	for i := range recs {
		store[i] = recs[i].u
		store[i].ID, store[i].Time = int64(i+1), recs[i].t
		usage[i] = &store[i]
	}

	var commits []*cloud.Commitment
	for i := range 200 {
		c := &cloud.Commitment{ID: fmt.Sprintf("c-%03d", i), TenantID: fmt.Sprintf("t%04d", rng.IntN(150)), Quantity: 1 + rng.IntN(4)}
		o := offerings[rng.IntN(len(offerings))]
		if rng.IntN(2) == 0 {
			c.Offering = o[:2] // a family
		} else {
			c.Offering = o
		}
		if rng.IntN(2) == 0 {
			c.Zone = zones[rng.IntN(len(zones))]
		}
		if rng.IntN(2) == 0 {
			c.Plan, c.HourlyFee = cloud.PlanReservation, odPrice[o]*3/4
		} else {
			c.Plan, c.HourlyFee, c.UsageRate = cloud.PlanRetainer, odPrice[o]/10, odPrice[o]*7/10
		}
		c.Start = randTime(rng, p.Start.Add(-day(300)), p.End)
		c.End = c.Start.Add(OneYear)
		commits = append(commits, c)
	}
	return Input{Period: p, AsOf: p.End, Prices: NewPriceBook(prices, spot), Usage: usage, Commitments: commits}
}

func BenchmarkRateMonth(b *testing.B) {
	in := benchInput(b)
	b.ReportAllocs()
	b.ResetTimer()
	var lines, covered int
	for b.Loop() {
		res, err := Rate(in)
		if err != nil {
			b.Fatal(err)
		}
		lines, covered = 0, len(res.Coverage)
		for _, inv := range res.Invoices {
			lines += len(inv.Lines)
		}
	}
	b.ReportMetric(float64(lines), "lines")
	b.ReportMetric(float64(covered), "coverage-hours")
}
