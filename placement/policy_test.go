package placement

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func TestWorkloadFromRequests(t *testing.T) {
	var reqs []*Request
	add := func(n int, r Request) {
		for i := 0; i < n; i++ {
			c := r
			reqs = append(reqs, &c)
		}
	}
	add(50, Request{Mode: catalog.ModeGPU, GPUs: 1, CPUMilli: 8000, MemoryMiB: 1000})
	add(30, Request{Mode: catalog.ModeGPU, GPUs: 1, CPUMilli: 8000, MemoryMiB: 3000}) // same shape: memory is not in the key
	add(15, Request{Mode: catalog.ModeShared, ShareMilli: 500, CPUMilli: 4000})
	add(4, Request{Mode: catalog.ModeCPU, CPUMilli: 2000})
	add(1, Request{Mode: catalog.ModeGPU, GPUs: 8, CPUMilli: 64000})
	add(7, Request{Mode: catalog.ModeMIG, MIGProfile: "3g"}) // skipped

	all := WorkloadFromRequests(reqs, 1)
	if len(all.Types) != 4 {
		t.Fatalf("got %d types, want 4", len(all.Types))
	}
	want := []struct {
		w           float64
		gpus, milli int
		mem         int64
	}{{0.80, 1, 1000, 1750}, {0.15, 1, 500, 0}, {0.04, 0, 0, 0}, {0.01, 8, 1000, 0}}
	for i, w := range want {
		got := all.Types[i]
		if math.Abs(got.Weight-w.w) > 1e-9 || got.GPUs != w.gpus || got.Milli != w.milli || got.MemoryMiB != w.mem {
			t.Errorf("type %d = %+v, want %+v", i, got, w)
		}
	}
	// 95% coverage keeps the first two (80+15 = 95) and renormalises.
	typ := WorkloadFromRequests(reqs, 0.95)
	if len(typ.Types) != 2 || math.Abs(typ.Types[0].Weight-0.80/0.95) > 1e-9 {
		t.Fatalf("95%% workload = %+v", typ.Types)
	}
	if got := all.Typical(0.95); len(got.Types) != 2 || math.Abs(got.Types[1].Weight-0.15/0.95) > 1e-9 {
		t.Fatalf("Typical(0.95) = %+v", got.Types)
	}
}

// TestFragmentationByHand pins F_n(M) of the FGD paper on a worked example.
func TestFragmentationByHand(t *testing.T) {
	v := &View{CPU: 10000, CPUCap: 32000, Memory: 1 << 20, MemoryCap: 1 << 20, GPUs: []GPUView{
		{Free: 1000, Whole: true, Shareable: true},
		{Free: 300, Shareable: true},
		{Free: 600, Shareable: true},
		{Free: 0},
	}}
	w := &Workload{Types: []TaskType{
		{Weight: 0.5, GPUs: 1, Milli: 500, CPUMilli: 1000},    // fits; 300 is stranded
		{Weight: 0.25, GPUs: 1, Milli: 1000, CPUMilli: 1000},  // fits; 300+600 stranded
		{Weight: 0.125, GPUs: 2, Milli: 1000, CPUMilli: 1000}, // does not fit: all 1900
		{Weight: 0.125, GPUs: 1, Milli: 100, CPUMilli: 20000}, // lacks CPU: all 1900
	}}
	want := 0.5*300 + 0.25*900 + 0.125*1900 + 0.125*1900
	if got := w.fragmentation(v); math.Abs(got-want) > 1e-9 {
		t.Fatalf("fragmentation = %v, want %v", got, want)
	}
}

// naivePotential recomputes the default policy's potential and
// fragmentation type by type, for comparison with the optimised loop.
func naivePotential(w *Workload, v *View, model string) (pot, frag float64) {
	total := v.TotalFree()
	for i := range w.Types {
		t := &w.Types[i]
		if t.GPUs == 0 || t.Models != nil && !t.Models[model] {
			continue
		}
		frag += t.Weight * float64(fragOf(v, t, total))
		if t.Scarcity >= 0 {
			sc := t.Scarcity
			if sc == 0 {
				sc = 1
			}
			pot += t.Weight * sc * float64(fitCount(v, t)*t.GPUs*t.Milli)
		}
	}
	return pot, frag
}

