package service_test

import (
	"context"
	"slices"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// putHost stores a schedulable host with gpus L4 GPUs.
func (f *ahFixture) putHost(id string, gpus int) {
	f.t.Helper()
	h := fleet.MockHost(id, "L4", gpus)
	h.State = fleet.Schedulable
	err := f.st.Tx(context.Background(), func(tx cloud.Tx) error {
		return tx.PutHost(context.Background(), &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *h, LastHeartbeat: f.clock.Now()})
	})
	if err != nil {
		f.t.Fatalf("put host %s: %v", id, err)
	}
}

// host reads a host.
func (f *ahFixture) host(id string) *cloud.Host {
	f.t.Helper()
	var h *cloud.Host
	err := f.st.Tx(context.Background(), func(tx cloud.Tx) (err error) {
		h, err = tx.GetHost(context.Background(), id)
		return err
	})
	if err != nil {
		f.t.Fatalf("get host %s: %v", id, err)
	}
	return h
}

// setHostState writes a host's state as a controller would (the health
// watcher marks silent hosts unhealthy).
func (f *ahFixture) setHostState(id string, s fleet.HostState) {
	f.t.Helper()
	h := f.host(id)
	h.State, h.Spec.State = s, s
	if err := f.st.Tx(context.Background(), func(tx cloud.Tx) error { return tx.PutHost(context.Background(), h) }); err != nil {
		f.t.Fatal(err)
	}
}

// placed creates an l4.1x instance of a, with the given volumes, and moves
// it onto host and on to state to (scheduled, starting, running, stopping
// or terminating), as the scheduler and an agent would.
func (f *ahFixture) placed(a service.Actor, host string, to cloud.State, volumes ...string) *cloud.Instance {
	f.t.Helper()
	return f.placedOffering(a, host, "l4.1x", to, volumes...)
}

// placedOffering is placed with an instance of offering.
func (f *ahFixture) placedOffering(a service.Actor, host, offering string, to cloud.State, volumes ...string) *cloud.Instance {
	f.t.Helper()
	in, _, err := f.svc.Instances.Create(context.Background(), a, api.CreateInstanceRequest{Offering: offering, Volumes: volumes}, "")
	if err != nil {
		f.t.Fatalf("create instance: %v", err)
	}
	now := f.clock.Now()
	in = testkit.Move(f.t, f.st, in.ID, cloud.Scheduled, &fleet.Placement{ID: in.ID, HostID: host, CPUMilli: 1000, MemoryMiB: 1024}, now)
	path := map[cloud.State][]cloud.State{
		cloud.Starting:    {cloud.Starting},
		cloud.Running:     {cloud.Starting, cloud.Running},
		cloud.Stopping:    {cloud.Starting, cloud.Running, cloud.Stopping},
		cloud.Terminating: {cloud.Starting, cloud.Running, cloud.Terminating},
	}[to]
	for _, s := range path {
		in = testkit.Move(f.t, f.st, in.ID, s, nil, now)
	}
	return in
}

// instance reads an instance as it is stored.
func (f *ahFixture) instance(id string) *cloud.Instance {
	f.t.Helper()
	in, err := f.svc.Instances.Get(context.Background(), f.admin, id)
	if err != nil {
		f.t.Fatalf("get instance %s: %v", id, err)
	}
	return in
}

func TestHostsCordonUncordon(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 1)
		v := f.host("h-a").Version

		// Members do nothing with hosts; unknown hosts are not found.
		before := f.state()
		_, err := f.svc.Hosts.List(ctx, f.acme)
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Hosts.Cordon(ctx, f.acme, "h-a", 0)
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Hosts.Uncordon(ctx, f.acme, "h-a", 0)
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Hosts.Drain(ctx, f.acme, "h-a")
		ahCode(t, err, cloud.PermissionDenied)
		_, err = f.svc.Hosts.Cordon(ctx, f.admin, "h-missing", 0)
		ahHidden(t, err, "host", "h-missing")
		_, err = f.svc.Hosts.Cordon(ctx, f.admin, "h-a", v+1)
		if ce := ahCode(t, err, cloud.Conflict); ce.Details["current_version"] != v {
			t.Errorf("stale If-Match: %+v", ce)
		}
		f.unchanged(before, "refused host changes")

		h, err := f.svc.Hosts.Cordon(ctx, f.admin, "h-a", v)
		if err != nil || h.State != fleet.Cordoned || h.Spec.State != fleet.Cordoned || h.Version != v+1 {
			t.Fatalf("Cordon = %+v, %v", h, err)
		}
		before = f.state()
		if h, err := f.svc.Hosts.Cordon(ctx, f.admin, "h-a", 0); err != nil || h.State != fleet.Cordoned {
			t.Errorf("cordon again = %+v, %v", h, err)
		}
		f.unchanged(before, "cordoning a cordoned host")
		if h, err := f.svc.Hosts.Uncordon(ctx, f.admin, "h-a", v+1); err != nil || h.State != fleet.Schedulable || h.Version != v+2 {
			t.Errorf("Uncordon = %+v, %v", h, err)
		}

		// An unhealthy host is cordoned, but only its heartbeats make it
		// schedulable.
		f.setHostState("h-a", fleet.Unhealthy)
		before = f.state()
		_, err = f.svc.Hosts.Uncordon(ctx, f.admin, "h-a", 0)
		ahCode(t, err, cloud.Conflict)
		f.unchanged(before, "uncordoning an unhealthy host")
		if h, err := f.svc.Hosts.Cordon(ctx, f.admin, "h-a", 0); err != nil || h.State != fleet.Cordoned {
			t.Errorf("cordon an unhealthy host = %+v, %v", h, err)
		}
		evs := ahEvents(t, st, cloud.EventFilter{HostID: "h-a"})
		var got []string
		for _, ev := range evs {
			got = append(got, string(ev.Kind)+" "+ev.Reason)
			if ev.Actor != f.admin.ID {
				t.Errorf("event %+v: actor %q, want %q", ev, ev.Actor, f.admin.ID)
			}
		}
		want := []string{"host.cordoned schedulable -> cordoned by " + f.admin.ID, "host.uncordoned cordoned -> schedulable by " + f.admin.ID,
			"host.cordoned unhealthy -> cordoned by " + f.admin.ID}
		if !slices.Equal(got, want) {
			t.Errorf("host events %q, want %q", got, want)
		}
		if hs, err := f.svc.Hosts.List(ctx, f.admin); err != nil || len(hs) != 1 || hs[0].ID != "h-a" {
			t.Errorf("List = %+v, %v", hs, err)
		}
	})
}

