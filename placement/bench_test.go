package placement

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// syntheticFleet builds n hosts of 8 GPUs: 40% H100 SXM and 30% A100 SXM on
// one NVLink island each, 30% L40S on PCIe, over three zones and racks of 32.
func syntheticFleet(tb testing.TB, cat *catalog.Catalog, n int) *fleet.Fleet {
	f := fleet.New()
	for i := 0; i < n; i++ {
		model, island := "H100-80GB-SXM", 0
		switch {
		case i%10 >= 7:
			model, island = "L40S", -1
		case i%10 >= 4:
			model = "A100-80GB-SXM"
		}
		h := &fleet.Host{
			ID: fmt.Sprintf("host-%05d", i), Zone: fmt.Sprintf("zone-%d", i%3), Rack: fmt.Sprintf("rack-%d", i/32),
			Labels:   map[string]string{"driver": "550.54", "interconnect": "infiniband"},
			CPUMilli: 192000, MemoryMiB: 2048 * 1024,
		}
		for g := 0; g < 8; g++ {
			h.GPUs = append(h.GPUs, fleet.GPU{Index: g, UUID: fmt.Sprintf("GPU-%d-%d", i, g), Model: model, Island: island})
		}
		if err := f.AddHost(h, cat); err != nil {
			tb.Fatal(err)
		}
	}
	return f
}

// benchMix is the request mix of the benchmarks: whole GPUs of every size,
// MIG slices and fractional shares.
func benchMix(rnd *rand.Rand, id string) *Request {
	r := &Request{ID: id}
	switch x := rnd.Intn(100); {
	case x < 30:
		r.Mode, r.GPUs, r.CPUMilli, r.MemoryMiB = catalog.ModeGPU, 1, 16000, 128*1024
	case x < 40:
		r.Mode, r.GPUs, r.CPUMilli, r.MemoryMiB = catalog.ModeGPU, 2, 32000, 256*1024
	case x < 45:
		r.Mode, r.GPUs, r.CPUMilli, r.MemoryMiB = catalog.ModeGPU, 4, 64000, 512*1024
	case x < 50:
		r.Mode, r.GPUs, r.CPUMilli, r.MemoryMiB = catalog.ModeGPU, 8, 128000, 1024*1024
	case x < 60:
		r.Mode, r.ShareMilli, r.ShareMemoryMiB, r.CPUMilli, r.MemoryMiB = catalog.ModeShared, 250, 12*1024, 4000, 32*1024
		r.Models = []string{"L40S"}
	case x < 70:
		r.Mode, r.ShareMilli, r.ShareMemoryMiB, r.CPUMilli, r.MemoryMiB = catalog.ModeShared, 500, 24*1024, 8000, 64*1024
		r.Models = []string{"L40S"}
	case x < 85:
		r.Mode, r.MIGProfile, r.CPUMilli, r.MemoryMiB = catalog.ModeMIG, "1g", 2000, 16*1024
		r.MIGProfile = "19"
	default:
		r.Mode, r.MIGProfile, r.CPUMilli, r.MemoryMiB = catalog.ModeMIG, "3g", 8000, 64*1024
	}
	return r
}

// fill places mix requests until the fleet's GPUs are `fill` allocated.
func fill(tb testing.TB, f *fleet.Fleet, e *Engine, fraction float64, rnd *rand.Rand) {
	total := 0
	for _, h := range f.Hosts {
		total += len(h.GPUs) * 1000
	}
	used, misses := 0, 0
	for i := 0; float64(used) < fraction*float64(total) && misses < 1000; i++ {
		r := benchMix(rnd, fmt.Sprintf("fill-%d", i))
		p, err := e.Place(f, r)
		if err != nil {
			misses++
			continue
		}
		p.ID = r.ID
		if err := f.Apply(p); err != nil {
			tb.Fatal(err)
		}
		used += p.GPUMilli()
	}
}

// BenchmarkPlace measures one placement decision (Place, then Apply and
// Release so the fill stays put) on synthetic fleets of 8-GPU hosts.
func BenchmarkPlace(b *testing.B) {
	cat := catalog.Default()
	for _, hosts := range []int{1000, 10000, 50000} {
		for _, fillPct := range []int{50, 90} {
			for _, policy := range []string{DefaultPolicy, "fgd", "bestfit"} {
				name := fmt.Sprintf("hosts=%d/fill=%d/policy=%s", hosts, fillPct, policy)
				b.Run(name, func(b *testing.B) {
					sc, _ := NewScorer(policy, nil)
					e := NewEngine(cat, sc, 1)
					f := syntheticFleet(b, cat, hosts)
					rnd := rand.New(rand.NewSource(7))
					fill(b, f, e, float64(fillPct)/100, rnd)
					reqs := make([]*Request, 1024)
					for i := range reqs {
						reqs[i] = benchMix(rnd, fmt.Sprintf("bench-%d", i))
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						r := reqs[i%len(reqs)]
						p, err := e.Place(f, r)
						if err != nil {
							continue
						}
						p.ID = r.ID
						if err := f.Apply(p); err != nil {
							b.Fatal(err)
						}
						if err := f.Release(p.ID); err != nil {
							b.Fatal(err)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(len(f.Classes())), "classes")
				})
			}
		}
	}
}

// BenchmarkPlaceCold measures the worst case: every request has a shape the
// engine has not seen, so every class of the fleet is evaluated.
func BenchmarkPlaceCold(b *testing.B) {
	cat := catalog.Default()
	for _, hosts := range []int{1000, 10000, 50000} {
		b.Run(fmt.Sprintf("hosts=%d/fill=90/policy=%s", hosts, DefaultPolicy), func(b *testing.B) {
			sc, _ := NewScorer(DefaultPolicy, nil)
			e := NewEngine(cat, sc, 1)
			f := syntheticFleet(b, cat, hosts)
			rnd := rand.New(rand.NewSource(7))
			fill(b, f, e, 0.9, rnd)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r := benchMix(rnd, fmt.Sprintf("cold-%d", i))
				r.CPUMilli += int64(1 + i%100000) // a new shape every time
				if _, err := e.Place(f, r); err != nil && !IsInsufficientCapacity(err) {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(len(f.Classes())), "classes")
		})
	}
}
