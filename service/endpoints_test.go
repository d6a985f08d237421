package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

func echoEndpoint(name string) api.CreateEndpointRequest {
	return api.CreateEndpointRequest{Name: name, EndpointSpec: cloud.EndpointSpec{Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"},
		Max: 2, Retries: 1, IdleTimeoutSeconds: 30}}
}

func codeOf(err error) cloud.Code { return cloud.ErrorCode(err) }

// TestEndpoints: create with defaults and idempotency, bad input refused
// with nothing written, another tenant's endpoint answers not_found on
// every verb, update starts a generation, delete cancels waiting jobs.
func TestEndpoints(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		e, created, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "k1")
		if err != nil || !created {
			t.Fatalf("create: %v %v", e, err)
		}
		s := e.Spec
		if s.Mode != cloud.EndpointQueue || s.Port != service.DefaultEndpointPort || s.HealthPath != "/health" || s.Concurrency != 1 ||
			s.TimeoutSeconds != service.DefaultEndpointTimeout || s.Image != "ghcr.io/acme/echo:1" || e.Status.Generation != 1 {
			t.Errorf("defaults: %+v", e)
		}
		again, created, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "k1")
		if err != nil || created || again.ID != e.ID {
			t.Errorf("retry: %v %v %v", again, created, err)
		}
		other := echoEndpoint("echo")
		other.Max = 3
		if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, other, "k1"); codeOf(err) != cloud.Conflict || !strings.Contains(err.Error(), "max") {
			t.Errorf("reused key: %v, want a conflict naming max", err)
		}
		before := f.counts()
		for _, bad := range []func(*api.CreateEndpointRequest){
			func(r *api.CreateEndpointRequest) { r.Image = "" },
			func(r *api.CreateEndpointRequest) { r.Offerings = nil },
			func(r *api.CreateEndpointRequest) { r.Offerings = []string{"nope.1x"} },
			func(r *api.CreateEndpointRequest) { r.Mode = "batch" },
			func(r *api.CreateEndpointRequest) { r.Port = 70000 },
			func(r *api.CreateEndpointRequest) { r.Min, r.Max = 3, 2 },
			func(r *api.CreateEndpointRequest) { r.Concurrency = -1 },
			func(r *api.CreateEndpointRequest) { r.Retries = 11 },
			func(r *api.CreateEndpointRequest) { r.HealthPath = "health" },
			func(r *api.CreateEndpointRequest) { r.Name = "ep-0123" },
		} {
			r := echoEndpoint("bad")
			bad(&r)
			if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, r, ""); codeOf(err) != cloud.Invalid {
				t.Errorf("%+v: %v, want invalid_argument", r, err)
			}
		}
		if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), ""); codeOf(err) != cloud.Conflict {
			t.Errorf("a second live endpoint named echo: %v", err)
		}
		f.unchanged(before, "refused creates")

		// Jobs: submit (idempotent), status, cancel.
		j, created, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", json.RawMessage(`{"prompt": "hi"}`), "j1")
		if err != nil || !created || j.State != cloud.JobQueued || string(j.Input) != `{"prompt":"hi"}` || j.MaxAttempts != 2 {
			t.Fatalf("submit: %+v %v %v", j, created, err)
		}
		if j2, created, err := f.svc.Endpoints.Submit(ctx, f.acme, e.ID, json.RawMessage(`{"prompt":"hi"}`), "j1"); err != nil || created || j2.ID != j.ID {
			t.Errorf("retried submit: %v %v %v", j2, created, err)
		}
		if _, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", json.RawMessage(`{"prompt":"bye"}`), "j1"); codeOf(err) != cloud.Conflict {
			t.Errorf("reused job key with another input: %v", err)
		}
		if _, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", json.RawMessage(`{not json`), ""); codeOf(err) != cloud.Invalid {
			t.Errorf("bad input: %v", err)
		}
		if _, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", json.RawMessage(`"`+strings.Repeat("x", service.MaxJobInput)+`"`), ""); codeOf(err) != cloud.Invalid {
			t.Errorf("input over 1 MiB: %v", err)
		}

		// Another tenant sees and touches nothing, by name or ID.
		before = f.counts()
		for _, ref := range []string{"echo", e.ID} {
			if _, err := f.svc.Endpoints.Get(ctx, f.globex, ref); codeOf(err) != cloud.NotFound {
				t.Errorf("globex get %s: %v", ref, err)
			}
			if _, err := f.svc.Endpoints.Describe(ctx, f.globex, ref); codeOf(err) != cloud.NotFound {
				t.Errorf("globex describe %s: %v", ref, err)
			}
			if _, _, err := f.svc.Endpoints.Submit(ctx, f.globex, ref, nil, ""); codeOf(err) != cloud.NotFound {
				t.Errorf("globex submit %s: %v", ref, err)
			}
			if _, err := f.svc.Endpoints.Job(ctx, f.globex, ref, j.ID); codeOf(err) != cloud.NotFound {
				t.Errorf("globex status %s: %v", ref, err)
			}
			if _, err := f.svc.Endpoints.Cancel(ctx, f.globex, ref, j.ID); codeOf(err) != cloud.NotFound {
				t.Errorf("globex cancel %s: %v", ref, err)
			}
			if _, err := f.svc.Endpoints.Update(ctx, f.globex, ref, api.UpdateEndpointRequest{Max: new(5)}, 0); codeOf(err) != cloud.NotFound {
				t.Errorf("globex update %s: %v", ref, err)
			}
			if _, err := f.svc.Endpoints.Delete(ctx, f.globex, ref); codeOf(err) != cloud.NotFound {
				t.Errorf("globex delete %s: %v", ref, err)
			}
		}
		if es, err := f.svc.Endpoints.List(ctx, f.globex, "", true); err != nil || len(es) != 0 {
			t.Errorf("globex lists %v %v", es, err)
		}
		// Globex's own endpoint of the same name is its own, and a job ID
		// of acme's under it is not found either.
		ge, _, err := f.svc.Endpoints.Create(ctx, f.globex, echoEndpoint("echo"), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Endpoints.Job(ctx, f.globex, ge.ID, j.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("acme's job under globex's endpoint: %v", err)
		}

		// Update: a new image is a new generation; sizes are not.
		up, err := f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Max: new(4)}, 0)
		if err != nil || up.Status.Generation != 1 || up.Spec.Max != 4 {
			t.Errorf("update max: %+v %v", up, err)
		}
		up, err = f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Image: new("ghcr.io/acme/echo:2")}, up.Version)
		if err != nil || up.Status.Generation != 2 {
			t.Errorf("update image: %+v %v", up, err)
		}
		if up, err := f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Command: &[]string{}, Env: &map[string]string{}}, 0); err != nil || up.Status.Generation != 2 {
			t.Errorf("an empty command and env on an endpoint with none started a generation: %+v %v", up, err)
		}
		if _, err := f.svc.Endpoints.Update(ctx, f.acme, "echo", api.UpdateEndpointRequest{Max: new(0)}, 0); codeOf(err) != cloud.Invalid {
			t.Errorf("update max 0: %v", err)
		}

		// Cancel a queued job; cancelling again is a no-op.
		c, err := f.svc.Endpoints.Cancel(ctx, f.acme, "echo", j.ID)
		if err != nil || c.State != cloud.JobCancelled || c.FinishedAt == nil || c.ExpiresAt == nil {
			t.Errorf("cancel: %+v %v", c, err)
		}
		if _, err := f.svc.Endpoints.Cancel(ctx, f.acme, "echo", j.ID); err != nil {
			t.Errorf("cancel again: %v", err)
		}

		// Delete cancels what waits; the endpoint takes no more jobs.
		j3, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", nil, "")
		if err != nil {
			t.Fatal(err)
		}
		d, err := f.svc.Endpoints.Delete(ctx, f.acme, "echo")
		if err != nil || d.State != cloud.EndpointDeleting {
			t.Fatalf("delete: %v %v", d, err)
		}
		if j3, err = f.svc.Endpoints.Job(ctx, f.acme, e.ID, j3.ID); err != nil || j3.State != cloud.JobCancelled {
			t.Errorf("a waiting job after delete: %+v %v", j3, err)
		}
		if _, _, err := f.svc.Endpoints.Submit(ctx, f.acme, e.ID, nil, ""); codeOf(err) != cloud.Conflict {
			t.Errorf("submit to a deleting endpoint: %v", err)
		}
	})
}

