package billing

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// A property test: small random ledgers with random price changes, spot
// histories and commitments, rated by Rate and by a brute-force rater that
// walks every second, must agree line by line and to the micro.

type randCase struct {
	in     Input
	prices []*cloud.Price
	spot   []cloud.SpotPrice
}

var (
	rOfferings = []string{"a.1x", "a.2x", "b.1x"}
	rZones     = []string{"z1", "z2"}
	rFamilies  = []string{"a", "a.1x", "a.2x", "b.1x", "b"}
	rEndpoints = []string{"ep-a", "ep-b"}
)

func randCents(rng *rand.Rand, lo, hi int) money.Micros {
	// Prices on a cent grid half of the time, so that equal prices meet.
	if rng.IntN(2) == 0 {
		return money.Micros(lo+rng.IntN(hi-lo)) * 10_000
	}
	return money.Micros(lo*10_000 + rng.IntN((hi-lo)*10_000))
}

func randTime(rng *rand.Rand, lo, hi time.Time) time.Time {
	d := hi.Sub(lo)
	if d <= 0 {
		return lo
	}
	t := lo.Add(time.Duration(rng.Int64N(int64(d/time.Second))) * time.Second)
	if rng.IntN(4) == 0 {
		// On the hour, or a second off it: where hours meet.
		t = t.Truncate(time.Hour).Add(time.Duration(rng.IntN(3)-1) * time.Second)
		if t.Before(lo) {
			t = lo
		}
		return t
	}
	if rng.IntN(3) == 0 {
		t = t.Add(time.Duration(rng.IntN(1e9)))
	}
	return t
}

