package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

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
// memory, GPUs, NVLink, MIG slots, shares, bare metal, or GPUs whose shares
// are another tenant's, which a share fits once all of them go), never for
// zone, model, labels, state or placement group. On each host the victim
// set is minimal: fewest victims, then lowest price, and no victim without
// which req would still fit. Across hosts the plan with the fewest victims
// wins, then the lowest total price, then the lowest host ID.
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

	// Only hosts ruled out for capacity can gain from evictions; their
	// allocations come from the fleet's per-host index, uncopied.
	pl := newPreemptPlanner(f, req, s)
	var classes []*fleet.Class
	hosts := 0
	for _, c := range f.Classes() {
		if m := e.lookup(f, c, s); capacityReason(Reason(m.reason)) {
			classes = append(classes, c)
			hosts += c.Size()
		}
	}
	pl.hosts = make([]preemptHost, 0, hosts)
	for _, c := range classes {
		// Hosts of a class share their usage of CPU, memory and GPUs:
		// read it once, then per host only what differs, its allocations.
		pl.setClass(c.Rep)
		for _, i := range c.Members() {
			if req.Group != nil && !groupAllows(req.Group, f.Hosts[i]) {
				continue
			}
			pl.add(i)
		}
	}
	pl.heapify()

	var best *preemptResult
	for len(pl.heap) > 0 {
		ph := pl.pop()
		if best != nil && !ph.bound().less(best.key) {
			break // in order of lower bound: no later host can do better
		}
		r, err := e.planHost(pl, ph, best)
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
	return e.finishPlan(f, best, req)
}

