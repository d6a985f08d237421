package placement

import (
	"fmt"
	"math"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// TestFragOf pins F_n(m) of the FGD paper, as the reference simulator
// computes it, one task type and host state at a time.
func TestFragOf(t *testing.T) {
	// 1000 + 1000 + 500 + 200 free = 2700 on T4s, 8 cores free.
	host := func(cpu int64) *View {
		return &View{CPU: cpu, CPUCap: 64000, GPUs: []GPUView{
			{Model: "T4", Free: 1000, Whole: true, Shareable: true},
			{Model: "T4", Free: 1000, Whole: true, Shareable: true},
			{Model: "T4", Free: 500, Shareable: true},
			{Model: "T4", Free: 200, Shareable: true},
		}}
	}
	tests := []struct {
		name string
		cpu  int64
		t    TaskType
		want int
	}{
		{"whole GPU fits: the partial GPUs are stranded", 8000, TaskType{GPUs: 1, Milli: 1000, CPUMilli: 4000}, 700},
		{"two whole GPUs fit", 8000, TaskType{GPUs: 2, Milli: 1000, CPUMilli: 4000}, 700},
		{"three whole GPUs do not fit: all free GPU", 8000, TaskType{GPUs: 3, Milli: 1000, CPUMilli: 4000}, 2700},
		{"CPU too short: all free GPU", 8000, TaskType{GPUs: 1, Milli: 1000, CPUMilli: 16000}, 2700},
		{"CPU just enough", 16000, TaskType{GPUs: 1, Milli: 1000, CPUMilli: 16000}, 700},
		{"share of 300: the 200 is stranded", 8000, TaskType{GPUs: 1, Milli: 300, CPUMilli: 1000}, 200},
		{"share of 500: the 200 is stranded, the 500 not", 8000, TaskType{GPUs: 1, Milli: 500, CPUMilli: 1000}, 200},
		{"share of 600: 500 and 200 stranded", 8000, TaskType{GPUs: 1, Milli: 600, CPUMilli: 1000}, 700},
		{"CPU only: all free GPU", 8000, TaskType{CPUMilli: 1000}, 2700},
		{"another model only: all free GPU", 8000, TaskType{GPUs: 1, Milli: 1000, CPUMilli: 1000, Models: map[string]bool{"V100-16GB": true}}, 2700},
		{"one of the models", 8000, TaskType{GPUs: 1, Milli: 1000, CPUMilli: 1000, Models: map[string]bool{"T4": true, "A10": true}}, 700},
	}
	for _, tc := range tests {
		v := host(tc.cpu)
		if got := fragOf(v, &tc.t, v.TotalFree()); got != tc.want {
			t.Errorf("%s: F = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestTypicalTieOrder checks which of equally popular task types the 95%
// cut keeps: the reference simulator sorts ties by larger CPU, then larger
// GPU milli, more GPUs, and the models string in reverse order.
func TestTypicalTieOrder(t *testing.T) {
	v100 := map[string]bool{"V100-16GB": true}
	t4 := map[string]bool{"T4": true}
	tests := []struct {
		name string
		a, b TaskType // equally popular, a listed first; 90% is above them
		want TaskType // the one kept
	}{
		{"more CPU first", TaskType{CPUMilli: 2000, GPUs: 1, Milli: 1000}, TaskType{CPUMilli: 8000, GPUs: 1, Milli: 1000}, TaskType{CPUMilli: 8000, GPUs: 1, Milli: 1000}},
		{"more milli first", TaskType{CPUMilli: 4000, GPUs: 1, Milli: 300}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 700}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 700}},
		{"more GPUs first", TaskType{CPUMilli: 4000, GPUs: 2, Milli: 1000}, TaskType{CPUMilli: 4000, GPUs: 4, Milli: 1000}, TaskType{CPUMilli: 4000, GPUs: 4, Milli: 1000}},
		{"models string, reversed", TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000, Models: t4}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000, Models: v100}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000, Models: v100}},
		{"a model before any", TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000, Models: t4}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 1000, Models: t4}},
		{"CPU only last", TaskType{CPUMilli: 4000, GPUs: 1, Milli: 100}, TaskType{CPUMilli: 4000}, TaskType{CPUMilli: 4000, GPUs: 1, Milli: 100}},
	}
	for _, tc := range tests {
		a, b := tc.a, tc.b
		a.Weight, b.Weight = 0.05, 0.05
		w := &Workload{Types: []TaskType{{Weight: 0.9, CPUMilli: 1000, GPUs: 1, Milli: 500}, a, b}}
		got := w.Typical(0.95)
		if len(got.Types) != 2 {
			t.Errorf("%s: kept %d types, want 2", tc.name, len(got.Types))
			continue
		}
		k := got.Types[1]
		if k.CPUMilli != tc.want.CPUMilli || k.GPUs != tc.want.GPUs || k.Milli != tc.want.Milli || modelKey(k.Models) != modelKey(tc.want.Models) {
			t.Errorf("%s: kept %+v, want %+v", tc.name, k, tc.want)
		}
		if math.Abs(k.Weight-0.05/0.95) > 1e-12 {
			t.Errorf("%s: weight %v, want %v", tc.name, k.Weight, 0.05/0.95)
		}
	}
}

