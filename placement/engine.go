// Package placement decides where an allocation goes. Place is a function of
// a fleet snapshot and a request: it filters hosts (state, zone, labels, GPU
// model, CPU, memory, GPUs), enumerates the ways the request fits each host
// (which GPUs, which MIG slot, which GPU to share), and ranks them with a
// pluggable Scorer. It reads no clock and no global randomness: ties are
// broken by a generator seeded from the engine's seed and the request ID.
//
// Hosts with identical state form a fleet.Class; the engine evaluates a class
// once per request shape and remembers the result until the class changes,
// so a placement costs O(distinct host states), not O(hosts).
package placement

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// Engine places requests with one scoring policy. It caches per-class
// evaluations, so it is not safe for concurrent use; use one per goroutine.
type Engine struct {
	cat    *catalog.Catalog
	scorer Scorer
	seed   uint64
	// MIG profile mix used to choose slots; see SetMIGMix.
	migMix    map[int]float64
	migTables map[string][]catalog.MIGProfile
	// firstWins breaks ties by a fixed host order instead of at random;
	// see OrderedTies. ranks caches each host's place in that order (by
	// index into the fleet's hosts, for the fleet rankFleet); tieOrder
	// holds the places set with SetTieOrder.
	firstWins bool
	ranks     []uint64
	rankFleet uint64
	tieOrder  map[string]uint64
	// tables[shape] caches evaluate's result per fleet class slot, valid
	// while the slot's generation matches; fleetID names the fleet they
	// were built on.
	tables  [][]memo
	entries int // cached evaluations over all tables
	tick    uint64
	fleetID uint64
	shapes  map[string]int
	byID    []*shape
	// scratch
	before, after View
	epoch         uint64
	keyBuf        []byte
}

// NewEngine returns an engine for the scorer. seed makes tie-breaking
// reproducible.
func NewEngine(cat *catalog.Catalog, scorer Scorer, seed int64) *Engine {
	if c, ok := scorer.(interface{ Clone() Scorer }); ok {
		// Scorers with per-evaluation caches get their own copy.
		scorer = c.Clone()
	}
	if cat == nil {
		cat = catalog.Default()
	}
	e := &Engine{cat: cat, scorer: scorer, seed: uint64(seed), shapes: map[string]int{}}
	if o, ok := scorer.(OrderedTies); ok {
		e.firstWins = o.OrderedTies()
	}
	e.reset()
	return e
}

// Recalibrator is implemented by scorers whose weights follow the fleet's
// state (the default policy's scarcity). Recalibrate reports whether the
// weights changed, in which case cached scores are stale.
type Recalibrator interface {
	Recalibrate(f *fleet.Fleet) bool
}

// Recalibrate lets an adaptive scorer re-read the fleet, and drops cached
// scores when its weights changed. Callers (the scheduler loop, the trace
// replay) call it periodically, e.g. every few hundred placements; between
// calls Place stays a function of the snapshot and the request.
func (e *Engine) Recalibrate(f *fleet.Fleet) bool {
	r, ok := e.scorer.(Recalibrator)
	if !ok || !r.Recalibrate(f) {
		return false
	}
	e.tables, e.entries = nil, 0
	return true
}

// WorkloadSetter is implemented by scorers that weigh an expected workload
// (the default policy).
type WorkloadSetter interface {
	SetWorkload(w *Workload, f *fleet.Fleet)
}

// SetWorkload gives the scorer a new expected workload, calibrated against
// f, and drops cached scores. It reports false, and does nothing, when the
// scorer weighs none.
func (e *Engine) SetWorkload(w *Workload, f *fleet.Fleet) bool {
	ws, ok := e.scorer.(WorkloadSetter)
	if !ok {
		return false
	}
	ws.SetWorkload(w, f)
	e.tables, e.entries = nil, 0
	return true
}

// Scorer returns the engine's scoring policy.
func (e *Engine) Scorer() Scorer { return e.scorer }

