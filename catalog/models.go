package catalog

import (
	"fmt"
	"strconv"
	"strings"
)

// GiB is one gibibyte in MiB, the unit every memory size in the catalog uses.
const GiB int64 = 1024

// migGeometry is one row of NVIDIA's MIG profile table. The geometry (compute
// slices, memory slots, instance limit and start slots) is the same on every
// MIG family we support; only the names and memory sizes differ by model.
type migGeometry struct {
	id            int
	computeSlices int
	memorySlots   int
	maxPerGPU     int
	starts        []int
	media         bool
}

// migRows lists the rows in the order nvidia-smi prints them, smallest first,
// so that error messages list profiles in a familiar order.
var migRows = [7]migGeometry{
	{id: 19, computeSlices: 1, memorySlots: 1, maxPerGPU: 7, starts: []int{0, 1, 2, 3, 4, 5, 6}},
	{id: 20, computeSlices: 1, memorySlots: 1, maxPerGPU: 1, starts: []int{0, 1, 2, 3, 4, 5, 6}, media: true},
	{id: 15, computeSlices: 1, memorySlots: 2, maxPerGPU: 4, starts: []int{0, 2, 4, 6}},
	{id: 14, computeSlices: 2, memorySlots: 2, maxPerGPU: 3, starts: []int{0, 2, 4}},
	{id: 9, computeSlices: 3, memorySlots: 4, maxPerGPU: 2, starts: []int{0, 4}},
	{id: 5, computeSlices: 4, memorySlots: 4, maxPerGPU: 1, starts: []int{0}},
	{id: 0, computeSlices: 7, memorySlots: 8, maxPerGPU: 1, starts: []int{0}},
}

// migName is a family-specific profile name with the nominal size in GB that
// the name carries; the catalog prices and places by that nominal size.
type migName struct {
	name string
	gb   int64
}

// The per-family names, in migRows order. Both A100-40GB variants share the
// first table, both A100-80GB variants and both H100 variants the next two,
// and the two H200 variants the last.
var (
	migNamesA100x40 = [7]migName{{"1g.5gb", 5}, {"1g.5gb+me", 5}, {"1g.10gb", 10}, {"2g.10gb", 10}, {"3g.20gb", 20}, {"4g.20gb", 20}, {"7g.40gb", 40}}
	migNamesA100x80 = [7]migName{{"1g.10gb", 10}, {"1g.10gb+me", 10}, {"1g.20gb", 20}, {"2g.20gb", 20}, {"3g.40gb", 40}, {"4g.40gb", 40}, {"7g.80gb", 80}}
	migNamesH100x80 = [7]migName{{"1g.10gb", 10}, {"1g.10gb+me", 10}, {"1g.20gb", 20}, {"2g.20gb", 20}, {"3g.40gb", 40}, {"4g.40gb", 40}, {"7g.80gb", 80}}
	migNamesH200    = [7]migName{{"1g.18gb", 18}, {"1g.18gb+me", 18}, {"1g.35gb", 35}, {"2g.35gb", 35}, {"3g.71gb", 71}, {"4g.71gb", 71}, {"7g.141gb", 141}}
)

// migTable builds a fresh profile table, so that no two models (and no two
// catalogs) share a Starts slice that one of them could modify.
func migTable(names [7]migName) []MIGProfile {
	out := make([]MIGProfile, len(migRows))
	for i, row := range migRows {
		out[i] = MIGProfile{
			ID:              row.id,
			Name:            names[i].name,
			ComputeSlices:   row.computeSlices,
			MemorySlots:     row.memorySlots,
			MaxPerGPU:       row.maxPerGPU,
			Starts:          append([]int(nil), row.starts...),
			MemoryMiB:       names[i].gb * GiB,
			MediaExtensions: row.media,
		}
	}
	return out
}

