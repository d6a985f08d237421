package placement

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// randomFleet builds a mixed fleet: H100 hosts with one 8-GPU or two 4-GPU
// NVLink islands, A100-80GB, L40S, T4 and CPU-only hosts, in two zones and
// four racks, with driver and interconnect labels, some GPUs in MIG mode
// (some holding an instance the operator made), and a few cordoned hosts.
func randomFleet(r *rand.Rand, n int) *fleet.Fleet {
	var hosts []*fleet.Host
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("h%03d", i)
		var h *fleet.Host
		switch k := r.Intn(10); {
		case k < 3:
			if r.Intn(2) == 0 {
				h = fleet.MockNVLinkHost(id, "H100", 8)
			} else {
				h = fleet.MockNVLinkHost(id, "H100-80GB-SXM", 4, 4)
			}
		case k < 5:
			if r.Intn(2) == 0 {
				h = fleet.MockNVLinkHost(id, "A100-80GB", 8)
			} else {
				h = fleet.MockHost(id, "A100-80GB-SXM", 4)
			}
		case k < 7:
			h = fleet.MockHost(id, "L40S", 1+r.Intn(4))
		case k < 9:
			h = fleet.MockHost(id, "T4", 1+r.Intn(4))
		default:
			h = fleet.MockCPUHost(id)
		}
		h.Zone = []string{"zone-a", "zone-b"}[r.Intn(2)]
		h.Rack = fmt.Sprintf("rack-%d", r.Intn(4))
		h.Labels["driver"] = []string{"535.161", "550.54", "550.127"}[r.Intn(3)]
		if r.Intn(3) == 0 {
			h.Labels["interconnect"] = "infiniband"
		}
		if r.Intn(15) == 0 {
			h.State = []fleet.HostState{fleet.Cordoned, fleet.Unhealthy}[r.Intn(2)]
		}
		// Shrink some hosts so that CPU and memory bind too.
		if r.Intn(3) == 0 {
			h.CPUMilli /= 4
			h.MemoryMiB /= 4
		}
		for j := range h.GPUs {
			g := &h.GPUs[j]
			if (g.Model == "H100-80GB-SXM" || g.Model == "A100-80GB-SXM") && r.Intn(4) == 0 {
				g.MIG = true
				if r.Intn(3) == 0 {
					g.Instances = []fleet.MIGInstance{{ProfileID: 19, Start: 6, Slots: 1, Slices: 1}}
				}
			}
		}
		hosts = append(hosts, h)
	}
	return fleet.MockFleet(hosts...)
}

var migProfiles = []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "3g", "9", "19"}

// randomRequest draws a valid request of any mode.
func randomRequest(r *rand.Rand, id string, f *fleet.Fleet) *Request {
	req := &Request{ID: id, CPUMilli: int64(r.Intn(40)) * 1000, MemoryMiB: int64(r.Intn(200)) * 1024}
	pick := func(opts ...string) []string {
		if r.Intn(3) != 0 {
			return nil
		}
		return []string{opts[r.Intn(len(opts))]}
	}
	switch k := r.Intn(20); {
	case k < 1:
		req.Mode = catalog.ModeMetal
		req.GPUs = []int{0, 0, 4, 8}[r.Intn(4)]
		req.Models = pick("H100", "A100", "L40S", "T4")
		req.CPUMilli, req.MemoryMiB = 1000, 1024
	case k < 7:
		req.Mode = catalog.ModeGPU
		req.GPUs = []int{1, 1, 1, 2, 2, 4, 8}[r.Intn(7)]
		req.Models = pick("H100", "A100-80GB-SXM", "L40S", "T4", "V100M16")
	case k < 12:
		req.Mode = catalog.ModeMIG
		req.MIGProfile = migProfiles[r.Intn(len(migProfiles))]
		req.Models = pick("H100", "A100")
		req.CPUMilli /= 4
		req.MemoryMiB /= 4
	case k < 17:
		req.Mode = catalog.ModeShared
		req.ShareMilli = 1 + r.Intn(999)
		req.ShareMemoryMiB = int64(r.Intn(20)) * 1024
		req.Models = pick("L40S", "T4", "H100")
		req.CPUMilli /= 4
		req.MemoryMiB /= 4
		// A few tenants, and none (as in trace replays): a GPU's shares
		// belong to one.
		req.Tenant = []string{"", "tenant-a", "tenant-b", "tenant-c"}[r.Intn(4)]
	default:
		req.Mode = catalog.ModeCPU
	}
	if r.Intn(8) == 0 {
		req.Zones = []string{"zone-b"}
	}
	switch r.Intn(10) {
	case 0:
		req.Labels = sels("driver>=550")
	case 1:
		req.Labels = sels("interconnect=infiniband", "driver<550.100")
	case 2:
		req.Labels = sels("!interconnect")
	}
	if r.Intn(6) == 0 && len(f.Hosts) > 0 {
		g := &Group{Name: "g", Strategy: Spread}
		if r.Intn(2) == 0 {
			g.Strategy = Cluster
		} else if r.Intn(2) == 0 {
			g.ByRack = true
		}
		for i := r.Intn(4); i > 0; i-- {
			h := f.Hosts[r.Intn(len(f.Hosts))]
			g.Hosts = append(g.Hosts, h.ID)
			g.Racks = append(g.Racks, h.Rack)
		}
		req.Group = g
	}
	if r.Intn(2) == 0 {
		req.Preemptible = true
		req.PriceMicros = int64(1+r.Intn(9)) * 100_000
	}
	return req
}

