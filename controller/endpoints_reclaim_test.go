package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestEndpointJobSurvivesSpotReclaim: a queue job running on a spot
// worker whose instance is reclaimed (a notice, then the move at its
// deadline) goes back to the queue with its attempt counted; the
// endpoint controller forgets the reclaimed worker and launches another;
// the job runs there and completes once, and the reclaimed attempt's late
// answer changes nothing.
func TestEndpointJobSurvivesSpotReclaim(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		clock := testkit.NewClock(testkit.Epoch)
		svc := service.New(st, nil, service.Options{Now: clock.Now})
		tenant := service.NewID(service.TenantPrefix)
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			return tx.CreateTenant(ctx, &cloud.Tenant{ID: tenant, Name: "acme-" + tenant, CreatedAt: clock.Now()})
		}); err != nil {
			t.Fatal(err)
		}
		acme := service.Actor{ID: "u-acme", TenantID: tenant, Role: cloud.RoleMember}
		e, _, err := svc.Endpoints.Create(ctx, acme, api.CreateEndpointRequest{Name: "echo", EndpointSpec: cloud.EndpointSpec{
			Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}, Max: 2, Retries: 1, Spot: true}}, "")
		if err != nil {
			t.Fatal(err)
		}
		c := &Endpoints{Store: st, Catalog: catalog.Default(), Now: clock.Now}
		// newWorker reconciles until the endpoint holds a worker not in
		// not, and answers its ID.
		newWorker := func(not ...string) string {
			t.Helper()
			for range 3 {
				if err := c.Reconcile(ctx); err != nil {
					t.Fatal(err)
				}
				cur, err := svc.Endpoints.Get(ctx, acme, e.ID)
				if err != nil {
					t.Fatal(err)
				}
			next:
				for _, w := range cur.Status.Workers {
					for _, n := range not {
						if w.ID == n {
							continue next
						}
					}
					if w.Market != cloud.MarketSpot {
						t.Errorf("worker %s is %s, want spot", w.ID, w.Market)
					}
					return w.ID
				}
				clock.Advance(time.Second)
			}
			t.Fatalf("no new worker launched (not %v)", not)
			return ""
		}

		job, _, err := svc.Endpoints.Submit(ctx, acme, "echo", json.RawMessage(`{"n":1}`), "")
		if err != nil {
			t.Fatal(err)
		}
		w1 := newWorker()
		testkit.Walk(t, st, w1, cloud.Running, testkit.Via{Host: "h-1"}, clock.Now())
		claimed, err := svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].ID != job.ID || claimed[0].Attempts != 1 {
			t.Fatalf("first claim: %+v %v", claimed, err)
		}
		first := claimed[0]

		// The market reclaims w1: a notice, then at its deadline the move
		// the scheduler makes, then the agent's report that it is gone.
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, w1)
			if err != nil {
				return err
			}
			_, err = service.NoticeSpotReclaim(ctx, tx, in, "capacity", "", "an on-demand instance needs the GPU", MinNotice, "scheduler", clock.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(MinNotice)
		if err := st.Tx(ctx, func(tx cloud.Tx) error {
			in, err := tx.GetInstance(ctx, w1)
			if err != nil {
				return err
			}
			m, due := service.ReclaimDue(in, clock.Now())
			if !due {
				t.Fatalf("reclaim of %+v not due", in)
			}
			m.Actor = "scheduler"
			return service.MoveInstance(ctx, tx, in, m, clock.Now())
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Walk(t, st, w1, cloud.Terminated, testkit.Via{Host: "h-1"}, clock.Now())

		// The gateway's request to w1 broke off: the attempt failed with
		// a retry left, and the job is queued again, its attempt counted.
		got, err := svc.Endpoints.Finish(ctx, first, w1, nil, "the worker did not answer: connection reset by peer", true)
		if err != nil || got.State != cloud.JobQueued || got.Attempts != 1 || got.Error == "" {
			t.Fatalf("after the reclaim: %+v %v", got, err)
		}

		// The controller forgets w1 and launches w2 for the queued job.
		w2 := newWorker(w1)
		cur, _ := svc.Endpoints.Get(ctx, acme, e.ID)
		for _, w := range cur.Status.Workers {
			if w.ID == w1 {
				t.Errorf("the reclaimed worker is still the endpoint's: %+v", cur.Status.Workers)
			}
		}
		testkit.Walk(t, st, w2, cloud.Running, testkit.Via{Host: "h-2"}, clock.Now())
		claimed, err = svc.Endpoints.Claim(ctx, e.ID, "r1", 1, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].ID != job.ID || claimed[0].Attempts != 2 {
			t.Fatalf("second claim: %+v %v", claimed, err)
		}
		got, err = svc.Endpoints.Finish(ctx, claimed[0], w2, json.RawMessage(`{"echo":{"n":1}}`), "", false)
		if err != nil || got.State != cloud.JobCompleted || got.Attempts != 2 || got.Worker != w2 || string(got.Output) != `{"echo":{"n":1}}` {
			t.Fatalf("completed on w2: %+v %v", got, err)
		}

		// w1's attempt answers late (it had finished before the kill): the
		// job is not completed twice, and nothing runs it again.
		got, err = svc.Endpoints.Finish(ctx, first, w1, json.RawMessage(`"late"`), "", false)
		if err != nil || got.State != cloud.JobCompleted || got.Worker != w2 || string(got.Output) != `{"echo":{"n":1}}` {
			t.Errorf("the late answer of the reclaimed attempt was taken: %+v %v", got, err)
		}
		if again, err := svc.Endpoints.Claim(ctx, e.ID, "r1", 5, time.Minute); err != nil || len(again) != 0 {
			t.Errorf("a completed job was claimed again: %+v %v", again, err)
		}
		d, err := svc.Endpoints.Describe(ctx, acme, e.ID)
		if err != nil || d.Queue.Queued != 0 || d.Queue.Running != 0 {
			t.Errorf("queue after the job: %+v %v", d, err)
		}
	})
}
