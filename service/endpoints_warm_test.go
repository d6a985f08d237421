package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestApplyEndpointWarmPool: a plan's pause moves a running worker to
// paused (its assignment says pause, and its compute keeps billing: no
// ledger entry either way), its resume moves it back; a pause or resume
// of a worker that moved on meanwhile changes nothing; the hosts the
// workers ran on are kept in the status and a new worker prefers them; a
// new generation forgets them.
func TestApplyEndpointWarmPool(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		req := echoEndpoint("warm")
		req.Warm = 1
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "")
		if err != nil {
			t.Fatal(err)
		}
		if e.Spec.Warm != 1 {
			t.Fatalf("warm %d", e.Spec.Warm)
		}
		apply := func(p service.EndpointPlan) *cloud.Endpoint {
			t.Helper()
			cur, err := f.svc.Endpoints.Get(ctx, f.acme, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			p.EndpointID, p.Version = e.ID, cur.Version
			if err := service.ApplyEndpointPlan(ctx, st, catalog.Default(), service.Controller("endpoints"), &p, nil, f.clock.Now()); err != nil {
				t.Fatal(err)
			}
			cur, _ = f.svc.Endpoints.Get(ctx, f.acme, e.ID)
			return cur
		}
		state := func(id string) cloud.State {
			t.Helper()
			in, err := f.svc.Instances.Get(ctx, f.acme, id)
			if err != nil {
				t.Fatal(err)
			}
			return in.State
		}
		ledger := func() int {
			var n int
			if err := st.Tx(ctx, func(tx cloud.Tx) error {
				us, err := tx.ListUsage(ctx, cloud.UsageFilter{TenantID: f.acme.TenantID})
				n = len(us)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			return n
		}
		cur := apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Launch: []cloud.Market{cloud.MarketOnDemand}}})
		w := cur.Status.Workers[0].ID
		if in, _ := f.svc.Instances.Get(ctx, f.acme, w); len(in.PreferHosts) != 0 {
			t.Fatalf("the first worker prefers %v; nothing ran yet", in.PreferHosts)
		}
		testkit.Walk(t, st, w, cloud.Running, testkit.Via{Host: "h-1"}, f.clock.Now())
		before := ledger()
		f.clock.Advance(time.Second)
		cur = apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Pause: []string{w}}, Hosts: []string{"h-1"}})
		if s := state(w); s != cloud.Paused {
			t.Fatalf("paused worker is %s", s)
		}
		if !slices.Equal(cur.Status.Hosts, []string{"h-1"}) {
			t.Fatalf("status hosts %v", cur.Status.Hosts)
		}
		as, err := f.svc.Agents.Assignments(ctx, service.AgentActor("h-1"))
		if err != nil || len(as) != 1 || !as[0].Pause || as[0].Desired != "run" {
			t.Fatalf("assignments of a paused worker: %+v, %v", as, err)
		}
		// A second pause (the plan raced the pause) changes nothing.
		apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Pause: []string{w}}})
		if s := state(w); s != cloud.Paused {
			t.Fatalf("worker is %s", s)
		}
		// A new worker prefers the host the last one ran on.
		cur = apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Launch: []cloud.Market{cloud.MarketOnDemand}}})
		w2 := cur.Status.Workers[1].ID
		if in, _ := f.svc.Instances.Get(ctx, f.acme, w2); !slices.Equal(in.PreferHosts, []string{"h-1"}) {
			t.Fatalf("the new worker prefers %v, want [h-1]", in.PreferHosts)
		}
		f.clock.Advance(time.Second)
		apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Resume: []string{w, w2}}})
		if s := state(w); s != cloud.Running {
			t.Fatalf("resumed worker is %s", s)
		}
		if s := state(w2); s != cloud.Pending {
			t.Fatalf("a resume of a worker never paused moved it to %s", s)
		}
		if as, _ := f.svc.Agents.Assignments(ctx, service.AgentActor("h-1")); len(as) != 1 || as[0].Pause {
			t.Fatalf("assignments of a resumed worker: %+v", as)
		}
		if after := ledger(); after != before {
			t.Fatalf("pause and resume wrote %d ledger entries; the worker bills throughout", after-before)
		}
		// Terminated while paused: billing stops.
		apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Pause: []string{w}}})
		apply(service.EndpointPlan{EndpointPlan: autoscale.EndpointPlan{Release: []autoscale.WorkerRelease{{ID: w, Reason: "pool"}}}})
		if s := state(w); s != cloud.Terminating {
			t.Fatalf("a released paused worker is %s", s)
		}
		// A new image: the hosts hold the old one and are forgotten.
		img := "ghcr.io/acme/echo:2"
		cur, err = f.svc.Endpoints.Update(ctx, f.acme, e.ID, api.UpdateEndpointRequest{Image: &img}, 0)
		if err != nil || len(cur.Status.Hosts) != 0 {
			t.Fatalf("after a new image: hosts %v, %v", cur.Status.Hosts, err)
		}
		// Another tenant sees none of it.
		if _, err := f.svc.Endpoints.Get(ctx, f.globex, e.ID); codeOf(err) != cloud.NotFound {
			t.Fatalf("another tenant: %v", err)
		}
	})
}