// SetMIGMix sets the expected mix of MIG profiles (by profile ID, any
// positive weights) that slot choice keeps room for. The default weighs every
// profile without media extensions equally.
func (e *Engine) SetMIGMix(mix map[int]float64) {
	e.migMix = mix
	e.reset()
}

// MIGMix returns the mix SetMIGMix set (nil: every profile without media
// extensions, equally). Read it; do not change it.
func (e *Engine) MIGMix() map[int]float64 { return e.migMix }

// maxShapes bounds the request shapes an engine remembers, and
// maxCacheEntries the cached evaluations over all shapes (about 24 bytes
// each): a long-running scheduler sees ever new shapes.
const maxShapes = 4096

var maxCacheEntries = 1 << 21 // a variable so tests can make it small

func (e *Engine) reset() {
	e.shapes = map[string]int{}
	e.byID = nil
	e.tables, e.entries = nil, 0
}

// memo is the engine's cached evaluation of one class for one shape.
type memo struct {
	gen    uint32 // the slot generation it was computed for; 0 = none
	reason uint8
	option uint64
	score  float64
}

// table returns the cache of shape s for fleet f, sized to its slots.
func (e *Engine) table(f *fleet.Fleet, s *shape, slots int) []memo {
	if f.ID() != e.fleetID {
		e.fleetID = f.ID()
		e.tables, e.entries = nil, 0
	}
	for len(e.tables) <= s.id {
		e.tables = append(e.tables, nil)
	}
	e.tick++
	s.used = e.tick
	t := e.tables[s.id]
	if len(t) < slots {
		e.entries += slots - len(t)
		t = append(t, make([]memo, slots-len(t))...)
		e.tables[s.id] = t
		if e.entries > maxCacheEntries {
			e.evict(s)
			t = e.tables[s.id]
		}
	}
	return t
}

// evict drops the caches of the less recently used half of the shapes
// (never keep's), keeping the shapes themselves.
func (e *Engine) evict(keep *shape) {
	var used []uint64
	for id, t := range e.tables {
		if t != nil && id != keep.id {
			used = append(used, e.byID[id].used)
		}
	}
	sort.Slice(used, func(i, j int) bool { return used[i] < used[j] })
	if len(used) == 0 {
		return
	}
	cut := used[len(used)/2]
	for id, t := range e.tables {
		if t != nil && id != keep.id && e.byID[id].used <= cut {
			e.entries -= len(t)
			e.tables[id] = nil
		}
	}
}

// lookup returns the evaluation of class c for shape s, computing it on a
// miss.
func (e *Engine) lookup(f *fleet.Fleet, c *fleet.Class, s *shape) memo {
	_, _, gens := f.Slots()
	t := e.table(f, s, len(gens))
	m := &t[c.Slot()]
	if m.gen != gens[c.Slot()] {
		*m = e.evaluate(c.Rep, s)
		m.gen = gens[c.Slot()]
	}
	return *m
}

// shape is a request with everything per-host evaluation needs resolved. Two
// requests of one shape fit the same hosts with the same scores.
type shape struct {
	id     int
	used   uint64 // engine tick of the last use, for cache eviction
	req    Request
	models map[string]bool
	zones  map[string]bool
	// profiles resolves the MIG profile per GPU model (nil entry: none).
	profiles map[string]*catalog.MIGProfile
}

