package fleet

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
)

// dump renders the exported state of every host and allocation in a
// canonical form: MIG instances in slot order, nil and empty slices alike.
func dump(f *Fleet) string {
	var b strings.Builder
	for _, h := range f.Hosts {
		keys := make([]string, 0, len(h.Labels))
		for k := range h.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "host %s zone=%s rack=%s state=%s cpu=%d/%d mem=%d/%d metal=%q allocs=%d labels=",
			h.ID, h.Zone, h.Rack, h.State, h.UsedCPUMilli, h.CPUMilli, h.UsedMemoryMiB, h.MemoryMiB, h.MetalAlloc, h.Allocs)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s,", k, h.Labels[k])
		}
		b.WriteByte('\n')
		for _, g := range h.GPUs {
			fmt.Fprintf(&b, "  gpu %d %s %s mem=%d isl=%d mig=%v auto=%v whole=%q milli=%d gmem=%d shares=%d tenant=%q",
				g.Index, g.UUID, g.Model, g.MemoryMiB, g.Island, g.MIG, g.MIGAuto, g.WholeAlloc, g.UsedMilli, g.UsedMemMiB, g.Shares, g.ShareTenant)
			if g.Partition != "" || g.VFs > 0 {
				fmt.Fprintf(&b, " mode=%s parts=%d used=%b", g.ModeString(), g.Parts, g.PartsUsed)
			}
			in := append([]MIGInstance(nil), g.Instances...)
			sort.Slice(in, func(i, j int) bool { return in[i].Start < in[j].Start })
			for _, x := range in {
				fmt.Fprintf(&b, " [%+v]", x)
			}
			b.WriteByte('\n')
		}
	}
	for _, p := range f.Allocations() {
		fmt.Fprintf(&b, "alloc %+v\n", *p)
	}
	return b.String()
}

// checkClasses verifies the class index through the exported API: every
// host is in exactly one live class, which lists it, and hosts of a class
// have equal placement state.
func checkClasses(t *testing.T, f *Fleet) {
	t.Helper()
	if err := f.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	seen := map[int]bool{}
	for _, c := range f.Classes() {
		if c.Size() == 0 {
			t.Fatalf("class %d is live but empty", c.ID)
		}
		if c.Rep.Class() != c {
			t.Fatalf("class %d: representative %s is in class %d", c.ID, c.Rep.ID, c.Rep.Class().ID)
		}
		for _, i := range c.Members() {
			if seen[i] {
				t.Fatalf("host index %d in two classes", i)
			}
			seen[i] = true
			h := f.Hosts[i]
			if h.Index() != i || h.Class() != c {
				t.Fatalf("host %s: index %d class %p, listed at %d in class %d", h.ID, h.Index(), h.Class(), i, c.ID)
			}
			if f.stateKey(h) != c.Key {
				t.Fatalf("host %s: key differs from its class", h.ID)
			}
		}
	}
	if len(seen) != len(f.Hosts) {
		t.Fatalf("classes list %d hosts, fleet has %d", len(seen), len(f.Hosts))
	}
}

func whole(id, host string, gpus ...int) *Placement {
	p := &Placement{ID: id, HostID: host, CPUMilli: 1000, MemoryMiB: 1024}
	for _, g := range gpus {
		p.Devices = append(p.Devices, Device{GPU: g, Kind: Whole})
	}
	return p
}

func share(id, host string, gpu, milli int, mem int64) *Placement {
	return &Placement{ID: id, HostID: host, CPUMilli: 500, MemoryMiB: 512,
		Devices: []Device{{GPU: gpu, Kind: Share, Milli: milli, MemoryMiB: mem}}}
}