// TestEndpointWarmChecks: warm is 0 to max; a warm pool is refused,
// unavailable and with nothing written, where the hosts of the
// endpoint's offerings are known and none runs containers (none can
// pause); an update that raises it is checked the same way.
func TestEndpointWarmChecks(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		avail := map[string]cloud.OfferingAvailability{"l4.1x": {Hosts: 1, FitsNow: 1}, "h100.1x": {Hosts: 1, Containers: 1}}
		f := newVAFixture(t, st, service.Options{Availability: func() map[string]cloud.OfferingAvailability { return avail }})
		ctx := t.Context()
		for _, c := range []struct {
			name      string
			warm, max int
			offerings []string
			want      cloud.Code
		}{
			{"warm 0 anywhere", 0, 2, []string{"h100.1x"}, ""},
			{"warm within max", 2, 2, []string{"h100.1x"}, ""},
			{"warm above max", 3, 2, []string{"h100.1x"}, cloud.Invalid},
			{"negative", -1, 2, []string{"h100.1x"}, cloud.Invalid},
			{"no host that pauses", 1, 2, []string{"l4.1x"}, cloud.Unavailable},
			{"one offering's hosts pause", 1, 2, []string{"l4.1x", "h100.1x"}, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				req := echoEndpoint("w" + service.NewID("")[:8])
				req.Warm, req.Max, req.Offerings = c.warm, c.max, c.offerings
				_, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "")
				if got := codeOf(err); got != c.want {
					t.Fatalf("code %q (%v), want %q", got, err, c.want)
				}
				if c.want == cloud.Invalid {
					if ce, ok := err.(*cloud.Error); !ok || ce.Details["field"] != "warm" && ce.Details["field"] != "max" {
						t.Fatalf("error %v names no field warm", err)
					}
				}
			})
		}
		es, _ := f.svc.Endpoints.List(ctx, f.acme, "", false)
		if len(es) != 3 {
			t.Fatalf("%d endpoints written, want the 3 accepted", len(es))
		}
		req := echoEndpoint("on-l4")
		req.Offerings = []string{"l4.1x"}
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "")
		if err != nil {
			t.Fatal(err)
		}
		one := 1
		if _, err := f.svc.Endpoints.Update(ctx, f.acme, e.ID, api.UpdateEndpointRequest{Warm: &one}, 0); codeOf(err) != cloud.Unavailable {
			t.Fatalf("update to warm 1 where nothing pauses: %v", err)
		}
		if got, _ := f.svc.Endpoints.Get(ctx, f.acme, e.ID); got.Spec.Warm != 0 || got.Version != e.Version {
			t.Fatalf("a refused update changed the endpoint: %+v", got.Spec)
		}
	})
}
