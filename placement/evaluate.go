package placement

import (
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// View is what a scorer sees of a host: free resources, before or after a
// candidate placement.
type View struct {
	// CPU and Memory are free; CPUCap and MemoryCap are the host's totals.
	CPU, Memory       int64
	CPUCap, MemoryCap int64
	GPUs              []GPUView
	// MIGMix is the engine's expected MIG profile mix (profile ID ->
	// weight), for scorers that weigh MIG geometry.
	MIGMix map[int]float64
	// Class identifies the host state of a "before" view (the fleet class
	// ID, unique in the process; -1 when unknown): equal classes have equal
	// views, so a scorer may cache what it derives from one.
	Class int
	// Epoch changes whenever a "before" view is filled for a new host, so a
	// scorer may cache what it derives from it across the host's options.
	Epoch uint64
}

// GPUView is one GPU's free resources.
type GPUView struct {
	Model string
	// Free is the free compute in milli (0..1000).
	Free int
	// Mem is the free GPU memory in MiB.
	Mem int64
	// Whole is true when the GPU can be rented whole: empty, not in MIG mode.
	Whole bool
	// Shareable is true when a time-sliced share may go on the GPU.
	Shareable bool
	// MIG fields: mode, used memory slots (bit i = slot i), used compute
	// slices, whether a +me instance is present, and instance counts per
	// profile ID (index = profile ID, IDs below 32).
	MIG    bool
	Mask   uint8
	Slices int8
	Media  bool
	Count  [32]int8
	Island int
	// Profiles is the MIG profile table of the GPU's model (nil without
	// MIG), for scorers that weigh MIG geometry.
	Profiles []catalog.MIGProfile
	// Parts and PartsUsed are an AMD GPU's devices (compute partitions or
	// VFs) and those held (bit i: device i); Parts is 0 for a GPU that is
	// not split.
	Parts     int8
	PartsUsed uint16
}

// FreeGPUs is the scalar free GPU amount used by FGD: whole free GPUs plus
// the largest partial one, in milli.
func (v *View) FreeGPUs() int {
	full, part := 0, 0
	for i := range v.GPUs {
		f := v.GPUs[i].Free
		if f == 1000 {
			full += 1000
		} else if f > part {
			part = f
		}
	}
	return full + part
}

// TotalFree sums the free milli of every GPU.
func (v *View) TotalFree() int {
	n := 0
	for i := range v.GPUs {
		n += v.GPUs[i].Free
	}
	return n
}

func (e *Engine) fillView(v *View, h *fleet.Host) {
	e.epoch++
	fillViewFrom(v, h)
	v.Epoch = e.epoch
	v.MIGMix = e.migMix
	if c := h.Class(); c != nil {
		v.Class = c.ID
	}
}

// fillProfiles attaches the MIG profile tables, which only MIG requests
// need.
func (e *Engine) fillProfiles(v *View) {
	for i := range v.GPUs {
		v.GPUs[i].Profiles = e.profiles(v.GPUs[i].Model)
	}
}

// profiles returns the MIG profile table of a model, cached.
func (e *Engine) profiles(model string) []catalog.MIGProfile {
	if p, ok := e.migTables[model]; ok {
		return p
	}
	var p []catalog.MIGProfile
	if m, err := e.cat.Model(model); err == nil {
		p = m.MIGProfiles
	}
	if e.migTables == nil {
		e.migTables = map[string][]catalog.MIGProfile{}
	}
	e.migTables[model] = p
	return p
}

// fillViewFrom describes host h's free resources.
func fillViewFrom(v *View, h *fleet.Host) {
	v.Epoch, v.Class, v.MIGMix = 0, -1, nil
	v.CPU, v.Memory = h.FreeCPU(), h.FreeMemory()
	v.CPUCap, v.MemoryCap = h.CPUMilli, h.MemoryMiB
	if cap(v.GPUs) < len(h.GPUs) {
		v.GPUs = make([]GPUView, len(h.GPUs))
	}
	v.GPUs = v.GPUs[:len(h.GPUs)]
	for i := range h.GPUs {
		g := &h.GPUs[i]
		gv := GPUView{
			Model: g.Model, Free: g.FreeMilli(), Island: g.Island,
			Whole:     g.Empty() && !g.MIG && !g.Split(),
			Shareable: g.WholeAlloc == "" && !g.MIG && !g.Split(),
			MIG:       g.MIG,
		}
		if g.Split() {
			gv.Parts, gv.PartsUsed = int8(g.Parts), g.PartsUsed
		}
		gv.Mem = g.MemoryMiB - g.UsedMemMiB
		if g.WholeAlloc != "" {
			gv.Mem = 0
		}
		if g.Split() {
			gv.Mem = g.MemoryMiB * int64(g.PartsFree()) / int64(g.Parts)
		}
		if g.MIG {
			gv.Mask = g.SlotMask()
			gv.Slices = int8(g.SlicesUsed())
			gv.Media = g.HasMedia()
			for _, in := range g.Instances {
				if in.ProfileID >= 0 && in.ProfileID < 32 {
					gv.Count[in.ProfileID]++
				}
			}
		}
		v.GPUs[i] = gv
	}
}

func (v *View) copyFrom(o *View) {
	v.CPU, v.Memory, v.CPUCap, v.MemoryCap, v.MIGMix = o.CPU, o.Memory, o.CPUCap, o.MemoryCap, o.MIGMix
	v.Epoch, v.Class = 0, -1
	v.GPUs = append(v.GPUs[:0], o.GPUs...)
}

// enableMIGPenalty ranks options that must switch a GPU into MIG mode after
// every option on a GPU already in MIG mode: the switch needs an idle GPU
// and sometimes a reset.
const enableMIGPenalty = 1e9

// evaluate decides whether a host (the representative of its class) can take
// a request of shape s, and if so, with which option and score.
func (e *Engine) evaluate(h *fleet.Host, s *shape) memo {
	req := &s.req
	fail := func(r Reason) memo { return memo{reason: uint8(r)} }
	if r := admits(h, s); r != reasonNone {
		return fail(r)
	}
	e.fillView(&e.before, h)
	if req.Mode == catalog.ModeMIG {
		e.fillProfiles(&e.before)
	}
	var best memo
	found := false
	try := func(opt uint64, penalty float64) {
		e.after.copyFrom(&e.before)
		e.apply(&e.after, s, opt)
		sc := e.scorer.Score(req, &e.before, &e.after) + penalty
		if !found || sc < best.score {
			best.score, best.option, found = sc, opt, true
		}
	}
	allowed := func(g *fleet.GPU) bool { return s.models == nil || s.models[g.Model] }
	switch req.Mode {
	case catalog.ModeCPU:
		try(0, 0)
	case catalog.ModeMetal:
		var all uint64
		for i := range h.GPUs {
			all |= 1 << uint(i)
		}
		try(all, 0)
	case catalog.ModeGPU:
		r := e.gpuOptions(h, req.GPUs, allowed, try)
		if r != reasonNone {
			return fail(r)
		}
	case catalog.ModeShared:
		if otherTenant := shareOptions(h, req, allowed, try); !found {
			if otherTenant {
				return fail(ReasonShareTenant)
			}
			return fail(ReasonShare)
		}
	case catalog.ModeMIG:
		if r := e.migOptions(h, s, allowed, try); !found {
			return fail(r)
		}
	case catalog.ModePartition, catalog.ModeVF:
		if r := partOptions(h, req, allowed, try); !found {
			return fail(r)
		}
	}
	if !found {
		return fail(ReasonGPUs)
	}
	return best
}

// admits applies the checks that do not depend on an option: the host's
// state, zone, labels, GPU models, emptiness for bare metal, and free CPU
// and memory. It returns reasonNone when the host passes them all.
func admits(h *fleet.Host, s *shape) Reason {
	req := &s.req
	if h.State != fleet.Schedulable {
		return ReasonState
	}
	if h.MetalAlloc != "" {
		return ReasonMetalHeld
	}
	if s.zones != nil && !s.zones[h.Zone] {
		return ReasonZone
	}
	for _, l := range req.Labels {
		if !l.Match(h.Labels) {
			return ReasonLabels
		}
	}
	if r := admitsGPUs(h, s); r != reasonNone {
		return r
	}
	if req.CPUMilli > h.FreeCPU() {
		return ReasonCPU
	}
	if req.MemoryMiB > h.FreeMemory() {
		return ReasonMemory
	}
	return reasonNone
}

// admitsGPUs checks the host's GPUs against the request's mode and models:
// a GPU request needs a GPU of an allowed model, and bare metal an empty
// host whose GPUs are all of allowed models and none in MIG mode.
func admitsGPUs(h *fleet.Host, s *shape) Reason {
	req := &s.req
	if req.Mode != catalog.ModeCPU {
		if req.Mode != catalog.ModeMetal && len(h.GPUs) == 0 {
			return ReasonModel
		}
		if s.models != nil {
			any := false
			for i := range h.GPUs {
				if s.models[h.GPUs[i].Model] {
					any = true
					break
				}
			}
			if !any {
				return ReasonModel
			}
		}
	}
	if req.Mode == catalog.ModeMetal {
		if !h.Empty() || req.GPUs > 0 && len(h.GPUs) != req.GPUs {
			return ReasonNotEmpty
		}
		// Metal takes every GPU whole, which a GPU in MIG mode (or holding
		// instances the operator made), or split into partitions or VFs by
		// its operator, cannot give.
		for i := range h.GPUs {
			if g := &h.GPUs[i]; g.MIG || g.Split() || !g.Empty() {
				return ReasonNotEmpty
			}
		}
		if s.models != nil {
			for i := range h.GPUs {
				if !s.models[h.GPUs[i].Model] {
					return ReasonModel
				}
			}
		}
	}
	return reasonNone
}

// shareOptions offers the GPUs with room for a time-sliced share: the
// first GPU of each distinct (used milli, used memory) pair stands for the
// GPUs after it with the same pair. A GPU whose shares belong to another tenant is not offered;
// otherTenant reports whether such a GPU had room.
func shareOptions(h *fleet.Host, req *Request, allowed func(*fleet.GPU) bool, try func(uint64, float64)) (otherTenant bool) {
	var seen [][2]int64
shareLoop:
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !allowed(g) || g.WholeAlloc != "" || g.MIG || g.Split() || g.FreeMilli() < req.ShareMilli ||
			g.MemoryMiB > 0 && g.MemoryMiB-g.UsedMemMiB < req.ShareMemoryMiB {
			continue
		}
		if g.Shares > 0 && g.ShareTenant != req.Tenant {
			// Room enough, but another tenant's MPS server: the shares of
			// one GPU belong to one tenant.
			otherTenant = true
			continue
		}
		k := [2]int64{int64(g.UsedMilli), g.UsedMemMiB}
		for _, x := range seen {
			if x == k {
				continue shareLoop
			}
		}
		seen = append(seen, k)
		try(uint64(i), 0)
	}
	return otherTenant
}

