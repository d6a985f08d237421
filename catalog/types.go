// Package catalog holds what can be rented: GPU models with their real specs,
// the NVIDIA MIG profile tables, the AMD Instinct partition tables (compute
// partitions, memory partitions, SR-IOV virtual functions), and offerings
// (instance types) with their virtualization mode. The catalog is read-only data; the placement engine and
// the API validate requests against it.
package catalog

// Mode is how an offering virtualizes GPUs.
type Mode string

const (
	// ModeMetal rents a whole host, which must be empty: no neighbours.
	ModeMetal Mode = "metal"
	// ModeGPU rents N whole GPUs in passthrough.
	ModeGPU Mode = "gpu"
	// ModeMIG rents one MIG GPU instance of a given profile.
	ModeMIG Mode = "mig"
	// ModeShared rents a time-sliced fraction of one GPU: a compute share in
	// milli (1..999) plus a GPU memory size.
	ModeShared Mode = "shared"
	// ModeCPU rents CPU and memory only (no GPU). The trace replay uses it for
	// CPU-only pods; offerings may use it for CPU sidecars.
	ModeCPU Mode = "cpu"
	// ModePartition rents one logical GPU of an AMD GPU that its operator
	// has put in a compute partition mode (DPX, QPX, CPX): the GPU shows
	// itself as 2, 4 or 8 GPUs, each with its own XCDs, and the offering
	// names the mode. Tenants never choose a GPU's mode; they rent a
	// partition of a GPU already in it.
	ModePartition Mode = "partition"
	// ModeVF rents one SR-IOV virtual function of an AMD GPU that its
	// operator exposes as N VFs (MxGPU): N shares of one fixed size,
	// isolated by the hardware.
	ModeVF Mode = "vf"
)

// Valid reports whether m is one of the known modes.
func (m Mode) Valid() bool {
	switch m {
	case ModeMetal, ModeGPU, ModeMIG, ModeShared, ModeCPU, ModePartition, ModeVF:
		return true
	}
	return false
}

// MIG geometry shared by every MIG-capable model we support (A100, H100, H200):
// 8 memory slots and 7 compute slices per GPU.
const (
	MIGMemorySlots   = 8
	MIGComputeSlices = 7
)

// MIGProfile is one GPU instance profile, as `nvidia-smi mig -lgip` prints it.
type MIGProfile struct {
	// ID is the GPU instance profile ID nvidia-smi prints (19, 20, 15, 14, 9, 5, 0).
	ID int `yaml:"id" json:"id"`
	// Name is the model-specific profile name, e.g. "3g.40gb".
	Name string `yaml:"name" json:"name"`
	// ComputeSlices is the number of the GPU's 7 compute slices it uses.
	ComputeSlices int `yaml:"compute_slices" json:"compute_slices"`
	// MemorySlots is its size in the GPU's 8 memory slots; placements are
	// counted in memory slots, not compute slices.
	MemorySlots int `yaml:"memory_slots" json:"memory_slots"`
	// MaxPerGPU caps how many instances of this profile one GPU can hold.
	MaxPerGPU int `yaml:"max_per_gpu" json:"max_per_gpu"`
	// Starts lists the valid start slots; an instance occupies
	// [start, start+MemorySlots).
	Starts []int `yaml:"starts" json:"starts"`
	// MemoryMiB is the nominal memory size used for pricing and placement.
	MemoryMiB int64 `yaml:"memory_mib" json:"memory_mib"`
	// MediaExtensions marks the "+me" profiles that carry the media engines;
	// only one such instance is allowed per GPU.
	MediaExtensions bool `yaml:"media_extensions,omitempty" json:"media_extensions,omitempty"`
}

