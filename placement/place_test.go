package placement

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// --- helpers ---------------------------------------------------------------

// testCatalog is shared by tests that only read it.
var testCatalog = catalog.Default()

func newEngine(t testing.TB, policy string) *Engine {
	t.Helper()
	sc, err := NewScorer(policy, nil)
	if err != nil {
		t.Fatal(err)
	}
	return NewEngine(testCatalog, sc, 1)
}

// forPolicies runs fn as a subtest once per built-in policy.
func forPolicies(t *testing.T, fn func(t *testing.T, e *Engine)) {
	for _, p := range Policies() {
		t.Run(p, func(t *testing.T) { fn(t, newEngine(t, p)) })
	}
}

// mustPlace places and applies req, failing the test on any error.
func mustPlace(t testing.TB, e *Engine, f *fleet.Fleet, req *Request) *fleet.Placement {
	t.Helper()
	p, err := e.Place(f, req)
	if err != nil {
		t.Fatalf("Place %s: %v", req.ID, err)
	}
	if err := f.Apply(p); err != nil {
		t.Fatalf("Apply %s: engine chose an infeasible placement: %v", req.ID, err)
	}
	if err := f.Check(); err != nil {
		t.Fatalf("Check after %s: %v", req.ID, err)
	}
	return p
}

// placeUntilFull places copies of req (IDs req.ID-0, -1, ...) until the
// fleet has no room, and returns the placements and the final error.
func placeUntilFull(t testing.TB, e *Engine, f *fleet.Fleet, req Request) ([]*fleet.Placement, error) {
	t.Helper()
	base := req.ID
	var out []*fleet.Placement
	for i := 0; i < 200; i++ {
		r := req
		r.Models = append([]string(nil), req.Models...)
		r.ID = fmt.Sprintf("%s-%d", base, i)
		p, err := e.Place(f, &r)
		if err != nil {
			if !IsInsufficientCapacity(err) {
				t.Fatalf("Place %s: %v", r.ID, err)
			}
			return out, err
		}
		if err := f.Apply(p); err != nil {
			t.Fatalf("Apply %s: %v", r.ID, err)
		}
		if err := f.Check(); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	t.Fatal("fleet never filled up")
	return nil, nil
}

func gpuReq(id string, n int, models ...string) *Request {
	return &Request{ID: id, Mode: catalog.ModeGPU, GPUs: n, CPUMilli: 4000, MemoryMiB: 16 * 1024, Models: models}
}

func migReq(id, profile string, models ...string) *Request {
	return &Request{ID: id, Mode: catalog.ModeMIG, MIGProfile: profile, CPUMilli: 1000, MemoryMiB: 4096, Models: models}
}

func shareReq(id string, milli int, memMiB int64, models ...string) *Request {
	return &Request{ID: id, Mode: catalog.ModeShared, ShareMilli: milli, ShareMemoryMiB: memMiB, CPUMilli: 1000, MemoryMiB: 4096, Models: models}
}

func cpuReq(id string, cpu int64) *Request {
	return &Request{ID: id, Mode: catalog.ModeCPU, CPUMilli: cpu, MemoryMiB: 1024}
}

func metalReq(id string, gpus int, models ...string) *Request {
	return &Request{ID: id, Mode: catalog.ModeMetal, GPUs: gpus, Models: models}
}

func with(h *fleet.Host, edit func(h *fleet.Host)) *fleet.Host {
	edit(h)
	return h
}

// dumpFleet renders the exported state of a fleet canonically.
func dumpFleet(f *fleet.Fleet) string {
	var b strings.Builder
	for _, h := range f.Hosts {
		keys := make([]string, 0, len(h.Labels))
		for k := range h.Labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "%s %s %s %s %d/%d %d/%d %q %d", h.ID, h.Zone, h.Rack, h.State,
			h.UsedCPUMilli, h.CPUMilli, h.UsedMemoryMiB, h.MemoryMiB, h.MetalAlloc, h.Allocs)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%s", k, h.Labels[k])
		}
		b.WriteByte('\n')
		for _, g := range h.GPUs {
			in := append([]fleet.MIGInstance(nil), g.Instances...)
			sort.Slice(in, func(i, j int) bool { return in[i].Start < in[j].Start })
			fmt.Fprintf(&b, "  %d %s %s %d %d %v %v %q %d %d %d %q %+v\n", g.Index, g.UUID, g.Model, g.MemoryMiB,
				g.Island, g.MIG, g.MIGAuto, g.WholeAlloc, g.UsedMilli, g.UsedMemMiB, g.Shares, g.ShareTenant, in)
		}
	}
	for _, p := range f.Allocations() {
		fmt.Fprintf(&b, "%+v\n", *p)
	}
	return b.String()
}

func islandsOf(h *fleet.Host, p *fleet.Placement) map[int]bool {
	out := map[int]bool{}
	for _, d := range p.Devices {
		out[h.GPUs[d.GPU].Island] = true
	}
	return out
}

func gpusOf(p *fleet.Placement) []int {
	var out []int
	for _, d := range p.Devices {
		out = append(out, d.GPU)
	}
	return out
}

// --- table tests -------------------------------------------------------------

type placeCase struct {
	name  string
	fleet func(t *testing.T, e *Engine) *fleet.Fleet
	req   *Request
	// hosts lists the acceptable hosts; empty means an error is expected.
	hosts []string
	// err is the exact error message when hosts is empty.
	err string
	// check verifies the placement further.
	check func(t *testing.T, f *fleet.Fleet, p *fleet.Placement)
}

func fleetOf(hosts ...*fleet.Host) func(*testing.T, *Engine) *fleet.Fleet {
	return func(*testing.T, *Engine) *fleet.Fleet { return fleet.MockFleet(hosts...) }
}

// fleetWith builds the hosts and then places the setup requests.
func fleetWith(hosts []*fleet.Host, setup ...*Request) func(*testing.T, *Engine) *fleet.Fleet {
	return func(t *testing.T, e *Engine) *fleet.Fleet {
		f := fleet.MockFleet(hosts...)
		for _, r := range setup {
			cp := *r
			cp.Models = append([]string(nil), r.Models...)
			mustPlace(t, e, f, &cp)
		}
		return f
	}
}

