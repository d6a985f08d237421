package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/spot"
)

// planView is a FleetView for planning tests: FitsSpot answers from a
// set of offering/zone pairs.
type planView struct {
	supply map[cloud.Pool]PoolSupply
	fits   map[cloud.Pool]bool
	notice time.Duration
}

func (v planView) Built() bool                       { return true }
func (v planView) Hosts() int                        { return 1 }
func (v planView) Supply() map[cloud.Pool]PoolSupply { return v.supply }
func (v planView) Reserved() map[cloud.Pool]int      { return nil }
func (v planView) Notice(cloud.Pool) time.Duration   { return v.notice }
func (v planView) FitsSpot(offering string, zones []string) bool {
	for _, z := range zones {
		if v.fits[cloud.Pool{Offering: offering, Zone: z}] {
			return true
		}
	}
	return false
}

// TestMarketPlansSpotRequests feeds the market's planning one request and
// its instance at a time (no store: a snapshot and a fleet view) and
// checks the move it plans.
func TestMarketPlansSpotRequests(t *testing.T) {
	now := t0.Add(time.Hour)
	a := cloud.Pool{Offering: "l40s.1x", Zone: "zone-a"}
	b := cloud.Pool{Offering: "l40s.1x", Zone: "zone-b"}
	reclaim := &cloud.Interruption{Action: cloud.ActionTerminate, Reason: cloud.ReclaimCapacity}
	type want struct {
		none     bool // no move
		state    cloud.SpotRequestState
		reason   string // a prefix of the reason
		to       cloud.State
		launch   *cloud.Pool
		backup   bool
		relaunch bool
	}
	for _, tc := range []struct {
		name       string
		persistent bool
		pools      []cloud.Pool
		state      cloud.SpotRequestState
		reason     string
		in         *cloud.Instance // nil: gone
		fits       []cloud.Pool
		want       want
	}{
		{name: "one-time gone", in: nil, want: want{state: cloud.SpotClosed, reason: "its instance is gone"}},
		{name: "persistent gone", persistent: true, fits: []cloud.Pool{a}, want: want{launch: &a}},
		{name: "persistent gone, room in the backup only", persistent: true, fits: []cloud.Pool{b}, want: want{launch: &b}},
		{name: "persistent gone, no room", persistent: true, want: want{launch: &a}},
		{name: "persistent gone, no pools", persistent: true, pools: []cloud.Pool{},
			want: want{state: cloud.SpotOpen, reason: reasonRefused + "spot request sr-1 has no pools"}},
		{name: "placed", in: &cloud.Instance{State: cloud.Running}, want: want{state: cloud.SpotActive, reason: "instance i-1 holds capacity"}},
		{name: "settled", state: cloud.SpotActive, reason: "instance i-1 holds capacity", in: &cloud.Instance{State: cloud.Starting},
			want: want{none: true}},
		{name: "pending", in: &cloud.Instance{State: cloud.Pending}, want: want{state: cloud.SpotOpen, reason: reasonWaiting}},
		{name: "pending that fits", reason: reasonWaiting, in: &cloud.Instance{State: cloud.Pending, Reason: "no host", Zones: []string{"zone-a"}},
			fits: []cloud.Pool{a, b}, want: want{none: true}},
		{name: "pending moves to the backup", reason: reasonWaiting, in: &cloud.Instance{State: cloud.Pending, Reason: "no host", Zones: []string{"zone-a"}},
			fits: []cloud.Pool{b}, want: want{to: cloud.Terminated, launch: &b, backup: true}},
		{name: "pending, no room anywhere", reason: reasonWaiting, in: &cloud.Instance{State: cloud.Pending, Reason: "no host", Zones: []string{"zone-a"}},
			want: want{none: true}},
		{name: "completed", in: &cloud.Instance{State: cloud.Stopped, Reason: cloud.ReasonExitedOK},
			want: want{state: cloud.SpotClosed, reason: "its workload completed"}},
		{name: "stopped by a reclaim", persistent: true, in: &cloud.Instance{State: cloud.Stopped, Interruption: reclaim},
			want: want{to: cloud.Pending, relaunch: true, state: cloud.SpotOpen, reason: "restarting its stopped instance"}},
		{name: "stopped", in: &cloud.Instance{State: cloud.Stopped}, want: want{state: cloud.SpotDisabled, reason: "its instance is stopped"}},
		{name: "reclaimed", persistent: true, in: &cloud.Instance{State: cloud.Terminated, Interruption: reclaim}, fits: []cloud.Pool{a},
			want: want{launch: &a}},
		{name: "terminated", in: &cloud.Instance{State: cloud.Terminated}, want: want{state: cloud.SpotClosed, reason: "its instance terminated"}},
		{name: "terminated by the tenant", persistent: true, in: &cloud.Instance{State: cloud.Terminated},
			want: want{state: cloud.SpotClosed, reason: "its instance was terminated by the tenant"}},
		{name: "refused before", persistent: true, state: cloud.SpotOpen, reason: reasonRefused + "quota", in: &cloud.Instance{State: cloud.Terminated},
			fits: []cloud.Pool{a}, want: want{launch: &a}},
		{name: "failed, one-time", in: &cloud.Instance{State: cloud.Failed}, want: want{state: cloud.SpotClosed, reason: "its instance failed"}},
		{name: "failed, kept", persistent: true, in: &cloud.Instance{State: cloud.Failed, UpdatedAt: now.Add(-time.Minute)},
			want: want{state: cloud.SpotOpen, reason: "instance i-1 failed; kept for inspection"}},
		{name: "failed, relaunched", persistent: true, in: &cloud.Instance{State: cloud.Failed, UpdatedAt: now.Add(-time.Hour)},
			fits: []cloud.Pool{a}, want: want{to: cloud.Terminated, launch: &a}},
		{name: "lost, relaunched", persistent: true, in: &cloud.Instance{State: cloud.Lost, UpdatedAt: now}, fits: []cloud.Pool{b},
			want: want{to: cloud.Terminated, launch: &b}},
		{name: "lost, one-time", in: &cloud.Instance{State: cloud.Lost}, want: want{state: cloud.SpotClosed, reason: "its instance lost"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &cloud.SpotRequest{ID: "sr-1", TenantID: "t1", Type: cloud.SpotOneTime, Pools: []cloud.Pool{a, b}, State: cloud.SpotOpen,
				InstanceID: "i-1", Version: 7, Reason: tc.reason}
			if tc.persistent {
				r.Type = cloud.SpotPersistent
			}
			if tc.pools != nil {
				r.Pools = tc.pools
			}
			if tc.state != "" {
				r.State = tc.state
			}
			ms := &marketSnap{requests: map[string]*cloud.SpotRequest{r.ID: r}, ended: map[string]*cloud.Instance{}}
			if in := tc.in; in != nil {
				in.ID, in.Offering, in.Market, in.SpotRequestID, in.Version = "i-1", "l40s.1x", cloud.MarketSpot, r.ID, 3
				if in.State == cloud.Terminated {
					ms.ended[in.ID] = in
				} else {
					ms.spot = append(ms.spot, in)
				}
			}
			view := planView{fits: map[cloud.Pool]bool{}}
			for _, p := range tc.fits {
				view.fits[p] = true
			}
			m := &SpotMarket{KeepFailed: 10 * time.Minute, last: map[cloud.Pool]money.Micros{a: 1, b: 1},
				supply: map[cloud.Pool]spot.Supply{a: {Pool: a, Free: 1, OnDemandPrice: 100}, b: {Pool: b, Free: 1, OnDemandPrice: 100}}}
			rd := m.plan(view, ms, now, false)
			if len(rd.plan.Prices) != 0 || len(rd.plan.Notices) != 0 {
				t.Errorf("plan = %+v: no clearing and no notice expected", rd.plan)
			}
			if tc.want.none {
				if len(rd.plan.Moves) != 0 {
					t.Errorf("moves = %+v, want none", rd.plan.Moves)
				}
				return
			}
			if len(rd.plan.Moves) != 1 {
				t.Fatalf("moves = %+v, want one", rd.plan.Moves)
			}
			mv := rd.plan.Moves[0]
			if mv.RequestID != r.ID || mv.Version != 7 || mv.InstanceID != "i-1" || (tc.in != nil) != (mv.InstanceVersion == 3) {
				t.Errorf("move reads %s v%d, %s v%d", mv.RequestID, mv.Version, mv.InstanceID, mv.InstanceVersion)
			}
			w := tc.want
			if w.state != "" && (mv.State != w.state || !strings.HasPrefix(mv.Reason, w.reason)) {
				t.Errorf("request to %s (%q), want %s (%q...)", mv.State, mv.Reason, w.state, w.reason)
			}
			switch {
			case w.to == "" && mv.Instance != nil, w.to != "" && (mv.Instance == nil || mv.Instance.To != w.to):
				t.Errorf("instance move %+v, want to %q", mv.Instance, w.to)
			case (w.launch == nil) != (mv.Launch == nil), w.launch != nil && (mv.Launch.Pool != *w.launch || mv.Launch.Backup != w.backup):
				t.Errorf("launch %+v, want in %v (backup %v)", mv.Launch, w.launch, w.backup)
			case mv.Relaunch != w.relaunch:
				t.Errorf("relaunch %v, want %v", mv.Relaunch, w.relaunch)
			}
		})
	}
}

