package controller

import (
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// An AMD offering becomes a request for one device of a GPU in its mode,
// and the supply counts only GPUs its operator put in that mode.
func TestAMDRequestAndSupply(t *testing.T) {
	cat := catalog.Default()
	for _, c := range []struct {
		offering  string
		mode      catalog.Mode
		partition string
		vfs       int
	}{
		{"mi300x.cpx", catalog.ModePartition, "CPX", 0},
		{"mi300x.dpx", catalog.ModePartition, "DPX", 0},
		{"mi300x.vf8", catalog.ModeVF, "", 8},
		{"mi300x.1x", catalog.ModeGPU, "", 0},
	} {
		o, err := cat.Offering(c.offering)
		if err != nil {
			t.Fatal(err)
		}
		r, err := RequestFor(&cloud.Instance{ID: "i", TenantID: "t"}, o)
		if err != nil || r.Mode != c.mode || r.Partition != c.partition || r.VFs != c.vfs || r.Models[0] != "MI300X" {
			t.Errorf("%s: %+v, %v", c.offering, r, err)
		}
		if err := r.Validate(cat); err != nil {
			t.Errorf("%s: %v", c.offering, err)
		}
	}

	cpx := fleet.MockAMDHost("cpx", "MI300X", 2, "CPX", "", 0)
	cpx.CPUMilli, cpx.MemoryMiB = 1<<40, 1<<40
	f := fleet.MockFleet(cpx)
	if err := f.Apply(&fleet.Placement{ID: "p", HostID: "cpx", Devices: []fleet.Device{{GPU: 1, Kind: fleet.Partition, Part: 2, Parts: 8, Partition: "CPX"}}}); err != nil {
		t.Fatal(err)
	}
	h := f.Host("cpx")
	for _, c := range []struct {
		offering       string
		capacity, free int
	}{
		{"mi300x.cpx", 16, 15},
		{"mi300x.dpx", 0, 0},
		{"mi300x.vf8", 0, 0},
		{"mi300x.1x", 0, 0},
	} {
		o, _ := cat.Offering(c.offering)
		if capacity, free := hostSupply(h, o, cat); capacity != c.capacity || free != c.free {
			t.Errorf("%s: supply %d/%d, want %d/%d", c.offering, free, capacity, c.free, c.capacity)
		}
	}
}