// TestEndpointJobLifecycle: claim, a failed attempt run again, its
// attempts running out, a lapsed lease claimed again, an answer of a
// superseded attempt discarded, a replica's jobs put back at its start,
// and retention.
func TestEndpointJobLifecycle(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "")
		if err != nil {
			t.Fatal(err)
		}
		submit := func(in string) *cloud.Job {
			f.clock.Advance(time.Millisecond) // the queue is in arrival order
			j, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "echo", json.RawMessage(in), "")
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		a, b := submit(`1`), submit(`2`)
		claimed, err := f.svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].ID != a.ID || claimed[0].Attempts != 1 || claimed[0].State != cloud.JobRunning {
			t.Fatalf("claim: %+v %v", claimed, err)
		}
		ja := claimed[0]
		// A failed attempt with retries left goes back to the queue.
		got, err := f.svc.Endpoints.Finish(ctx, ja, "i-1", nil, "the worker answered 500", true)
		if err != nil || got.State != cloud.JobQueued || got.Error == "" {
			t.Fatalf("failed attempt: %+v %v", got, err)
		}
		claimed, _ = f.svc.Endpoints.Claim(ctx, e.ID, "r1", 5, time.Minute)
		if len(claimed) != 2 || claimed[0].ID != a.ID || claimed[0].Attempts != 2 {
			t.Fatalf("second claim: %+v", claimed)
		}
		// The last attempt fails: the job fails.
		got, _ = f.svc.Endpoints.Finish(ctx, claimed[0], "i-1", nil, "the worker answered 500 again", true)
		if got.State != cloud.JobFailed || got.FinishedAt == nil {
			t.Errorf("attempts ran out: %+v", got)
		}
		// b's lease lapses (its replica died): claimed again elsewhere; the
		// late answer of the first attempt changes nothing.
		jb := claimed[1]
		f.clock.Advance(2 * time.Minute)
		reclaimed, _ := f.svc.Endpoints.Claim(ctx, e.ID, "r2", 5, time.Minute)
		if len(reclaimed) != 1 || reclaimed[0].ID != b.ID || reclaimed[0].Attempts != 2 || reclaimed[0].LeaseOwner != "r2" {
			t.Fatalf("lapsed lease: %+v", reclaimed)
		}
		if got, _ := f.svc.Endpoints.Finish(ctx, jb, "i-1", json.RawMessage(`"late"`), "", false); got.State != cloud.JobRunning {
			t.Errorf("a superseded attempt's answer was taken: %+v", got)
		}
		// Replica r2 restarts: its job goes back, and then runs out of
		// attempts when claimed (two were made).
		if n, err := f.svc.Endpoints.Requeue(ctx, "r2", "restarted"); err != nil || n != 1 {
			t.Errorf("requeue: %d %v", n, err)
		}
		if claimed, _ := f.svc.Endpoints.Claim(ctx, e.ID, "r3", 5, time.Minute); len(claimed) != 0 {
			t.Errorf("a job whose attempts ran out was claimed: %+v", claimed)
		}
		if got, _ := f.svc.Endpoints.Job(ctx, f.acme, "echo", b.ID); got.State != cloud.JobFailed || !strings.Contains(got.Error, "attempts ran out") {
			t.Errorf("b: %+v", got)
		}
		// Success: the output is kept, then removed after the retention.
		c := submit(`{"x":1}`)
		claimed, _ = f.svc.Endpoints.Claim(ctx, e.ID, "r1", 5, time.Minute)
		if got, _ := f.svc.Endpoints.Finish(ctx, claimed[0], "i-2", json.RawMessage(`{"y": 2}`), "", false); got.State != cloud.JobCompleted ||
			string(got.Output) != `{"y":2}` || got.Worker != "i-2" {
			t.Errorf("completed: %+v", got)
		}
		f.clock.Advance(time.Duration(service.DefaultEndpointRetain+1) * time.Second)
		if n, err := f.svc.Endpoints.ExpireJobs(ctx, 100); err != nil || n != 3 {
			t.Errorf("expired %d, %v; want 3", n, err)
		}
		if _, err := f.svc.Endpoints.Job(ctx, f.acme, "echo", c.ID); codeOf(err) != cloud.NotFound {
			t.Errorf("an expired job: %v", err)
		}
	})
}

