package placement

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// Scorer ranks the ways a request can be placed. The engine calls Score for
// every feasible option on every (class of) host, with the host's free
// resources before and after the option, and picks the lowest score; ties
// are broken at random among hosts. A scorer must be a pure function of its
// arguments and its own configuration, because the engine caches scores per
// host state.
type Scorer interface {
	Name() string
	Score(req *Request, before, after *View) float64
}

// Random scores every option alike, so the engine picks a feasible host
// uniformly at random.
type Random struct{}

func (Random) Name() string                         { return "random" }
func (Random) Score(*Request, *View, *View) float64 { return 0 }

// BestFit prefers the host that is left with the least free resources,
// weighing GPU and CPU equally (as the FGD paper's BestFit baseline does).
type BestFit struct{}

func (BestFit) Name() string { return "bestfit" }
func (BestFit) Score(_ *Request, _, after *View) float64 {
	return freeShare(after)
}

func freeShare(v *View) float64 {
	s, n := 0.0, 0.0
	if v.CPUCap > 0 {
		s += float64(v.CPU) / float64(v.CPUCap)
		n++
	}
	if len(v.GPUs) > 0 {
		s += float64(v.TotalFree()) / float64(1000*len(v.GPUs))
		n++
	}
	if n == 0 {
		return 0
	}
	return s / n
}

// DotProd is the Tetris-style alignment heuristic: it prefers the host whose
// free resource vector has the smallest dot product with the request's
// demand vector (both normalized by the host's capacity), which packs
// requests where their dominant resource is already scarce.
type DotProd struct{}

func (DotProd) Name() string { return "dotprod" }
func (DotProd) Score(req *Request, before, _ *View) float64 {
	d := 0.0
	if before.CPUCap > 0 {
		d += float64(req.CPUMilli) / float64(before.CPUCap) * float64(before.CPU) / float64(before.CPUCap)
	}
	if n := len(before.GPUs); n > 0 {
		d += float64(req.GPUMilli()) / float64(1000*n) * float64(before.TotalFree()) / float64(1000*n)
	}
	return d
}

// Packing (GpuPacking in the FGD paper) fills partially used GPUs first,
// then hosts with the most GPUs in use, and leaves empty GPUs for whole-GPU
// requests.
type Packing struct{}

func (Packing) Name() string { return "packing" }
func (Packing) Score(_ *Request, before, after *View) float64 {
	// Tier 1: did the option land on a GPU that was already partly used?
	onPartial := false
	used := 0
	for i := range before.GPUs {
		b, a := before.GPUs[i].Free, after.GPUs[i].Free
		if a != b && b < 1000 {
			onPartial = true
		}
		if b < 1000 {
			used++
		}
	}
	s := 0.0
	if !onPartial {
		s += 10
	}
	// Tier 2: more used GPUs on the host first; tier 3: least free left.
	s -= float64(used) / float64(len(before.GPUs)+1)
	return s + 1e-3*freeShare(after)
}

// Policies lists the built-in policy names, default first.
func Policies() []string {
	return []string{DefaultPolicy, "fgd", "bestfit", "packing", "dotprod", "random"}
}

// DefaultPolicy is the name of gpucloud's own policy.
const DefaultPolicy = "gpucloud"

// NewScorer builds the named policy. w is the expected workload, used by
// fragmentation-aware policies; nil gives them a generic mix.
func NewScorer(name string, w *Workload) (Scorer, error) {
	switch strings.ToLower(name) {
	case "random":
		return Random{}, nil
	case "bestfit":
		return BestFit{}, nil
	case "dotprod":
		return DotProd{}, nil
	case "packing":
		return Packing{}, nil
	case "fgd":
		return NewFGD(w), nil
	case DefaultPolicy, "default":
		return NewGPUCloud(w), nil
	}
	names := Policies()
	sort.Strings(names)
	return nil, fmt.Errorf("unknown policy %q (known: %s)", name, strings.Join(names, ", "))
}

var _ = catalog.ModeGPU
