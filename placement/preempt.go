package placement

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// PreemptionPlan is the cheapest set of preemptible allocations whose
// eviction lets req fit, and where req would then go.
type PreemptionPlan struct {
	// Victims are the IDs of the allocations to evict, sorted; empty when
	// the request fits as the fleet is.
	Victims []string
	HostID  string
	// Placement is where the request goes once the victims are gone.
	Placement *fleet.Placement
	// PriceMicros is the summed price of the victims.
	PriceMicros int64
}

// maxExactVictims is the largest number of preemptible allocations on one
// host for which PlanPreemption tries every subset; above it, it evicts
// greedily by price and then drops victims that are not needed.
const maxExactVictims = 12

// PlanPreemption finds the preemptible allocations to evict so that req
// fits. When req fits as it is, the plan has no victims. Otherwise only a
// request that is not preemptible may evict, and only allocations marked
// Preemptible (spot is the lowest priority, so a preemptible request evicts
// nothing). Hosts are considered only where req fails for capacity (CPU,
// memory, GPUs, NVLink, MIG slots, shares, bare metal), never for zone,
// model, labels, state or placement group. On each host the victim set is
// minimal: fewest victims, then lowest price, and no victim without which
// req would still fit. Across hosts the plan with the fewest victims wins,
// then the lowest total price, then the lowest host ID.
//
// PlanPreemption returns the error of Place (an *InsufficientCapacityError)
// when no set of evictions would make req fit, and a *RequestError for an
// invalid request. It does not modify f, apart from the engine's cache
// entries.
func (e *Engine) PlanPreemption(f *fleet.Fleet, in *Request) (*PreemptionPlan, error) {
	p, err := e.Place(f, in)
	if err == nil {
		return &PreemptionPlan{HostID: p.HostID, Placement: p}, nil
	}
	var ice *InsufficientCapacityError
	if !errors.As(err, &ice) || in.Preemptible {
		return nil, err
	}
	// Place validated a copy; normalise ours the same way (it cannot fail
	// now) without touching the caller's request.
	r := *in
	r.Models = append([]string(nil), in.Models...)
	req := &r
	if err := req.Validate(e.cat); err != nil {
		return nil, err
	}
	s := e.shapeOf(req)

	// Every allocation by host: the scratch copy of a host needs them all.
	byHost := map[string][]*fleet.Placement{}
	for _, a := range f.Allocations() {
		byHost[a.HostID] = append(byHost[a.HostID], a)
	}

	var hosts []*preemptHost
	for _, c := range f.Classes() {
		m := e.lookup(f, c, s)
		if !capacityReason(Reason(m.reason)) {
			continue
		}
		for _, i := range c.Members() {
			h := f.Hosts[i]
			if !groupAllows(req.Group, h) {
				continue
			}
			if ph := newPreemptHost(h, byHost[h.ID], req, s); ph != nil {
				hosts = append(hosts, ph)
			}
		}
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].bound.less(hosts[j].bound) })

	var best *preemptResult
	for _, ph := range hosts {
		if best != nil && !ph.bound.less(best.key) {
			break // sorted by lower bound: no later host can do better
		}
		r, err := e.planHost(ph, s, best)
		if err != nil {
			return nil, err
		}
		if r != nil && (best == nil || r.key.less(best.key)) {
			best = r
		}
	}
	if best == nil {
		return nil, err
	}
	return e.finishPlan(best, req)
}

// capacityReason reports whether a host ruled out for r might take the
// request once allocations leave it.
func capacityReason(r Reason) bool {
	switch r {
	case ReasonMetalHeld, ReasonNotEmpty, ReasonCPU, ReasonMemory, ReasonGPUs,
		ReasonNVLink, ReasonMIGSlot, ReasonShare:
		return true
	}
	return false
}

// groupAllows mirrors pickGrouped's exclusions, which evictions do not change.
func groupAllows(g *Group, h *fleet.Host) bool {
	if g == nil {
		return true
	}
	onHost, onRack := contains(g.Hosts, h.ID), contains(g.Racks, h.Rack)
	switch g.Strategy {
	case Spread:
		return !onHost && !(g.ByRack && onRack)
	case Cluster:
		return len(g.Racks) == 0 || onRack
	}
	return true
}

// planKey orders plans: fewest victims, then lowest price, then host ID.
type planKey struct {
	victims int
	price   int64
	host    string
}

