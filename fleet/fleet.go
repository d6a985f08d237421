package fleet

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// DeviceKind says how a placement uses one GPU.
type DeviceKind string

const (
	// Whole is a passthrough GPU (or a GPU of a bare-metal host).
	Whole DeviceKind = "whole"
	// MIGSlice is one MIG instance on the GPU.
	MIGSlice DeviceKind = "mig"
	// Share is a time-sliced fraction of the GPU.
	Share DeviceKind = "shared"
	// Partition is one logical GPU of an AMD GPU in a compute partition
	// mode (DPX, QPX, CPX).
	Partition DeviceKind = "partition"
	// VF is one SR-IOV virtual function of an AMD GPU exposed as VFs.
	VF DeviceKind = "vf"
)

// Device is the part of one GPU that a placement takes.
type Device struct {
	GPU  int        `json:"gpu"`
	UUID string     `json:"uuid,omitempty"`
	Kind DeviceKind `json:"kind"`

	// MIG fields, for Kind == MIGSlice.
	MIGProfileID int    `json:"mig_profile_id,omitempty"`
	MIGProfile   string `json:"mig_profile,omitempty"`
	MIGStart     int    `json:"mig_start,omitempty"`
	MIGSlots     int    `json:"mig_slots,omitempty"`
	MIGSlices    int    `json:"mig_slices,omitempty"`
	MIGMedia     bool   `json:"mig_media,omitempty"`
	// EnableMIG asks the agent to switch the GPU into MIG mode first.
	EnableMIG bool `json:"enable_mig,omitempty"`
	// VisibleUUID is the UUID the workload sees for this device, as its
	// host's agent reported it: the GPU's own, or the MIG slice's MIG-...
	// UUID (UUID above is the parent GPU's). Empty until reported.
	VisibleUUID string `json:"visible_uuid,omitempty"`

	// Share fields, for Kind == Share.
	Milli     int   `json:"milli,omitempty"`
	MemoryMiB int64 `json:"memory_mib,omitempty"`

	// Partition and VF fields: the device's index on its GPU (0..Parts-1),
	// how many devices the GPU has, and for a partition the GPU's compute
	// partition mode ("CPX"), which the GPU must still be in.
	Part      int    `json:"part,omitempty"`
	Parts     int    `json:"parts,omitempty"`
	Partition string `json:"partition,omitempty"`
}

// Placement is a plan for one allocation: the host, and per GPU what is
// taken. The placement engine produces it; Apply commits it to a fleet.
type Placement struct {
	// ID identifies the allocation (usually the instance ID).
	ID     string `json:"id"`
	HostID string `json:"host_id"`
	// Metal is set when the allocation takes the whole host.
	Metal     bool     `json:"metal,omitempty"`
	CPUMilli  int64    `json:"cpu_milli"`
	MemoryMiB int64    `json:"memory_mib"`
	Devices   []Device `json:"devices,omitempty"`
	// Tenant owns the allocation. The shares of one GPU all belong to one
	// tenant (see GPU.ShareTenant); an empty Tenant (trace replays, the
	// simulator, placements stored before tenants were recorded) shares
	// only with other empty ones.
	Tenant string `json:"tenant,omitempty"`
	// Preemptible allocations (spot) may be evicted for others; PriceMicros
	// is what evicting it gives up, per hour, in micro-units.
	Preemptible bool  `json:"preemptible,omitempty"`
	PriceMicros int64 `json:"price_micros,omitempty"`
	// Score is the policy's score of the chosen option (lower is better).
	Score float64 `json:"score"`
}

// GPUMilli is the GPU compute the placement takes, in milli-GPUs.
func (p *Placement) GPUMilli() int {
	n := 0
	for _, d := range p.Devices {
		switch d.Kind {
		case Whole:
			n += MilliPerGPU
		case Share:
			n += d.Milli
		case MIGSlice:
			n += migMilli(d.MIGSlices)
		case Partition, VF:
			if d.Parts > 0 {
				n += MilliPerGPU / d.Parts
			}
		}
	}
	return n
}

