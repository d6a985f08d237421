package placement

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// spot makes a request preemptible at the given price.
func spot(r *Request, price int64) *Request {
	r.Preemptible, r.PriceMicros = true, price
	return r
}

// applyAt applies a placement built by hand, marked as spot when price > 0.
func applyAt(t testing.TB, f *fleet.Fleet, p *fleet.Placement, price int64) {
	t.Helper()
	if price > 0 {
		p.Preemptible, p.PriceMicros = true, price
	}
	if err := f.Apply(p); err != nil {
		t.Fatal(err)
	}
}

func wholeAt(id, host string, gpus ...int) *fleet.Placement {
	p := &fleet.Placement{ID: id, HostID: host, CPUMilli: 1000, MemoryMiB: 1024}
	for _, g := range gpus {
		p.Devices = append(p.Devices, fleet.Device{GPU: g, Kind: fleet.Whole})
	}
	return p
}

func shareAt(id, host string, gpu, milli int) *fleet.Placement {
	return &fleet.Placement{ID: id, HostID: host, CPUMilli: 500, MemoryMiB: 512,
		Devices: []fleet.Device{{GPU: gpu, Kind: fleet.Share, Milli: milli, MemoryMiB: 1024}}}
}

func migAt(id, host string, gpu, profileID, start int, enable bool) *fleet.Placement {
	m, _ := catalog.Default().Model("H100")
	pr := m.ProfileByID(profileID)
	return &fleet.Placement{ID: id, HostID: host, CPUMilli: 100, MemoryMiB: 100,
		Devices: []fleet.Device{{GPU: gpu, Kind: fleet.MIGSlice, MIGProfileID: pr.ID, MIGProfile: pr.Name,
			MIGStart: start, MIGSlots: pr.MemorySlots, MIGSlices: pr.ComputeSlices, MIGMedia: pr.MediaExtensions, EnableMIG: enable}}}
}

func cpuAt(id, host string, cpu int64) *fleet.Placement {
	return &fleet.Placement{ID: id, HostID: host, CPUMilli: cpu, MemoryMiB: 1}
}

