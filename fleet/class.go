package fleet

import (
	"encoding/binary"
	"sort"
	"strings"
	"sync/atomic"
)

// classIDs numbers classes across all fleets of the process, so that a
// class ID names one immutable host state even when an engine's caches see
// several fleets (clones, tests).
var classIDs atomic.Int64

// Class is a set of hosts whose placement-relevant state is identical: the
// same template (zone, labels, state, capacities, GPU models and NVLink
// layout) and the same usage of CPU, memory and every GPU (including the
// tenant whose shares a GPU holds). Any request fits every member of a
// class or none, with the same score, so the engine scores a class once and
// picks among its members. Classes are immutable once made: a host whose
// state changes moves to another class.
type Class struct {
	// ID is unique in the process.
	ID int
	// Key encodes the state; equal keys mean identical placement state.
	Key string
	// Rep is a host of the class; read it, never change it.
	Rep     *Host
	members []int
	livePos int
	slot    int
}

// Members returns the indexes (into Fleet.Hosts) of the class's hosts. The
// slice is owned by the fleet and valid until the next change.
func (c *Class) Members() []int { return c.members }

// Size is the number of hosts in the class.
func (c *Class) Size() int { return len(c.members) }

// Classes returns the classes that have at least one host. The slice is owned
// by the fleet and valid until the next change.
func (f *Fleet) Classes() []*Class { return f.live }

// Slots exposes the class index as dense arrays, for scans that must be
// fast: slot i holds class classes[i] (nil when free) with sizes[i] hosts;
// gens[i] changes whenever the slot gets a new class, so a cache keyed by
// (slot, generation) is never stale. The slices are owned by the fleet and
// valid until the next change. Slots are reused, so their number stays near
// the peak number of live classes.
func (f *Fleet) Slots() (classes []*Class, sizes []int32, gens []uint32) {
	return f.slots, f.slotSize, f.slotGen
}

// Slot is the class's position in the arrays of Fleet.Slots.
func (c *Class) Slot() int { return c.slot }

// ID identifies the fleet in the process; a Clone has another. Caches keyed
// by class slots must be dropped when the fleet they were built on changes.
func (f *Fleet) ID() uint64 { return f.id }

var fleetIDs atomic.Uint64

// templateOf interns the static, placement-relevant facts of a host.
func (f *Fleet) templateOf(h *Host) int {
	var b strings.Builder
	b.WriteString(h.Zone)
	b.WriteByte(0)
	b.WriteString(string(h.State))
	b.WriteByte(0)
	keys := make([]string, 0, len(h.Labels))
	for k := range h.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(h.Labels[k])
		b.WriteByte(0)
	}
	var buf [binary.MaxVarintLen64]byte
	put := func(v int64) { b.Write(buf[:binary.PutVarint(buf[:], v)]) }
	put(h.CPUMilli)
	put(h.MemoryMiB)
	for i := range h.GPUs {
		g := &h.GPUs[i]
		b.WriteString(g.Model)
		b.WriteByte(0)
		put(g.MemoryMiB)
		put(int64(g.Island))
		if g.Partition != "" || g.VFs > 0 {
			// The operator's AMD mode decides which requests a GPU takes.
			b.WriteString(g.Partition)
			b.WriteByte('/')
			b.WriteString(g.MemoryPartition)
			b.WriteByte(0)
			put(int64(g.VFs))
		}
	}
	key := b.String()
	id, ok := f.templates[key]
	if !ok {
		id = len(f.templates)
		f.templates[key] = id
	}
	return id
}