func TestMeasureMatchesNaive(t *testing.T) {
	rnd := rand.New(rand.NewSource(3))
	w := &Workload{}
	for i := 0; i < 40; i++ {
		tt := TaskType{Weight: rnd.Float64(), CPUMilli: int64(rnd.Intn(5)) * 4000, MemoryMiB: int64(rnd.Intn(3)) * 8192, Scarcity: float64(rnd.Intn(4)) - 1}
		switch rnd.Intn(3) {
		case 0:
			tt.GPUs, tt.Milli = 1, 50+rnd.Intn(900)
		case 1:
			tt.GPUs, tt.Milli = 1<<rnd.Intn(4), 1000
		}
		if rnd.Intn(4) == 0 {
			tt.Models = map[string]bool{"T4": true}
		}
		w.Types = append(w.Types, tt)
	}
	s := NewGPUCloud(w)
	for trial := 0; trial < 200; trial++ {
		v := &View{CPU: int64(rnd.Intn(64)) * 1000, Memory: int64(rnd.Intn(8)) * 8192, CPUCap: 64000, MemoryCap: 65536}
		for g := 0; g < 1+rnd.Intn(8); g++ {
			free := []int{0, 1000, rnd.Intn(1001)}[rnd.Intn(3)]
			v.GPUs = append(v.GPUs, GPUView{Model: "T4", Free: free, Whole: free == 1000, Shareable: true})
		}
		pot, frag := s.forHost(v).measure(v, &s.sig)
		wp, wf := naivePotential(w, v, "T4")
		if math.Abs(pot-wp) > 1e-6*math.Max(1, wp) || math.Abs(frag-wf) > 1e-6*math.Max(1, wf) {
			t.Fatalf("trial %d: measure = (%v, %v), naive = (%v, %v)", trial, pot, frag, wp, wf)
		}
	}
}