// gpuOptions offers sets of n whole GPUs. On hosts with NVLink islands a
// multi-GPU set stays inside one island, and islands with the fewest free
// GPUs are offered first so that ties keep big islands whole.
func (e *Engine) gpuOptions(h *fleet.Host, n int, allowed func(*fleet.GPU) bool, try func(uint64, float64)) Reason {
	free := 0
	islands := map[int][]int{}
	nvlink := false
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if g.Island >= 0 {
			nvlink = true
		}
		if allowed(g) && g.Empty() && !g.MIG && !g.Split() {
			free++
			islands[g.Island] = append(islands[g.Island], i)
		}
	}
	if free < n {
		return ReasonGPUs
	}
	if !nvlink {
		var opt uint64
		k := 0
		for i := range h.GPUs {
			g := &h.GPUs[i]
			if k < n && allowed(g) && g.Empty() && !g.MIG && !g.Split() {
				opt |= 1 << uint(i)
				k++
			}
		}
		try(opt, 0)
		return reasonNone
	}
	// Order islands by free count, then by island number, for determinism.
	type isl struct {
		id   int
		gpus []int
	}
	var list []isl
	for id, g := range islands {
		if len(g) >= n && (id >= 0 || n == 1) {
			list = append(list, isl{id, g})
		}
	}
	if len(list) == 0 {
		return ReasonNVLink
	}
	for i := 1; i < len(list); i++ {
		for j := i; j > 0 && (len(list[j].gpus) < len(list[j-1].gpus) ||
			len(list[j].gpus) == len(list[j-1].gpus) && list[j].id < list[j-1].id); j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
	}
	for _, is := range list {
		var opt uint64
		for _, i := range is.gpus[:n] {
			opt |= 1 << uint(i)
		}
		try(opt, 0)
	}
	return reasonNone
}

