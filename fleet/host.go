// Package fleet models the hosts and GPUs of a region and the allocations on
// them. A *Fleet is a mutable snapshot: the placement engine reads it, and
// Apply and Release change it, checking every invariant (no GPU, MIG slot or
// milli of a GPU is ever handed out twice). The fleet also keeps an index of
// hosts grouped into equivalence classes of identical state, which is what
// lets placement cost grow with the number of distinct host states rather
// than with the number of hosts.
package fleet

import (
	"fmt"
	"math/bits"

	"github.com/gpucloud/gpucloud/catalog"
)

// HostState says whether the scheduler may place new work on a host.
type HostState string

const (
	// Schedulable hosts take new allocations.
	Schedulable HostState = "schedulable"
	// Cordoned hosts keep what they run but take nothing new.
	Cordoned HostState = "cordoned"
	// Unhealthy hosts missed heartbeats or failed health checks.
	Unhealthy HostState = "unhealthy"
)

// Valid reports whether s is a known state.
func (s HostState) Valid() bool {
	return s == Schedulable || s == Cordoned || s == Unhealthy
}

// MilliPerGPU is the compute of one whole GPU in milli-GPUs.
const MilliPerGPU = 1000

// MIGInstance is one MIG GPU instance placed on a GPU.
type MIGInstance struct {
	// ProfileID is the GPU instance profile ID (19, 20, 15, 14, 9, 5, 0).
	ProfileID int `json:"profile_id"`
	// Start and Slots give the memory slots [Start, Start+Slots) it holds.
	Start int `json:"start"`
	Slots int `json:"slots"`
	// Slices is the number of compute slices it uses.
	Slices int `json:"slices"`
	// Media is true for "+me" profiles, of which a GPU holds at most one.
	Media bool `json:"media,omitempty"`
	// Alloc is the allocation holding it; empty for an instance that exists
	// on the hardware but is not rented (the agent reports those).
	Alloc string `json:"alloc,omitempty"`
}

// GPU is one device in a host, with its static facts and its current usage.
type GPU struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// Model is the canonical catalog model name.
	Model     string `json:"model"`
	MemoryMiB int64  `json:"memory_mib"`
	// Island is the NVLink island the GPU belongs to inside its host; GPUs of
	// one island are fully NVLink-connected. -1 means PCIe only.
	Island int `json:"island"`
	// MIG is set when the GPU is in MIG mode.
	MIG bool `json:"mig,omitempty"`
	// MIGAuto records that placement switched MIG mode on (rather than the
	// operator), so the GPU leaves MIG mode again when its last instance goes.
	MIGAuto bool `json:"mig_auto,omitempty"`

	// WholeAlloc is the allocation holding the whole GPU, "" when none.
	WholeAlloc string `json:"whole_alloc,omitempty"`
	// UsedMilli and UsedMemMiB sum the shared (time-sliced) allocations.
	UsedMilli  int   `json:"used_milli,omitempty"`
	UsedMemMiB int64 `json:"used_mem_mib,omitempty"`
	// Shares counts the shared allocations on the GPU.
	Shares int `json:"shares,omitempty"`
	// ShareTenant is the tenant whose shares the GPU holds ("" when it
	// holds none, or only shares without a tenant). Shares of one GPU run
	// under one CUDA MPS server and see one /dev/shm, so they always belong
	// to one tenant: Apply refuses a share of another.
	ShareTenant string `json:"share_tenant,omitempty"`
	// Instances are the MIG instances placed on the GPU.
	Instances []MIGInstance `json:"instances,omitempty"`

	// Partition and MemoryPartition are an AMD GPU's compute partition
	// mode (SPX, DPX, QPX, CPX) and memory partition mode (NPS1, NPS4), and
	// VFs the SR-IOV virtual functions it is exposed as (0: none). The
	// operator sets them (the host's inventory); placement never changes
	// them. Empty on models without partitions.
	Partition       string `json:"partition,omitempty"`
	MemoryPartition string `json:"memory_partition,omitempty"`
	VFs             int    `json:"vfs,omitempty"`
	// Parts is the number of devices the GPU shows tenants in its mode:
	// its VFs when it has any, else its compute partition's logical GPUs
	// (8 in CPX); 0 or 1 when it is one GPU. Derived from the catalog
	// when the host is added.
	Parts int `json:"parts,omitempty"`
	// PartsUsed marks the devices held (bit i: device i), on a GPU with
	// more than one device or with VFs.
	PartsUsed uint16 `json:"parts_used,omitempty"`
}

