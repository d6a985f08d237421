package placement

import (
	"math"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// GPUCloud is gpucloud's default policy, "scarcity-weighted potential" (see
// docs/PLACEMENT.md). FGD asks how much free GPU a placement strands for the
// expected workload; GPUCloud keeps that as a minor term and adds:
//
//   - Potential: for each task type of the workload, how many more copies of
//     it the host could still take, limited by GPU, CPU and memory alike, in
//     GPU milli. A placement is charged the potential it destroys. Unlike
//     FGD's yes/no fit test, this sees that a host with CPU for one more
//     8-GPU job but not two has lost something.
//   - Scarcity: a task type that few hosts can still run (an 8-GPU job that
//     needs a whole big host, a job pinned to one GPU model) weighs more: by
//     the fleet's free GPU over the free GPU that could run it. Recalibrate
//     recomputes it from the fleet as it fills, so the last hosts able to
//     take a large job are guarded ever more closely.
//   - CPU spreading: prefer the host left with more free CPU, so CPU-only and
//     CPU-heavy requests do not strand the GPUs of a few hosts.
type GPUCloud struct {
	w   *Workload
	cfg GPUCloudConfig

	// Caches, valid until the next Recalibrate: the task types per host GPU
	// model, and the measures of "before" views by fleet class.
	byModel     map[string]*hostTypes
	beforeCache map[int]*baseMeasure
	// gaps prices a shared GPU's free room for the workload (nil: no
	// shares expected, or ShareValue is 0).
	gaps *gapValues
	// Per-evaluation state, keyed by the before view's epoch.
	epoch uint64
	base  *baseMeasure
	types *hostTypes
	sig   sigScratch
}

// GPUCloudConfig weighs the terms of the default policy. The defaults were
// chosen on the openb trace (docs/BENCHMARKS.md).
type GPUCloudConfig struct {
	// FragWeight weighs FGD's fragmentation change against the potential
	// loss (both in GPU milli).
	FragWeight float64
	// CPUSpread is the bonus, in GPUs, for leaving a host's CPU entirely
	// free; it scales with the free CPU share.
	CPUSpread float64
	// ScarcityCap bounds a task type's scarcity, so that a type almost no
	// host can run cannot dominate every decision.
	ScarcityCap float64
	// MIGWeight weighs the loss of MIG room (in fresh-GPU equivalents of
	// the profile mix) for MIG requests.
	MIGWeight float64
	// RecalibrateThreshold is the relative change in some task type's
	// scarcity below which Recalibrate keeps the old weights (and the
	// engine's cached scores).
	RecalibrateThreshold float64
	// ShareValue weighs, for a share, the packing value of the GPU room it
	// takes (see gapValues), against the other terms in GPUs.
	ShareValue float64
}

// DefaultGPUCloudConfig returns the tuned defaults.
func DefaultGPUCloudConfig() GPUCloudConfig {
	return GPUCloudConfig{FragWeight: 0.25, CPUSpread: 1.5, ScarcityCap: 200, MIGWeight: 4, RecalibrateThreshold: 0.3, ShareValue: 10}
}

// NewGPUCloud returns the default policy for workload w (nil: a generic mix)
// with the default configuration.
func NewGPUCloud(w *Workload) *GPUCloud { return NewGPUCloudConfig(w, DefaultGPUCloudConfig()) }

// NewGPUCloudConfig returns the default policy with a custom configuration.
func NewGPUCloudConfig(w *Workload, cfg GPUCloudConfig) *GPUCloud {
	if w == nil || len(w.Types) == 0 {
		w = defaultWorkload()
	}
	s := &GPUCloud{w: w, cfg: cfg}
	if cfg.ShareValue > 0 {
		s.gaps = newGapValues(w)
	}
	return s
}

// Clone returns a copy with empty caches, for another engine.
func (s *GPUCloud) Clone() Scorer { return &GPUCloud{w: s.w, cfg: s.cfg, gaps: s.gaps} }

func (*GPUCloud) Name() string { return DefaultPolicy }

func (s *GPUCloud) Score(req *Request, before, after *View) float64 {
	if before.Epoch == 0 || before.Epoch != s.epoch {
		s.types = s.forHost(before)
		s.base = s.baseOf(before)
		s.epoch = before.Epoch
	}
	// The after view differs from the before view in a few GPUs: adjust the
	// per-signature counts for those instead of recounting every GPU.
	ht, b := s.types, s.base
	raw := append(s.sig.raw[:0], b.raw...)
	frg := append(s.sig.frag[:0], b.frag...)
	for j := range after.GPUs {
		gb, ga := &before.GPUs[j], &after.GPUs[j]
		if gb.Free == ga.Free && gb.Whole == ga.Whole && gb.Shareable == ga.Shareable {
			continue
		}
		for si, t := range ht.sigs {
			r0, f0 := ht.contrib(gb, t)
			r1, f1 := ht.contrib(ga, t)
			raw[si] += r1 - r0
			frg[si] += f1 - f0
		}
	}
	s.sig.raw, s.sig.frag = raw, frg
	potAfter, fragAfter := ht.combine(after, raw, frg)
	sc := (b.pot - potAfter + s.cfg.FragWeight*(fragAfter-b.fragSum)) / 1000
	if req.Mode == catalog.ModeShared && s.gaps != nil {
		for j := range after.GPUs {
			if gb, ga := before.GPUs[j].Free, after.GPUs[j].Free; gb != ga {
				sc += s.cfg.ShareValue * s.gaps.loss(gb, ga)
			}
		}
	}
	if after.CPUCap > 0 {
		sc -= s.cfg.CPUSpread * float64(after.CPU) / float64(after.CPUCap)
	}
	if req.Mode == catalog.ModeMIG {
		sc += s.cfg.MIGWeight * migLoss(before, after)
	}
	return sc
}

// baseMeasure is what the default policy derives from a "before" view:
// per-signature counts and the view's potential and fragmentation.
type baseMeasure struct {
	raw, frag    []int
	pot, fragSum float64
}

// baseOf measures a before view, from the cache when the fleet class was
// seen before.
func (s *GPUCloud) baseOf(v *View) *baseMeasure {
	if b, ok := s.beforeCache[v.Class]; ok && v.Class >= 0 {
		return b
	}
	ht := s.types
	b := &baseMeasure{raw: make([]int, len(ht.sigs)), frag: make([]int, len(ht.sigs))}
	for j := range v.GPUs {
		g := &v.GPUs[j]
		for si, t := range ht.sigs {
			r, f := ht.contrib(g, t)
			b.raw[si] += r
			b.frag[si] += f
		}
	}
	b.pot, b.fragSum = ht.combine(v, b.raw, b.frag)
	if v.Class >= 0 {
		if s.beforeCache == nil {
			s.beforeCache = map[int]*baseMeasure{}
		}
		s.beforeCache[v.Class] = b
	}
	return b
}

// migLoss is how much of the expected MIG profile mix the changed GPUs can
// no longer take: the fragmentation idea applied to MIG geometry. A 3g
// instance at slot 4 instead of 0 leaves room for a 4g, so it loses less.
func migLoss(before, after *View) float64 {
	loss := 0.0
	for i := range after.GPUs {
		b, a := &before.GPUs[i], &after.GPUs[i]
		if b.Mask == a.Mask && b.MIG == a.MIG {
			continue
		}
		loss += MIGCapacity(b, a.Profiles, after.MIGMix) - MIGCapacity(a, a.Profiles, after.MIGMix)
	}
	return loss
}

// Recalibrate recomputes every task type's scarcity from the fleet's
// current free resources. It reports whether the weights changed by more
// than the configured threshold; only then are they replaced (and the
// engine must drop its cached scores).
func (s *GPUCloud) Recalibrate(f *fleet.Fleet) bool {
	views, weights := classViews(f)
	w := &Workload{Types: append([]TaskType(nil), s.w.Types...)}
	w.calibrate(views, weights, s.cfg.ScarcityCap)
	changed := false
	for i := range w.Types {
		a, b := w.Types[i].Scarcity, s.w.Types[i].Scarcity
		if a != b && (a <= 0 || b <= 0 || math.Abs(a-b) > s.cfg.RecalibrateThreshold*math.Max(a, b)) {
			changed = true
			break
		}
	}
	if !changed {
		return false
	}
	s.w = w
	s.byModel, s.beforeCache, s.epoch = nil, nil, 0
	return true
}

// classViews is a view of each class of f's schedulable hosts, weighed by
// the class's size (hosts of one class have equal views).
func classViews(f *fleet.Fleet) (views []View, weights []float64) {
	for _, c := range f.Classes() {
		h := c.Rep
		if h.State != fleet.Schedulable || h.MetalAlloc != "" {
			continue
		}
		var v View
		fillViewFrom(&v, h)
		views = append(views, v)
		weights = append(weights, float64(c.Size()))
	}
	return views, weights
}

// Workload returns the expected workload the policy weighs, with the
// scarcity of its last calibration. Read it; do not change it.
func (s *GPUCloud) Workload() *Workload { return s.w }

// SetWorkload replaces the expected workload (nil or empty: the generic
// mix): its task types are calibrated against f's current state (when f is
// not nil) and its shares priced again. A scheduler that learns the mix
// from what it runs calls it through Engine.SetWorkload.
func (s *GPUCloud) SetWorkload(w *Workload, f *fleet.Fleet) {
	if w == nil || len(w.Types) == 0 {
		w = defaultWorkload()
	}
	nw := &Workload{Types: append([]TaskType(nil), w.Types...)}
	if f != nil {
		views, weights := classViews(f)
		nw.calibrate(views, weights, s.cfg.ScarcityCap)
	}
	s.w, s.gaps = nw, nil
	if s.cfg.ShareValue > 0 {
		s.gaps = newGapValues(nw)
	}
	s.byModel, s.beforeCache, s.epoch = nil, nil, 0
}

// Calibrate sets each task type's Scarcity from the hosts as they would be
// when empty, capped at the default cap. Use it when a workload is built
// before the fleet fills; GPUCloud.Recalibrate then follows the fleet.
func (w *Workload) Calibrate(hosts []*fleet.Host) {
	views := make([]View, len(hosts))
	for i, h := range hosts {
		views[i] = emptyView(h)
	}
	w.calibrate(views, nil, DefaultGPUCloudConfig().ScarcityCap)
}

// calibrate sets Scarcity = free GPU of the views / free GPU that could run
// the type, capped; -1 for a type no view can run (no placement helps it).
// weights, when not nil, counts each view that many times.
func (w *Workload) calibrate(views []View, weights []float64, cap float64) {
	w.signatures()
	total := 0.0
	supply := make([]float64, len(w.Types))
	sigN := make([]int, len(w.sigs))
	sigRep := make([]*TaskType, len(w.sigs))
	for i := range w.Types {
		sigRep[w.sigOf[i]] = &w.Types[i]
	}
	for j := range views {
		v := &views[j]
		wt := 1.0
		if weights != nil {
			wt = weights[j]
		}
		total += wt * float64(v.TotalFree())
		for si, t := range sigRep {
			if t.GPUs > 0 {
				sigN[si], _ = gpuFit(v, t)
			}
		}
		for i := range w.Types {
			t := &w.Types[i]
			if t.GPUs == 0 {
				continue
			}
			n := capByHost(v, t, sigN[w.sigOf[i]])
			supply[i] += wt * float64(n*t.GPUs*t.Milli)
		}
	}
	for i := range w.Types {
		t := &w.Types[i]
		switch {
		case t.GPUs == 0:
		case supply[i] == 0:
			t.Scarcity = -1
		default:
			t.Scarcity = math.Min(cap, total/supply[i])
		}
	}
}

// capByHost limits n copies of t to what the host's CPU and memory allow.
func capByHost(v *View, t *TaskType, n int) int {
	// Divide only when CPU or memory binds: most of the time they don't.
	if t.CPUMilli > 0 && int64(n)*t.CPUMilli > v.CPU {
		n = int(v.CPU / t.CPUMilli)
	}
	if t.MemoryMiB > 0 && int64(n)*t.MemoryMiB > v.Memory {
		n = int(v.Memory / t.MemoryMiB)
	}
	return n
}

func emptyView(h *fleet.Host) View {
	v := View{CPU: h.CPUMilli, Memory: h.MemoryMiB, CPUCap: h.CPUMilli, MemoryCap: h.MemoryMiB, Class: -1}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		gv := GPUView{Model: g.Model, Free: 1000, Mem: g.MemoryMiB, Whole: !g.MIG && !g.Split(), Shareable: !g.MIG && !g.Split(), MIG: g.MIG, Island: g.Island}
		if g.Split() {
			gv.Parts = int8(g.Parts)
		}
		v.GPUs = append(v.GPUs, gv)
	}
	return v
}