func (e *Engine) shapeOf(req *Request) *shape {
	b := e.keyBuf[:0]
	b = append(b, req.Mode...)
	b = append(b, 0)
	for _, v := range []int64{int64(req.GPUs), int64(req.ShareMilli), req.ShareMemoryMiB, req.CPUMilli, req.MemoryMiB} {
		b = strconv.AppendInt(b, v, 36)
		b = append(b, ',')
	}
	b = append(b, req.MIGProfile...)
	b = append(b, 0)
	if req.Mode == catalog.ModePartition || req.Mode == catalog.ModeVF {
		b = append(b, req.Partition...)
		b = append(b, '/')
		b = append(b, req.MemoryPartition...)
		b = strconv.AppendInt(b, int64(req.VFs), 36)
		b = append(b, 0)
	}
	for _, m := range req.Models {
		b = append(b, m...)
		b = append(b, '|')
	}
	b = append(b, 0)
	for _, z := range req.Zones {
		b = append(b, z...)
		b = append(b, '|')
	}
	b = append(b, 0)
	for _, l := range req.Labels {
		b = append(b, l.String()...)
		b = append(b, 0)
	}
	if req.Mode == catalog.ModeShared {
		// Only shares depend on the tenant (which GPUs they may join);
		// other modes keep one shape, and one cache, for all tenants.
		b = append(b, 0)
		b = append(b, req.Tenant...)
	}
	e.keyBuf = b
	if id, ok := e.shapes[string(b)]; ok {
		return e.byID[id]
	}
	if len(e.byID) >= maxShapes {
		e.reset()
	}
	s := &shape{id: len(e.byID), req: *req, profiles: map[string]*catalog.MIGProfile{}}
	s.req.Group = nil
	if req.Mode != catalog.ModeShared {
		s.req.Tenant = "" // not part of the shape: Place sets it per request
	}
	s.req.Labels = append([]LabelSelector(nil), req.Labels...)
	if len(req.Models) > 0 {
		s.models = map[string]bool{}
		for _, m := range req.Models {
			s.models[m] = true
		}
	}
	if len(req.Zones) > 0 {
		s.zones = map[string]bool{}
		for _, z := range req.Zones {
			s.zones[z] = true
		}
	}
	e.shapes[string(b)] = s.id
	e.byID = append(e.byID, s)
	return s
}

func (s *shape) profile(cat *catalog.Catalog, model string) *catalog.MIGProfile {
	p, ok := s.profiles[model]
	if !ok {
		if m, err := cat.Model(model); err == nil && m.SupportsMIG() {
			p, _ = m.ResolveProfile(s.req.MIGProfile)
		}
		s.profiles[model] = p
	}
	return p
}

// Place chooses where req goes in f. It returns the placement, an
// *InsufficientCapacityError saying why no host fits, or a *RequestError for
// a request that is invalid whatever the fleet. It does not change f (apart
// from the engine's cache entries); commit the result with f.Apply.
func (e *Engine) Place(f *fleet.Fleet, in *Request) (*fleet.Placement, error) {
	// Validate canonicalises model names in place: work on a copy so the
	// caller's request is never changed.
	r := *in
	r.Models = append([]string(nil), in.Models...)
	req := &r
	if err := req.Validate(e.cat); err != nil {
		return nil, err
	}
	s := e.shapeOf(req)
	rng := newRNG(e.seed, req.ID)
	var counts [numReasons]int
	hosts := 0
	var (
		best      *fleet.Class
		bestMemo  memo
		weight    int
		lead      int // with firstWins: best's first host in tie order
		feasible  []candidate
		needGroup = req.Group != nil
		firstWins = e.firstWins
	)
	// Scan the class index as dense arrays: sizes, generations and this
	// shape's cache line up slot by slot, so the scan stays in cache.
	slots, sizes, gens := f.Slots()
	table := e.table(f, s, len(slots))
	for i, n32 := range sizes {
		if n32 == 0 {
			continue
		}
		n := int(n32)
		hosts += n
		m := &table[i]
		if m.gen != gens[i] {
			*m = e.evaluate(slots[i].Rep, s)
			m.gen = gens[i]
		}
		if m.reason != 0 {
			counts[m.reason] += n
			continue
		}
		c := slots[i]
		if needGroup {
			feasible = append(feasible, candidate{c, *m})
			continue
		}
		switch {
		case best == nil || m.score < bestMemo.score:
			best, bestMemo, weight = c, *m, n
			if firstWins {
				lead = e.leader(f, c)
			}
		case m.score == bestMemo.score && firstWins:
			if r := e.leader(f, c); e.ranks[r] < e.ranks[lead] {
				best, bestMemo, lead = c, *m, r
			}
		case m.score == bestMemo.score:
			// Reservoir sampling weighted by class size picks uniformly
			// among all tied hosts.
			weight += n
			if rng.intn(weight) < n {
				best, bestMemo = c, *m
			}
		}
	}
	var host *fleet.Host
	if needGroup {
		host, bestMemo = e.pickGrouped(f, req, feasible, rng, &counts)
	} else if h := e.preferred(f, req.Prefer, table, bestMemo.score, best != nil); h != nil {
		host = h
	} else if best != nil {
		if firstWins {
			host = f.Hosts[lead]
		} else {
			members := best.Members()
			host = f.Hosts[members[rng.intn(len(members))]]
		}
	}
	if host == nil {
		return nil, insufficient(req, hosts, &counts)
	}
	p := e.build(host, s, bestMemo)
	p.ID, p.Tenant, p.Preemptible, p.PriceMicros = req.ID, req.Tenant, req.Preemptible, req.PriceMicros
	return p, nil
}

