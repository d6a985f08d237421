package autoscale

import (
	"cmp"
	"math"
	"slices"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// reclaimWeight prices a spot pool's reclaim risk: a pool is ranked by
// spot price × (1 + reclaimWeight × ReclaimRate), as if each reclaim
// cost ten instance-hours of disruption.
const reclaimWeight = 10.0

// SpotPriceRatio is the mix's MaxSpotPriceRatio with its default (80).
func SpotPriceRatio(m cloud.MixedInstances) int {
	if m.MaxSpotPriceRatio <= 0 {
		return DefaultMaxSpotPriceRatio
	}
	return m.MaxSpotPriceRatio
}

// OverRatio reports whether a pool's spot price is above ratio percent of
// its on-demand price (never when either price is unknown).
func OverRatio(p Pool, ratio int) bool {
	return p.OnDemand > 0 && p.Spot > 0 && int64(p.Spot)*100 > int64(p.OnDemand)*int64(ratio)
}

// pools is one step's view of the pools: sorted in template order, with
// the room left as launches are placed.
type pools struct {
	p        []Pool
	freeOD   []int
	freeSpot []int
	// usable: pools a spot launch may go to (a spot market, not over the
	// ratio, room), best first.
	usable    []int
	spotCount []int // spot members kept plus spot launches, per pool
	spotTotal int
}

func newPools(g *cloud.Group, in []Pool, ratio int) *pools {
	idx := func(list []string, v string) int {
		for i, x := range list {
			if x == v {
				return i
			}
		}
		return len(list)
	}
	ps := append([]Pool(nil), in...)
	slices.SortStableFunc(ps, func(a, b Pool) int {
		if c := cmp.Compare(idx(g.Template.Offerings, a.Offering), idx(g.Template.Offerings, b.Offering)); c != 0 {
			return c
		}
		return cmp.Compare(idx(g.Template.Zones, a.Zone), idx(g.Template.Zones, b.Zone))
	})
	ints := make([]int, 3*len(ps))
	v := &pools{p: ps, freeOD: ints[:len(ps)], freeSpot: ints[len(ps) : 2*len(ps)], spotCount: ints[2*len(ps):]}
	for i, p := range ps {
		v.freeOD[i], v.freeSpot[i] = p.FreeOnDemand, p.FreeSpot
		if p.Spot > 0 && !OverRatio(p, ratio) && p.FreeSpot != 0 {
			v.usable = append(v.usable, i)
		}
	}
	score := func(i int) float64 { return float64(ps[i].Spot) * (1 + reclaimWeight*max(0, ps[i].ReclaimRate)) }
	room := func(i int) int {
		if ps[i].FreeSpot < 0 {
			return math.MaxInt
		}
		return ps[i].FreeSpot
	}
	slices.SortStableFunc(v.usable, func(i, j int) int {
		if c := cmp.Compare(score(i), score(j)); c != 0 {
			return c
		}
		return cmp.Compare(room(j), room(i))
	})
	return v
}

// find is the pool of a member: its offering in its zone, else the first
// pool of its offering; -1 when none.
func (v *pools) find(offering, zone string) int {
	first := -1
	for i, p := range v.p {
		if p.Offering == offering {
			if p.Zone == zone {
				return i
			}
			if first < 0 {
				first = i
			}
		}
	}
	return first
}

func (v *pools) price(i int, od bool) money.Micros {
	if i < 0 {
		return 0
	}
	if od {
		return v.p[i].OnDemand
	}
	return v.p[i].Spot
}

// capacity sums free room (-1 anywhere: unbounded, as MaxInt).
func capacity(free []int, only []int) int {
	sum := 0
	add := func(f int) bool {
		if f < 0 {
			sum = math.MaxInt
			return false
		}
		sum += f
		return true
	}
	if only != nil {
		for _, i := range only {
			if !add(free[i]) {
				break
			}
		}
		return sum
	}
	for _, f := range free {
		if !add(f) {
			break
		}
	}
	return sum
}

// pickOD is the first pool in template order with on-demand room.
func (v *pools) pickOD() int {
	for i, f := range v.freeOD {
		if f != 0 {
			if f > 0 {
				v.freeOD[i]--
			}
			return i
		}
	}
	return -1
}

// pickSpot is the best usable pool with room, price-capacity-optimized:
// pools ranked by spot price × (1 + reclaim weight × rate), then room;
// when two or more pools have room, none takes more than half of the
// group's spot instances (rounded up), so spot spreads over at least two
// pools.
func (v *pools) pickSpot() int {
	var open []int
	for _, i := range v.usable {
		if v.freeSpot[i] != 0 {
			open = append(open, i)
		}
	}
	if len(open) == 0 {
		return -1
	}
	pick := open[0]
	if len(open) >= 2 {
		limit := (v.spotTotal + 2) / 2 // half of the total after this launch, rounded up
		for _, i := range open {
			if v.spotCount[i] < limit {
				pick = i
				break
			}
		}
	}
	if v.freeSpot[pick] > 0 {
		v.freeSpot[pick]--
	}
	v.spotCount[pick]++
	v.spotTotal++
	return pick
}

// mstate is a counted member with what the planner derives from it.
type mstate struct {
	m                *Member
	od               bool
	booting, running bool
	pool             int
	price            money.Micros // its hourly price in its market
	spotPrice        money.Micros // its pool's spot price (spot members)
	util             float64
	why              string // release reason when surplus
	class            int    // release order of surplus: 0 booting, 1 rebalance, 2 price-ratio, 3 other
}

type result struct {
	launch  []Launch
	release []Release
	desired int
}

// keepFirst orders members of one market by how much the group wants to
// keep them, the reverse of the scale-in order: running before booting
// (the newest booting goes first), then spot in the cheapest pool, then
// the most utilized, then the oldest.
func keepFirst(a, b *mstate) bool {
	if a.booting != b.booting {
		return !a.booting
	}
	if a.booting && !a.m.CreatedAt.Equal(b.m.CreatedAt) {
		return a.m.CreatedAt.Before(b.m.CreatedAt)
	}
	if a.od != b.od {
		return a.od
	}
	if !a.od && a.spotPrice != b.spotPrice {
		return a.spotPrice < b.spotPrice
	}
	if a.util != b.util {
		return a.util > b.util
	}
	if !a.m.CreatedAt.Equal(b.m.CreatedAt) {
		return a.m.CreatedAt.Before(b.m.CreatedAt)
	}
	return a.m.ID < b.m.ID
}

// releaseFirst orders surplus members: booting first (newest first), then
// those under a rebalance recommendation, then price-ratio moves (the
// most expensive pool first), then the rest in scale-in order.
func releaseFirst(a, b *mstate) bool {
	if a.class != b.class {
		return a.class < b.class
	}
	if a.class == 0 && !a.m.CreatedAt.Equal(b.m.CreatedAt) {
		return a.m.CreatedAt.After(b.m.CreatedAt)
	}
	return keepFirst(b, a)
}

// scaleInPick is the member of ms to remove first from a fleet of n with
// o on demand, in scale-in order: never held; removals that keep the
// on-demand share (of n−1) first; then booting members, newest first;
// then the market above its share; then spot in the most expensive pool;
// then the least utilized; then the newest. -1 when every one is held.
func scaleInPick(ms []*mstate, mx cloud.MixedInstances, o, n int) int {
	share := OnDemandShare(mx, n-1)
	key := func(s *mstate) (safe, boot, above bool) {
		safe = !s.od || o > share
		above = s.od == (o > share)
		return safe, s.booting, above
	}
	best := -1
	for i, s := range ms {
		if s.m.Held {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := ms[best]
		sa, ba, aa := key(s)
		sb, bb, ab := key(b)
		var better bool
		switch {
		case sa != sb:
			better = sa
		case ba != bb:
			better = ba
		case ba && !s.m.CreatedAt.Equal(b.m.CreatedAt):
			better = s.m.CreatedAt.After(b.m.CreatedAt)
		case aa != ab:
			better = aa
		default:
			better = keepFirst(b, s)
		}
		if better {
			best = i
		}
	}
	return best
}

// reconcile turns the desired capacity d into launches and releases.
//
// Capacity counts the members not Leaving. Members to be replaced are
// taken out first: (a) with Mixed.CapacityRebalance, members with a
// rebalance recommendation (release reason "rebalance"); (b) spot members
// in a pool whose spot price is above MaxSpotPriceRatio percent (default
// 80) of its on-demand price (reason price-ratio). Held members are never
// replaced or released.
//
// The remaining members are split by the mix for d instances: the first
// OnDemandBase on demand, then OnDemandPercent of the rest rounded up,
// the rest spot. A market short of its share is filled by launches where
// there is room; spot that cannot be launched (no usable pool with room:
// FreeSpot 0, or every pool over the price ratio) is covered on demand
// (fallback), and on-demand that cannot be launched by keeping spot. Each
// market keeps its members up to its share: running before booting (the
// newest booting goes first), spot in the cheapest pool, the most
// utilized, the oldest; held members always. What is over a share is
// surplus: this is how on-demand members above the share (after a
// fallback) go back to spot once a spot pool has room, launch first.
//
// Launches fill the kept members up to d, on demand in the first pool in
// template order (offering, then zone) with room, spot price-capacity
// optimized (see pickSpot). They stop at the budget: the hourly prices of
// every counted member plus the launches (each at its pool's on-demand or
// spot price) never exceed BudgetPerHour; Desired is then cut to what is
// held (Limit "budget"). Launches stop during a backoff.
//
// Surplus members are released, except that enough running ones are kept
// until the kept members and launches hold d running instances (launch
// first, release when the replacement runs), and enough to hold d at all
// while launches are blocked. Surplus goes in this order: booting (newest
// first), rebalance, price-ratio (most expensive pool first), then the
// scale-in order. A group may so hold more than Desired while a
// replacement boots.
//
// Scale-in order, in short: held members never go; the mix decides which
// market gives up members (the one above its share of the new capacity);
// within it, members still booting (pending, scheduled, starting) go
// first, newest first, then spot members in the most expensive pool,
// then the least utilized (GPU; no sample yet counts as 0), then the
// newest. A running member so chosen stays (and goes at a later step)
// while the members kept do not yet hold Desired running instances.
//
// Finally, when the members kept still cost more than the budget (prices
// rose), the kept surplus goes, then members in scale-in order (see
// scaleInPick), down to Min.
func (p *planner) reconcile(d int, blocked bool) result {
	g := p.g
	mx := g.Mixed
	ratio := SpotPriceRatio(mx)
	pv := newPools(g, p.in.Pools, ratio)
	var good, surplus []*mstate
	states := make([]mstate, len(p.counted))
	for k, m := range p.counted {
		s := &states[k]
		*s = mstate{m: m, od: m.Market != cloud.MarketSpot, pool: pv.find(m.Offering, m.Zone)}
		s.running = m.State == cloud.Running && !m.RunningSince.IsZero()
		s.booting = !s.running
		s.price = pv.price(s.pool, s.od)
		if !s.od {
			s.spotPrice = pv.price(s.pool, false)
		}
		if m.HasUtil {
			s.util = m.GPU
		}
		switch {
		case m.Held:
			good = append(good, s)
		case mx.CapacityRebalance && m.Rebalance:
			s.why, s.class = ReleaseRebalance, 1
			surplus = append(surplus, s)
		case !s.od && s.pool >= 0 && OverRatio(pv.p[s.pool], ratio):
			s.why, s.class = cloud.ReclaimPriceMove, 2
			surplus = append(surplus, s)
		default:
			good = append(good, s)
		}
	}
	nReplace := len(surplus)
	if nReplace > 0 {
		p.say("%d member(s) to replace (rebalance or spot price over %d%% of on demand)", nReplace, ratio)
	}
	n := d
	// The mix's slots.
	var goodOD, goodSpot []*mstate
	for _, s := range good {
		if s.od {
			goodOD = append(goodOD, s)
		} else {
			goodSpot = append(goodSpot, s)
		}
	}
	tOD := OnDemandShare(mx, n)
	tSpot := n - tOD
	spotCap := capacity(pv.freeSpot, pv.usable)
	if len(pv.usable) == 0 {
		spotCap = 0
	}
	odCap := capacity(pv.freeOD, nil)
	odDef, spotDef := max(0, tOD-len(goodOD)), max(0, tSpot-len(goodSpot))
	odFill, spotFill := min(odDef, odCap), min(spotDef, spotCap)
	odSlots, spotSlots := tOD+spotDef-spotFill, tSpot+odDef-odFill
	if spotDef > spotFill && tSpot > 0 {
		p.say("spot unavailable for %d: on demand instead", spotDef-spotFill)
	}
	keepOD, extraOD := keepUpTo(goodOD, odSlots)
	keepSpot, extraSpot := keepUpTo(goodSpot, spotSlots)
	for _, s := range append(extraOD, extraSpot...) {
		s.why, s.class = cloud.ReclaimScaleIn, 3
		if s.booting {
			s.class = 0
		}
		surplus = append(surplus, s)
	}
	for _, s := range surplus {
		if s.booting {
			s.class = 0
		}
	}
	kept := len(keepOD) + len(keepSpot)
	if kept > n {
		p.say("%d held member(s) keep the group above %d", kept-n, n)
	}
	// Launches.
	total := max(0, n-kept)
	remOD, remSpot := max(0, odSlots-len(keepOD)), max(0, spotSlots-len(keepSpot))
	if remOD+remSpot > total {
		cut := remOD + remSpot - total
		c := min(cut, remSpot)
		remSpot -= c
		remOD -= cut - c
	}
	for _, s := range keepSpot {
		if s.pool >= 0 {
			pv.spotCount[s.pool]++
		}
		pv.spotTotal++
	}
	var cost money.Micros
	for _, s := range good {
		cost += s.price
	}
	for _, s := range surplus {
		cost += s.price
	}
	for _, m := range p.idle {
		// Released for idleness, still paid for through the notice.
		cost += pv.price(pv.find(m.Offering, m.Zone), m.Market != cloud.MarketSpot)
	}
	budget := g.BudgetPerHour
	growth := max(0, d-max(g.Desired, len(p.counted)))
	var reasons []string
	for _, s := range surplus {
		if s.class == 1 || s.class == 2 {
			reasons = append(reasons, s.why)
		}
	}
	var res result
	curOD, size := len(keepOD), kept
	budgetCut, noRoom := false, false
	if blocked && remOD+remSpot > 0 {
		remOD, remSpot = 0, 0
	}
	for remOD+remSpot > 0 {
		wantOD := remSpot == 0 || remOD > 0 && curOD < OnDemandShare(mx, size+1)
		pool, od := -1, wantOD
		if !wantOD {
			if pool = pv.pickSpot(); pool < 0 {
				od = true
			}
		}
		if od {
			pool = pv.pickOD()
		}
		if pool < 0 {
			noRoom = true
			if wantOD {
				remOD = 0
			} else {
				remSpot = 0
			}
			continue
		}
		price := pv.price(pool, od)
		if budget > 0 && cost+price > budget {
			budgetCut = true
			break
		}
		cost += price
		why := "scale-out"
		if len(res.launch) >= growth {
			why = "mix"
			if k := len(res.launch) - growth; k < len(reasons) {
				why = reasons[k]
			} else if d <= g.Desired {
				why = "replace"
			}
		}
		market := cloud.MarketSpot
		if od {
			market = cloud.MarketOnDemand
			curOD++
		}
		res.launch = append(res.launch, Launch{Offering: pv.p[pool].Offering, Zone: pv.p[pool].Zone, Market: market, Reason: why})
		if wantOD {
			remOD--
		} else {
			remSpot--
		}
		size++
	}
	if noRoom {
		p.say("no room for %d launch(es) in the template's pools", total-len(res.launch))
	}
	L := len(res.launch)
	// Releases: surplus beyond what holds d until the launches run.
	running := 0
	for _, s := range keepOD {
		if s.running {
			running++
		}
	}
	for _, s := range keepSpot {
		if s.running {
			running++
		}
	}
	runningSurplus := 0
	for _, s := range surplus {
		if s.running {
			runningSurplus++
		}
	}
	keep := min(len(surplus), max(0, min(runningSurplus, n-running), n-(kept+L)))
	slices.SortStableFunc(surplus, func(a, b *mstate) int { return order(releaseFirst, a, b) })
	cut := len(surplus) - keep
	for _, s := range surplus[:cut] {
		res.release = append(res.release, Release{InstanceID: s.m.ID, Reason: s.why})
	}
	if keep > 0 && nReplace+len(extraOD)+len(extraSpot) > 0 {
		p.say("%d surplus member(s) kept until replacements run", keep)
	}
	fleet := kept + L + keep
	res.desired = d
	if budgetCut {
		res.desired = max(p.minC, min(d, fleet))
		p.limit = "budget"
		p.say("budget %s/h: %d instance(s) cost %s/h, the next launch does not fit", budget, size+len(surplus), cost)
	}
	// Budget trim: prices rose above the budget.
	if budget > 0 && L == 0 {
		keptMembers := append(append([]*mstate(nil), keepOD...), keepSpot...)
		rest := surplus[cut:]
		var fcost money.Micros
		for _, s := range keptMembers {
			fcost += s.price
		}
		for _, s := range rest {
			fcost += s.price
		}
		trimmed := 0
		for fcost > budget && len(rest) > 0 && fleet > p.minC {
			s := rest[0]
			rest = rest[1:]
			res.release = append(res.release, Release{InstanceID: s.m.ID, Reason: s.why})
			fcost -= s.price
			fleet--
			trimmed++
		}
		o := len(keepOD)
		for fcost > budget && fleet > p.minC {
			i := scaleInPick(keptMembers, mx, o, len(keptMembers))
			if i < 0 {
				break
			}
			s := keptMembers[i]
			keptMembers = append(keptMembers[:i], keptMembers[i+1:]...)
			if s.od {
				o--
			}
			res.release = append(res.release, Release{InstanceID: s.m.ID, Reason: cloud.ReclaimScaleIn})
			fcost -= s.price
			fleet--
			trimmed++
		}
		if trimmed > 0 {
			res.desired = max(p.minC, min(res.desired, fleet))
			p.limit = "budget"
			p.say("budget %s/h: members cost more at current prices; %d released, %s/h left", budget, trimmed, fcost)
		}
		if fcost > budget {
			p.say("budget %s/h exceeded: %s/h held by min %d or held members", budget, fcost, p.minC)
		}
	}
	return res
}

// order turns a less function into a comparison.
func order(less func(a, b *mstate) bool, a, b *mstate) int {
	switch {
	case less(a, b):
		return -1
	case less(b, a):
		return 1
	}
	return 0
}

// keepUpTo keeps the held members of one market, then the others in
// keep order, up to slots; it returns the kept and the rest.
func keepUpTo(ms []*mstate, slots int) (kept, rest []*mstate) {
	slices.SortStableFunc(ms, func(a, b *mstate) int {
		if a.m.Held != b.m.Held {
			if a.m.Held {
				return -1
			}
			return 1
		}
		return order(keepFirst, a, b)
	})
	for _, s := range ms {
		if s.m.Held || len(kept) < slots {
			kept = append(kept, s)
		} else {
			rest = append(rest, s)
		}
	}
	return kept, rest
}
