package upcmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu/sim"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// The example AMD fleet file loads as up loads it, its hosts report their
// GPUs' partition modes and join a fleet, a CPX request lands on the CPX
// host, and the sim driver gives it exactly one render node and one UUID;
// a bad mode in a fleet file is refused with the field.
func TestAMDFleetFile(t *testing.T) {
	specs, err := loadFleet(filepath.Join("..", "..", "examples", "fleet-amd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cat := catalog.Default()
	f := fleet.New()
	hosts := map[string]*sim.Host{}
	for _, s := range specs {
		h, err := sim.New(s)
		if err != nil {
			t.Fatal(err)
		}
		hosts[h.ID()] = h
		inv, err := h.Inventory(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AddHost(&inv.Host, cat); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"sim-mi300x-cpx": "CPX/NPS4", "sim-mi300x-spx": "SPX/NPS1", "sim-mi325x-qpx": "QPX/NPS1", "sim-h100": ""} {
		h := f.Host(id)
		if h == nil || h.GPUs[7].ModeString() != want || h.GPUs[7].Island != 0 {
			t.Errorf("%s: %+v, want mode %q", id, h, want)
		}
	}
	o, _ := cat.Offering("mi300x.cpx")
	e := placement.NewEngine(cat, placement.NewGPUCloud(nil), 1)
	req := &placement.Request{ID: "i-cpx", Mode: o.Mode, Partition: o.Partition, Models: []string{o.Model},
		CPUMilli: int64(o.VCPUs) * 1000, MemoryMiB: o.MemoryMiB}
	p, err := e.Place(f, req)
	if err != nil {
		t.Fatal(err)
	}
	if p.HostID != "sim-mi300x-cpx" || len(p.Devices) != 1 || p.Devices[0].Kind != fleet.Partition {
		t.Fatalf("placement %+v", p)
	}
	h := hosts[p.HostID]
	minors, err := h.RenderMinors(t.Context(), p)
	if err != nil || len(minors) != 1 {
		t.Fatalf("render minors %v, %v", minors, err)
	}
	d := p.Devices[0]
	if want := sim.RenderMinorBase + d.GPU*8 + d.Part; !slices.Equal(minors, []int{want}) {
		t.Errorf("render minors %v, want [%d]", minors, want)
	}
	if uuids, err := h.Devices(t.Context(), p); err != nil || !slices.Equal(uuids, []string{sim.PartUUID(p.HostID, d.GPU, d.Part)}) {
		t.Errorf("devices %v, %v", uuids, err)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("- id: x\n  gpus: {model: MI300X, count: 8, partition: QPX, memory_partition: NPS4}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	specs, err = loadFleet(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.New(specs[0]); err == nil || !strings.Contains(err.Error(), "gpus.memory_partition") {
		t.Errorf("QPX/NPS4 in a fleet file: %v", err)
	}
}