// TestRecalibrateGuardsScarceHosts: as hosts fill, the task type only the
// remaining empty 8-GPU hosts can run grows scarcer, and the engine drops
// its cached scores so that the new weights apply at once.
func TestRecalibrateGuardsScarceHosts(t *testing.T) {
	var hosts []*fleet.Host
	for i := 0; i < 8; i++ {
		hosts = append(hosts, fleet.MockHost(fmt.Sprintf("big-%d", i), "A100-80GB-SXM", 8))
	}
	for i := 0; i < 24; i++ {
		hosts = append(hosts, fleet.MockHost(fmt.Sprintf("small-%d", i), "L40S", 2))
	}
	f := fleet.MockFleet(hosts...)
	w := &Workload{Types: []TaskType{
		{Weight: 0.8, GPUs: 1, Milli: 1000, CPUMilli: 1000},
		{Weight: 0.1, GPUs: 8, Milli: 1000, CPUMilli: 8000},
		{Weight: 0.1, CPUMilli: 4000}, // CPU only: no scarcity
	}}
	w.Calibrate(f.Hosts)
	initial := w.Types[1].Scarcity
	if want := float64(8*8+24*2) / float64(8*8); math.Abs(initial-want) > 1e-9 {
		t.Fatalf("initial 8-GPU scarcity %v, want %v", initial, want)
	}
	s := NewGPUCloud(w)
	e := NewEngine(nil, s, 1)
	// Fill six of the eight big hosts with one GPU each.
	for i := 0; i < 6; i++ {
		p := &fleet.Placement{ID: fmt.Sprintf("x%d", i), HostID: fmt.Sprintf("big-%d", i), Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if !e.Recalibrate(f) {
		t.Fatal("recalibrate reported no change after filling big hosts")
	}
	// The engine's own copy holds the new weights.
	got := e.Scorer().(*GPUCloud).w.Types[1].Scarcity
	if got <= initial*2 {
		t.Fatalf("8-GPU scarcity after filling %v, want well above %v", got, initial)
	}
	if e.Recalibrate(f) {
		t.Fatal("a second recalibration with no change reported a change")
	}
	// A 1-GPU request now goes to a small host or a partly used big host,
	// never to one of the two empty big hosts.
	p := mustPlace(t, e, f, gpuReq("one", 1))
	if p.HostID == "big-6" || p.HostID == "big-7" {
		t.Fatalf("1-GPU request took an empty 8-GPU host (%s)", p.HostID)
	}
}

// TestMIGSlotKeepsRoom: the default policy puts a lone 3g instance at slot
// 4, not 0, so that a 4g (which can only start at 0) still fits beside it.
func TestMIGSlotKeepsRoom(t *testing.T) {
	h := fleet.MockHost("h100", "H100-80GB-SXM", 1)
	h.GPUs[0].MIG = true
	f := fleet.MockFleet(h)
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	p := mustPlace(t, e, f, migReq("a", "3g.40gb"))
	if p.Devices[0].MIGStart != 4 {
		t.Fatalf("3g placed at slot %d, want 4", p.Devices[0].MIGStart)
	}
	q := mustPlace(t, e, f, migReq("b", "4g.40gb"))
	if q.Devices[0].MIGStart != 0 {
		t.Fatalf("4g placed at slot %d, want 0", q.Devices[0].MIGStart)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
}

// TestMIGPacksPartialGPU: a 1g instance goes to the MIG GPU that already
// has instances, keeping the empty MIG GPU whole for a 7g.
func TestMIGPacksPartialGPU(t *testing.T) {
	h := fleet.MockHost("h100", "H100-80GB-SXM", 2)
	h.GPUs[0].MIG, h.GPUs[1].MIG = true, true
	f := fleet.MockFleet(h)
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	first := mustPlace(t, e, f, migReq("a", "1g.10gb"))
	second := mustPlace(t, e, f, migReq("b", "1g.10gb"))
	if second.Devices[0].GPU != first.Devices[0].GPU {
		t.Fatalf("second 1g went to gpu %d, first is on gpu %d", second.Devices[0].GPU, first.Devices[0].GPU)
	}
}

// TestCacheEviction: with a tiny cache budget the engine drops old shapes'
// caches, stays within budget, and places exactly as a fresh engine does.
func TestCacheEviction(t *testing.T) {
	defer func(n int) { maxCacheEntries = n }(maxCacheEntries)
	maxCacheEntries = 40
	var hosts []*fleet.Host
	for i := 0; i < 12; i++ {
		hosts = append(hosts, fleet.MockHost(fmt.Sprintf("h%02d", i), []string{"T4", "L40S", "A100-80GB-SXM"}[i%3], 2+i%3))
	}
	f := fleet.MockFleet(hosts...)
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	for i := 0; i < 200; i++ {
		req := gpuReq(fmt.Sprintf("r%d", i), 1)
		req.CPUMilli = int64(100 * (i % 37)) // 37 shapes, revisited
		if i%5 == 0 {
			req = shareReq(fmt.Sprintf("r%d", i), 100+i%7*100, 0)
		}
		p, err := e.Place(f, req)
		fresh, err2 := NewEngine(nil, NewGPUCloud(nil), 1).Place(f, req)
		if (err == nil) != (err2 == nil) || err == nil && Explain(p) != Explain(fresh) {
			t.Fatalf("request %d: cached %v/%v, fresh %v/%v", i, p, err, fresh, err2)
		}
		if err == nil {
			if err := f.Apply(p); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				if err := f.Release(p.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		if e.entries > maxCacheEntries+len(f.Classes())+8 {
			t.Fatalf("request %d: %d cached entries, budget %d", i, e.entries, maxCacheEntries)
		}
	}
}
