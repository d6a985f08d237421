package placement

import "github.com/gpucloud/gpucloud/catalog"

// migFits reports whether an instance of prof can start at slot st on a GPU
// in the given state (in MIG mode, or empty and switchable).
func migFits(g *GPUView, prof *catalog.MIGProfile, st int) bool {
	if !g.MIG && !g.Whole {
		return false
	}
	if st < 0 || st+prof.MemorySlots > catalog.MIGMemorySlots {
		return false
	}
	want := uint8((1<<prof.MemorySlots)-1) << st
	if g.Mask&want != 0 {
		return false
	}
	if int(g.Slices)+prof.ComputeSlices > catalog.MIGComputeSlices {
		return false
	}
	if prof.MediaExtensions && g.Media {
		return false
	}
	if prof.ID < 32 && int(g.Count[prof.ID]) >= prof.MaxPerGPU {
		return false
	}
	return true
}

// MIGRoom counts how many more instances of prof still fit on a GPU. Filling
// valid starts from the left is optimal: all instances of one profile have
// the same size and aligned starts, so the earliest-ending choice never
// blocks more than another would.
func MIGRoom(g *GPUView, prof *catalog.MIGProfile) int {
	mask, slices, n := g.Mask, int(g.Slices), 0
	count := 0
	if prof.ID < 32 {
		count = int(g.Count[prof.ID])
	}
	if prof.MediaExtensions && g.Media {
		return 0
	}
	for _, st := range prof.Starts {
		if count+n >= prof.MaxPerGPU || slices+prof.ComputeSlices > catalog.MIGComputeSlices {
			break
		}
		if st+prof.MemorySlots > catalog.MIGMemorySlots {
			continue
		}
		want := uint8((1<<prof.MemorySlots)-1) << st
		if mask&want == 0 {
			mask |= want
			slices += prof.ComputeSlices
			n++
			if prof.MediaExtensions {
				break
			}
		}
	}
	return n
}

// MIGCapacity is how much of the expected profile mix a GPU can still take:
// for each profile, the fraction of a fresh GPU's room for it that is left,
// weighted by the mix. A fresh GPU scores the mix's total weight.
func MIGCapacity(g *GPUView, profiles []catalog.MIGProfile, mix map[int]float64) float64 {
	fresh := GPUView{MIG: true}
	total := 0.0
	for i := range profiles {
		p := &profiles[i]
		w := 1.0
		if mix != nil {
			w = mix[p.ID]
		} else if p.MediaExtensions {
			w = 0
		}
		if w <= 0 {
			continue
		}
		max := MIGRoom(&fresh, p)
		if max == 0 {
			continue
		}
		total += w * float64(MIGRoom(g, p)) / float64(max)
	}
	return total
}