// checkPlacement verifies that p honours req on f (before p is applied).
func checkPlacement(t *testing.T, f *fleet.Fleet, req *Request, p *fleet.Placement) {
	t.Helper()
	cat := testCatalog
	h := f.Host(p.HostID)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("request %+v placed as %s: %s", *req, Explain(p), fmt.Sprintf(format, args...))
	}
	if h == nil {
		fail("unknown host")
	}
	if h.State != fleet.Schedulable || h.MetalAlloc != "" {
		fail("host state %s metal %q", h.State, h.MetalAlloc)
	}
	if len(req.Zones) > 0 && !contains(req.Zones, h.Zone) {
		fail("zone %s", h.Zone)
	}
	for _, l := range req.Labels {
		if !l.Match(h.Labels) {
			fail("label %s on %v", l, h.Labels)
		}
	}
	if p.ID != req.ID || p.Tenant != req.Tenant || p.Preemptible != req.Preemptible || p.PriceMicros != req.PriceMicros {
		fail("request fields not carried")
	}
	var models []string
	for _, m := range req.Models {
		c, err := testCatalog.CanonicalModel(m)
		if err != nil {
			fail("model %s: %v", m, err)
		}
		models = append(models, c)
	}
	for _, d := range p.Devices {
		if len(models) > 0 && !contains(models, h.GPUs[d.GPU].Model) {
			fail("model %s", h.GPUs[d.GPU].Model)
		}
		if d.UUID != h.GPUs[d.GPU].UUID {
			fail("uuid")
		}
	}
	if g := req.Group; g != nil {
		onHost, onRack := contains(g.Hosts, h.ID), contains(g.Racks, h.Rack)
		switch {
		case g.Strategy == Spread && (onHost || g.ByRack && onRack):
			fail("spread group member on a member's host or rack")
		case g.Strategy == Cluster && len(g.Racks) > 0 && !onRack:
			fail("cluster group member off the group's racks")
		}
	}
	switch req.Mode {
	case catalog.ModeMetal:
		if !p.Metal || !h.Empty() || len(p.Devices) != len(h.GPUs) || req.GPUs > 0 && len(h.GPUs) != req.GPUs {
			fail("bad metal placement")
		}
	case catalog.ModeCPU:
		if len(p.Devices) != 0 {
			fail("cpu request with devices")
		}
	case catalog.ModeGPU:
		if len(p.Devices) != req.GPUs {
			fail("%d devices", len(p.Devices))
		}
		islands := map[int]bool{}
		nvlink := false
		for _, g := range h.GPUs {
			nvlink = nvlink || g.Island >= 0
		}
		for _, d := range p.Devices {
			if d.Kind != fleet.Whole || h.GPUs[d.GPU].MIG {
				fail("whole GPU %d kind %s MIG %v", d.GPU, d.Kind, h.GPUs[d.GPU].MIG)
			}
			islands[h.GPUs[d.GPU].Island] = true
		}
		if nvlink && req.GPUs > 1 && (len(islands) != 1 || islands[-1]) {
			fail("multi-GPU placement across NVLink islands %v", islands)
		}
	case catalog.ModeShared:
		if len(p.Devices) != 1 || p.Devices[0].Kind != fleet.Share || p.Devices[0].Milli != req.ShareMilli {
			fail("bad share")
		}
		g := h.GPUs[p.Devices[0].GPU]
		if g.UsedMilli+req.ShareMilli > 1000 || g.UsedMemMiB+req.ShareMemoryMiB > g.MemoryMiB {
			fail("share overcommits the GPU")
		}
		if g.Shares > 0 && g.ShareTenant != req.Tenant {
			fail("share of tenant %q on a GPU shared by tenant %q", req.Tenant, g.ShareTenant)
		}
	case catalog.ModeMIG:
		if len(p.Devices) != 1 || p.Devices[0].Kind != fleet.MIGSlice {
			fail("bad MIG placement")
		}
		d := p.Devices[0]
		g := h.GPUs[d.GPU]
		m, _ := cat.Model(g.Model)
		pr, err := m.ResolveProfile(req.MIGProfile)
		if err != nil || pr.ID != d.MIGProfileID || pr.MemorySlots != d.MIGSlots || pr.ComputeSlices != d.MIGSlices || pr.MediaExtensions != d.MIGMedia {
			fail("profile %+v for %s", pr, g.Model)
		}
		if !startOK(pr.Starts, d.MIGStart) {
			fail("start %d not in %v", d.MIGStart, pr.Starts)
		}
		if g.CountProfile(pr.ID) >= pr.MaxPerGPU {
			fail("more than %d of profile %d", pr.MaxPerGPU, pr.ID)
		}
		if d.EnableMIG == g.MIG {
			fail("EnableMIG %v on a GPU with MIG %v", d.EnableMIG, g.MIG)
		}
	}
}