// capacityReason reports whether a host ruled out for r might take the
// request once allocations leave it.
func capacityReason(r Reason) bool {
	switch r {
	case ReasonMetalHeld, ReasonNotEmpty, ReasonCPU, ReasonMemory, ReasonGPUs,
		ReasonNVLink, ReasonMIGSlot, ReasonShare, ReasonShareTenant, ReasonPartitionFull:
		// (ReasonNoPartition is not: evictions never change a GPU's mode.)
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
	h *fleet.Host
	// preemptible counts the preemptible allocations on the host; with
	// more than maxExactVictims the host is planned greedily.
	preemptible int32
	// victims and price give a lower bound on the key of any plan on the
	// host; see bound.
	victims int32
	price   int64
}

// bound is a lower bound on the key of any plan on the host.
func (ph *preemptHost) bound() planKey {
	return planKey{int(ph.victims), ph.price, ph.h.ID}
}

type preemptResult struct {
	key     planKey
	ph      *preemptHost
	victims []*fleet.Placement
}

// gpuUnit is one GPU in the lower bound's GPU counts, which credit each
// allocation holding a GPU with an equal share of it.
const gpuUnit = 1 << 20

// Dimensions of the lower bound.
const (
	dimCPU = iota
	dimMemory
	dimGPUs
)

// preemptPlanner plans evictions for one request. It keeps the candidate
// hosts, ordered by lower bound, and scratch space that examining and
// trying hosts reuses: beyond evaluate's own, the planner allocates nothing
// per host or per trial.
type preemptPlanner struct {
	f   *fleet.Fleet
	req *Request
	s   *shape

	hosts []preemptHost
	heap  []int32 // indexes into hosts: a min-heap by bound

	gpuMode, anyGPUs bool
	// What setClass found for the current class: the deficits (GPUs in
	// gpuUnit), whether every allocation is a candidate (a bare-metal
	// request, or a host rented as bare metal), per GPU whether it is of a
	// model the request may not use, and which GPUs that it may use are in
	// MIG mode.
	cpu, mem, gpus int64
	all            bool
	classBlocked   []bool
	migGPUs        []int
	// What examine found on the current host: per GPU the number of
	// allocations on it and whether no eviction makes it count for the
	// request; the preemptible allocations whose eviction can matter.
	holders []int
	blocked []bool
	cands   []*fleet.Placement
	vals    []int64

	// Scratch for trials.
	scratch fleet.Host
	ids     []string
	idx     []int
	set     []*fleet.Placement
	without []*fleet.Placement
}

func newPreemptPlanner(f *fleet.Fleet, req *Request, s *shape) *preemptPlanner {
	return &preemptPlanner{f: f, req: req, s: s,
		gpuMode: req.Mode == catalog.ModeGPU,
		anyGPUs: req.Mode == catalog.ModeMIG || req.Mode == catalog.ModeShared || req.Mode == catalog.ModePartition || req.Mode == catalog.ModeVF}
}

// setClass reads what all hosts of h's class share: free CPU, memory and
// GPUs (so the deficits), bare-metal rental, GPU models and MIG mode.
func (pl *preemptPlanner) setClass(h *fleet.Host) {
	req, s := pl.req, pl.s
	pl.cpu, pl.mem, pl.gpus = req.CPUMilli-h.FreeCPU(), req.MemoryMiB-h.FreeMemory(), 0
	pl.all = h.MetalAlloc != "" || req.Mode == catalog.ModeMetal
	n := len(h.GPUs)
	pl.classBlocked = slices.Grow(pl.classBlocked[:0], n)[:n]
	pl.migGPUs = pl.migGPUs[:0]
	free := 0
	for i := range h.GPUs {
		g := &h.GPUs[i]
		pl.classBlocked[i] = s.models != nil && !s.models[g.Model]
		if !pl.gpuMode || pl.classBlocked[i] {
			continue
		}
		switch {
		case g.Split():
			pl.classBlocked[i] = true // the operator's partitions stay
		case g.Empty() && !g.MIG:
			free++
		case g.MIG:
			pl.migGPUs = append(pl.migGPUs, i)
		}
	}
	if pl.gpuMode {
		pl.gpus = int64(req.GPUs-free) * gpuUnit
	}
}

// examine reads host h, of the class setClass read last, and its
// allocations, and collects in pl.cands the preemptible allocations whose
// eviction can change whether the request fits. By evaluate's rules
// evicting any other one never does (it frees nothing the request lacks,
// or only GPUs of another model, GPUs a non-preemptible allocation keeps
// busy or GPUs that stay in the operator's MIG mode), so a minimal victim
// set never holds one. It returns the number of preemptible allocations,
// relevant or not.
func (pl *preemptPlanner) examine(h *fleet.Host, allocs []*fleet.Placement) int {
	pl.cands = pl.cands[:0]
	pre := 0
	for _, a := range allocs {
		if a.Preemptible {
			pre++
		}
	}
	if pre == 0 {
		return 0
	}
	if pl.gpuMode {
		n := len(pl.classBlocked)
		pl.blocked = append(pl.blocked[:0], pl.classBlocked...)
		pl.holders = slices.Grow(pl.holders[:0], n)[:n]
		clear(pl.holders)
		for _, i := range pl.migGPUs {
			g := &h.GPUs[i]
			if !g.MIGAuto {
				pl.blocked[i] = true // the operator's MIG mode stays
				continue
			}
			for _, in := range g.Instances {
				if in.Alloc == "" {
					pl.blocked[i] = true // an instance nobody rents stays
				}
			}
		}
		for _, a := range allocs {
			for _, d := range a.Devices {
				if d.GPU >= 0 && d.GPU < n {
					pl.holders[d.GPU]++
					if !a.Preemptible {
						pl.blocked[d.GPU] = true
					}
				}
			}
		}
	} else {
		pl.blocked = pl.classBlocked
	}
	for _, a := range allocs {
		if a.Preemptible && (pl.all || pl.cpu > 0 && a.CPUMilli > 0 || pl.mem > 0 && a.MemoryMiB > 0 || pl.gpuValue(a) > 0) {
			pl.cands = append(pl.cands, a)
		}
	}
	return pre
}

// gpuValue is what evicting a does for the request's GPUs. For ModeGPU it
// credits a with an equal share (in gpuUnit, rounded up) of every GPU it
// holds that evictions can free: a set of victims frees at most as many
// GPUs as its summed values. For MIG and shared requests it is positive
// when a holds a GPU of an allowed model.
func (pl *preemptPlanner) gpuValue(a *fleet.Placement) int64 {
	if !pl.gpuMode && !pl.anyGPUs {
		return 0
	}
	var v int64
	for _, d := range a.Devices {
		if d.GPU < 0 || d.GPU >= len(pl.blocked) || pl.blocked[d.GPU] {
			continue
		}
		if pl.gpuMode {
			n := int64(pl.holders[d.GPU])
			v += (gpuUnit + n - 1) / n
		} else {
			v += gpuUnit
		}
	}
	return v
}

func (pl *preemptPlanner) value(a *fleet.Placement, dim int) int64 {
	switch dim {
	case dimCPU:
		return a.CPUMilli
	case dimMemory:
		return a.MemoryMiB
	}
	return pl.gpuValue(a)
}

// need is how many of the candidates (largest first) it takes to cover
// deficit in dimension dim; -1 when all of them do not.
func (pl *preemptPlanner) need(deficit int64, dim int) int {
	if deficit <= 0 {
		return 0
	}
	vs := pl.vals[:0]
	for _, a := range pl.cands {
		vs = append(vs, pl.value(a, dim))
	}
	pl.vals = vs
	slices.Sort(vs)
	for i := len(vs) - 1; i >= 0; i-- {
		deficit -= vs[i]
		if deficit <= 0 {
			return len(vs) - i
		}
	}
	return -1
}

// covers reports whether evicting a alone covers every deficit.
func (pl *preemptPlanner) covers(a *fleet.Placement) bool {
	return (pl.cpu <= 0 || a.CPUMilli >= pl.cpu) && (pl.mem <= 0 || a.MemoryMiB >= pl.mem) &&
		(pl.gpus <= 0 || pl.gpuValue(a) >= pl.gpus)
}

// add considers the host Hosts[i], of the class setClass read last,
// keeping it with a lower bound on its plans unless even evicting every
// preemptible allocation on it could not free enough CPU, memory or GPUs
// for the request.
func (pl *preemptPlanner) add(i int) {
	h, allocs := pl.f.Hosts[i], pl.f.HostAllocationsAt(i)
	pre := pl.examine(h, allocs)
	if pre == 0 {
		return
	}
	req := pl.req
	ph := preemptHost{h: h, preemptible: int32(pre)}
	if req.Mode == catalog.ModeMetal {
		// Everything on the host must go, and the host must have the shape.
		if pre != len(allocs) || req.GPUs > 0 && len(h.GPUs) != req.GPUs ||
			req.CPUMilli > h.CPUMilli || req.MemoryMiB > h.MemoryMiB {
			return
		}
		ph.victims = int32(pre)
		for _, a := range allocs {
			ph.price += a.PriceMicros
		}
	} else if !pl.bound(&ph) {
		return
	}
	pl.hosts = append(pl.hosts, ph)
}

// bound sets ph's victims and price to a lower bound on the plans for the
// host examine just read, or reports that no eviction helps there. A
// minimal victim set holds only candidates: at least as many as it takes
// to cover each deficit; a single victim only if one covers them all
// (and then it costs at least the cheapest such); otherwise at least the
// price of as many of the cheapest candidates. Exact plans cost at least
// the bound, and greedy ones, not better than exact ones, too.
func (pl *preemptPlanner) bound(ph *preemptHost) bool {
	lb := 1
	for _, n := range [...]int{pl.need(pl.cpu, dimCPU), pl.need(pl.mem, dimMemory), pl.need(pl.gpus, dimGPUs)} {
		if n < 0 {
			return false
		}
		lb = max(lb, n)
	}
	if lb == 1 {
		found := false
		for _, a := range pl.cands {
			if pl.covers(a) && (!found || a.PriceMicros < ph.price) {
				ph.price, found = a.PriceMicros, true
			}
		}
		if found {
			ph.victims = 1
			return true
		}
		lb = 2
	}
	if lb > len(pl.cands) {
		return false
	}
	ps := pl.vals[:0]
	for _, a := range pl.cands {
		ps = append(ps, a.PriceMicros)
	}
	pl.vals = ps
	slices.Sort(ps)
	ph.victims, ph.price = int32(lb), 0
	for _, p := range ps[:lb] {
		ph.price += p
	}
	return true
}

// heapify orders the hosts kept so far into a min-heap by bound.
func (pl *preemptPlanner) heapify() {
	pl.heap = make([]int32, len(pl.hosts))
	for i := range pl.heap {
		pl.heap[i] = int32(i)
	}
	for i := len(pl.heap)/2 - 1; i >= 0; i-- {
		pl.down(i)
	}
}

func (pl *preemptPlanner) heapLess(i, j int) bool {
	a, b := &pl.hosts[pl.heap[i]], &pl.hosts[pl.heap[j]]
	if a.victims != b.victims {
		return a.victims < b.victims
	}
	if a.price != b.price {
		return a.price < b.price
	}
	return a.h.ID < b.h.ID
}

func (pl *preemptPlanner) down(i int) {
	n := len(pl.heap)
	for {
		m, l, r := i, 2*i+1, 2*i+2
		if l < n && pl.heapLess(l, m) {
			m = l
		}
		if r < n && pl.heapLess(r, m) {
			m = r
		}
		if m == i {
			return
		}
		pl.heap[i], pl.heap[m] = pl.heap[m], pl.heap[i]
		i = m
	}
}

// pop removes and returns the host with the lowest bound.
func (pl *preemptPlanner) pop() *preemptHost {
	top := pl.heap[0]
	last := len(pl.heap) - 1
	pl.heap[0] = pl.heap[last]
	pl.heap = pl.heap[:last]
	if last > 0 {
		pl.down(0)
	}
	return &pl.hosts[top]
}

// scratchFleet returns a one-host fleet holding a copy of host h and its
// allocations, where the request can be placed once victims are released.
func scratchFleet(h *fleet.Host, allocs []*fleet.Placement) (*fleet.Fleet, error) {
	hc := *h
	hc.GPUs = append([]fleet.GPU(nil), h.GPUs...)
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
	for _, a := range allocs {
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
	}
	return sf, nil
}

// fitsWithout reports whether the request fits host ph once victims are
// gone. It evaluates the host as the fleet would leave it after releasing
// them, built in scratch space; the fleet does not change.
func (e *Engine) fitsWithout(pl *preemptPlanner, ph *preemptHost, victims []*fleet.Placement) (bool, error) {
	ids := pl.ids[:0]
	for _, v := range victims {
		ids = append(ids, v.ID)
	}
	pl.ids = ids
	if err := pl.f.HostWithout(&pl.scratch, ph.h.ID, ids); err != nil {
		return false, fmt.Errorf("plan preemption: %w", err)
	}
	m := e.evaluate(&pl.scratch, pl.s)
	return m.reason == uint8(reasonNone), nil
}

// planHost finds the best victim set on one host, or nil when none helps or
// none can beat best.
func (e *Engine) planHost(pl *preemptPlanner, ph *preemptHost, best *preemptResult) (*preemptResult, error) {
	// Only the candidates examine keeps can be in a minimal victim set;
	// trying them in order of price, then ID, finds the same sets (ties
	// included) as trying every preemptible allocation would.
	pl.setClass(ph.h)
	pl.examine(ph.h, pl.f.HostAllocationsAt(ph.h.Index()))
	cands := pl.cands
	slices.SortFunc(cands, func(a, b *fleet.Placement) int {
		if c := cmp.Compare(a.PriceMicros, b.PriceMicros); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	if ok, err := e.fitsWithout(pl, ph, cands); err != nil || !ok {
		return nil, err
	}
	if ph.preemptible > maxExactVictims {
		return e.planGreedy(pl, ph, cands)
	}
	var (
		found *preemptResult
		n     = len(cands)
	)
	for k := int(ph.victims); k <= n && found == nil; k++ {
		if best != nil && k > best.key.victims {
			break
		}
		// Every k-subset, in lexicographic order of the price-sorted
		// candidates, so that ties keep the first (cheapest-leaning) set.
		idx := slices.Grow(pl.idx[:0], k)[:k]
		pl.idx = idx
		for i := range idx {
			idx[i] = i
		}
		for {
			key := planKey{k, 0, ph.h.ID}
			for _, i := range idx {
				key.price += cands[i].PriceMicros
			}
			if !(best != nil && !key.less(best.key) || found != nil && !key.less(found.key)) {
				set := pl.set[:0]
				for _, i := range idx {
					set = append(set, cands[i])
				}
				pl.set = set
				ok, err := e.fitsWithout(pl, ph, set)
				if err != nil {
					return nil, err
				}
				if ok {
					found = &preemptResult{key: key, ph: ph, victims: slices.Clone(set)}
				}
			}
			// The next k-subset: bump the last index that can move.
			i := k - 1
			for i >= 0 && idx[i] == n-k+i {
				i--
			}
			if i < 0 {
				break
			}
			idx[i]++
			for j := i + 1; j < k; j++ {
				idx[j] = idx[j-1] + 1
			}
		}
	}
	return found, nil
}

// planGreedy evicts the cheapest candidates until the request fits, then
// drops, most expensive first, every victim it can do without.
func (e *Engine) planGreedy(pl *preemptPlanner, ph *preemptHost, cands []*fleet.Placement) (*preemptResult, error) {
	var set []*fleet.Placement
	for _, c := range cands {
		set = append(set, c)
		ok, err := e.fitsWithout(pl, ph, set)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
	}
	for i := len(set) - 1; i >= 0; i-- {
		without := append(append(pl.without[:0], set[:i]...), set[i+1:]...)
		pl.without = without
		ok, err := e.fitsWithout(pl, ph, without)
		if err != nil {
			return nil, err
		}
		if ok {
			set = append(set[:i], set[i+1:]...)
		}
	}
	key := planKey{len(set), 0, ph.h.ID}
	for _, v := range set {
		key.price += v.PriceMicros
	}
	return &preemptResult{key: key, ph: ph, victims: set}, nil
}

// finishPlan places the request on the chosen host with its victims gone.
func (e *Engine) finishPlan(f *fleet.Fleet, r *preemptResult, req *Request) (*PreemptionPlan, error) {
	sf, err := scratchFleet(r.ph.h, f.HostAllocationsAt(r.ph.h.Index()))
	if err != nil {
		return nil, err
	}
	plan := &PreemptionPlan{HostID: r.ph.h.ID, PriceMicros: r.key.price}
	for _, v := range r.victims {
		if err := sf.Release(v.ID); err != nil {
			return nil, fmt.Errorf("plan preemption: %w", err)
		}
		plan.Victims = append(plan.Victims, v.ID)
	}
	sort.Strings(plan.Victims)
	p, err := e.Place(sf, req)
	if err != nil {
		return nil, fmt.Errorf("plan preemption: host %s does not take the request after evictions: %w", plan.HostID, err)
	}
	plan.Placement = p
	return plan, nil
}