// forHost returns the task types a host's GPU model can run. The others
// contribute the same to every option of every host (no potential; FGD
// counts all free GPU as stranded, which changes by exactly the request's
// size wherever it goes), so leaving them out changes no ranking.
func (s *GPUCloud) forHost(v *View) *hostTypes {
	const mixed = "\x00mixed"
	model := ""
	if len(v.GPUs) > 0 {
		model = v.GPUs[0].Model
		for i := range v.GPUs {
			if v.GPUs[i].Model != model {
				model = mixed
				break
			}
		}
	}
	if s.byModel == nil {
		s.byModel = map[string]*hostTypes{}
	}
	if ht, ok := s.byModel[model]; ok {
		return ht
	}
	s.w.signatures()
	ht := &hostTypes{mixed: model == mixed}
	sigIdx := map[int]int{}
	for i := range s.w.Types {
		t := &s.w.Types[i]
		if t.GPUs == 0 || !(t.Models == nil || model == mixed || t.Models[model]) {
			continue
		}
		gs := s.w.sigOf[i]
		j, ok := sigIdx[gs]
		if !ok {
			j = len(ht.sigs)
			sigIdx[gs] = j
			ht.sigs = append(ht.sigs, t)
		}
		ft := flatType{sig: j, gpus: 1, cpu: t.CPUMilli, mem: t.MemoryMiB, fragW: t.Weight}
		if t.Milli >= 1000 {
			ft.gpus = t.GPUs
		}
		if t.Scarcity >= 0 {
			sc := t.Scarcity
			if sc == 0 {
				sc = 1
			}
			ft.potW = t.Weight * sc * float64(t.GPUs*t.Milli)
		}
		ht.types = append(ht.types, ft)
	}
	s.byModel[model] = ht
	return ht
}

