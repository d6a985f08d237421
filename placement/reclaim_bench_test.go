package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// reclaimFleet builds hosts 8-GPU hosts, half H100 (one NVLink island of 8)
// and half A100 (PCIe), and fills 90% of their GPU compute with a mix of
// spot (55%) and on-demand allocations of every shape: whole GPUs (1, 2, 4,
// 8) and MIG 3g slices. Spot allocations are priced per GPU with some
// spread, as a cleared spot market would. It then tops the H100 hosts up
// with spot 4x until none has 4 free GPUs, so that an on-demand h100 4x or
// 8x needs evictions: about 95.5% of the fleet's GPU compute ends up
// allocated. It returns the number of spot allocations.
func reclaimFleet(tb testing.TB, hosts int) (*fleet.Fleet, *Engine, int) {
	tb.Helper()
	e := NewEngine(testCatalog, mustScorer(tb, DefaultPolicy), 1)
	hs := make([]*fleet.Host, hosts)
	for i := range hs {
		id := fmt.Sprintf("host-%05d", i)
		if i%2 == 0 {
			hs[i] = fleet.MockNVLinkHost(id, "H100", 8)
		} else {
			hs[i] = fleet.MockHost(id, "A100-80GB-SXM", 8)
		}
		hs[i].Rack = fmt.Sprintf("rack-%d", i/32)
	}
	f := fleet.MockFleet(hs...)

	rnd := rand.New(rand.NewPCG(42, 95))
	total, used, spot := hosts*8*1000, 0, 0
	models := [][]string{{"H100-80GB-SXM"}, {"A100-80GB-SXM"}}
	place := func(r *Request) bool {
		p, err := e.Place(f, r)
		if err != nil {
			if !IsInsufficientCapacity(err) {
				tb.Fatal(err)
			}
			return false
		}
		p.ID = r.ID
		if err := f.Apply(p); err != nil {
			tb.Fatal(err)
		}
		used += p.GPUMilli()
		if r.Preemptible {
			spot++
		}
		return true
	}
	for i, misses := 0, 0; used < total*90/100 && misses < 2000; i++ {
		r := &Request{ID: fmt.Sprintf("fill-%06d", i), Models: models[rnd.IntN(2)]}
		gpus := 0
		switch x := rnd.IntN(100); {
		case x < 35:
			gpus = 1
		case x < 55:
			gpus = 2
		case x < 75:
			gpus = 4
		case x < 90:
			gpus = 8
		default:
			r.Mode, r.MIGProfile, r.CPUMilli, r.MemoryMiB = catalog.ModeMIG, "3g", 8000, 64*1024
		}
		if gpus > 0 {
			r.Mode, r.GPUs, r.CPUMilli, r.MemoryMiB = catalog.ModeGPU, gpus, int64(gpus)*16000, int64(gpus)*128*1024
		}
		if rnd.IntN(100) < 55 {
			// Spot: $0.75..$1.49 per GPU-hour (a MIG 3g slice as 3/7).
			perGPU := 750_000 + rnd.Int64N(750_000)
			r.Preemptible, r.PriceMicros = true, perGPU*int64(max(gpus, 1))
			if gpus == 0 {
				r.PriceMicros = perGPU * 3 / 7
			}
		}
		if !place(r) {
			misses++
		}
	}
	// Top up with spot h100 4x until none fits.
	for i := 0; ; i++ {
		r := &Request{ID: fmt.Sprintf("top-%06d", i), Mode: catalog.ModeGPU, GPUs: 4, CPUMilli: 64000, MemoryMiB: 512 * 1024,
			Models: models[0], Preemptible: true, PriceMicros: 4 * (750_000 + rnd.Int64N(750_000))}
		if !place(r) {
			break
		}
	}
	return f, e, spot
}

func mustScorer(tb testing.TB, policy string) Scorer {
	tb.Helper()
	sc, err := NewScorer(policy, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}

// BenchmarkPlanPreemption10kHosts plans the evictions for an on-demand
// request that does not fit a 10,000-host fleet filled about 95% with spot
// and on-demand allocations.
func BenchmarkPlanPreemption10kHosts(b *testing.B) {
	f, e, spot := reclaimFleet(b, 10_000)
	// busy: GPUs with any allocation; milli: the GPU compute allocated
	// (a MIG 3g slice is 3/7 of a GPU).
	gpus, busy, milli := 0, 0, 0
	for _, h := range f.Hosts {
		for i := range h.GPUs {
			gpus++
			if !h.GPUs[i].Empty() {
				busy++
			}
		}
	}
	all := f.Allocations()
	for _, a := range all {
		milli += a.GPUMilli()
	}
	for _, n := range []int{8, 4} {
		req := &Request{ID: fmt.Sprintf("od-h100-%dx", n), Mode: catalog.ModeGPU, GPUs: n,
			CPUMilli: int64(n) * 24000, MemoryMiB: int64(n) * 240 * 1024, Models: []string{"H100"}}
		b.Run(fmt.Sprintf("h100.%dx", n), func(b *testing.B) {
			if _, err := e.Place(f, req); !IsInsufficientCapacity(err) {
				b.Fatalf("%s fits without evictions (err %v)", req.ID, err)
			}
			var plan *PreemptionPlan
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if plan, err = e.PlanPreemption(f, req); err != nil {
					b.Fatal(err)
				}
			}
			if len(plan.Victims) == 0 || plan.Placement == nil {
				b.Fatalf("plan %+v has no victims", plan)
			}
			b.ReportMetric(float64(len(plan.Victims)), "victims")
			b.ReportMetric(float64(busy)*100/float64(gpus), "%gpus-busy")
			b.ReportMetric(float64(milli)/10/float64(gpus), "%gpu-allocated")
			b.ReportMetric(float64(len(all)), "allocations")
			b.ReportMetric(float64(spot), "spot-allocs")
		})
	}
}

// TestReclaimFleetPlan checks the benchmark's setup on a small fleet: the
// plans it measures evict only spot allocations on one host, and the
// request then applies.
func TestReclaimFleetPlan(t *testing.T) {
	f, e, spot := reclaimFleet(t, 200)
	if spot == 0 {
		t.Fatal("no spot allocations")
	}
	for _, n := range []int{8, 4} {
		req := &Request{ID: fmt.Sprintf("od-h100-%dx", n), Mode: catalog.ModeGPU, GPUs: n,
			CPUMilli: int64(n) * 24000, MemoryMiB: int64(n) * 240 * 1024, Models: []string{"H100"}}
		if _, err := e.Place(f, req); !IsInsufficientCapacity(err) {
			t.Fatalf("%s fits without evictions (err %v)", req.ID, err)
		}
		plan, err := e.PlanPreemption(f, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(plan.Victims) == 0 {
			t.Fatalf("%s: plan without victims", req.ID)
		}
		execute(t, f, req, plan)
	}
}
