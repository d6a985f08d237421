package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

var allStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping,
	cloud.Stopped, cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}

// fixture is a store with one tenant, one host and a volume, and makes
// instances in any state.
type fixture struct {
	t      *testing.T
	st     cloud.Store
	now    time.Time
	tenant string
	host   string
	n      int
}

func newFixture(t *testing.T, st cloud.Store) *fixture {
	f := &fixture{t: t, st: st, now: testkit.Epoch, tenant: "tn-a", host: "h-1"}
	ctx := context.Background()
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: f.tenant, Name: "a", CreatedAt: f.now}); err != nil {
			return err
		}
		return tx.PutHost(ctx, &cloud.Host{ID: f.host, State: fleet.Schedulable,
			Spec: fleet.Host{ID: f.host, Zone: "zone-a", CPUMilli: 64000, MemoryMiB: 512 << 10}, LastHeartbeat: f.now})
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) placement(id string) *fleet.Placement {
	return &fleet.Placement{ID: id, HostID: f.host, CPUMilli: 1000, MemoryMiB: 1024}
}

// instance stores an instance in state s (holding states with a placement
// on the host) with one volume attached.
func (f *fixture) instance(s cloud.State) *cloud.Instance {
	f.t.Helper()
	f.n++
	ctx := context.Background()
	id := fmt.Sprintf("i-%04d", f.n)
	vol := fmt.Sprintf("v-%04d", f.n)
	in := &cloud.Instance{ID: id, TenantID: f.tenant, Offering: "h100.1x", State: s, Market: cloud.MarketOnDemand,
		Volumes: []string{vol}, CreatedAt: f.now, UpdatedAt: f.now}
	if s.Holds() {
		in.HostID, in.Placement, in.Zone = f.host, f.placement(id), "zone-a"
	}
	err := f.st.Tx(ctx, func(tx cloud.Tx) error {
		if err := tx.CreateInstance(ctx, in); err != nil {
			return err
		}
		return tx.CreateVolume(ctx, &cloud.Volume{ID: vol, TenantID: f.tenant, Name: vol, SizeGiB: 1,
			InstanceID: id, CreatedAt: f.now})
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return in
}

type snapshot struct {
	in     *cloud.Instance
	events int
	volume *cloud.Volume
}

func (f *fixture) read(id string) snapshot {
	f.t.Helper()
	ctx := context.Background()
	var s snapshot
	err := f.st.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		if s.in, err = tx.GetInstance(ctx, id); err != nil {
			return err
		}
		evs, err := tx.ListEvents(ctx, cloud.EventFilter{InstanceID: id})
		s.events = len(evs)
		if err != nil {
			return err
		}
		s.volume, err = tx.GetVolume(ctx, s.in.Volumes[0])
		return err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// TestMoveInstanceEveryPair drives every (from, to) pair of states through
// MoveInstance: the legal ones move, with the placement kept or cleared as
// the target requires, volumes detached on terminate and one event with
// the right from/to (and a volume.detached when its volume detaches); the
// illegal ones are a Conflict that changes nothing.
func TestMoveInstanceEveryPair(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		for _, from := range allStates {
			for _, to := range allStates {
				in := f.instance(from)
				before := f.read(in.ID)
				m := service.Move{To: to, Reason: "test", Actor: "tester"}
				if to == cloud.Scheduled {
					m.Placement, m.Zone = f.placement(in.ID), "zone-a"
				}
				err := st.Tx(ctx, func(tx cloud.Tx) error {
					cur, err := tx.GetInstance(ctx, in.ID)
					if err != nil {
						return err
					}
					return service.MoveInstance(ctx, tx, cur, m, f.now.Add(time.Minute))
				})
				after := f.read(in.ID)
				if !cloud.CanMove(from, to) {
					if cloud.ErrorCode(err) != cloud.Conflict {
						t.Errorf("%s -> %s: err %v, want a conflict", from, to, err)
					}
					if after.in.Version != before.in.Version || after.in.State != from || after.events != before.events ||
						after.volume.InstanceID != before.volume.InstanceID {
						t.Errorf("%s -> %s: a refused move changed the instance, its events or its volume", from, to)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s -> %s: %v", from, to, err)
					continue
				}
				if after.in.State != to || after.in.Version != before.in.Version+1 {
					t.Errorf("%s -> %s: stored %s version %d", from, to, after.in.State, after.in.Version)
				}
				if holds := after.in.Placement != nil && after.in.HostID != ""; holds != to.Holds() {
					t.Errorf("%s -> %s: placement held %v, want %v", from, to, holds, to.Holds())
				}
				// The move's event, and its volume's when it detaches.
				want := 1
				if before.volume.InstanceID != "" && after.volume.InstanceID == "" {
					want++
				}
				if after.events != before.events+want {
					t.Errorf("%s -> %s: %d events written, want %d", from, to, after.events-before.events, want)
				}
				detached := after.volume.InstanceID == ""
				if want := to == cloud.Terminating || to == cloud.Terminated; detached != want {
					t.Errorf("%s -> %s: volume detached %v, want %v", from, to, detached, want)
				}
			}
		}
	})
}

// TestMoveInstanceEvent checks the event a move writes and the usage
// ledger the store appends with it.
func TestMoveInstanceEvent(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		in := f.instance(cloud.Pending)
		at := f.now.Add(time.Second)
		for _, m := range []service.Move{
			{To: cloud.Scheduled, Placement: f.placement(in.ID), Zone: "zone-a", Reason: "placed", Actor: "scheduler"},
			{To: cloud.Starting, Reason: "starting", Actor: "agent/h-1"},
			{To: cloud.Running, Reason: "running", Actor: "agent/h-1"},
			{To: cloud.Stopping, Reason: "stop requested", Actor: "u-1"},
			{To: cloud.Stopped, Reason: "stopped", Actor: "agent/h-1"},
		} {
			at = at.Add(time.Minute)
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				cur, err := tx.GetInstance(ctx, in.ID)
				if err != nil {
					return err
				}
				return service.MoveInstance(ctx, tx, cur, m, at)
			})
			if err != nil {
				t.Fatalf("move to %s: %v", m.To, err)
			}
		}
		var evs []*cloud.Event
		var usage []*cloud.Usage
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			var err error
			if evs, err = tx.ListEvents(ctx, cloud.EventFilter{InstanceID: in.ID}); err != nil {
				return err
			}
			usage, err = tx.ListUsage(ctx, cloud.UsageFilter{TenantID: f.tenant})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			from, to cloud.State
			host     string
		}{{cloud.Pending, cloud.Scheduled, f.host}, {cloud.Scheduled, cloud.Starting, f.host},
			{cloud.Starting, cloud.Running, f.host}, {cloud.Running, cloud.Stopping, f.host}, {cloud.Stopping, cloud.Stopped, f.host}}
		if len(evs) != len(want) {
			t.Fatalf("%d events, want %d", len(evs), len(want))
		}
		for i, w := range want {
			e := evs[i]
			if e.Kind != cloud.EventInstanceState || e.From != w.from || e.To != w.to || e.HostID != w.host || e.TenantID != f.tenant {
				t.Errorf("event %d = %+v, want %s -> %s on %s", i, e, w.from, w.to, w.host)
			}
		}
		var ons, offs []time.Time
		for _, u := range usage {
			if u.ResourceID != in.ID {
				continue
			}
			if u.On {
				ons = append(ons, u.Time)
			} else {
				offs = append(offs, u.Time)
			}
		}
		// Running came with the third move, stopped with the fifth.
		if len(ons) != 1 || len(offs) != 1 || !ons[0].Equal(evs[2].Time) || !offs[0].Equal(evs[4].Time) {
			t.Errorf("compute ledger: on %v off %v; want an On at running and an Off at stopped", ons, offs)
		}
	})
}