// stateKey encodes a host's template and usage.
func (f *Fleet) stateKey(h *Host) string {
	b := f.keyBuf[:0]
	b = binary.AppendUvarint(b, uint64(h.template))
	b = binary.AppendVarint(b, h.UsedCPUMilli)
	b = binary.AppendVarint(b, h.UsedMemoryMiB)
	flags := byte(0)
	if h.MetalAlloc != "" {
		flags |= 1
	}
	if h.Allocs > 0 {
		flags |= 2
	}
	b = append(b, flags)
	for i := range h.GPUs {
		g := &h.GPUs[i]
		gf := byte(0)
		if g.WholeAlloc != "" {
			gf |= 1
		}
		if g.MIG {
			gf |= 2
		}
		if g.Shares > 0 {
			gf |= 4
			// Only the tenant of a GPU's shares may add one, so GPUs of
			// different tenants do not take the same requests. Without a
			// tenant (trace replays) the key stays as it was, not a byte
			// longer.
			if g.ShareTenant != "" {
				gf |= 8
			}
		}
		if g.PartsUsed != 0 {
			gf |= 16
		}
		b = append(b, gf)
		if g.Shares > 0 {
			b = binary.AppendUvarint(b, uint64(g.UsedMilli))
			b = binary.AppendVarint(b, g.UsedMemMiB)
			if g.ShareTenant != "" {
				b = binary.AppendUvarint(b, uint64(len(g.ShareTenant)))
				b = append(b, g.ShareTenant...)
			}
		}
		if g.PartsUsed != 0 {
			// Which devices are held, not only how many: the device index
			// goes into the placement.
			b = binary.AppendUvarint(b, uint64(g.PartsUsed))
		}
		if g.MIG {
			// Instances in slot order, so equal layouts give equal keys.
			var bySlot [8]byte
			for _, in := range g.Instances {
				if in.Start >= 0 && in.Start < 8 {
					bySlot[in.Start] = byte(in.ProfileID + 1)
				}
			}
			b = append(b, bySlot[:]...)
		}
	}
	f.keyBuf = b
	return string(b)
}

// reclass moves h into the class matching its current state.
func (f *Fleet) reclass(h *Host) {
	f.changes++
	key := f.stateKey(h)
	if h.class != nil {
		if h.class.Key == key {
			return
		}
		f.leave(h)
	}
	c := f.classes[key]
	if c == nil {
		c = &Class{ID: int(classIDs.Add(1)), Key: key, Rep: h, livePos: -1}
		f.classes[key] = c
	}
	if len(c.members) == 0 {
		c.Rep = h
		c.livePos = len(f.live)
		f.live = append(f.live, c)
		f.takeSlot(c)
	}
	h.classPos = len(c.members)
	c.members = append(c.members, h.index)
	f.slotSize[c.slot]++
	h.class = c
}

// takeSlot gives a new class a free slot, bumping its generation.
func (f *Fleet) takeSlot(c *Class) {
	if n := len(f.freeSlots); n > 0 {
		c.slot = f.freeSlots[n-1]
		f.freeSlots = f.freeSlots[:n-1]
	} else {
		c.slot = len(f.slots)
		f.slots = append(f.slots, nil)
		f.slotSize = append(f.slotSize, 0)
		f.slotGen = append(f.slotGen, 0)
	}
	f.slots[c.slot] = c
	f.slotSize[c.slot] = 0
	f.slotGen[c.slot]++
}

// leave removes h from its class, dropping the class when it empties.
func (f *Fleet) leave(h *Host) {
	c := h.class
	h.class = nil
	i, last := h.classPos, len(c.members)-1
	c.members[i] = c.members[last]
	f.Hosts[c.members[i]].classPos = i
	c.members = c.members[:last]
	f.slotSize[c.slot]--
	if len(c.members) > 0 {
		if c.Rep == h {
			c.Rep = f.Hosts[c.members[0]]
		}
		return
	}
	end := len(f.live) - 1
	moved := f.live[end]
	f.live[c.livePos] = moved
	moved.livePos = c.livePos
	f.live = f.live[:end]
	c.livePos = -1
	f.slots[c.slot] = nil
	f.freeSlots = append(f.freeSlots, c.slot)
	delete(f.classes, c.Key)
}
