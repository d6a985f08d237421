package placement

import (
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/fleet"
)

// tenantShare is a share request of a tenant.
func tenantShare(id, tenant string, milli int) *Request {
	r := shareReq(id, milli, 1024)
	r.Tenant = tenant
	return r
}

// TestShareTenantOtherGPU: a share of tenant B never joins tenant A's
// shares: it takes another GPU of the host, or another host, and when
// there is none it waits with its own reason. B's shares stack on B's GPU.
func TestShareTenantOtherGPU(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		// Two GPUs: A holds one, B gets the other.
		f := fleet.MockFleet(fleet.MockHost("h", "L40S", 2))
		a := mustPlace(t, e, f, tenantShare("a1", "tenant-a", 250))
		if a.Tenant != "tenant-a" {
			t.Fatalf("placement tenant %q", a.Tenant)
		}
		b := mustPlace(t, e, f, tenantShare("b1", "tenant-b", 250))
		if b.Devices[0].GPU == a.Devices[0].GPU {
			t.Fatalf("tenant-b's share on tenant-a's GPU %d", a.Devices[0].GPU)
		}
		// Both GPUs taken by one tenant each: A and B still fit, on their
		// own GPU; C does not, for the tenant reason.
		a2 := mustPlace(t, e, f, tenantShare("a2", "tenant-a", 250))
		b2 := mustPlace(t, e, f, tenantShare("b2", "tenant-b", 250))
		if a2.Devices[0].GPU != a.Devices[0].GPU || b2.Devices[0].GPU != b.Devices[0].GPU {
			t.Fatalf("second shares on gpus %d and %d, want %d and %d", a2.Devices[0].GPU, b2.Devices[0].GPU, a.Devices[0].GPU, b.Devices[0].GPU)
		}
		_, err := e.Place(f, tenantShare("c1", "tenant-c", 250))
		if err == nil || err.Error() != "0/1 hosts available: 1 GPU shared by another tenant" {
			t.Fatalf("tenant-c on a host whose GPUs tenants a and b share: %v", err)
		}
		// Nor does a share without a tenant go there.
		if _, err := e.Place(f, tenantShare("n1", "", 250)); err == nil || !strings.Contains(err.Error(), "GPU shared by another tenant") {
			t.Fatalf("a tenant-less share on tenants' GPUs: %v", err)
		}
		// Too big for the room left anyway: the share reason, not the
		// tenant's.
		if _, err := e.Place(f, tenantShare("c2", "tenant-c", 900)); err == nil || !strings.Contains(err.Error(), "no GPU with 900 milli") {
			t.Fatalf("a share that fits no GPU's room: %v", err)
		}
		// Another host takes C.
		if err := f.AddHost(fleet.MockHost("k", "L40S", 1), nil); err != nil {
			t.Fatal(err)
		}
		if p := mustPlace(t, e, f, tenantShare("c3", "tenant-c", 250)); p.HostID != "k" {
			t.Fatalf("tenant-c's share on %s, want k", p.HostID)
		}
		// A's last shares going frees its GPU for C.
		for _, id := range []string{"a1", "a2"} {
			if err := f.Release(id); err != nil {
				t.Fatal(err)
			}
		}
		p := mustPlace(t, e, f, tenantShare("c4", "tenant-c", 500))
		if p.HostID != "h" && p.HostID != "k" {
			t.Fatalf("tenant-c's share on %s", p.HostID)
		}
	})
}

// TestShareTenantEmpty: requests without a tenant share GPUs with each
// other exactly as before tenants were recorded.
func TestShareTenantEmpty(t *testing.T) {
	forPolicies(t, func(t *testing.T, e *Engine) {
		f := fleet.MockFleet(fleet.MockHost("h", "T4", 1))
		ps, err := placeUntilFull(t, e, f, *shareReq("x", 250, 1024))
		if len(ps) != 4 || err == nil || !strings.Contains(err.Error(), "no GPU with 250 milli") {
			t.Fatalf("%d shares without a tenant on one GPU (want 4), then %v", len(ps), err)
		}
	})
}

