package placement

import (
	"math"
	"sort"
	"strings"
)

// TaskType is one kind of request in the expected workload, with its share
// of all requests.
type TaskType struct {
	Weight    float64
	CPUMilli  int64
	MemoryMiB int64
	// GPUs and Milli: GPUs whole GPUs (Milli = 1000), or a share of one GPU
	// (GPUs = 1, Milli < 1000); GPUs = 0 for CPU-only requests.
	GPUs  int
	Milli int
	// Models restricts the GPU model; nil means any.
	Models map[string]bool
}

// Workload is the expected mix of requests ("target workload" in the FGD
// paper): fragmentation is measured against it.
type Workload struct {
	Types []TaskType
}

// WorkloadFromRequests builds the target workload from sample requests: the
// most popular request shapes that together cover `coverage` (0..1] of the
// requests, each weighted by its popularity. MIG and metal requests are
// skipped (their geometry is scored separately).
func WorkloadFromRequests(reqs []*Request, coverage float64) *Workload {
	type key struct {
		cpu, mem int64
		gpus     int
		milli    int
		models   string
	}
	counts := map[key]int{}
	models := map[key][]string{}
	total := 0
	for _, r := range reqs {
		var k key
		switch r.Mode {
		case "gpu":
			k = key{r.CPUMilli, r.MemoryMiB, r.GPUs, 1000, strings.Join(r.Models, "|")}
		case "shared":
			k = key{r.CPUMilli, r.MemoryMiB, 1, r.ShareMilli, strings.Join(r.Models, "|")}
		case "cpu":
			k = key{r.CPUMilli, r.MemoryMiB, 0, 0, ""}
		default:
			continue
		}
		counts[k]++
		models[k] = r.Models
		total++
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if counts[a] != counts[b] {
			return counts[a] > counts[b]
		}
		if a.gpus != b.gpus {
			return a.gpus < b.gpus
		}
		if a.milli != b.milli {
			return a.milli < b.milli
		}
		if a.cpu != b.cpu {
			return a.cpu < b.cpu
		}
		if a.mem != b.mem {
			return a.mem < b.mem
		}
		return a.models < b.models
	})
	w := &Workload{}
	cum := 0
	for _, k := range keys {
		if total == 0 || float64(cum)/float64(total) >= coverage {
			break
		}
		cum += counts[k]
		t := TaskType{Weight: float64(counts[k]) / float64(total), CPUMilli: k.cpu, MemoryMiB: k.mem, GPUs: k.gpus, Milli: k.milli}
		if ms := models[k]; len(ms) > 0 {
			t.Models = map[string]bool{}
			for _, m := range ms {
				t.Models[m] = true
			}
		}
		w.Types = append(w.Types, t)
	}
	return w
}

// defaultWorkload is used when no workload is known: whole 1, 2, 4 and 8
// GPU requests and a few common shares.
func defaultWorkload() *Workload {
	w := &Workload{}
	for _, m := range []int{250, 500, 1000} {
		w.Types = append(w.Types, TaskType{Weight: 0.15, GPUs: 1, Milli: m, CPUMilli: 4000})
	}
	for _, n := range []int{2, 4, 8} {
		w.Types = append(w.Types, TaskType{Weight: 0.1, GPUs: n, Milli: 1000, CPUMilli: int64(n) * 8000})
	}
	w.Types = append(w.Types, TaskType{Weight: 0.25, CPUMilli: 4000})
	return w
}

// fragOf is F_n(m) of the FGD paper, in milli-GPUs: how much of the host's
// free GPU compute task type t could not use.
func fragOf(v *View, t *TaskType, total int) int {
	if t.GPUs == 0 || v.CPU < t.CPUMilli {
		return total
	}
	if t.Models != nil {
		ok := false
		for i := range v.GPUs {
			if t.Models[v.GPUs[i].Model] {
				ok = true
				break
			}
		}
		if !ok {
			return total
		}
	}
	if t.Milli < 1000 {
		fits := false
		frag := 0
		for i := range v.GPUs {
			g := &v.GPUs[i]
			if g.Shareable && g.Free >= t.Milli {
				fits = true
			} else {
				frag += g.Free
			}
		}
		if !fits {
			return total
		}
		return frag
	}
	whole, frag := 0, 0
	for i := range v.GPUs {
		g := &v.GPUs[i]
		if g.Whole {
			whole++
		} else {
			frag += g.Free
		}
	}
	if whole < t.GPUs {
		return total
	}
	return frag
}

// fragmentation is F_n(M): the workload-weighted expected fragmentation.
func (w *Workload) fragmentation(v *View) float64 {
	total := v.TotalFree()
	f := 0.0
	for i := range w.Types {
		t := &w.Types[i]
		f += t.Weight * float64(fragOf(v, t, total))
	}
	return f
}

// FGD is fragmentation gradient descent (Weng et al., ATC '23): place where
// the expected fragmentation of the host grows the least. Like the paper's
// Kubernetes plugin it maps the fragmentation change through a sigmoid to an
// integer score of 0..100, so near-equal hosts tie and are picked at random;
// this keeps our replay faithful to the published numbers.
type FGD struct {
	w *Workload
	// Quantize maps the change through the plugin's sigmoid to 0..100.
	Quantize bool
	// TieBreak adds a tiny best-fit term so that equal changes prefer the
	// fuller host.
	TieBreak bool
}

// NewFGD returns the FGD policy for workload w (nil: a generic mix).
func NewFGD(w *Workload) *FGD {
	return newFGD(w)
}

func newFGD(w *Workload) *FGD {
	if w == nil || len(w.Types) == 0 {
		w = defaultWorkload()
	}
	return &FGD{w: w}
}

func (*FGD) Name() string { return "fgd" }
func (s *FGD) Score(_ *Request, before, after *View) float64 {
	delta := (s.w.fragmentation(before) - s.w.fragmentation(after)) / 1000
	sc := -delta
	if s.Quantize {
		sc = -math.Trunc(100 / (1 + math.Exp(-delta)))
	}
	if s.TieBreak {
		sc += 1e-6 * freeShare(after)
	}
	return sc
}
