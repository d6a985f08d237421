package controller

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestEndpointWorkerPrefersLastHost: on four identical hosts, an
// endpoint's worker that ran on one and went (scale to zero) is followed
// by a new worker that prefers that host (its image is cached there), and
// the scheduler puts it there; three rounds in a row, each with another
// worker ID (the ties among identical hosts are broken by the ID, so a
// scheduler that ignored the preference would land on the same host three
// times with odds of 1 in 64).
func TestEndpointWorkerPrefersLastHost(t *testing.T) {
	st := newStore(t)
	ctx := context.Background()
	now := t0
	clock := func() time.Time { return now }
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for _, id := range []string{"l40s-a", "l40s-b", "l40s-c", "l40s-d"} {
			h := fleet.MockHost(id, "L40S", 2)
			if err := tx.PutHost(ctx, &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	svc := service.New(st, nil, service.Options{Now: clock})
	actor := service.Actor{ID: "u1", TenantID: "t1", Role: cloud.RoleMember}
	e, _, err := svc.Endpoints.Create(ctx, actor, api.CreateEndpointRequest{Name: "echo", EndpointSpec: cloud.EndpointSpec{
		Image: "ghcr.io/acme/echo:1", Offerings: []string{"l40s.1x"}, Mode: cloud.EndpointHTTP, Max: 2, IdleTimeoutSeconds: 1}}, "")
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	c := &Endpoints{Store: st, Catalog: catalog.Default(), Now: clock,
		Load: func() map[string]EndpointLoad { return map[string]EndpointLoad{e.ID: {Waiting: waiting}} }}
	sched := newScheduler(st)
	sched.Now = clock
	status := func() cloud.EndpointStatus {
		cur, err := svc.Endpoints.Get(ctx, actor, e.ID)
		if err != nil {
			t.Fatal(err)
		}
		return cur.Status
	}
	step := func() {
		t.Helper()
		now = now.Add(2 * time.Second)
		if err := c.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := sched.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	last := ""
	for round := range 4 {
		waiting = 1
		step()
		ws := status().Workers
		if len(ws) != 1 {
			t.Fatalf("round %d: workers %+v", round, ws)
		}
		w := get(t, st, ws[0].ID)
		if round == 0 {
			if len(w.PreferHosts) != 0 {
				t.Fatalf("the first worker prefers %v", w.PreferHosts)
			}
		} else if !slices.Equal(w.PreferHosts, []string{last}) || w.HostID != last {
			t.Fatalf("round %d: worker prefers %v and was placed on %s; want %s", round, w.PreferHosts, w.HostID, last)
		}
		last = w.HostID
		testkit.Walk(t, st, w.ID, cloud.Running, testkit.Via{Host: w.HostID}, now)
		step()
		if got := status().Hosts; !slices.Equal(got, []string{last}) {
			t.Fatalf("round %d: status hosts %v, want [%s]", round, got, last)
		}
		// Scale to zero: the worker goes, the host is remembered.
		waiting = 0
		testkit.Walk(t, st, w.ID, cloud.Terminated, testkit.Via{Host: w.HostID}, now)
		step()
		if st := status(); len(st.Workers) != 0 || !slices.Equal(st.Hosts, []string{last}) {
			t.Fatalf("round %d: at zero: %+v", round, st)
		}
	}
}

// TestEndpointsPlanPausedWorker: the controller reads a paused instance
// as a paused worker (not a broken one), resumes it for load, and counts
// its host among those the endpoint ran on.
func TestEndpointsPlanPausedWorker(t *testing.T) {
	c := &Endpoints{}
	e := &cloud.Endpoint{ID: "ep-1", State: cloud.EndpointActive, Spec: cloud.EndpointSpec{Mode: cloud.EndpointHTTP, Max: 2, Warm: 1, Concurrency: 1,
		IdleTimeoutSeconds: 30}, Status: cloud.EndpointStatus{Generation: 1, Workers: []cloud.WorkerRef{{ID: "i-1", Generation: 1, LaunchedAt: t0}}}}
	ins := map[string]*cloud.Instance{"i-1": {ID: "i-1", State: cloud.Paused, HostID: "h-9"}}
	p := c.plan(e, cloud.JobCounts{}, EndpointLoad{Waiting: 1}, ins, t0.Add(time.Minute))
	if !slices.Equal(p.Resume, []string{"i-1"}) || len(p.Release) != 0 || len(p.Launch) != 1 || !slices.Equal(p.Hosts, []string{"h-9"}) {
		t.Fatalf("plan %+v; want i-1 resumed, one launch to refill the pool, hosts [h-9]", p)
	}
	p = c.plan(e, cloud.JobCounts{}, EndpointLoad{}, ins, t0.Add(time.Minute))
	if !p.EndpointPlan.Empty() || p.Desired != 0 {
		t.Fatalf("an idle endpoint with its pool full: %+v", p.EndpointPlan)
	}
}

// TestColdStartSteps: a cold start's placement and agent steps come from
// its worker's first events into scheduled and starting, counted from its
// launch; another worker's events, other kinds and later re-placements
// change nothing; a step whose event is missing stays 0.
func TestColdStartSteps(t *testing.T) {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(id string, ms int, to cloud.State) *cloud.Event {
		return &cloud.Event{InstanceID: id, Kind: cloud.EventInstanceState, Time: at(ms), To: to}
	}
	for _, c := range []struct {
		name                       string
		evs                        []*cloud.Event
		scheduled, starting, image int64
	}{
		{"both", []*cloud.Event{ev("i-1", 12, cloud.Scheduled), ev("i-1", 40, cloud.Starting), ev("i-1", 300, cloud.Running)}, 12, 40, 0},
		{"the image's time from the running event", []*cloud.Event{ev("i-1", 12, cloud.Scheduled), ev("i-1", 40, cloud.Starting),
			func() *cloud.Event {
				e := ev("i-1", 300, cloud.Running)
				e.Details = json.RawMessage(`{"image_ms":7}`)
				return e
			}()}, 12, 40, 7},
		{"the start's length puts the agent's step where the start began", []*cloud.Event{ev("i-1", 12, cloud.Scheduled), ev("i-1", 290, cloud.Starting),
			func() *cloud.Event {
				e := ev("i-1", 300, cloud.Running)
				e.Details = json.RawMessage(`{"image_ms":7,"start_ms":250}`)
				return e
			}()}, 12, 50, 7},
		{"never before placement", []*cloud.Event{ev("i-1", 12, cloud.Scheduled), ev("i-1", 290, cloud.Starting),
			func() *cloud.Event {
				e := ev("i-1", 300, cloud.Running)
				e.Details = json.RawMessage(`{"start_ms":295}`)
				return e
			}()}, 12, 12, 0},
		{"placed in the launch's millisecond", []*cloud.Event{ev("i-1", 0, cloud.Scheduled)}, 1, 0, 0},
		{"the first placement counts", []*cloud.Event{ev("i-1", 12, cloud.Scheduled), ev("i-1", 40, cloud.Starting),
			ev("i-1", 900, cloud.Pending), ev("i-1", 950, cloud.Scheduled)}, 12, 40, 0},
		{"another worker's and other kinds", []*cloud.Event{ev("i-2", 5, cloud.Scheduled),
			{InstanceID: "i-1", Kind: cloud.EventInstanceCreated, Time: at(1), To: cloud.Scheduled}}, 0, 0, 0},
		{"none", nil, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			cs := cloud.ColdStart{Worker: "i-1", LaunchedAt: t0, RunningMillis: 300, ReadyMillis: 320}
			ColdStartSteps(&cs, c.evs)
			if cs.ScheduledMillis != c.scheduled || cs.StartingMillis != c.starting || cs.ImageMillis != c.image || cs.RunningMillis != 300 {
				t.Errorf("got %+v, want scheduled %d, starting %d, image %d", cs, c.scheduled, c.starting, c.image)
			}
		})
	}
}
