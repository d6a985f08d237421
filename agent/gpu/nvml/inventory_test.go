//go:build cgo

package nvml

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func inventory(t *testing.T, lib *fakeLib) *agentapi.Inventory {
	t.Helper()
	d := New(lib, catalog.Default())
	d.HostID = "host-1"
	inv, err := d.Inventory(context.Background())
	if err != nil {
		t.Fatalf("Inventory: %v", err)
	}
	if len(inv.Host.GPUs) != len(lib.gpus) || len(inv.Health) != len(lib.gpus) {
		t.Fatalf("Inventory has %d GPUs and %d health entries, want %d", len(inv.Host.GPUs), len(inv.Health), len(lib.gpus))
	}
	for i := range inv.Host.GPUs {
		if inv.Host.GPUs[i].Index != i || inv.Health[i].Index != i {
			t.Fatalf("gpu %d reported with index %d / health index %d", i, inv.Host.GPUs[i].Index, inv.Health[i].Index)
		}
	}
	return inv
}

func TestInventoryH100NVSwitch(t *testing.T) {
	lib := h100Host(t)
	inv := inventory(t, lib)
	if inv.Host.ID != "host-1" || inv.Driver != "550.54.15" || inv.CUDA != "12.4" {
		t.Errorf("host %q driver %q cuda %q, want host-1, 550.54.15, 12.4", inv.Host.ID, inv.Driver, inv.CUDA)
	}
	for i, g := range inv.Host.GPUs {
		want := fleet.GPU{Index: i, UUID: lib.gpus[i].uuid, Model: "H100-80GB-SXM", MemoryMiB: 80 * catalog.GiB, Island: 0}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("gpu %d = %+v, want %+v", i, g, want)
		}
		h := inv.Health[i]
		wantH := agentapi.GPUHealth{Index: i, UUID: lib.gpus[i].uuid, Healthy: true, UtilizationPct: 37, MemoryUsedMiB: 1024}
		if h != wantH {
			t.Errorf("health %d = %+v, want %+v", i, h, wantH)
		}
	}
	// An island needs no peer-to-peer fallback when the links say where
	// they go.
	if calls := lib.callsMatching("GetP2PStatus"); len(calls) > 0 {
		t.Errorf("asked for P2P status %d times; links named their switches", len(calls))
	}
}

func TestInventoryL40SPCIe(t *testing.T) {
	lib := newFakeLib(l40s(t), l40s(t), l40s(t), l40s(t))
	inv := inventory(t, lib)
	for i, g := range inv.Host.GPUs {
		if g.Model != "L40S" || g.Island != -1 || g.MIG || g.MemoryMiB != 48*catalog.GiB {
			t.Errorf("gpu %d = %+v, want an L40S of the catalog's 48 GiB on island -1 without MIG", i, g)
		}
		if h := inv.Health[i]; !h.Healthy || h.Reason != "" || h.UtilizationPct != 5 {
			t.Errorf("health %d = %+v, want healthy at 5%%", i, h)
		}
	}
}

// A GPU that answers ERROR_NOT_SUPPORTED for NVLink and utilization is a
// healthy PCIe GPU at 0%, and the others keep their island.
func TestInventoryNotSupportedIsAnAnswer(t *testing.T) {
	lib := h100Host(t)
	odd := lib.gpus[3]
	odd.fail = map[string]nvml.Return{
		"GetNvLinkState":      nvml.ERROR_NOT_SUPPORTED,
		"GetUtilizationRates": nvml.ERROR_NOT_SUPPORTED,
		"GetMemoryInfo":       nvml.ERROR_NOT_SUPPORTED,
	}
	inv := inventory(t, lib)
	for i, g := range inv.Host.GPUs {
		want := 0
		if i == 3 {
			want = -1
		}
		if g.Island != want {
			t.Errorf("gpu %d island %d, want %d", i, g.Island, want)
		}
	}
	h := inv.Health[3]
	if !h.Healthy || h.Reason != "" || h.UtilizationPct != 0 || h.MemoryUsedMiB != 0 {
		t.Errorf("health 3 = %+v, want healthy, no reason, zero counters", h)
	}
}

func TestInventoryMIGInstancesUseCatalogSizes(t *testing.T) {
	g := h100(t)
	g.mig, g.pendingMIG = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE
	g.withInstance(9, 0).withInstance(20, 4)
	// NVML (like go-nvml's mock) reports a 3g instance 3 slots wide; the
	// catalog, and real hardware, say 4.
	g.nvmlSize = map[int]int{9: 3}
	lib := newFakeLib(g)
	inv := inventory(t, lib)

	m := model(t, "H100-80GB-SXM")
	var want []fleet.MIGInstance
	for _, in := range []struct{ id, start int }{{9, 0}, {20, 4}} {
		p := m.ProfileByID(in.id)
		want = append(want, fleet.MIGInstance{ProfileID: in.id, Start: in.start, Slots: p.MemorySlots, Slices: p.ComputeSlices, Media: p.MediaExtensions})
	}
	got := inv.Host.GPUs[0]
	if !got.MIG || !reflect.DeepEqual(got.Instances, want) {
		t.Fatalf("gpu 0 MIG %v instances %+v, want MIG with %+v", got.MIG, got.Instances, want)
	}
	// Slots 0-3 for the 3g, slot 4 for the 1g+me; 4 of 7 slices.
	if mask, slices := got.SlotMask(), got.SlicesUsed(); mask != 0b1_1111 || slices != 4 {
		t.Errorf("slot mask %08b, slices %d; want 00011111 and 4", mask, slices)
	}
	if h := inv.Health[0]; !h.Healthy || h.Reason != "" || h.UtilizationPct != 0 {
		t.Errorf("health %+v, want healthy with no utilization (MIG mode has none)", h)
	}
}

