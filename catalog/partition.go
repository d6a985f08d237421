package catalog

import (
	"fmt"
	"strings"
)

// Vendors of GPU models.
const (
	VendorNVIDIA = "nvidia"
	VendorAMD    = "amd"
)

// VendorOf returns the model's vendor: "amd" or "nvidia" (a model that
// does not say is NVIDIA's, as every model was before AMD's).
func (m *Model) VendorOf() string {
	if m.Vendor == "" {
		return VendorNVIDIA
	}
	return m.Vendor
}

// LinkGBps is the per-GPU bandwidth class of the model's GPU-to-GPU link
// inside a host, NVLink or xGMI (0: PCIe only). Placement's islands and the
// advisor treat both alike.
func (m *Model) LinkGBps() int {
	if m.XGMIGBps > 0 {
		return m.XGMIGBps
	}
	return m.NVLinkGBps
}

// LinkName names the model's GPU-to-GPU link: "xGMI", "NVLink" or "PCIe".
func (m *Model) LinkName() string {
	switch {
	case m.XGMIGBps > 0:
		return "xGMI"
	case m.NVLinkGBps > 0:
		return "NVLink"
	}
	return "PCIe"
}

// ComputePartition is one compute partition mode of an AMD Instinct GPU, as
// `amd-smi partition` lists it: the GPU shows itself as Devices logical
// GPUs, each of XCDs accelerator complex dies.
type ComputePartition struct {
	// Name is the mode: "SPX", "DPX", "QPX" or "CPX".
	Name string `yaml:"name" json:"name"`
	// Devices is the number of logical GPUs per physical GPU (1, 2, 4, 8).
	Devices int `yaml:"devices" json:"devices"`
	// XCDs and ComputeUnits are what each logical GPU has.
	XCDs         int `yaml:"xcds" json:"xcds"`
	ComputeUnits int `yaml:"compute_units" json:"compute_units"`
	// MemoryMiB is the nominal memory of each logical GPU (the GPU's
	// memory over Devices), which pricing and placement use.
	MemoryMiB int64 `yaml:"memory_mib" json:"memory_mib"`
	// MemoryPartitions lists the memory partition modes (NPS) valid with
	// this compute partition.
	MemoryPartitions []string `yaml:"memory_partitions" json:"memory_partitions"`
}

// MemoryPartition is one memory partition (NPS) mode of an AMD GPU: its HBM
// split into Domains NUMA domains.
type MemoryPartition struct {
	// Name is the mode: "NPS1" or "NPS4".
	Name string `yaml:"name" json:"name"`
	// Domains is the number of memory partitions per GPU.
	Domains int `yaml:"domains" json:"domains"`
}

// VFConfig is one way to expose an AMD GPU as SR-IOV virtual functions
// (MxGPU): VFs functions with the GPU in the given compute and memory
// partition modes.
type VFConfig struct {
	VFs             int    `yaml:"vfs" json:"vfs"`
	Partition       string `yaml:"partition" json:"partition"`
	MemoryPartition string `yaml:"memory_partition" json:"memory_partition"`
}

// SPX is the unpartitioned compute mode: the GPU is one logical GPU.
const SPX = "SPX"

// SupportsPartitions reports whether the model has compute partitions.
func (m *Model) SupportsPartitions() bool { return len(m.Partitions) > 0 }

// ComputePartitionNamed looks a compute partition mode up by name, ignoring
// case; nil when the model has none of that name.
func (m *Model) ComputePartitionNamed(name string) *ComputePartition {
	for i := range m.Partitions {
		if strings.EqualFold(m.Partitions[i].Name, name) {
			return &m.Partitions[i]
		}
	}
	return nil
}

// MemoryPartitionNamed looks a memory partition mode up by name, ignoring
// case; nil when the model has none of that name.
func (m *Model) MemoryPartitionNamed(name string) *MemoryPartition {
	for i := range m.MemoryPartitions {
		if strings.EqualFold(m.MemoryPartitions[i].Name, name) {
			return &m.MemoryPartitions[i]
		}
	}
	return nil
}

// PartitionNames returns the model's compute partition names in table
// order.
func (m *Model) PartitionNames() []string {
	out := make([]string, len(m.Partitions))
	for i, p := range m.Partitions {
		out[i] = p.Name
	}
	return out
}

// VFCounts returns the VF counts the model can be exposed as.
func (m *Model) VFCounts() []int {
	out := make([]int, len(m.VFConfigs))
	for i, v := range m.VFConfigs {
		out[i] = v.VFs
	}
	return out
}