// fleetApplied builds the hosts and applies the placements as given.
func fleetApplied(hosts []*fleet.Host, ps ...*fleet.Placement) func(*testing.T, *Engine) *fleet.Fleet {
	return func(t *testing.T, e *Engine) *fleet.Fleet {
		f := fleet.MockFleet(hosts...)
		for _, p := range ps {
			if err := f.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
}

func devices(kind fleet.DeviceKind, n int) func(*testing.T, *fleet.Fleet, *fleet.Placement) {
	return func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
		t.Helper()
		if len(p.Devices) != n {
			t.Fatalf("%d devices, want %d: %s", len(p.Devices), n, Explain(p))
		}
		seen := map[int]bool{}
		for _, d := range p.Devices {
			if d.Kind != kind || seen[d.GPU] {
				t.Fatalf("bad devices %+v", p.Devices)
			}
			seen[d.GPU] = true
		}
	}
}

func placeCases() []placeCase {
	h100 := func(id string) *fleet.Host { return fleet.MockHost(id, "H100", 8) }
	labeled := func(id string, kv ...string) *fleet.Host {
		h := fleet.MockHost(id, "L40S", 2)
		for i := 0; i+1 < len(kv); i += 2 {
			h.Labels[kv[i]] = kv[i+1]
		}
		return h
	}
	return []placeCase{
		// Every mode.
		{name: "metal on empty host", fleet: fleetOf(h100("a")), req: metalReq("m", 0), hosts: []string{"a"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				h := f.Host("a")
				if !p.Metal || p.CPUMilli != h.CPUMilli || p.MemoryMiB != h.MemoryMiB || len(p.Devices) != 8 {
					t.Errorf("metal placement %+v", p)
				}
			}},
		{name: "metal skips busy hosts", fleet: fleetWith([]*fleet.Host{h100("a"), h100("b")}, &Request{ID: "x", Mode: catalog.ModeCPU, CPUMilli: 1, Zones: nil}),
			req: metalReq("m", 8), hosts: []string{"a", "b"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if f.Allocation("x").HostID == p.HostID {
					t.Errorf("metal on busy host %s", p.HostID)
				}
			}},
		{name: "metal gpu count", fleet: fleetOf(fleet.MockHost("four", "H100", 4), h100("eight")), req: metalReq("m", 8), hosts: []string{"eight"}},
		{name: "metal cpu-only host", fleet: fleetOf(fleet.MockCPUHost("c"), fleet.MockHost("g", "T4", 1)), req: metalReq("m", 0, "T4"), hosts: []string{"g"}},
		{name: "metal wrong count and model", fleet: fleetOf(h100("a"), h100("b"), fleet.MockHost("c", "L40S", 4)),
			req: metalReq("m", 8, "L40S"), err: "0/3 hosts available: 2 wrong GPU model, 1 not an empty 8-GPU host"},
		{name: "metal not on MIG-mode host", fleet: fleetOf(with(fleet.MockHost("a", "H100", 2), func(h *fleet.Host) { h.GPUs[1].MIG = true }), fleet.MockHost("b", "H100", 2)),
			req: metalReq("m", 2), hosts: []string{"b"}},
		{name: "metal on host with spare MIG instance", fleet: fleetOf(with(fleet.MockHost("a", "H100", 2), func(h *fleet.Host) {
			h.GPUs[1].MIG = true
			h.GPUs[1].Instances = []fleet.MIGInstance{{ProfileID: 19, Start: 0, Slots: 1, Slices: 1}}
		})), req: metalReq("m", 0), err: "0/1 hosts available: 1 host not empty"},
		{name: "gpu 1", fleet: fleetOf(h100("a")), req: gpuReq("g", 1), hosts: []string{"a"}, check: devices(fleet.Whole, 1)},
		{name: "gpu 2", fleet: fleetOf(h100("a")), req: gpuReq("g", 2), hosts: []string{"a"}, check: devices(fleet.Whole, 2)},
		{name: "gpu 4", fleet: fleetOf(h100("a")), req: gpuReq("g", 4), hosts: []string{"a"}, check: devices(fleet.Whole, 4)},
		{name: "gpu 8", fleet: fleetOf(h100("a")), req: gpuReq("g", 8), hosts: []string{"a"}, check: devices(fleet.Whole, 8)},
		{name: "gpu 8 on 4-GPU hosts", fleet: fleetOf(fleet.MockHost("a", "H100", 4), fleet.MockHost("b", "T4", 4)), req: gpuReq("g", 8),
			err: "0/2 hosts available: 2 fewer than 8 free GPUs"},
		{name: "gpu skips used gpus", fleet: fleetWith([]*fleet.Host{fleet.MockHost("a", "T4", 2)}, gpuReq("x", 1)), req: gpuReq("g", 1), hosts: []string{"a"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if f.Allocation("x").Devices[0].GPU == p.Devices[0].GPU {
					t.Error("placed on a taken GPU")
				}
			}},
		{name: "mig", fleet: fleetOf(fleet.MockHost("a", "H100", 1)), req: migReq("m", "3g.40gb"), hosts: []string{"a"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				d := p.Devices[0]
				if len(p.Devices) != 1 || d.Kind != fleet.MIGSlice || d.MIGProfileID != 9 || d.MIGProfile != "3g.40gb" ||
					d.MIGSlots != 4 || d.MIGSlices != 3 || !d.EnableMIG || d.MIGStart != 0 && d.MIGStart != 4 {
					t.Errorf("mig placement %+v", d)
				}
			}},
		{name: "mig by id and short name per model", fleet: fleetOf(fleet.MockHost("a40", "A100-40GB", 1)), req: migReq("m", "9"), hosts: []string{"a40"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if p.Devices[0].MIGProfile != "3g.20gb" {
					t.Errorf("profile %s on A100-40GB", p.Devices[0].MIGProfile)
				}
			}},
		{name: "mig on non-MIG model", fleet: fleetOf(fleet.MockHost("a", "L40S", 2)), req: migReq("m", "3g"),
			err: "0/1 hosts available: 1 no MIG 3g profile on this GPU model"},
		{name: "shared", fleet: fleetOf(fleet.MockHost("a", "L40S", 1)), req: shareReq("s", 250, 12288), hosts: []string{"a"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				d := p.Devices[0]
				if len(p.Devices) != 1 || d.Kind != fleet.Share || d.Milli != 250 || d.MemoryMiB != 12288 {
					t.Errorf("share %+v", d)
				}
			}},
		{name: "shared too much memory", fleet: fleetOf(fleet.MockHost("a", "T4", 2)), req: shareReq("s", 100, 17*1024),
			err: "0/1 hosts available: 1 no GPU with 100 milli and 17408 MiB free"},
		{name: "cpu", fleet: fleetOf(fleet.MockCPUHost("c")), req: cpuReq("c", 2000), hosts: []string{"c"}, check: devices("", 0)},
		{name: "cpu on gpu host", fleet: fleetOf(fleet.MockHost("g", "T4", 1)), req: cpuReq("c", 2000), hosts: []string{"g"}, check: devices("", 0)},
		{name: "cpu too big", fleet: fleetOf(fleet.MockCPUHost("c")), req: cpuReq("c", fleet.MockCPUPerGPU+1),
			err: "0/1 hosts available: 1 insufficient cpu"},
		{name: "memory too big", fleet: fleetOf(fleet.MockCPUHost("c")), req: &Request{ID: "m", Mode: catalog.ModeCPU, CPUMilli: 1, MemoryMiB: fleet.MockMemoryPerGPU + 1},
			err: "0/1 hosts available: 1 insufficient memory"},
		{name: "gpu request on cpu host", fleet: fleetOf(fleet.MockCPUHost("c")), req: gpuReq("g", 1), err: "0/1 hosts available: 1 wrong GPU model"},

		// Models.
		{name: "model canonical", fleet: fleetOf(fleet.MockHost("h", "H100", 1), fleet.MockHost("v", "V100-16GB", 1)), req: gpuReq("g", 1, "H100-80GB-SXM"), hosts: []string{"h"}},
		{name: "model alias", fleet: fleetOf(fleet.MockHost("h", "H100", 1), fleet.MockHost("v", "V100-16GB", 1)), req: gpuReq("g", 1, "V100M16"), hosts: []string{"v"}},
		{name: "model set", fleet: fleetOf(fleet.MockHost("h", "H100", 1), fleet.MockHost("v", "V100-32GB", 1), fleet.MockHost("t", "T4", 1)),
			req: gpuReq("g", 1, "V100M16", "V100M32"), hosts: []string{"v"}},
		{name: "model none", fleet: fleetOf(fleet.MockHost("h", "H100", 1), fleet.MockHost("t", "T4", 1)), req: gpuReq("g", 1, "L4"),
			err: "0/2 hosts available: 2 wrong GPU model"},
		{name: "mixed host uses allowed gpus only", fleet: fleetOf(with(fleet.MockHost("mix", "T4", 2), func(h *fleet.Host) { h.GPUs[0].Model = "L4" })),
			req: gpuReq("g", 1, "T4"), hosts: []string{"mix"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if p.Devices[0].GPU != 1 {
					t.Errorf("placed on the L4 GPU")
				}
			}},

		// Zones, labels, state.
		{name: "zone", fleet: fleetOf(fleet.MockHost("a", "T4", 1), with(fleet.MockHost("b", "T4", 1), func(h *fleet.Host) { h.Zone = "zone-b" })),
			req: &Request{ID: "z", Mode: catalog.ModeGPU, GPUs: 1, Zones: []string{"zone-b", "zone-c"}}, hosts: []string{"b"}},
		{name: "zone none", fleet: fleetOf(fleet.MockHost("a", "T4", 1)), req: &Request{ID: "z", Mode: catalog.ModeCPU, Zones: []string{"zone-c"}},
			err: "0/1 hosts available: 1 wrong zone"},
		{name: "driver>=550", fleet: fleetOf(labeled("old", "driver", "535.161"), labeled("new", "driver", "550.54")),
			req: &Request{ID: "l", Mode: catalog.ModeGPU, GPUs: 1, Labels: sels("driver>=550")}, hosts: []string{"new"}},
		{name: "driver<550", fleet: fleetOf(labeled("old", "driver", "535.161"), labeled("new", "driver", "550.54")),
			req: &Request{ID: "l", Mode: catalog.ModeGPU, GPUs: 1, Labels: sels("driver<550")}, hosts: []string{"old"}},
		{name: "driver numeric parts", fleet: fleetOf(labeled("old", "driver", "550.54"), labeled("new", "driver", "550.127")),
			req: &Request{ID: "l", Mode: catalog.ModeGPU, GPUs: 1, Labels: sels("driver>550.100")}, hosts: []string{"new"}},
		{name: "interconnect", fleet: fleetOf(labeled("eth", "interconnect", "ethernet"), labeled("ib", "interconnect", "infiniband"), labeled("none")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("interconnect=infiniband")}, hosts: []string{"ib"}},
		{name: "interconnect !=", fleet: fleetOf(labeled("eth", "interconnect", "ethernet"), labeled("ib", "interconnect", "infiniband"), labeled("none")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("interconnect!=infiniband")}, hosts: []string{"eth", "none"}},
		{name: "exists", fleet: fleetOf(labeled("a", "gpu-direct", ""), labeled("b")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("gpu-direct")}, hosts: []string{"a"}},
		{name: "!exists", fleet: fleetOf(labeled("a", "maintenance", "yes"), labeled("b")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("!maintenance")}, hosts: []string{"b"}},
		{name: "labels all must hold", fleet: fleetOf(labeled("a", "driver", "550.54"), labeled("b", "driver", "550.54", "interconnect", "infiniband"), labeled("c", "driver", "535.1", "interconnect", "infiniband")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("driver>=550", "interconnect=infiniband")}, hosts: []string{"b"}},
		{name: "labels none", fleet: fleetOf(labeled("a", "driver", "535.161")),
			req: &Request{ID: "l", Mode: catalog.ModeCPU, Labels: sels("driver>=550", "gpu-direct")}, err: "0/1 hosts available: 1 labels do not match driver>=550,gpu-direct"},
		{name: "cordoned and unhealthy skipped", fleet: fleetOf(
			with(fleet.MockHost("c", "T4", 1), func(h *fleet.Host) { h.State = fleet.Cordoned }),
			with(fleet.MockHost("u", "T4", 1), func(h *fleet.Host) { h.State = fleet.Unhealthy }),
			fleet.MockHost("ok", "T4", 1)), req: gpuReq("g", 1), hosts: []string{"ok"}},
		{name: "only cordoned", fleet: fleetOf(
			with(fleet.MockHost("c", "T4", 1), func(h *fleet.Host) { h.State = fleet.Cordoned }),
			with(fleet.MockHost("u", "T4", 1), func(h *fleet.Host) { h.State = fleet.Unhealthy })),
			req: cpuReq("c", 1), err: "0/2 hosts available: 2 host cordoned or unhealthy"},
		{name: "bare metal host takes nothing", fleet: fleetWith([]*fleet.Host{fleet.MockHost("a", "T4", 2)}, metalReq("m", 0)),
			req: cpuReq("c", 1), err: "0/1 hosts available: 1 host rented as bare metal"},

		// NVLink.
		{name: "4 GPUs stay in one island", fleet: fleetOf(fleet.MockNVLinkHost("n", "H100", 4, 4)), req: gpuReq("g", 4), hosts: []string{"n"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if isl := islandsOf(f.Host("n"), p); len(isl) != 1 || isl[-1] {
					t.Errorf("4-GPU placement spans islands %v: %v", isl, gpusOf(p))
				}
			}},
		{name: "8 GPUs need an 8-GPU island", fleet: fleetOf(fleet.MockNVLinkHost("n", "H100", 4, 4)), req: gpuReq("g", 8),
			err: "0/1 hosts available: 1 no NVLink-connected set of 8 free GPUs"},
		{name: "8 GPUs on an 8-GPU island", fleet: fleetOf(fleet.MockNVLinkHost("n44", "H100", 4, 4), fleet.MockNVLinkHost("n8", "H100", 8)), req: gpuReq("g", 8), hosts: []string{"n8"}},
		{name: "4 GPUs with one taken per island", fleet: fleetApplied([]*fleet.Host{fleet.MockNVLinkHost("n", "H100", 4, 4)},
			&fleet.Placement{ID: "x", HostID: "n", Devices: []fleet.Device{{GPU: 1, Kind: fleet.Whole}}},
			&fleet.Placement{ID: "y", HostID: "n", Devices: []fleet.Device{{GPU: 6, Kind: fleet.Whole}}}),
			req: gpuReq("g", 4), err: "0/1 hosts available: 1 no NVLink-connected set of 4 free GPUs"},
		{name: "2 GPUs prefer the fuller island", fleet: fleetWith([]*fleet.Host{fleet.MockNVLinkHost("n", "H100", 4, 4)}, gpuReq("x", 2)),
			req: gpuReq("g", 2), hosts: []string{"n"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				h := f.Host("n")
				x := f.Allocation("x")
				if got, want := islandsOf(h, p), islandsOf(h, x); len(got) != 1 || fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("2-GPU request went to islands %v, the fuller island is %v", got, want)
				}
			}},
		{name: "1 GPU may use a PCIe GPU of an NVLink host", fleet: fleetOf(with(fleet.MockNVLinkHost("n", "H100", 2, 1), func(h *fleet.Host) { h.GPUs[2].Island = -1 })),
			req: gpuReq("g", 3), err: "0/1 hosts available: 1 no NVLink-connected set of 3 free GPUs"},

		// MIG and whole GPUs do not mix.
		{name: "whole gpu never on MIG gpu", fleet: fleetOf(with(fleet.MockHost("a", "H100", 2), func(h *fleet.Host) { h.GPUs[0].MIG = true })),
			req: gpuReq("g", 1), hosts: []string{"a"},
			check: func(t *testing.T, f *fleet.Fleet, p *fleet.Placement) {
				if p.Devices[0].GPU != 1 {
					t.Errorf("whole GPU request on MIG-mode GPU 0")
				}
			}},
		{name: "whole gpus never on MIG gpus", fleet: fleetOf(with(fleet.MockHost("a", "H100", 2), func(h *fleet.Host) { h.GPUs[0].MIG = true })),
			req: gpuReq("g", 2), err: "0/1 hosts available: 1 fewer than 2 free GPUs"},
		{name: "share never on MIG gpu", fleet: fleetOf(with(fleet.MockHost("a", "H100", 1), func(h *fleet.Host) { h.GPUs[0].MIG = true })),
			req: shareReq("s", 100, 1024), err: "0/1 hosts available: 1 no GPU with 100 milli and 1024 MiB free"},
		{name: "mig never on shared gpu", fleet: fleetWith([]*fleet.Host{fleet.MockHost("a", "H100", 1)}, shareReq("s", 100, 1024)),
			req: migReq("m", "1g.10gb"), err: "0/1 hosts available: 1 no free MIG 1g slot"},
		{name: "mig never on whole gpu", fleet: fleetWith([]*fleet.Host{fleet.MockHost("a", "H100", 1)}, gpuReq("w", 1)),
			req: migReq("m", "1g.10gb"), err: "0/1 hosts available: 1 no free MIG 1g slot"},
	}
}

