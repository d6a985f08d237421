package placement

import (
	"fmt"
	"sort"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// gapValues prices the free room of a shared GPU for the expected workload.
// It is the dual of the fractional bin-packing (cutting-stock) problem of
// the workload's GPU demand: each GPU-sized item (a share of Milli, or one
// GPU of a whole-GPU type) gets a price y_s, the fraction of a GPU it is
// worth when GPUs are packed as tightly as the mix allows, such that no set
// of items that fits on one GPU is worth more than one GPU. value[g] is then
// the most that g milli of free room can still be worth: the best set of
// items that fits in it, at those prices. A placement that takes a share of
// s from a GPU with g free loses value[g] - value[g-s] of the GPU's future;
// placing it where that loss is smallest packs the shares as the optimal
// fractional packing does. An item that only rides in others' leftovers is
// priced 0; one that leaves room nothing common can use is priced above its
// size (an 810 share of a mix of 810s and 160s costs a whole GPU).
type gapValues struct {
	// value[g] for g in 0..1000 milli, in GPUs (at most 1).
	value []float64
	// sizes are the item sizes in milli, ascending, and prices their
	// prices in GPUs; rounds is how many linear programs were solved.
	sizes  []int
	prices []float64
	rounds int
}

// loss is what taking a GPU from free milli before to after costs.
func (gv *gapValues) loss(before, after int) float64 {
	return gv.value[clampMilli(before)] - gv.value[clampMilli(after)]
}

func clampMilli(m int) int {
	switch {
	case m < 0:
		return 0
	case m > 1000:
		return 1000
	}
	return m
}

// maxPatterns bounds the column generation: each round adds the most
// valuable packing the current prices allow until none is worth more than
// one GPU.
const maxPatterns = 400

// newGapValues prices the workload's GPU items; nil when the workload has no
// shares (every item is a whole GPU and every option loses alike) or the
// linear program fails (the policy then does without the term).
func newGapValues(w *Workload) *gapValues {
	demand := map[int]float64{}
	shares := false
	for i := range w.Types {
		t := &w.Types[i]
		switch {
		case t.GPUs <= 0 || t.Weight <= 0:
		case t.Milli > 0 && t.Milli < 1000:
			demand[t.Milli] += t.Weight
			shares = true
		default:
			demand[1000] += t.Weight * float64(t.GPUs)
		}
	}
	if !shares {
		return nil
	}
	sizes := make([]int, 0, len(demand))
	for s := range demand {
		sizes = append(sizes, s)
	}
	sort.Ints(sizes)
	d := make([]float64, len(sizes))
	for i, s := range sizes {
		d[i] = demand[s]
	}
	patterns := homogeneous(sizes)
	gv := &gapValues{sizes: sizes}
	for len(patterns) <= maxPatterns {
		y, err := dualPrices(d, patterns)
		if err != nil {
			return nil
		}
		gv.rounds++
		best, p := knapsack(sizes, y, 1000)
		gv.value, gv.prices = best, y
		if best[1000] <= 1+1e-9 {
			return gv
		}
		patterns = append(patterns, p)
	}
	// Not converged: scale the prices down until no packing is worth more
	// than a GPU, which keeps every loss a fair comparison.
	f := 1 / gv.value[1000]
	for i := range gv.value {
		gv.value[i] *= f
	}
	for i := range gv.prices {
		gv.prices[i] *= f
	}
	return gv
}

// homogeneous is the packings the column generations start from: as many
// items of one size as fit on a GPU, for each size.
func homogeneous(sizes []int) [][]int {
	patterns := make([][]int, len(sizes))
	for i, s := range sizes {
		patterns[i] = make([]int, len(sizes))
		patterns[i][i] = 1000 / s
	}
	return patterns
}

// dualPrices solves max d·y subject to p·y <= 1 for every pattern p, y >= 0.
func dualPrices(d []float64, patterns [][]int) ([]float64, error) {
	n, m := len(d), len(patterns)
	// Standard form: minimize -d·y with a slack per pattern.
	c := make([]float64, n+m)
	for i := range d {
		c[i] = -d[i]
	}
	a := mat.NewDense(m, n+m, nil)
	b := make([]float64, m)
	basic := make([]int, m)
	for r, p := range patterns {
		for i, k := range p {
			a.Set(r, i, float64(k))
		}
		a.Set(r, n+r, 1)
		b[r] = 1
		basic[r] = n + r
	}
	_, x, err := lp.Simplex(c, a, b, 1e-10, basic)
	if err != nil {
		return nil, err
	}
	return x[:n], nil
}

// knapsack returns best[g], the most the items (unbounded copies, prices y)
// fitting in g milli are worth, for g = 0..capacity, and the counts of the
// best set for the full capacity.
func knapsack(sizes []int, y []float64, capacity int) ([]float64, []int) {
	best := make([]float64, capacity+1)
	choice := make([]int, capacity+1)
	for g := 1; g <= capacity; g++ {
		best[g], choice[g] = best[g-1], -1
		for i, s := range sizes {
			if s <= g {
				if v := best[g-s] + y[i]; v > best[g]+1e-12 {
					best[g], choice[g] = v, i
				}
			}
		}
	}
	counts := make([]int, len(sizes))
	for g := capacity; g > 0; {
		if choice[g] < 0 {
			g--
			continue
		}
		counts[choice[g]]++
		g -= sizes[choice[g]]
	}
	return best, counts
}

// PackingBound is the most GPU compute, in milli, that any placement of
// items could allocate on gpus GPUs: items maps a size in milli (1..1000;
// a whole GPU is 1000, a k-GPU request k items of 1000) to how many
// arrived. It is the optimum of the fractional relaxation, where GPUs are
// pooled across hosts and CPU and memory are ignored, so no policy does
// better; a replay's allocation at the same arrivals can be checked
// against it.
func PackingBound(items map[int]int, gpus int) (float64, error) {
	sizes := make([]int, 0, len(items))
	for s, n := range items {
		if s < 1 || s > 1000 {
			return 0, fmt.Errorf("item size %d is out of range 1..1000", s)
		}
		if n > 0 {
			sizes = append(sizes, s)
		}
	}
	if len(sizes) == 0 || gpus <= 0 {
		return 0, nil
	}
	sort.Ints(sizes)
	patterns := homogeneous(sizes)
	// The dual of max Σ s·z subject to z ≤ Σ_p p·x, Σ x ≤ gpus, z ≤ n:
	// minimize gpus·λ + Σ n·ν subject to μ + ν ≥ s and p·μ ≤ λ for every
	// packing p, adding the packing the knapsack finds most undervalued
	// until there is none.
	k := len(sizes)
	for len(patterns) <= maxPatterns+k {
		// Standard form, columns λ, μ, ν, a surplus per item row and a
		// slack per packing row; ν and the slacks start basic (λ = μ = 0).
		m := k + len(patterns)
		nv := 1 + 3*k + len(patterns)
		c := make([]float64, nv)
		c[0] = float64(gpus)
		a := mat.NewDense(m, nv, nil)
		b := make([]float64, m)
		basic := make([]int, m)
		for i, s := range sizes {
			c[1+k+i] = float64(items[s])
			a.Set(i, 1+i, 1)      // μ
			a.Set(i, 1+k+i, 1)    // ν
			a.Set(i, 1+2*k+i, -1) // surplus
			b[i] = float64(s)
			basic[i] = 1 + k + i
		}
		for r, p := range patterns {
			a.Set(k+r, 0, -1)
			for i, n := range p {
				a.Set(k+r, 1+i, float64(n))
			}
			a.Set(k+r, 1+3*k+r, 1)
			basic[k+r] = 1 + 3*k + r
		}
		opt, x, err := lp.Simplex(c, a, b, 1e-10, basic)
		if err != nil {
			return 0, fmt.Errorf("packing bound: %w", err)
		}
		best, p := knapsack(sizes, x[1:1+k], 1000)
		if best[1000] <= x[0]+1e-6 {
			return opt, nil
		}
		patterns = append(patterns, p)
	}
	return 0, fmt.Errorf("packing bound: no convergence after %d packings", len(patterns))
}
