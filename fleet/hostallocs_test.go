package fleet

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// checkHostAllocations verifies the per-host allocation index against
// Allocations: every host lists exactly its allocations, sorted by ID, equal
// to the copies Allocations returns.
func checkHostAllocations(t *testing.T, f *Fleet) {
	t.Helper()
	if err := f.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := map[string][]*Placement{}
	for _, p := range f.Allocations() {
		want[p.HostID] = append(want[p.HostID], p)
	}
	n := 0
	for i, h := range f.Hosts {
		got := f.HostAllocations(h.ID)
		if at := f.HostAllocationsAt(i); len(at) != len(got) || len(got) > 0 && &at[0] != &got[0] {
			t.Fatalf("host %s: HostAllocationsAt(%d) is not HostAllocations(%[1]s)", h.ID, i)
		}
		if len(got) != len(want[h.ID]) || len(got) != h.Allocs {
			t.Fatalf("host %s: index lists %d allocations, Allocations %d, host counts %d", h.ID, len(got), len(want[h.ID]), h.Allocs)
		}
		for i, p := range got {
			if !reflect.DeepEqual(p, want[h.ID][i]) {
				t.Fatalf("host %s: index[%d] = %+v, Allocations has %+v", h.ID, i, *p, *want[h.ID][i])
			}
			if a := f.Allocation(p.ID); !reflect.DeepEqual(a, p) {
				t.Fatalf("host %s: index[%d] = %+v, Allocation(%s) = %+v", h.ID, i, *p, p.ID, a)
			}
		}
		n += len(got)
	}
	if n != len(f.Allocations()) {
		t.Fatalf("index lists %d allocations, Allocations %d", n, len(f.Allocations()))
	}
	if f.HostAllocations("no-such-host") != nil {
		t.Fatal("HostAllocations of an unknown host is not nil")
	}
}

// randomPlacement proposes an allocation on a random host of f: whole GPUs,
// a share, a MIG instance (switching MIG on where the GPU is empty), CPU
// only, or bare metal. Many do not fit; Apply rejects those.
func randomPlacement(r *rand.Rand, f *Fleet, id string) *Placement {
	h := f.Hosts[r.IntN(len(f.Hosts))]
	p := &Placement{ID: id, HostID: h.ID, CPUMilli: int64(1+r.IntN(8)) * 1000, MemoryMiB: int64(1+r.IntN(8)) * 1024}
	if r.IntN(4) == 0 {
		p.Preemptible, p.PriceMicros = true, int64(r.IntN(5))*100
	}
	if len(h.GPUs) == 0 {
		return p
	}
	g := r.IntN(len(h.GPUs))
	switch r.IntN(6) {
	case 0: // CPU only
	case 1:
		p.Devices = []Device{{GPU: g, Kind: Share, Milli: 100 * (1 + r.IntN(5)), MemoryMiB: 1024}}
	case 2, 3:
		starts := []int{0, 1, 2, 3, 4, 5, 6}
		return withDevices(p, mig(id, h.ID, g, 19, starts[r.IntN(len(starts))], !h.GPUs[g].MIG).Devices)
	case 4:
		p.Metal, p.CPUMilli, p.MemoryMiB = true, h.CPUMilli, h.MemoryMiB
		for i := range h.GPUs {
			p.Devices = append(p.Devices, Device{GPU: i, Kind: Whole})
		}
	default:
		for i := g; i < len(h.GPUs) && i < g+1+r.IntN(3); i++ {
			p.Devices = append(p.Devices, Device{GPU: i, Kind: Whole})
		}
	}
	return p
}

func withDevices(p *Placement, d []Device) *Placement {
	p.Devices = d
	return p
}

// TestHostAllocationsIndex drives random Apply, Release and Clone sequences
// and checks after every step that the per-host index agrees with
// Allocations, in the original and in every clone, and that a clone's index
// is its own.
func TestHostAllocationsIndex(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		f := MockFleet(MockHost("a", "H100", 4), MockNVLinkHost("b", "H100", 4, 4), MockHost("c", "T4", 2), MockCPUHost("d"))
		checkHostAllocations(t, f)
		var clones []*Fleet
		applied, peak := 0, 0
		var scratch Host // reused across calls, as callers do
		for step := 0; step < 300; step++ {
			switch x := r.IntN(10); {
			case x < 6:
				// IDs in random order, so inserts land anywhere in a list.
				p := randomPlacement(r, f, fmt.Sprintf("p%03d", r.IntN(1000)))
				if f.Apply(p) == nil { // a conflict or duplicate ID changes nothing
					applied++
					peak = max(peak, len(f.Allocations()))
				}
			case x < 9:
				all := f.Allocations()
				if len(all) == 0 {
					continue
				}
				if err := f.Release(all[r.IntN(len(all))].ID); err != nil {
					t.Fatal(err)
				}
			default:
				c := f.Clone()
				checkHostAllocations(t, c)
				before := dump(f)
				// Change the clone; the original's index must not follow.
				for i := 0; i < 5; i++ {
					_ = c.Apply(randomPlacement(r, c, fmt.Sprintf("c%03d", r.IntN(1000))))
					if all := c.Allocations(); len(all) > 0 && r.IntN(2) == 0 {
						if err := c.Release(all[r.IntN(len(all))].ID); err != nil {
							t.Fatal(err)
						}
					}
				}
				checkHostAllocations(t, c)
				if dump(f) != before {
					t.Fatal("changing a clone changed the original")
				}
				clones = append(clones, c)
			}
			checkHostAllocations(t, f)
			if step%5 == 0 {
				checkHostWithout(t, r, f, &scratch)
			}
		}
		for _, c := range clones {
			checkHostAllocations(t, c)
		}
		// Releasing everything empties every list.
		for _, p := range f.Allocations() {
			if err := f.Release(p.ID); err != nil {
				t.Fatal(err)
			}
		}
		checkHostAllocations(t, f)
		for _, h := range f.Hosts {
			if got := f.HostAllocations(h.ID); got != nil {
				t.Fatalf("host %s: %d allocations listed after releasing all", h.ID, len(got))
			}
		}
		if applied < 50 || peak < 8 {
			t.Fatalf("seed %d: %d placements applied, at most %d at once: the test exercises too little", seed, applied, peak)
		}
	}
}

