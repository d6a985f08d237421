package placement

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func partReq(id, mode string, models ...string) *Request {
	return &Request{ID: id, Mode: catalog.ModePartition, Partition: mode, CPUMilli: 1000, MemoryMiB: 1024, Models: models}
}

// A GPU its operator put in CPX is eight small devices: eight CPX requests
// fill it, each gets a different device, and a ninth does not fit, with
// the reason; whole-GPU requests never take a CPX GPU, and CPX requests
// never take an SPX GPU (placement does not change a GPU's mode).
func TestPlaceCPXPartitions(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		f := fleet.MockFleet(fleet.MockAMDHost("cpx", "MI300X", 1, "CPX", "", 0), fleet.MockAMDHost("spx", "MI300X", 1, "", "", 0))
		got := map[int]bool{}
		placed, err := placeUntilFull(t, e, f, *partReq("c", "cpx", "MI300X"))
		for _, p := range placed {
			d := p.Devices[0]
			if p.HostID != "cpx" || d.Kind != fleet.Partition || d.Partition != "CPX" || d.Parts != 8 || got[d.Part] {
				t.Errorf("placement %+v", p)
			}
			got[d.Part] = true
		}
		if len(placed) != 8 {
			t.Fatalf("%d CPX partitions placed, want 8", len(placed))
		}
		var ice *InsufficientCapacityError
		if !errors.As(err, &ice) || ice.Reasons["no free CPX partition"] != 1 || ice.Reasons["no GPU in CPX mode"] != 1 {
			t.Errorf("ninth: %v", err)
		}
		// The SPX GPU is still whole-rentable; the CPX one is not.
		p := mustPlace(t, e, f, gpuReq("w", 1, "MI300X"))
		if p.HostID != "spx" {
			t.Errorf("whole GPU on %s", p.HostID)
		}
		if _, err := e.Place(f, gpuReq("w2", 1, "MI300X")); !IsInsufficientCapacity(err) {
			t.Errorf("second whole GPU: %v", err)
		}
		// A released partition is placed again.
		if err := f.Release(placed[3].ID); err != nil {
			t.Fatal(err)
		}
		p = mustPlace(t, e, f, partReq("again", "CPX", "MI300X"))
		if p.Devices[0].Part != placed[3].Devices[0].Part {
			t.Errorf("released device %d, got %d", placed[3].Devices[0].Part, p.Devices[0].Part)
		}
	})
}