// TestApplyEndpointPlan: launches make workers through the instance
// create path (named, tagged, keyed); releases terminate them; a quota
// refusal holds launches; a deleting endpoint with no worker is deleted.
func TestApplyEndpointPlan(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), "")
		if err != nil {
			t.Fatal(err)
		}
		applyCS := func(cur *cloud.Endpoint, worker string) *cloud.Endpoint {
			t.Helper()
			if err := service.ApplyEndpointPlan(ctx, st, catalog.Default(), service.Controller("endpoints"),
				&service.EndpointPlan{EndpointID: e.ID, Version: cur.Version, EndpointPlan: autoscale.EndpointPlan{Desired: cur.Status.Desired},
					ColdStarts: []cloud.ColdStart{{Worker: worker, LaunchedAt: f.clock.Now(), RunningMillis: 500, ReadyMillis: 600}}}, nil, f.clock.Now()); err != nil {
				t.Fatal(err)
			}
			out, _ := f.svc.Endpoints.Get(ctx, f.acme, e.ID)
			return out
		}
		apply := func(p autoscale.EndpointPlan) *cloud.Endpoint {
			t.Helper()
			cur, err := f.svc.Endpoints.Get(ctx, f.acme, e.ID)
			if err != nil {
				t.Fatal(err)
			}
			if err := service.ApplyEndpointPlan(ctx, st, catalog.Default(), service.Controller("endpoints"),
				&service.EndpointPlan{EndpointID: e.ID, Version: cur.Version, EndpointPlan: p}, nil, f.clock.Now()); err != nil {
				t.Fatal(err)
			}
			cur, _ = f.svc.Endpoints.Get(ctx, f.acme, e.ID)
			return cur
		}
		cur := apply(autoscale.EndpointPlan{Launch: []cloud.Market{cloud.MarketOnDemand, cloud.MarketOnDemand}, Desired: 2, Reason: "load"})
		if len(cur.Status.Workers) != 2 || cur.Status.Desired != 2 || cur.Status.LaunchSeq != 2 {
			t.Fatalf("after launch: %+v", cur.Status)
		}
		in, err := f.svc.Instances.Get(ctx, f.acme, cur.Status.Workers[0].ID)
		if err != nil || in.Name != "echo-1" || in.Tags[service.TagEndpoint] != e.ID || in.Image != "ghcr.io/acme/echo:1" ||
			in.Env["PORT"] != "8080" || in.Offering != "l4.1x" || in.State != cloud.Pending {
			t.Errorf("worker: %+v %v", in, err)
		}
		// A stale plan changes nothing.
		if err := service.ApplyEndpointPlan(ctx, st, catalog.Default(), service.Controller("endpoints"),
			&service.EndpointPlan{EndpointID: e.ID, Version: cur.Version - 1, EndpointPlan: autoscale.EndpointPlan{Launch: []cloud.Market{cloud.MarketOnDemand}}}, nil, f.clock.Now()); err != nil {
			t.Fatal(err)
		}
		first, second := cur.Status.Workers[0].ID, cur.Status.Workers[1].ID
		cur = apply(autoscale.EndpointPlan{Release: []autoscale.WorkerRelease{{ID: first, Reason: "idle"}}, Desired: 1})
		if len(cur.Status.Workers) != 2 {
			t.Errorf("a released worker stays in the status until it is terminated: %+v", cur.Status)
		}
		if in, _ := f.svc.Instances.Get(ctx, f.acme, in.ID); in.State != cloud.Terminated {
			t.Errorf("released worker is %s", in.State)
		}
		cur = apply(autoscale.EndpointPlan{Forget: []string{first}, Desired: 1})
		if len(cur.Status.Workers) != 1 || cur.Status.Workers[0].ID != second {
			t.Errorf("after forget: %+v", cur.Status)
		}
		// A worker that failed: released, and launches held 10 s, then
		// 20 s after a second round in a row with a failure.
		cur = apply(autoscale.EndpointPlan{Forget: nil, Launch: []cloud.Market{cloud.MarketOnDemand}, Desired: 2})
		w3 := cur.Status.Workers[len(cur.Status.Workers)-1].ID
		testkit.Walk(t, st, w3, cloud.Failed, testkit.Via{Host: "h-1", Reason: "no command: the image names none"}, f.clock.Now())
		seq := cur.Status.LaunchSeq
		cur = apply(autoscale.EndpointPlan{Release: []autoscale.WorkerRelease{{ID: w3, Reason: "failed", Failed: true}},
			Launch: []cloud.Market{cloud.MarketOnDemand}, Desired: 2})
		if cur.Status.Failures != 1 || cur.Status.LaunchBlockedUntil.Sub(f.clock.Now()) != 10*time.Second ||
			cur.Status.LaunchSeq != seq || !strings.Contains(cur.Status.Reason, "no command: the image names none") {
			t.Errorf("after a failed worker: %+v", cur.Status)
		}
		f.clock.Advance(11 * time.Second)
		cur = apply(autoscale.EndpointPlan{Forget: []string{w3}, Launch: []cloud.Market{cloud.MarketOnDemand}, Desired: 2})
		w4 := cur.Status.Workers[len(cur.Status.Workers)-1].ID
		testkit.Walk(t, st, w4, cloud.Failed, testkit.Via{Host: "h-1"}, f.clock.Now())
		cur = apply(autoscale.EndpointPlan{Release: []autoscale.WorkerRelease{{ID: w4, Reason: "failed", Failed: true}}, Desired: 2})
		if cur.Status.Failures != 2 || cur.Status.LaunchBlockedUntil.Sub(f.clock.Now()) != 20*time.Second {
			t.Errorf("after a second round with a failure: %+v", cur.Status)
		}
		// A worker's first readiness clears the count.
		cur = apply(autoscale.EndpointPlan{Forget: []string{w4}, Desired: 2}) // (the apply records cold starts it is given)
		cur = applyCS(cur, second)
		if cur.Status.Failures != 0 {
			t.Errorf("after a cold start: %+v", cur.Status)
		}
		f.clock.Advance(21 * time.Second)
		// Over the tenant's quota: the launch is refused and held.
		if _, err := f.svc.Accounts.SetQuota(ctx, f.admin, f.acme.TenantID, api.QuotaSpec{Instances: 1, GPUsPerModel: 16}); err != nil {
			t.Fatal(err)
		}
		cur = apply(autoscale.EndpointPlan{Launch: []cloud.Market{cloud.MarketOnDemand}, Desired: 2})
		if len(cur.Status.Workers) != 1 || !cur.Status.LaunchBlockedUntil.After(f.clock.Now()) || !strings.Contains(cur.Status.Reason, "quota") {
			t.Errorf("refused launch: %+v", cur.Status)
		}
		// Deleting, then nothing left: deleted, and the name is free.
		if _, err := f.svc.Endpoints.Delete(ctx, f.acme, e.ID); err != nil {
			t.Fatal(err)
		}
		cur = apply(autoscale.EndpointPlan{Release: []autoscale.WorkerRelease{{ID: second, Reason: "deleted"}}})
		cur = apply(autoscale.EndpointPlan{Forget: []string{second}, Deleted: true})
		if cur.State != cloud.EndpointDeleted || len(cur.Status.Workers) != 0 {
			t.Errorf("deleted: %+v", cur)
		}
		if _, _, err := f.svc.Endpoints.Create(ctx, f.acme, echoEndpoint("echo"), ""); err != nil {
			t.Errorf("the name after delete: %v", err)
		}
	})
}