// migOptions offers every valid start slot on GPUs already in MIG mode, and
// on empty GPUs that could be switched into it (at a penalty).
func (e *Engine) migOptions(h *fleet.Host, s *shape, allowed func(*fleet.GPU) bool, try func(uint64, float64)) Reason {
	anyProfile := false
	var seen [][9]byte
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !allowed(g) {
			continue
		}
		prof := s.profile(e.cat, g.Model)
		if prof == nil {
			continue
		}
		anyProfile = true
		if g.WholeAlloc != "" || g.Shares > 0 || g.Split() || !g.MIG && !g.Empty() {
			continue
		}
		// GPUs with the same layout offer the same options.
		// GPUs with the same model and layout offer the same options.
		var key [9]byte
		if g.Model != h.GPUs[0].Model {
			key[8] = 2 // mixed-model host: never deduplicate across models
		}
		if g.MIG {
			key[8] |= 1
			for _, in := range g.Instances {
				key[in.Start] = byte(in.ProfileID + 1)
			}
		}
		dup := false
		for _, k := range seen {
			if k == key {
				dup = true
				break
			}
		}
		if dup {
			continue
		}
		seen = append(seen, key)
		gv := &e.before.GPUs[i]
		for _, st := range prof.Starts {
			if migFits(gv, prof, st) {
				penalty := 0.0
				if !g.MIG {
					penalty = enableMIGPenalty
				}
				try(encodeMIG(i, st, !g.MIG), penalty)
			}
		}
	}
	if !anyProfile {
		return ReasonNoMIG
	}
	return ReasonMIGSlot
}

