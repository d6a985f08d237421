package fleet

import (
	"fmt"

	"github.com/gpucloud/gpucloud/catalog"
)

// Check verifies the fleet's invariants from scratch: every usage counter
// equals the sum of the allocations, nothing is double-allocated, the shares
// of a GPU belong to one tenant (its ShareTenant), and MIG layouts are
// valid. Tests call it after every step.
func (f *Fleet) Check() error {
	use, err := f.recount()
	if err != nil {
		return err
	}
	if err := f.checkHostIndex(); err != nil {
		return err
	}
	for _, h := range f.Hosts {
		if err := f.checkHost(h, use[h.ID]); err != nil {
			return err
		}
	}
	return nil
}

// hostUsage is a host's use recounted from its allocations, per host and
// per GPU index.
type hostUsage struct {
	cpu, mem int64
	allocs   int
	metal    string
	whole    map[int]string
	milli    map[int]int
	gmem     map[int]int64
	shares   map[int]int
	// tenant is the tenant of the first share seen per GPU, and tenantOf
	// the share that was.
	tenant   map[int]string
	tenantOf map[int]string
	// parts marks the devices of split GPUs held.
	parts map[int]uint16
}

// recount sums the allocations per host, failing on an allocation of an
// unknown host, a GPU held whole twice, or shares of two tenants on a GPU.
func (f *Fleet) recount() (map[string]*hostUsage, error) {
	use := map[string]*hostUsage{}
	for _, h := range f.Hosts {
		use[h.ID] = &hostUsage{whole: map[int]string{}, milli: map[int]int{}, gmem: map[int]int64{}, shares: map[int]int{},
			tenant: map[int]string{}, tenantOf: map[int]string{}, parts: map[int]uint16{}}
	}
	for id, p := range f.allocs {
		u := use[p.HostID]
		if u == nil {
			return nil, fmt.Errorf("allocation %s on unknown host %s", id, p.HostID)
		}
		if err := u.add(id, p); err != nil {
			return nil, err
		}
	}
	return use, nil
}

// add counts allocation id, placement p, towards u.
func (u *hostUsage) add(id string, p *Placement) error {
	u.cpu += p.CPUMilli
	u.mem += p.MemoryMiB
	u.allocs++
	if p.Metal {
		u.metal = id
	}
	for _, d := range p.Devices {
		switch d.Kind {
		case Whole:
			if prev, ok := u.whole[d.GPU]; ok {
				return fmt.Errorf("host %s gpu %d held whole by %s and %s", p.HostID, d.GPU, prev, id)
			}
			u.whole[d.GPU] = id
		case Share:
			if first, ok := u.tenantOf[d.GPU]; !ok {
				u.tenant[d.GPU], u.tenantOf[d.GPU] = p.Tenant, id
			} else if u.tenant[d.GPU] != p.Tenant {
				return fmt.Errorf("host %s gpu %d: shares of tenants %q (%s) and %q (%s)", p.HostID, d.GPU, u.tenant[d.GPU], first, p.Tenant, id)
			}
			u.milli[d.GPU] += d.Milli
			u.gmem[d.GPU] += d.MemoryMiB
			u.shares[d.GPU]++
		case Partition, VF:
			bit := uint16(1) << uint(d.Part)
			if u.parts[d.GPU]&bit != 0 {
				return fmt.Errorf("host %s gpu %d: device %d held twice (%s)", p.HostID, d.GPU, d.Part, id)
			}
			u.parts[d.GPU] |= bit
		}
	}
	return nil
}

// checkHostIndex verifies the per-host allocation index: one sorted list
// per host that holds exactly the host's allocations.
func (f *Fleet) checkHostIndex() error {
	if len(f.onHost) != len(f.Hosts) {
		return fmt.Errorf("per-host allocation index has %d hosts, fleet %d", len(f.onHost), len(f.Hosts))
	}
	indexed := 0
	for i, list := range f.onHost {
		for j, p := range list {
			if f.allocs[p.ID] != p || p.HostID != f.Hosts[i].ID {
				return fmt.Errorf("host %s: allocation index lists %s, which is not an allocation of the host", f.Hosts[i].ID, p.ID)
			}
			if j > 0 && list[j-1].ID >= p.ID {
				return fmt.Errorf("host %s: allocation index not sorted at %s", f.Hosts[i].ID, p.ID)
			}
		}
		indexed += len(list)
	}
	if indexed != len(f.allocs) {
		return fmt.Errorf("allocation index lists %d allocations, fleet has %d", indexed, len(f.allocs))
	}
	return nil
}