func TestInventoryMIGPendingIsNoted(t *testing.T) {
	g := h100(t)
	g.pendingMIG = nvml.DEVICE_MIG_ENABLE
	inv := inventory(t, newFakeLib(g))
	if inv.Host.GPUs[0].MIG {
		t.Error("MIG reported on; only the pending mode is")
	}
	if h := inv.Health[0]; !h.Healthy || !strings.Contains(h.Reason, "MIG mode on is pending") {
		t.Errorf("health %+v, want healthy with a note on the pending mode", h)
	}
}

// NVML's memory size does not replace the catalog's nominal one, but one far
// off it suggests the wrong model was matched, and is noted.
func TestInventoryMemoryFarOffTheCatalogIsNoted(t *testing.T) {
	g := h100(t)
	g.totalMiB = 40326
	inv := inventory(t, newFakeLib(g))
	if m := inv.Host.GPUs[0].MemoryMiB; m != 80*catalog.GiB {
		t.Errorf("memory %d MiB, want the catalog's %d", m, 80*catalog.GiB)
	}
	if h := inv.Health[0]; !h.Healthy || !strings.Contains(h.Reason, "NVML reports 40326 MiB") {
		t.Errorf("health %+v, want healthy with a note on the memory size", h)
	}
}

func TestInventoryUnknownModel(t *testing.T) {
	b200 := &fakeGPU{name: "NVIDIA B200", pciID: 0x2901, totalMiB: 183359}
	inv := inventory(t, newFakeLib(b200))
	g, h := inv.Host.GPUs[0], inv.Health[0]
	if g.Model != "NVIDIA B200" || g.MemoryMiB != 183359 {
		t.Errorf("gpu %+v, want NVML's name and memory", g)
	}
	if !h.Healthy || !strings.Contains(h.Reason, "unknown GPU model") || !strings.Contains(h.Reason, "0x2901") {
		t.Errorf("health %+v, want healthy with an unknown-model warning naming the PCI id", h)
	}
}

func TestInventoryLostGPU(t *testing.T) {
	lib := newFakeLib(l40s(t), l40s(t))
	lib.gpus[1].fail = map[string]nvml.Return{"GetUUID": nvml.ERROR_GPU_IS_LOST}
	inv := inventory(t, lib)
	if h := inv.Health[0]; !h.Healthy {
		t.Errorf("gpu 0 %+v, want healthy", h)
	}
	if h := inv.Health[1]; h.Healthy || !strings.Contains(h.Reason, "read UUID") {
		t.Errorf("gpu 1 %+v, want unhealthy because its UUID cannot be read", h)
	}
}

