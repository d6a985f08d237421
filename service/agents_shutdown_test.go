package service_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestAgentsShutDown: a host's clean shutdown stops what it holds and
// releases it, with the reason, and answers what was to run; another
// host's instances and the host's stopped ones are left alone, and only
// an agent may say so.
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
