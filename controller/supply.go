package controller

import (
	"sort"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// PoolSupply is how many instances of an offering a zone could hold if its
// schedulable hosts were empty (Capacity), and how many more fit now
// (Free).
type PoolSupply struct{ Capacity, Free int }

// poolSupply estimates capacity and free room for every offering in every
// zone of the fleet. It is the supply side of the spot market, a price
// signal rather than an allocation: it counts per host from GPU, MIG slice,
// share, CPU and memory arithmetic, ignoring NVLink islands and MIG slot
// geometry, which only the placement engine decides. Hosts of one
// equivalence class have identical state, so each class is counted once.
func poolSupply(f *fleet.Fleet, cat *catalog.Catalog) map[cloud.Pool]PoolSupply {
	out := map[cloud.Pool]PoolSupply{}
	offerings := cat.Offerings()
	type perOffering struct{ capacity, free int }
	for _, c := range f.Classes() {
		members := c.Members()
		if len(members) == 0 {
			continue
		}
		rep := f.Hosts[members[0]]
		if rep.State != fleet.Schedulable && rep.State != "" {
			continue
		}
		counts := make([]perOffering, len(offerings))
		for i, o := range offerings {
			counts[i].capacity, counts[i].free = hostSupply(rep, o, cat)
		}
		for _, hi := range members {
			h := f.Hosts[hi]
			for i, o := range offerings {
				if counts[i].capacity == 0 {
					continue
				}
				k := cloud.Pool{Offering: o.Name, Zone: h.Zone}
				pc := out[k]
				pc.Capacity += counts[i].capacity
				pc.Free += counts[i].free
				out[k] = pc
			}
		}
	}
	return out
}

// hostSupply counts one offering on one host: when empty, and now.
func hostSupply(h *fleet.Host, o *catalog.Offering, cat *catalog.Catalog) (capacity, free int) {
	model := ""
	if o.Model != "" {
		m, err := cat.CanonicalModel(o.Model)
		if err != nil {
			return 0, 0
		}
		model = m
	}
	var gpus []*fleet.GPU
	for i := range h.GPUs {
		if model == "" || h.GPUs[i].Model == model {
			gpus = append(gpus, &h.GPUs[i])
		}
	}
	cpuCap, cpuFree := int(1<<30), int(1<<30)
	if o.VCPUs > 0 && o.Mode != catalog.ModeMetal {
		cpuCap = int(h.CPUMilli / (int64(o.VCPUs) * 1000))
		cpuFree = int(max(h.FreeCPU(), 0) / (int64(o.VCPUs) * 1000))
	}
	if o.MemoryMiB > 0 && o.Mode != catalog.ModeMetal {
		cpuCap = min(cpuCap, int(h.MemoryMiB/o.MemoryMiB))
		cpuFree = min(cpuFree, int(max(h.FreeMemory(), 0)/o.MemoryMiB))
	}
	switch o.Mode {
	case catalog.ModeMetal:
		if len(gpus) == 0 || (o.GPUs != 0 && len(h.GPUs) != o.GPUs) || len(gpus) != len(h.GPUs) {
			return 0, 0
		}
		if h.Empty() {
			return 1, 1
		}
		return 1, 0
	case catalog.ModeGPU:
		if o.GPUs <= 0 {
			return 0, 0
		}
		freeGPUs := 0
		splitGPUs := 0
		for _, g := range gpus {
			if g.Split() {
				splitGPUs++ // its operator's partitions: never whole
				continue
			}
			if g.Empty() && !g.MIG {
				freeGPUs++
			}
		}
		if h.MetalAlloc != "" {
			freeGPUs = 0
		}
		capacity, free = (len(gpus)-splitGPUs)/o.GPUs, freeGPUs/o.GPUs
	case catalog.ModeMIG:
		m, err := cat.Model(model)
		if err != nil {
			return 0, 0
		}
		p := m.Profile(o.MIGProfile)
		if p == nil || p.ComputeSlices == 0 {
			return 0, 0
		}
		per := min(catalog.MIGComputeSlices/p.ComputeSlices, max(p.MaxPerGPU, 1))
		for _, g := range gpus {
			capacity += per
			if g.WholeAlloc == "" && g.Shares == 0 && h.MetalAlloc == "" {
				free += min((catalog.MIGComputeSlices-g.SlicesUsed())/p.ComputeSlices, per-g.CountProfile(p.ID))
			}
		}
	case catalog.ModeShared:
		if o.ShareMilli <= 0 {
			return 0, 0
		}
		for _, g := range gpus {
			capacity += fleet.MilliPerGPU / o.ShareMilli
			if !g.MIG && g.WholeAlloc == "" && h.MetalAlloc == "" {
				free += g.FreeMilli() / o.ShareMilli
			}
		}
	case catalog.ModePartition, catalog.ModeVF:
		// Only GPUs already in the offering's mode count: placement never
		// changes an AMD GPU's mode.
		for _, g := range gpus {
			in := g.Split() && (o.Mode == catalog.ModeVF && g.VFs == o.VFs ||
				o.Mode == catalog.ModePartition && g.VFs == 0 && g.Partition == o.Partition &&
					(o.MemoryPartition == "" || g.MemoryPartition == o.MemoryPartition))
			if !in {
				continue
			}
			capacity += g.Parts
			if h.MetalAlloc == "" {
				free += g.PartsFree()
			}
		}
	case catalog.ModeCPU:
		return cpuCap, cpuFree
	default:
		return 0, 0
	}
	return min(capacity, cpuCap), min(free, cpuFree)
}

// sortedPools returns the pools of a supply map in name order.
func sortedPools[V any](m map[cloud.Pool]V) []cloud.Pool {
	out := make([]cloud.Pool, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Offering != out[j].Offering {
			return out[i].Offering < out[j].Offering
		}
		return out[i].Zone < out[j].Zone
	})
	return out
}
