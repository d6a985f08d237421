package sim

import (
	"fmt"
	"math"
	"math/rand"
	"slices"
)

// This file generates a small openb-like trace, so that tests, examples and
// the quick start can replay something realistic without the Alibaba files
// (which must not be bundled with the project).

// syntheticModels is the node mix of the generated fleet: four of the openb
// node types, with the CPU and memory of their most common openb rows, in
// roughly the proportions of openb_node_list_gpu_node.csv.
var syntheticModels = []struct {
	model     string
	gpus      int
	cpuMilli  int64
	memoryMiB int64
	weight    float64
}{
	{"G2", 8, 96000, 393216, 0.45},
	{"T4", 2, 104000, 524288, 0.32},
	{"P100", 2, 64000, 262144, 0.15},
	{"V100M32", 8, 96000, 786432, 0.08},
}

// syntheticShares are the GPU-share sizes (milli-GPU) of sharing pods. Like
// the trace, a handful of values repeat, so that a 95% workload covers a few
// dozen shapes rather than hundreds.
var syntheticShares = []int{100, 200, 250, 300, 400, 460, 500, 600, 650, 700, 810, 900}

// syntheticSpecs are the gpu_spec values per GPU count; specs only name
// models whose nodes have enough GPUs for the pod.
var syntheticSpecs = map[int][]string{
	1: {"T4", "G2", "P100", "V100M32", "P100|T4", "G2|V100M32"},
	2: {"T4", "P100", "G2"},
	4: {"G2", "V100M32", "G2|V100M32"},
	8: {"G2", "V100M32", "G2|V100M32"},
}

const (
	// syntheticPodsPerHost is a little above the openb default ratio
	// (8,152 pods for 1,213 nodes is 6.7): it gives a sample more distinct
	// pods to draw from, and with the lifetimes below it loads the fleet
	// to about 95% at the peak of a time-ordered replay.
	syntheticPodsPerHost = 10
	// syntheticHorizon is the span of creation times, in seconds (30 days).
	syntheticHorizon = 30 * 24 * 3600
	// syntheticMedianLife is the median pod lifetime, in seconds (20 days).
	syntheticMedianLife = 20 * 24 * 3600
	// syntheticEnd is the end of the trace, when the pods still running
	// are deleted (a day after the horizon).
	syntheticEnd = syntheticHorizon + 24*3600
)

// SyntheticTrace generates an openb-like trace of the given number of hosts:
// G2 and V100M32 nodes with 8 GPUs, T4 and P100 nodes with 2, and 10 pods
// per host that mix CPU-only pods (about 13%), shares of 100..900 milli-GPU
// (37%), whole 1-GPU pods (48%) and 2-, 4- and 8-GPU pods, about a tenth of
// the GPU pods restricted by gpu_spec. Every pod has a creation time (uniform
// over 30 days) and most a deletion time (a lognormal
// lifetime with a 20-day median, capped at the trace end a day after the
// last creation, as openb deletes the pods still running when it ends);
// about 8% never leave. The same hosts and seed always give the same trace.
// Line numbers are those the rows would have in CSV files with a header.
func SyntheticTrace(hosts int, seed int64) (nodes []TraceNode, pods []TracePod) {
	if hosts <= 0 {
		return nil, nil
	}
	rnd := rand.New(rand.NewSource(seed))
	nodes = syntheticNodes(hosts)

	n := hosts * syntheticPodsPerHost
	// Sorted uniform creation times are a Poisson process conditioned on
	// the number of pods, and all fall inside the horizon.
	created := make([]int64, n)
	for i := range created {
		created[i] = rnd.Int63n(syntheticHorizon)
	}
	slices.Sort(created)
	pods = make([]TracePod, 0, n)
	for i := 0; i < n; i++ {
		pods = append(pods, syntheticPod(rnd, i, created[i]))
	}
	return nodes, pods
}

// syntheticNodes lists the trace's nodes, model by model. Node counts are
// split by largest remainder, so that even small fleets get every model in
// proportion and the mix does not depend on the seed.
func syntheticNodes(hosts int) []TraceNode {
	counts := make([]int, len(syntheticModels))
	rem := make([]float64, len(syntheticModels))
	left := hosts
	for i, m := range syntheticModels {
		exact := m.weight * float64(hosts)
		counts[i] = int(exact)
		rem[i] = exact - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
	}
	nodes := make([]TraceNode, 0, hosts)
	for i, m := range syntheticModels {
		for k := 0; k < counts[i]; k++ {
			n := len(nodes)
			nodes = append(nodes, TraceNode{
				Name: fmt.Sprintf("syn-node-%04d", n), CPUMilli: m.cpuMilli, MemoryMiB: m.memoryMiB,
				GPUs: m.gpus, Model: m.model, Line: n + 2,
			})
		}
	}
	return nodes
}

// syntheticPod draws the i-th pod, created at the given time: its QoS,
// size, GPU restriction and lifetime.
func syntheticPod(rnd *rand.Rand, i int, created int64) TracePod {
	p := TracePod{Name: fmt.Sprintf("syn-pod-%05d", i), HasTimes: true, Phase: "Running", QoS: "LS", Line: i + 2}
	if rnd.Float64() < 0.4 {
		p.QoS = "BE"
	}
	cpuPerGPU := []int64{4000, 6000, 8000, 12000}[rnd.Intn(4)]
	switch r := rnd.Float64(); {
	case r < 0.13:
		p.CPUMilli = []int64{2000, 4000, 8000, 16000, 32000}[rnd.Intn(5)]
	case r < 0.50:
		p.NumGPU, p.GPUMilli = 1, syntheticShares[rnd.Intn(len(syntheticShares))]
		p.CPUMilli = cpuPerGPU
	case r < 0.985:
		p.NumGPU, p.GPUMilli = 1, fullGPUMilli
		p.CPUMilli = cpuPerGPU
	default:
		p.NumGPU, p.GPUMilli = []int{2, 2, 4, 8, 8}[rnd.Intn(5)], fullGPUMilli
		p.CPUMilli = int64(p.NumGPU) * min(cpuPerGPU, 8000)
	}
	p.MemoryMiB = p.CPUMilli / 1000 * []int64{2048, 4096}[rnd.Intn(2)]
	if p.NumGPU > 0 && rnd.Float64() < 0.1 {
		specs := syntheticSpecs[p.NumGPU]
		p.GPUSpec = splitSpec(specs[rnd.Intn(len(specs))])
	}

	p.Creation = created
	p.Scheduled = p.Creation
	p.Deletion = -1
	if rnd.Float64() >= 0.08 {
		life := math.Exp(math.Log(syntheticMedianLife) + 0.8*rnd.NormFloat64())
		// Like openb, pods still running when the trace ends are deleted
		// at its end.
		p.Deletion = min(p.Creation+1+int64(life), syntheticEnd)
	}
	return p
}