// hostState renders a host's exported state, MIG instances in slot order.
func hostState(h *Host) string {
	var b strings.Builder
	fmt.Fprintf(&b, "host %s state=%s cpu=%d/%d mem=%d/%d metal=%q allocs=%d labels=%v\n",
		h.ID, h.State, h.UsedCPUMilli, h.CPUMilli, h.UsedMemoryMiB, h.MemoryMiB, h.MetalAlloc, h.Allocs, h.Labels)
	for _, g := range h.GPUs {
		fmt.Fprintf(&b, "  gpu %d %s mig=%v auto=%v whole=%q milli=%d gmem=%d shares=%d",
			g.Index, g.Model, g.MIG, g.MIGAuto, g.WholeAlloc, g.UsedMilli, g.UsedMemMiB, g.Shares)
		in := append([]MIGInstance(nil), g.Instances...)
		sort.Slice(in, func(i, j int) bool { return in[i].Start < in[j].Start })
		fmt.Fprintf(&b, " %+v\n", in)
	}
	return b.String()
}

// checkHostWithout compares HostWithout for a random subset of a random
// host's allocations with releasing them from a clone, and checks that the
// fleet stays as it was.
func checkHostWithout(t *testing.T, r *rand.Rand, f *Fleet, dst *Host) {
	t.Helper()
	h := f.Hosts[r.IntN(len(f.Hosts))]
	var ids []string
	for _, p := range f.HostAllocations(h.ID) {
		if r.IntN(2) == 0 {
			ids = append(ids, p.ID)
		}
	}
	before := dump(f)
	if err := f.HostWithout(dst, h.ID, ids); err != nil {
		t.Fatal(err)
	}
	if dump(f) != before {
		t.Fatal("HostWithout changed the fleet")
	}
	c := f.Clone()
	for _, id := range ids {
		if err := c.Release(id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := hostState(dst), hostState(c.Host(h.ID)); got != want {
		t.Fatalf("HostWithout(%s, %v):\n%s\nreleasing them gives\n%s", h.ID, ids, got, want)
	}
	if dst.Class() != nil {
		t.Fatal("the scratch host has a class")
	}
}

func TestHostWithoutErrors(t *testing.T) {
	f := MockFleet(MockHost("a", "T4", 2), MockHost("b", "T4", 1))
	for _, p := range []*Placement{whole("wa", "a", 0), whole("wb", "b", 0)} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	var dst Host
	for _, c := range []struct {
		host string
		ids  []string
	}{{"x", nil}, {"a", []string{"wb"}}, {"a", []string{"nope"}}, {"a", []string{"wa", "wa"}}} {
		if err := f.HostWithout(&dst, c.host, c.ids); err == nil {
			t.Errorf("HostWithout(%s, %v): no error", c.host, c.ids)
		}
	}
	if err := f.HostWithout(&dst, "a", []string{"wa"}); err != nil || !dst.Empty() || !dst.GPUs[0].Empty() {
		t.Errorf("HostWithout(a, wa) = %v, %+v", err, dst)
	}
}

// TestCheckCatchesStaleHostIndex: Check notices a per-host allocation index
// that disagrees with the allocations.
func TestCheckCatchesStaleHostIndex(t *testing.T) {
	f := MockFleet(MockHost("a", "T4", 2), MockHost("b", "T4", 2))
	for _, p := range []*Placement{whole("w1", "a", 0), whole("w2", "a", 1), whole("w3", "b", 0)} {
		if err := f.Apply(p); err != nil {
			t.Fatal(err)
		}
	}
	corrupt := []func(f *Fleet){
		func(f *Fleet) { f.onHost[0] = f.onHost[0][:1] },
		func(f *Fleet) { f.onHost[0][0], f.onHost[0][1] = f.onHost[0][1], f.onHost[0][0] },
		func(f *Fleet) { f.onHost[1] = append(f.onHost[1], f.onHost[0][0]) },
		func(f *Fleet) { f.onHost[0][0] = f.onHost[0][0].clone() },
		func(f *Fleet) { f.onHost = f.onHost[:1] },
	}
	for i, fn := range corrupt {
		c := f.Clone()
		fn(c)
		if err := c.Check(); err == nil {
			t.Errorf("corruption %d not detected", i)
		}
	}
	if err := f.Check(); err != nil {
		t.Error(err)
	}
}