func sels(ss ...string) []LabelSelector {
	var out []LabelSelector
	for _, s := range ss {
		l, err := ParseLabelSelector(s)
		if err != nil {
			panic(err)
		}
		out = append(out, l)
	}
	return out
}

func TestPlaceTable(t *testing.T) {
	for _, c := range placeCases() {
		t.Run(c.name, func(t *testing.T) {
			forPolicies(t, func(t *testing.T, e *Engine) {
				f := c.fleet(t, e)
				before := dumpFleet(f)
				req := *c.req
				req.Models = append([]string(nil), c.req.Models...)
				p, err := e.Place(f, &req)
				if got := dumpFleet(f); got != before {
					t.Fatalf("Place changed the fleet")
				}
				if len(c.hosts) == 0 {
					if err == nil {
						t.Fatalf("placed on %s, want error %q", Explain(p), c.err)
					}
					if !IsInsufficientCapacity(err) || err.Error() != c.err {
						t.Fatalf("error %q, want %q", err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Place: %v", err)
				}
				ok := false
				for _, h := range c.hosts {
					ok = ok || p.HostID == h
				}
				if !ok {
					t.Fatalf("placed on %s, want one of %v", p.HostID, c.hosts)
				}
				if p.ID != req.ID {
					t.Errorf("placement ID %q, want %q", p.ID, req.ID)
				}
				if err := f.Apply(p); err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if err := f.Check(); err != nil {
					t.Fatal(err)
				}
				if c.check != nil {
					c.check(t, f, p)
				}
			})
		})
	}
}

// --- MIG sequences -------------------------------------------------------------

func TestMIGMemorySlots(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
		p := mustPlace(t, e, f, migReq("big", "3g.40gb"))
		if d := p.Devices[0]; d.MIGStart != 0 && d.MIGStart != 4 || !d.EnableMIG {
			t.Fatalf("first 3g at %+v, want slot 0 or 4 with EnableMIG", d)
		}
		// A 3g instance takes 4 memory slots. At slot 0 it leaves slots 4-7,
		// and 1g starts stop at 6: only three 1g.10gb fit, not four. At
		// slot 4 (where the default policy puts it, to keep room) it leaves
		// 0-3: four fit, using all 7 compute slices.
		at4 := p.Devices[0].MIGStart == 4
		ps, err := placeUntilFull(t, e, f, *migReq("small", "1g.10gb"))
		want, wantStarts, wantMask := 3, []int{4, 5, 6}, uint8(0x7f)
		if at4 {
			want, wantStarts, wantMask = 4, []int{0, 1, 2, 3}, 0xff
		}
		if len(ps) != want {
			t.Fatalf("%d 1g.10gb fit next to a 3g.40gb at slot %d, want %d", len(ps), p.Devices[0].MIGStart, want)
		}
		starts := map[int]bool{}
		for _, p := range ps {
			if p.Devices[0].EnableMIG {
				t.Error("EnableMIG on a GPU already in MIG mode")
			}
			starts[p.Devices[0].MIGStart] = true
		}
		for _, s := range wantStarts {
			if !starts[s] {
				t.Errorf("1g starts %v, want %v", starts, wantStarts)
			}
		}
		if err.Error() != "0/1 hosts available: 1 no free MIG 1g slot" {
			t.Errorf("error %q", err)
		}
		if g := f.Host("h").GPUs[0]; g.SlicesUsed() != 3+want || g.SlotMask() != wantMask {
			t.Errorf("slices %d mask %b", g.SlicesUsed(), g.SlotMask())
		}
	})
}