// builtinModels returns a fresh copy of the built-in GPU models. Memory sizes
// are what the driver reports rounded to the marketing size (141 GB on H200
// is taken as 141 GiB), PCI device ids are NVIDIA's (vendor 0x10DE), and
// NVLink is the per-GPU bandwidth class of the SXM/NVL parts; PCIe parts are
// 0 because their NVLink bridge is optional and placement cannot rely on it.
func builtinModels() []Model {
	return []Model{
		{Name: "A100-40GB-SXM", Aliases: []string{"A100-40GB", "A100-SXM4-40GB"}, MemoryMiB: 40 * GiB, NVLinkGBps: 600, PCIDeviceID: 0x20B0, MIGProfiles: migTable(migNamesA100x40)},
		{Name: "A100-40GB-PCIE", Aliases: []string{"A100-PCIE-40GB"}, MemoryMiB: 40 * GiB, NVLinkGBps: 0, PCIDeviceID: 0x20F1, MIGProfiles: migTable(migNamesA100x40)},
		{Name: "A100-80GB-SXM", Aliases: []string{"A100", "A100-80GB", "A100-SXM4-80GB"}, MemoryMiB: 80 * GiB, NVLinkGBps: 600, PCIDeviceID: 0x20B2, MIGProfiles: migTable(migNamesA100x80)},
		{Name: "A100-80GB-PCIE", Aliases: []string{"A100-PCIE-80GB"}, MemoryMiB: 80 * GiB, NVLinkGBps: 0, PCIDeviceID: 0x20B5, MIGProfiles: migTable(migNamesA100x80)},
		{Name: "H100-80GB-SXM", Aliases: []string{"H100", "H100-80GB", "H100-SXM5-80GB"}, MemoryMiB: 80 * GiB, NVLinkGBps: 900, PCIDeviceID: 0x2330, MIGProfiles: migTable(migNamesH100x80)},
		{Name: "H100-80GB-PCIE", Aliases: []string{"H100-PCIE"}, MemoryMiB: 80 * GiB, NVLinkGBps: 0, PCIDeviceID: 0x2331, MIGProfiles: migTable(migNamesH100x80)},
		{Name: "H200-141GB", Aliases: []string{"H200"}, MemoryMiB: 141 * GiB, NVLinkGBps: 900, PCIDeviceID: 0x2335, MIGProfiles: migTable(migNamesH200)},
		{Name: "H200-NVL", MemoryMiB: 141 * GiB, NVLinkGBps: 900, PCIDeviceID: 0x233B, MIGProfiles: migTable(migNamesH200)},
		{Name: "L40S", MemoryMiB: 48 * GiB, PCIDeviceID: 0x26B9},
		{Name: "L4", MemoryMiB: 24 * GiB, PCIDeviceID: 0x27B8},
		{Name: "A10", MemoryMiB: 24 * GiB, PCIDeviceID: 0x2236},
		{Name: "T4", MemoryMiB: 16 * GiB, PCIDeviceID: 0x1EB8},
		// The Alibaba openb trace calls the SXM2 V100s "V100M16" and
		// "V100M32" and the P100 plain "P100"; the aliases let it replay
		// unchanged.
		{Name: "V100-16GB", Aliases: []string{"V100M16", "V100-SXM2-16GB"}, MemoryMiB: 16 * GiB, NVLinkGBps: 300, PCIDeviceID: 0x1DB1},
		{Name: "V100-32GB", Aliases: []string{"V100M32", "V100-SXM2-32GB"}, MemoryMiB: 32 * GiB, NVLinkGBps: 300, PCIDeviceID: 0x1DB5},
		{Name: "P100-16GB", Aliases: []string{"P100", "P100-PCIE-16GB"}, MemoryMiB: 16 * GiB, NVLinkGBps: 0, PCIDeviceID: 0x15F8},
		{Name: "RTX-6000-ADA", MemoryMiB: 48 * GiB, PCIDeviceID: 0x26B1},
		// G1, G2 and G3 exist only so that the Alibaba openb trace can be
		// replayed: the trace hides these GPU models behind codes, so their
		// PCI ids are unknown (0) and their memory sizes are our estimates.
		{Name: "G1", MemoryMiB: 32 * GiB},
		{Name: "G2", MemoryMiB: 32 * GiB},
		{Name: "G3", MemoryMiB: 80 * GiB},
		// AMD Instinct (CDNA 3), OAM modules on 8-GPU Infinity Fabric
		// (xGMI) platforms: 8 XCDs of 38 CUs, 896 GB/s of xGMI per GPU.
		// PCI ids are AMD's (vendor 0x1002).
		{Name: "MI300X", Aliases: []string{"MI300X-192GB", "Instinct-MI300X"}, Vendor: VendorAMD, MemoryMiB: 192 * GiB,
			XGMIGBps: 896, PCIDeviceID: 0x74A1, XCDs: 8, ComputeUnits: 304,
			Partitions: amdPartitions(192 * GiB), MemoryPartitions: amdMemoryPartitions(),
			// AMD's GIM (MxGPU) driver: 1 VF per GPU, or 8 with the GPU
			// in CPX/NPS1.
			VFConfigs: []VFConfig{{VFs: 1, Partition: "SPX", MemoryPartition: "NPS1"}, {VFs: 8, Partition: "CPX", MemoryPartition: "NPS1"}}},
		{Name: "MI325X", Aliases: []string{"MI325X-256GB", "Instinct-MI325X"}, Vendor: VendorAMD, MemoryMiB: 256 * GiB,
			XGMIGBps: 896, PCIDeviceID: 0x74A5, XCDs: 8, ComputeUnits: 304,
			Partitions: amdPartitions(256 * GiB), MemoryPartitions: amdMemoryPartitions(),
			VFConfigs: []VFConfig{{VFs: 1, Partition: "SPX", MemoryPartition: "NPS1"}}},
	}
}

