package fleet

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
)

func part(id, host string, gpu, i, parts int, mode string) *Placement {
	return &Placement{ID: id, HostID: host, CPUMilli: 1000, MemoryMiB: 1024,
		Devices: []Device{{GPU: gpu, Kind: Partition, Part: i, Parts: parts, Partition: mode}}}
}

func vf(id, host string, gpu, i, vfs int) *Placement {
	return &Placement{ID: id, HostID: host, CPUMilli: 1000, MemoryMiB: 1024,
		Devices: []Device{{GPU: gpu, Kind: VF, Part: i, Parts: vfs}}}
}

// A GPU's AMD mode is the operator's, checked against the model's table
// when the host joins; a bad one is a *catalog.ModeError and no host.
func TestAddHostAMDModes(t *testing.T) {
	cases := []struct {
		desc              string
		model, part, mem  string
		vfs               int
		wantPart, wantMem string
		wantParts         int
		field             string
	}{
		{"default is SPX/NPS1", "MI300X", "", "", 0, "SPX", "NPS1", 1, ""},
		{"cpx", "MI300X", "cpx", "", 0, "CPX", "NPS1", 8, ""},
		{"cpx nps4", "MI300X", "CPX", "NPS4", 0, "CPX", "NPS4", 8, ""},
		{"dpx", "MI325X", "DPX", "NPS1", 0, "DPX", "NPS1", 2, ""},
		{"8 vfs", "MI300X", "CPX", "NPS1", 8, "CPX", "NPS1", 8, ""},
		{"1 vf", "MI300X", "", "", 1, "SPX", "NPS1", 1, ""},
		{"qpx nps4", "MI300X", "QPX", "NPS4", 0, "", "", 0, "memory_partition"},
		{"tpx", "MI300X", "TPX", "", 0, "", "", 0, "partition"},
		{"8 vfs on MI325X", "MI325X", "CPX", "", 8, "", "", 0, "vfs"},
		{"partition on H100", "H100", "CPX", "", 0, "", "", 0, "partition"},
		{"H100 unchanged", "H100", "", "", 0, "", "", 0, ""},
	}
	for _, c := range cases {
		h := MockAMDHost("a", c.model, 2, c.part, c.mem, c.vfs)
		f := New()
		err := f.AddHost(h, catalog.Default())
		if c.field != "" {
			var me *catalog.ModeError
			if !errors.As(err, &me) || me.Field != c.field || f.Host("a") != nil {
				t.Errorf("%s: err %v, want a *catalog.ModeError on %s and no host", c.desc, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.desc, err)
		}
		g := f.Host("a").GPUs[1]
		if g.Partition != c.wantPart || g.MemoryPartition != c.wantMem || g.Parts != c.wantParts {
			t.Errorf("%s: gpu %+v", c.desc, g)
		}
	}
}

func TestApplyPartitions(t *testing.T) {
	f := MockFleet(MockAMDHost("cpx", "MI300X", 2, "CPX", "", 0), MockAMDHost("spx", "MI300X", 2, "", "", 0),
		MockAMDHost("vf", "MI300X", 1, "CPX", "NPS1", 8), MockHost("h100", "H100", 1))
	// Eight partitions of GPU 0, then the ninth does not fit.
	for i := range 8 {
		if err := f.Apply(part("p"+string(rune('0'+i)), "cpx", 0, i, 8, "CPX")); err != nil {
			t.Fatalf("partition %d: %v", i, err)
		}
	}
	g := &f.Host("cpx").GPUs[0]
	if g.PartsFree() != 0 || g.FreeMilli() != 0 || g.Empty() || g.FirstFreePart() != -1 {
		t.Errorf("full CPX gpu: %+v free %d milli %d", g, g.PartsFree(), g.FreeMilli())
	}
	if err := f.Apply(vf("v0", "vf", 0, 3, 8)); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		p    *Placement
		has  string
	}{
		{"taken", part("x", "cpx", 0, 3, 8, "CPX"), "device 3 is taken"},
		{"out of range", part("x", "cpx", 1, 8, 8, "CPX"), "no device 8 of 8"},
		{"wrong device count", part("x", "cpx", 1, 0, 4, "CPX"), "GPU of 4 parts"},
		{"wrong mode", part("x", "cpx", 1, 0, 4, "QPX"), "not in compute partition mode QPX"},
		{"partition of SPX gpu", part("x", "spx", 0, 0, 8, "CPX"), "not in compute partition mode CPX"},
		{"partition of a VF gpu", part("x", "vf", 0, 0, 8, "CPX"), "not in compute partition mode CPX"},
		{"partition of H100", part("x", "h100", 0, 0, 8, "CPX"), "not in compute partition mode CPX"},
		{"vf taken", vf("x", "vf", 0, 3, 8), "device 3 is taken"},
		{"vf of a CPX gpu without VFs", vf("x", "cpx", 1, 0, 8), "not exposed as 8 VFs"},
		{"whole CPX gpu", whole("x", "cpx", 1), "rented by its devices"},
		{"whole VF gpu", whole("x", "vf", 0), "not free"},
		{"share of CPX gpu", share("x", "cpx", 1, 100, 1), "cannot be shared"},
		{"metal on CPX host", &Placement{ID: "x", HostID: "cpx", Metal: true, Devices: []Device{{GPU: 1, Kind: Whole}}}, "needs an empty host"},
	}
	for _, c := range cases {
		before := dump(f)
		err := f.Apply(c.p)
		if err == nil || !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), c.has) {
			t.Errorf("%s: err = %v, want a conflict containing %q", c.name, err, c.has)
		}
		if dump(f) != before {
			t.Errorf("%s: failed Apply changed the fleet", c.name)
		}
	}
	// SPX GPUs of the same host stay whole-rentable.
	if err := f.Apply(whole("w", "spx", 0)); err != nil {
		t.Fatal(err)
	}
	// Release restores exactly.
	before := dump(f)
	if err := f.Apply(part("q", "cpx", 1, 5, 8, "CPX")); err != nil {
		t.Fatal(err)
	}
	if got := f.Host("cpx").GPUs[1].FreeMilli(); got != 875 {
		t.Errorf("one CPX partition taken: %d milli free, want 875", got)
	}
	if err := f.Release("q"); err != nil {
		t.Fatal(err)
	}
	if dump(f) != before {
		t.Error("release did not restore the fleet")
	}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	// Usage counts partitioned GPUs by their devices.
	var found bool
	for _, c := range f.GPUUsage() {
		if c.Model == "MI300X" && c.Mode == ModePartitioned && c.Allocated {
			found = true
			if c.GPUs != 2 || c.SlicesUsed != 9 || c.SlicesFree != 7 {
				t.Errorf("partitioned usage %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("no partitioned usage in %+v", f.GPUUsage())
	}
	// A clone is equal and independent.
	c := f.Clone()
	if err := c.Release("p0"); err != nil || c.Check() != nil || f.Host("cpx").GPUs[0].PartsFree() != 0 {
		t.Errorf("clone shares partition state: %v", err)
	}
}