// mig places an H100 instance of the profile with the given ID.
func mig(id, host string, gpu, profileID, start int, enable bool) *Placement {
	m, _ := catalog.Default().Model("H100-80GB-SXM")
	pr := m.ProfileByID(profileID)
	return &Placement{ID: id, HostID: host, CPUMilli: 100, MemoryMiB: 100,
		Devices: []Device{{GPU: gpu, Kind: MIGSlice, MIGProfileID: pr.ID, MIGProfile: pr.Name,
			MIGStart: start, MIGSlots: pr.MemorySlots, MIGSlices: pr.ComputeSlices,
			MIGMedia: pr.MediaExtensions, EnableMIG: enable}}}
}

func TestMockHosts(t *testing.T) {
	h := MockHost("h1", "H100", 8)
	if len(h.GPUs) != 8 || h.GPUs[3].Model != "H100-80GB-SXM" || h.GPUs[3].MemoryMiB != 80*catalog.GiB ||
		h.GPUs[3].Island != -1 || h.GPUs[3].Index != 3 || h.GPUs[3].UUID != "GPU-h1-3" {
		t.Errorf("MockHost = %+v", h)
	}
	if h.CPUMilli != 8*MockCPUPerGPU || h.Labels["driver"] != MockDriver || h.State != Schedulable {
		t.Errorf("MockHost resources = %+v", h)
	}
	n := MockNVLinkHost("h2", "H100", 4, 4)
	for i, g := range n.GPUs {
		if g.Island != i/4 {
			t.Errorf("gpu %d island %d", i, g.Island)
		}
	}
	c := MockCPUHost("c")
	if len(c.GPUs) != 0 || c.CPUMilli != MockCPUPerGPU {
		t.Errorf("MockCPUHost = %+v", c)
	}
	f := MockFleet(h, n, c)
	checkClasses(t, f)
	// Fixtures are copied in: changing them afterwards changes nothing.
	h.GPUs[0].Model = "T4"
	h.Labels["driver"] = "1"
	if got := f.Host("h1"); got.GPUs[0].Model != "H100-80GB-SXM" || got.Labels["driver"] != MockDriver {
		t.Error("AddHost kept a reference to the caller's host")
	}
}

func TestAddHostValidation(t *testing.T) {
	cat := catalog.Default()
	f := New()
	if err := f.AddHost(MockHost("h1", "V100M16", 2), cat); err != nil {
		t.Fatal(err)
	}
	if got := f.Host("h1").GPUs[1].Model; got != "V100-16GB" {
		t.Errorf("alias not canonicalized: %s", got)
	}
	bad := []struct {
		name string
		edit func(h *Host)
		has  string
	}{
		{"duplicate", func(h *Host) {}, "duplicate id"},
		{"no id", func(h *Host) { h.ID = "" }, "no id"},
		{"negative cpu", func(h *Host) { h.ID = "x"; h.CPUMilli = -1 }, "negative"},
		{"bad state", func(h *Host) { h.ID = "x"; h.State = "gone" }, "unknown state"},
		{"bad index", func(h *Host) { h.ID = "x"; h.GPUs[1].Index = 0 }, "has index 0"},
		{"unknown model", func(h *Host) { h.ID = "x"; h.GPUs[0].Model = "X100" }, "unknown gpu model"},
		{"mig on L40S", func(h *Host) { h.ID = "x"; h.GPUs[0].Model = "L40S"; h.GPUs[0].MIG = true }, "has no MIG"},
	}
	for _, c := range bad {
		h := MockHost("h1", "V100M16", 2)
		c.edit(h)
		err := f.AddHost(h, cat)
		if err == nil || !strings.Contains(err.Error(), c.has) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.has)
		}
	}
	if len(f.Hosts) != 1 {
		t.Errorf("failed AddHost added hosts: %d", len(f.Hosts))
	}
	// An empty state defaults to schedulable; usage is reset.
	h := MockHost("h2", "T4", 1)
	h.State = ""
	h.UsedCPUMilli, h.Allocs, h.GPUs[0].WholeAlloc = 5, 3, "ghost"
	if err := f.AddHost(h, cat); err != nil {
		t.Fatal(err)
	}
	got := f.Host("h2")
	if got.State != Schedulable || got.UsedCPUMilli != 0 || got.Allocs != 0 || got.GPUs[0].WholeAlloc != "" {
		t.Errorf("AddHost did not reset usage: %+v", got)
	}
	checkClasses(t, f)
}

