package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlite"
	"github.com/gpucloud/gpucloud/testkit"
)

var t0 = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

func newStore(t testing.TB) cloud.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func tx(t *testing.T, st cloud.Store, fn func(cloud.Tx) error) {
	t.Helper()
	if err := st.Tx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// seed creates a tenant, an 8-GPU H100 host (one NVLink island) and a
// 2-GPU L40S host.
func seed(t *testing.T, st cloud.Store) {
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t1", Name: "acme", CreatedAt: t0}); err != nil {
			return err
		}
		for _, h := range []*fleet.Host{fleet.MockNVLinkHost("h100-a", "H100-80GB-SXM", 8), fleet.MockHost("l40s-a", "L40S", 2)} {
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
				return err
			}
		}
		return nil
	})
}

func create(t *testing.T, st cloud.Store, id, offering string, at time.Time) {
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		return tx.CreateInstance(ctx, &cloud.Instance{ID: id, TenantID: "t1", Offering: offering, State: cloud.Pending, CreatedAt: at, UpdatedAt: at})
	})
}

func get(t *testing.T, st cloud.Store, id string) *cloud.Instance {
	var in *cloud.Instance
	tx(t, st, func(tx cloud.Tx) (err error) { in, err = tx.GetInstance(context.Background(), id); return })
	return in
}

func newScheduler(st cloud.Store) *Scheduler {
	s := NewScheduler(st, nil)
	s.Now = func() time.Time { return t0 }
	return s
}

func TestSchedulerPlacesEveryMode(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	offerings := map[string]string{"mig": "h100.mig.3g.40gb", "two": "h100.2x", "share": "l40s.shared.0.25", "cpu-l40s": "l40s.1x"}
	i := 0
	for id, o := range offerings {
		create(t, st, id, o, t0.Add(time.Duration(i)*time.Second))
		i++
	}
	s := newScheduler(st)
	n, err := s.Step(context.Background())
	if err != nil || n != 4 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	for id := range offerings {
		in := get(t, st, id)
		if in.State != cloud.Scheduled || in.Placement == nil || in.HostID == "" || in.Version != 2 {
			t.Errorf("%s: %+v", id, in)
		}
	}
	if h := get(t, st, "two"); len(h.Placement.Devices) != 2 || h.HostID != "h100-a" {
		t.Errorf("h100.2x placed as %+v", h.Placement)
	}
	var evs []*cloud.Event
	tx(t, st, func(tx cloud.Tx) (err error) {
		evs, err = tx.ListEvents(context.Background(), cloud.EventFilter{InstanceID: "mig"})
		return
	})
	if len(evs) != 1 || evs[0].To != cloud.Scheduled || evs[0].Actor != "scheduler" {
		t.Errorf("events %+v", evs)
	}
}

func TestSchedulerExplainsAndRetries(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	create(t, st, "big", "h100.8x", t0)
	create(t, st, "second", "h100.8x", t0.Add(time.Second))
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	in := get(t, st, "second")
	if in.State != cloud.Pending || !strings.HasPrefix(in.Reason, "0/2 hosts available: ") {
		t.Fatalf("second: %s %q", in.State, in.Reason)
	}
	// Another step with nothing changed adds no event.
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	var evs []*cloud.Event
	tx(t, st, func(tx cloud.Tx) (err error) {
		evs, err = tx.ListEvents(context.Background(), cloud.EventFilter{InstanceID: "second"})
		return
	})
	if len(evs) != 1 || evs[0].Kind != "instance.unschedulable" {
		t.Fatalf("events %+v", evs)
	}
	// Stopping the first frees its GPUs, and the second is placed.
	testkit.Walk(t, st, "big", cloud.Stopped, testkit.Via{}, t0)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("after stop: placed %d, err %v", n, err)
	}
	if in := get(t, st, "second"); in.State != cloud.Scheduled {
		t.Fatalf("second: %s %q", in.State, in.Reason)
	}
}

