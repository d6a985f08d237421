package placement

import (
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// shareMix is a workload of shares of the given sizes, weighed as given
// and normalised as WorkloadFromRequests normalises its types.
func shareMix(sizes map[int]float64) *Workload {
	total := 0.0
	for _, wt := range sizes {
		total += wt
	}
	w := &Workload{}
	for m, wt := range sizes {
		w.Types = append(w.Types, TaskType{Weight: wt / total, GPUs: 1, Milli: m, CPUMilli: 1000})
	}
	return w
}

// TestGapValuesByHand pins the prices on mixes whose optimal fractional
// packing, and so whose prices, are unique.
func TestGapValuesByHand(t *testing.T) {
	cases := []struct {
		name   string
		w      *Workload
		prices map[int]float64
		values map[int]float64
	}{
		{"one size", shareMix(map[int]float64{500: 1}),
			map[int]float64{500: 0.5}, map[int]float64{0: 0, 499: 0, 500: 0.5, 999: 0.5, 1000: 1}},
		// Every 600 needs a GPU of its own and the 400s ride along free.
		{"large items set the count", shareMix(map[int]float64{600: 2, 400: 1}),
			map[int]float64{600: 1, 400: 0}, map[int]float64{400: 0, 599: 0, 600: 1, 1000: 1}},
		// Half the 400s pair with the 600s, the rest go two to a GPU.
		{"pairs", shareMix(map[int]float64{600: 0.5, 400: 1}),
			map[int]float64{600: 0.5, 400: 0.5}, map[int]float64{399: 0, 400: 0.5, 800: 1, 1000: 1}},
		// A whole-GPU type is an item of 1000 per GPU.
		{"whole GPUs", &Workload{Types: []TaskType{
			{Weight: 1, GPUs: 2, Milli: 1000, CPUMilli: 8000},
			{Weight: 1, GPUs: 1, Milli: 250, CPUMilli: 1000},
		}}, map[int]float64{1000: 1, 250: 0.25}, map[int]float64{249: 0, 250: 0.25, 999: 0.75, 1000: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gv := newGapValues(c.w)
			if gv == nil {
				t.Fatal("no prices")
			}
			for i, s := range gv.sizes {
				if want, ok := c.prices[s]; ok && math.Abs(gv.prices[i]-want) > 1e-9 {
					t.Errorf("price of %d = %v, want %v", s, gv.prices[i], want)
				}
			}
			for g, want := range c.values {
				if got := gv.value[g]; math.Abs(got-want) > 1e-9 {
					t.Errorf("value[%d] = %v, want %v", g, got, want)
				}
			}
		})
	}
	if gv := newGapValues(&Workload{Types: []TaskType{{Weight: 1, GPUs: 1, Milli: 1000}, {Weight: 1, CPUMilli: 1000}}}); gv != nil {
		t.Errorf("a workload without shares got prices %v", gv.prices)
	}
}

// TestGapValuesProperties: on random mixes the column generation converges,
// no GPU's worth of items is priced over one GPU, the prices are at least
// the items' sizes in total (the sizes themselves are feasible prices, and
// the optimum is no worse), and a share never costs a GPU less than its
// own price.
func TestGapValuesProperties(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	for n := 0; n < 150; n++ {
		mix := map[int]float64{}
		for k := 1 + rnd.Intn(14); k > 0; k-- {
			mix[10*(1+rnd.Intn(99))] = rnd.Float64() + 0.01
		}
		gv := newGapValues(shareMix(mix))
		if gv == nil {
			t.Fatalf("mix %v: no prices", mix)
		}
		if gv.rounds > maxPatterns {
			t.Errorf("mix %v: not converged after %d rounds", mix, gv.rounds)
		}
		if gv.value[0] != 0 || gv.value[1000] > 1+1e-9 {
			t.Fatalf("mix %v: value[0] = %v, value[1000] = %v", mix, gv.value[0], gv.value[1000])
		}
		for g := 1; g <= 1000; g++ {
			if gv.value[g] < gv.value[g-1] {
				t.Fatalf("mix %v: value falls at %d", mix, g)
			}
		}
		dual, volume := 0.0, 0.0
		for i, s := range gv.sizes {
			if gv.prices[i] < -1e-12 {
				t.Fatalf("mix %v: price of %d is %v", mix, s, gv.prices[i])
			}
			dual += mix[s] * gv.prices[i]
			volume += mix[s] * float64(s) / 1000
			for g := s; g <= 1000; g += 37 {
				if l := gv.loss(g, g-s); l < gv.prices[i]-1e-9 {
					t.Fatalf("mix %v: a %d share on %d free loses %v, less than its price %v", mix, s, g, l, gv.prices[i])
				}
			}
		}
		if dual < volume-1e-9 {
			t.Fatalf("mix %v: prices total %v, below the volume %v", mix, dual, volume)
		}
	}
}

// TestShareGoesWhereItPacks: of two hosts with a partly used GPU each, a
// 320 share goes beside the 650 (30 left, the mix's best pairing) rather
// than beside the 470 (210 left, which only the rare small shares could
// use), though the 470's host has more CPU free. Without the gap values the
// policy spreads by CPU and pairs it with the 470.
func TestShareGoesWhereItPacks(t *testing.T) {
	w := shareMix(map[int]float64{470: 0.4, 650: 0.2, 320: 0.2, 810: 0.15, 160: 0.05})
	for _, sv := range []float64{0, DefaultGPUCloudConfig().ShareValue} {
		a, b := fleet.MockHost("a", "T4", 1), fleet.MockHost("b", "T4", 1)
		f := fleet.MockFleet(a, b)
		held := []struct {
			host  string
			milli int
			cpu   int64
		}{{"a", 650, a.CPUMilli / 2}, {"b", 470, 1000}}
		for _, x := range held {
			p := &fleet.Placement{ID: "held-" + x.host, HostID: x.host, CPUMilli: x.cpu,
				Devices: []fleet.Device{{GPU: 0, Kind: fleet.Share, Milli: x.milli}}}
			if err := f.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
		cfg := DefaultGPUCloudConfig()
		cfg.ShareValue = sv
		e := NewEngine(nil, NewGPUCloudConfig(w, cfg), 1)
		p := mustPlace(t, e, f, &Request{ID: "s", Mode: catalog.ModeShared, ShareMilli: 320, CPUMilli: 1000})
		want := "a"
		if sv == 0 {
			want = "b"
		}
		if p.HostID != want {
			t.Errorf("ShareValue %v: the 320 went to host %s, want %s", sv, p.HostID, want)
		}
	}
}

func BenchmarkGapValues(b *testing.B) {
	// The openb gpushare100 mix of share sizes.
	w := shareMix(map[int]float64{810: 2436, 470: 1723, 320: 800, 650: 572, 230: 337, 460: 304,
		590: 180, 160: 154, 550: 143, 220: 141, 370: 111, 110: 58, 480: 40, 350: 19, 330: 16,
		50: 14, 270: 9, 290: 3, 440: 3, 140: 1})
	for i := 0; i < b.N; i++ {
		if gv := newGapValues(w); gv == nil || gv.rounds > maxPatterns {
			b.Fatal("no prices")
		}
	}
}

// TestPackingBoundByHand pins the fractional packing bound on small cases
// and its errors.
func TestPackingBoundByHand(t *testing.T) {
	cases := []struct {
		name  string
		items map[int]int
		gpus  int
		want  float64
	}{
		{"halves fill a GPU", map[int]int{500: 3}, 1, 1000},
		{"a 600 and a 400 per GPU", map[int]int{600: 2, 400: 1}, 2, 1600},
		// One 810 takes the 160, the other GPU an 810 alone; the third 810
		// has no room.
		{"810s strand 190", map[int]int{810: 3, 160: 1}, 2, 1780},
		{"whole GPUs", map[int]int{1000: 3, 250: 2}, 2, 2000},
		// Three 400s and a 600 on two GPUs: 600+400 and 400+400 is 1800;
		// the fractional optimum can do no better than the volume.
		{"under the volume", map[int]int{400: 3, 600: 1}, 2, 1800},
		{"nothing arrived", map[int]int{}, 4, 0},
		{"no GPUs", map[int]int{500: 1}, 0, 0},
	}
	for _, c := range cases {
		got, err := PackingBound(c.items, c.gpus)
		if err != nil || math.Abs(got-c.want) > 1e-6 {
			t.Errorf("%s: PackingBound = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []int{0, -5, 1001} {
		if _, err := PackingBound(map[int]int{bad: 1}, 1); err == nil {
			t.Errorf("size %d: no error", bad)
		}
	}
}

// TestWorkloadFromFleet: what a fleet runs, as the workload the policy
// weighs and the MIG profile mix.
func TestWorkloadFromFleet(t *testing.T) {
	h := fleet.MockHost("h", "A100-80GB-SXM", 4)
	h.GPUs[3].MIG = true
	f := fleet.MockFleet(h)
	allocs := []*fleet.Placement{
		{ID: "whole", HostID: "h", CPUMilli: 8000, Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}},
		{ID: "s1", HostID: "h", CPUMilli: 2000, Devices: []fleet.Device{{GPU: 1, Kind: fleet.Share, Milli: 810}}},
		{ID: "s2", HostID: "h", CPUMilli: 2000, Devices: []fleet.Device{{GPU: 2, Kind: fleet.Share, Milli: 810}}},
		{ID: "s3", HostID: "h", CPUMilli: 2000, Devices: []fleet.Device{{GPU: 1, Kind: fleet.Share, Milli: 160}}},
		{ID: "cpu", HostID: "h", CPUMilli: 4000},
	}
	for _, p := range allocs {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	mp := mustPlace(t, e, f, migReq("m", "1g.10gb"))
	w, mig, n := WorkloadFromFleet(f, nil)
	if n != 5 {
		t.Fatalf("n = %d, want 5 (the MIG instance is apart)", n)
	}
	got := map[string]float64{}
	for _, ty := range w.Types {
		got[fmt.Sprintf("%d/%d/%d/%v", ty.CPUMilli, ty.GPUs, ty.Milli, ty.Models["A100-80GB-SXM"])] = ty.Weight
	}
	want := map[string]float64{"2000/1/810/true": 0.4, "8000/1/1000/true": 0.2, "2000/1/160/true": 0.2, "4000/0/0/false": 0.2}
	if len(got) != len(want) {
		t.Fatalf("types %v, want %v", got, want)
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("type %s weighs %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(mig) != 1 || mig[mp.Devices[0].MIGProfileID] != 1 {
		t.Errorf("MIG mix %v, want one %s", mig, mp.Devices[0].MIGProfile)
	}
}

// TestEngineSetWorkload: a share goes where the workload the policy was
// given packs it best. With the generic mix (shares of 250 and 500) a 230
// leaves the two GPUs' room equally useful, and the host with more CPU
// free wins; with a mix where 220 and 230 pair with a 550 (and a 650's
// leftover takes a 320), it goes beside the 550.
func TestEngineSetWorkload(t *testing.T) {
	a, b := fleet.MockHost("a", "T4", 1), fleet.MockHost("b", "T4", 1)
	f := fleet.MockFleet(a, b)
	for _, x := range []struct {
		host  string
		milli int
		cpu   int64
	}{{"a", 650, 1000}, {"b", 550, b.CPUMilli / 4}} {
		p := &fleet.Placement{ID: "held-" + x.host, HostID: x.host, CPUMilli: x.cpu,
			Devices: []fleet.Device{{GPU: 0, Kind: fleet.Share, Milli: x.milli}}}
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	req := func(id string) *Request {
		return &Request{ID: id, Mode: catalog.ModeShared, ShareMilli: 230, CPUMilli: 1000}
	}
	e := NewEngine(nil, NewGPUCloud(nil), 1)
	p := mustPlace(t, e, f, req("first"))
	if p.HostID != "a" {
		t.Fatalf("generic mix: the 230 went to %s, want a", p.HostID)
	}
	if err := f.Release(p.ID); err != nil {
		t.Fatal(err)
	}
	mix := shareMix(map[int]float64{810: 2436, 470: 1723, 320: 800, 650: 572, 230: 337, 460: 304,
		590: 180, 160: 154, 550: 143, 220: 141, 370: 111, 110: 58})
	if !e.SetWorkload(mix, f) {
		t.Fatal("the default policy took no workload")
	}
	if got := e.Scorer().(*GPUCloud).Workload(); len(got.Types) != len(mix.Types) {
		t.Fatalf("workload has %d types, want %d", len(got.Types), len(mix.Types))
	}
	if p := mustPlace(t, e, f, req("second")); p.HostID != "b" {
		t.Fatalf("learned mix: the 230 went to %s, want b (beside the 550)", p.HostID)
	}
	if NewEngine(nil, NewFGD(nil), 1).SetWorkload(mix, f) {
		t.Error("fgd took a workload")
	}
}