// execute carries a plan out on a clone of f and returns the clone.
func execute(t *testing.T, f *fleet.Fleet, req *Request, plan *PreemptionPlan) *fleet.Fleet {
	t.Helper()
	c := f.Clone()
	var price int64
	for _, v := range plan.Victims {
		a := c.Allocation(v)
		if a == nil || !a.Preemptible || a.HostID != plan.HostID {
			t.Fatalf("victim %s: %+v", v, a)
		}
		price += a.PriceMicros
		if err := c.Release(v); err != nil {
			t.Fatal(err)
		}
	}
	if price != plan.PriceMicros {
		t.Fatalf("plan price %d, victims cost %d", plan.PriceMicros, price)
	}
	if plan.Placement == nil || plan.Placement.HostID != plan.HostID {
		t.Fatalf("plan placement %+v on %s", plan.Placement, plan.HostID)
	}
	checkPlacement(t, c, req, plan.Placement)
	if err := c.Apply(plan.Placement); err != nil {
		t.Fatalf("plan does not apply after evictions: %v", err)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	return c
}

// fitsOnHostWithout reports whether req fits on host once the given
// allocations are gone, using only the public API: other hosts are cordoned.
func fitsOnHostWithout(t *testing.T, f *fleet.Fleet, req *Request, host string, gone []string) bool {
	t.Helper()
	c := f.Clone()
	for _, id := range gone {
		if err := c.Release(id); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range c.Hosts {
		if h.ID != host {
			if err := c.SetState(h.ID, fleet.Cordoned); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := *req
	_, err := newEngine(t, DefaultPolicy).Place(c, &r)
	return err == nil
}

// checkNoUselessVictim asserts that the plan needs every victim.
func checkNoUselessVictim(t *testing.T, f *fleet.Fleet, req *Request, plan *PreemptionPlan) {
	t.Helper()
	for i := range plan.Victims {
		without := append(append([]string(nil), plan.Victims[:i]...), plan.Victims[i+1:]...)
		if fitsOnHostWithout(t, f, req, plan.HostID, without) {
			t.Fatalf("victim %s of %v is useless", plan.Victims[i], plan.Victims)
		}
	}
}

type preemptCase struct {
	name    string
	fleet   func(t *testing.T) *fleet.Fleet
	req     *Request
	victims []string // nil with host "" means: expect an error
	host    string
	err     string // substring of the expected error
}

func preemptCases() []preemptCase {
	t4 := func(id string, n int) *fleet.Host { return fleet.MockHost(id, "T4", n) }
	return []preemptCase{
		{name: "fits without evictions", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 2))
				applyAt(t, f, wholeAt("s", "a", 0), 100)
				return f
			}, victims: []string{}, host: "a"},
		{name: "single spot victim", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1))
				applyAt(t, f, wholeAt("s", "a", 0), 100)
				return f
			}, victims: []string{"s"}, host: "a"},
		{name: "fewest victims before price", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1), t4("b", 1))
				applyAt(t, f, shareAt("cheap1", "a", 0, 500), 10)
				applyAt(t, f, shareAt("cheap2", "a", 0, 500), 10)
				applyAt(t, f, wholeAt("dear", "b", 0), 1000)
				return f
			}, victims: []string{"dear"}, host: "b"},
		{name: "cheapest host", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1), t4("b", 1), t4("c", 1))
				applyAt(t, f, wholeAt("s500", "a", 0), 500)
				applyAt(t, f, wholeAt("s300", "b", 0), 300)
				applyAt(t, f, wholeAt("s400", "c", 0), 400)
				return f
			}, victims: []string{"s300"}, host: "b"},
		{name: "equal price: lowest host ID", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("c", 1), t4("b", 1), t4("d", 1))
				applyAt(t, f, wholeAt("sc", "c", 0), 300)
				applyAt(t, f, wholeAt("sb", "b", 0), 300)
				applyAt(t, f, wholeAt("sd", "d", 0), 300)
				return f
			}, victims: []string{"sb"}, host: "b"},
		{name: "cheapest victim on a host", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 3))
				applyAt(t, f, wholeAt("s700", "a", 0), 700)
				applyAt(t, f, wholeAt("s200", "a", 1), 200)
				applyAt(t, f, wholeAt("s900", "a", 2), 900)
				return f
			}, victims: []string{"s200"}, host: "a"},
		{name: "cheap useless victims stay", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1))
				applyAt(t, f, wholeAt("gpu", "a", 0), 500)
				applyAt(t, f, cpuAt("c1", "a", 1000), 1)
				applyAt(t, f, cpuAt("c2", "a", 1000), 1)
				return f
			}, victims: []string{"gpu"}, host: "a"},
		{name: "cpu-bound: enough cpu, cheapest", req: &Request{ID: "r", Mode: catalog.ModeCPU, CPUMilli: 14000},
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(fleet.MockCPUHost("a")) // 32000 milli
				applyAt(t, f, cpuAt("big", "a", 12000), 900)
				applyAt(t, f, cpuAt("mid", "a", 8000), 300)
				applyAt(t, f, cpuAt("small", "a", 4000), 100)
				applyAt(t, f, cpuAt("small2", "a", 4000), 100)
				applyAt(t, f, cpuAt("od", "a", 4000), 0)
				return f
			}, victims: []string{"big", "small"}, host: "a"},
		{name: "non-preemptible never evicted", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1), t4("b", 1))
				applyAt(t, f, wholeAt("ondemand", "a", 0), 0)
				applyAt(t, f, wholeAt("spot", "b", 0), 5000)
				return f
			}, victims: []string{"spot"}, host: "b"},
		{name: "only non-preemptible", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1))
				applyAt(t, f, wholeAt("ondemand", "a", 0), 0)
				return f
			}, err: "0/1 hosts available: 1 no free GPU"},
		{name: "preemptible request evicts nothing", req: spot(gpuReq("r", 1), 99999),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1))
				applyAt(t, f, wholeAt("spot", "a", 0), 1)
				return f
			}, err: "0/1 hosts available: 1 no free GPU"},
		{name: "not for zone, model, labels or state", req: &Request{ID: "r", Mode: catalog.ModeGPU, GPUs: 1, Models: []string{"T4"}, Zones: []string{"zone-a"}, Labels: sels("driver>=550")},
			fleet: func(t *testing.T) *fleet.Fleet {
				zone := with(t4("zone", 1), func(h *fleet.Host) { h.Zone = "zone-b" })
				model := fleet.MockHost("model", "L4", 1)
				label := with(t4("label", 1), func(h *fleet.Host) { h.Labels["driver"] = "535.161" })
				state := with(t4("state", 1), func(h *fleet.Host) { h.State = fleet.Cordoned })
				f := fleet.MockFleet(zone, model, label, state)
				for _, h := range f.Hosts {
					applyAt(t, f, wholeAt("spot-"+h.ID, h.ID, 0), 1)
				}
				return f
			}, err: "0/4 hosts available: 1 host cordoned or unhealthy, 1 labels do not match driver>=550, 1 wrong GPU model, 1 wrong zone"},
		{name: "not for the placement group", req: &Request{ID: "r", Mode: catalog.ModeGPU, GPUs: 1, Group: &Group{Name: "g", Strategy: Spread, Hosts: []string{"a"}}},
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1), t4("b", 1))
				applyAt(t, f, wholeAt("sa", "a", 0), 1)
				applyAt(t, f, wholeAt("sb", "b", 0), 1000)
				return f
			}, victims: []string{"sb"}, host: "b"},
		{name: "NVLink: one island's worth", req: gpuReq("r", 4),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(fleet.MockNVLinkHost("n", "H100", 4, 4))
				applyAt(t, f, wholeAt("i0", "n", 0), 500)
				applyAt(t, f, wholeAt("i1a", "n", 4), 200)
				applyAt(t, f, wholeAt("i1b", "n", 5), 200)
				return f
			}, victims: []string{"i0"}, host: "n"},
		{name: "NVLink: 8 GPUs need the island emptied", req: gpuReq("r", 8),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(fleet.MockNVLinkHost("n", "H100", 8), fleet.MockNVLinkHost("split", "H100", 4, 4))
				applyAt(t, f, wholeAt("n1", "n", 0, 1), 500)
				applyAt(t, f, wholeAt("n2", "n", 7), 500)
				applyAt(t, f, wholeAt("s1", "split", 0), 1)
				return f
			}, victims: []string{"n1", "n2"}, host: "n"},
		{name: "MIG: the instance in the way", req: migReq("r", "4g.40gb"),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(with(fleet.MockHost("m", "H100", 1), func(h *fleet.Host) { h.GPUs[0].MIG = true }))
				applyAt(t, f, migAt("at0", "m", 0, 9, 0, false), 500)
				applyAt(t, f, migAt("at4", "m", 0, 19, 4, false), 10)
				applyAt(t, f, migAt("at5", "m", 0, 19, 5, false), 10)
				return f
			}, victims: []string{"at0"}, host: "m"},
		{name: "MIG: whole GPU after auto MIG", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				op := with(fleet.MockHost("op", "H100", 1), func(h *fleet.Host) { h.GPUs[0].MIG = true })
				f := fleet.MockFleet(fleet.MockHost("m", "H100", 1), op)
				applyAt(t, f, migAt("a1", "m", 0, 19, 0, true), 10)
				applyAt(t, f, migAt("a2", "m", 0, 19, 1, false), 10)
				// On the operator's MIG GPU evictions never give a whole GPU.
				applyAt(t, f, migAt("o1", "op", 0, 19, 0, false), 1)
				return f
			}, victims: []string{"a1", "a2"}, host: "m"},
		{name: "metal needs every allocation gone", req: metalReq("r", 0),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 2), t4("b", 2))
				applyAt(t, f, wholeAt("a1", "a", 0), 10)
				applyAt(t, f, cpuAt("a2", "a", 100), 10)
				applyAt(t, f, wholeAt("b1", "b", 0), 1)
				applyAt(t, f, cpuAt("b2", "b", 100), 0)
				return f
			}, victims: []string{"a1", "a2"}, host: "a"},
		{name: "spot metal host", req: gpuReq("r", 1),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 2))
				h := f.Host("a")
				applyAt(t, f, &fleet.Placement{ID: "metal", HostID: "a", Metal: true, CPUMilli: h.CPUMilli, MemoryMiB: h.MemoryMiB,
					Devices: []fleet.Device{{GPU: 0, Kind: fleet.Whole}, {GPU: 1, Kind: fleet.Whole}}}, 100)
				return f
			}, victims: []string{"metal"}, host: "a"},
		{name: "shares: enough milli", req: shareReq("r", 600, 1024),
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(t4("a", 1))
				applyAt(t, f, shareAt("s1", "a", 0, 300), 100)
				applyAt(t, f, shareAt("s2", "a", 0, 300), 50)
				applyAt(t, f, shareAt("s3", "a", 0, 400), 70)
				return f
			}, victims: []string{"s2", "s3"}, host: "a"},
		{name: "greedy above 12 candidates", req: &Request{ID: "r", Mode: catalog.ModeCPU, CPUMilli: 5000},
			fleet: func(t *testing.T) *fleet.Fleet {
				f := fleet.MockFleet(fleet.MockCPUHost("a"))
				for i := 0; i < 16; i++ {
					applyAt(t, f, cpuAt(fmt.Sprintf("c%02d", i), "a", 2000), int64(10+i))
				}
				return f
			}, victims: []string{"c00", "c01", "c02"}, host: "a"},
		{name: "invalid request", req: &Request{ID: "r", Mode: catalog.ModeGPU},
			fleet: func(t *testing.T) *fleet.Fleet { return fleet.MockFleet(t4("a", 1)) },
			err:   "invalid request: gpus"},
	}
}