func TestSchedulerRestartLosesNothing(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	for i := 0; i < 6; i++ {
		create(t, st, fmt.Sprintf("m%d", i), "h100.mig.1g.10gb", t0.Add(time.Duration(i)*time.Second))
	}
	create(t, st, "toobig", "l40s.8x", t0.Add(time.Minute))
	s := newScheduler(st)
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := explainAll(s.Fleet().Allocations())
	// A new scheduler (a restarted server) rebuilds the same allocations;
	// the pending instance stays pending.
	s2 := newScheduler(st)
	if err := s2.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	after := explainAll(s2.Fleet().Allocations())
	if len(before) != 6 || fmt.Sprint(before) != fmt.Sprint(after) {
		t.Fatalf("allocations differ after rebuild:\n%v\n%v", before, after)
	}
	if in := get(t, st, "toobig"); in.State != cloud.Pending {
		t.Fatalf("toobig: %s", in.State)
	}
}

// TestSchedulerHostChangeWins: a host cordoned behind the scheduler's back
// is noticed before placing, and nothing lands on it.
func TestSchedulerHostChangeWins(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	s := newScheduler(st)
	if err := s.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	tx(t, st, func(tx cloud.Tx) error {
		h, err := tx.GetHost(context.Background(), "h100-a")
		if err != nil {
			return err
		}
		h.State = fleet.Cordoned
		return tx.PutHost(context.Background(), h)
	})
	create(t, st, "x", "h100.1x", t0)
	if n, err := s.Step(context.Background()); err != nil || n != 0 {
		t.Fatalf("placed %d on a cordoned host, err %v", n, err)
	}
	if in := get(t, st, "x"); !strings.Contains(in.Reason, "cordoned") {
		t.Fatalf("reason %q", in.Reason)
	}
}

// TestSchedulerSchedulable: Schedulable counts the schedulable hosts of
// the fleet as the last rebuild read it: none before the first, then the
// seeded two; a cordoned host leaves the count at the step that reads it.
func TestSchedulerSchedulable(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	s := newScheduler(st)
	if n := s.Schedulable(); n != 0 {
		t.Fatalf("before the first rebuild: %d", n)
	}
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := s.Schedulable(); n != 2 {
		t.Fatalf("after the first step: %d, want 2", n)
	}
	tx(t, st, func(tx cloud.Tx) error {
		h, err := tx.GetHost(context.Background(), "l40s-a")
		if err != nil {
			return err
		}
		h.State = fleet.Cordoned
		return tx.PutHost(context.Background(), h)
	})
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := s.Schedulable(); n != 1 {
		t.Fatalf("after a host was cordoned: %d, want 1", n)
	}
}

// TestTwoSchedulersNeverDoublePlace: two schedulers on one store (a leader
// and a stale one) race over the same pending instances; the host version
// check lets only one commit per host state, so no GPU is handed out twice.
func TestTwoSchedulersNeverDoublePlace(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	for i := 0; i < 12; i++ {
		create(t, st, fmt.Sprintf("g%02d", i), "h100.1x", t0.Add(time.Duration(i)*time.Second))
	}
	a, b := newScheduler(st), newScheduler(st)
	for round := 0; round < 6; round++ {
		if _, err := a.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	check := newScheduler(st)
	if err := check.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := check.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	if n := len(check.Fleet().Allocations()); n != 8 {
		t.Fatalf("%d allocations of 1 GPU on one 8-GPU host, want 8", n)
	}
}

func explainAll(ps []*fleet.Placement) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.ID+" "+placement.Explain(p))
	}
	return out
}

