package sim

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/agent/gpu"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

func TestAMDSpec(t *testing.T) {
	cat := catalog.Default()
	for _, c := range []struct {
		desc   string
		gpus   GPUSpec
		want   string // "partition/memory vfs", or the error's text
		driver string
		bad    bool
	}{
		{"default SPX", GPUSpec{Model: "MI300X", Count: 8}, "SPX/NPS1 0", DefaultAMDDriver, false},
		{"cpx nps4", GPUSpec{Model: "mi300x", Count: 8, Partition: "cpx", MemoryPartition: "nps4"}, "CPX/NPS4 0", DefaultAMDDriver, false},
		{"8 vfs", GPUSpec{Model: "MI300X", Count: 8, Partition: "CPX", VFs: 8}, "CPX/NPS1 8", DefaultAMDDriver, false},
		{"qpx nps4", GPUSpec{Model: "MI300X", Count: 8, Partition: "QPX", MemoryPartition: "NPS4"}, "gpus.memory_partition: NPS4 is not valid with QPX", "", true},
		{"8 vfs on MI325X", GPUSpec{Model: "MI325X", Count: 8, Partition: "CPX", VFs: 8}, "gpus.vfs:", "", true},
		{"cpx on H100", GPUSpec{Model: "H100", Count: 8, Partition: "CPX"}, "gpus.partition:", "", true},
		{"H100 unchanged", GPUSpec{Model: "H100", Count: 8}, "/ 0", DefaultDriver, false},
	} {
		r, err := Spec{ID: "h", GPUs: c.gpus}.Resolve(cat)
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an error containing %q", c.desc, err, c.want)
			}
			continue
		}
		got := r.GPUs.Partition + "/" + r.GPUs.MemoryPartition + " " + string(rune('0'+r.GPUs.VFs))
		if err != nil || got != c.want || r.Driver != c.driver || (c.driver == DefaultAMDDriver) != (r.CUDA == "") {
			t.Errorf("%s: %q driver %s cuda %q, %v; want %q", c.desc, got, r.Driver, r.CUDA, err, c.want)
		}
	}
}

// An AMD host reports its GPUs' modes, names each partition's device by a
// UUID of its own and its render node, and refuses devices its mode does
// not have.
func TestAMDHost(t *testing.T) {
	ctx := t.Context()
	h, err := New(Spec{ID: "amd", GPUs: GPUSpec{Model: "MI300X", Count: 2, NVLinkIslands: Islands{2}, Partition: "CPX", MemoryPartition: "NPS4"}})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := h.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := inv.Host.GPUs[1]
	if g.Partition != "CPX" || g.MemoryPartition != "NPS4" || g.Island != 0 || inv.CUDA != "" || inv.Driver != DefaultAMDDriver {
		t.Errorf("inventory gpu %+v, driver %s cuda %q", g, inv.Driver, inv.CUDA)
	}
	// The server's fleet takes the inventory as it is.
	if err := fleet.New().AddHost(&inv.Host, catalog.Default()); err != nil {
		t.Errorf("the inventory does not join a fleet: %v", err)
	}
	part := func(gpuIndex, p int) *fleet.Placement {
		return &fleet.Placement{ID: "p", HostID: "amd", Devices: []fleet.Device{{GPU: gpuIndex, Kind: fleet.Partition, Part: p, Parts: 8, Partition: "CPX"}}}
	}
	for _, c := range []struct {
		p     *fleet.Placement
		minor int
		err   error
	}{
		{part(0, 0), 128, nil},
		{part(1, 7), 143, nil},
		{part(1, 8), 0, gpu.ErrNotFound},
		{&fleet.Placement{ID: "p", Devices: []fleet.Device{{GPU: 0, Kind: fleet.Partition, Part: 0, Parts: 4, Partition: "QPX"}}}, 0, gpu.ErrInvalid},
		{&fleet.Placement{ID: "p", Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}, 0, gpu.ErrInvalid},
		{&fleet.Placement{ID: "p", Devices: []fleet.Device{{GPU: 0, Kind: fleet.VF, Part: 0, Parts: 8}}}, 0, gpu.ErrInvalid},
	} {
		minors, err := h.RenderMinors(ctx, c.p)
		uuids, derr := h.Devices(ctx, c.p)
		if c.err != nil {
			if !errors.Is(err, c.err) || !errors.Is(derr, c.err) {
				t.Errorf("%+v: %v / %v, want %v", c.p.Devices, err, derr, c.err)
			}
			continue
		}
		d := c.p.Devices[0]
		if err != nil || derr != nil || !slices.Equal(minors, []int{c.minor}) || uuids[0] != PartUUID("amd", d.GPU, d.Part) {
			t.Errorf("%+v: minors %v uuids %v, %v %v", c.p.Devices, minors, uuids, err, derr)
		}
	}
	// Each partition has its own load.
	u := PartUUID("amd", 1, 2)
	if err := h.SetLoad(u, 0.5); err != nil {
		t.Fatal(err)
	}
	if v, err := h.Utilization(ctx, []string{u, PartUUID("amd", 1, 3)}); err != nil || v != 0.25 {
		t.Errorf("utilization %v, %v", v, err)
	}
	// An SPX host's whole GPUs have one render node each; an NVIDIA host
	// has none.
	spx, _ := New(Spec{ID: "spx", GPUs: GPUSpec{Model: "MI325X", Count: 4}})
	if m, err := spx.RenderMinors(ctx, &fleet.Placement{Devices: []fleet.Device{{GPU: 2, Kind: fleet.Whole}, {GPU: 3, Kind: fleet.Whole}}}); err != nil || !slices.Equal(m, []int{130, 131}) {
		t.Errorf("SPX render minors %v, %v", m, err)
	}
	nv, _ := New(Spec{ID: "nv", GPUs: GPUSpec{Model: "H100", Count: 1}})
	if m, err := nv.RenderMinors(ctx, &fleet.Placement{Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}}}); err != nil || m != nil {
		t.Errorf("NVIDIA render minors %v, %v", m, err)
	}
}

// An AMD host's nodes are /dev/kfd and one render node per logical GPU,
// no NVIDIA node.
func TestMakeAMDDeviceNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("making device nodes needs root, which CI has")
		}
		t.Skip("making device nodes needs root")
	}
	h, err := New(Spec{ID: "h", GPUs: GPUSpec{Model: "MI300X", Count: 2, Partition: "CPX"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	for range 2 { // idempotent
		if err := h.MakeDeviceNodes(dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, ok := nodeNumbers(filepath.Join(dir, "kfd")); !ok {
		t.Error("no kfd node")
	}
	for m := 128; m < 144; m++ {
		if ma, mi, ok := nodeNumbers(filepath.Join(dir, "dri", "renderD"+strconv.Itoa(m))); !ok || ma != DRMMajor || mi != uint32(m) {
			t.Errorf("renderD%d: %d:%d %v", m, ma, mi, ok)
		}
	}
	for _, n := range []string{"dri/renderD144", "nvidia0", "nvidiactl"} {
		if _, err := os.Lstat(filepath.Join(dir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want none", n, err)
		}
	}
}