// hostTypes is the workload as one host model sees it: the task types that
// can run there and ask for GPUs, flattened for the scoring loop, and the
// GPU signatures (GPUs, Milli, Models) they share.
type hostTypes struct {
	sigs  []*TaskType // a representative type per signature
	types []flatType
	// mixed is set for hosts with several GPU models, where model
	// constraints must be checked GPU by GPU.
	mixed bool
}

type flatType struct {
	sig      int
	gpus     int // GPUs per copy for whole-GPU types, else 1
	cpu, mem int64
	potW     float64 // weight x scarcity x GPU milli per copy
	fragW    float64 // weight
}

// sigScratch holds per-view counts by signature.
type sigScratch struct {
	raw, frag []int
}

// contrib is what one GPU adds to signature t's counts: raw is the copies
// of a share it can hold, or 1 if it is a whole free GPU t may use; frag is
// its free milli when t cannot use it.
func (ht *hostTypes) contrib(g *GPUView, t *TaskType) (raw, frag int) {
	allowed := !ht.mixed || t.Models == nil || t.Models[g.Model]
	if t.Milli < 1000 {
		switch {
		case !g.Shareable || g.Free < t.Milli || !allowed:
			return 0, g.Free
		case g.Free == 1000:
			return t.perWhole, 0
		}
		return g.Free / t.Milli, 0
	}
	if g.Whole && allowed {
		return 1, 0
	}
	return 0, g.Free
}