// TestMoveInstanceStale: a move of an instance that changed since it was
// read is a Conflict and writes nothing.
func TestMoveInstanceStale(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		in := f.instance(cloud.Running)
		stale := *in
		testkit.Move(t, st, in.ID, cloud.Stopping, nil, f.now)
		before := f.read(in.ID)
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			return service.MoveInstance(ctx, tx, &stale, service.Move{To: cloud.Terminating, Actor: "t"}, f.now)
		})
		if cloud.ErrorCode(err) != cloud.Conflict {
			t.Fatalf("stale move: %v, want a conflict", err)
		}
		if after := f.read(in.ID); after.in.Version != before.in.Version || after.events != before.events {
			t.Error("a stale move wrote something")
		}
		if stale.State != cloud.Running {
			t.Error("a failed move changed the caller's copy")
		}
	})
}

// TestMoveInstances: the batch form moves the fresh instances, leaves the
// stale ones and reports them, with one event per moved instance.
func TestMoveInstances(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		a, b := f.instance(cloud.Pending), f.instance(cloud.Pending)
		staleB := *b
		testkit.Move(t, st, b.ID, cloud.Stopped, nil, f.now)
		var stale []string
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			var err error
			stale, err = service.MoveInstances(ctx, tx, []*cloud.Instance{a, &staleB}, []service.Move{
				{To: cloud.Scheduled, Placement: f.placement(a.ID), Zone: "zone-a", Actor: "scheduler"},
				{To: cloud.Scheduled, Placement: f.placement(b.ID), Zone: "zone-a", Actor: "scheduler"},
			}, f.now)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(stale) != 1 || stale[0] != b.ID {
			t.Fatalf("stale = %v, want [%s]", stale, b.ID)
		}
		if got := f.read(a.ID); got.in.State != cloud.Scheduled || got.in.HostID != f.host || got.events != 1 {
			t.Errorf("a: %s on %q with %d events", got.in.State, got.in.HostID, got.events)
		}
		if got := f.read(b.ID); got.in.State != cloud.Stopped || got.events != 1 {
			t.Errorf("b: %s with %d events", got.in.State, got.events)
		}
		// An illegal move fails the whole batch.
		c := f.instance(cloud.Terminated)
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			_, err := service.MoveInstances(ctx, tx, []*cloud.Instance{c}, []service.Move{{To: cloud.Running}}, f.now)
			return err
		})
		if cloud.ErrorCode(err) != cloud.Conflict {
			t.Errorf("illegal batch move: %v", err)
		}
	})
}