// preferred is the first of prefer whose class was found feasible in this
// scan (table, memos of the current generation) with the best score, or
// nil: Request.Prefer breaks ties and nothing else. The scan has already
// drawn its random numbers, so a request's placement without a preferred
// host among the best is the one it would have had without Prefer.
func (e *Engine) preferred(f *fleet.Fleet, prefer []string, table []memo, best float64, any bool) *fleet.Host {
	if !any {
		return nil
	}
	_, _, gens := f.Slots()
	for _, id := range prefer {
		h := f.Host(id)
		if h == nil || h.Class() == nil {
			continue
		}
		i := h.Class().Slot()
		if i < 0 || i >= len(table) || i >= len(gens) {
			continue
		}
		if m := &table[i]; m.gen == gens[i] && m.reason == 0 && m.score == best {
			return h
		}
	}
	return nil
}

// insufficient says why none of the hosts fits req: counts holds, per
// reason, the number of hosts that reason ruled out.
func insufficient(req *Request, hosts int, counts *[numReasons]int) *InsufficientCapacityError {
	reasons := map[string]int{}
	for r, n := range counts {
		if n > 0 {
			reasons[Reason(r).Describe(req)] += n
		}
	}
	return &InsufficientCapacityError{Hosts: hosts, Reasons: reasons}
}

// OrderedTies is implemented by scorers that want ties broken by a fixed
// host order rather than at random for each placement. The FGD paper's
// simulator behaves this way: it prefixes every node's name with a seeded
// random permutation and keeps the smallest name among equal scores, so
// within one run the same host always wins a tie. Our FGD does too, to stay
// comparable.
type OrderedTies interface {
	OrderedTies() bool
}

// SetTieOrder sets the host order in which an OrderedTies scorer's ties are
// broken: lower ranks first. Hosts without a rank come after all ranked
// ones, in the engine's own order. Without a call, the order is a random
// permutation of the hosts drawn from the engine seed (by host ID, so a
// host keeps its place as others join).
func (e *Engine) SetTieOrder(rank map[string]uint64) {
	e.tieOrder = rank
	e.ranks = e.ranks[:0]
}

// leader is the member of class c that comes first in the tie order, as an
// index into f.Hosts; e.ranks then covers it. It costs O(class size),
// which only the order-tie policies pay.
func (e *Engine) leader(f *fleet.Fleet, c *fleet.Class) int {
	if f.ID() != e.rankFleet {
		e.rankFleet, e.ranks = f.ID(), e.ranks[:0]
	}
	best := -1
	for _, i := range c.Members() {
		for j := len(e.ranks); j <= i; j++ {
			e.ranks = append(e.ranks, e.tieRank(f.Hosts[j].ID))
		}
		if best < 0 || e.ranks[i] < e.ranks[best] || e.ranks[i] == e.ranks[best] && i < best {
			best = i
		}
	}
	return best
}