// TestShareTenantShapes: the shape (and so the per-class memo) of a share
// request includes its tenant, and that of other modes does not: one
// engine answers each tenant as a fresh engine would.
func TestShareTenantShapes(t *testing.T) {
	e := newEngine(t, DefaultPolicy)
	f := fleet.MockFleet(fleet.MockHost("h", "L40S", 1))
	mustPlace(t, e, f, tenantShare("a1", "tenant-a", 250))
	for i, c := range []struct {
		tenant string
		fits   bool
	}{{"tenant-a", true}, {"tenant-b", false}, {"tenant-a", true}, {"", false}, {"tenant-b", false}} {
		for _, eng := range []*Engine{e, newEngine(t, DefaultPolicy)} {
			_, err := eng.Place(f, tenantShare("q", c.tenant, 250))
			if (err == nil) != c.fits {
				t.Fatalf("query %d, tenant %q: %v, want fits %v", i, c.tenant, err, c.fits)
			}
		}
	}
	if a, b := e.shapeOf(tenantShare("x", "tenant-a", 250)), e.shapeOf(tenantShare("y", "tenant-b", 250)); a == b {
		t.Error("share requests of two tenants have one shape")
	}
	ga, gb := gpuReq("x", 1), gpuReq("y", 1)
	ga.Tenant, gb.Tenant = "tenant-a", "tenant-b"
	if e.shapeOf(ga) != e.shapeOf(gb) {
		t.Error("whole-GPU requests of two tenants have two shapes")
	}
	// The tenant of a non-share placement is the request's, not the
	// shape's first.
	g := fleet.MockFleet(fleet.MockHost("g", "H100", 2))
	if p := mustPlace(t, e, g, ga); p.Tenant != "tenant-a" {
		t.Errorf("placement tenant %q, want tenant-a", p.Tenant)
	}
	if p := mustPlace(t, e, g, gb); p.Tenant != "tenant-b" {
		t.Errorf("placement tenant %q, want tenant-b", p.Tenant)
	}
	// Count sees the tenant too.
	if _, fit, reasons, err := e.Count(f, tenantShare("q", "tenant-b", 100)); err != nil || fit != 0 || reasons["GPU shared by another tenant"] != 1 {
		t.Errorf("Count for tenant-b: fit %d, %v, %v", fit, reasons, err)
	}
	if _, fit, _, err := e.Count(f, tenantShare("q", "tenant-a", 100)); err != nil || fit != 1 {
		t.Errorf("Count for tenant-a: fit %d, %v", fit, err)
	}
}

// TestShareTenantPreemption: evicting spot shares of tenant X helps tenant
// Y only when all of X's shares on the GPU go; a share of X that is not
// preemptible keeps the GPU X's.
func TestShareTenantPreemption(t *testing.T) {
	spot := func(id, tenant string, milli int, price int64) *fleet.Placement {
		return &fleet.Placement{ID: id, HostID: "h", Tenant: tenant, CPUMilli: 1000, MemoryMiB: 1024,
			Preemptible: true, PriceMicros: price,
			Devices: []fleet.Device{{GPU: 0, Kind: fleet.Share, Milli: milli, MemoryMiB: 1024}}}
	}
	build := func(t *testing.T, ps ...*fleet.Placement) *fleet.Fleet {
		f := fleet.MockFleet(fleet.MockHost("h", "L40S", 1))
		for _, p := range ps {
			if err := f.Apply(p); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	forPolicies(t, func(t *testing.T, e *Engine) {
		// Two cheap spot shares of X: Y's small share needs both gone,
		// though either alone frees enough compute.
		f := build(t, spot("x1", "tenant-x", 200, 100), spot("x2", "tenant-x", 200, 300))
		req := tenantShare("y", "tenant-y", 200)
		plan, err := e.PlanPreemption(f, req)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(plan.Victims, ",") != "x1,x2" || plan.Placement.Tenant != "tenant-y" {
			t.Fatalf("victims %v, placement %+v; want x1,x2 for tenant-y", plan.Victims, plan.Placement)
		}
		execute(t, f, req, plan)
		checkNoUselessVictim(t, f, req, plan)
		// X itself fits without evicting anything.
		if plan, err := e.PlanPreemption(f, tenantShare("x3", "tenant-x", 200)); err != nil || len(plan.Victims) != 0 {
			t.Fatalf("tenant-x's own share: %+v, %v", plan, err)
		}
		// One of X's shares is on demand: no eviction makes room for Y.
		od := spot("x0", "tenant-x", 100, 0)
		od.Preemptible = false
		f = build(t, od, spot("x1", "tenant-x", 200, 100))
		if _, err := e.PlanPreemption(f, req); err == nil || !strings.Contains(err.Error(), "GPU shared by another tenant") {
			t.Fatalf("a GPU kept by tenant-x's on-demand share: %v", err)
		}
		// Full with X's shares: Y's big share evicts them all, by price.
		f = build(t, spot("x1", "tenant-x", 500, 100), spot("x2", "tenant-x", 500, 100))
		plan, err = e.PlanPreemption(f, tenantShare("y", "tenant-y", 600))
		if err != nil || strings.Join(plan.Victims, ",") != "x1,x2" {
			t.Fatalf("plan %+v, %v; want victims x1,x2", plan, err)
		}
	})
}

// TestShareTenantReasonListed: the tenant reason is one of the engine's
// reasons, after the share reason, and counts as capacity for preemption.
func TestShareTenantReasonListed(t *testing.T) {
	req := &Request{Mode: catalog.ModeShared, ShareMilli: 100}
	if ReasonShareTenant <= ReasonShare || ReasonShareTenant >= ReasonGroup || ReasonShareTenant.Describe(req) != "GPU shared by another tenant" {
		t.Errorf("reason %d %q", ReasonShareTenant, ReasonShareTenant.Describe(req))
	}
	if !capacityReason(ReasonShareTenant) {
		t.Error("the tenant reason is not a capacity reason")
	}
}
