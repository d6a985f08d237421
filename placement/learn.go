package placement

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/gpucloud/gpucloud/fleet"
)

// The defaults of a Learner: the allocations a mix needs before it
// replaces the generic one, and how far (total variation distance between
// two mixes, 0..1) it must move before it replaces the last one learned.
const (
	DefaultLearnMin   = 32
	DefaultLearnShift = 0.1
)

// Learner gives an engine the mix its fleet runs as the expected workload
// (WorkloadFromFleet), and the running MIG profile mix as the one slot
// choice keeps room for (SetMIGMix). The default policy weighs
// fragmentation, scarcity and share prices against the workload it
// expects, and the mix of what runs is the best estimate of what comes.
// A new workload is calibrated, priced and drops the engine's cached
// scores, so a mix replaces the last one only once it moved. The live
// scheduler and the replay's --workload learned use it alike; how often
// to call Learn is theirs.
type Learner struct {
	// Min and Shift are DefaultLearnMin and DefaultLearnShift when 0.
	Min   int
	Shift float64
	// RequestOf, when set, gives an allocation's request by its ID, for
	// WorkloadFromFleet.
	RequestOf func(id string) *Request
	// Count is how many allocations the current workload was measured
	// over, and Times how many times Learn replaced it; MIGTimes likewise
	// for the MIG mix.
	Count, Times, MIGTimes int

	workload map[string]float64
	migMix   map[int]float64
}

// Learn measures what f runs and gives it to e when it qualifies. It
// reports whether the engine's workload or MIG mix changed.
func (l *Learner) Learn(e *Engine, f *fleet.Fleet) bool {
	min, shift := l.Min, l.Shift
	if min <= 0 {
		min = DefaultLearnMin
	}
	if shift <= 0 {
		shift = DefaultLearnShift
	}
	changed := false
	w, mig, n := WorkloadFromFleet(f, l.RequestOf)
	if n >= min {
		mix := workloadMix(w)
		if (l.workload == nil || mixShift(mix, l.workload) >= shift) && e.SetWorkload(w, f) {
			l.workload, l.Count = mix, n
			l.Times++
			changed = true
		}
	}
	migN := 0.0
	for _, c := range mig {
		migN += c
	}
	if migN >= float64(min) {
		norm := make(map[int]float64, len(mig))
		for id, c := range mig {
			norm[id] = c / migN
		}
		if l.migMix == nil || mixShift(norm, l.migMix) >= shift {
			e.SetMIGMix(norm)
			l.migMix = norm
			l.MIGTimes++
			changed = true
		}
	}
	return changed
}

// workloadMix keys a workload's GPU task types by their request shape,
// each with its share of the workload's GPU demand: a rare 8-GPU job
// weighs what it asks for, not what it counts. CPU-only types are left
// out (they weigh nothing in the policy's GPU terms).
func workloadMix(w *Workload) map[string]float64 {
	mix := make(map[string]float64, len(w.Types))
	total := 0.0
	for _, t := range w.Types {
		if t.GPUs <= 0 {
			continue
		}
		models := make([]string, 0, len(t.Models))
		for m := range t.Models {
			models = append(models, m)
		}
		sort.Strings(models)
		g := t.Weight * float64(t.GPUs*t.Milli)
		mix[fmt.Sprintf("%d/%d/%d/%s", t.CPUMilli, t.GPUs, t.Milli, strings.Join(models, "|"))] += g
		total += g
	}
	for k := range mix {
		mix[k] /= total
	}
	return mix
}

// mixShift is the total variation distance between two normalised mixes.
func mixShift[K comparable](a, b map[K]float64) float64 {
	d := 0.0
	for k, v := range a {
		d += math.Abs(v - b[k])
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d += v
		}
	}
	return d / 2
}
