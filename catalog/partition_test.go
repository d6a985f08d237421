package catalog

import (
	"errors"
	"strings"
	"testing"
)

// The partition tables written out from AMD's documentation (docs/CATALOG.md
// cites the pages): logical GPUs per mode, XCDs and CUs each (38 CUs per
// XCD), nominal memory each, and the memory modes valid with each.
func TestAMDModels(t *testing.T) {
	type row struct {
		name          string
		devices, xcds int
		cus           int
		memGiB        int64
		nps           string
	}
	want := map[string]struct {
		memGiB int64
		pci    uint16
		rows   []row
		vfs    []int
	}{
		"MI300X": {192, 0x74A1, []row{
			{"SPX", 1, 8, 304, 192, "NPS1"},
			{"DPX", 2, 4, 152, 96, "NPS1"},
			{"QPX", 4, 2, 76, 48, "NPS1"},
			{"CPX", 8, 1, 38, 24, "NPS1,NPS4"},
		}, []int{1, 8}},
		"MI325X": {256, 0x74A5, []row{
			{"SPX", 1, 8, 304, 256, "NPS1"},
			{"DPX", 2, 4, 152, 128, "NPS1"},
			{"QPX", 4, 2, 76, 64, "NPS1"},
			{"CPX", 8, 1, 38, 32, "NPS1,NPS4"},
		}, []int{1}},
	}
	c := Default()
	for name, w := range want {
		m, err := c.Model(name)
		if err != nil {
			t.Fatal(err)
		}
		if m.VendorOf() != VendorAMD || m.MemoryMiB != w.memGiB*GiB || m.PCIDeviceID != w.pci ||
			m.XCDs != 8 || m.ComputeUnits != 304 || m.LinkGBps() != 896 || m.LinkName() != "xGMI" || m.SupportsMIG() {
			t.Errorf("%s = %+v", name, m)
		}
		if len(m.Partitions) != len(w.rows) {
			t.Fatalf("%s: %d partitions, want %d", name, len(m.Partitions), len(w.rows))
		}
		for i, r := range w.rows {
			p := m.Partitions[i]
			if p.Name != r.name || p.Devices != r.devices || p.XCDs != r.xcds || p.ComputeUnits != r.cus ||
				p.MemoryMiB != r.memGiB*GiB || strings.Join(p.MemoryPartitions, ",") != r.nps {
				t.Errorf("%s partition %d = %+v, want %+v", name, i, p, r)
			}
		}
		if got := m.VFCounts(); len(got) != len(w.vfs) || got[0] != w.vfs[0] || got[len(got)-1] != w.vfs[len(w.vfs)-1] {
			t.Errorf("%s VF counts %v, want %v", name, got, w.vfs)
		}
	}
	h, _ := c.Model("H100")
	if h.VendorOf() != VendorNVIDIA || h.LinkName() != "NVLink" || h.LinkGBps() != 900 || h.SupportsPartitions() {
		t.Errorf("H100 = vendor %s link %s %d", h.VendorOf(), h.LinkName(), h.LinkGBps())
	}
}