// TestHostsDrain: a drain cordons the host and asks what is placed or
// running there to stop, each through MoveInstance (a move event with the
// admin as actor); instances elsewhere and instances already stopping are
// left alone; draining twice changes nothing more.
func TestHostsDrain(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newAHFixture(t, st)
		ctx := context.Background()
		f.putHost("h-a", 4)
		f.putHost("h-b", 1)
		run := f.placed(f.acme, "h-a", cloud.Running)
		sched := f.placed(f.globex, "h-a", cloud.Scheduled)
		stopping := f.placed(f.acme, "h-a", cloud.Stopping)
		elsewhere := f.placed(f.acme, "h-b", cloud.Running)

		stopped, err := f.svc.Hosts.Drain(ctx, f.admin, "h-a")
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, in := range stopped {
			ids = append(ids, in.ID)
			if stored := f.instance(in.ID); in.State != cloud.Stopping || stored.State != cloud.Stopping || stored.Version != in.Version {
				t.Errorf("drained %s: answered %s v%d, stored %s v%d", in.ID, in.State, in.Version, stored.State, stored.Version)
			}
		}
		want := []string{run.ID, sched.ID}
		slices.Sort(want)
		if slices.Sort(ids); !slices.Equal(ids, want) {
			t.Fatalf("drain stopped %v, want %v", ids, want)
		}
		reason := "host h-a drained by " + f.admin.ID
		for _, c := range []struct {
			in   *cloud.Instance
			from cloud.State
		}{{run, cloud.Running}, {sched, cloud.Scheduled}} {
			evs := ahEvents(t, st, cloud.EventFilter{InstanceID: c.in.ID})
			ev := evs[len(evs)-1]
			if ev.Kind != cloud.EventInstanceState || ev.From != c.from || ev.To != cloud.Stopping || ev.Actor != f.admin.ID ||
				ev.Reason != reason || ev.HostID != "h-a" || ev.TenantID != c.in.TenantID {
				t.Errorf("drain event of %s: %+v", c.in.ID, ev)
			}
			if in := f.instance(c.in.ID); in.Reason != reason || in.HostID != "h-a" {
				t.Errorf("drained instance %+v", in)
			}
		}
		if in := f.instance(stopping.ID); in.Version != stopping.Version {
			t.Errorf("an instance already stopping was changed: %+v", in)
		}
		if in := f.instance(elsewhere.ID); in.State != cloud.Running || in.Version != elsewhere.Version {
			t.Errorf("an instance elsewhere was changed: %+v", in)
		}
		if h := f.host("h-a"); h.State != fleet.Cordoned || h.Spec.State != fleet.Cordoned {
			t.Errorf("drained host %s", h.State)
		}
		if evs := ahEvents(t, st, cloud.EventFilter{HostID: "h-a", Kinds: []cloud.EventKind{service.EventHostCordoned}}); len(evs) != 1 ||
			evs[0].Reason != "schedulable -> cordoned by "+f.admin.ID+" (drain)" {
			t.Errorf("cordon events %+v", evs)
		}

		before := f.state()
		if again, err := f.svc.Hosts.Drain(ctx, f.admin, "h-a"); err != nil || len(again) != 0 {
			t.Errorf("second drain = %+v, %v", again, err)
		}
		f.unchanged(before, "a second drain")
		_, err = f.svc.Hosts.Drain(ctx, f.admin, "h-missing")
		ahHidden(t, err, "host", "h-missing")

		// An unhealthy host stays unhealthy; its instances stop all the
		// same.
		f.setHostState("h-b", fleet.Unhealthy)
		if stopped, err := f.svc.Hosts.Drain(ctx, f.admin, "h-b"); err != nil || len(stopped) != 1 || stopped[0].ID != elsewhere.ID {
			t.Errorf("drain of an unhealthy host = %+v, %v", stopped, err)
		}
		if h := f.host("h-b"); h.State != fleet.Unhealthy {
			t.Errorf("drained unhealthy host is %s", h.State)
		}
	})
}
