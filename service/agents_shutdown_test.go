package service_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestAgentsShutDown: a host's clean shutdown stops what it holds and
// releases it, with the reason, and answers what was to run; another
// host's instances and the host's stopped ones are left alone, and only
// an agent may say so; a serverless endpoint's worker is terminated, not
// answered (its endpoint replaces it).
func TestAgentsShutDown(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 4)
		f.putHost("h-b", 1)
		run := f.placed(f.acme, "h-a", cloud.Running)
		start := f.placed(f.globex, "h-a", cloud.Starting)
		stopping := f.placed(f.acme, "h-a", cloud.Stopping)
		terminating := f.placed(f.acme, "h-a", cloud.Terminating)
		other := f.placed(f.acme, "h-b", cloud.Running)
		// An endpoint's worker, running on h-a.
		ep, _, err := f.svc.Endpoints.Create(ctx, f.acme, api.CreateEndpointRequest{Name: "echo", EndpointSpec: cloud.EndpointSpec{
			Image: "ghcr.io/acme/echo:1", Offerings: []string{"l4.1x"}, Max: 2}}, "")
		if err != nil {
			t.Fatal(err)
		}
		var worker *cloud.Instance
		if err := st.Tx(ctx, func(tx cloud.Tx) (err error) {
			worker, err = service.LaunchEndpointWorker(ctx, tx, catalog.Default(), ep, 1, cloud.MarketOnDemand, "l4.1x", "endpoints", f.clock.Now())
			return err
		}); err != nil {
			t.Fatal(err)
		}
		testkit.Move(t, st, worker.ID, cloud.Scheduled, &fleet.Placement{ID: worker.ID, HostID: "h-a", CPUMilli: 1000, MemoryMiB: 1024}, f.clock.Now())
		testkit.Move(t, st, worker.ID, cloud.Starting, nil, f.clock.Now())
		testkit.Move(t, st, worker.ID, cloud.Running, nil, f.clock.Now())

		if _, err := f.svc.Agents.ShutDown(ctx, f.acme, "x"); cloud.ErrorCode(err) != cloud.PermissionDenied {
			t.Fatalf("a tenant shuts a host down: %v", err)
		}
		got, err := f.svc.Agents.ShutDown(ctx, service.AgentActor("h-a"), "gpucloud up shut down")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{run.ID, start.ID}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("to resume: %v, want %v", got, want)
		}
		if w := f.instance(worker.ID); w.State != cloud.Terminated || !strings.Contains(w.Reason, "its endpoint starts another worker") {
			t.Errorf("the endpoint's worker: %s, %q; want terminated, not to be started again", w.State, w.Reason)
		}
		for id, st := range map[string]cloud.State{run.ID: cloud.Stopped, start.ID: cloud.Stopped, stopping.ID: cloud.Stopped,
			terminating.ID: cloud.Terminated, other.ID: cloud.Running} {
			in := f.instance(id)
			if in.State != st {
				t.Errorf("%s: %s, want %s", id, in.State, st)
			}
			if st == cloud.Stopped && (in.HostID != "" || in.Reason != "gpucloud up shut down") {
				t.Errorf("%s: host %q, reason %q", id, in.HostID, in.Reason)
			}
		}
		// Again: nothing is left to stop.
		if again, err := f.svc.Agents.ShutDown(ctx, service.AgentActor("h-a"), ""); err != nil || len(again) != 0 {
			t.Fatalf("a second shutdown: %v, %v", again, err)
		}
	})
}