// ErrConflict is returned (wrapped) when a placement no longer fits the
// fleet: what it wants was taken since the plan was made.
var ErrConflict = errors.New("placement conflicts with fleet state")

// ErrUnknown is returned (wrapped) for an unknown host or allocation.
var ErrUnknown = errors.New("not found")

// Fleet is a mutable snapshot of hosts and their allocations. It is not safe
// for concurrent use; the server keeps one per scheduler and clones it.
type Fleet struct {
	Hosts  []*Host
	byID   map[string]*Host
	allocs map[string]*Placement
	// onHost[i] lists the allocations on Hosts[i], sorted by ID; the
	// placements are the ones in allocs.
	onHost [][]*Placement

	templates map[string]int
	classes   map[string]*Class
	live      []*Class
	keyBuf    []byte
	// The class index as dense arrays; see Slots.
	slots     []*Class
	slotSize  []int32
	slotGen   []uint32
	freeSlots []int
	id        uint64
	// changes counts the calls of reclass (see Changes).
	changes uint64
}

// New returns an empty fleet.
func New() *Fleet {
	return &Fleet{
		byID:      map[string]*Host{},
		allocs:    map[string]*Placement{},
		templates: map[string]int{},
		classes:   map[string]*Class{},
		id:        fleetIDs.Add(1),
	}
}

// AddHost adds a host (copied). Its GPUs must be free; use Apply to place
// allocations. cat, when not nil, resolves and checks GPU model names.
func (f *Fleet) AddHost(h *Host, cat *catalog.Catalog) error {
	c := h.clone()
	if err := c.validate(cat); err != nil {
		return err
	}
	if _, dup := f.byID[c.ID]; dup {
		return fmt.Errorf("host %s: duplicate id", c.ID)
	}
	c.UsedCPUMilli, c.UsedMemoryMiB, c.MetalAlloc, c.Allocs = 0, 0, "", 0
	for i := range c.GPUs {
		g := &c.GPUs[i]
		g.WholeAlloc, g.UsedMilli, g.UsedMemMiB, g.Shares, g.ShareTenant, g.MIGAuto = "", 0, 0, 0, "", false
		g.PartsUsed = 0
		// Instances that exist on the hardware without an allocation are
		// kept: they hold their slots until the operator removes them.
		kept := g.Instances[:0]
		for _, in := range g.Instances {
			if in.Alloc == "" {
				kept = append(kept, in)
			}
		}
		if len(kept) == 0 {
			kept = nil // canonical, as Release leaves it
		}
		g.Instances = kept
	}
	c.index = len(f.Hosts)
	f.Hosts = append(f.Hosts, c)
	f.onHost = append(f.onHost, nil)
	f.byID[c.ID] = c
	c.template = f.templateOf(c)
	f.reclass(c)
	return nil
}

// Host returns the host with the given ID, or nil.
func (f *Fleet) Host(id string) *Host { return f.byID[id] }

// Allocation returns the placement committed under id, or nil.
// It returns a copy: changing it does not change the fleet.
func (f *Fleet) Allocation(id string) *Placement {
	p := f.allocs[id]
	if p == nil {
		return nil
	}
	return p.clone()
}

func (p *Placement) clone() *Placement {
	c := *p
	c.Devices = append([]Device(nil), p.Devices...)
	return &c
}