func startOK(starts []int, s int) bool {
	for _, x := range starts {
		if x == s {
			return true
		}
	}
	return false
}

// exportedHost is the host's exported state, for reflect.DeepEqual.
func exportedHost(h *fleet.Host) fleet.Host {
	c := fleet.Host{ID: h.ID, Zone: h.Zone, Rack: h.Rack, Labels: h.Labels, State: h.State,
		CPUMilli: h.CPUMilli, MemoryMiB: h.MemoryMiB, UsedCPUMilli: h.UsedCPUMilli, UsedMemoryMiB: h.UsedMemoryMiB,
		MetalAlloc: h.MetalAlloc, Allocs: h.Allocs}
	c.GPUs = append([]fleet.GPU(nil), h.GPUs...)
	return c
}

// checkIndex verifies the fleet's invariants and its class index.
func checkIndex(t *testing.T, f *fleet.Fleet) {
	t.Helper()
	if err := f.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	seen := 0
	for _, c := range f.Classes() {
		rep := exportedHost(c.Rep)
		for _, i := range c.Members() {
			h := f.Hosts[i]
			if h.Class() != c || h.Index() != i {
				t.Fatalf("host %s not in the class that lists it", h.ID)
			}
			// Members share all placement-relevant state.
			m := exportedHost(h)
			if m.Zone != rep.Zone || m.State != rep.State || m.UsedCPUMilli != rep.UsedCPUMilli ||
				m.UsedMemoryMiB != rep.UsedMemoryMiB || len(m.GPUs) != len(rep.GPUs) || !reflect.DeepEqual(m.Labels, rep.Labels) {
				t.Fatalf("host %s differs from its class representative %s", h.ID, c.Rep.ID)
			}
			seen++
		}
	}
	if seen != len(f.Hosts) {
		t.Fatalf("class index lists %d of %d hosts", seen, len(f.Hosts))
	}
}

// TestPlacementProperties drives random fleets through random placements
// and releases with every policy, checking after every step that the fleet
// is consistent, that placements are valid, that a fresh engine agrees with
// the cached one, and that releasing everything restores the fleet.
func TestPlacementProperties(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			for seed := int64(1); seed <= 3; seed++ {
				propertyRun(t, policy, seed)
			}
		})
	}
}