// combine turns per-signature counts into the potential (GPU milli the
// host could still give each type if only that type arrived, weighted by
// popularity and scarcity) and FGD's fragmentation F_n(M). Types asking
// for no GPU are left out: they add the host's total free GPU before and
// after alike.
func (ht *hostTypes) combine(v *View, raw, sigFrag []int) (pot, frag float64) {
	total := float64(v.TotalFree())
	for i := range ht.types {
		t := &ht.types[i]
		n := raw[t.sig]
		if t.gpus > 1 {
			n /= t.gpus // raw counts whole GPUs for whole-GPU types
		}
		if n == 0 || v.CPU < t.cpu {
			frag += t.fragW * total
			continue
		}
		frag += t.fragW * float64(sigFrag[t.sig])
		// Divide only when CPU or memory binds: most of the time they don't.
		if t.cpu > 0 && int64(n)*t.cpu > v.CPU {
			n = int(v.CPU / t.cpu)
		}
		if t.mem > 0 && int64(n)*t.mem > v.Memory {
			n = int(v.Memory / t.mem)
		}
		pot += t.potW * float64(n)
	}
	return pot, frag
}

// measure computes potential and fragmentation of a view from scratch.
func (ht *hostTypes) measure(v *View, sc *sigScratch) (pot, frag float64) {
	sc.raw = append(sc.raw[:0], make([]int, len(ht.sigs))...)
	sc.frag = append(sc.frag[:0], make([]int, len(ht.sigs))...)
	for j := range v.GPUs {
		for si, t := range ht.sigs {
			r, f := ht.contrib(&v.GPUs[j], t)
			sc.raw[si] += r
			sc.frag[si] += f
		}
	}
	return ht.combine(v, sc.raw, sc.frag)
}