func TestMIG4gPlus3g(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
		p4 := mustPlace(t, e, f, migReq("four", "4g.40gb"))
		p3 := mustPlace(t, e, f, migReq("three", "3g.40gb"))
		if p4.Devices[0].MIGStart != 0 || p3.Devices[0].MIGStart != 4 {
			t.Errorf("4g at %d, 3g at %d", p4.Devices[0].MIGStart, p3.Devices[0].MIGStart)
		}
		g := f.Host("h").GPUs[0]
		if g.SlicesUsed() != 7 || g.SlotMask() != 0xff || g.FreeMilli() != 0 {
			t.Errorf("4g+3g: slices %d mask %b", g.SlicesUsed(), g.SlotMask())
		}
		for _, prof := range []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"} {
			if _, err := e.Place(f, migReq("x", prof)); !IsInsufficientCapacity(err) {
				t.Errorf("%s on a full GPU: %v", prof, err)
			}
		}
	})
}

// TestMIGValidStarts places profiles behind others and checks that every
// start is one the profile allows.
func TestMIGValidStarts(t *testing.T) {
	m, _ := catalog.Default().Model("H100")
	forPolicies(t, func(t *testing.T, e *Engine) {
		seqs := [][]string{
			{"1g.10gb", "3g.40gb", "3g.40gb"},
			{"1g.10gb", "1g.20gb", "2g.20gb", "2g.20gb"},
			{"1g.10gb", "4g.40gb"},
			{"2g.20gb", "1g.20gb", "1g.20gb", "1g.20gb", "1g.20gb"},
			{"1g.10gb+me", "7g.80gb"},
		}
		for _, seq := range seqs {
			f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
			for i, prof := range seq {
				p, err := e.Place(f, migReq(fmt.Sprint(i), prof))
				if err != nil {
					continue
				}
				pr := m.Profile(prof)
				d := p.Devices[0]
				valid := false
				for _, s := range pr.Starts {
					valid = valid || s == d.MIGStart
				}
				if !valid || d.MIGSlots != pr.MemorySlots || d.MIGSlices != pr.ComputeSlices || d.MIGProfileID != pr.ID {
					t.Fatalf("%v: %s at start %d (valid %v): %+v", seq, prof, d.MIGStart, pr.Starts, d)
				}
				if err := f.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		// A 3g behind a 1g at slot 0 must start at 4, never at 1.
		f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
		if err := f.Apply(&fleet.Placement{ID: "a", HostID: "h", Devices: []fleet.Device{{
			GPU: 0, Kind: fleet.MIGSlice, MIGProfileID: 19, MIGProfile: "1g.10gb",
			MIGStart: 0, MIGSlots: 1, MIGSlices: 1, EnableMIG: true}}}); err != nil {
			t.Fatal(err)
		}
		if p := mustPlace(t, e, f, migReq("b", "3g.40gb")); p.Devices[0].MIGStart != 4 {
			t.Errorf("3g at %d", p.Devices[0].MIGStart)
		}
		if _, err := e.Place(f, migReq("c", "4g.40gb")); !IsInsufficientCapacity(err) {
			t.Errorf("4g needs slot 0: %v", err)
		}
	})
}

func TestMIGOneMediaPerGPU(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
		ps, err := placeUntilFull(t, e, f, *migReq("me", "1g.10gb+me"))
		if len(ps) != 1 || err.Error() != "0/1 hosts available: 1 no free MIG 1g slot" {
			t.Fatalf("%d +me instances, err %v", len(ps), err)
		}
		if !ps[0].Devices[0].MIGMedia {
			t.Error("+me instance without MIGMedia")
		}
		// Plain 1g instances still fit next to it.
		ps, _ = placeUntilFull(t, e, f, *migReq("plain", "1g.10gb"))
		if len(ps) != 6 {
			t.Errorf("%d 1g.10gb next to a +me, want 6", len(ps))
		}
	})
}

