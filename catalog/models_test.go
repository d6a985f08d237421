package catalog

import (
	"reflect"
	"strings"
	"testing"
)

// migRow is one expected row of a MIG profile table, written out literally
// from NVIDIA's documentation rather than derived from the code under test.
type migRow struct {
	id, compute, memSlots, maxPerGPU int
	name                             string
	starts                           []int
	memMiB                           int64
	media                            bool
}

var (
	wantA100x40 = []migRow{
		{19, 1, 1, 7, "1g.5gb", []int{0, 1, 2, 3, 4, 5, 6}, 5120, false},
		{20, 1, 1, 1, "1g.5gb+me", []int{0, 1, 2, 3, 4, 5, 6}, 5120, true},
		{15, 1, 2, 4, "1g.10gb", []int{0, 2, 4, 6}, 10240, false},
		{14, 2, 2, 3, "2g.10gb", []int{0, 2, 4}, 10240, false},
		{9, 3, 4, 2, "3g.20gb", []int{0, 4}, 20480, false},
		{5, 4, 4, 1, "4g.20gb", []int{0}, 20480, false},
		{0, 7, 8, 1, "7g.40gb", []int{0}, 40960, false},
	}
	wantA100x80 = []migRow{
		{19, 1, 1, 7, "1g.10gb", []int{0, 1, 2, 3, 4, 5, 6}, 10240, false},
		{20, 1, 1, 1, "1g.10gb+me", []int{0, 1, 2, 3, 4, 5, 6}, 10240, true},
		{15, 1, 2, 4, "1g.20gb", []int{0, 2, 4, 6}, 20480, false},
		{14, 2, 2, 3, "2g.20gb", []int{0, 2, 4}, 20480, false},
		{9, 3, 4, 2, "3g.40gb", []int{0, 4}, 40960, false},
		{5, 4, 4, 1, "4g.40gb", []int{0}, 40960, false},
		{0, 7, 8, 1, "7g.80gb", []int{0}, 81920, false},
	}
	wantH100x80 = []migRow{
		{19, 1, 1, 7, "1g.10gb", []int{0, 1, 2, 3, 4, 5, 6}, 10240, false},
		{20, 1, 1, 1, "1g.10gb+me", []int{0, 1, 2, 3, 4, 5, 6}, 10240, true},
		{15, 1, 2, 4, "1g.20gb", []int{0, 2, 4, 6}, 20480, false},
		{14, 2, 2, 3, "2g.20gb", []int{0, 2, 4}, 20480, false},
		{9, 3, 4, 2, "3g.40gb", []int{0, 4}, 40960, false},
		{5, 4, 4, 1, "4g.40gb", []int{0}, 40960, false},
		{0, 7, 8, 1, "7g.80gb", []int{0}, 81920, false},
	}
	wantH200 = []migRow{
		{19, 1, 1, 7, "1g.18gb", []int{0, 1, 2, 3, 4, 5, 6}, 18432, false},
		{20, 1, 1, 1, "1g.18gb+me", []int{0, 1, 2, 3, 4, 5, 6}, 18432, true},
		{15, 1, 2, 4, "1g.35gb", []int{0, 2, 4, 6}, 35840, false},
		{14, 2, 2, 3, "2g.35gb", []int{0, 2, 4}, 35840, false},
		{9, 3, 4, 2, "3g.71gb", []int{0, 4}, 72704, false},
		{5, 4, 4, 1, "4g.71gb", []int{0}, 72704, false},
		{0, 7, 8, 1, "7g.141gb", []int{0}, 144384, false},
	}
)