// Allocations returns copies of all committed placements sorted by ID.
func (f *Fleet) Allocations() []*Placement {
	out := make([]*Placement, 0, len(f.allocs))
	for _, p := range f.allocs {
		out = append(out, p.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// HostAllocations returns the allocations on the host with the given ID,
// sorted by ID (nil for an unknown host or one without allocations). It
// copies nothing: the slice and the placements are owned by the fleet, must
// not be changed, and are valid until the next Apply or Release.
func (f *Fleet) HostAllocations(hostID string) []*Placement {
	h := f.byID[hostID]
	if h == nil {
		return nil
	}
	return f.onHost[h.index]
}

// HostAllocationsAt is HostAllocations for the host Hosts[i] (i must be
// in range), such as a member of a Class, without looking it up by ID.
func (f *Fleet) HostAllocationsAt(i int) []*Placement {
	return f.onHost[i]
}

// hostSlot returns where the allocation id is, or would go, in the sorted
// list of a host's allocations.
func hostSlot(list []*Placement, id string) (int, bool) {
	return slices.BinarySearchFunc(list, id, func(p *Placement, id string) int { return strings.Compare(p.ID, id) })
}

// SetState changes a host's scheduling state.
func (f *Fleet) SetState(id string, s HostState) error {
	h := f.byID[id]
	if h == nil {
		return fmt.Errorf("host %s: %w", id, ErrUnknown)
	}
	if !s.Valid() {
		return fmt.Errorf("host %s: unknown state %q", id, s)
	}
	h.State = s
	h.template = f.templateOf(h)
	f.reclass(h)
	return nil
}

// Apply commits a placement. It checks that everything the placement takes
// is free, and that a share goes only on a GPU without shares or with
// shares of the placement's tenant, and changes nothing when it returns an
// error.
func (f *Fleet) Apply(p *Placement) error {
	if p.ID == "" {
		return fmt.Errorf("apply: placement has no id")
	}
	if _, dup := f.allocs[p.ID]; dup {
		return fmt.Errorf("apply %s: allocation exists: %w", p.ID, ErrConflict)
	}
	h := f.byID[p.HostID]
	if h == nil {
		return fmt.Errorf("apply %s: host %s: %w", p.ID, p.HostID, ErrUnknown)
	}
	if err := check(h, p); err != nil {
		return fmt.Errorf("apply %s on %s: %w: %s", p.ID, h.ID, ErrConflict, err)
	}
	h.UsedCPUMilli += p.CPUMilli
	h.UsedMemoryMiB += p.MemoryMiB
	h.Allocs++
	if p.Metal {
		h.MetalAlloc = p.ID
	}
	for _, d := range p.Devices {
		g := &h.GPUs[d.GPU]
		switch d.Kind {
		case Whole:
			g.WholeAlloc = p.ID
		case Share:
			g.UsedMilli += d.Milli
			g.UsedMemMiB += d.MemoryMiB
			g.Shares++
			g.ShareTenant = p.Tenant
		case MIGSlice:
			if d.EnableMIG && !g.MIG {
				g.MIG, g.MIGAuto = true, true
			}
			g.Instances = append(g.Instances, MIGInstance{
				ProfileID: d.MIGProfileID, Start: d.MIGStart, Slots: d.MIGSlots,
				Slices: d.MIGSlices, Media: d.MIGMedia, Alloc: p.ID,
			})
		case Partition, VF:
			g.PartsUsed |= 1 << uint(d.Part)
		}
	}
	cp := *p
	cp.Devices = append([]Device(nil), p.Devices...)
	f.allocs[p.ID] = &cp
	list := f.onHost[h.index]
	i, _ := hostSlot(list, p.ID)
	f.onHost[h.index] = slices.Insert(list, i, &cp)
	f.reclass(h)
	return nil
}

// check reports why p does not fit h, or nil.
func check(h *Host, p *Placement) error {
	if h.MetalAlloc != "" {
		return fmt.Errorf("host is rented as bare metal")
	}
	if p.Metal && h.Allocs > 0 {
		return fmt.Errorf("bare metal needs an empty host")
	}
	if p.CPUMilli < 0 || p.MemoryMiB < 0 {
		return fmt.Errorf("negative cpu or memory")
	}
	if p.CPUMilli > h.FreeCPU() || p.MemoryMiB > h.FreeMemory() {
		return fmt.Errorf("not enough cpu or memory")
	}
	seen := map[int]bool{}
	for _, d := range p.Devices {
		if d.GPU < 0 || d.GPU >= len(h.GPUs) {
			return fmt.Errorf("no gpu %d", d.GPU)
		}
		g := &h.GPUs[d.GPU]
		if seen[d.GPU] {
			return fmt.Errorf("gpu %d used twice", d.GPU)
		}
		seen[d.GPU] = true
		switch d.Kind {
		case Whole:
			if !g.Empty() || g.MIG {
				return fmt.Errorf("gpu %d is not free", d.GPU)
			}
			if g.Split() {
				return fmt.Errorf("gpu %d is in %s: it is rented by its devices, not whole", d.GPU, g.modeString())
			}
		case Share:
			if g.WholeAlloc != "" || g.MIG || g.Split() {
				return fmt.Errorf("gpu %d cannot be shared", d.GPU)
			}
			if g.Shares > 0 && g.ShareTenant != p.Tenant {
				return fmt.Errorf("gpu %d: its shares belong to tenant %q, not %q", d.GPU, g.ShareTenant, p.Tenant)
			}
			if d.Milli <= 0 || d.Milli >= MilliPerGPU && d.Milli != MilliPerGPU || d.MemoryMiB < 0 {
				return fmt.Errorf("gpu %d: bad share %d milli %d MiB", d.GPU, d.Milli, d.MemoryMiB)
			}
			if g.UsedMilli+d.Milli > MilliPerGPU {
				return fmt.Errorf("gpu %d: %d milli free, %d wanted", d.GPU, MilliPerGPU-g.UsedMilli, d.Milli)
			}
			if g.MemoryMiB > 0 && g.UsedMemMiB+d.MemoryMiB > g.MemoryMiB {
				return fmt.Errorf("gpu %d: not enough gpu memory", d.GPU)
			}
		case MIGSlice:
			if err := checkMIG(g, d); err != nil {
				return fmt.Errorf("gpu %d: %s", d.GPU, err)
			}
		case Partition, VF:
			if err := checkPart(g, d); err != nil {
				return fmt.Errorf("gpu %d: %s", d.GPU, err)
			}
		default:
			return fmt.Errorf("gpu %d: unknown device kind %q", d.GPU, d.Kind)
		}
	}
	return nil
}

func checkMIG(g *GPU, d Device) error {
	if g.WholeAlloc != "" || g.Shares > 0 || g.Split() {
		return fmt.Errorf("gpu is in use")
	}
	if !g.MIG && !(d.EnableMIG && g.Empty()) {
		return fmt.Errorf("gpu is not in MIG mode")
	}
	if d.MIGSlots <= 0 || d.MIGStart < 0 || d.MIGStart+d.MIGSlots > catalog.MIGMemorySlots {
		return fmt.Errorf("bad MIG geometry start %d size %d", d.MIGStart, d.MIGSlots)
	}
	want := uint8((1<<d.MIGSlots)-1) << d.MIGStart
	if g.SlotMask()&want != 0 {
		return fmt.Errorf("MIG slots %d..%d are taken", d.MIGStart, d.MIGStart+d.MIGSlots-1)
	}
	if g.SlicesUsed()+d.MIGSlices > catalog.MIGComputeSlices {
		return fmt.Errorf("not enough MIG compute slices")
	}
	if d.MIGMedia && g.HasMedia() {
		return fmt.Errorf("a +me instance is already on the gpu")
	}
	return nil
}

// Release removes a committed allocation, restoring exactly the state the
// host had without it.
func (f *Fleet) Release(id string) error {
	p := f.allocs[id]
	if p == nil {
		return fmt.Errorf("release %s: allocation %w", id, ErrUnknown)
	}
	h := f.byID[p.HostID]
	unapply(h, p)
	delete(f.allocs, id)
	if i, ok := hostSlot(f.onHost[h.index], id); ok {
		list := slices.Delete(f.onHost[h.index], i, i+1)
		if len(list) == 0 {
			list = nil
		}
		f.onHost[h.index] = list
	}
	f.reclass(h)
	return nil
}

// unapply takes allocation p off host h's usage counters and GPUs.
func unapply(h *Host, p *Placement) {
	h.UsedCPUMilli -= p.CPUMilli
	h.UsedMemoryMiB -= p.MemoryMiB
	h.Allocs--
	if p.Metal {
		h.MetalAlloc = ""
	}
	for _, d := range p.Devices {
		g := &h.GPUs[d.GPU]
		switch d.Kind {
		case Whole:
			g.WholeAlloc = ""
		case Share:
			g.UsedMilli -= d.Milli
			g.UsedMemMiB -= d.MemoryMiB
			g.Shares--
			if g.Shares == 0 {
				g.ShareTenant = ""
			}
		case MIGSlice:
			for i, in := range g.Instances {
				if in.Alloc == p.ID && in.Start == d.MIGStart {
					g.Instances = append(g.Instances[:i], g.Instances[i+1:]...)
					if len(g.Instances) == 0 {
						// Keep the slice canonical (nil) so the state after a
						// release equals the state before the allocation.
						g.Instances = nil
					}
					break
				}
			}
			if g.MIGAuto && len(g.Instances) == 0 {
				g.MIG, g.MIGAuto = false, false
			}
		case Partition, VF:
			g.PartsUsed &^= 1 << uint(d.Part)
		}
	}
}

// HostWithout sets *dst to the state the host hostID would be in once the
// allocations ids (distinct, all on that host) were released, as Release
// would leave it, without changing the fleet. It lets a caller try
// evictions without copying the fleet or the host's allocations.
//
// dst is a scratch host: its GPU and MIG buffers are reused from call to
// call (never pass a host of a fleet), its Labels map is the fleet host's
// (read it, never change it), and it belongs to no fleet, so its Class is
// nil.
func (f *Fleet) HostWithout(dst *Host, hostID string, ids []string) error {
	h := f.byID[hostID]
	if h == nil {
		return fmt.Errorf("host %s: %w", hostID, ErrUnknown)
	}
	var seen map[string]bool
	if len(ids) > 16 {
		seen = make(map[string]bool, len(ids))
	}
	for i, id := range ids {
		if p := f.allocs[id]; p == nil || p.HostID != hostID {
			return fmt.Errorf("release %s on host %s: allocation %w", id, hostID, ErrUnknown)
		}
		dup := false
		if seen != nil {
			dup, seen[id] = seen[id], true
		} else {
			dup = slices.Contains(ids[:i], id)
		}
		if dup {
			return fmt.Errorf("release %s on host %s: listed twice", id, hostID)
		}
	}
	copyHost(dst, h)
	for _, id := range ids {
		unapply(dst, f.allocs[id])
	}
	return nil
}

// copyHost makes dst a copy of h outside any fleet, reusing dst's GPU and
// MIG instance buffers and sharing h's labels.
func copyHost(dst, h *Host) {
	old := dst.GPUs
	*dst = *h
	dst.class, dst.classPos = nil, 0
	gpus := old[:0]
	for i := range h.GPUs {
		g := h.GPUs[i]
		var buf []MIGInstance
		if i < len(old) {
			buf = old[i].Instances[:0]
		}
		if len(g.Instances) > 0 {
			g.Instances = append(buf, g.Instances...)
		} else {
			g.Instances = nil
		}
		gpus = append(gpus, g)
	}
	dst.GPUs = gpus
}

// Clone returns a deep copy of the fleet, with its own class index.
func (f *Fleet) Clone() *Fleet {
	c := New()
	c.Hosts = make([]*Host, len(f.Hosts))
	for i, h := range f.Hosts {
		hc := h.clone()
		c.Hosts[i] = hc
		c.byID[hc.ID] = hc
		hc.template = c.templateOf(hc)
		c.reclass(hc)
	}
	// Copy the allocations host by host, which keeps every host's list in
	// its order and, unlike walking the map, makes the copies in a fixed
	// order. Check verifies that the lists hold every allocation.
	c.onHost = make([][]*Placement, len(f.onHost))
	for i, list := range f.onHost {
		if len(list) == 0 {
			continue
		}
		cl := make([]*Placement, len(list))
		for j, p := range list {
			cp := p.clone()
			cl[j] = cp
			c.allocs[cp.ID] = cp
		}
		c.onHost[i] = cl
	}
	return c
}