// TestMarketPlansClearingsNoticesAndGates feeds the market's planning a
// running spot instance whose max price the clearing passes, one in a pool
// at risk, and a pending one: the plan records the new prices, a reclaim
// notice and a rebalance recommendation, gates the pending one, and the
// Market itself is left as it was until the plan is applied.
func TestMarketPlansClearingsNoticesAndGates(t *testing.T) {
	ps, err := billing.DefaultPrices(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	a := cloud.Pool{Offering: "l40s.1x", Zone: "zone-a"}
	b := cloud.Pool{Offering: "l40s.1x", Zone: "zone-b"}
	view := planView{supply: map[cloud.Pool]PoolSupply{a: {Capacity: 4, Free: 1}, b: {Capacity: 4, Free: 0}}, notice: 2 * time.Minute}
	cheap := &cloud.SpotRequest{ID: "sr-cheap", Type: cloud.SpotOneTime, Pools: []cloud.Pool{a}, MaxPrice: 1, State: cloud.SpotActive,
		InstanceID: "i-cheap", Reason: "instance i-cheap holds capacity"}
	risky := &cloud.SpotRequest{ID: "sr-any", Type: cloud.SpotOneTime, Pools: []cloud.Pool{b}, State: cloud.SpotActive,
		InstanceID: "i-any", Reason: "instance i-any holds capacity"}
	gated := &cloud.SpotRequest{ID: "sr-gated", Type: cloud.SpotOneTime, Pools: []cloud.Pool{a}, MaxPrice: 1, State: cloud.SpotOpen,
		InstanceID: "i-gated", Reason: reasonWaiting}
	ms := &marketSnap{prices: billing.NewPriceBook(ps, nil),
		requests: map[string]*cloud.SpotRequest{cheap.ID: cheap, risky.ID: risky, gated.ID: gated},
		spot: []*cloud.Instance{
			{ID: "i-cheap", Offering: "l40s.1x", Zone: "zone-a", State: cloud.Running, SpotRequestID: cheap.ID},
			{ID: "i-any", Offering: "l40s.1x", Zone: "zone-b", State: cloud.Running, SpotRequestID: risky.ID},
			{ID: "i-gated", Offering: "l40s.1x", Zones: []string{"zone-a"}, State: cloud.Pending, SpotRequestID: gated.ID},
		},
		pending: []*cloud.Instance{{ID: "i-od", Offering: "l40s.1x", Zones: []string{"zone-b"}, State: cloud.Pending}},
		ended:   map[string]*cloud.Instance{}}
	m := &SpotMarket{Config: spot.DefaultConfig()}
	rd := m.plan(view, ms, t0, true)
	if m.last != nil || m.supply != nil {
		t.Errorf("planning changed the market: %v, %v", m.last, m.supply)
	}
	if len(rd.plan.Prices) != 2 || rd.last[a] <= 1 || rd.last[b] <= 1 {
		t.Errorf("prices = %+v, last %v", rd.plan.Prices, rd.last)
	}
	want := []service.SpotNotice{
		{InstanceID: "i-cheap", Reason: cloud.ReclaimPrice, Notice: 2 * time.Minute, Actor: schedulerActor},
		{InstanceID: "i-any", Reason: cloud.ReclaimRebalance},
	}
	if len(rd.plan.Notices) != len(want) || rd.plan.Notices[0] != want[0] || rd.plan.Notices[1] != want[1] {
		t.Errorf("notices = %+v, want %+v", rd.plan.Notices, want)
	}
	if g := rd.gates["i-gated"]; len(g.Zones) != 0 || !strings.Contains(g.Blocked, "above the max price") {
		t.Errorf("gate = %+v", g)
	}
	if len(rd.plan.Moves) != 0 {
		t.Errorf("moves = %+v", rd.plan.Moves)
	}
}