// TestMoveRules checks the in-memory rules of a move: scheduled needs a
// placement and no other state takes one, pending clears the reason and
// the interruption.
func TestMoveRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		move := func(in *cloud.Instance, m service.Move) error {
			return st.Tx(ctx, func(tx cloud.Tx) error {
				cur, err := tx.GetInstance(ctx, in.ID)
				if err != nil {
					return err
				}
				return service.MoveInstance(ctx, tx, cur, m, f.now)
			})
		}
		if err := move(f.instance(cloud.Pending), service.Move{To: cloud.Scheduled}); err == nil {
			t.Error("scheduled without a placement was accepted")
		}
		in := f.instance(cloud.Running)
		if err := move(in, service.Move{To: cloud.Stopping, Placement: f.placement(in.ID)}); err == nil {
			t.Error("a placement on a move to stopping was accepted")
		}
		in = f.instance(cloud.Stopped)
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			cur, err := tx.GetInstance(ctx, in.ID)
			if err != nil {
				return err
			}
			cur.Reason, cur.Interruption = "old", &cloud.Interruption{Action: cloud.ActionStop, Reason: cloud.ReclaimCapacity}
			return tx.UpdateInstance(ctx, cur)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := move(in, service.Move{To: cloud.Pending, Reason: "restart"}); err != nil {
			t.Fatal(err)
		}
		if got := f.read(in.ID).in; got.Reason != "" || got.Interruption != nil {
			t.Errorf("pending kept reason %q and interruption %v", got.Reason, got.Interruption)
		}
	})
}

// TestActions: the tenant's actions map each state to a move, a noop or a
// conflict.
func TestActions(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newFixture(t, st)
		ctx := context.Background()
		cases := []struct {
			action service.Action
			from   cloud.State
			want   cloud.State // "" for a conflict
			noop   bool
		}{
			{service.Stop, cloud.Pending, cloud.Stopped, false},
			{service.Stop, cloud.Running, cloud.Stopping, false},
			{service.Stop, cloud.Stopped, cloud.Stopped, true},
			{service.Stop, cloud.Terminated, "", false},
			{service.Start, cloud.Stopped, cloud.Pending, false},
			{service.Start, cloud.Running, cloud.Running, true},
			{service.Start, cloud.Stopping, "", false},
			{service.Start, cloud.Failed, "", false},
			{service.Terminate, cloud.Running, cloud.Terminating, false},
			{service.Terminate, cloud.Pending, cloud.Terminated, false},
			{service.Terminate, cloud.Failed, cloud.Terminated, false},
			{service.Terminate, cloud.Terminated, cloud.Terminated, true},
		}
		for _, c := range cases {
			in := f.instance(c.from)
			var noop bool
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				cur, err := tx.GetInstance(ctx, in.ID)
				if err != nil {
					return err
				}
				noop, err = service.Act(ctx, tx, service.Actor{ID: "u-1"}, cur, c.action, "", f.now)
				return err
			})
			got := f.read(in.ID).in.State
			switch {
			case c.want == "":
				var ce *cloud.Error
				if !errors.As(err, &ce) || ce.Code != cloud.Conflict || got != c.from {
					t.Errorf("%s from %s: %v, state %s; want a conflict", c.action.Verb, c.from, err, got)
				}
			case err != nil || got != c.want || noop != c.noop:
				t.Errorf("%s from %s: %v, %s noop %v; want %s noop %v", c.action.Verb, c.from, err, got, noop, c.want, c.noop)
			}
		}
	})
}