// checkHost compares h's counters with its recounted use u, checks each
// GPU and that the host's class index is current.
func (f *Fleet) checkHost(h *Host, u *hostUsage) error {
	if h.UsedCPUMilli != u.cpu || h.UsedMemoryMiB != u.mem || h.Allocs != u.allocs || h.MetalAlloc != u.metal {
		return fmt.Errorf("host %s: counters disagree with allocations", h.ID)
	}
	if h.UsedCPUMilli > h.CPUMilli || h.UsedMemoryMiB > h.MemoryMiB {
		return fmt.Errorf("host %s: cpu or memory overcommitted", h.ID)
	}
	if h.MetalAlloc != "" && h.Allocs != 1 {
		return fmt.Errorf("host %s: bare metal host has neighbours", h.ID)
	}
	for i := range h.GPUs {
		if err := checkGPU(h, i, u); err != nil {
			return err
		}
		if err := f.checkMIG(h, i); err != nil {
			return err
		}
	}
	if h.class == nil || h.class.Key != f.stateKey(h) {
		return fmt.Errorf("host %s: class index is stale", h.ID)
	}
	if c := h.class; c.slot >= len(f.slots) || f.slots[c.slot] != c || int(f.slotSize[c.slot]) != c.Size() {
		return fmt.Errorf("host %s: class slot index is stale", h.ID)
	}
	return nil
}

// checkGPU compares GPU i's holder, share counters and share tenant with
// the recounted use u, and checks that it is neither overcommitted nor used
// in two ways (whole, shared, MIG) at once.
func checkGPU(h *Host, i int, u *hostUsage) error {
	g := &h.GPUs[i]
	if g.WholeAlloc != u.whole[i] {
		return fmt.Errorf("host %s gpu %d: whole holder %q, allocations say %q", h.ID, i, g.WholeAlloc, u.whole[i])
	}
	if g.UsedMilli != u.milli[i] || g.UsedMemMiB != u.gmem[i] || g.Shares != u.shares[i] {
		return fmt.Errorf("host %s gpu %d: share counters disagree", h.ID, i)
	}
	if g.PartsUsed != u.parts[i] {
		return fmt.Errorf("host %s gpu %d: devices held %b, allocations say %b", h.ID, i, g.PartsUsed, u.parts[i])
	}
	if g.PartsUsed != 0 && (!g.Split() || g.PartsUsed>>uint(g.Parts) != 0) {
		return fmt.Errorf("host %s gpu %d: devices held outside its %d", h.ID, i, g.Parts)
	}
	if g.ShareTenant != u.tenant[i] {
		return fmt.Errorf("host %s gpu %d: share tenant %q, allocations say %q", h.ID, i, g.ShareTenant, u.tenant[i])
	}
	if g.UsedMilli > MilliPerGPU || (g.MemoryMiB > 0 && g.UsedMemMiB > g.MemoryMiB) {
		return fmt.Errorf("host %s gpu %d: overcommitted share", h.ID, i)
	}
	kinds := 0
	if g.WholeAlloc != "" {
		kinds++
	}
	if g.Shares > 0 {
		kinds++
	}
	if len(g.Instances) > 0 {
		kinds++
	}
	if g.PartsUsed != 0 {
		kinds++
	}
	if kinds > 1 || g.Split() && (g.WholeAlloc != "" || g.Shares > 0 || g.MIG) {
		return fmt.Errorf("host %s gpu %d: mixes whole, shared and MIG use", h.ID, i)
	}
	return nil
}

// checkMIG verifies GPU i's MIG layout: instances only in MIG mode, inside
// the memory slots without overlap, within the compute and media budgets,
// and each held by an allocation of the host.
func (f *Fleet) checkMIG(h *Host, i int) error {
	g := &h.GPUs[i]
	if len(g.Instances) > 0 && !g.MIG {
		return fmt.Errorf("host %s gpu %d: MIG instances without MIG mode", h.ID, i)
	}
	var mask uint8
	slices, media := 0, 0
	for _, in := range g.Instances {
		m := uint8((1<<in.Slots)-1) << in.Start
		if in.Start < 0 || in.Start+in.Slots > catalog.MIGMemorySlots || mask&m != 0 {
			return fmt.Errorf("host %s gpu %d: overlapping or out-of-range MIG instance at %d", h.ID, i, in.Start)
		}
		mask |= m
		slices += in.Slices
		if in.Media {
			media++
		}
		if in.Alloc != "" {
			p := f.allocs[in.Alloc]
			if p == nil || p.HostID != h.ID {
				return fmt.Errorf("host %s gpu %d: MIG instance of unknown allocation %s", h.ID, i, in.Alloc)
			}
		}
	}
	if slices > catalog.MIGComputeSlices || media > 1 {
		return fmt.Errorf("host %s gpu %d: MIG compute or media budget exceeded", h.ID, i)
	}
	return nil
}