func TestInventoryFails(t *testing.T) {
	lib := newFakeLib(l40s(t))
	lib.countRet = nvml.ERROR_DRIVER_NOT_LOADED
	_, err := New(lib, nil).Inventory(context.Background())
	if !errors.Is(err, gpu.ErrUnavailable) || !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("Inventory with the driver gone = %v, want ErrUnavailable", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lib = newFakeLib(l40s(t))
	if _, err := New(lib, nil).Inventory(ctx); !errors.Is(err, context.Canceled) || len(lib.calls) > 0 {
		t.Errorf("Inventory with a done context = %v after %d calls, want context.Canceled before any", err, len(lib.calls))
	}
}

func TestIslands(t *testing.T) {
	tests := []struct {
		desc  string
		host  func(t *testing.T) *fakeLib
		wants []int
	}{{
		desc:  "HGX H100: eight GPUs on four NVSwitches",
		host:  h100Host,
		wants: []int{0, 0, 0, 0, 0, 0, 0, 0},
	}, {
		desc: "PCIe H100s with NVLink bridges in pairs",
		host: func(t *testing.T) *fakeLib {
			g := []*fakeGPU{h100(t), h100(t), h100(t), h100(t)}
			linkGPUs(g[0], g[1], 6)
			linkGPUs(g[2], g[3], 6)
			return newFakeLib(g...)
		},
		wants: []int{0, 0, 1, 1},
	}, {
		desc: "a bridged pair and two lone GPUs",
		host: func(t *testing.T) *fakeLib {
			g := []*fakeGPU{h100(t), h100(t), h100(t), h100(t)}
			linkGPUs(g[1], g[2], 4)
			return newFakeLib(g...)
		},
		wants: []int{-1, 0, 0, -1},
	}, {
		// DGX-1: two fully connected quads joined by one link per GPU.
		desc: "hybrid cube mesh splits into fully connected quads",
		host: func(t *testing.T) *fakeLib {
			g := make([]*fakeGPU, 8)
			for i := range g {
				g[i] = h100(t)
			}
			for _, q := range [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}} {
				for a := range q {
					for b := a + 1; b < len(q); b++ {
						linkGPUs(g[q[a]], g[q[b]], 1)
					}
				}
			}
			for i := range 4 {
				linkGPUs(g[i], g[i+4], 1)
			}
			return newFakeLib(g...)
		},
		wants: []int{0, 0, 0, 0, 1, 1, 1, 1},
	}, {
		desc: "links that do not name their peer fall back to NVLink P2P",
		host: func(t *testing.T) *fakeLib {
			lib := h100Host(t)
			for i, g := range lib.gpus {
				for l := range g.links {
					g.links[l].remoteRet = nvml.ERROR_NOT_SUPPORTED
					g.links[l].kindRet = nvml.ERROR_NOT_SUPPORTED
				}
				// GPUs 0-5 are one partition; 6 and 7 another.
				for j := range lib.gpus {
					if j != i && (i < 6) == (j < 6) {
						g.p2p = append(g.p2p, j)
					}
				}
			}
			return lib
		},
		wants: []int{0, 0, 0, 0, 0, 0, 1, 1},
	}, {
		desc: "links that are down join nothing",
		host: func(t *testing.T) *fakeLib {
			lib := h100Host(t)
			for l := range lib.gpus[5].links {
				lib.gpus[5].links[l].active = false
			}
			return lib
		},
		wants: []int{0, 0, 0, 0, 0, -1, 0, 0},
	}}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			inv := inventory(t, tt.host(t))
			var got []int
			for _, g := range inv.Host.GPUs {
				got = append(got, g.Island)
			}
			if !reflect.DeepEqual(got, tt.wants) {
				t.Errorf("islands %v, want %v", got, tt.wants)
			}
		})
	}
}

func TestMatchModel(t *testing.T) {
	cat := catalog.Default()
	tests := []struct {
		desc  string
		pciID uint16
		name  string
		want  string
	}{
		{"PCI id wins over the name", 0x2330, "NVIDIA Something", "H100-80GB-SXM"},
		{"H200 by its real PCI id", 0x2335, "", "H200-141GB"},
		{"go-nvml's mock H200 id is unknown, the name still matches", 0x2333, "NVIDIA H200", "H200-141GB"},
		{"H100 SXM by name", 0, "NVIDIA H100 80GB HBM3", "H100-80GB-SXM"},
		{"H100 PCIe by name", 0, "NVIDIA H100 PCIe", "H100-80GB-PCIE"},
		{"A100 SXM 40GB by name", 0, "NVIDIA A100-SXM4-40GB", "A100-40GB-SXM"},
		{"A100 PCIe 80GB by name", 0, "NVIDIA A100 80GB PCIe", "A100-80GB-PCIE"},
		{"A100 PCIe 40GB by name", 0, "NVIDIA A100-PCIE-40GB", "A100-40GB-PCIE"},
		{"H200 NVL by name", 0, "NVIDIA H200 NVL", "H200-NVL"},
		{"Tesla brand", 0, "Tesla T4", "T4"},
		{"V100 by name", 0, "Tesla V100-SXM2-32GB", "V100-32GB"},
		{"RTX 6000 Ada", 0, "NVIDIA RTX 6000 Ada Generation", "RTX-6000-ADA"},
		{"L40S is not L4", 0, "NVIDIA L40S", "L40S"},
		{"L4", 0, "NVIDIA L4", "L4"},
		{"H100 NVL is not in the catalog", 0, "NVIDIA H100 NVL", ""},
		{"RTX A6000 is not the RTX 6000 Ada", 0, "NVIDIA RTX A6000", ""},
		{"A10G is not the A10", 0, "NVIDIA A10G", ""},
		{"B200 is unknown", 0x2901, "NVIDIA B200", ""},
	}
	for _, tt := range tests {
		t.Run(tt.desc, func(t *testing.T) {
			got := ""
			if m := matchModel(cat, tt.pciID, tt.name); m != nil {
				got = m.Name
			}
			if got != tt.want {
				t.Errorf("matchModel(%#04x, %q) = %q, want %q", tt.pciID, tt.name, got, tt.want)
			}
		})
	}
}

// Every model of the catalog with a PCI id is found by it: the ids are the
// inventory's primary key, so two models must not share one.
func TestMatchModelByEveryPCIID(t *testing.T) {
	cat := catalog.Default()
	for _, m := range cat.Models() {
		if m.PCIDeviceID == 0 {
			continue
		}
		if got := matchModel(cat, m.PCIDeviceID, ""); got == nil || got.Name != m.Name {
			t.Errorf("PCI id %#04x matched %v, want %s", m.PCIDeviceID, got, m.Name)
		}
	}
}
