package sim

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/placement"
)

// smallTrace is two 4-GPU T4 nodes and the given pods.
func smallTrace(t *testing.T, pods []TracePod) *Trace {
	t.Helper()
	nodes := []TraceNode{
		{Name: "n0", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 4, Model: "T4"},
		{Name: "n1", CPUMilli: 64000, MemoryMiB: 262144, GPUs: 4, Model: "T4"},
	}
	tr, err := NewTrace("small", nodes, pods, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// gpuPods makes n pods named p00, p01, ... asking for gpus whole GPUs each
// (0: CPU only).
func gpuPods(n int, gpus func(i int) int) []TracePod {
	var ps []TracePod
	for i := 0; i < n; i++ {
		p := TracePod{Name: fmt.Sprintf("p%02d", i), CPUMilli: 1000, MemoryMiB: 1024, NumGPU: gpus(i)}
		if p.NumGPU > 0 {
			p.GPUMilli = 1000
		}
		ps = append(ps, p)
	}
	return ps
}

// TestSampleReference checks the reference simulator's arrival sequence:
// the whole list once, then draws with replacement up to the target (or
// the list thinned to it), against drawing every arrival with replacement.
func TestSampleReference(t *testing.T) {
	tests := []struct {
		name string
		pods []TracePod
		// inflation x 8 GPUs is the target
		inflation float64
		// wantAll: every pod of the list arrives, first, exactly once
		wantAll bool
		// wantGPUs: GPUs the arrivals ask for in all
		wantGPUs int64
	}{
		{"list below target: whole list, then resampled", gpuPods(6, func(int) int { return 1 }), 1.3, true, 10},
		{"list with CPU-only pods", gpuPods(8, func(i int) int { return i % 2 }), 1.3, true, 10},
		{"list above target: thinned", gpuPods(16, func(int) int { return 1 }), 1.3, false, 10},
		{"list at target exactly: kept", gpuPods(8, func(int) int { return 1 }), 1, true, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := smallTrace(t, tc.pods)
			for seed := int64(42); seed < 45; seed++ {
				order := tr.Sample(seed, tc.inflation)
				if !reflect.DeepEqual(order, tr.Sample(seed, tc.inflation)) {
					t.Fatalf("seed %d: two samples differ", seed)
				}
				var gpus int64
				for _, i := range order {
					gpus += int64(tr.Requests[i].GPUMilli())
				}
				if gpus != 1000*tc.wantGPUs {
					t.Errorf("seed %d: arrivals ask for %d milli-GPUs, want %d", seed, gpus, 1000*tc.wantGPUs)
				}
				seen := map[int]int{}
				n := len(tc.pods)
				if !tc.wantAll {
					n = len(order)
				}
				for _, i := range order[:n] {
					seen[i]++
				}
				for i, c := range seen {
					if c != 1 {
						t.Errorf("seed %d: pod %d arrives %d times among the first %d", seed, i, c, n)
					}
				}
				if tc.wantAll && len(seen) != len(tc.pods) {
					t.Errorf("seed %d: %d of %d pods arrive first", seed, len(seen), len(tc.pods))
				}
			}
		})
	}
	// With replacement, a list of 6 pods sampled to 10 GPUs repeats some.
	tr := smallTrace(t, gpuPods(6, func(int) int { return 1 }))
	tr.Sampling = SampleReplacement
	order := tr.Sample(42, 1.3)
	if len(order) != 11 { // ceil(1.3 x 8) = 11 GPUs, one per pod
		t.Errorf("with replacement: %d arrivals, want 11", len(order))
	}
}

// TestFGDWorkloadRepeatedSpec checks that FGD's target workload keeps a
// gpu_spec that repeats a model apart, as the reference simulator does,
// while Workload merges it.
func TestFGDWorkloadRepeatedSpec(t *testing.T) {
	pods, err := ParsePods(strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"+
		"a,4000,1024,1,500,V100M16|V100M32\n"+
		"b,4000,1024,1,500,V100M16|V100M32\n"+
		"c,4000,1024,1,500,V100M16|V100M32\n"+
		"d,4000,1024,1,500,V100M16|V100M32|V100M32\n"), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	tr := smallTrace(t, pods)
	weights := func(w *placement.Workload) []float64 {
		var out []float64
		for _, ty := range w.Types {
			if len(ty.Models) != 2 {
				t.Errorf("type %+v: want the two V100 models", ty)
			}
			out = append(out, ty.Weight)
		}
		return out
	}
	if got := weights(tr.FGDWorkload()); !reflect.DeepEqual(got, []float64{0.75, 0.25}) {
		t.Errorf("FGDWorkload weights %v, want [0.75 0.25]", got)
	}
	if got := weights(tr.Workload()); !reflect.DeepEqual(got, []float64{1}) {
		t.Errorf("Workload weights %v, want [1]", got)
	}
}

// TestFGDMatchesReferenceSimulator replays the openb default trace with our
// fgd in the reference simulator's arrival order and node order, and checks
// that it leaves exactly the GPU the authors' runs left, seed by seed
// (experiments/analysis/expected_results/analysis_allo_discrete.csv in
// hkust-adsl/kubernetes-scheduler-simulator). The reference prefixes each
// node's name with rand.Perm drawn after the arrivals and after ten more
// draws of its informers (found by trying 0..20; ten reproduces all ten
// seeds of this trace, and most seeds of the other thirteen traces with a
// published FGD figure).
func TestFGDMatchesReferenceSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the openb trace")
	}
	tr := loadOpenb(t, "default")
	want := map[int64]float64{42: 4.86, 43: 4.94, 44: 4.71}
	for seed := int64(42); seed <= 44; seed++ {
		order, rnd := tr.sampleReference(seed, 1.3)
		for i := 0; i < 10; i++ {
			rnd.Float64()
		}
		rank := map[string]uint64{}
		for i, p := range rnd.Perm(len(tr.Hosts)) {
			rank[tr.Hosts[i].ID] = uint64(p)
		}
		sc, err := placement.NewScorer("fgd", tr.WorkloadFor("fgd"))
		if err != nil {
			t.Fatal(err)
		}
		run, err := tr.replay(sc, seed, order, func(e *placement.Engine) { e.SetTieOrder(rank) }, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := math.Round(100*run.Unalloc100) / 100; got != want[seed] {
			t.Errorf("seed %d: %.2f%% unallocated at 100%% arrival, the reference %.2f%%", seed, got, want[seed])
		}
	}
}