func TestApplyRelease(t *testing.T) {
	f := MockFleet(MockHost("h1", "H100", 4), MockHost("h2", "L40S", 2))
	before := dump(f)
	steps := []*Placement{
		whole("w", "h1", 0, 1),
		mig("m1", "h1", 2, 9, 0, true),
		mig("m2", "h1", 2, 19, 4, false),
		share("s1", "h2", 0, 250, 1024),
		share("s2", "h2", 0, 750, 2048),
		{ID: "cpu", HostID: "h2", CPUMilli: 2000, MemoryMiB: 4096},
	}
	for _, p := range steps {
		if err := f.Apply(p); err != nil {
			t.Fatalf("Apply %s: %v", p.ID, err)
		}
		checkClasses(t, f)
	}
	h1, h2 := f.Host("h1"), f.Host("h2")
	if h1.GPUs[0].WholeAlloc != "w" || !h1.GPUs[2].MIG || !h1.GPUs[2].MIGAuto || len(h1.GPUs[2].Instances) != 2 {
		t.Errorf("h1 after apply: %+v", h1.GPUs)
	}
	if g := h2.GPUs[0]; g.UsedMilli != 1000 || g.Shares != 2 || g.UsedMemMiB != 3072 || g.FreeMilli() != 0 {
		t.Errorf("h2 gpu0 after apply: %+v", g)
	}
	if h2.Allocs != 3 || h2.UsedCPUMilli != 3000 {
		t.Errorf("h2 counters: %+v", h2)
	}
	if g := &h1.GPUs[2]; g.SlotMask() != 0b0001_1111 || g.SlicesUsed() != 4 || g.FreeMilli() != 1000-4*1000/7 ||
		g.CountProfile(9) != 1 || g.HasMedia() {
		t.Errorf("h1 gpu2 MIG state: mask %b slices %d", g.SlotMask(), g.SlicesUsed())
	}
	if got := f.Allocation("m1").GPUMilli(); got != 3*1000/7 {
		t.Errorf("GPUMilli(3g) = %d", got)
	}
	if got := f.Allocation("w").GPUMilli(); got != 2000 {
		t.Errorf("GPUMilli(2 whole) = %d", got)
	}
	// The fleet keeps its own copy of the placement.
	steps[0].Devices[0].GPU = 3
	if f.Allocation("w").Devices[0].GPU != 0 {
		t.Error("Apply kept the caller's Devices slice")
	}
	// Releasing in another order restores the original state exactly; the
	// auto-enabled MIG GPU leaves MIG mode with its last instance.
	for _, id := range []string{"m1", "s1", "cpu", "w", "m2", "s2"} {
		if err := f.Release(id); err != nil {
			t.Fatalf("Release %s: %v", id, err)
		}
		checkClasses(t, f)
	}
	if after := dump(f); after != before {
		t.Errorf("state after release differs:\n%s\nwant\n%s", after, before)
	}
	if err := f.Release("w"); !errors.Is(err, ErrUnknown) {
		t.Errorf("double release: %v", err)
	}
}

