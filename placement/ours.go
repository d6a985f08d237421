package placement

import "math"

// Ours is gpucloud's default policy. It starts from fragmentation gradient
// descent and adds what the FGD paper leaves out (see docs/PLACEMENT.md).
type Ours struct {
	w *Workload
	// Alpha weighs the potential loss against FGD's fragmentation change.
	Alpha, Beta float64
	Quantize    bool
}

// NewOurs returns the default policy for workload w (nil: a generic mix).
func NewOurs(w *Workload) *Ours {
	if w == nil || len(w.Types) == 0 {
		w = defaultWorkload()
	}
	return &Ours{w: w, Alpha: 1, Beta: 0}
}

func (*Ours) Name() string { return DefaultPolicy }

// potential is how much GPU (milli) the host could still give each task
// type of the workload if only that type arrived, weighted by popularity:
// the number of copies that fit by GPU, CPU and memory, times their size.
func (w *Workload) potential(v *View) float64 {
	p := 0.0
	for i := range w.Types {
		t := &w.Types[i]
		if t.GPUs == 0 {
			continue
		}
		n := 0
		if t.Milli < 1000 {
			for j := range v.GPUs {
				g := &v.GPUs[j]
				if g.Shareable && (t.Models == nil || t.Models[g.Model]) {
					n += g.Free / t.Milli
				}
			}
		} else {
			whole := 0
			for j := range v.GPUs {
				g := &v.GPUs[j]
				if g.Whole && (t.Models == nil || t.Models[g.Model]) {
					whole++
				}
			}
			n = whole / t.GPUs
		}
		if t.CPUMilli > 0 {
			if c := int(v.CPU / t.CPUMilli); c < n {
				n = c
			}
		}
		if t.MemoryMiB > 0 {
			if c := int(v.Memory / t.MemoryMiB); c < n {
				n = c
			}
		}
		p += t.Weight * float64(n*t.GPUs*t.Milli)
	}
	return p
}

func (s *Ours) Score(req *Request, before, after *View) float64 {
	loss := s.w.potential(before) - s.w.potential(after)
	frag := s.w.fragmentation(after) - s.w.fragmentation(before)
	sc := (s.Alpha*loss + s.Beta*frag) / 1000
	if s.Quantize {
		return -math.Trunc(100 / (1 + math.Exp(sc)))
	}
	return sc
}