func randomCase(seed uint64) randCase {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	start := d0.Add(time.Duration(rng.IntN(48)) * time.Hour)
	if rng.IntN(5) == 0 {
		start = start.Add(time.Duration(rng.IntN(3600)) * time.Second) // not on an hour
	}
	// Mostly a few hours; a quarter of the cases are long, with long
	// intervals, so that whole hours without changes repeat.
	scale := time.Duration(1)
	if rng.IntN(4) == 0 {
		scale = 8
	}
	p := Period{Start: start, End: start.Add(scale * (time.Duration(1+rng.IntN(3))*time.Hour + time.Duration(rng.IntN(2))*30*time.Minute))}
	var c randCase
	c.in.Period = p
	switch rng.IntN(4) {
	case 0: // zero: final
	case 1:
		c.in.AsOf = p.End.Add(time.Duration(rng.IntN(3600)) * time.Second)
	default:
		c.in.AsOf = randTime(rng, p.Start.Add(-10*time.Minute), p.End)
	}

	var id int64
	addPrice := func(pr *cloud.Price) {
		id++
		pr.ID = id
		c.prices = append(c.prices, pr)
	}
	for _, o := range rOfferings {
		addPrice(&cloud.Price{Kind: cloud.PriceCompute, Offering: o, Amount: randCents(rng, 100, 2000), EffectiveAt: p.Start.Add(-time.Duration(rng.IntN(7200)) * time.Second)})
	}
	for range rng.IntN(6) {
		zone := ""
		if rng.IntN(3) > 0 {
			zone = rZones[rng.IntN(len(rZones))]
		}
		eff := randTime(rng, p.Start.Add(-time.Hour), p.End.Add(time.Hour))
		if n := len(c.prices); rng.IntN(6) == 0 {
			eff = c.prices[n-1].EffectiveAt // the same time as another version
		}
		addPrice(&cloud.Price{Kind: cloud.PriceCompute, Offering: rOfferings[rng.IntN(len(rOfferings))], Zone: zone, Amount: randCents(rng, 100, 2000), EffectiveAt: eff})
	}
	addPrice(&cloud.Price{Kind: cloud.PriceVolume, Amount: randCents(rng, 1, 30), EffectiveAt: p.Start.Add(-time.Hour)})
	addPrice(&cloud.Price{Kind: cloud.PriceAddress, Amount: randCents(rng, 1, 30), EffectiveAt: p.Start.Add(-time.Hour)})
	for range rng.IntN(2) {
		addPrice(&cloud.Price{Kind: cloud.PriceVolume, Amount: randCents(rng, 1, 30), EffectiveAt: randTime(rng, p.Start, p.End)})
		addPrice(&cloud.Price{Kind: cloud.PriceAddress, Amount: randCents(rng, 1, 30), EffectiveAt: randTime(rng, p.Start, p.End)})
	}
	rng.Shuffle(len(c.prices), func(i, j int) { c.prices[i], c.prices[j] = c.prices[j], c.prices[i] })
	for _, o := range rOfferings {
		for _, z := range rZones {
			for range rng.IntN(6) {
				c.spot = append(c.spot, cloud.SpotPrice{Pool: cloud.Pool{Offering: o, Zone: z},
					Time: randTime(rng, p.Start.Add(-time.Hour), p.End), Price: randCents(rng, 50, 2500)})
			}
		}
	}
	sort.SliceStable(c.spot, func(i, j int) bool { return c.spot[i].Time.Before(c.spot[j].Time) })

	// The ledger: per resource, alternating On/Off at increasing times,
	// with repeated entries now and then.
	type entry struct {
		t time.Time
		u cloud.Usage
	}
	var es []entry
	nres := 0
	resource := func(u cloud.Usage) {
		nres++
		u.ResourceID = fmt.Sprintf("%s-%03d", u.Kind, nres)
		t := randTime(rng, p.Start.Add(-40*time.Minute), p.End)
		for i := range 1 + rng.IntN(4) {
			on := i%2 == 0
			u.On = on
			es = append(es, entry{t, u})
			if rng.IntN(8) == 0 { // at-least-once: a repeat
				es = append(es, entry{t.Add(time.Duration(rng.IntN(5)) * time.Second), u})
			}
			var d time.Duration
			switch rng.IntN(3) {
			case 0:
				d = time.Duration(rng.IntN(90)) * time.Second
			case 1:
				d = time.Duration(rng.IntN(1800)) * time.Second
			default:
				d = scale * time.Duration(rng.IntN(3*3600)) * time.Second
			}
			t = t.Add(d + time.Duration(rng.IntN(1e9)))
			if rng.IntN(4) == 0 {
				t = t.Truncate(time.Hour).Add(time.Hour + time.Duration(rng.IntN(3)-1)*time.Second)
			}
			if rng.IntN(10) == 0 {
				t = t.Add(time.Duration(rng.IntN(5)) * time.Second)
				es = append(es, entry{t, cloud.Usage{TenantID: u.TenantID, Kind: u.Kind, ResourceID: u.ResourceID, On: false}}) // stray Off
			}
		}
	}
	for _, tenant := range []string{"t1", "t2", "t3"} {
		for range rng.IntN(5) {
			m := cloud.MarketOnDemand
			if rng.IntN(3) == 0 {
				m = cloud.MarketSpot
			}
			// A third of the instances are endpoint workers: ep-a (whose
			// name is known) or ep-b (whose name is not).
			ep := ""
			if rng.IntN(3) == 0 {
				ep = rEndpoints[rng.IntN(len(rEndpoints))]
			}
			resource(cloud.Usage{TenantID: tenant, Kind: cloud.UsageCompute, Offering: rOfferings[rng.IntN(len(rOfferings))],
				Zone: rZones[rng.IntN(len(rZones))], Market: m, Quantity: 1, EndpointID: ep})
		}
		for range rng.IntN(2) {
			resource(cloud.Usage{TenantID: tenant, Kind: cloud.UsageVolume, Quantity: int64(1 + rng.IntN(1000))})
		}
		for range rng.IntN(2) {
			resource(cloud.Usage{TenantID: tenant, Kind: cloud.UsageAddress, Quantity: 1})
		}
		for range rng.IntN(4) {
			cm := &cloud.Commitment{ID: fmt.Sprintf("c-%02d", rng.IntN(100)), TenantID: tenant, Offering: rFamilies[rng.IntN(len(rFamilies))],
				Quantity: 1 + rng.IntN(2)}
			if rng.IntN(2) == 0 {
				cm.Zone = rZones[rng.IntN(len(rZones))]
			}
			if rng.IntN(2) == 0 {
				cm.Plan = cloud.PlanReservation
			} else {
				cm.Plan, cm.UsageRate = cloud.PlanRetainer, randCents(rng, 0, 1500)
			}
			if rng.IntN(2) == 0 {
				cm.HourlyFee = randCents(rng, 1, 1000)
			}
			if rng.IntN(3) == 0 {
				cm.UpfrontFee = randCents(rng, 1, 100000)
			}
			cm.Start = randTime(rng, p.Start.Add(-time.Hour), p.End.Add(10*time.Minute))
			cm.End = cm.Start.Add(scale * time.Duration(600+rng.IntN(4*3600)) * time.Second)
			if rng.IntN(4) == 0 {
				cm.End = cm.End.Add(time.Duration(rng.IntN(1e9)))
			}
			c.in.Commitments = append(c.in.Commitments, cm)
		}
	}
	sort.SliceStable(es, func(i, j int) bool { return es[i].t.Before(es[j].t) })
	for i, e := range es {
		if !e.t.Before(p.End) {
			continue
		}
		u := e.u
		u.ID, u.Time = int64(i+1), e.t
		c.in.Usage = append(c.in.Usage, &u)
	}
	c.in.Prices = NewPriceBook(c.prices, c.spot)
	c.in.Endpoints = map[string]string{"ep-a": "alpha"}
	return c
}

