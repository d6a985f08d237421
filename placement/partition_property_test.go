package placement

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// amdModes are the operator modes the property test gives AMD hosts.
var amdModes = []struct {
	partition, memory string
	vfs               int
}{
	{"", "", 0}, {"DPX", "", 0}, {"QPX", "", 0}, {"CPX", "", 0}, {"CPX", "NPS4", 0}, {"CPX", "NPS1", 8}, {"", "", 1},
}

// fitsSomewhere is the brute-force reference for a partition or vf
// request: some schedulable, not bare-metal host in an allowed zone with
// the CPU and memory has a GPU of an allowed model in the request's mode
// with a free device.
func fitsSomewhere(f *fleet.Fleet, req *Request) bool {
	for _, h := range f.Hosts {
		if h.State != fleet.Schedulable || h.MetalAlloc != "" || req.CPUMilli > h.FreeCPU() || req.MemoryMiB > h.FreeMemory() {
			continue
		}
		if len(req.Zones) > 0 && req.Zones[0] != h.Zone {
			continue
		}
		for i := range h.GPUs {
			g := &h.GPUs[i]
			if len(req.Models) > 0 && req.Models[0] != g.Model || !g.Split() || g.PartsFree() == 0 {
				continue
			}
			if req.Mode == catalog.ModeVF && g.VFs == req.VFs ||
				req.Mode == catalog.ModePartition && g.VFs == 0 && g.Partition == req.Partition &&
					(req.MemoryPartition == "" || g.MemoryPartition == req.MemoryPartition) {
				return true
			}
		}
	}
	return false
}

// TestPartitionProperties places and releases random partition, vf, gpu
// and metal requests on random AMD and NVIDIA hosts: after every step the
// fleet's invariants hold (Check: no device held twice, counters equal the
// allocations), every partition or VF lands on a GPU in its mode, no whole
// GPU or metal host is ever split, and a partition or vf request is refused
// only when the brute-force reference finds no room either.
func TestPartitionProperties(t *testing.T) {
	placed, refused := map[fleet.DeviceKind]int{}, 0
	for seed := int64(1); seed <= 4; seed++ {
		r := rand.New(rand.NewSource(seed))
		var hosts []*fleet.Host
		for i := range 12 {
			id := fmt.Sprintf("a%02d", i)
			switch r.Intn(4) {
			case 0:
				hosts = append(hosts, fleet.MockNVLinkHost(id, "H100", 8))
			default:
				model := []string{"MI300X", "MI325X"}[r.Intn(2)]
				m := amdModes[r.Intn(len(amdModes))]
				if model == "MI325X" && m.vfs == 8 {
					m = amdModes[3]
				}
				h := fleet.MockAMDHost(id, model, 1+r.Intn(8), m.partition, m.memory, m.vfs)
				h.Zone = []string{"zone-a", "zone-b"}[r.Intn(2)]
				if r.Intn(2) == 0 {
					h.CPUMilli /= 8
				}
				hosts = append(hosts, h)
			}
		}
		f := fleet.MockFleet(hosts...)
		e := NewEngine(testCatalog, NewGPUCloud(nil), seed)
		var live []string
		for step := range 400 {
			if len(live) > 0 && r.Intn(3) == 0 {
				k := r.Intn(len(live))
				if err := f.Release(live[k]); err != nil {
					t.Fatal(err)
				}
				live = append(live[:k], live[k+1:]...)
				continue
			}
			req := &Request{ID: fmt.Sprintf("s%d-%d", seed, step), CPUMilli: int64(1+r.Intn(8)) * 1000, MemoryMiB: 1024}
			if r.Intn(3) == 0 {
				req.Models = []string{[]string{"MI300X", "MI325X"}[r.Intn(2)]}
			}
			if r.Intn(6) == 0 {
				req.Zones = []string{"zone-b"}
			}
			switch k := r.Intn(10); {
			case k < 6:
				req.Mode, req.Partition = catalog.ModePartition, []string{"DPX", "QPX", "CPX", "CPX"}[r.Intn(4)]
				if req.Partition == "CPX" && r.Intn(2) == 0 {
					req.MemoryPartition = []string{"NPS1", "NPS4"}[r.Intn(2)]
				}
			case k < 7:
				req.Mode, req.VFs, req.Models = catalog.ModeVF, []int{1, 8}[r.Intn(2)], []string{"MI300X"}
			case k < 9:
				req.Mode, req.GPUs = catalog.ModeGPU, []int{1, 2, 8}[r.Intn(3)]
			default:
				req.Mode = catalog.ModeMetal
			}
			want := (req.Mode == catalog.ModePartition || req.Mode == catalog.ModeVF) && fitsSomewhere(f, req)
			p, err := e.Place(f, req)
			if err != nil {
				if !IsInsufficientCapacity(err) {
					t.Fatalf("seed %d step %d: %+v: %v", seed, step, req, err)
				}
				if want {
					t.Fatalf("seed %d step %d: %+v refused (%v), but the reference finds room", seed, step, req, err)
				}
				refused++
				continue
			}
			if err := f.Apply(p); err != nil {
				t.Fatalf("seed %d step %d: infeasible placement %+v: %v", seed, step, p, err)
			}
			live = append(live, p.ID)
			h := f.Host(p.HostID)
			for _, d := range p.Devices {
				placed[d.Kind]++
				g := &h.GPUs[d.GPU]
				switch {
				case d.Kind == fleet.Partition && (g.Partition != req.Partition || g.VFs != 0 || d.Parts != g.Parts ||
					req.MemoryPartition != "" && g.MemoryPartition != req.MemoryPartition):
					t.Fatalf("seed %d step %d: %s partition on a GPU in %s", seed, step, req.Partition, g.ModeString())
				case d.Kind == fleet.VF && g.VFs != req.VFs:
					t.Fatalf("seed %d step %d: VF of %d on a GPU of %d VFs", seed, step, req.VFs, g.VFs)
				case d.Kind == fleet.Whole && g.Split():
					t.Fatalf("seed %d step %d: whole use of a GPU in %s", seed, step, g.ModeString())
				}
			}
			if err := f.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
		}
	}
	// Not vacuous: each kind was placed, and some requests were refused.
	if placed[fleet.Partition] < 50 || placed[fleet.VF] == 0 || placed[fleet.Whole] == 0 || refused == 0 {
		t.Errorf("placed %v, refused %d", placed, refused)
	}
	t.Logf("placed %v, refused %d", placed, refused)
}