// TestFGDTieOrder checks that FGD's ties go to the host first in the tie
// order (SetTieOrder, else one drawn from the seed), not the host first in
// the fleet, as the reference simulator's seeded node names make them.
func TestFGDTieOrder(t *testing.T) {
	build := func() *fleet.Fleet {
		var hs []*fleet.Host
		for i := 0; i < 6; i++ {
			hs = append(hs, fleet.MockHost(fmt.Sprintf("h%d", i), "T4", 4))
		}
		return fleet.MockFleet(hs...)
	}
	tests := []struct {
		name  string
		order map[string]uint64
		reqs  []*Request
		want  []string // host of each request
	}{
		{"ranked host first", map[string]uint64{"h4": 0, "h1": 1},
			[]*Request{gpuReq("a", 1)}, []string{"h4"}},
		// After a, h4 has 3 free GPUs: the 4-GPU request goes to h1, the
		// next in order among the hosts with 4 free.
		{"order among the hosts of equal score", map[string]uint64{"h4": 0, "h1": 1},
			[]*Request{gpuReq("a", 1), gpuReq("b", 4)}, []string{"h4", "h1"}},
		{"unranked hosts after ranked ones", map[string]uint64{"h5": 7},
			[]*Request{gpuReq("a", 4)}, []string{"h5"}},
	}
	for _, tc := range tests {
		f := build()
		sc, err := NewScorer("fgd", nil)
		if err != nil {
			t.Fatal(err)
		}
		e := NewEngine(nil, sc, 1)
		e.SetTieOrder(tc.order)
		for i, r := range tc.reqs {
			p, err := e.Place(f, r)
			if err != nil {
				t.Fatal(err)
			}
			if p.HostID != tc.want[i] {
				t.Errorf("%s: %s went to %s, want %s", tc.name, r.ID, p.HostID, tc.want[i])
			}
			if err := f.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Without SetTieOrder, the seed draws the order: the same host for
	// every request ID, not always h0.
	firsts := map[string]bool{}
	for seed := int64(1); seed <= 12; seed++ {
		sc, _ := NewScorer("fgd", nil)
		e := NewEngine(nil, sc, seed)
		var host string
		for i := 0; i < 5; i++ {
			p, err := e.Place(build(), &Request{ID: fmt.Sprint("r", i), Mode: catalog.ModeGPU, GPUs: 1, CPUMilli: 1000})
			if err != nil {
				t.Fatal(err)
			}
			if host != "" && p.HostID != host {
				t.Fatalf("seed %d: ties went to %s and %s", seed, host, p.HostID)
			}
			host = p.HostID
		}
		firsts[host] = true
	}
	if len(firsts) < 3 {
		t.Errorf("12 seeds put ties on %v only", firsts)
	}
}
