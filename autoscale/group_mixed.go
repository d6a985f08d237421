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

// pick is the pool of the next launch and whether it is on demand: a
// spot launch goes on demand when no spot pool has room; -1 when no pool
// of the market it ends in has room.
func (v *pools) pick(wantOD bool) (pool int, od bool) {
	pool, od = -1, wantOD
	if !wantOD {
		if pool = v.pickSpot(); pool < 0 {
			od = true
		}
	}
	if od {
		pool = v.pickOD()
	}
	return pool, od
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
	rc := &reconciliation{d: d, mx: p.g.Mixed, ratio: SpotPriceRatio(p.g.Mixed), budget: p.g.BudgetPerHour}
	rc.pv = newPools(p.g, p.in.Pools, rc.ratio)
	p.classify(rc)
	p.splitMix(rc)
	p.launch(rc, blocked)
	p.releaseSurplus(rc)
	rc.res.desired = d
	if rc.budgetCut {
		rc.res.desired = max(p.minC, min(d, rc.fleet))
		p.limit = "budget"
		p.say("budget %s/h: %d instance(s) cost %s/h, the next launch does not fit", rc.budget, rc.size+len(rc.surplus), rc.cost)
	}
	if rc.budget > 0 && len(rc.res.launch) == 0 {
		p.trimToBudget(rc)
	}
	return rc.res
}

// reconciliation is what reconcile works out, step by step.
type reconciliation struct {
	d      int // the desired capacity
	mx     cloud.MixedInstances
	ratio  int // the spot price ratio, percent
	budget money.Micros
	pv     *pools
	// good are the members the mix may keep; surplus those to replace,
	// then those over their market's share too. nReplace counts the
	// first, extra the second.
	good, surplus   []*mstate
	nReplace, extra int
	// keepOD and keepSpot are the members each market keeps; kept counts
	// both. odSlots and spotSlots are the markets' shares of d, after
	// fallbacks.
	keepOD, keepSpot   []*mstate
	kept               int
	odSlots, spotSlots int
	// cost is the hourly price of the members and launches so far; size
	// the fleet the launches grow; budgetCut says the budget stopped
	// them.
	cost      money.Micros
	size      int
	budgetCut bool
	// cut is how many surplus members (in release order) go; fleet is
	// what stays: kept, launched, and surplus kept until replacements
	// run.
	cut, fleet int
	res        result
}

// classify derives each counted member's state and sorts the members
// into good and, to be replaced, surplus: rebalance recommendations (with
// CapacityRebalance) and spot members in a pool over the price ratio.
// Held members are always good.
func (p *planner) classify(rc *reconciliation) {
	pv := rc.pv
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
			rc.good = append(rc.good, s)
		case rc.mx.CapacityRebalance && m.Rebalance:
			s.why, s.class = ReleaseRebalance, 1
			rc.surplus = append(rc.surplus, s)
		case !s.od && s.pool >= 0 && OverRatio(pv.p[s.pool], rc.ratio):
			s.why, s.class = cloud.ReclaimPriceMove, 2
			rc.surplus = append(rc.surplus, s)
		default:
			rc.good = append(rc.good, s)
		}
	}
	rc.nReplace = len(rc.surplus)
	if rc.nReplace > 0 {
		p.say("%d member(s) to replace (rebalance or spot price over %d%% of on demand)", rc.nReplace, rc.ratio)
	}
}

// splitMix gives each market its share of d, moving a share that cannot
// be launched to the other market (fallback), and keeps each market's
// good members up to its share; the rest are surplus.
func (p *planner) splitMix(rc *reconciliation) {
	n, pv := rc.d, rc.pv
	var goodOD, goodSpot []*mstate
	for _, s := range rc.good {
		if s.od {
			goodOD = append(goodOD, s)
		} else {
			goodSpot = append(goodSpot, s)
		}
	}
	tOD := OnDemandShare(rc.mx, n)
	tSpot := n - tOD
	spotCap := capacity(pv.freeSpot, pv.usable)
	if len(pv.usable) == 0 {
		spotCap = 0
	}
	odCap := capacity(pv.freeOD, nil)
	odDef, spotDef := max(0, tOD-len(goodOD)), max(0, tSpot-len(goodSpot))
	odFill, spotFill := min(odDef, odCap), min(spotDef, spotCap)
	rc.odSlots, rc.spotSlots = tOD+spotDef-spotFill, tSpot+odDef-odFill
	if spotDef > spotFill && tSpot > 0 {
		p.say("spot unavailable for %d: on demand instead", spotDef-spotFill)
	}
	var extraOD, extraSpot []*mstate
	rc.keepOD, extraOD = keepUpTo(goodOD, rc.odSlots)
	rc.keepSpot, extraSpot = keepUpTo(goodSpot, rc.spotSlots)
	rc.extra = len(extraOD) + len(extraSpot)
	for _, s := range append(extraOD, extraSpot...) {
		s.why, s.class = cloud.ReclaimScaleIn, 3
		if s.booting {
			s.class = 0
		}
		rc.surplus = append(rc.surplus, s)
	}
	for _, s := range rc.surplus {
		if s.booting {
			s.class = 0
		}
	}
	rc.kept = len(rc.keepOD) + len(rc.keepSpot)
	if rc.kept > n {
		p.say("%d held member(s) keep the group above %d", rc.kept-n, n)
	}
}

// heldCost is the hourly price of every counted member, and of the
// members released idle this step, which are paid for through their
// notice.
func (p *planner) heldCost(rc *reconciliation) money.Micros {
	var cost money.Micros
	for _, s := range rc.good {
		cost += s.price
	}
	for _, s := range rc.surplus {
		cost += s.price
	}
	for _, m := range p.idle {
		cost += rc.pv.price(rc.pv.find(m.Offering, m.Zone), m.Market != cloud.MarketSpot)
	}
	return cost
}