// TestSchedulerReleasesWithoutRebuild: an instance that stops holding its
// allocation (the agent's final report moves it, and touches no host)
// frees its capacity on the next step, incrementally: no full rebuild.
func TestSchedulerReleasesWithoutRebuild(t *testing.T) {
	st := newStore(t)
	seed(t, st)
	create(t, st, "a", "h100.8x", t0)
	s := newScheduler(st)
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	if n := s.Rebuilds(); n != 1 {
		t.Fatalf("%d rebuilds after the first step, want 1", n)
	}
	version := hostVersion(t, st, "h100-a")
	// What the agent's reports do: starting, running, then exited 0.
	tx(t, st, func(tx cloud.Tx) error {
		in, err := tx.GetInstance(context.Background(), "a")
		if err != nil {
			return err
		}
		for _, to := range []cloud.State{cloud.Starting, cloud.Running, cloud.Stopping, cloud.Stopped} {
			if err := service.MoveInstance(context.Background(), tx, in, service.Move{To: to, Reason: cloud.ReasonExitedOK, Actor: "agent/h100-a"}, t0); err != nil {
				return err
			}
		}
		return nil
	})
	if v := hostVersion(t, st, "h100-a"); v != version {
		t.Fatalf("the host's version moved from %d to %d", version, v)
	}
	create(t, st, "b", "h100.8x", t0.Add(time.Second))
	if n, err := s.Step(context.Background()); err != nil || n != 1 {
		t.Fatalf("after the release: placed %d, err %v", n, err)
	}
	if in := get(t, st, "b"); in.State != cloud.Scheduled || in.HostID != "h100-a" {
		t.Fatalf("b: %s on %q", in.State, in.HostID)
	}
	if s.Fleet().Allocation("a") != nil {
		t.Fatal("the fleet still holds a's allocation")
	}
	if n := s.Rebuilds(); n != 1 {
		t.Fatalf("%d rebuilds, want 1: a release needs none", n)
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
}

// TestSchedulerGrowsWithoutRebuild: hosts that join are added to the
// scheduler's fleet without a rebuild (only their specs are read), and
// the fleet then places on them and matches what a rebuild from the
// store gives; any other host change (a spec, a state) still rebuilds.
func TestSchedulerGrowsWithoutRebuild(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	seed(t, st)
	create(t, st, "a", "h100.8x", t0)
	s := newScheduler(st)
	if n, err := s.Step(ctx); err != nil || n != 1 {
		t.Fatalf("placed %d, err %v", n, err)
	}
	join := func(id string) {
		t.Helper()
		h := fleet.MockNVLinkHost(id, "H100-80GB-SXM", 8)
		tx(t, st, func(tx cloud.Tx) error {
			return tx.PutHost(ctx, &cloud.Host{ID: id, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0})
		})
	}
	// Two join, one step: a second whole H100 host can only be theirs.
	join("h100-b")
	join("h100-c")
	create(t, st, "b", "h100.8x", t0.Add(time.Second))
	if n, err := s.Step(ctx); err != nil || n != 1 {
		t.Fatalf("after the joins: placed %d, err %v", n, err)
	}
	if in := get(t, st, "b"); in.HostID != "h100-b" && in.HostID != "h100-c" {
		t.Fatalf("b on %q, want a host that joined", in.HostID)
	}
	if r, g := s.Rebuilds(), s.Grows(); r != 1 || g != 1 {
		t.Fatalf("%d rebuilds and %d grows, want 1 and 1", r, g)
	}
	if err := s.Fleet().Check(); err != nil {
		t.Fatal(err)
	}
	check := newScheduler(st)
	if err := check.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := len(s.Fleet().Hosts), len(check.Fleet().Hosts); got != want {
		t.Fatalf("the grown fleet holds %d hosts, a rebuilt one %d", got, want)
	}
	for _, id := range []string{"a", "b"} {
		if g, w := s.Fleet().Allocation(id), check.Fleet().Allocation(id); g == nil || w == nil || g.HostID != w.HostID {
			t.Errorf("%s: grown fleet %+v, rebuilt %+v", id, g, w)
		}
	}
	// A host that changed is a rebuild, even with a join beside it.
	tx(t, st, func(tx cloud.Tx) error {
		h, err := tx.GetHost(ctx, "l40s-a")
		if err != nil {
			return err
		}
		h.State, h.Spec.State = fleet.Cordoned, fleet.Cordoned
		return tx.PutHost(ctx, h)
	})
	join("h100-d")
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if r, g := s.Rebuilds(), s.Grows(); r != 2 || g != 1 {
		t.Fatalf("after a change: %d rebuilds and %d grows, want 2 and 1", r, g)
	}
	if h := s.Fleet().Host("l40s-a"); h == nil || h.State != fleet.Cordoned || s.Fleet().Host("h100-d") == nil {
		t.Fatalf("the rebuilt fleet: l40s-a %+v, h100-d %v", h, s.Fleet().Host("h100-d"))
	}
}