// ResolveProfile looks a MIG profile up the ways a user may write it: the
// exact profile name ("3g.40gb", case-insensitive), the GPU instance profile
// ID as a decimal string ("9"), or the short compute form ("3g") when exactly
// one profile without media extensions has that many compute slices. Profile
// (exact names only) stays the strict lookup that validation uses; this is
// for the API and CLI, where being told "1g is ambiguous: 1g.10gb or
// 1g.20gb" is friendlier than "unknown profile".
//
// An unknown profile is a *NotFoundError listing the model's profiles; an
// ambiguous short form and a model without MIG are plain errors that name
// the model and list the candidates.
func (m *Model) ResolveProfile(name string) (*MIGProfile, error) {
	if !m.SupportsMIG() {
		return nil, fmt.Errorf("gpu model %q does not support MIG", m.Name)
	}
	for i := range m.MIGProfiles {
		if strings.EqualFold(m.MIGProfiles[i].Name, name) {
			return &m.MIGProfiles[i], nil
		}
	}
	if isDecimal(name) {
		if id, err := strconv.Atoi(name); err == nil {
			if p := m.ProfileByID(id); p != nil {
				return p, nil
			}
		}
	}
	if short, ok := shortComputeForm(name); ok {
		var matches []*MIGProfile
		for i := range m.MIGProfiles {
			p := &m.MIGProfiles[i]
			if p.MediaExtensions || !strings.HasPrefix(strings.ToLower(p.Name), short+".") {
				continue
			}
			matches = append(matches, p)
		}
		switch len(matches) {
		case 1:
			return matches[0], nil
		case 0:
			// Fall through to the not-found error below.
		default:
			names := make([]string, len(matches))
			for i, p := range matches {
				names[i] = p.Name
			}
			return nil, fmt.Errorf("MIG profile %q is ambiguous for gpu model %q: it matches %s; use the full name",
				name, m.Name, strings.Join(names, ", "))
		}
	}
	return nil, &NotFoundError{
		Kind:  "MIG profile",
		Name:  name,
		In:    fmt.Sprintf("gpu model %q", m.Name),
		Known: m.ProfileNames(),
	}
}

// ProfileNames returns the model's MIG profile names in table order (smallest
// first); it is empty for models without MIG.
func (m *Model) ProfileNames() []string {
	names := make([]string, len(m.MIGProfiles))
	for i := range m.MIGProfiles {
		names[i] = m.MIGProfiles[i].Name
	}
	return names
}

// isDecimal reports whether s is a non-empty run of ASCII digits; it keeps
// strconv.Atoi from accepting "+9" or "-1" as profile IDs.
func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// shortComputeForm recognises "3g" (any case) and returns it lower-cased.
func shortComputeForm(s string) (string, bool) {
	s = strings.ToLower(s)
	if len(s) < 2 || s[len(s)-1] != 'g' || !isDecimal(s[:len(s)-1]) {
		return "", false
	}
	return s, true
}

// clone returns a deep copy of m, so that a catalog handed to a caller shares
// no slices with the built-in template or with another catalog.
func (m *Model) clone() *Model {
	c := *m
	c.Aliases = append([]string(nil), m.Aliases...)
	if m.Partitions != nil {
		c.Partitions = make([]ComputePartition, len(m.Partitions))
		for i, p := range m.Partitions {
			p.MemoryPartitions = append([]string(nil), p.MemoryPartitions...)
			c.Partitions[i] = p
		}
	}
	if m.MemoryPartitions != nil {
		c.MemoryPartitions = append([]MemoryPartition(nil), m.MemoryPartitions...)
	}
	if m.VFConfigs != nil {
		c.VFConfigs = append([]VFConfig(nil), m.VFConfigs...)
	}
	if m.MIGProfiles != nil {
		c.MIGProfiles = make([]MIGProfile, len(m.MIGProfiles))
		for i, p := range m.MIGProfiles {
			p.Starts = append([]int(nil), p.Starts...)
			c.MIGProfiles[i] = p
		}
	}
	return &c
}