func propertyRun(t *testing.T, policy string, seed int64) {
	r := rand.New(rand.NewSource(seed))
	f := randomFleet(r, 24)
	initial := dumpFleet(f)
	var initHosts []fleet.Host
	for _, h := range f.Hosts {
		initHosts = append(initHosts, exportedHost(h))
	}
	e := newEngine(t, policy)
	// A second engine with another policy shares the fleet, so that class
	// memo tables change owner all the time.
	other := newEngine(t, Policies()[(int(seed)+1)%len(Policies())])
	var live []string
	placed, failed := 0, 0
	for step := 0; step < 250; step++ {
		if len(live) > 0 && r.Intn(10) < 4 {
			i := r.Intn(len(live))
			if err := f.Release(live[i]); err != nil {
				t.Fatalf("step %d: Release: %v", step, err)
			}
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			checkIndex(t, f)
			continue
		}
		req := randomRequest(r, fmt.Sprintf("s%d-%d", seed, step), f)
		eng := e
		if step%3 == 2 {
			eng = other
		}
		var before string
		if step%10 == 0 {
			before = dumpFleet(f)
		}
		p, err := eng.Place(f, req)
		if step%10 == 0 && dumpFleet(f) != before {
			t.Fatalf("step %d: Place changed the fleet", step)
		}
		// A fresh engine with the same policy and seed must agree exactly:
		// cached evaluations are never stale.
		fresh := NewEngine(testCatalog, eng.Scorer(), 1)
		p2, err2 := fresh.Place(f, req)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() ||
			err == nil && (Explain(p) != Explain(p2) || p.Score != p2.Score) {
			t.Fatalf("step %d: cached engine %v/%v, fresh engine %v/%v", step, p, err, p2, err2)
		}
		if err != nil {
			if !IsInsufficientCapacity(err) {
				t.Fatalf("step %d: %+v: %v", step, *req, err)
			}
			failed++
			continue
		}
		checkPlacement(t, f, req, p)
		if err := f.Apply(p); err != nil {
			t.Fatalf("step %d: engine result does not apply: %v (%s)", step, err, Explain(p))
		}
		live = append(live, p.ID)
		placed++
		checkIndex(t, f)

		if step%50 == 0 {
			checkCloneDeep(t, r, f)
		}
	}
	if placed < 50 || failed < 5 {
		t.Errorf("seed %d: %d placed, %d failed: the test does not exercise the engine", seed, placed, failed)
	}
	r.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	for _, id := range live {
		if err := f.Release(id); err != nil {
			t.Fatal(err)
		}
		checkIndex(t, f)
	}
	if got := dumpFleet(f); got != initial {
		t.Fatalf("seed %d: state after releasing everything:\n%s\nwant\n%s", seed, got, initial)
	}
	for i, h := range f.Hosts {
		if got := exportedHost(h); !reflect.DeepEqual(got, initHosts[i]) {
			t.Fatalf("seed %d: host %s after releasing everything:\n%+v\nwant\n%+v", seed, h.ID, got, initHosts[i])
		}
	}
	if len(f.Allocations()) != 0 {
		t.Fatal("allocations left")
	}
}

// checkCloneDeep mutates a clone of f every way it can and checks that f is
// untouched and both stay consistent.
func checkCloneDeep(t *testing.T, r *rand.Rand, f *fleet.Fleet) {
	t.Helper()
	orig := dumpFleet(f)
	c := f.Clone()
	if dumpFleet(c) != orig {
		t.Fatal("clone differs from the original")
	}
	checkIndex(t, c)
	e := newEngine(t, DefaultPolicy)
	for i := 0; i < 30; i++ {
		req := randomRequest(r, fmt.Sprintf("clone-%d", i), c)
		if p, err := e.Place(c, req); err == nil {
			if err := c.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, p := range c.Allocations() {
		if r.Intn(2) == 0 {
			if err := c.Release(p.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, h := range c.Hosts {
		h.Labels["touched"] = "yes"
		for i := range h.GPUs {
			h.GPUs[i].UUID += "-clone"
			for j := range h.GPUs[i].Instances {
				h.GPUs[i].Instances[j].Alloc += "-clone"
			}
		}
	}
	if len(c.Hosts) > 0 {
		_ = c.SetState(c.Hosts[0].ID, fleet.Cordoned)
	}
	for _, p := range c.Allocations() {
		p.Devices = append(p.Devices, fleet.Device{GPU: 99})
		p.CPUMilli++
	}
	if got := dumpFleet(f); got != orig {
		t.Fatalf("mutating a clone changed the original")
	}
	checkIndex(t, f)
}