// TestEndpointRefusedWhereNoHostRunsContainers: an endpoint is refused,
// unavailable and with nothing written, only where hosts are known and
// none runs containers; a fleet still joining (no host counted yet) or
// one with a container host accepts it.
func TestEndpointRefusedWhereNoHostRunsContainers(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		for _, c := range []struct {
			name  string
			avail map[string]cloud.OfferingAvailability
			want  cloud.Code
		}{
			{"unknown", nil, ""},
			{"joining", map[string]cloud.OfferingAvailability{"l4.1x": {}, "h100.1x": {}}, ""},
			{"processes only", map[string]cloud.OfferingAvailability{"l4.1x": {Hosts: 1, FitsNow: 1}, "h100.1x": {}}, cloud.Unavailable},
			{"a container host", map[string]cloud.OfferingAvailability{"l4.1x": {Hosts: 2, FitsNow: 2, Containers: 1}}, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				avail := c.avail
				f := newVAFixture(t, st, service.Options{Availability: func() map[string]cloud.OfferingAvailability { return avail }})
				_, _, err := f.svc.Endpoints.Create(t.Context(), f.acme, echoEndpoint("e-"+strings.ReplaceAll(c.name, " ", "-")), "")
				if got := codeOf(err); got != c.want {
					t.Fatalf("code %q (%v), want %q", got, err, c.want)
				}
				if c.want == "" {
					return
				}
				es, err := f.svc.Endpoints.List(t.Context(), f.acme, "", false)
				if err != nil || len(es) != 0 {
					t.Errorf("a refused create wrote %d endpoints (%v)", len(es), err)
				}
			})
		}
	})
}