func TestMIGMaxPerGPU(t *testing.T) {
	// A model whose 1g profile allows only 2 instances per GPU, though 7
	// would fit by slots and slices.
	h100, _ := catalog.Default().Model("H100")
	m := *h100
	m.Name, m.Aliases, m.PCIDeviceID = "TEST-MIG", nil, 0
	m.MIGProfiles = append([]catalog.MIGProfile(nil), h100.MIGProfiles...)
	for i := range m.MIGProfiles {
		m.MIGProfiles[i].Starts = append([]int(nil), m.MIGProfiles[i].Starts...)
		if m.MIGProfiles[i].ID == 19 {
			m.MIGProfiles[i].MaxPerGPU = 2
		}
	}
	cat, err := catalog.New([]catalog.Model{m}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range Policies() {
		sc, _ := NewScorer(policy, nil)
		e := NewEngine(cat, sc, 1)
		f := fleet.New()
		h := fleet.MockHost("h", "T4", 2)
		for i := range h.GPUs {
			h.GPUs[i].Model, h.GPUs[i].MemoryMiB = "TEST-MIG", 0
		}
		if err := f.AddHost(h, cat); err != nil {
			t.Fatal(err)
		}
		ps, err := placeUntilFull(t, e, f, *migReq("x", "1g.10gb"))
		if len(ps) != 4 || !IsInsufficientCapacity(err) {
			t.Fatalf("%s: %d instances on 2 GPUs with max 2 per GPU: %v", policy, len(ps), err)
		}
		for i := range f.Host("h").GPUs {
			if n := f.Host("h").GPUs[i].CountProfile(19); n != 2 {
				t.Errorf("%s: gpu %d holds %d", policy, i, n)
			}
		}
	}
}

func TestMIGPrefersMIGModeGPUs(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		// On one host: GPU 1 is in MIG mode, GPU 0 is empty.
		f := fleet.MockFleet(with(fleet.MockHost("h", "H100", 2), func(h *fleet.Host) { h.GPUs[1].MIG = true }))
		ps, _ := placeUntilFull(t, e, f, *migReq("m", "1g.10gb"))
		if len(ps) != 14 {
			t.Fatalf("%d 1g on two GPUs", len(ps))
		}
		for i, p := range ps {
			d := p.Devices[0]
			wantGPU := 1
			if i >= 7 {
				wantGPU = 0
			}
			if d.GPU != wantGPU || d.EnableMIG != (i == 7) {
				t.Fatalf("instance %d on gpu %d EnableMIG=%v, want gpu %d EnableMIG=%v", i, d.GPU, d.EnableMIG, wantGPU, i == 7)
			}
		}
		// Across hosts: the host whose GPU is in MIG mode wins, whatever
		// the policy thinks of the empty one.
		for i := 0; i < 5; i++ {
			f := fleet.MockFleet(fleet.MockHost("empty1", "H100", 1), with(fleet.MockHost("mig", "H100", 1), func(h *fleet.Host) { h.GPUs[0].MIG = true }), fleet.MockHost("empty2", "H100", 1))
			p, err := e.Place(f, migReq(fmt.Sprintf("r%d", i), "2g.20gb"))
			if err != nil || p.HostID != "mig" || p.Devices[0].EnableMIG {
				t.Fatalf("placed %v (%v), want the MIG-mode host without EnableMIG", p, err)
			}
		}
	})
}