type refKey struct {
	cat                           Category
	model, offering, zone, commit string
	price                         money.Micros
	endpoint                      string
}

type refResult struct {
	lines    map[string]map[refKey]int64
	coverage map[string]map[int64]int64
	// instSeconds counts the instance-seconds of compute per tenant.
	instSeconds map[string]int64
}

// refRate rates per second, straight from the rules.
func refRate(t *testing.T, in Input) (*refResult, error) {
	book := in.Prices
	asOf := in.AsOf
	if asOf.IsZero() {
		asOf = in.Period.End
	}
	cut := asOf
	if cut.After(in.Period.End) {
		cut = in.Period.End
	}
	start, end := in.Period.Start.Unix(), in.Period.End.Unix()
	cutSec := max(start, cut.Unix())
	sec := func(s int64) time.Time { return time.Unix(s, 0) }

	type riv struct {
		on         *cloud.Usage
		start, end time.Time
		closed     bool
	}
	open := map[string]*cloud.Usage{}
	var ivs []riv
	for _, u := range in.Usage {
		if !u.Time.Before(cut) {
			continue
		}
		k := string(u.Kind) + "/" + u.ResourceID
		switch {
		case u.On && open[k] == nil:
			open[k] = u
		case !u.On && open[k] != nil:
			ivs = append(ivs, riv{open[k], open[k].Time, u.Time, true})
			delete(open, k)
		}
	}
	for _, u := range open {
		ivs = append(ivs, riv{u, u.Time, cut, false})
	}

	res := &refResult{lines: map[string]map[refKey]int64{}, coverage: map[string]map[int64]int64{}, instSeconds: map[string]int64{}}
	add := func(tenant string, k refKey, q int64) {
		if res.lines[tenant] == nil {
			res.lines[tenant] = map[refKey]int64{}
		}
		res.lines[tenant][k] += q
	}
	spotPrice := func(o, z string, s int64) (money.Micros, bool) {
		if p, ok := book.Spot(cloud.Pool{Offering: o, Zone: z}, sec(s)); ok {
			if odp, ok := book.Compute(o, z, sec(s)); ok && p > odp {
				t.Errorf("spot %s/%s at %d: %s above on demand %s", o, z, s, p, odp)
			}
			return p, true
		}
		return book.Compute(o, z, sec(s))
	}
	type instSec struct {
		inst, offering, zone, tenant, ep string
		s                                int64
		price                            money.Micros
	}
	hours := map[int64][]instSec{}
	for _, iv := range ivs {
		u := iv.on
		fs, fe := iv.start.Unix(), iv.end.Unix()
		for s := max(fs, start); s < min(fe, cutSec); s++ {
			switch u.Kind {
			case cloud.UsageCompute:
				res.instSeconds[u.TenantID]++
				if u.Market == cloud.MarketSpot {
					p, ok := spotPrice(u.Offering, u.Zone, s)
					if !ok {
						return nil, fmt.Errorf("no price")
					}
					add(u.TenantID, refKey{CategoryCompute, ModelSpot, u.Offering, u.Zone, "", p, u.EndpointID}, 1)
					continue
				}
				p, ok := book.Compute(u.Offering, u.Zone, sec(s))
				if !ok {
					return nil, fmt.Errorf("no price")
				}
				h := s - mod(s, 3600)
				hours[h] = append(hours[h], instSec{u.ResourceID, u.Offering, u.Zone, u.TenantID, u.EndpointID, s, p})
			case cloud.UsageVolume:
				p, ok := book.Volume(sec(s))
				if !ok {
					return nil, fmt.Errorf("no price")
				}
				add(u.TenantID, refKey{CategoryVolume, "", "", "", "", p, ""}, u.Quantity)
			case cloud.UsageAddress:
				p, ok := book.Address(sec(s))
				if !ok {
					return nil, fmt.Errorf("no price")
				}
				add(u.TenantID, refKey{CategoryAddress, "", "", "", "", p, ""}, 1)
			}
		}
		if u.Kind == cloud.UsageCompute && iv.closed && fe-fs < 60 && fe >= start && fe < end {
			model, p, ok := ModelOnDemand, money.Micros(0), false
			if u.Market == cloud.MarketSpot {
				model = ModelSpot
				p, ok = spotPrice(u.Offering, u.Zone, fe)
			} else {
				p, ok = book.Compute(u.Offering, u.Zone, sec(fe))
			}
			if !ok {
				return nil, fmt.Errorf("no price")
			}
			add(u.TenantID, refKey{CategoryMinimum, model, u.Offering, u.Zone, "", p, u.EndpointID}, 60-(fe-fs))
		}
	}
	// Coverage, hour by hour, one instance-second at a time.
	type pair struct {
		x      int
		c      *cloud.Commitment
		saving money.Micros
	}
	for h, xs := range hours {
		var pairs []pair
		for i, x := range xs {
			for _, c := range in.Commitments {
				if c.TenantID != x.tenant || c.Quantity <= 0 || !(x.offering == c.Offering || len(x.offering) > len(c.Offering) && x.offering[:len(c.Offering)+1] == c.Offering+".") ||
					c.Zone != "" && c.Zone != x.zone || x.s < c.Start.Unix() || x.s >= c.End.Unix() || x.price < c.UsageRate {
					continue
				}
				pairs = append(pairs, pair{i, c, x.price - c.UsageRate})
			}
		}
		sort.Slice(pairs, func(i, j int) bool {
			a, b := pairs[i], pairs[j]
			if a.saving != b.saving {
				return a.saving > b.saving
			}
			if a.c.ID != b.c.ID {
				return a.c.ID < b.c.ID
			}
			if xs[a.x].inst != xs[b.x].inst {
				return xs[a.x].inst < xs[b.x].inst
			}
			return xs[a.x].s < xs[b.x].s
		})
		capLeft := map[*cloud.Commitment]int64{}
		for _, c := range in.Commitments {
			capLeft[c] = int64(c.Quantity) * overlap(h, h+3600, c.Start.Unix(), c.End.Unix())
		}
		covered := make([]bool, len(xs))
		for _, p := range pairs {
			if covered[p.x] || capLeft[p.c] == 0 {
				continue
			}
			covered[p.x] = true
			capLeft[p.c]--
			x := xs[p.x]
			add(x.tenant, refKey{CategoryCompute, planModel(p.c.Plan), x.offering, x.zone, p.c.ID, p.c.UsageRate, x.ep}, 1)
			if res.coverage[p.c.ID] == nil {
				res.coverage[p.c.ID] = map[int64]int64{}
			}
			res.coverage[p.c.ID][h]++
		}
		for i, x := range xs {
			if !covered[i] {
				add(x.tenant, refKey{CategoryCompute, ModelOnDemand, x.offering, x.zone, "", x.price, x.ep}, 1)
			}
		}
	}
	for _, c := range in.Commitments {
		n := int64(0)
		for s := start; s < cutSec; s++ {
			if s >= c.Start.Unix() && s < c.End.Unix() {
				n++
			}
		}
		if c.HourlyFee != 0 && n > 0 {
			add(c.TenantID, refKey{CategoryCommitmentFee, planModel(c.Plan), c.Offering, c.Zone, c.ID, c.HourlyFee, ""}, int64(c.Quantity)*n)
		}
		if c.UpfrontFee != 0 && !c.Start.Before(in.Period.Start) && c.Start.Before(in.Period.End) && !c.Start.After(asOf) {
			add(c.TenantID, refKey{CategoryCommitmentUpfront, planModel(c.Plan), c.Offering, c.Zone, c.ID, c.UpfrontFee, ""}, 1)
		}
	}
	return res, nil
}

