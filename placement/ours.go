package placement

import (
	"math"

	"github.com/gpucloud/gpucloud/fleet"
)

// Ours is gpucloud's default policy, "scarcity-weighted potential" (see
// docs/PLACEMENT.md). FGD asks how much free GPU a placement strands for the
// expected workload; Ours adds three things the FGD paper leaves out:
//
//   - Potential: for each task type of the workload, how many more copies of
//     it the host could still take, limited by GPU, CPU and memory alike, in
//     GPU milli. A placement is charged the potential it destroys. Unlike
//     FGD's yes/no fit test, this sees that a host with CPU for one more
//     8-GPU job but not two has lost something.
//   - Scarcity: a task type that only a few hosts can run (an 8-GPU job that
//     needs the CPU of the largest hosts, a job pinned to one GPU model)
//     weighs more, by the fleet's GPU capacity over the capacity of the
//     hosts that could run it when empty. This keeps scarce hosts for the
//     jobs that cannot go anywhere else.
//   - CPU spreading: among hosts that are otherwise equal, prefer the one
//     left with more free CPU, so CPU-only and CPU-heavy requests do not
//     strand the GPUs of a few hosts.
//
// FGD's fragmentation change is kept as a second term with half the weight.
type Ours struct {
	w *Workload
	// Per-host caches: the types a host's GPU model can run, and the
	// potential and fragmentation of the "before" view (by epoch).
	byModel           map[string][]int
	epoch             uint64
	potBefore, fragBf float64
	types             []int
	sig               sigScratch
}

// Clone returns a copy with empty caches, for another engine.
func (s *Ours) Clone() Scorer { return &Ours{w: s.w} }

// Weights of the terms, chosen on the openb trace (docs/BENCHMARKS.md).
const (
	oursFragWeight = 0.5
	oursCPUSpread  = 0.3
	// scarcityCap bounds a task type's weight so that a type almost no
	// host can run cannot dominate every decision.
	scarcityCap = 50
)

// NewOurs returns the default policy for workload w (nil: a generic mix).
// Calibrate w against the fleet first to weigh scarce task types.
func NewOurs(w *Workload) *Ours {
	if w == nil || len(w.Types) == 0 {
		w = defaultWorkload()
	}
	return &Ours{w: w}
}

func (*Ours) Name() string { return DefaultPolicy }

func (s *Ours) Score(_ *Request, before, after *View) float64 {
	if before.Epoch == 0 || before.Epoch != s.epoch {
		s.types = s.accessible(before)
		s.potBefore, s.fragBf = s.w.measure(before, s.types, &s.sig)
		s.epoch = before.Epoch
	}
	potAfter, fragAfter := s.w.measure(after, s.types, &s.sig)
	loss := s.potBefore - potAfter
	frag := fragAfter - s.fragBf
	sc := (loss + oursFragWeight*frag) / 1000
	if after.CPUCap > 0 {
		sc -= oursCPUSpread * float64(after.CPU) / float64(after.CPUCap)
	}
	return sc
}

// accessible lists the task types whose model constraint admits the host's
// GPUs. The others contribute the same to every option of every host (no
// potential; FGD counts all free GPU as stranded, which changes by exactly
// the request's size wherever it goes), so leaving them out changes no
// ranking and saves most of the work on traces with many pinned types.
func (s *Ours) accessible(v *View) []int {
	model := ""
	if len(v.GPUs) > 0 {
		model = v.GPUs[0].Model
		for i := range v.GPUs {
			if v.GPUs[i].Model != model {
				model = "\x00mixed"
				break
			}
		}
	}
	if s.byModel == nil {
		s.byModel = map[string][]int{}
	}
	if list, ok := s.byModel[model]; ok {
		return list
	}
	list := []int{}
	for i := range s.w.Types {
		t := &s.w.Types[i]
		if t.Models == nil || model == "\x00mixed" || t.Models[model] {
			list = append(list, i)
		}
	}
	s.byModel[model] = list
	return list
}

