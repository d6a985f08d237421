package service_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/store/sqlstore"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestHeartbeatGroups: heartbeats of many hosts at once are written in
// fewer transactions than heartbeats, each host's time is recorded, an
// unhealthy host among them is healed with its event, and an unknown
// host is not_found. On both stores.
func TestHeartbeatGroups(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		ctx := context.Background()
		clock := testkit.NewClock(testkit.Epoch)
		svc := service.New(st, nil, service.Options{Now: clock.Now})
		const hosts = 64
		err := st.Tx(ctx, func(tx cloud.Tx) error {
			for i := range hosts {
				h := fleet.MockHost(fmt.Sprintf("hb-%02d", i), "L4", 1)
				state := fleet.Schedulable
				if i == 0 {
					state = fleet.Unhealthy
				}
				h.State = state
				if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: state, Spec: *h, LastHeartbeat: testkit.Epoch.Add(-time.Hour)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		counts := service.Unwrap(st).(interface{ Counts() sqlstore.Counts }).Counts
		clock.Advance(time.Minute)
		// The fleet's lane is held while the heartbeats arrive, as a
		// busy store holds it: they wait for the group in flight.
		// (Written at once, a group of one commits before the next
		// heartbeat arrives, on SQLite especially.)
		service.Unwrap(st).(interface{ LimitTx(int) }).LimitTx(1)
		hold, held := make(chan struct{}), make(chan struct{})
		go st.Tx(cloud.WithLane(ctx, cloud.LaneFleet), func(cloud.Tx) error {
			close(held)
			<-hold
			return nil
		})
		<-held
		before := counts()
		var wg sync.WaitGroup
		errs := make([]error, hosts)
		for i := range hosts {
			wg.Go(func() {
				errs[i] = svc.Agents.Heartbeat(ctx, service.AgentActor(fmt.Sprintf("hb-%02d", i)), nil)
			})
		}
		time.Sleep(100 * time.Millisecond)
		close(hold)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("heartbeat of host %d: %v", i, err)
			}
		}
		if n := counts().Sub(before).Begins; n >= hosts {
			t.Errorf("%d heartbeats in %d transactions: not grouped", hosts, n)
		} else {
			t.Logf("%d heartbeats in %d transactions", hosts, n)
		}
		err = st.Tx(ctx, func(tx cloud.Tx) error {
			for i := range hosts {
				h, err := tx.GetHost(ctx, fmt.Sprintf("hb-%02d", i))
				if err != nil {
					return err
				}
				if !h.LastHeartbeat.Equal(clock.Now()) || h.State != fleet.Schedulable {
					t.Errorf("host %s: last heartbeat %s, state %s", h.ID, h.LastHeartbeat, h.State)
				}
			}
			evs, err := tx.ListEvents(ctx, cloud.EventFilter{HostID: "hb-00"})
			if err != nil {
				return err
			}
			if len(evs) == 0 || evs[len(evs)-1].Kind != service.EventHostHealthy {
				t.Errorf("the unhealthy host's events: %+v", evs)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Agents.Heartbeat(ctx, service.AgentActor("hb-none"), nil); cloud.ErrorCode(err) != cloud.NotFound {
			t.Fatalf("an unknown host's heartbeat: %v", err)
		}
	})
}