// tieRank is a host's place in the tie order.
func (e *Engine) tieRank(id string) uint64 {
	if r, ok := e.tieOrder[id]; ok && r < 1<<63 {
		return r
	}
	return 1<<63 | newRNG(e.seed, id).next()>>1
}

type candidate struct {
	class *fleet.Class
	memo  memo
}

// pickGrouped chooses among feasible classes honouring the request's
// placement group. Cluster groups stay on the rack of their first member and
// prefer a host that already runs a member; spread groups avoid hosts (or
// racks) that do.
func (e *Engine) pickGrouped(f *fleet.Fleet, req *Request, cands []candidate, rng *rng, counts *[numReasons]int) (*fleet.Host, memo) {
	g := req.Group
	onHost := map[string]bool{}
	for _, h := range g.Hosts {
		onHost[h] = true
	}
	onRack := map[string]bool{}
	for _, r := range g.Racks {
		onRack[r] = true
	}
	ok := func(h *fleet.Host) (bool, float64) {
		switch g.Strategy {
		case Spread:
			if onHost[h.ID] || g.ByRack && onRack[h.Rack] {
				return false, 0
			}
		case Cluster:
			if len(onRack) > 0 && !onRack[h.Rack] {
				return false, 0
			}
			if onHost[h.ID] {
				return true, -1 // same host: same NVLink fabric
			}
		}
		return true, 0
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].memo.score < cands[j].memo.score })
	var (
		best     *fleet.Host
		bestMemo memo
		bestTier float64
		ties     int
	)
	for _, c := range cands {
		if best != nil && c.memo.score > bestMemo.score && bestTier == 0 {
			// Later classes only score worse; a same-host (tier -1) match
			// might still come, so keep looking only while none is found.
			if g.Strategy != Cluster || len(onHost) == 0 {
				break
			}
		}
		for _, hi := range c.class.Members() {
			h := f.Hosts[hi]
			fits, tier := ok(h)
			if !fits {
				counts[ReasonGroup]++
				continue
			}
			switch {
			case best == nil || tier < bestTier || tier == bestTier && c.memo.score < bestMemo.score:
				best, bestMemo, bestTier, ties = h, c.memo, tier, 1
			case tier == bestTier && c.memo.score == bestMemo.score:
				ties++
				if rng.intn(ties) == 0 {
					best, bestMemo = h, c.memo
				}
			}
		}
	}
	return best, bestMemo
}

// build turns the chosen option into a placement on host h.
func (e *Engine) build(h *fleet.Host, s *shape, m memo) *fleet.Placement {
	req := &s.req
	p := &fleet.Placement{HostID: h.ID, CPUMilli: req.CPUMilli, MemoryMiB: req.MemoryMiB, Score: m.score}
	opt := m.option
	switch req.Mode {
	case catalog.ModeMetal:
		p.Metal = true
		p.CPUMilli, p.MemoryMiB = h.CPUMilli, h.MemoryMiB
		for i := range h.GPUs {
			p.Devices = append(p.Devices, fleet.Device{GPU: i, UUID: h.GPUs[i].UUID, Kind: fleet.Whole})
		}
	case catalog.ModeGPU:
		for i := range h.GPUs {
			if opt&(1<<uint(i)) != 0 {
				p.Devices = append(p.Devices, fleet.Device{GPU: i, UUID: h.GPUs[i].UUID, Kind: fleet.Whole})
			}
		}
	case catalog.ModeShared:
		i := int(opt)
		p.Devices = []fleet.Device{{GPU: i, UUID: h.GPUs[i].UUID, Kind: fleet.Share, Milli: req.ShareMilli, MemoryMiB: req.ShareMemoryMiB}}
	case catalog.ModePartition, catalog.ModeVF:
		i, part := int(opt&0xff), int(opt>>8)
		g := &h.GPUs[i]
		d := fleet.Device{GPU: i, UUID: g.UUID, Kind: fleet.VF, Part: part, Parts: g.Parts}
		if req.Mode == catalog.ModePartition {
			d.Kind, d.Partition = fleet.Partition, g.Partition
		}
		p.Devices = []fleet.Device{d}
	case catalog.ModeMIG:
		i, start, enable := decodeMIG(opt)
		g := &h.GPUs[i]
		prof := s.profile(e.cat, g.Model)
		p.Devices = []fleet.Device{{
			GPU: i, UUID: g.UUID, Kind: fleet.MIGSlice,
			MIGProfileID: prof.ID, MIGProfile: prof.Name, MIGStart: start,
			MIGSlots: prof.MemorySlots, MIGSlices: prof.ComputeSlices, MIGMedia: prof.MediaExtensions,
			EnableMIG: enable,
		}}
	}
	return p
}