func (a planKey) less(b planKey) bool {
	if a.victims != b.victims {
		return a.victims < b.victims
	}
	if a.price != b.price {
		return a.price < b.price
	}
	return a.host < b.host
}

// preemptHost is a host that might take the request after evictions.
type preemptHost struct {
	h      *fleet.Host
	allocs []*fleet.Placement // all allocations on the host
	cands  []*fleet.Placement // the preemptible ones, cheapest first
	// bound is a lower bound on the key of any plan on this host.
	bound planKey
}

type preemptResult struct {
	key     planKey
	ph      *preemptHost
	victims []*fleet.Placement
}

// newPreemptHost returns nil when even evicting every preemptible
// allocation on h could not free enough CPU, memory or GPUs for req.
func newPreemptHost(h *fleet.Host, allocs []*fleet.Placement, req *Request, s *shape) *preemptHost {
	var cands []*fleet.Placement
	for _, a := range allocs {
		if a.Preemptible {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].PriceMicros < cands[j].PriceMicros })

	lb := 1
	// need is how many of vals (largest first) it takes to cover deficit;
	// -1 when all of them do not.
	need := func(deficit int64, val func(*fleet.Placement) int64) int {
		if deficit <= 0 {
			return 0
		}
		vs := make([]int64, len(cands))
		for i, c := range cands {
			vs[i] = val(c)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
		for i, v := range vs {
			deficit -= v
			if deficit <= 0 {
				return i + 1
			}
		}
		return -1
	}
	cpu, mem := req.CPUMilli-h.FreeCPU(), req.MemoryMiB-h.FreeMemory()
	var gpus int64
	switch req.Mode {
	case catalog.ModeMetal:
		// Everything on the host must go, and the host must have the shape.
		if len(cands) != len(allocs) || req.GPUs > 0 && len(h.GPUs) != req.GPUs ||
			req.CPUMilli > h.CPUMilli || req.MemoryMiB > h.MemoryMiB {
			return nil
		}
		lb, cpu, mem = len(cands), 0, 0
	case catalog.ModeGPU:
		free := 0
		for i := range h.GPUs {
			g := &h.GPUs[i]
			if (s.models == nil || s.models[g.Model]) && g.Empty() && !g.MIG {
				free++
			}
		}
		gpus = int64(req.GPUs - free)
	}
	for _, n := range []int{
		need(cpu, func(p *fleet.Placement) int64 { return p.CPUMilli }),
		need(mem, func(p *fleet.Placement) int64 { return p.MemoryMiB }),
		need(gpus, func(p *fleet.Placement) int64 { return int64(len(p.Devices)) }),
	} {
		if n < 0 {
			return nil
		}
		lb = max(lb, n)
	}
	var price int64
	for _, c := range cands[:lb] {
		price += c.PriceMicros
	}
	return &preemptHost{h: h, allocs: allocs, cands: cands, bound: planKey{lb, price, h.ID}}
}

// scratchHost is a one-host fleet holding a copy of a host and its
// allocations, where victims can be released and put back.
type scratchHost struct {
	f     *fleet.Fleet
	h     *fleet.Host
	byID  map[string]*fleet.Placement
	evict []*fleet.Placement
}

func newScratchHost(ph *preemptHost) (*scratchHost, error) {
	hc := *ph.h
	hc.GPUs = append([]fleet.GPU(nil), ph.h.GPUs...)
	for i := range hc.GPUs {
		// A GPU that placement switched into MIG mode leaves it with its
		// last instance; rebuild it that way so that releases here behave
		// as they would in the fleet.
		if g := &hc.GPUs[i]; g.MIGAuto {
			g.MIG, g.Instances = false, nil
		}
	}
	sf := fleet.New()
	if err := sf.AddHost(&hc, nil); err != nil {
		return nil, fmt.Errorf("plan preemption: copy host %s: %w", hc.ID, err)
	}
	sc := &scratchHost{f: sf, h: sf.Host(hc.ID), byID: map[string]*fleet.Placement{}}
	for _, a := range ph.allocs {
		cp := *a
		cp.Devices = append([]fleet.Device(nil), a.Devices...)
		for i := range cp.Devices {
			// Whichever instance comes back first switches the GPU on.
			if cp.Devices[i].Kind == fleet.MIGSlice {
				cp.Devices[i].EnableMIG = true
			}
		}
		if err := sf.Apply(&cp); err != nil {
			return nil, fmt.Errorf("plan preemption: copy host %s: %w", hc.ID, err)
		}
		sc.byID[cp.ID] = &cp
	}
	return sc, nil
}

