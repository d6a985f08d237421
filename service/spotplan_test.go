package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestApplyMarketPlan applies one spot-request move at a time to a fresh
// persistent request with its pending launch: a move whose request or
// instance is no longer at the version read is skipped and writes
// nothing; the others write the request, the instance and their events;
// a move the state machine refuses fails the whole plan cleanly.
func TestApplyMarketPlan(t *testing.T) {
	market := service.Controller("market")
	pool := cloud.Pool{Offering: "l4.1x", Zone: "zone-a"}
	for _, tc := range []struct {
		name string
		// cancel cancels the request before the plan is applied.
		cancel bool
		move   func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove
		// want is the request's state after, skipped whether the move was
		// skipped, events how many events it adds, code the error's.
		want       cloud.SpotRequestState
		skipped    bool
		relaunched int
		events     int
		code       cloud.Code
	}{
		{name: "set", want: cloud.SpotActive, events: 1,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					State: cloud.SpotActive, Reason: "instance holds capacity"}
			}},
		{name: "stale request", want: cloud.SpotOpen, skipped: true,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version - 1, InstanceID: in.ID, InstanceVersion: in.Version,
					State: cloud.SpotActive, Reason: "instance holds capacity"}
			}},
		{name: "stale instance", want: cloud.SpotOpen, skipped: true,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version + 1,
					State: cloud.SpotActive, Reason: "instance holds capacity"}
			}},
		{name: "instance read as gone", want: cloud.SpotOpen, skipped: true,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID,
					State: cloud.SpotClosed, Reason: "its instance is gone"}
			}},
		{name: "gone request", skipped: true, want: cloud.SpotOpen,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: "sr-none", Version: 1, State: cloud.SpotClosed}
			}},
		// The pending launch ends and the next one launches: the
		// instance's state event, the new instance's, the relaunch's.
		{name: "relaunch", want: cloud.SpotOpen, relaunched: 1, events: 3,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					Instance: &service.Move{To: cloud.Terminated, Reason: "relaunch"},
					Launch:   &service.SpotRelaunch{Pool: pool, Why: "test"}}
			}},
		{name: "backup pool", want: cloud.SpotOpen, events: 3,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					Instance: &service.Move{To: cloud.Terminated, Reason: "moved"},
					Launch:   &service.SpotRelaunch{Pool: pool, Why: "test", Backup: true}}
			}},
		// An offering that left the catalog: the launch is refused and
		// recorded on the request, which stays open.
		{name: "refused launch", want: cloud.SpotOpen, events: 2,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					Instance: &service.Move{To: cloud.Terminated, Reason: "relaunch"},
					Launch:   &service.SpotRelaunch{Pool: cloud.Pool{Offering: "h900.1x"}, Why: "test"}}
			}},
		{name: "cancelled request", cancel: true, want: cloud.SpotCancelled, code: cloud.Conflict,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					State: cloud.SpotActive, Reason: "instance holds capacity"}
			}},
		// LaunchSpot launches nothing more for a cancelled request.
		{name: "cancelled relaunch", cancel: true, want: cloud.SpotCancelled, code: cloud.Conflict,
			move: func(r *cloud.SpotRequest, in *cloud.Instance) service.SpotMove {
				return service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: in.ID, InstanceVersion: in.Version,
					Launch: &service.SpotRelaunch{Pool: pool, Why: "test"}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
				f := newBillFixture(t, st)
				ctx := context.Background()
				r, _, err := f.svc.Spot.Create(ctx, f.acme, api.CreateSpotRequestRequest{Type: cloud.SpotPersistent, Pools: []cloud.Pool{pool}}, "")
				if err != nil {
					t.Fatal(err)
				}
				if tc.cancel {
					if r, err = f.svc.Spot.Cancel(ctx, f.acme, r.ID, false, 0); err != nil {
						t.Fatal(err)
					}
				}
				in, err := f.svc.Instances.Get(ctx, f.acme, r.InstanceID)
				if err != nil {
					t.Fatal(err)
				}
				before := f.counts()
				price := cloud.SpotPrice{Pool: pool, Time: f.clock.Now(), Price: money.MustParse("0.42")}
				p := &service.MarketPlan{Prices: []cloud.SpotPrice{price}, Moves: []service.SpotMove{tc.move(r, in)}}
				res, err := service.ApplyMarketPlan(ctx, st, catalog.Default(), market, p, f.clock.Now())
				if cloud.ErrorCode(err) != tc.code || (tc.code == "" && err != nil) {
					t.Fatalf("apply: %v, want code %q", err, tc.code)
				}
				after := f.counts()
				got, gerr := f.svc.Spot.Get(ctx, f.acme, r.ID)
				if gerr != nil || got.State != tc.want {
					t.Errorf("request after = %+v, %v; want %s", got, gerr, tc.want)
				}
				if tc.code != "" {
					f.unchanged(before, "a refused plan")
					return
				}
				if tc.skipped {
					if res.Skipped != 1 || got.Version != r.Version || after.Events != before.Events || after.Instances != before.Instances {
						t.Errorf("skipped move: result %+v, request %+v, counts %+v -> %+v", res, got, before, after)
					}
				} else if res.Skipped != 0 || got.Version == r.Version {
					t.Errorf("applied move: result %+v, request version %d -> %d", res, r.Version, got.Version)
				}
				if after.Events != before.Events+tc.events || res.Relaunched != tc.relaunched {
					t.Errorf("events %d -> %d, relaunched %d; want +%d, %d", before.Events, after.Events, res.Relaunched, tc.events, tc.relaunched)
				}
				if tc.name == "refused launch" && !strings.HasPrefix(got.Reason, service.ReasonRelaunchRefused) {
					t.Errorf("reason %q", got.Reason)
				}
				var prices []cloud.SpotPrice
				_ = st.Tx(ctx, func(tx cloud.Tx) (err error) { prices, err = tx.LatestSpotPrices(ctx); return })
				if len(prices) != 1 || prices[0].Price != price.Price {
					t.Errorf("prices = %+v", prices)
				}
			})
		})
	}
}