// Model is a GPU model with the specs placement and pricing need.
type Model struct {
	// Name is the canonical name, e.g. "H100-80GB-SXM".
	Name string `yaml:"name" json:"name"`
	// Aliases are other names accepted for the model (trace codes such as
	// "V100M16", marketing names such as "H100").
	Aliases []string `yaml:"aliases,omitempty" json:"aliases,omitempty"`
	// MemoryMiB is the GPU memory size.
	MemoryMiB int64 `yaml:"memory_mib" json:"memory_mib"`
	// NVLinkGBps is the per-GPU NVLink bandwidth class in GB/s; 0 means PCIe only.
	NVLinkGBps int `yaml:"nvlink_gbps" json:"nvlink_gbps"`
	// PCIDeviceID is the PCI device id (vendor 0x10DE) when known, 0 otherwise;
	// the agent matches inventory against it.
	PCIDeviceID uint16 `yaml:"pci_device_id,omitempty" json:"pci_device_id,omitempty"`
	// MIGProfiles is the MIG profile table; empty when the model has no MIG.
	MIGProfiles []MIGProfile `yaml:"mig_profiles,omitempty" json:"mig_profiles,omitempty"`

	// Vendor is "nvidia" or "amd"; empty means NVIDIA, as every model was
	// before AMD's (see VendorOf).
	Vendor string `yaml:"vendor,omitempty" json:"vendor,omitempty"`
	// XGMIGBps is the per-GPU AMD Infinity Fabric (xGMI) bandwidth class in
	// GB/s, the NVLink analogue of AMD's 8-GPU platforms; 0 for models
	// without it. A model has NVLink or xGMI, never both.
	XGMIGBps int `yaml:"xgmi_gbps,omitempty" json:"xgmi_gbps,omitempty"`
	// XCDs and ComputeUnits are an AMD GPU's accelerator complex dies and
	// compute units (CUs); a compute partition takes whole XCDs.
	XCDs         int `yaml:"xcds,omitempty" json:"xcds,omitempty"`
	ComputeUnits int `yaml:"compute_units,omitempty" json:"compute_units,omitempty"`
	// Partitions is the compute partition table (SPX, DPX, QPX, CPX) of an
	// AMD GPU that has them; empty otherwise.
	Partitions []ComputePartition `yaml:"partitions,omitempty" json:"partitions,omitempty"`
	// MemoryPartitions lists the memory partition (NPS) modes the GPU has.
	MemoryPartitions []MemoryPartition `yaml:"memory_partitions,omitempty" json:"memory_partitions,omitempty"`
	// VFConfigs lists the ways the GPU can be exposed as SR-IOV virtual
	// functions (MxGPU); empty when it cannot.
	VFConfigs []VFConfig `yaml:"vf_configs,omitempty" json:"vf_configs,omitempty"`
}

// SupportsMIG reports whether the model can be partitioned with MIG.
func (m *Model) SupportsMIG() bool { return len(m.MIGProfiles) > 0 }

// Profile looks a MIG profile up by its exact name ("3g.40gb"). It returns
// nil when there is none; ResolveProfile also accepts IDs and short forms.
func (m *Model) Profile(name string) *MIGProfile {
	for i := range m.MIGProfiles {
		if m.MIGProfiles[i].Name == name {
			return &m.MIGProfiles[i]
		}
	}
	return nil
}

// ProfileByID looks a MIG profile up by its GPU instance profile ID.
func (m *Model) ProfileByID(id int) *MIGProfile {
	for i := range m.MIGProfiles {
		if m.MIGProfiles[i].ID == id {
			return &m.MIGProfiles[i]
		}
	}
	return nil
}

// Offering is an instance type tenants rent.
type Offering struct {
	// Name is the offering's unique name, e.g. "h100.mig.3g.40gb".
	Name string `yaml:"name" json:"name"`
	// Description is a one-line human description.
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
	// Mode is the virtualization mode.
	Mode Mode `yaml:"mode" json:"mode"`
	// Model is the GPU model name (canonical or alias); empty only for ModeCPU,
	// and for ModeMetal where any host qualifies.
	Model string `yaml:"model,omitempty" json:"model,omitempty"`
	// GPUs is the whole-GPU count for ModeGPU (1..8) and the host's GPU count
	// for ModeMetal (0 = any).
	GPUs int `yaml:"gpus,omitempty" json:"gpus,omitempty"`
	// MIGProfile is the MIG profile name for ModeMIG.
	MIGProfile string `yaml:"mig_profile,omitempty" json:"mig_profile,omitempty"`
	// ShareMilli is the compute share of one GPU for ModeShared, 1..999.
	ShareMilli int `yaml:"share_milli,omitempty" json:"share_milli,omitempty"`
	// ShareMemoryMiB is the GPU memory for ModeShared.
	ShareMemoryMiB int64 `yaml:"share_memory_mib,omitempty" json:"share_memory_mib,omitempty"`
	// Partition is the compute partition mode for ModePartition ("CPX"):
	// the offering is one logical GPU of a GPU in that mode.
	Partition string `yaml:"partition,omitempty" json:"partition,omitempty"`
	// MemoryPartition optionally pins ModePartition to GPUs in one memory
	// partition mode ("NPS4"); empty takes any mode valid with Partition.
	MemoryPartition string `yaml:"memory_partition,omitempty" json:"memory_partition,omitempty"`
	// VFs is, for ModeVF, the number of virtual functions the GPU is
	// exposed as; the offering is one of them.
	VFs int `yaml:"vfs,omitempty" json:"vfs,omitempty"`
	// VCPUs and MemoryMiB are the host CPU and RAM that come with the offering.
	VCPUs     int   `yaml:"vcpus" json:"vcpus"`
	MemoryMiB int64 `yaml:"memory_mib" json:"memory_mib"`
	// InstanceStoreGiB is the local scratch disk that comes with the
	// offering, in GiB (0: none, 0..MaxInstanceStoreGiB): a filesystem of
	// that size on the host's own disk, mounted at /scratch in the
	// workload and wiped whenever the instance stops (docs/RUNTIME.md,
	// "Instance store"). It is included in the offering's price, as a
	// cloud's instance store is.
	InstanceStoreGiB int `yaml:"instance_store_gib,omitempty" json:"instance_store_gib,omitempty"`
}