// fitsWithout reports whether the request of shape s fits the host once
// victims are gone, leaving the scratch host as it was.
func (e *Engine) fitsWithout(sc *scratchHost, s *shape, victims []*fleet.Placement) (bool, error) {
	for _, v := range victims {
		if err := sc.f.Release(v.ID); err != nil {
			return false, fmt.Errorf("plan preemption: %w", err)
		}
	}
	m := e.evaluate(sc.h, s)
	for _, v := range victims {
		if err := sc.f.Apply(sc.byID[v.ID]); err != nil {
			return false, fmt.Errorf("plan preemption: restore %s: %w", v.ID, err)
		}
	}
	return m.reason == uint8(reasonNone), nil
}

// planHost finds the best victim set on one host, or nil when none helps or
// none can beat best.
func (e *Engine) planHost(ph *preemptHost, s *shape, best *preemptResult) (*preemptResult, error) {
	sc, err := newScratchHost(ph)
	if err != nil {
		return nil, err
	}
	if ok, err := e.fitsWithout(sc, s, ph.cands); err != nil || !ok {
		return nil, err
	}
	n := len(ph.cands)
	if n > maxExactVictims {
		return e.planGreedy(sc, ph, s)
	}
	var (
		found *preemptResult
		idx   = make([]int, 0, n)
		set   = make([]*fleet.Placement, 0, n)
	)
	for k := ph.bound.victims; k <= n && found == nil; k++ {
		if best != nil && k > best.key.victims {
			break
		}
		// Every k-subset, in lexicographic order of the price-sorted
		// candidates, so that ties keep the first (cheapest-leaning) set.
		var walk func(from int) error
		walk = func(from int) error {
			if len(idx) == k {
				key := planKey{k, 0, ph.h.ID}
				for _, i := range idx {
					key.price += ph.cands[i].PriceMicros
				}
				if best != nil && !key.less(best.key) || found != nil && !key.less(found.key) {
					return nil
				}
				set = set[:0]
				for _, i := range idx {
					set = append(set, ph.cands[i])
				}
				ok, err := e.fitsWithout(sc, s, set)
				if err != nil {
					return err
				}
				if ok {
					found = &preemptResult{key: key, ph: ph, victims: append([]*fleet.Placement(nil), set...)}
				}
				return nil
			}
			for i := from; i <= n-(k-len(idx)); i++ {
				idx = append(idx, i)
				err := walk(i + 1)
				idx = idx[:len(idx)-1]
				if err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(0); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// planGreedy evicts the cheapest candidates until the request fits, then
// drops, most expensive first, every victim it can do without.
func (e *Engine) planGreedy(sc *scratchHost, ph *preemptHost, s *shape) (*preemptResult, error) {
	var set []*fleet.Placement
	for _, c := range ph.cands {
		set = append(set, c)
		ok, err := e.fitsWithout(sc, s, set)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
	}
	for i := len(set) - 1; i >= 0; i-- {
		without := append(append([]*fleet.Placement(nil), set[:i]...), set[i+1:]...)
		ok, err := e.fitsWithout(sc, s, without)
		if err != nil {
			return nil, err
		}
		if ok {
			set = without
		}
	}
	key := planKey{len(set), 0, ph.h.ID}
	for _, v := range set {
		key.price += v.PriceMicros
	}
	return &preemptResult{key: key, ph: ph, victims: set}, nil
}

// finishPlan places the request on the chosen host with its victims gone.
func (e *Engine) finishPlan(r *preemptResult, req *Request) (*PreemptionPlan, error) {
	sc, err := newScratchHost(r.ph)
	if err != nil {
		return nil, err
	}
	plan := &PreemptionPlan{HostID: r.ph.h.ID, PriceMicros: r.key.price}
	for _, v := range r.victims {
		if err := sc.f.Release(v.ID); err != nil {
			return nil, fmt.Errorf("plan preemption: %w", err)
		}
		plan.Victims = append(plan.Victims, v.ID)
	}
	sort.Strings(plan.Victims)
	p, err := e.Place(sc.f, req)
	if err != nil {
		return nil, fmt.Errorf("plan preemption: host %s does not take the request after evictions: %w", plan.HostID, err)
	}
	plan.Placement = p
	return plan, nil
}