func TestPlanPreemption(t *testing.T) {
	for _, c := range preemptCases() {
		t.Run(c.name, func(t *testing.T) {
			forPolicies(t, func(t *testing.T, e *Engine) {
				f := c.fleet(t)
				before := dumpFleet(f)
				req := *c.req
				plan, err := e.PlanPreemption(f, &req)
				if got := dumpFleet(f); got != before {
					t.Fatalf("PlanPreemption changed the fleet:\n%s\nwant\n%s", got, before)
				}
				if err := f.Check(); err != nil {
					t.Fatal(err)
				}
				if c.err != "" {
					if err == nil || !strings.Contains(err.Error(), c.err) {
						t.Fatalf("plan %+v, err %v; want error %q", plan, err, c.err)
					}
					if strings.HasPrefix(c.err, "0/") && !IsInsufficientCapacity(err) {
						t.Fatalf("err %T, want *InsufficientCapacityError", err)
					}
					if strings.HasPrefix(c.err, "invalid") && !IsInvalidRequest(err) {
						t.Fatalf("err %T, want *RequestError", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				victims := append([]string{}, plan.Victims...)
				if plan.HostID != c.host || fmt.Sprint(victims) != fmt.Sprint(c.victims) {
					t.Fatalf("plan: host %s victims %v; want host %s victims %v", plan.HostID, plan.Victims, c.host, c.victims)
				}
				execute(t, f, &req, plan)
				checkNoUselessVictim(t, f, &req, plan)
			})
		})
	}
}

// bruteForce finds the best plan key by trying every subset of preemptible
// allocations on every host, with the public API only.
func bruteForce(t *testing.T, f *fleet.Fleet, req *Request) (planKey, bool) {
	byHost := map[string][]*fleet.Placement{}
	for _, a := range f.Allocations() {
		if a.Preemptible {
			byHost[a.HostID] = append(byHost[a.HostID], a)
		}
	}
	var best planKey
	found := false
	for _, h := range f.Hosts {
		cands := byHost[h.ID]
		if len(cands) > 10 {
			t.Fatalf("host %s: %d candidates, too many for brute force", h.ID, len(cands))
		}
		for mask := 1; mask < 1<<len(cands); mask++ {
			key := planKey{host: h.ID}
			var ids []string
			for i, c := range cands {
				if mask&(1<<i) != 0 {
					key.victims++
					key.price += c.PriceMicros
					ids = append(ids, c.ID)
				}
			}
			if found && !key.less(best) {
				continue
			}
			if fitsOnHostWithout(t, f, req, h.ID, ids) {
				best, found = key, true
			}
		}
	}
	return best, found
}

// TestPreemptionProperties fills random fleets with a mix of spot and
// on-demand work and checks plans against brute force.
func TestPreemptionProperties(t *testing.T) {
	plans, errs := 0, 0
	for seed := int64(1); seed <= 6; seed++ {
		r := rand.New(rand.NewSource(seed))
		f := randomFleet(r, 6)
		e := newEngine(t, DefaultPolicy)
		// Fill the fleet with small work, most of it spot.
		for i := 0; i < 300; i++ {
			req := randomRequest(r, fmt.Sprintf("fill%d", i), f)
			req.Group = nil
			if req.Mode == catalog.ModeMetal || req.Mode == catalog.ModeGPU && req.GPUs > 2 {
				continue
			}
			req.Preemptible = r.Intn(4) != 0
			req.PriceMicros = int64(1+r.Intn(5)) * 100
			if p, err := e.Place(f, req); err == nil {
				if err := f.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Keep brute force cheap: at most 6 candidates per host.
		perHost := map[string]int{}
		for _, a := range f.Allocations() {
			if a.Preemptible {
				perHost[a.HostID]++
				if perHost[a.HostID] > 6 {
					if err := f.Release(a.ID); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		before := dumpFleet(f)
		for i := 0; i < 12; i++ {
			req := randomRequest(r, fmt.Sprintf("q%d-%d", seed, i), f)
			req.Preemptible, req.PriceMicros = false, 0
			plan, err := e.PlanPreemption(f, req)
			if dumpFleet(f) != before {
				t.Fatal("PlanPreemption changed the fleet")
			}
			if err != nil {
				if !IsInsufficientCapacity(err) {
					t.Fatalf("%+v: %v", *req, err)
				}
				if _, ok := bruteForce(t, f, req); ok {
					t.Fatalf("%+v: no plan (%v), but brute force finds one", *req, err)
				}
				errs++
				continue
			}
			plans++
			execute(t, f, req, plan)
			if len(plan.Victims) == 0 {
				if _, err := e.Place(f, req); err != nil {
					t.Fatalf("plan without victims, but Place says %v", err)
				}
				continue
			}
			checkNoUselessVictim(t, f, req, plan)
			want, ok := bruteForce(t, f, req)
			got := planKey{len(plan.Victims), plan.PriceMicros, plan.HostID}
			if !ok || got != want {
				t.Fatalf("%+v: plan %+v, brute force %+v (%v)", *req, got, want, ok)
			}
		}
	}
	if plans < 10 || errs < 3 {
		t.Errorf("%d plans, %d errors: the test does not exercise the planner", plans, errs)
	}
}

// TestPreemptionScale plans on a 10k-host fleet full of spot work.
func TestPreemptionScale(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	f := fleet.New()
	cat := catalog.Default()
	const hosts = 10000
	for i := 0; i < hosts; i++ {
		var h *fleet.Host
		if i%2 == 0 {
			h = fleet.MockNVLinkHost(fmt.Sprintf("h%05d", i), "H100", 4, 4)
		} else {
			h = fleet.MockHost(fmt.Sprintf("h%05d", i), "L40S", 4)
		}
		if err := f.AddHost(h, cat); err != nil {
			t.Fatal(err)
		}
	}
	for i, h := range f.Hosts {
		for g := range h.GPUs {
			price := int64(100 + r.Intn(1000))
			if i%7 == 0 && g == 0 {
				price = 0 // on demand
			}
			applyAt(t, f, wholeAt(fmt.Sprintf("a%05d-%d", i, g), h.ID, g), price)
		}
	}
	e := newEngine(t, DefaultPolicy)
	for _, req := range []*Request{gpuReq("one", 1), gpuReq("four", 4, "H100"), gpuReq("eight", 8), shareReq("share", 500, 1024, "L40S"), migReq("mig", "3g.40gb")} {
		start := time.Now()
		plan, err := e.PlanPreemption(f, req)
		took := time.Since(start)
		if req.ID == "eight" {
			if !IsInsufficientCapacity(err) {
				t.Errorf("8 GPUs on 4-GPU islands: %v, %v", plan, err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", req.ID, err)
		} else if want := map[string]int{"one": 1, "four": 4, "share": 1, "mig": 1}[req.ID]; len(plan.Victims) != want {
			t.Errorf("%s: %d victims, want %d", req.ID, len(plan.Victims), want)
		}
		t.Logf("%s: %v", req.ID, took)
		if took > 3*time.Second { // typically well under 0.3 s
			t.Errorf("%s: planning took %v on %d hosts", req.ID, took, hosts)
		}
	}
	// The cheapest single victim in the fleet is chosen for one GPU.
	var cheapest int64 = 1 << 62
	for _, a := range f.Allocations() {
		if a.Preemptible && a.PriceMicros < cheapest {
			cheapest = a.PriceMicros
		}
	}
	plan, err := e.PlanPreemption(f, gpuReq("one", 1))
	if err != nil || plan.PriceMicros != cheapest {
		t.Errorf("one GPU: plan %+v, %v; cheapest spot is %d", plan, err, cheapest)
	}
	ids := append([]string(nil), plan.Victims...)
	if !sort.StringsAreSorted(ids) {
		t.Error("victims not sorted")
	}
}

// TestPlanPreemptionMatchesReference compares PlanPreemption with
// refPlanPreemption, the straightforward planner it replaced (every
// allocation copied and grouped by host, every preemptible one a candidate,
// a scratch fleet per host): on random fleets, including hosts planned
// greedily and ties in price, both must give the same plan or the same
// error.
func TestPlanPreemptionMatchesReference(t *testing.T) {
	plans, errs, greedy := 0, 0, 0
	for seed := int64(1); seed <= 8; seed++ {
		r := rand.New(rand.NewSource(seed))
		f := randomFleet(r, 24)
		fill := newEngine(t, DefaultPolicy)
		for i := 0; i < 700; i++ {
			req := randomRequest(r, fmt.Sprintf("fill%03d", i), f)
			req.Group = nil
			if req.Mode == catalog.ModeMetal && r.Intn(3) != 0 {
				continue
			}
			if r.Intn(3) == 0 {
				// Small CPU work, so that some hosts carry many candidates.
				req = &Request{ID: req.ID, Mode: catalog.ModeCPU, CPUMilli: int64(1+r.Intn(4)) * 500, MemoryMiB: 512}
			}
			// Few distinct prices, so that ties are common.
			req.Preemptible, req.PriceMicros = r.Intn(4) != 0, int64(1+r.Intn(4))*100
			if p, err := fill.Place(f, req); err == nil {
				if err := f.Apply(p); err != nil {
					t.Fatal(err)
				}
			}
		}
		perHost := map[string]int{}
		for _, a := range f.Allocations() {
			if a.Preemptible {
				perHost[a.HostID]++
			}
		}
		for _, n := range perHost {
			if n > maxExactVictims {
				greedy++
			}
		}
		for _, policy := range []string{DefaultPolicy, Policies()[len(Policies())-1]} {
			e, ref := newEngine(t, policy), newEngine(t, policy)
			for i := 0; i < 40; i++ {
				req := randomRequest(r, fmt.Sprintf("q%d-%d", seed, i), f)
				if r.Intn(2) == 0 {
					// Big whole-GPU requests need evictions most often.
					req.Mode, req.GPUs, req.MIGProfile, req.ShareMilli, req.ShareMemoryMiB = catalog.ModeGPU, []int{2, 4, 8}[r.Intn(3)], "", 0, 0
				}
				req.Preemptible, req.PriceMicros = false, 0
				r1, r2 := *req, *req
				got, err := e.PlanPreemption(f, &r1)
				want, wantErr := ref.refPlanPreemption(f, &r2)
				if fmt.Sprint(err) != fmt.Sprint(wantErr) {
					t.Fatalf("seed %d %s %+v: error %v, reference %v", seed, policy, *req, err, wantErr)
				}
				if err != nil {
					errs++
					continue
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d %s %+v:\nplan      %+v %+v\nreference %+v %+v", seed, policy, *req, *got, got.Placement, *want, want.Placement)
				}
				if len(got.Victims) > 0 {
					plans++
				}
			}
		}
		if err := f.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if plans < 50 || errs < 10 || greedy == 0 {
		t.Errorf("%d plans with victims, %d errors, %d hosts planned greedily: the test does not exercise the planner", plans, errs, greedy)
	}
	t.Logf("%d plans with victims, %d errors, %d hosts with more than %d candidates", plans, errs, greedy, maxExactVictims)
}

// refPlanPreemption is PlanPreemption as first written: simple, slow, and
// the reference the optimised planner must agree with.
func (e *Engine) refPlanPreemption(f *fleet.Fleet, in *Request) (*PreemptionPlan, error) {
	p, err := e.Place(f, in)
	if err == nil {
		return &PreemptionPlan{HostID: p.HostID, Placement: p}, nil
	}
	var ice *InsufficientCapacityError
	if !errors.As(err, &ice) || in.Preemptible {
		return nil, err
	}
	// Place validated a copy; normalise ours the same way (it cannot fail
	// now) without touching the caller's request.
	r := *in
	r.Models = append([]string(nil), in.Models...)
	req := &r
	if err := req.Validate(e.cat); err != nil {
		return nil, err
	}
	s := e.shapeOf(req)

	// Every allocation by host: the scratch copy of a host needs them all.
	byHost := map[string][]*fleet.Placement{}
	for _, a := range f.Allocations() {
		byHost[a.HostID] = append(byHost[a.HostID], a)
	}

	var hosts []*refPreemptHost
	for _, c := range f.Classes() {
		m := e.lookup(f, c, s)
		if !capacityReason(Reason(m.reason)) {
			continue
		}
		for _, i := range c.Members() {
			h := f.Hosts[i]
			if !groupAllows(req.Group, h) {
				continue
			}
			if ph := refNewPreemptHost(h, byHost[h.ID], req, s); ph != nil {
				hosts = append(hosts, ph)
			}
		}
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].bound.less(hosts[j].bound) })

	var best *refPreemptResult
	for _, ph := range hosts {
		if best != nil && !ph.bound.less(best.key) {
			break // sorted by lower bound: no later host can do better
		}
		r, err := e.refPlanHost(ph, s, best)
		if err != nil {
			return nil, err
		}
		if r != nil && (best == nil || r.key.less(best.key)) {
			best = r
		}
	}
	if best == nil {
		return nil, err
	}
	return e.refFinishPlan(best, req)
}

// refPreemptHost is a host that might take the request after evictions.
type refPreemptHost struct {
	h      *fleet.Host
	allocs []*fleet.Placement // all allocations on the host
	cands  []*fleet.Placement // the preemptible ones, cheapest first
	// bound is a lower bound on the key of any plan on this host.
	bound planKey
}

type refPreemptResult struct {
	key     planKey
	ph      *refPreemptHost
	victims []*fleet.Placement
}

// refNewPreemptHost returns nil when even evicting every preemptible
// allocation on h could not free enough CPU, memory or GPUs for req.
func refNewPreemptHost(h *fleet.Host, allocs []*fleet.Placement, req *Request, s *shape) *refPreemptHost {
	var cands []*fleet.Placement
	for _, a := range allocs {
		if a.Preemptible {
			cands = append(cands, a)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].PriceMicros < cands[j].PriceMicros })

	lb := 1
	// need is how many of vals (largest first) it takes to cover deficit;
	// -1 when all of them do not.
	need := func(deficit int64, val func(*fleet.Placement) int64) int {
		if deficit <= 0 {
			return 0
		}
		vs := make([]int64, len(cands))
		for i, c := range cands {
			vs[i] = val(c)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i] > vs[j] })
		for i, v := range vs {
			deficit -= v
			if deficit <= 0 {
				return i + 1
			}
		}
		return -1
	}
	cpu, mem := req.CPUMilli-h.FreeCPU(), req.MemoryMiB-h.FreeMemory()
	var gpus int64
	switch req.Mode {
	case catalog.ModeMetal:
		// Everything on the host must go, and the host must have the shape.
		if len(cands) != len(allocs) || req.GPUs > 0 && len(h.GPUs) != req.GPUs ||
			req.CPUMilli > h.CPUMilli || req.MemoryMiB > h.MemoryMiB {
			return nil
		}
		lb, cpu, mem = len(cands), 0, 0
	case catalog.ModeGPU:
		free := 0
		for i := range h.GPUs {
			g := &h.GPUs[i]
			if (s.models == nil || s.models[g.Model]) && g.Empty() && !g.MIG {
				free++
			}
		}
		gpus = int64(req.GPUs - free)
	}
	for _, n := range []int{
		need(cpu, func(p *fleet.Placement) int64 { return p.CPUMilli }),
		need(mem, func(p *fleet.Placement) int64 { return p.MemoryMiB }),
		need(gpus, func(p *fleet.Placement) int64 { return int64(len(p.Devices)) }),
	} {
		if n < 0 {
			return nil
		}
		lb = max(lb, n)
	}
	var price int64
	for _, c := range cands[:lb] {
		price += c.PriceMicros
	}
	return &refPreemptHost{h: h, allocs: allocs, cands: cands, bound: planKey{lb, price, h.ID}}
}

// refScratchHost is a one-host fleet holding a copy of a host and its
// allocations, where victims can be released and put back.
type refScratchHost struct {
	f     *fleet.Fleet
	h     *fleet.Host
	byID  map[string]*fleet.Placement
	evict []*fleet.Placement
}

func refNewScratchHost(ph *refPreemptHost) (*refScratchHost, error) {
	hc := *ph.h
	hc.GPUs = append([]fleet.GPU(nil), ph.h.GPUs...)
	for i := range hc.GPUs {
		// A GPU that placement switched into MIG mode leaves it with its
		// last instance; rebuild it that way so that releases here behave
		// as they would in the fleet.
		if g := &hc.GPUs[i]; g.MIGAuto {
			g.MIG, g.Instances = false, nil
		}
	}
	sf := fleet.New()
	if err := sf.AddHost(&hc, nil); err != nil {
		return nil, fmt.Errorf("plan preemption: copy host %s: %w", hc.ID, err)
	}
	sc := &refScratchHost{f: sf, h: sf.Host(hc.ID), byID: map[string]*fleet.Placement{}}
	for _, a := range ph.allocs {
		cp := *a
		cp.Devices = append([]fleet.Device(nil), a.Devices...)
		for i := range cp.Devices {
			// Whichever instance comes back first switches the GPU on.
			if cp.Devices[i].Kind == fleet.MIGSlice {
				cp.Devices[i].EnableMIG = true
			}
		}
		if err := sf.Apply(&cp); err != nil {
			return nil, fmt.Errorf("plan preemption: copy host %s: %w", hc.ID, err)
		}
		sc.byID[cp.ID] = &cp
	}
	return sc, nil
}

// refFitsWithout reports whether the request of shape s fits the host once
// victims are gone, leaving the scratch host as it was.
func (e *Engine) refFitsWithout(sc *refScratchHost, s *shape, victims []*fleet.Placement) (bool, error) {
	for _, v := range victims {
		if err := sc.f.Release(v.ID); err != nil {
			return false, fmt.Errorf("plan preemption: %w", err)
		}
	}
	m := e.evaluate(sc.h, s)
	for _, v := range victims {
		if err := sc.f.Apply(sc.byID[v.ID]); err != nil {
			return false, fmt.Errorf("plan preemption: restore %s: %w", v.ID, err)
		}
	}
	return m.reason == uint8(reasonNone), nil
}

// refPlanHost finds the best victim set on one host, or nil when none helps or
// none can beat best.
func (e *Engine) refPlanHost(ph *refPreemptHost, s *shape, best *refPreemptResult) (*refPreemptResult, error) {
	sc, err := refNewScratchHost(ph)
	if err != nil {
		return nil, err
	}
	if ok, err := e.refFitsWithout(sc, s, ph.cands); err != nil || !ok {
		return nil, err
	}
	n := len(ph.cands)
	if n > maxExactVictims {
		return e.refPlanGreedy(sc, ph, s)
	}
	var (
		found *refPreemptResult
		idx   = make([]int, 0, n)
		set   = make([]*fleet.Placement, 0, n)
	)
	for k := ph.bound.victims; k <= n && found == nil; k++ {
		if best != nil && k > best.key.victims {
			break
		}
		// Every k-subset, in lexicographic order of the price-sorted
		// candidates, so that ties keep the first (cheapest-leaning) set.
		var walk func(from int) error
		walk = func(from int) error {
			if len(idx) == k {
				key := planKey{k, 0, ph.h.ID}
				for _, i := range idx {
					key.price += ph.cands[i].PriceMicros
				}
				if best != nil && !key.less(best.key) || found != nil && !key.less(found.key) {
					return nil
				}
				set = set[:0]
				for _, i := range idx {
					set = append(set, ph.cands[i])
				}
				ok, err := e.refFitsWithout(sc, s, set)
				if err != nil {
					return err
				}
				if ok {
					found = &refPreemptResult{key: key, ph: ph, victims: append([]*fleet.Placement(nil), set...)}
				}
				return nil
			}
			for i := from; i <= n-(k-len(idx)); i++ {
				idx = append(idx, i)
				err := walk(i + 1)
				idx = idx[:len(idx)-1]
				if err != nil {
					return err
				}
			}
			return nil
		}
		if err := walk(0); err != nil {
			return nil, err
		}
	}
	return found, nil
}

// refPlanGreedy evicts the cheapest candidates until the request fits, then
// drops, most expensive first, every victim it can do without.
func (e *Engine) refPlanGreedy(sc *refScratchHost, ph *refPreemptHost, s *shape) (*refPreemptResult, error) {
	var set []*fleet.Placement
	for _, c := range ph.cands {
		set = append(set, c)
		ok, err := e.refFitsWithout(sc, s, set)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
	}
	for i := len(set) - 1; i >= 0; i-- {
		without := append(append([]*fleet.Placement(nil), set[:i]...), set[i+1:]...)
		ok, err := e.refFitsWithout(sc, s, without)
		if err != nil {
			return nil, err
		}
		if ok {
			set = without
		}
	}
	key := planKey{len(set), 0, ph.h.ID}
	for _, v := range set {
		key.price += v.PriceMicros
	}
	return &refPreemptResult{key: key, ph: ph, victims: set}, nil
}

// refFinishPlan places the request on the chosen host with its victims gone.
func (e *Engine) refFinishPlan(r *refPreemptResult, req *Request) (*PreemptionPlan, error) {
	sc, err := refNewScratchHost(r.ph)
	if err != nil {
		return nil, err
	}
	plan := &PreemptionPlan{HostID: r.ph.h.ID, PriceMicros: r.key.price}
	for _, v := range r.victims {
		if err := sc.f.Release(v.ID); err != nil {
			return nil, fmt.Errorf("plan preemption: %w", err)
		}
		plan.Victims = append(plan.Victims, v.ID)
	}
	sort.Strings(plan.Victims)
	p, err := e.Place(sc.f, req)
	if err != nil {
		return nil, fmt.Errorf("plan preemption: host %s does not take the request after evictions: %w", plan.HostID, err)
	}
	plan.Placement = p
	return plan, nil
}
