package fleet

import (
	"cmp"
	"slices"

	"github.com/gpucloud/gpucloud/catalog"
)

// GPU modes as GPUUsage reports them: how a GPU is partitioned now.
const (
	// ModeWhole is a GPU neither in MIG mode nor time-sliced: free, or
	// rented whole (bare metal included).
	ModeWhole = "whole"
	// ModeShared is a GPU that holds time-sliced shares.
	ModeShared = "shared"
	// ModeMIG is a GPU in MIG mode.
	ModeMIG = "mig"
	// ModePartitioned is an AMD GPU split into devices (compute
	// partitions or VFs); SlicesUsed and SlicesFree count its devices.
	ModePartitioned = "partitioned"
)

// GPUCount is how many GPUs of a model are in a mode (ModeWhole,
// ModeShared, ModeMIG) and allocated (anything rented on them) or free.
// For GPUs in MIG mode, SlicesUsed and SlicesFree count their compute
// slices rented and not rented (a MIG instance that exists on the hardware
// without an allocation counts as free).
type GPUCount struct {
	Model                  string
	Mode                   string
	Allocated              bool
	GPUs                   int
	SlicesUsed, SlicesFree int
}

// GPUUsage counts the fleet's GPUs, hosts of every state included, by
// model, mode and allocation, sorted by those fields (free before
// allocated). It reads every host: a caller that repeats it keys it on
// Changes.
func (f *Fleet) GPUUsage() []GPUCount {
	type key struct {
		model, mode string
		allocated   bool
	}
	counts := map[key]*GPUCount{}
	for _, h := range f.Hosts {
		for i := range h.GPUs {
			g := &h.GPUs[i]
			k := key{model: g.Model, mode: ModeWhole, allocated: h.MetalAlloc != "" || g.WholeAlloc != "" || g.Shares > 0}
			used := 0
			if g.MIG {
				k.mode = ModeMIG
				for _, in := range g.Instances {
					if in.Alloc != "" {
						used += in.Slices
					}
				}
				k.allocated = k.allocated || used > 0
			} else if g.Shares > 0 {
				k.mode = ModeShared
			} else if g.Split() {
				k.mode = ModePartitioned
				used = g.Parts - g.PartsFree()
				k.allocated = k.allocated || used > 0
			}
			c := counts[k]
			if c == nil {
				c = &GPUCount{Model: k.model, Mode: k.mode, Allocated: k.allocated}
				counts[k] = c
			}
			c.GPUs++
			if g.MIG {
				c.SlicesUsed += used
				c.SlicesFree += max(catalog.MIGComputeSlices-used, 0)
			}
			if g.Split() {
				c.SlicesUsed += used
				c.SlicesFree += g.PartsFree()
			}
		}
	}
	out := make([]GPUCount, 0, len(counts))
	for _, c := range counts {
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b GPUCount) int {
		return cmp.Or(cmp.Compare(a.Model, b.Model), cmp.Compare(a.Mode, b.Mode), boolCmp(a.Allocated, b.Allocated))
	})
	return out
}

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// Changes counts the changes to the fleet's hosts (added, state changed,
// an allocation applied or released): two equal counts of one fleet mean
// nothing changed in between.
func (f *Fleet) Changes() uint64 { return f.changes }