func TestPlacePartitionModes(t *testing.T) {
	e := newEngine(t, "gpucloud")
	f := fleet.MockFleet(
		fleet.MockAMDHost("dpx", "MI300X", 2, "DPX", "", 0),
		fleet.MockAMDHost("cpx4", "MI300X", 1, "CPX", "NPS4", 0),
		fleet.MockAMDHost("vf", "MI300X", 1, "CPX", "NPS1", 8),
		fleet.MockAMDHost("m325", "MI325X", 1, "QPX", "", 0),
		fleet.MockHost("h100", "H100", 8))
	cases := []struct {
		desc string
		req  *Request
		host string
		kind fleet.DeviceKind
	}{
		{"dpx", partReq("a", "DPX", "MI300X"), "dpx", fleet.Partition},
		{"cpx with nps4", &Request{ID: "b", Mode: catalog.ModePartition, Partition: "CPX", MemoryPartition: "NPS4", Models: []string{"MI300X"}}, "cpx4", fleet.Partition},
		{"vf", &Request{ID: "c", Mode: catalog.ModeVF, VFs: 8, Models: []string{"MI300X"}}, "vf", fleet.VF},
		{"qpx on MI325X", partReq("d", "QPX"), "m325", fleet.Partition},
	}
	for _, c := range cases {
		p, err := e.Place(f, c.req)
		if err != nil {
			t.Errorf("%s: %v", c.desc, err)
			continue
		}
		if p.HostID != c.host || p.Devices[0].Kind != c.kind {
			t.Errorf("%s: %s %+v", c.desc, p.HostID, p.Devices)
		}
		if err := f.Apply(p); err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	// CPX/NPS1 is only on the VF host, whose devices are VFs.
	_, err := e.Place(f, &Request{ID: "x", Mode: catalog.ModePartition, Partition: "CPX", MemoryPartition: "NPS1", Models: []string{"MI300X"}})
	var ice *InsufficientCapacityError
	if !errors.As(err, &ice) || ice.Reasons["no GPU in CPX/NPS1 mode"] != 3 {
		t.Errorf("CPX/NPS1: %v", err)
	}
	// Metal does not take a host whose GPUs are split.
	if _, err := e.Place(f, &Request{ID: "m", Mode: catalog.ModeMetal, Models: []string{"MI300X"}}); !IsInsufficientCapacity(err) {
		t.Errorf("metal on split hosts: %v", err)
	}
}

// Requests that can never be valid are *RequestError, whatever the fleet.
func TestPartitionRequestValidation(t *testing.T) {
	e := newEngine(t, "gpucloud")
	f := fleet.MockFleet(fleet.MockAMDHost("cpx", "MI300X", 1, "CPX", "", 0))
	cases := []struct {
		desc  string
		req   *Request
		field string
	}{
		{"no partition", &Request{ID: "a", Mode: catalog.ModePartition}, "partition"},
		{"spx", partReq("a", "SPX"), "partition"},
		{"unknown mode", partReq("a", "TPX"), "partition"},
		{"cpx on H100", partReq("a", "CPX", "H100"), "partition"},
		{"qpx with nps4", &Request{ID: "a", Mode: catalog.ModePartition, Partition: "QPX", MemoryPartition: "NPS4"}, "memory_partition"},
		{"partition in gpu mode", &Request{ID: "a", Mode: catalog.ModeGPU, GPUs: 1, Partition: "CPX"}, "partition"},
		{"vfs in partition mode", &Request{ID: "a", Mode: catalog.ModePartition, Partition: "CPX", VFs: 8}, "vfs"},
		{"vf of 0", &Request{ID: "a", Mode: catalog.ModeVF}, "vfs"},
		{"4 vfs", &Request{ID: "a", Mode: catalog.ModeVF, VFs: 4}, "vfs"},
		{"8 vfs of MI325X", &Request{ID: "a", Mode: catalog.ModeVF, VFs: 8, Models: []string{"MI325X"}}, "vfs"},
	}
	for _, c := range cases {
		_, err := e.Place(f, c.req)
		var re *RequestError
		if !errors.As(err, &re) || re.Field != c.field {
			t.Errorf("%s: %v, want a *RequestError on %s", c.desc, err, c.field)
		}
	}
}

// A full CPX GPU whose partitions spot instances hold gives one up for an
// on-demand partition: the plan evicts one spot allocation, not more.
func TestPreemptCPXPartition(t *testing.T) {
	e := newEngine(t, "gpucloud")
	f := fleet.MockFleet(fleet.MockAMDHost("cpx", "MI300X", 1, "CPX", "", 0))
	for i := range 8 {
		r := partReq(fmt.Sprintf("spot-%d", i), "CPX", "MI300X")
		r.Preemptible, r.PriceMicros = true, int64(1000+i)
		mustPlace(t, e, f, r)
	}
	plan, err := e.PlanPreemption(f, partReq("od", "CPX", "MI300X"))
	if err != nil {
		t.Fatal(err)
	}
	if plan.HostID != "cpx" || len(plan.Victims) != 1 || plan.Victims[0] != "spot-0" {
		t.Errorf("plan %+v, want spot-0 (the cheapest) evicted", plan)
	}
	// A CPX request never evicts from a GPU of another mode.
	g := fleet.MockFleet(fleet.MockAMDHost("spx", "MI300X", 1, "", "", 0))
	r := gpuReq("spot-w", 1, "MI300X")
	r.Preemptible = true
	mustPlace(t, e, g, r)
	if _, err := e.PlanPreemption(g, partReq("od2", "CPX", "MI300X")); !IsInsufficientCapacity(err) {
		t.Errorf("CPX preempting on an SPX GPU: %v", err)
	}
}