// TestMIGLeavesAutoMode checks that a GPU switched into MIG mode by placement
// leaves it with its last instance and can then be rented whole.
func TestMIGLeavesAutoMode(t *testing.T) {
	e := newEngine(t, DefaultPolicy)
	f := fleet.MockFleet(fleet.MockHost("h", "H100", 1))
	p := mustPlace(t, e, f, migReq("m", "1g.10gb"))
	if _, err := e.Place(f, gpuReq("g", 1)); !IsInsufficientCapacity(err) {
		t.Fatalf("whole GPU next to MIG: %v", err)
	}
	if err := f.Release(p.ID); err != nil {
		t.Fatal(err)
	}
	mustPlace(t, e, f, gpuReq("g", 1))
}

// --- shares ------------------------------------------------------------------

func TestShareLimits(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		// Compute: 400 milli each, so two per GPU.
		f := fleet.MockFleet(fleet.MockHost("h", "L40S", 2))
		ps, _ := placeUntilFull(t, e, f, *shareReq("c", 400, 1024))
		if len(ps) != 4 {
			t.Errorf("%d shares of 400 milli on 2 GPUs, want 4", len(ps))
		}
		// Memory: 20 GiB of 48 GiB each, so two per GPU though milli allows 3.
		f = fleet.MockFleet(fleet.MockHost("h", "L40S", 2))
		ps, err := placeUntilFull(t, e, f, *shareReq("m", 300, 20*1024))
		if len(ps) != 4 {
			t.Errorf("%d shares of 20 GiB on 2 48-GiB GPUs, want 4", len(ps))
		}
		if err.Error() != "0/1 hosts available: 1 no GPU with 300 milli and 20480 MiB free" {
			t.Errorf("error %q", err)
		}
		for _, g := range f.Host("h").GPUs {
			if g.UsedMilli > 1000 || g.UsedMemMiB > g.MemoryMiB {
				t.Errorf("gpu %d overcommitted: %+v", g.Index, g)
			}
		}
		// Mixed sizes fill a GPU exactly to 1000 and never beyond.
		f = fleet.MockFleet(fleet.MockHost("h", "T4", 1))
		for i, m := range []int{500, 250, 249, 1} {
			mustPlace(t, e, f, shareReq(fmt.Sprint(i), m, 1024))
		}
		if _, err := e.Place(f, shareReq("x", 1, 0)); !IsInsufficientCapacity(err) {
			t.Errorf("share on a full GPU: %v", err)
		}
		if _, err := e.Place(f, gpuReq("w", 1)); !IsInsufficientCapacity(err) {
			t.Errorf("whole GPU on a shared GPU: %v", err)
		}
	})
}

// --- placement groups ----------------------------------------------------------