func TestResolveMode(t *testing.T) {
	c := Default()
	mi, _ := c.Model("MI300X")
	h100, _ := c.Model("H100")
	cases := []struct {
		desc  string
		model *Model
		in    GPUMode
		want  GPUMode
		slots int
		field string // "" = valid
	}{
		{"zero is SPX/NPS1", mi, GPUMode{}, GPUMode{Partition: "SPX", MemoryPartition: "NPS1"}, 1, ""},
		{"CPX defaults to NPS1", mi, GPUMode{Partition: "cpx"}, GPUMode{Partition: "CPX", MemoryPartition: "NPS1"}, 8, ""},
		{"CPX with NPS4", mi, GPUMode{Partition: "CPX", MemoryPartition: "nps4"}, GPUMode{Partition: "CPX", MemoryPartition: "NPS4"}, 8, ""},
		{"DPX with NPS1", mi, GPUMode{Partition: "DPX", MemoryPartition: "NPS1"}, GPUMode{Partition: "DPX", MemoryPartition: "NPS1"}, 2, ""},
		{"QPX", mi, GPUMode{Partition: "QPX"}, GPUMode{Partition: "QPX", MemoryPartition: "NPS1"}, 4, ""},
		{"8 VFs in CPX/NPS1", mi, GPUMode{Partition: "CPX", VFs: 8}, GPUMode{Partition: "CPX", MemoryPartition: "NPS1", VFs: 8}, 8, ""},
		{"1 VF in SPX", mi, GPUMode{VFs: 1}, GPUMode{Partition: "SPX", MemoryPartition: "NPS1", VFs: 1}, 1, ""},
		{"DPX with NPS4", mi, GPUMode{Partition: "DPX", MemoryPartition: "NPS4"}, GPUMode{}, 0, "memory_partition"},
		{"QPX with NPS4", mi, GPUMode{Partition: "QPX", MemoryPartition: "NPS4"}, GPUMode{}, 0, "memory_partition"},
		{"SPX with NPS4", mi, GPUMode{Partition: "SPX", MemoryPartition: "NPS4"}, GPUMode{}, 0, "memory_partition"},
		{"unknown compute mode", mi, GPUMode{Partition: "TPX"}, GPUMode{}, 0, "partition"},
		{"unknown memory mode", mi, GPUMode{MemoryPartition: "NPS2"}, GPUMode{}, 0, "memory_partition"},
		{"8 VFs in SPX", mi, GPUMode{VFs: 8}, GPUMode{}, 0, "vfs"},
		{"8 VFs in CPX/NPS4", mi, GPUMode{Partition: "CPX", MemoryPartition: "NPS4", VFs: 8}, GPUMode{}, 0, "vfs"},
		{"4 VFs", mi, GPUMode{Partition: "QPX", VFs: 4}, GPUMode{}, 0, "vfs"},
		{"negative VFs", mi, GPUMode{VFs: -1}, GPUMode{}, 0, "vfs"},
		{"NVIDIA zero", h100, GPUMode{}, GPUMode{}, 1, ""},
		{"NVIDIA SPX", h100, GPUMode{Partition: "SPX"}, GPUMode{}, 1, ""},
		{"NVIDIA CPX", h100, GPUMode{Partition: "CPX"}, GPUMode{}, 0, "partition"},
		{"NVIDIA VFs", h100, GPUMode{VFs: 8}, GPUMode{}, 0, "partition"},
	}
	for _, tc := range cases {
		got, cp, err := tc.model.ResolveMode(tc.in)
		if tc.field != "" {
			var me *ModeError
			if !errors.As(err, &me) || me.Field != tc.field {
				t.Errorf("%s: err %v, want a *ModeError on %s", tc.desc, err, tc.field)
			}
			continue
		}
		if err != nil || got != tc.want || got.Slots(cp) != tc.slots {
			t.Errorf("%s: %+v (%d slots), %v; want %+v (%d slots)", tc.desc, got, got.Slots(cp), err, tc.want, tc.slots)
		}
	}
}

