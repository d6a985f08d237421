package console

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// A host's drawing shows an AMD partition or VF as its slice of the GPU,
// and the GPU's mode in its title.
func TestGPUPiecesAMD(t *testing.T) {
	gpus := []fleet.GPU{{Index: 0, Model: "MI300X", Partition: "CPX", MemoryPartition: "NPS4", Parts: 8}, {Index: 1, Model: "MI300X", VFs: 8, Partition: "CPX", MemoryPartition: "NPS1", Parts: 8}}
	ins := []*cloud.Instance{
		{ID: "i-a", Offering: "mi300x.cpx", State: cloud.Running, Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 0, Kind: fleet.Partition, Part: 2, Parts: 8, Partition: "CPX"}}}},
		{ID: "i-b", Offering: "mi300x.vf8", State: cloud.Running, Placement: &fleet.Placement{Devices: []fleet.Device{{GPU: 1, Kind: fleet.VF, Part: 7, Parts: 8}}}},
	}
	pieces, _ := gpuPieces(gpus, ins)
	if p := pieces[0]; len(p) != 1 || p[0].x0 != 0.25 || p[0].x1 != 0.375 || !strings.Contains(p[0].label, "CPX partition 2 of 8") {
		t.Errorf("gpu 0 pieces %+v", p)
	}
	if p := pieces[1]; len(p) != 1 || p[0].x0 != 0.875 || p[0].x1 != 1 || !strings.Contains(p[0].label, "VF 7 of 8") {
		t.Errorf("gpu 1 pieces %+v", p)
	}
	var b strings.Builder
	writeGPU(&b, &gpus[0], 0, 0, pieces[0], "")
	if !strings.Contains(b.String(), "MI300X (CPX/NPS4)") {
		t.Errorf("GPU drawing %s", b.String())
	}
}