// sigScratch holds per-view results by GPU signature (GPUs, Milli,
// Models): task types that differ only in CPU or memory share them.
type sigScratch struct {
	stamp []uint64
	n     []int
	frag  []int
	cur   uint64
}

// measure returns, for the listed task types, the potential (the GPU milli
// the host could still give each type if only that type arrived, weighted
// by popularity and scarcity) and FGD's fragmentation F_n(M). It computes
// the GPU part once per signature and applies CPU and memory per type.
func (w *Workload) measure(v *View, types []int, sc *sigScratch) (pot, frag float64) {
	w.signatures()
	if len(sc.stamp) < len(w.sigs) {
		sc.stamp = make([]uint64, len(w.sigs))
		sc.n = make([]int, len(w.sigs))
		sc.frag = make([]int, len(w.sigs))
	}
	sc.cur++
	total := v.TotalFree()
	for _, i := range types {
		t := &w.Types[i]
		if t.GPUs == 0 {
			frag += t.Weight * float64(total)
			continue
		}
		si := w.sigOf[i]
		if sc.stamp[si] != sc.cur {
			sc.stamp[si] = sc.cur
			sc.n[si], sc.frag[si] = gpuFit(v, t)
		}
		n := sc.n[si]
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
		if t.Scarcity >= 0 {
			s := t.Scarcity
			if s == 0 {
				s = 1
			}
			pot += t.Weight * s * float64(n*t.GPUs*t.Milli)
		}
		if sc.n[si] == 0 || v.CPU < t.CPUMilli {
			frag += t.Weight * float64(total)
		} else {
			frag += t.Weight * float64(sc.frag[si])
		}
	}
	return pot, frag
}

// gpuFit counts the copies of t the host's GPUs could take (ignoring CPU
// and memory) and the free GPU milli that t could not use.
func gpuFit(v *View, t *TaskType) (n, frag int) {
	if t.Milli < 1000 {
		for j := range v.GPUs {
			g := &v.GPUs[j]
			if g.Shareable && g.Free >= t.Milli && (t.Models == nil || t.Models[g.Model]) {
				n += g.Free / t.Milli
			} else {
				frag += g.Free
			}
		}
		return n, frag
	}
	whole := 0
	for j := range v.GPUs {
		g := &v.GPUs[j]
		if g.Whole && (t.Models == nil || t.Models[g.Model]) {
			whole++
		} else {
			frag += g.Free
		}
	}
	return whole / t.GPUs, frag
}

// fitCount is how many copies of t fit on the host by GPU, CPU and memory.
func fitCount(v *View, t *TaskType) int {
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
	return n
}

// Calibrate sets each task type's Scarcity from the hosts as they would be
// when empty: the fleet's GPU capacity over the GPU capacity that could run
// the type, capped at scarcityCap. A type no host can run gets -1 and is
// ignored, since no placement can help it.
func (w *Workload) Calibrate(hosts []*fleet.Host) {
	total := 0.0
	for _, h := range hosts {
		total += float64(1000 * len(h.GPUs))
	}
	views := make([]View, len(hosts))
	for i, h := range hosts {
		views[i] = emptyView(h)
	}
	for i := range w.Types {
		t := &w.Types[i]
		if t.GPUs == 0 {
			continue
		}
		supply := 0.0
		for j := range views {
			supply += float64(fitCount(&views[j], t) * t.GPUs * t.Milli)
		}
		if supply == 0 {
			t.Scarcity = -1
			continue
		}
		t.Scarcity = math.Min(scarcityCap, total/supply)
	}
}

func emptyView(h *fleet.Host) View {
	v := View{CPU: h.CPUMilli, Memory: h.MemoryMiB, CPUCap: h.CPUMilli, MemoryCap: h.MemoryMiB}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		v.GPUs = append(v.GPUs, GPUView{Model: g.Model, Free: 1000, Mem: g.MemoryMiB, Whole: !g.MIG, Shareable: !g.MIG, MIG: g.MIG, Island: g.Island})
	}
	return v
}