func encodeMIG(gpu, start int, enable bool) uint64 {
	v := uint64(gpu) | uint64(start)<<8
	if enable {
		v |= 1 << 16
	}
	return v
}

func decodeMIG(v uint64) (gpu, start int, enable bool) {
	return int(v & 0xff), int(v>>8) & 0xff, v&(1<<16) != 0
}

// rng is a small splitmix64 generator; tie-breaking needs speed and
// reproducibility, not quality.
type rng struct{ s uint64 }

func newRNG(seed uint64, id string) *rng {
	h := fnv.New64a()
	h.Write([]byte(id))
	return &rng{s: seed ^ h.Sum64()}
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// Explain describes a placement in one line, for logs and `describe`.
func Explain(p *fleet.Placement) string {
	var parts []string
	for _, d := range p.Devices {
		switch d.Kind {
		case fleet.Whole:
			parts = append(parts, fmt.Sprintf("gpu%d", d.GPU))
		case fleet.Share:
			parts = append(parts, fmt.Sprintf("gpu%d:%dm", d.GPU, d.Milli))
		case fleet.MIGSlice:
			parts = append(parts, fmt.Sprintf("gpu%d:%s@%d", d.GPU, d.MIGProfile, d.MIGStart))
		case fleet.Partition:
			parts = append(parts, fmt.Sprintf("gpu%d:%s#%d", d.GPU, strings.ToLower(d.Partition), d.Part))
		case fleet.VF:
			parts = append(parts, fmt.Sprintf("gpu%d:vf%d/%d", d.GPU, d.Part, d.Parts))
		}
	}
	return p.HostID + " [" + strings.Join(parts, " ") + "]"
}

// Count evaluates req against every host of f without placing it: hosts is
// the number of hosts considered, fit how many could take it right now,
// and reasons counts the others by the first reason that rules them out
// (as in *InsufficientCapacityError). A placement group is ignored: Count
// answers "is there room for one", which is what availability displays and
// dry runs ask. It returns a *RequestError for an invalid request and
// changes nothing but the engine's cache.
func (e *Engine) Count(f *fleet.Fleet, in *Request) (hosts, fit int, reasons map[string]int, err error) {
	r := *in
	r.Models = append([]string(nil), in.Models...)
	r.Group = nil
	req := &r
	if err := req.Validate(e.cat); err != nil {
		return 0, 0, nil, err
	}
	s := e.shapeOf(req)
	var counts [numReasons]int
	slots, sizes, gens := f.Slots()
	table := e.table(f, s, len(slots))
	for i, n32 := range sizes {
		if n32 == 0 {
			continue
		}
		n := int(n32)
		hosts += n
		m := &table[i]
		if m.gen != gens[i] {
			*m = e.evaluate(slots[i].Rep, s)
			m.gen = gens[i]
		}
		if m.reason != 0 {
			counts[m.reason] += n
			continue
		}
		fit += n
	}
	reasons = map[string]int{}
	for r, n := range counts {
		if n > 0 {
			reasons[Reason(r).Describe(req)] += n
		}
	}
	return hosts, fit, reasons, nil
}