func TestAMDOfferings(t *testing.T) {
	c := Default()
	want := map[string]struct {
		mode  Mode
		gpus  int
		part  string
		vfs   int
		vcpus int
	}{
		"mi300x.1x":    {ModeGPU, 1, "", 0, 24},
		"mi300x.8x":    {ModeGPU, 8, "", 0, 192},
		"mi300x.metal": {ModeMetal, 8, "", 0, 192},
		"mi300x.dpx":   {ModePartition, 0, "DPX", 0, 12},
		"mi300x.qpx":   {ModePartition, 0, "QPX", 0, 6},
		"mi300x.cpx":   {ModePartition, 0, "CPX", 0, 3},
		"mi300x.vf8":   {ModeVF, 0, "", 8, 3},
		"mi325x.2x":    {ModeGPU, 2, "", 0, 48},
		"mi325x.metal": {ModeMetal, 8, "", 0, 192},
		"mi325x.cpx":   {ModePartition, 0, "CPX", 0, 3},
	}
	for name, w := range want {
		o, err := c.Offering(name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if o.Mode != w.mode || o.GPUs != w.gpus || o.Partition != w.part || o.VFs != w.vfs || o.VCPUs != w.vcpus {
			t.Errorf("%s = %+v", name, o)
		}
	}
}

func TestPartitionOfferingValidation(t *testing.T) {
	c := Default()
	cases := []struct {
		desc  string
		o     Offering
		field string
	}{
		{"cpx", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "CPX"}, ""},
		{"cpx nps4", Offering{Name: "x", Mode: ModePartition, Model: "mi300x", Partition: "CPX", MemoryPartition: "NPS4"}, ""},
		{"vf8", Offering{Name: "x", Mode: ModeVF, Model: "MI300X", VFs: 8}, ""},
		{"no partition", Offering{Name: "x", Mode: ModePartition, Model: "MI300X"}, "partition"},
		{"lower case", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "cpx"}, "partition"},
		{"spx", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "SPX"}, "partition"},
		{"unknown", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "TPX"}, "partition"},
		{"qpx nps4", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "QPX", MemoryPartition: "NPS4"}, "memory_partition"},
		{"nvidia model", Offering{Name: "x", Mode: ModePartition, Model: "H100", Partition: "CPX"}, "model"},
		{"no model", Offering{Name: "x", Mode: ModePartition, Partition: "CPX"}, "model"},
		{"gpus set", Offering{Name: "x", Mode: ModePartition, Model: "MI300X", Partition: "CPX", GPUs: 1}, "gpus"},
		{"partition in gpu mode", Offering{Name: "x", Mode: ModeGPU, Model: "MI300X", GPUs: 1, Partition: "CPX"}, "partition"},
		{"memory partition in gpu mode", Offering{Name: "x", Mode: ModeGPU, Model: "MI300X", GPUs: 1, MemoryPartition: "NPS1"}, "memory_partition"},
		{"vfs in gpu mode", Offering{Name: "x", Mode: ModeGPU, Model: "MI300X", GPUs: 1, VFs: 8}, "vfs"},
		{"vf count", Offering{Name: "x", Mode: ModeVF, Model: "MI325X", VFs: 8}, "vfs"},
		{"vf zero", Offering{Name: "x", Mode: ModeVF, Model: "MI300X"}, "vfs"},
		{"vf nvidia", Offering{Name: "x", Mode: ModeVF, Model: "H100", VFs: 1}, "model"},
	}
	for _, tc := range cases {
		err := c.ValidateOffering(&tc.o)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.desc, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: err %v, want a *ValidationError on %s", tc.desc, err, tc.field)
		}
	}
}

func TestPartitionModelValidation(t *testing.T) {
	good := func() Model {
		c := Default()
		m, _ := c.Model("MI300X")
		return *m.clone()
	}
	cases := []struct {
		desc   string
		change func(*Model)
		field  string
	}{
		{"valid", func(*Model) {}, ""},
		{"no SPX", func(m *Model) { m.Partitions = m.Partitions[1:] }, "partitions"},
		{"bad devices", func(m *Model) { m.Partitions[1].Devices = 3 }, "partitions[1].devices"},
		{"xcds do not add up", func(m *Model) { m.Partitions[1].XCDs = 3 }, "partitions[1].xcds"},
		{"cus do not add up", func(m *Model) { m.Partitions[3].ComputeUnits = 40 }, "partitions[3].compute_units"},
		{"memory too big", func(m *Model) { m.Partitions[3].MemoryMiB = 30 * GiB }, "partitions[3].memory_mib"},
		{"unknown nps", func(m *Model) { m.Partitions[3].MemoryPartitions = []string{"NPS8"} }, "partitions[3].memory_partitions"},
		{"duplicate name", func(m *Model) { m.Partitions[2].Name = "dpx" }, "partitions[2].name"},
		{"vf not a device count", func(m *Model) { m.VFConfigs[1].VFs = 4 }, "vf_configs[1].vfs"},
		{"vf unknown partition", func(m *Model) { m.VFConfigs[1].Partition = "TPX" }, "vf_configs[1].partition"},
		{"both links", func(m *Model) { m.NVLinkGBps = 900 }, "xgmi_gbps"},
		{"unknown vendor", func(m *Model) { m.Vendor = "intel" }, "vendor"},
		{"nps without partitions", func(m *Model) { m.Partitions = nil; m.VFConfigs = nil }, "partitions"},
	}
	for _, tc := range cases {
		m := good()
		tc.change(&m)
		_, err := New([]Model{m}, nil)
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.desc, err)
			}
			continue
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != tc.field {
			t.Errorf("%s: err %v, want a *ValidationError on %s", tc.desc, err, tc.field)
		}
	}
}