func TestApplyConflicts(t *testing.T) {
	base := func() *Fleet {
		h := MockHost("h1", "H100", 4)
		h.GPUs[3].MIG = true // operator-enabled
		f := MockFleet(h, MockHost("h2", "L40S", 1))
		for _, p := range []*Placement{
			whole("w", "h1", 0),
			mig("m3g", "h1", 3, 9, 0, false),
			mig("mme", "h1", 3, 20, 4, false),
			share("s", "h2", 0, 600, 40*catalog.GiB),
		} {
			if err := f.Apply(p); err != nil {
				t.Fatalf("setup %s: %v", p.ID, err)
			}
		}
		return f
	}
	big := whole("big", "h1", 1)
	big.CPUMilli = 1 << 40
	negative := whole("neg", "h1", 1)
	negative.MemoryMiB = -1
	twice := whole("twice", "h1", 1, 1)
	weird := whole("weird", "h1", 1)
	weird.Devices[0].Kind = "vgpu"
	cases := []struct {
		name string
		p    *Placement
		err  error
		has  string
	}{
		{"no id", whole("", "h1", 1), nil, "no id"},
		{"existing id", whole("w", "h1", 1), ErrConflict, "allocation exists"},
		{"unknown host", whole("x", "h9", 0), ErrUnknown, "host h9"},
		{"gpu taken", whole("x", "h1", 0), ErrConflict, "gpu 0 is not free"},
		{"whole on MIG gpu", whole("x", "h1", 3), ErrConflict, "gpu 3 is not free"},
		{"no such gpu", whole("x", "h1", 4), ErrConflict, "no gpu 4"},
		{"gpu twice", twice, ErrConflict, "used twice"},
		{"cpu", big, ErrConflict, "not enough cpu"},
		{"negative", negative, ErrConflict, "negative"},
		{"unknown kind", weird, ErrConflict, "unknown device kind"},
		{"metal on busy host", &Placement{ID: "x", HostID: "h1", Metal: true}, ErrConflict, "needs an empty host"},
		{"share over 1000", share("x", "h2", 0, 500, 1), ErrConflict, "400 milli free"},
		{"share over memory", share("x", "h2", 0, 100, 9*catalog.GiB), ErrConflict, "not enough gpu memory"},
		{"share of 0", share("x", "h2", 0, 0, 1), ErrConflict, "bad share"},
		{"share on whole gpu", share("x", "h1", 0, 100, 1), ErrConflict, "cannot be shared"},
		{"share on MIG gpu", share("x", "h1", 3, 100, 1), ErrConflict, "cannot be shared"},
		{"mig on whole gpu", mig("x", "h1", 0, 19, 0, true), ErrConflict, "in use"},
		{"mig without MIG mode", mig("x", "h1", 1, 19, 0, false), ErrConflict, "not in MIG mode"},
		{"mig overlap", mig("x", "h1", 3, 19, 3, false), ErrConflict, "slots 3..3 are taken"},
		{"mig out of range", mig("x", "h1", 3, 15, 7, false), ErrConflict, "bad MIG geometry"},
		{"second +me", mig("x", "h1", 3, 20, 5, false), ErrConflict, "+me"},
	}
	for _, c := range cases {
		f := base()
		before := dump(f)
		err := f.Apply(c.p)
		if err == nil || c.err != nil && !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.has) {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.err, c.has)
		}
		if dump(f) != before {
			t.Errorf("%s: failed Apply changed the fleet", c.name)
		}
		checkClasses(t, f)
	}
	// The compute budget: a 4g and a 3g fill all 7 slices, then even a
	// slot that is free geometrically has no compute left.
	f := MockFleet(MockHost("h", "H100", 1))
	for _, p := range []*Placement{mig("a", "h", 0, 5, 0, true), mig("b", "h", 0, 19, 4, false), mig("c", "h", 0, 19, 5, false), mig("d", "h", 0, 19, 6, false)} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Apply(mig("e", "h", 0, 19, 7, false)); err == nil || !strings.Contains(err.Error(), "geometry") && !strings.Contains(err.Error(), "compute") {
		t.Errorf("eighth slice: %v", err)
	}
	// Metal on an empty host takes it whole; nothing can join it.
	f = MockFleet(MockHost("h", "H100", 2))
	if err := f.Apply(&Placement{ID: "metal", HostID: "h", Metal: true, CPUMilli: 1, Devices: []Device{{GPU: 0, Kind: Whole}, {GPU: 1, Kind: Whole}}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(&Placement{ID: "cpu", HostID: "h", CPUMilli: 1}); err == nil || !strings.Contains(err.Error(), "bare metal") {
		t.Errorf("neighbour of metal: %v", err)
	}
	checkClasses(t, f)
}

func TestSetState(t *testing.T) {
	f := MockFleet(MockHost("a", "T4", 1), MockHost("b", "T4", 1))
	if len(f.Classes()) != 1 {
		t.Fatalf("identical hosts in %d classes", len(f.Classes()))
	}
	if err := f.SetState("a", Cordoned); err != nil {
		t.Fatal(err)
	}
	if len(f.Classes()) != 2 || f.Host("a").State != Cordoned {
		t.Errorf("cordon did not reclass")
	}
	checkClasses(t, f)
	if err := f.SetState("zz", Cordoned); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown host: %v", err)
	}
	if err := f.SetState("a", "broken"); err == nil {
		t.Error("unknown state accepted")
	}
	if err := f.SetState("a", Schedulable); err != nil {
		t.Fatal(err)
	}
	if len(f.Classes()) != 1 {
		t.Errorf("uncordon left %d classes", len(f.Classes()))
	}
	checkClasses(t, f)
}

