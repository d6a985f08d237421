package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

func TestWay(t *testing.T) {
	for _, tc := range []struct {
		from, to cloud.State
		want     []cloud.State
	}{
		{cloud.Pending, cloud.Running, []cloud.State{cloud.Scheduled, cloud.Starting, cloud.Running}},
		{cloud.Pending, cloud.Terminated, []cloud.State{cloud.Terminated}},
		{cloud.Pending, cloud.Lost, []cloud.State{cloud.Scheduled, cloud.Lost}},
		{cloud.Running, cloud.Stopped, []cloud.State{cloud.Stopping, cloud.Stopped}},
		{cloud.Running, cloud.Terminated, []cloud.State{cloud.Terminating, cloud.Terminated}},
		{cloud.Running, cloud.Pending, []cloud.State{cloud.Lost, cloud.Pending}},
		{cloud.Stopped, cloud.Running, []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running}},
		{cloud.Running, cloud.Running, nil},
		{cloud.Terminated, cloud.Pending, nil},
	} {
		got := Way(tc.from, tc.to)
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("Way(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
		for i, s := range got {
			prev := tc.from
			if i > 0 {
				prev = got[i-1]
			}
			if !cloud.CanMove(prev, s) {
				t.Errorf("Way(%s, %s) moves %s to %s", tc.from, tc.to, prev, s)
			}
		}
	}
}

// TestWalk: a walk writes one instance.state event per step and meters the
// run, places the instance on the named host in its zone, and ends with
// the reason given; a walk with no way changes nothing.
func TestWalk(t *testing.T) {
	EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		clock := NewClock(Epoch)
		h := fleet.MockHost("h-1", "L4", 1)
		h.Zone = "zone-q"
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: "t", Name: "t", CreatedAt: clock.Now()}); err != nil {
				return err
			}
			if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: clock.Now()}); err != nil {
				return err
			}
			return tx.CreateInstance(ctx, &cloud.Instance{ID: "i-1", TenantID: "t", Offering: "l4.1x", State: cloud.Pending,
				CreatedAt: clock.Now(), UpdatedAt: clock.Now()})
		})
		if err != nil {
			t.Fatal(err)
		}
		in := Walk(t, st, "i-1", cloud.Running, Via{Host: "h-1", Reason: "up"}, clock.Now())
		if in.State != cloud.Running || in.HostID != "h-1" || in.Zone != "zone-q" || in.Placement == nil || in.Reason != "up" {
			t.Fatalf("after the walk to running: %+v", in)
		}
		clock.Advance(90 * time.Second)
		Walk(t, st, "i-1", cloud.Stopped, Via{}, clock.Now())
		if _, err := TryWalk(st, "i-1", cloud.Stopped, Via{}, clock.Now()); err != nil {
			t.Fatalf("a walk to where it is: %v", err)
		}
		Walk(t, st, "i-1", cloud.Terminated, Via{}, clock.Now())
		before := CountRows(t, st)
		if _, err := TryWalk(st, "i-1", cloud.Pending, Via{}, clock.Now()); err == nil {
			t.Fatal("a walk out of terminated: no error")
		}
		if after := CountRows(t, st); after != before {
			t.Errorf("a refused walk changed the store: %+v, then %+v", before, after)
		}
		var moves []string
		var usage []*cloud.Usage
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			evs, err := tx.ListEvents(ctx, cloud.EventFilter{InstanceID: "i-1"})
			for _, e := range evs {
				moves = append(moves, string(e.From)+">"+string(e.To))
			}
			if err != nil {
				return err
			}
			usage, err = tx.ListUsage(ctx, cloud.UsageFilter{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		want := "[pending>scheduled scheduled>starting starting>running running>stopping stopping>stopped stopped>terminated]"
		if fmt.Sprint(moves) != want {
			t.Errorf("events %v, want %s", moves, want)
		}
		if len(usage) != 2 || !usage[0].On || usage[1].On || usage[0].Zone != "zone-q" || usage[1].Time.Sub(usage[0].Time) != 90*time.Second {
			t.Errorf("usage ledger %+v, want an On in zone-q and an Off 90 s later", usage)
		}
	})
}