// Split reports whether the GPU is rented by its devices (partitions or
// VFs) rather than whole, shared or in MIG mode.
func (g *GPU) Split() bool { return g.VFs > 0 || g.Parts > 1 }

// PartsFree is how many of a split GPU's devices are free.
func (g *GPU) PartsFree() int {
	if !g.Split() {
		return 0
	}
	return g.Parts - bits.OnesCount16(g.PartsUsed)
}

// FirstFreePart returns the lowest free device of a split GPU, or -1.
func (g *GPU) FirstFreePart() int {
	for i := 0; i < g.Parts; i++ {
		if g.PartsUsed&(1<<uint(i)) == 0 {
			return i
		}
	}
	return -1
}

// Empty reports whether nothing at all is placed on the GPU.
func (g *GPU) Empty() bool {
	return g.WholeAlloc == "" && g.Shares == 0 && len(g.Instances) == 0 && g.PartsUsed == 0
}

// FreeMilli is the GPU compute still free, in milli. A whole allocation uses
// all of it, and MIG instances use 1000/7 per compute slice (rounded so that
// a full GPU is exactly 1000).
func (g *GPU) FreeMilli() int {
	if g.WholeAlloc != "" {
		return 0
	}
	if g.MIG {
		return MilliPerGPU - migMilli(g.SlicesUsed())
	}
	if g.Split() {
		return MilliPerGPU - bits.OnesCount16(g.PartsUsed)*MilliPerGPU/g.Parts
	}
	return MilliPerGPU - g.UsedMilli
}

func migMilli(slices int) int {
	return slices * MilliPerGPU / catalog.MIGComputeSlices
}

// SlotMask returns the MIG memory slots in use as a bit mask (bit i = slot i).
func (g *GPU) SlotMask() uint8 {
	var m uint8
	for _, in := range g.Instances {
		m |= uint8((1<<in.Slots)-1) << in.Start
	}
	return m
}

// SlicesUsed is the number of MIG compute slices in use.
func (g *GPU) SlicesUsed() int {
	n := 0
	for _, in := range g.Instances {
		n += in.Slices
	}
	return n
}

// CountProfile counts the instances of a profile on the GPU.
func (g *GPU) CountProfile(id int) int {
	n := 0
	for _, in := range g.Instances {
		if in.ProfileID == id {
			n++
		}
	}
	return n
}

// HasMedia reports whether a "+me" instance is already on the GPU.
func (g *GPU) HasMedia() bool {
	for _, in := range g.Instances {
		if in.Media {
			return true
		}
	}
	return false
}

// Host is one server of the fleet.
type Host struct {
	ID   string `json:"id"`
	Zone string `json:"zone,omitempty"`
	// Rack names the rack and so its network fabric; "cluster" placement
	// groups keep members on one rack.
	Rack string `json:"rack,omitempty"`
	// Labels carry facts such as driver version ("driver": "550.54") and
	// interconnect ("interconnect": "infiniband").
	Labels map[string]string `json:"labels,omitempty"`
	State  HostState         `json:"state,omitempty"`

	CPUMilli  int64 `json:"cpu_milli"`
	MemoryMiB int64 `json:"memory_mib"`
	GPUs      []GPU `json:"gpus,omitempty"`

	// Underlay is the host's address on the fabric between hosts, where
	// its overlay (VXLAN) endpoint listens, and MTU the fabric's MTU
	// (0: 1500); both as its agent reports them. Placement ignores them.
	Underlay string `json:"underlay,omitempty"`
	MTU      int    `json:"mtu,omitempty"`
	// HCAs are the host's RDMA adapters (InfiniBand or RoCE).
	HCAs []HCA `json:"hcas,omitempty"`
	// DirectAddr is where the host's agent takes direct copies (its
	// --direct-listen, as clients dial it: host:port), and DirectFingerprint
	// its listener's certificate ("sha256:<hex>"), which clients pin;
	// both as the agent reports them, empty when it takes none. Placement
	// ignores them.
	DirectAddr        string `json:"direct_addr,omitempty"`
	DirectFingerprint string `json:"direct_fingerprint,omitempty"`

	// UsedCPUMilli and UsedMemoryMiB sum the allocations on the host.
	UsedCPUMilli  int64 `json:"used_cpu_milli,omitempty"`
	UsedMemoryMiB int64 `json:"used_memory_mib,omitempty"`
	// MetalAlloc is the bare-metal allocation holding the whole host.
	MetalAlloc string `json:"metal_alloc,omitempty"`
	// Allocs counts the allocations on the host.
	Allocs int `json:"allocs,omitempty"`

	// Per-host bookkeeping kept by the Fleet.
	index    int
	class    *Class
	classPos int
	template int
}