func TestClasses(t *testing.T) {
	var hosts []*Host
	for i := 0; i < 6; i++ {
		hosts = append(hosts, MockHost(fmt.Sprintf("h%d", i), "H100", 2))
	}
	// A different rack or UUID does not change placement state; a label does.
	hosts[1].Rack = "rack-9"
	hosts[2].Labels["interconnect"] = "infiniband"
	f := MockFleet(hosts...)
	if n := len(f.Classes()); n != 2 {
		t.Fatalf("%d classes, want 2", n)
	}
	// The same usage on two hosts puts them in one class again.
	for _, h := range []string{"h3", "h4"} {
		if err := f.Apply(whole("w-"+h, h, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if f.Host("h3").Class() != f.Host("h4").Class() || f.Host("h3").Class() == f.Host("h0").Class() {
		t.Error("hosts with equal usage not in one class")
	}
	// The same MIG layout, reached in different orders, is one class.
	if err := f.Apply(mig("x1", "h0", 0, 19, 0, true)); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(mig("x2", "h0", 0, 19, 1, false)); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(mig("y1", "h5", 0, 19, 1, true)); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(mig("y2", "h5", 0, 19, 0, false)); err != nil {
		t.Fatal(err)
	}
	if f.Host("h0").Class() != f.Host("h5").Class() {
		t.Error("equal MIG layouts in different classes")
	}
	checkClasses(t, f)
	for _, id := range []string{"x1", "w-h3", "y2", "x2", "w-h4", "y1"} {
		if err := f.Release(id); err != nil {
			t.Fatal(err)
		}
		checkClasses(t, f)
	}
	if n := len(f.Classes()); n != 2 {
		t.Errorf("%d classes after releasing everything, want 2", n)
	}
}

// TestSlots: the dense class index agrees with the classes, reuses freed
// slots, and bumps a slot's generation whenever it gets a new class, so
// caches keyed by (slot, generation) never see a stale class.
func TestSlots(t *testing.T) {
	f := MockFleet(MockHost("a", "T4", 1), MockHost("b", "T4", 1), MockHost("c", "L40S", 1))
	check := func() {
		t.Helper()
		if err := f.Check(); err != nil {
			t.Fatal(err)
		}
	}
	check()
	classes, sizes, gens := f.Slots()
	if len(classes) != 2 || sizes[f.Host("a").Class().Slot()] != 2 {
		t.Fatalf("slots %v sizes %v", classes, sizes)
	}
	slotA, genA := f.Host("a").Class().Slot(), gens[f.Host("a").Class().Slot()]
	// Move both T4 hosts to a new state: their old class dies, its slot is
	// reused by the new class with a new generation.
	for _, h := range []string{"a", "b"} {
		if err := f.Apply(&Placement{ID: "p-" + h, HostID: h, Devices: []Device{{GPU: 0, Kind: Whole}}}); err != nil {
			t.Fatal(err)
		}
		check()
	}
	classes, _, _ = f.Slots()
	if len(classes) != 3 || classes[slotA] != nil {
		t.Fatalf("after the moves: slots %v, want 3 with slot %d free", classes, slotA)
	}
	// The next new class takes a freed slot, with a new generation.
	_, _, gens = f.Slots()
	before := append([]uint32(nil), gens...)
	_ = genA
	if err := f.Apply(&Placement{ID: "p-c", HostID: "c", Devices: []Device{{GPU: 0, Kind: Whole}}}); err != nil {
		t.Fatal(err)
	}
	check()
	classes, sizes, gens = f.Slots()
	slot := f.Host("c").Class().Slot()
	if len(classes) != 3 || gens[slot] <= before[slot] {
		t.Fatalf("slots %d; slot %d generation %d, was %d: a freed slot must be reused with a new generation", len(classes), slot, gens[slot], before[slot])
	}
	for i, c := range classes {
		if c == nil && sizes[i] != 0 || c != nil && int(sizes[i]) != c.Size() {
			t.Fatalf("slot %d: class %v size %d", i, c, sizes[i])
		}
	}
	// A clone has its own identity.
	if g := f.Clone(); g.ID() == f.ID() {
		t.Fatal("clone shares the fleet ID")
	}
}

func TestCloneIsDeep(t *testing.T) {
	h := MockHost("h1", "H100", 4)
	h.GPUs[1].MIG = true
	// Instances of allocations are dropped by AddHost; kept ones stay.
	h.GPUs[1].Instances = []MIGInstance{{ProfileID: 19, Start: 6, Slots: 1, Slices: 1, Alloc: "old"}}
	h.GPUs[2].MIG = true
	h.GPUs[2].Instances = []MIGInstance{{ProfileID: 19, Start: 0, Slots: 1, Slices: 1}}
	f := MockFleet(h, MockHost("h2", "L40S", 2))
	if n := len(f.Host("h1").GPUs[2].Instances); n != 1 {
		t.Fatalf("unallocated instance not kept: %d", n)
	}
	if n := len(f.Host("h1").GPUs[1].Instances); n != 0 {
		t.Fatalf("allocated instance kept: %d", n)
	}
	if err := f.Apply(whole("w", "h1", 0)); err != nil {
		t.Fatal(err)
	}
	orig := dump(f)
	c := f.Clone()
	if dump(c) != orig {
		t.Fatal("clone differs from original")
	}
	checkClasses(t, c)

	// Mutate the clone every way there is.
	for _, p := range []*Placement{mig("cm", "h1", 1, 19, 0, false), mig("cm2", "h1", 2, 9, 4, false), share("cs", "h2", 0, 100, 1), whole("cw", "h2", 1)} {
		if err := c.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release("w"); err != nil {
		t.Fatal(err)
	}
	if err := c.SetState("h2", Unhealthy); err != nil {
		t.Fatal(err)
	}
	c.Host("h1").Labels["driver"] = "1.0"
	c.Host("h1").GPUs[3].Model = "T4"
	c.Allocation("cm").Devices[0].GPU = 3
	if got := dump(f); got != orig {
		t.Errorf("mutating the clone changed the original:\n%s\nwant\n%s", got, orig)
	}
	checkClasses(t, f)

	// And the other way round: the original's changes leave the clone alone.
	c = f.Clone()
	cl := dump(c)
	if err := f.Apply(mig("om", "h1", 1, 19, 3, false)); err != nil {
		t.Fatal(err)
	}
	if err := f.Apply(mig("cm", "h1", 2, 19, 5, false)); err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(mig("cm", "h1", 1, 19, 0, false)); err != nil {
		t.Fatal(err)
	}
	if got := c.Host("h1").GPUs[1].Instances; len(got) != 1 || got[0].Start != 0 || got[0].Alloc != "cm" {
		t.Errorf("clone's MIG instances overwritten by the original's: %+v", got)
	}
	if err := c.Release("cm"); err != nil {
		t.Fatal(err)
	}
	if got := dump(c); got != cl {
		t.Errorf("original's changes leaked into the clone:\n%s\nwant\n%s", got, cl)
	}
	checkClasses(t, c)
	checkClasses(t, f)
}

func TestCheckCatchesCorruption(t *testing.T) {
	f := MockFleet(MockHost("h", "H100", 2))
	if err := f.Apply(whole("w", "h", 0)); err != nil {
		t.Fatal(err)
	}
	corrupt := []func(h *Host){
		func(h *Host) { h.UsedCPUMilli++ },
		func(h *Host) { h.GPUs[1].WholeAlloc = "ghost" },
		func(h *Host) { h.GPUs[1].UsedMilli = 10 },
		func(h *Host) {
			h.GPUs[1].Instances = []MIGInstance{{ProfileID: 19, Start: 0, Slots: 1, Slices: 1}}
		},
		func(h *Host) {
			h.GPUs[1].MIG = true
			h.GPUs[1].Instances = []MIGInstance{{Start: 0, Slots: 4, Slices: 3}, {Start: 2, Slots: 2, Slices: 2}}
		},
		func(h *Host) { h.Zone = "elsewhere"; h.GPUs[1].MIG = true },
	}
	for i, fn := range corrupt {
		c := f.Clone()
		fn(c.Host("h"))
		if err := c.Check(); err == nil {
			t.Errorf("corruption %d not detected", i)
		}
	}
	if err := f.Check(); err != nil {
		t.Error(err)
	}
}

// TestHostHelpers covers the GPU accessors on their own.
func TestHostHelpers(t *testing.T) {
	g := GPU{MIG: true, Instances: []MIGInstance{
		{ProfileID: 20, Start: 6, Slots: 1, Slices: 1, Media: true},
		{ProfileID: 14, Start: 2, Slots: 2, Slices: 2},
	}}
	if g.SlotMask() != 0b0100_1100 || g.SlicesUsed() != 3 || !g.HasMedia() || g.CountProfile(14) != 1 || g.Empty() {
		t.Errorf("helpers: mask %b slices %d", g.SlotMask(), g.SlicesUsed())
	}
	if g.FreeMilli() != 1000-3*1000/7 {
		t.Errorf("FreeMilli = %d", g.FreeMilli())
	}
	full := GPU{MIG: true, Instances: []MIGInstance{{ProfileID: 0, Start: 0, Slots: 8, Slices: 7}}}
	if full.FreeMilli() != 0 {
		t.Errorf("full MIG GPU FreeMilli = %d", full.FreeMilli())
	}
	if (&GPU{WholeAlloc: "x"}).FreeMilli() != 0 || (&GPU{UsedMilli: 300, Shares: 1}).FreeMilli() != 700 {
		t.Error("FreeMilli of whole or shared GPU")
	}
	h := MockHost("h", "T4", 2)
	h.UsedCPUMilli, h.UsedMemoryMiB = 1000, 2048
	if h.FreeCPU() != h.CPUMilli-1000 || h.FreeMemory() != h.MemoryMiB-2048 || h.Model() != "T4" || !h.Empty() {
		t.Errorf("host helpers: %+v", h)
	}
	if MockCPUHost("c").Model() != "" {
		t.Error("Model of CPU host")
	}
	if !reflect.DeepEqual(MockHost("x", "T4", 1), MockHost("x", "T4", 1)) {
		t.Error("fixtures not deterministic")
	}
}