func TestPlacementGroups(t *testing.T) {
	racked := func() *fleet.Fleet {
		var hs []*fleet.Host
		for i, rack := range []string{"r1", "r1", "r2", "r2", "r3"} {
			h := fleet.MockHost(fmt.Sprintf("h%d", i+1), "H100", 8)
			h.Rack = rack
			hs = append(hs, h)
		}
		return fleet.MockFleet(hs...)
	}
	forPolicies(t, func(t *testing.T, e *Engine) {
		for i := 0; i < 20; i++ {
			f := racked()
			id := fmt.Sprintf("req%d", i)
			// Spread by host avoids hosts with members.
			r := gpuReq(id, 1)
			r.Group = &Group{Name: "g", Strategy: Spread, Hosts: []string{"h1", "h3", "h4"}, Racks: []string{"r1", "r2"}}
			p, err := e.Place(f, r)
			if err != nil || p.HostID != "h2" && p.HostID != "h5" {
				t.Fatalf("spread placed %v, %v", p, err)
			}
			// Spread by rack avoids their racks.
			r = gpuReq(id, 1)
			r.Group = &Group{Name: "g", Strategy: Spread, ByRack: true, Hosts: []string{"h1", "h3"}, Racks: []string{"r1", "r2"}}
			p, err = e.Place(f, r)
			if err != nil || p.HostID != "h5" {
				t.Fatalf("spread by rack placed %v, %v", p, err)
			}
			// Cluster stays on the members' rack.
			r = gpuReq(id, 1)
			r.Group = &Group{Name: "g", Strategy: Cluster, Racks: []string{"r2"}}
			p, err = e.Place(f, r)
			if err != nil || p.HostID != "h3" && p.HostID != "h4" {
				t.Fatalf("cluster placed %v, %v", p, err)
			}
			// ... and prefers the members' host, even when the policy
			// would rather use an emptier or fuller one.
			mustPlace(t, e, f, gpuReq("member", 2))
			member := f.Allocation("member").HostID
			mustPlace(t, e, f, &Request{ID: "other", Mode: catalog.ModeGPU, GPUs: 5})
			r = gpuReq(id, 1)
			r.Group = &Group{Name: "g", Strategy: Cluster, Hosts: []string{member}, Racks: []string{f.Host(member).Rack}}
			p, err = e.Place(f, r)
			if err != nil || p.HostID != member {
				t.Fatalf("cluster placed %v, %v, want the member's host %s", p, err, member)
			}
			// The first member of a cluster group goes anywhere.
			r = gpuReq(id, 1)
			r.Group = &Group{Name: "g", Strategy: Cluster}
			if _, err := e.Place(f, r); err != nil {
				t.Fatal(err)
			}
		}
		// Nothing left for the group.
		f := racked()
		r := gpuReq("x", 1)
		r.Group = &Group{Name: "web", Strategy: Spread, ByRack: true, Racks: []string{"r1", "r2", "r3"}}
		_, err := e.Place(f, r)
		if err == nil || err.Error() != "0/5 hosts available: 5 placement group web (spread)" {
			t.Errorf("spread over all racks: %v", err)
		}
		// A host that is full counts under its own reason, not the group's.
		f = racked()
		mustPlace(t, e, f, &Request{ID: "full", Mode: catalog.ModeGPU, GPUs: 8, Zones: nil, Models: nil, CPUMilli: 1,
			Group: &Group{Name: "g", Strategy: Cluster, Racks: []string{"r3"}}})
		r = gpuReq("y", 1)
		r.Group = &Group{Name: "g", Strategy: Cluster, Hosts: []string{"h5"}, Racks: []string{"r3"}}
		_, err = e.Place(f, r)
		if err == nil || err.Error() != "0/5 hosts available: 4 placement group g (cluster), 1 no free GPU" {
			t.Errorf("cluster on a full rack: %v", err)
		}
	})
}

// --- errors ------------------------------------------------------------------

func TestErrorMessage(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		var hs []*fleet.Host
		for i := 0; i < 3; i++ {
			hs = append(hs, fleet.MockHost(fmt.Sprintf("h100-%d", i), "H100", 1))
		}
		hs = append(hs, fleet.MockHost("l40s-0", "L40S", 4), fleet.MockHost("l40s-1", "L40S", 4))
		f := fleet.MockFleet(hs...)
		for i := 0; i < 3; i++ {
			mustPlace(t, e, f, migReq(fmt.Sprintf("full%d", i), "7g.80gb"))
		}
		_, err := e.Place(f, migReq("x", "3g.40gb", "H100"))
		if !IsInsufficientCapacity(err) || IsInvalidRequest(err) {
			t.Fatalf("err %v", err)
		}
		const want = "0/5 hosts available: 3 no free MIG 3g slot, 2 wrong GPU model"
		if err.Error() != want {
			t.Errorf("error %q, want %q", err, want)
		}
		// Ties in count sort by text.
		ice := &InsufficientCapacityError{Hosts: 4, Reasons: map[string]int{"b": 2, "a": 2}}
		if got := ice.Error(); got != "0/4 hosts available: 2 a, 2 b" {
			t.Errorf("tie order %q", got)
		}
		if got := (&InsufficientCapacityError{}).Error(); got != "0/0 hosts available" {
			t.Errorf("empty fleet %q", got)
		}
	})
}

func TestInvalidRequests(t *testing.T) {
	e := newEngine(t, DefaultPolicy)
	f := fleet.MockFleet(fleet.MockHost("h", "H100", 8))
	cases := []struct {
		req   Request
		field string
	}{
		{Request{ID: "x", Mode: "vgpu"}, "mode"},
		{Request{ID: "x", Mode: catalog.ModeGPU}, "gpus"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 65}, "gpus"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, CPUMilli: -1}, "resources"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, Models: []string{"X100"}}, "models"},
		{Request{ID: "x", Mode: catalog.ModeMetal, GPUs: -1}, "gpus"},
		{Request{ID: "x", Mode: catalog.ModeShared, ShareMilli: 1000}, "share_milli"},
		{Request{ID: "x", Mode: catalog.ModeShared, ShareMilli: 0}, "share_milli"},
		{Request{ID: "x", Mode: catalog.ModeShared, ShareMilli: 10, ShareMemoryMiB: -1}, "share_memory_mib"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, ShareMilli: 10}, "share_milli"},
		{Request{ID: "x", Mode: catalog.ModeMIG}, "mig_profile"},
		{Request{ID: "x", Mode: catalog.ModeMIG, MIGProfile: "1g"}, "mig_profile"},
		{Request{ID: "x", Mode: catalog.ModeMIG, MIGProfile: "9g.99gb"}, "mig_profile"},
		{Request{ID: "x", Mode: catalog.ModeMIG, MIGProfile: "3g", Models: []string{"L40S"}}, "mig_profile"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, MIGProfile: "3g"}, "mig_profile"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, Group: &Group{Strategy: "pack"}}, "group.strategy"},
		{Request{ID: "x", Mode: catalog.ModeGPU, GPUs: 1, Group: &Group{Strategy: Cluster, ByRack: true}}, "group.by_rack"},
	}
	for _, c := range cases {
		_, err := e.Place(f, &c.req)
		if !IsInvalidRequest(err) || IsInsufficientCapacity(err) {
			t.Errorf("%+v: err %v, want a *RequestError", c.req, err)
			continue
		}
		if re := err.(*RequestError); re.Field != c.field {
			t.Errorf("%+v: field %q, want %q (%v)", c.req, re.Field, c.field, err)
		}
	}
	// Aliases are accepted, and the caller's request is left as it was.
	r := gpuReq("ok", 1, "V100M16", "H100")
	if _, err := e.Place(f, r); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.Models) != "[V100M16 H100]" {
		t.Errorf("Place changed the request's models: %v", r.Models)
	}
}