// apply changes view v as if option opt of shape s were placed.
func (e *Engine) apply(v *View, s *shape, opt uint64) {
	req := &s.req
	v.CPU -= req.CPUMilli
	v.Memory -= req.MemoryMiB
	switch req.Mode {
	case catalog.ModeGPU, catalog.ModeMetal:
		for i := range v.GPUs {
			if opt&(1<<uint(i)) != 0 {
				g := &v.GPUs[i]
				g.Free, g.Mem, g.Whole, g.Shareable = 0, 0, false, false
			}
		}
		if req.Mode == catalog.ModeMetal {
			v.CPU, v.Memory = 0, 0
		}
	case catalog.ModeShared:
		g := &v.GPUs[opt]
		g.Free -= req.ShareMilli
		g.Mem -= req.ShareMemoryMiB
		g.Whole = false
	case catalog.ModePartition, catalog.ModeVF:
		g := &v.GPUs[opt&0xff]
		part := int(opt >> 8)
		g.PartsUsed |= 1 << uint(part)
		used := 0
		for b := g.PartsUsed; b != 0; b &= b - 1 {
			used++
		}
		g.Free = 1000 - used*1000/int(g.Parts)
		g.Mem -= g.Mem / int64(int(g.Parts)-used+1)
	case catalog.ModeMIG:
		i, st, _ := decodeMIG(opt)
		g := &v.GPUs[i]
		prof := s.profile(e.cat, g.Model)
		g.MIG, g.Whole, g.Shareable = true, false, false
		g.Mask |= uint8((1<<prof.MemorySlots)-1) << st
		g.Slices += int8(prof.ComputeSlices)
		g.Free = 1000 - int(g.Slices)*1000/catalog.MIGComputeSlices
		if prof.MediaExtensions {
			g.Media = true
		}
		if prof.ID < 32 {
			g.Count[prof.ID]++
		}
	}
}

// partOptions offers, on each GPU in the request's mode (its operator's
// compute partition, or exposed as the request's VF count) with a free
// device, that GPU's first free device; GPUs of one model with the same
// devices held stand for each other. It returns the reason when none is
// offered: no GPU in the mode at all, or none with a free device.
func partOptions(h *fleet.Host, req *Request, allowed func(*fleet.GPU) bool, try func(uint64, float64)) Reason {
	inMode := false
	type key struct {
		model string
		used  uint16
	}
	var seen []key
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if !allowed(g) || !g.Split() {
			continue
		}
		if req.Mode == catalog.ModeVF {
			if g.VFs != req.VFs {
				continue
			}
		} else if g.VFs > 0 || g.Partition != req.Partition || req.MemoryPartition != "" && g.MemoryPartition != req.MemoryPartition {
			continue
		}
		inMode = true
		part := g.FirstFreePart()
		if part < 0 {
			continue
		}
		k := key{g.Model, g.PartsUsed}
		dup := false
		for _, x := range seen {
			dup = dup || x == k
		}
		if dup {
			continue
		}
		seen = append(seen, k)
		try(uint64(i)|uint64(part)<<8, 0)
	}
	if !inMode {
		return ReasonNoPartition
	}
	return ReasonPartitionFull
}