func TestMIGTables(t *testing.T) {
	c := Default()
	tables := map[string][]migRow{
		"A100-40GB-SXM":  wantA100x40,
		"A100-40GB-PCIE": wantA100x40,
		"A100-80GB-SXM":  wantA100x80,
		"A100-80GB-PCIE": wantA100x80,
		"H100-80GB-SXM":  wantH100x80,
		"H100-80GB-PCIE": wantH100x80,
		"H200-141GB":     wantH200,
		"H200-NVL":       wantH200,
	}
	for model, want := range tables {
		m, err := c.Model(model)
		if err != nil {
			t.Fatalf("Model(%q): %v", model, err)
		}
		if len(m.MIGProfiles) != len(want) {
			t.Fatalf("%s: %d MIG profiles, want %d", model, len(m.MIGProfiles), len(want))
		}
		for i, w := range want {
			got := m.MIGProfiles[i]
			exp := MIGProfile{ID: w.id, Name: w.name, ComputeSlices: w.compute, MemorySlots: w.memSlots,
				MaxPerGPU: w.maxPerGPU, Starts: w.starts, MemoryMiB: w.memMiB, MediaExtensions: w.media}
			if !reflect.DeepEqual(got, exp) {
				t.Errorf("%s row %d:\n got %+v\nwant %+v", model, i, got, exp)
			}
			if p := m.ProfileByID(w.id); p == nil || p.Name != w.name {
				t.Errorf("%s: ProfileByID(%d) = %v, want %s", model, w.id, p, w.name)
			}
			if p := m.Profile(w.name); p == nil || p.ID != w.id {
				t.Errorf("%s: Profile(%q) = %v, want id %d", model, w.name, p, w.id)
			}
		}
	}
	for _, m := range c.Models() {
		if _, ok := tables[m.Name]; !ok && m.SupportsMIG() {
			t.Errorf("%s has MIG profiles but no MIG table is expected", m.Name)
		}
	}
}

func TestModelSpecs(t *testing.T) {
	want := []struct {
		name   string
		pci    uint16
		memMiB int64
		nvlink int
	}{
		{"A100-40GB-SXM", 0x20B0, 40960, 600},
		{"A100-40GB-PCIE", 0x20F1, 40960, 0},
		{"A100-80GB-SXM", 0x20B2, 81920, 600},
		{"A100-80GB-PCIE", 0x20B5, 81920, 0},
		{"H100-80GB-SXM", 0x2330, 81920, 900},
		{"H100-80GB-PCIE", 0x2331, 81920, 0},
		{"H200-141GB", 0x2335, 144384, 900},
		{"H200-NVL", 0x233B, 144384, 900},
		{"L40S", 0x26B9, 49152, 0},
		{"L4", 0x27B8, 24576, 0},
		{"A10", 0x2236, 24576, 0},
		{"T4", 0x1EB8, 16384, 0},
		{"V100-16GB", 0x1DB1, 16384, 300},
		{"V100-32GB", 0x1DB5, 32768, 300},
		{"P100-16GB", 0x15F8, 16384, 0},
		{"RTX-6000-ADA", 0x26B1, 49152, 0},
		{"G1", 0, 32768, 0},
		{"G2", 0, 32768, 0},
		{"G3", 0, 81920, 0},
		// AMD's have xGMI instead (TestAMDModels), so no NVLink.
		{"MI300X", 0x74A1, 196608, 0},
		{"MI325X", 0x74A5, 262144, 0},
	}
	c := Default()
	if got := len(c.Models()); got != len(want) {
		t.Errorf("Default has %d models, want %d", got, len(want))
	}
	for _, w := range want {
		m, err := c.Model(w.name)
		if err != nil {
			t.Errorf("Model(%q): %v", w.name, err)
			continue
		}
		if m.Name != w.name || m.PCIDeviceID != w.pci || m.MemoryMiB != w.memMiB || m.NVLinkGBps != w.nvlink {
			t.Errorf("%s = {name %s pci %#x mem %d nvlink %d}, want {pci %#x mem %d nvlink %d}",
				w.name, m.Name, m.PCIDeviceID, m.MemoryMiB, m.NVLinkGBps, w.pci, w.memMiB, w.nvlink)
		}
	}
}