func TestParseLabelSelector(t *testing.T) {
	good := map[string]LabelSelector{
		"driver>=550":             {"driver", ">=", "550"},
		" driver <= 550.54 ":      {"driver", "<=", "550.54"},
		"interconnect=infiniband": {"interconnect", "=", "infiniband"},
		"a==b":                    {"a", "=", "b"},
		"a!=b":                    {"a", "!=", "b"},
		"a>1":                     {"a", ">", "1"},
		"a<1":                     {"a", "<", "1"},
		"gpu-direct":              {"gpu-direct", "exists", ""},
		"!maintenance":            {"maintenance", "!exists", ""},
		"nvidia.com/mig":          {"nvidia.com/mig", "exists", ""},
	}
	for s, want := range good {
		got, err := ParseLabelSelector(s)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", s, got, err)
		}
		if again, _ := ParseLabelSelector(got.String()); again != got {
			t.Errorf("%q does not round-trip: %q", s, got.String())
		}
	}
	for _, s := range []string{"", "!", "a b", "=x", "a=", "!a b", "driver>>550", "driver=>550", "driver>=>550", "driver=<550", "a!=!b"} {
		if _, err := ParseLabelSelector(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	versions := []struct {
		a, b string
		c    int
	}{
		{"550.54", "535.161", 1}, {"535.161", "550", -1}, {"550.54", "550", 1}, {"550", "550", 0},
		{"550.127", "550.54", 1}, {"10", "9", 1}, {"1.2.3", "1.2.3", 0}, {"beta", "alpha", 1},
	}
	for _, v := range versions {
		if got := compareVersions(v.a, v.b); got != v.c {
			t.Errorf("compareVersions(%s, %s) = %d, want %d", v.a, v.b, got, v.c)
		}
	}
	labels := map[string]string{"driver": "550.54"}
	if !(LabelSelector{"driver", ">=", "550"}).Match(labels) || (LabelSelector{"driver", ">=", "555"}).Match(labels) ||
		(LabelSelector{"missing", ">=", "1"}).Match(labels) || !(LabelSelector{"missing", "!=", "1"}).Match(labels) {
		t.Error("Match")
	}
}

// --- determinism ---------------------------------------------------------------

func TestDeterminism(t *testing.T) {
	build := func() *fleet.Fleet {
		var hs []*fleet.Host
		for i := 0; i < 20; i++ {
			hs = append(hs, fleet.MockHost(fmt.Sprintf("h%02d", i), "T4", 4))
		}
		return fleet.MockFleet(hs...)
	}
	for _, policy := range Policies() {
		f1, f2 := build(), build()
		e1, e2 := newEngine(t, policy), newEngine(t, policy)
		hosts := map[string]bool{}
		for i := 0; i < 100; i++ {
			id := fmt.Sprintf("req-%d", i)
			p1, err1 := e1.Place(f1, gpuReq(id, 1))
			p2, err2 := e2.Place(f2, gpuReq(id, 1))
			p3, err3 := e1.Place(f1, gpuReq(id, 1))
			if err1 != nil || err2 != nil || err3 != nil {
				t.Fatal(err1, err2, err3)
			}
			if Explain(p1) != Explain(p2) || Explain(p1) != Explain(p3) {
				t.Fatalf("%s: request %s placed on %s, %s and %s", policy, id, Explain(p1), Explain(p2), Explain(p3))
			}
			hosts[p1.HostID] = true
		}
		sc, _ := NewScorer(policy, nil)
		if o, ok := sc.(OrderedTies); ok && o.OrderedTies() {
			// Ties go to the first host in the seed's host order, whatever
			// the ID; other seeds have other first hosts.
			if len(hosts) != 1 {
				t.Errorf("%s: ordered ties used hosts %v, want one", policy, hosts)
			}
			firsts := map[string]bool{}
			for seed := int64(1); seed <= 10; seed++ {
				p, err := NewEngine(nil, sc, seed).Place(build(), gpuReq("r", 1))
				if err != nil {
					t.Fatal(err)
				}
				firsts[p.HostID] = true
			}
			if len(firsts) < 4 {
				t.Errorf("%s: 10 seeds put ties on only %v", policy, firsts)
			}
			continue
		}
		// Different IDs spread over the 20 tied hosts.
		if len(hosts) < 10 {
			t.Errorf("%s: 100 request IDs used only %d of 20 tied hosts", policy, len(hosts))
		}
		// Another seed picks differently for at least some IDs.
		e3 := NewEngine(nil, sc, 2)
		diff := 0
		for i := 0; i < 20; i++ {
			id := fmt.Sprintf("req-%d", i)
			p1, _ := e1.Place(f1, gpuReq(id, 1))
			p3, _ := e3.Place(f1, gpuReq(id, 1))
			if p1.HostID != p3.HostID {
				diff++
			}
		}
		if diff == 0 {
			t.Errorf("%s: seed does not matter", policy)
		}
	}
}

// TestEnginesShareFleet checks that engines with different request shapes
// (and so different memo layouts) can use one fleet in turn.
func TestEnginesShareFleet(t *testing.T) {
	f := fleet.MockFleet(fleet.MockHost("a", "H100", 2), fleet.MockHost("b", "H100", 2))
	ea, eb := newEngine(t, DefaultPolicy), newEngine(t, "bestfit")
	for i := 0; i < 3; i++ {
		// Engine a learns shape 0 = MIG, engine b shape 0 = whole GPU.
		if _, err := ea.Place(f, migReq("m", "1g.10gb")); err != nil {
			t.Fatal(err)
		}
		p, err := eb.Place(f, gpuReq("g", 1))
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Devices) != 1 || p.Devices[0].Kind != fleet.Whole || p.Devices[0].EnableMIG {
			t.Fatalf("engine b used engine a's memo: %+v", p.Devices)
		}
		ea.SetMIGMix(map[int]float64{19: 1})
	}
}

func TestPlaceCarriesRequestFields(t *testing.T) {
	e := newEngine(t, DefaultPolicy)
	f := fleet.MockFleet(fleet.MockHost("a", "T4", 2))
	r := gpuReq("spot-1", 1)
	r.Preemptible, r.PriceMicros = true, 350_000
	p := mustPlace(t, e, f, r)
	if p.ID != "spot-1" || !p.Preemptible || p.PriceMicros != 350_000 {
		t.Errorf("placement %+v", p)
	}
	// The same shape without the spot fields yields a plain placement.
	p = mustPlace(t, e, f, gpuReq("on-demand", 1))
	if p.Preemptible || p.PriceMicros != 0 {
		t.Errorf("spot fields leaked through the shape cache: %+v", p)
	}
	if got := f.Allocation("spot-1"); !got.Preemptible || got.PriceMicros != 350_000 {
		t.Errorf("stored %+v", got)
	}
	if s := Explain(p); !strings.HasPrefix(s, "a [gpu") {
		t.Errorf("Explain %q", s)
	}
}