func refTotal(lines map[refKey]int64) money.Micros {
	var total money.Micros
	for k, q := range lines {
		den := int64(money.SecondsPerHour)
		switch k.cat {
		case CategoryVolume:
			den = money.SecondsPerMonth
		case CategoryCommitmentUpfront:
			den = 1
		}
		a, err := money.MulDiv(k.price, q, den)
		if err != nil {
			panic(err)
		}
		total += a
	}
	return total
}

func TestRateMatchesPerSecondReference(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 60
	}
	covered := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		c := randomCase(seed)
		ref, rerr := refRate(t, c.in)
		res, err := Rate(c.in)
		if (err != nil) != (rerr != nil) {
			t.Fatalf("seed %d: Rate error %v, reference error %v", seed, err, rerr)
		}
		if err != nil {
			continue
		}
		got := map[string]map[refKey]int64{}
		for _, inv := range res.Invoices {
			checkInvoice(t, inv)
			m := map[refKey]int64{}
			var computeSecs int64
			for _, l := range inv.Lines {
				k := refKey{l.Category, l.Model, l.Offering, l.Zone, l.CommitmentID, l.UnitPrice, l.EndpointID}
				if _, dup := m[k]; dup {
					t.Errorf("seed %d: %s: two lines for %+v", seed, inv.TenantID, k)
				}
				m[k] = l.Quantity
				if l.Category == CategoryCompute {
					computeSecs += l.Quantity
				}
				checkEndpointLine(t, seed, c.in.Endpoints, l)
			}
			// An endpoint's lines are next to each other, after the
			// lines of instances that are no endpoint's, in their category.
			for i := 1; i < len(inv.Lines); i++ {
				a, b := inv.Lines[i-1], inv.Lines[i]
				if a.Category == b.Category && a.EndpointID != b.EndpointID && a.Endpoint > b.Endpoint {
					t.Errorf("seed %d: %s: line %q before %q", seed, inv.TenantID, a.Description, b.Description)
				}
			}
			got[inv.TenantID] = m
			// Per instance no second is billed twice, and none is missed.
			if computeSecs != ref.instSeconds[inv.TenantID] {
				t.Errorf("seed %d: %s: %d compute seconds billed, %d instance-seconds ran", seed, inv.TenantID, computeSecs, ref.instSeconds[inv.TenantID])
			}
			if want := refTotal(ref.lines[inv.TenantID]); inv.Total != want {
				t.Errorf("seed %d: %s: total %s, reference %s", seed, inv.TenantID, inv.Total, want)
			}
		}
		if !reflect.DeepEqual(got, ref.lines) {
			for tenant := range ref.lines {
				if !reflect.DeepEqual(got[tenant], ref.lines[tenant]) {
					t.Errorf("seed %d: %s:\n got %v\nwant %v", seed, tenant, got[tenant], ref.lines[tenant])
				}
			}
			t.Fatalf("seed %d: lines differ (tenants %d vs %d)", seed, len(got), len(ref.lines))
		}
		gotCov := map[string]map[int64]int64{}
		quantity := map[string]int{}
		for _, cm := range c.in.Commitments {
			quantity[cm.ID] = max(quantity[cm.ID], cm.Quantity)
		}
		for _, h := range res.Coverage {
			if gotCov[h.CommitmentID] == nil {
				gotCov[h.CommitmentID] = map[int64]int64{}
			}
			gotCov[h.CommitmentID][h.Hour.Unix()] += h.Seconds
			if h.Seconds <= 0 || h.Seconds > int64(quantity[h.CommitmentID])*3600 || h.Hour.Unix()%3600 != 0 {
				t.Errorf("seed %d: coverage %+v (quantity %d)", seed, h, quantity[h.CommitmentID])
			}
			covered++
		}
		if !reflect.DeepEqual(gotCov, ref.coverage) {
			t.Fatalf("seed %d: coverage\n got %v\nwant %v", seed, gotCov, ref.coverage)
		}
	}
	if covered == 0 {
		t.Error("no case covered anything")
	}
}