func TestModelAliases(t *testing.T) {
	cases := map[string]string{
		"V100M16":        "V100-16GB",
		"v100m16":        "V100-16GB",
		"V100M32":        "V100-32GB",
		"P100":           "P100-16GB",
		"p100":           "P100-16GB",
		"T4":             "T4",
		"t4":             "T4",
		"A10":            "A10",
		"G1":             "G1",
		"g3":             "G3",
		"H100":           "H100-80GB-SXM",
		"h100":           "H100-80GB-SXM",
		"H100-80GB":      "H100-80GB-SXM",
		"h100-80gb-sxm":  "H100-80GB-SXM",
		"A100":           "A100-80GB-SXM",
		"A100-80GB":      "A100-80GB-SXM",
		"A100-40GB":      "A100-40GB-SXM",
		"a100-40gb-pcie": "A100-40GB-PCIE",
		"H200":           "H200-141GB",
		"h200-nvl":       "H200-NVL",
		"V100-16GB":      "V100-16GB",
		"rtx-6000-ada":   "RTX-6000-ADA",
	}
	c := Default()
	for in, want := range cases {
		got, err := c.CanonicalModel(in)
		if err != nil || got != want {
			t.Errorf("CanonicalModel(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"V100", "A100-40", "H100 ", ""} {
		if _, err := c.CanonicalModel(bad); !IsNotFound(err) {
			t.Errorf("CanonicalModel(%q) error = %v, want not found", bad, err)
		}
	}
}

func TestResolveProfile(t *testing.T) {
	c := Default()
	cases := []struct {
		model, in string
		want      string // profile name; empty when an error is expected
		errHas    []string
	}{
		{"H100", "3g.40gb", "3g.40gb", nil},
		{"H100", "3G.40GB", "3g.40gb", nil},
		{"H100", "1g.10gb+me", "1g.10gb+me", nil},
		{"H100", "9", "3g.40gb", nil},
		{"H100", "0", "7g.80gb", nil},
		{"H100", "20", "1g.10gb+me", nil},
		{"H100", "3g", "3g.40gb", nil},
		{"H100", "2G", "2g.20gb", nil},
		{"H100", "7g", "7g.80gb", nil},
		{"A100-40GB", "2g", "2g.10gb", nil},
		{"A100-40GB", "1g.10gb", "1g.10gb", nil},
		{"A100-40GB", "15", "1g.10gb", nil},
		{"A100-40GB", "4g", "4g.20gb", nil},
		{"H200", "3g", "3g.71gb", nil},
		{"H200-NVL", "19", "1g.18gb", nil},
		{"H100", "1g", "", []string{"ambiguous", `"H100-80GB-SXM"`, "1g.10gb, 1g.20gb"}},
		{"A100-40GB", "1g", "", []string{"ambiguous", `"A100-40GB-SXM"`, "1g.5gb, 1g.10gb"}},
		{"A100-80GB", "1g", "", []string{"ambiguous", "1g.10gb, 1g.20gb"}},
		{"H200", "1g", "", []string{"ambiguous", "1g.18gb, 1g.35gb"}},
		{"H100", "5g", "", []string{`unknown MIG profile "5g"`, `gpu model "H100-80GB-SXM"`, "3g.40gb", "7g.80gb"}},
		{"H100", "3", "", []string{`unknown MIG profile "3"`}},
		{"H100", "+9", "", []string{"unknown MIG profile"}},
		{"H100", "3g.20gb", "", []string{"unknown MIG profile"}},
		{"H100", "", "", []string{"unknown MIG profile"}},
		{"L40S", "1g", "", []string{`gpu model "L40S" does not support MIG`}},
	}
	for _, tc := range cases {
		m, err := c.Model(tc.model)
		if err != nil {
			t.Fatal(err)
		}
		p, err := m.ResolveProfile(tc.in)
		if tc.want != "" {
			if err != nil || p == nil || p.Name != tc.want {
				t.Errorf("%s.ResolveProfile(%q) = %v, %v; want %s", tc.model, tc.in, p, err, tc.want)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s.ResolveProfile(%q) = %+v, want error", tc.model, tc.in, p)
			continue
		}
		for _, s := range tc.errHas {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s.ResolveProfile(%q) error %q lacks %q", tc.model, tc.in, err, s)
			}
		}
	}
}

func TestResolveProfileNotFoundIsNotFound(t *testing.T) {
	m, _ := Default().Model("H100")
	if _, err := m.ResolveProfile("5g"); !IsNotFound(err) {
		t.Errorf("unknown profile error %v is not a *NotFoundError", err)
	}
	if _, err := m.ResolveProfile("1g"); IsNotFound(err) {
		t.Errorf("ambiguous profile error %v should not be a *NotFoundError", err)
	}
}

// TestTablesNotShared guards against models sharing MIG slices: changing one
// model's table must not change another model's or another catalog's.
func TestTablesNotShared(t *testing.T) {
	c := Default()
	sxm, _ := c.Model("H100-80GB-SXM")
	pcie, _ := c.Model("H100-80GB-PCIE")
	sxm.MIGProfiles[0].Starts[0] = 99
	sxm.Aliases[0] = "broken"
	if pcie.MIGProfiles[0].Starts[0] != 0 {
		t.Error("H100 SXM and PCIe share a Starts slice")
	}
	fresh, _ := Default().Model("H100-80GB-SXM")
	if fresh.MIGProfiles[0].Starts[0] != 0 || fresh.Aliases[0] != "H100" {
		t.Error("modifying a model from Default() changed the next Default()")
	}
	if _, err := Default().Model("H100"); err != nil {
		t.Errorf("alias H100 lost after modifying an earlier copy: %v", err)
	}
}