// GPUMode is how an operator has set one AMD GPU up: its compute and
// memory partition modes and, for MxGPU, its VF count. The zero value is
// the GPU as it boots (SPX, the model's first memory mode, no VFs).
type GPUMode struct {
	Partition       string
	MemoryPartition string
	VFs             int
}

// ModeError is a GPU mode that the model cannot take. Field is the
// offending part ("partition", "memory_partition" or "vfs").
type ModeError struct {
	Model   string
	Field   string
	Message string
}

func (e *ModeError) Error() string {
	return fmt.Sprintf("gpu model %s: %s: %s", e.Model, e.Field, e.Message)
}

// ResolveMode checks an operator's GPU mode against the model's tables and
// returns it in canonical spelling with the compute partition it selects
// (SPX when unset). Only the combinations the tables list are valid: a
// memory partition the compute partition does not list, or a VF count
// without its VFConfig, is a *ModeError.
func (m *Model) ResolveMode(mode GPUMode) (GPUMode, *ComputePartition, error) {
	bad := func(field, format string, args ...any) (GPUMode, *ComputePartition, error) {
		return GPUMode{}, nil, &ModeError{Model: m.Name, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if !m.SupportsPartitions() {
		if mode.Partition != "" && !strings.EqualFold(mode.Partition, SPX) || mode.MemoryPartition != "" || mode.VFs != 0 {
			return bad("partition", "the model has no compute, memory or VF partitions")
		}
		return GPUMode{}, nil, nil
	}
	name := mode.Partition
	if name == "" {
		name = SPX
	}
	cp := m.ComputePartitionNamed(name)
	if cp == nil {
		return bad("partition", "unknown compute partition %q (valid: %s)", mode.Partition, strings.Join(m.PartitionNames(), ", "))
	}
	mem := mode.MemoryPartition
	if mem == "" {
		mem = cp.MemoryPartitions[0]
	}
	mp := m.MemoryPartitionNamed(mem)
	if mp == nil {
		names := make([]string, len(m.MemoryPartitions))
		for i, p := range m.MemoryPartitions {
			names[i] = p.Name
		}
		return bad("memory_partition", "unknown memory partition %q (valid: %s)", mode.MemoryPartition, strings.Join(names, ", "))
	}
	valid := false
	for _, n := range cp.MemoryPartitions {
		if n == mp.Name {
			valid = true
		}
	}
	if !valid {
		return bad("memory_partition", "%s is not valid with %s (valid with %s: %s)", mp.Name, cp.Name, cp.Name, strings.Join(cp.MemoryPartitions, ", "))
	}
	if mode.VFs < 0 {
		return bad("vfs", "must not be negative, got %d", mode.VFs)
	}
	if mode.VFs > 0 {
		ok := false
		for _, v := range m.VFConfigs {
			if v.VFs == mode.VFs && v.Partition == cp.Name && v.MemoryPartition == mp.Name {
				ok = true
			}
		}
		if !ok {
			var list []string
			for _, v := range m.VFConfigs {
				list = append(list, fmt.Sprintf("%d in %s/%s", v.VFs, v.Partition, v.MemoryPartition))
			}
			if len(list) == 0 {
				return bad("vfs", "the model cannot be exposed as virtual functions")
			}
			return bad("vfs", "%d VFs in %s/%s is not a valid configuration (valid: %s)", mode.VFs, cp.Name, mp.Name, strings.Join(list, ", "))
		}
	}
	return GPUMode{Partition: cp.Name, MemoryPartition: mp.Name, VFs: mode.VFs}, cp, nil
}

// Slots is how many devices a GPU in this mode offers to tenants: its VFs
// when it has any, else its compute partition's logical GPUs.
func (g GPUMode) Slots(cp *ComputePartition) int {
	if g.VFs > 0 {
		return g.VFs
	}
	if cp == nil {
		return 1
	}
	return cp.Devices
}

// amdPartitions builds the compute partition table of an 8-XCD CDNA 3 GPU
// (MI300X, MI325X) with memMiB of memory. The modes and their logical GPU
// counts (SPX 1, DPX 2, QPX 4, CPX 8) are AMD SMI's; each logical GPU has
// an equal share of the XCDs (38 CUs each) and, nominally, of the memory.
// The memory modes valid with each are those AMD documents for MI300X:
// NPS1 with every compute mode, NPS4 only with CPX (docs/CATALOG.md cites
// the pages).
func amdPartitions(memMiB int64) []ComputePartition {
	const xcds, cusPerXCD = 8, 38
	rows := []struct {
		name    string
		devices int
		mem     []string
	}{
		{"SPX", 1, []string{"NPS1"}},
		{"DPX", 2, []string{"NPS1"}},
		{"QPX", 4, []string{"NPS1"}},
		{"CPX", 8, []string{"NPS1", "NPS4"}},
	}
	out := make([]ComputePartition, len(rows))
	for i, r := range rows {
		out[i] = ComputePartition{
			Name: r.name, Devices: r.devices,
			XCDs: xcds / r.devices, ComputeUnits: xcds / r.devices * cusPerXCD,
			MemoryMiB:        memMiB / int64(r.devices),
			MemoryPartitions: append([]string(nil), r.mem...),
		}
	}
	return out
}

// amdMemoryPartitions is the memory partition table of MI300X and MI325X.
func amdMemoryPartitions() []MemoryPartition {
	return []MemoryPartition{{Name: "NPS1", Domains: 1}, {Name: "NPS4", Domains: 4}}
}

// validatePartitions checks a model's partition tables: unique names, SPX
// present with one device, devices dividing the XCDs evenly, memory and
// CUs adding up, memory modes known, and VF configurations that name
// valid modes with one VF per logical GPU (or one for the whole GPU).
func validatePartitions(m *Model, fail func(field, format string, args ...any) *ValidationError) *ValidationError {
	if len(m.Partitions) == 0 {
		if len(m.MemoryPartitions) > 0 || len(m.VFConfigs) > 0 {
			return fail("partitions", "memory_partitions and vf_configs need a compute partition table")
		}
		return nil
	}
	if m.XCDs < 1 || m.ComputeUnits < m.XCDs {
		return fail("xcds", "a partitioned model needs xcds >= 1 and compute_units >= xcds")
	}
	mems := map[string]bool{}
	for i, mp := range m.MemoryPartitions {
		f := fmt.Sprintf("memory_partitions[%d]", i)
		switch {
		case mp.Name == "" || mems[mp.Name]:
			return fail(f+".name", "must be set and unique, got %q", mp.Name)
		case mp.Domains < 1:
			return fail(f+".domains", "must be at least 1, got %d", mp.Domains)
		}
		mems[mp.Name] = true
	}
	names := map[string]bool{}
	for i := range m.Partitions {
		p := &m.Partitions[i]
		f := fmt.Sprintf("partitions[%d]", i)
		switch {
		case p.Name == "" || names[strings.ToUpper(p.Name)]:
			return fail(f+".name", "must be set and unique, got %q", p.Name)
		case p.Devices < 1 || m.XCDs%p.Devices != 0:
			return fail(f+".devices", "must divide the model's %d XCDs, got %d", m.XCDs, p.Devices)
		case p.XCDs*p.Devices != m.XCDs:
			return fail(f+".xcds", "%d devices of %d XCDs are not the model's %d", p.Devices, p.XCDs, m.XCDs)
		case p.ComputeUnits*p.Devices != m.ComputeUnits:
			return fail(f+".compute_units", "%d devices of %d CUs are not the model's %d", p.Devices, p.ComputeUnits, m.ComputeUnits)
		case p.MemoryMiB < 1 || p.MemoryMiB*int64(p.Devices) > m.MemoryMiB:
			return fail(f+".memory_mib", "%d devices of %d MiB exceed the model's %d MiB", p.Devices, p.MemoryMiB, m.MemoryMiB)
		case len(p.MemoryPartitions) == 0:
			return fail(f+".memory_partitions", "must list at least one memory partition mode")
		case strings.EqualFold(p.Name, SPX) && p.Devices != 1:
			return fail(f+".devices", "SPX is one device, got %d", p.Devices)
		}
		for _, n := range p.MemoryPartitions {
			if !mems[n] {
				return fail(f+".memory_partitions", "%q is not in memory_partitions", n)
			}
		}
		names[strings.ToUpper(p.Name)] = true
	}
	if !names[SPX] {
		return fail("partitions", "must include SPX, the mode a GPU boots in")
	}
	for i, v := range m.VFConfigs {
		f := fmt.Sprintf("vf_configs[%d]", i)
		cp := m.ComputePartitionNamed(v.Partition)
		switch {
		case cp == nil:
			return fail(f+".partition", "%q is not a compute partition of the model", v.Partition)
		case !containsString(cp.MemoryPartitions, v.MemoryPartition):
			return fail(f+".memory_partition", "%q is not valid with %s", v.MemoryPartition, cp.Name)
		case v.VFs != 1 && v.VFs != cp.Devices:
			return fail(f+".vfs", "must be 1 or %s's %d devices, got %d", cp.Name, cp.Devices, v.VFs)
		}
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
