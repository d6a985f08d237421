package service_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// launchWorkers applies a plan that launches one worker of e per market
// and answers their IDs.
func launchWorkers(t *testing.T, f *vaFixture, e *cloud.Endpoint, ms ...cloud.Market) []string {
	t.Helper()
	ctx := context.Background()
	cur, err := f.svc.Endpoints.Get(ctx, service.Actor{ID: "test", Role: cloud.RoleAdmin}, e.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := service.ApplyEndpointPlan(ctx, f.st, catalog.Default(), service.Controller("endpoints"),
		&service.EndpointPlan{EndpointID: e.ID, Version: cur.Version, EndpointPlan: autoscale.EndpointPlan{Launch: ms, Desired: len(ms)}},
		nil, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	cur, _ = f.svc.Endpoints.Get(ctx, service.Actor{ID: "test", Role: cloud.RoleAdmin}, e.ID)
	var ids []string
	for _, w := range cur.Status.Workers[len(cur.Status.Workers)-len(ms):] {
		ids = append(ids, w.ID)
	}
	return ids
}

// endpointLines sums the lines of endpoint id on inv and counts them.
func endpointLines(inv *billing.Invoice, id string) (sum money.Micros, n int) {
	for _, l := range inv.Lines {
		if l.EndpointID == id {
			sum += l.Amount
			n++
		}
	}
	return sum, n
}

// TestEndpointBilling: an endpoint's workers bill per second as instances
// do, on lines of their own under the endpoint's name (on demand, spot
// and the minimum of a short run), which sum with the rest to the total;
// describe's cost is exactly those lines, at every step; another tenant's
// invoice never shows the endpoint, and its describe is not_found.
func TestEndpointBilling(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		if _, err := service.BootstrapPrices(ctx, st, catalog.Default(), f.clock.Now()); err != nil {
			t.Fatal(err)
		}
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "")
		if err != nil {
			t.Fatal(err)
		}
		ge, _, err := f.svc.Endpoints.Create(ctx, f.globex, echoEndpoint("echo"), "")
		if err != nil {
			t.Fatal(err)
		}
		plain := f.instance(f.acme)
		workers := launchWorkers(t, f, e, cloud.MarketOnDemand, cloud.MarketSpot, cloud.MarketOnDemand)
		gworkers := launchWorkers(t, f, ge, cloud.MarketOnDemand)
		via := testkit.Via{Host: "h-1", Zone: "us-east-1a"}
		for _, id := range append(append([]string{plain.ID}, workers...), gworkers...) {
			testkit.Walk(t, st, id, cloud.Running, via, f.clock.Now())
		}
		for _, id := range workers {
			if in, err := f.svc.Instances.Get(ctx, f.acme, id); err != nil || in.EndpointID != e.ID {
				t.Fatalf("worker %s: %+v %v, want endpoint %s", id, in, err, e.ID)
			}
		}
		if in, _ := f.svc.Instances.Get(ctx, f.acme, plain.ID); in.EndpointID != "" {
			t.Errorf("a plain instance has endpoint %q", in.EndpointID)
		}

		// check rates acme's and globex's invoices and checks them
		// against each other and against describe.
		check := func(step string, wantLines bool) {
			t.Helper()
			for _, c := range []struct {
				a            service.Actor
				mine, theirs *cloud.Endpoint
			}{{f.acme, e, ge}, {f.globex, ge, e}} {
				invs, err := f.svc.Billing.Invoices(ctx, c.a, "", mustMonth(t, f))
				if err != nil || len(invs) != 1 {
					t.Fatalf("%s: invoices: %v %v", step, invs, err)
				}
				inv := invs[0]
				var total money.Micros
				for _, l := range inv.Lines {
					total += l.Amount
					if l.EndpointID == "" {
						if strings.HasPrefix(l.Description, "endpoint ") {
							t.Errorf("%s: %s: line %q names an endpoint", step, c.a.TenantID, l.Description)
						}
						continue
					}
					if l.EndpointID != c.mine.ID || l.Endpoint != "echo" || !strings.HasPrefix(l.Description, "endpoint echo: ") {
						t.Errorf("%s: %s: line %+v: want endpoint %s named echo", step, c.a.TenantID, l, c.mine.ID)
					}
					if l.Category != billing.CategoryCompute && l.Category != billing.CategoryMinimum {
						t.Errorf("%s: %s line of an endpoint", step, l.Category)
					}
				}
				if total != inv.Total {
					t.Errorf("%s: %s: lines sum to %s, total %s", step, c.a.TenantID, total, inv.Total)
				}
				if _, n := endpointLines(inv, c.theirs.ID); n != 0 {
					t.Errorf("%s: %s's invoice shows the other tenant's endpoint", step, c.a.TenantID)
				}
				sum, n := endpointLines(inv, c.mine.ID)
				if wantLines && (n == 0 || sum <= 0) {
					t.Errorf("%s: %s: endpoint lines %d summing to %s", step, c.a.TenantID, n, sum)
				}
				d, err := f.svc.Endpoints.Describe(ctx, c.a, c.mine.ID)
				if err != nil || d.Cost == nil || *d.Cost != sum || d.CostMonth != inv.Month || d.CostError != "" {
					t.Errorf("%s: %s: describe cost %v in %s (%v), invoice lines %s", step, c.a.TenantID, d.Cost, d.CostMonth, err, sum)
				}
				if _, err := f.svc.Endpoints.Describe(ctx, c.a, c.theirs.ID); codeOf(err) != cloud.NotFound {
					t.Errorf("%s: %s describes the other tenant's endpoint: %v", step, c.a.TenantID, err)
				}
			}
		}
		check("at start", false)
		f.clock.Advance(30 * time.Second)
		// Worker 3 ends after 30 s: a minimum line of its own.
		testkit.Walk(t, st, workers[2], cloud.Terminated, via, f.clock.Now())
		f.clock.Advance(10 * time.Minute)
		check("after 10 minutes", true)
		invs, _ := f.svc.Billing.Invoices(ctx, f.acme, "", mustMonth(t, f))
		cats := map[string]bool{}
		for _, l := range invs[0].Lines {
			if l.EndpointID == e.ID {
				cats[string(l.Category)+"/"+l.Model] = true
			}
		}
		for _, want := range []string{"compute/on_demand", "compute/spot", "minimum/on_demand"} {
			if !cats[want] {
				t.Errorf("no %s line of the endpoint: %v", want, cats)
			}
		}
		// The endpoint deleted: its workers' seconds stay on the invoice
		// under its name.
		if _, err := f.svc.Endpoints.Delete(ctx, f.acme, e.ID); err != nil {
			t.Fatal(err)
		}
		for _, id := range workers[:2] {
			testkit.Walk(t, st, id, cloud.Terminated, via, f.clock.Now())
		}
		f.clock.Advance(time.Minute)
		check("after delete", true)
	})
}

func mustMonth(t *testing.T, f *vaFixture) billing.Period {
	t.Helper()
	p, err := f.svc.Billing.Month("")
	if err != nil {
		t.Fatal(err)
	}
	return p
}