// PriceBook lookups agree with a linear scan of the versions.
func TestPriceBookMatchesScan(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		c := randomCase(seed)
		rng := rand.New(rand.NewPCG(seed, 7))
		scan := func(kind cloud.PriceKind, o, z string, at time.Time) (money.Micros, bool) {
			var best *cloud.Price
			for _, p := range c.prices {
				if p.Kind != kind || p.Offering != o || p.Zone != z || p.EffectiveAt.After(at) {
					continue
				}
				if best == nil || p.EffectiveAt.After(best.EffectiveAt) || p.EffectiveAt.Equal(best.EffectiveAt) && p.ID > best.ID {
					best = p
				}
			}
			if best == nil {
				return 0, false
			}
			return best.Amount, true
		}
		for range 200 {
			at := randTime(rng, c.in.Period.Start.Add(-2*time.Hour), c.in.Period.End.Add(2*time.Hour))
			o, z := rOfferings[rng.IntN(len(rOfferings))], rZones[rng.IntN(len(rZones))]
			want, wok := scan(cloud.PriceCompute, o, z, at)
			if !wok {
				want, wok = scan(cloud.PriceCompute, o, "", at)
			}
			if got, ok := c.in.Prices.Compute(o, z, at); got != want || ok != wok {
				t.Fatalf("seed %d: Compute(%s, %s, %s) = %s, %v; want %s, %v", seed, o, z, at, got, ok, want, wok)
			}
			var sp *cloud.SpotPrice
			for i := range c.spot {
				if s := &c.spot[i]; s.Pool == (cloud.Pool{Offering: o, Zone: z}) && !s.Time.After(at) {
					sp = s
				}
			}
			got, ok := c.in.Prices.Spot(cloud.Pool{Offering: o, Zone: z}, at)
			switch {
			case sp == nil && ok:
				t.Fatalf("seed %d: spot price before any point", seed)
			case sp != nil && (!ok || wok && got != min(sp.Price, want) || !wok && got != sp.Price):
				t.Fatalf("seed %d: Spot(%s/%s, %s) = %s, want min(%s, %s)", seed, o, z, at, got, sp.Price, want)
			}
			if got, ok := c.in.Prices.Volume(at); func() bool { w, wok := scan(cloud.PriceVolume, "", "", at); return w != got || wok != ok }() {
				t.Fatalf("seed %d: Volume(%s) = %s, %v", seed, at, got, ok)
			}
			if got, ok := c.in.Prices.Address(at); func() bool { w, wok := scan(cloud.PriceAddress, "", "", at); return w != got || wok != ok }() {
				t.Fatalf("seed %d: Address(%s) = %s, %v", seed, at, got, ok)
			}
		}
	}
}

// checkEndpointLine checks how a line shows its endpoint: only compute
// and minimum lines have one, named as names says (else by its ID), and
// the description starts with it.
func checkEndpointLine(t *testing.T, seed uint64, names map[string]string, l Line) {
	t.Helper()
	if l.EndpointID == "" {
		if l.Endpoint != "" || strings.HasPrefix(l.Description, "endpoint ") {
			t.Errorf("seed %d: line %+v names an endpoint without its ID", seed, l)
		}
		return
	}
	if l.Category != CategoryCompute && l.Category != CategoryMinimum {
		t.Errorf("seed %d: %s line of endpoint %s", seed, l.Category, l.EndpointID)
	}
	want := names[l.EndpointID]
	if want == "" {
		want = l.EndpointID
	}
	if l.Endpoint != want || !strings.HasPrefix(l.Description, "endpoint "+want+": ") {
		t.Errorf("seed %d: line %+v: want endpoint %q named at the start of the description", seed, l, want)
	}
}
