package controller

import (
	"fmt"
	"maps"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/spot"
)

// marketRound is one round of the market's planning: what it read, the
// prices and supply it plans with (the round's clearing, or the last
// one's), and the plan it makes. Planning writes nothing, to the store or
// to the Market: the Market takes last and supply once the plan is
// applied.
type marketRound struct {
	m    *SpotMarket
	view FleetView
	ms   *marketSnap
	now  time.Time

	last   map[cloud.Pool]money.Micros
	supply map[cloud.Pool]spot.Supply
	// took is how long the clearing took, when the round cleared.
	took time.Duration

	plan  service.MarketPlan
	gates map[string]SpotGate
}

// plan plans one round over the fleet view and the snapshot: the clearing
// (when clearing), the gates of the pending spot instances, the notices
// and the spot-request moves.
func (m *SpotMarket) plan(view FleetView, ms *marketSnap, now time.Time, clearing bool) *marketRound {
	last := m.last
	if last == nil {
		last = ms.last
	}
	rd := &marketRound{m: m, view: view, ms: ms, now: now, last: last, supply: m.supply}
	if clearing {
		start := time.Now()
		rd.clear()
		rd.took = time.Since(start)
	}
	rd.gate()
	rd.watch()
	rd.drive()
	return rd
}

// clear computes every pool's supply and demand, clears the prices and
// plans to record the ones that changed.
func (rd *marketRound) clear() {
	ms, now := rd.ms, rd.now
	counts := rd.view.Supply()
	zonesOf := map[string][]string{}
	for _, p := range sortedPools(counts) {
		zonesOf[p.Offering] = append(zonesOf[p.Offering], p.Zone)
	}
	supply := map[cloud.Pool]*spot.Supply{}
	for p, c := range counts {
		od, ok := ms.prices.Compute(p.Offering, p.Zone, now)
		if !ok {
			continue // no on-demand price: no market
		}
		supply[p] = &spot.Supply{Pool: p, Capacity: c.Capacity, Free: c.Free, OnDemandPrice: od, Prev: rd.last[p]}
	}
	// Demand without a zone weighs on every zone of its offering.
	each := func(offering string, zones []string, f func(*spot.Supply)) {
		if len(zones) == 0 {
			zones = zonesOf[offering]
		}
		for _, z := range zones {
			if s := supply[cloud.Pool{Offering: offering, Zone: z}]; s != nil {
				f(s)
			}
		}
	}
	for _, in := range ms.spot {
		switch {
		case in.State == cloud.Pending:
			each(in.Offering, in.Zones, func(s *spot.Supply) { s.SpotPending++ })
		case in.State.Holds():
			each(in.Offering, []string{in.Zone}, func(s *spot.Supply) { s.SpotRunning++ })
		}
	}
	for _, in := range ms.pending {
		each(in.Offering, in.Zones, func(s *spot.Supply) { s.OnDemandPending++ })
	}
	for p, n := range rd.view.Reserved() {
		each(p.Offering, []string{p.Zone}, func(s *spot.Supply) { s.Reserved += n })
	}
	pools := sortedPools(supply)
	in := make([]spot.Supply, len(pools))
	for i, p := range pools {
		in[i] = *supply[p]
	}
	prices := spot.ClearAll(in, rd.m.Config, nil)
	last := maps.Clone(rd.last)
	if last == nil {
		last = map[cloud.Pool]money.Micros{}
	}
	rd.supply = make(map[cloud.Pool]spot.Supply, len(pools))
	for i, p := range pools {
		rd.supply[p] = in[i]
		if prices[i] != last[p] {
			rd.plan.Prices = append(rd.plan.Prices, cloud.SpotPrice{Pool: p, Time: now, Price: prices[i]})
			last[p] = prices[i]
		}
	}
	rd.last = last
}

// maxPrice is a request's max price in a pool: its own, or the on-demand
// price when it has none.
func maxPrice(r *cloud.SpotRequest, od money.Micros) money.Micros {
	if r.MaxPrice > 0 {
		return r.MaxPrice
	}
	return od
}

// gate finds, for every pending spot instance, the zones of its pool
// whose price is within the request's max price (nil: any zone, when the
// request has no max price), or why none is: the gates the scheduler
// places them by.
func (rd *marketRound) gate() {
	rd.gates = map[string]SpotGate{}
	for _, in := range rd.ms.spot {
		if in.State != cloud.Pending {
			continue
		}
		r := rd.ms.requests[in.SpotRequestID]
		if r == nil || r.MaxPrice == 0 {
			rd.gates[in.ID] = SpotGate{}
			continue
		}
		ok := []string{}
		cheapest := money.Micros(-1)
		for p, s := range rd.supply {
			if p.Offering != in.Offering || (len(in.Zones) > 0 && !contains(in.Zones, p.Zone)) {
				continue
			}
			price := rd.last[p]
			if price <= maxPrice(r, s.OnDemandPrice) {
				ok = append(ok, p.Zone)
			} else if cheapest < 0 || price < cheapest {
				cheapest = price
			}
		}
		sort.Strings(ok)
		g := SpotGate{Zones: ok}
		if len(ok) == 0 {
			g.Blocked = fmt.Sprintf("spot price %s is above the max price %s in every zone of %s", cheapest, r.MaxPrice, in.Offering)
		}
		rd.gates[in.ID] = g
	}
}

// watch plans the reclaim of the spot instances whose pool price passed
// their max price, and a rebalance recommendation to those in pools at
// risk.
func (rd *marketRound) watch() {
	for _, in := range rd.ms.spot {
		if !in.State.Holds() || in.State == cloud.Stopping || in.State == cloud.Terminating {
			continue
		}
		if in.Interruption != nil && in.Interruption.Action != "" {
			continue
		}
		p := cloud.Pool{Offering: in.Offering, Zone: in.Zone}
		s, ok := rd.supply[p]
		if !ok {
			continue
		}
		if r := rd.ms.requests[in.SpotRequestID]; r != nil && rd.last[p] > maxPrice(r, s.OnDemandPrice) {
			rd.plan.Notices = append(rd.plan.Notices, service.SpotNotice{InstanceID: in.ID, Reason: cloud.ReclaimPrice,
				Notice: rd.view.Notice(p), Actor: schedulerActor})
			continue
		}
		if in.Interruption == nil && spot.RiskOf(s).Rebalance() {
			rd.plan.Notices = append(rd.plan.Notices, service.SpotNotice{InstanceID: in.ID, Reason: cloud.ReclaimRebalance})
		}
	}
}