// gpuFit counts the copies of t the host's GPUs could take (ignoring CPU
// and memory) and the free GPU milli that t could not use.
func gpuFit(v *View, t *TaskType) (n, frag int) {
	return gpuFitModels(v, t, t.Models != nil)
}

// gpuFitModels is gpuFit; checkModels false skips the model test, for
// hosts already known to carry only models t accepts.
func gpuFitModels(v *View, t *TaskType, checkModels bool) (n, frag int) {
	if t.Milli < 1000 {
		// A full GPU is common: divide once for it.
		perWhole := 1000 / t.Milli
		for j := range v.GPUs {
			g := &v.GPUs[j]
			switch {
			case !g.Shareable || g.Free < t.Milli || checkModels && !t.Models[g.Model]:
				frag += g.Free
			case g.Free == 1000:
				n += perWhole
			default:
				n += g.Free / t.Milli
			}
		}
		return n, frag
	}
	whole := 0
	for j := range v.GPUs {
		g := &v.GPUs[j]
		if g.Whole && (!checkModels || t.Models[g.Model]) {
			whole++
		} else {
			frag += g.Free
		}
	}
	return whole / t.GPUs, frag
}

// fitCount is how many copies of t fit on the host by GPU, CPU and memory.
func fitCount(v *View, t *TaskType) int {
	n, _ := gpuFit(v, t)
	return capByHost(v, t, n)
}