// TestEndpointJobReturn: an attempt that reached no worker goes back to
// the queue uncounted, so that a job with no retries still runs; a
// superseded attempt's return changes nothing; on an endpoint being
// deleted the job fails with the reason.
func TestEndpointJobReturn(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newVAFixture(t, st, service.Options{})
		ctx := context.Background()
		req := echoEndpoint("once")
		req.Retries = 0
		e, _, err := f.svc.Endpoints.Create(ctx, f.acme, req, "")
		if err != nil {
			t.Fatal(err)
		}
		j, _, err := f.svc.Endpoints.Submit(ctx, f.acme, "once", json.RawMessage(`1`), "")
		if err != nil || j.MaxAttempts != 1 {
			t.Fatalf("submit: %+v %v", j, err)
		}
		for round := 1; round <= 3; round++ {
			claimed, err := f.svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
			if err != nil || len(claimed) != 1 || claimed[0].Attempts != 1 {
				t.Fatalf("round %d: claim %+v %v", round, claimed, err)
			}
			got, err := f.svc.Endpoints.Return(ctx, claimed[0], "its worker i-1 could not be reached")
			if err != nil || got.State != cloud.JobQueued || got.Attempts != 0 || got.LeaseOwner != "" {
				t.Fatalf("round %d: return %+v %v", round, got, err)
			}
		}
		// Uncounted returns leave the attempt for a worker: it completes.
		claimed, _ := f.svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if got, _ := f.svc.Endpoints.Finish(ctx, claimed[0], "i-2", json.RawMessage(`"ok"`), "", false); got.State != cloud.JobCompleted || got.Attempts != 1 {
			t.Errorf("finish after returns: %+v", got)
		}
		// A lapsed lease (its replica died) uses the only attempt: the job
		// fails at the next claim, and the first claim's late return is
		// stale and changes nothing.
		j2, _, _ := f.svc.Endpoints.Submit(ctx, f.acme, "once", json.RawMessage(`2`), "")
		claimed, _ = f.svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if len(claimed) != 1 || claimed[0].ID != j2.ID {
			t.Fatalf("claim j2: %+v", claimed)
		}
		f.clock.Advance(2 * time.Minute)
		if again, _ := f.svc.Endpoints.Claim(ctx, e.ID, "r2", 1, time.Minute); len(again) != 0 {
			t.Fatalf("a job whose attempts ran out was claimed: %+v", again)
		}
		if got, _ := f.svc.Endpoints.Return(ctx, claimed[0], "stale"); got.State != cloud.JobFailed || got.Attempts != 1 {
			t.Errorf("a stale return changed the job: %+v", got)
		}
		// The endpoint is being deleted while a job is claimed: its return
		// fails it with the reason.
		k, _, _ := f.svc.Endpoints.Submit(ctx, f.acme, "once", json.RawMessage(`2`), "")
		claimed, _ = f.svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if len(claimed) != 1 || claimed[0].ID != k.ID {
			t.Fatalf("claim k: %+v", claimed)
		}
		if _, err := f.svc.Endpoints.Delete(ctx, f.acme, "once"); err != nil {
			t.Fatal(err)
		}
		if got, _ := f.svc.Endpoints.Return(ctx, claimed[0], "its worker i-3 could not be reached"); got.State != cloud.JobFailed ||
			!strings.Contains(got.Error, "could not be reached") {
			t.Errorf("return on a deleting endpoint: %+v", got)
		}
	})
}