// FreeCPU is the CPU still free on the host, in milli-cores.
func (h *Host) FreeCPU() int64 { return h.CPUMilli - h.UsedCPUMilli }

// FreeMemory is the memory still free on the host, in MiB.
func (h *Host) FreeMemory() int64 { return h.MemoryMiB - h.UsedMemoryMiB }

// Empty reports whether no allocation is on the host.
func (h *Host) Empty() bool { return h.Allocs == 0 }

// Model returns the GPU model of the host's first GPU ("" for CPU-only hosts).
// Hosts usually carry one model; placement checks every GPU it uses anyway.
func (h *Host) Model() string {
	if len(h.GPUs) == 0 {
		return ""
	}
	return h.GPUs[0].Model
}

// Class returns the equivalence class the host is in.
func (h *Host) Class() *Class { return h.class }

// Index is the host's position in Fleet.Hosts.
func (h *Host) Index() int { return h.index }

// clone returns a deep copy of the host without fleet bookkeeping.
func (h *Host) clone() *Host {
	c := *h
	c.class = nil
	if h.Labels != nil {
		c.Labels = make(map[string]string, len(h.Labels))
		for k, v := range h.Labels {
			c.Labels[k] = v
		}
	}
	c.GPUs = make([]GPU, len(h.GPUs))
	copy(c.GPUs, h.GPUs)
	for i := range c.GPUs {
		if len(h.GPUs[i].Instances) > 0 {
			c.GPUs[i].Instances = append([]MIGInstance(nil), h.GPUs[i].Instances...)
		} else {
			// An empty slice may still have a backing array; sharing it
			// would let an append in one copy overwrite the other's.
			c.GPUs[i].Instances = nil
		}
	}
	return &c
}

// validate checks a host's static description.
func (h *Host) validate(cat *catalog.Catalog) error {
	if h.ID == "" {
		return fmt.Errorf("host has no id")
	}
	if h.CPUMilli < 0 || h.MemoryMiB < 0 {
		return fmt.Errorf("host %s: negative cpu or memory", h.ID)
	}
	if h.State == "" {
		h.State = Schedulable
	}
	if !h.State.Valid() {
		return fmt.Errorf("host %s: unknown state %q", h.ID, h.State)
	}
	for i := range h.GPUs {
		g := &h.GPUs[i]
		if g.Index != i {
			return fmt.Errorf("host %s: gpu %d has index %d", h.ID, i, g.Index)
		}
		if cat != nil {
			m, err := cat.Model(g.Model)
			if err != nil {
				return fmt.Errorf("host %s gpu %d: %w", h.ID, i, err)
			}
			g.Model = m.Name
			if g.MemoryMiB == 0 {
				g.MemoryMiB = m.MemoryMiB
			}
			if g.MIG && !m.SupportsMIG() {
				return fmt.Errorf("host %s gpu %d: model %s has no MIG", h.ID, i, m.Name)
			}
			if err := g.resolveMode(m); err != nil {
				return fmt.Errorf("host %s gpu %d: %w", h.ID, i, err)
			}
		} else if err := g.resolveMode(nil); err != nil {
			return fmt.Errorf("host %s gpu %d: %w", h.ID, i, err)
		}
	}
	return nil
}

// HCA is an RDMA adapter of a host, as /sys/class/infiniband shows it.
type HCA struct {
	// Name is the adapter's name ("mlx5_0").
	Name string `json:"name"`
	// LinkLayer is "InfiniBand" or "Ethernet" (RoCE).
	LinkLayer string `json:"link_layer"`
	// NetDev is its network interface ("ib0"), when it has one.
	NetDev string `json:"netdev,omitempty"`
	// Devices are its device nodes a workload needs
	// ("/dev/infiniband/uverbs0"; rdma_cm is shared by every adapter).
	Devices []string `json:"devices,omitempty"`
}