// launch fills the kept members up to d, each launch in the market the
// mix wants next, until the pools have no room or the budget is reached;
// none while launches are blocked.
func (p *planner) launch(rc *reconciliation, blocked bool) {
	n, pv, g := rc.d, rc.pv, p.g
	total := max(0, n-rc.kept)
	remOD, remSpot := max(0, rc.odSlots-len(rc.keepOD)), max(0, rc.spotSlots-len(rc.keepSpot))
	if remOD+remSpot > total {
		cut := remOD + remSpot - total
		c := min(cut, remSpot)
		remSpot -= c
		remOD -= cut - c
	}
	for _, s := range rc.keepSpot {
		if s.pool >= 0 {
			pv.spotCount[s.pool]++
		}
		pv.spotTotal++
	}
	rc.cost = p.heldCost(rc)
	growth := max(0, rc.d-max(g.Desired, len(p.counted)))
	var reasons []string
	for _, s := range rc.surplus {
		if s.class == 1 || s.class == 2 {
			reasons = append(reasons, s.why)
		}
	}
	curOD := len(rc.keepOD)
	rc.size = rc.kept
	noRoom := false
	if blocked && remOD+remSpot > 0 {
		remOD, remSpot = 0, 0
	}
	for remOD+remSpot > 0 {
		wantOD := remSpot == 0 || remOD > 0 && curOD < OnDemandShare(rc.mx, rc.size+1)
		pool, od := pv.pick(wantOD)
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
		if rc.budget > 0 && rc.cost+price > rc.budget {
			rc.budgetCut = true
			break
		}
		rc.cost += price
		why := "scale-out"
		if len(rc.res.launch) >= growth {
			why = "mix"
			if k := len(rc.res.launch) - growth; k < len(reasons) {
				why = reasons[k]
			} else if rc.d <= g.Desired {
				why = "replace"
			}
		}
		market := cloud.MarketSpot
		if od {
			market = cloud.MarketOnDemand
			curOD++
		}
		rc.res.launch = append(rc.res.launch, Launch{Offering: pv.p[pool].Offering, Zone: pv.p[pool].Zone, Market: market, Reason: why})
		if wantOD {
			remOD--
		} else {
			remSpot--
		}
		rc.size++
	}
	if noRoom {
		p.say("no room for %d launch(es) in the template's pools", total-len(rc.res.launch))
	}
}

// releaseSurplus releases the surplus in release order, but keeps enough
// running surplus members that the kept members and launches hold d
// running instances (launch first, release when the replacement runs),
// and enough to hold d at all while launches are blocked.
func (p *planner) releaseSurplus(rc *reconciliation) {
	n, L := rc.d, len(rc.res.launch)
	running := 0
	for _, s := range append(append([]*mstate(nil), rc.keepOD...), rc.keepSpot...) {
		if s.running {
			running++
		}
	}
	runningSurplus := 0
	for _, s := range rc.surplus {
		if s.running {
			runningSurplus++
		}
	}
	keep := min(len(rc.surplus), max(0, min(runningSurplus, n-running), n-(rc.kept+L)))
	slices.SortStableFunc(rc.surplus, func(a, b *mstate) int { return order(releaseFirst, a, b) })
	rc.cut = len(rc.surplus) - keep
	for _, s := range rc.surplus[:rc.cut] {
		rc.res.release = append(rc.res.release, Release{InstanceID: s.m.ID, Reason: s.why})
	}
	if keep > 0 && rc.nReplace+rc.extra > 0 {
		p.say("%d surplus member(s) kept until replacements run", keep)
	}
	rc.fleet = rc.kept + L + keep
}

// trimToBudget, when the members kept cost more than the budget (prices
// rose) and nothing launches, releases the kept surplus, then members in
// scale-in order (see scaleInPick), down to min.
func (p *planner) trimToBudget(rc *reconciliation) {
	budget := rc.budget
	keptMembers := append(append([]*mstate(nil), rc.keepOD...), rc.keepSpot...)
	rest := rc.surplus[rc.cut:]
	var fcost money.Micros
	for _, s := range keptMembers {
		fcost += s.price
	}
	for _, s := range rest {
		fcost += s.price
	}
	trimmed := 0
	for fcost > budget && len(rest) > 0 && rc.fleet > p.minC {
		s := rest[0]
		rest = rest[1:]
		rc.res.release = append(rc.res.release, Release{InstanceID: s.m.ID, Reason: s.why})
		fcost -= s.price
		rc.fleet--
		trimmed++
	}
	o := len(rc.keepOD)
	for fcost > budget && rc.fleet > p.minC {
		i := scaleInPick(keptMembers, rc.mx, o, len(keptMembers))
		if i < 0 {
			break
		}
		s := keptMembers[i]
		keptMembers = append(keptMembers[:i], keptMembers[i+1:]...)
		if s.od {
			o--
		}
		rc.res.release = append(rc.res.release, Release{InstanceID: s.m.ID, Reason: cloud.ReclaimScaleIn})
		fcost -= s.price
		rc.fleet--
		trimmed++
	}
	if trimmed > 0 {
		rc.res.desired = max(p.minC, min(rc.res.desired, rc.fleet))
		p.limit = "budget"
		p.say("budget %s/h: members cost more at current prices; %d released, %s/h left", budget, trimmed, fcost)
	}
	if fcost > budget {
		p.say("budget %s/h exceeded: %s/h held by min %d or held members", budget, fcost, p.minC)
	}
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
