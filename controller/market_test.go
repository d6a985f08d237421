package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// market is a scheduler and a market on a store with one 2-GPU L40S host
// (zone MockZone) and the built-in price book.
type market struct {
	t     *testing.T
	st    cloud.Store
	clock *testkit.Clock
	s     *Scheduler
	m     *SpotMarket
}

func newMarket(t *testing.T) *market {
	st := newStore(t)
	ctx := context.Background()
	tx(t, st, func(tx cloud.Tx) error {
		for _, tn := range []string{"t1", "t2"} {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: tn, Name: tn, CreatedAt: t0}); err != nil {
				return err
			}
		}
		h := fleet.MockHost("l40s-a", "L40S", 2)
		if err := tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0}); err != nil {
			return err
		}
		ps, err := billing.DefaultPrices(catalog.Default())
		if err != nil {
			return err
		}
		for _, p := range ps {
			if err := tx.AddPrice(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	c := testkit.NewClock(t0)
	s := NewScheduler(st, nil)
	s.Now = c.Now
	m := NewSpotMarket(st, s)
	m.Now = c.Now
	mk := &market{t: t, st: st, clock: c, s: s, m: m}
	// The first round builds the fleet and clears the prices; spot
	// instances are placed from the next one on.
	mk.step()
	return mk
}

func (mk *market) step() {
	mk.t.Helper()
	if err := mk.m.Step(context.Background()); err != nil {
		mk.t.Fatal(err)
	}
	if _, err := mk.s.Step(context.Background()); err != nil {
		mk.t.Fatal(err)
	}
}

// spotRequest creates a spot request and its first launch.
func (mk *market) spotRequest(id string, typ cloud.SpotRequestType, interruption string, max money.Micros, vols ...string) *cloud.Instance {
	mk.t.Helper()
	var in *cloud.Instance
	ctx := context.Background()
	tx(mk.t, mk.st, func(tx cloud.Tx) error {
		r := &cloud.SpotRequest{ID: id, TenantID: "t1", Type: typ, Interruption: interruption, MaxPrice: max,
			Pools: []cloud.Pool{{Offering: "l40s.1x", Zone: fleet.MockZone}}, Command: []string{"train"}, Volumes: vols,
			State: cloud.SpotOpen, CreatedAt: mk.clock.Now(), UpdatedAt: mk.clock.Now()}
		if err := tx.CreateSpotRequest(ctx, r); err != nil {
			return err
		}
		var err error
		in, err = service.LaunchSpot(ctx, tx, catalog.Default(), r, r.Pools[0], "test", mk.clock.Now())
		return err
	})
	return in
}

func (mk *market) onDemand(id, tenant, offering string) {
	mk.t.Helper()
	tx(mk.t, mk.st, func(tx cloud.Tx) error {
		return tx.CreateInstance(context.Background(), &cloud.Instance{ID: id, TenantID: tenant, Offering: offering,
			State: cloud.Pending, Market: cloud.MarketOnDemand, CreatedAt: mk.clock.Now(), UpdatedAt: mk.clock.Now()})
	})
}

// move moves an instance to state to, step by step as the agent's reports
// would (testkit.Walk).
func (mk *market) move(id string, to cloud.State) {
	mk.t.Helper()
	testkit.Walk(mk.t, mk.st, id, to, testkit.Via{}, mk.clock.Now())
}

func (mk *market) get(id string) *cloud.Instance { return get(mk.t, mk.st, id) }

func (mk *market) request(id string) *cloud.SpotRequest {
	var r *cloud.SpotRequest
	tx(mk.t, mk.st, func(tx cloud.Tx) (err error) { r, err = tx.GetSpotRequest(context.Background(), id); return })
	return r
}

func TestReclaimGivesNoticeAndStopsAtTheDeadline(t *testing.T) {
	mk := newMarket(t)
	a := mk.spotRequest("a", cloud.SpotOneTime, cloud.ActionTerminate, 0)
	b := mk.spotRequest("b", cloud.SpotOneTime, cloud.ActionTerminate, 0)
	mk.step()
	for _, id := range []string{a.ID, b.ID} {
		if in := mk.get(id); in.State != cloud.Scheduled || in.Zone != fleet.MockZone || !in.Placement.Preemptible {
			t.Fatalf("spot %s: %s zone %q placement %+v", id, in.State, in.Zone, in.Placement)
		}
		mk.move(id, cloud.Starting)
		mk.move(id, cloud.Running)
	}
	// One on-demand GPU is needed: one victim, not two.
	mk.onDemand("od", "t2", "l40s.1x")
	mk.step()
	var victims []*cloud.Instance
	for _, id := range []string{a.ID, b.ID} {
		if in := mk.get(id); in.Interruption != nil {
			victims = append(victims, in)
		}
	}
	if len(victims) != 1 {
		t.Fatalf("%d victims, want 1", len(victims))
	}
	v := victims[0]
	it := v.Interruption
	if it.Action != cloud.ActionTerminate || it.Reason != cloud.ReclaimCapacity || it.For != "od" ||
		!it.Deadline.Equal(t0.Add(DefaultNotice)) || v.State != cloud.Running {
		t.Fatalf("notice %+v on %s (%s)", it, v.ID, v.State)
	}
	if od := mk.get("od"); od.State != cloud.Pending || !strings.Contains(od.Reason, "reclaiming spot capacity") {
		t.Fatalf("on-demand %s: %q", od.State, od.Reason)
	}
	// Steps before the deadline neither reclaim more nor stop anything.
	mk.clock.Set(it.Deadline.Add(-time.Second))
	mk.step()
	mk.step()
	for _, id := range []string{a.ID, b.ID} {
		in := mk.get(id)
		if in.State != cloud.Running {
			t.Fatalf("%s is %s before the deadline", id, in.State)
		}
		if id != v.ID && in.Interruption != nil && in.Interruption.Action != "" {
			t.Fatalf("second victim %s noticed: %+v", id, in.Interruption)
		}
	}
	// At the deadline the victim goes to terminating (the agent sends
	// SIGTERM), and once it is gone the on-demand instance lands.
	mk.clock.Set(it.Deadline)
	mk.step()
	if in := mk.get(v.ID); in.State != cloud.Terminating {
		t.Fatalf("victim %s at the deadline, want terminating", in.State)
	}
	mk.move(v.ID, cloud.Terminated)
	mk.step()
	if od := mk.get("od"); od.State != cloud.Scheduled {
		t.Fatalf("on-demand %s after the reclaim: %s", od.State, od.Reason)
	}
	// The one-time request closed.
	if r := mk.request(v.SpotRequestID); r.State != cloud.SpotClosed {
		t.Fatalf("one-time request %s after its instance terminated", r.State)
	}
}

func TestPoolNoticeOverride(t *testing.T) {
	mk := newMarket(t)
	mk.s.PoolNotice = map[string]time.Duration{"l40s.1x/" + fleet.MockZone: 45 * time.Second, "l40s.2x": 10 * time.Second}
	if d := mk.s.noticeFor(cloud.Pool{Offering: "l40s.1x", Zone: fleet.MockZone}); d != 45*time.Second {
		t.Fatalf("pool notice %s", d)
	}
	// Below the 30 s minimum: ignored.
	if d := mk.s.noticeFor(cloud.Pool{Offering: "l40s.2x", Zone: "z"}); d != DefaultNotice {
		t.Fatalf("too short a notice was used: %s", d)
	}
}

func TestPersistentRequestRelaunchesWithItsVolumes(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: "vol-1", TenantID: "t1", Name: "ckpt", SizeGiB: 500, Zone: fleet.MockZone, CreatedAt: t0})
	})
	first := mk.spotRequest("p", cloud.SpotPersistent, cloud.ActionTerminate, 0, "vol-1")
	mk.step()
	mk.move(first.ID, cloud.Starting)
	mk.move(first.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.2x")
	mk.step()
	if it := mk.get(first.ID).Interruption; it == nil || it.Action != cloud.ActionTerminate {
		t.Fatalf("no notice: %+v", it)
	}
	mk.clock.Advance(DefaultNotice)
	mk.step()
	mk.move(first.ID, cloud.Terminated)
	mk.step()
	r := mk.request("p")
	if r.Launches != 2 || r.InstanceID == first.ID || r.State != cloud.SpotOpen {
		t.Fatalf("request after reclaim: %+v", r)
	}
	next := mk.get(r.InstanceID)
	if next.State != cloud.Pending || next.Market != cloud.MarketSpot || next.SpotRequestID != "p" || len(next.Volumes) != 1 {
		t.Fatalf("relaunch %+v", next)
	}
	var vol *cloud.Volume
	tx(t, mk.st, func(tx cloud.Tx) (err error) { vol, err = tx.GetVolume(ctx, "vol-1"); return })
	if vol.InstanceID != next.ID {
		t.Fatalf("volume attached to %q, want %s", vol.InstanceID, next.ID)
	}
	// The on-demand instance holds both GPUs: the relaunch waits, then
	// runs once they are free.
	mk.step()
	if in := mk.get(next.ID); in.State != cloud.Pending {
		t.Fatalf("relaunch %s while the GPUs are taken", in.State)
	}
	mk.move("od", cloud.Starting)
	mk.move("od", cloud.Running)
	mk.move("od", cloud.Terminating)
	mk.move("od", cloud.Terminated)
	mk.step()
	if in := mk.get(next.ID); in.State != cloud.Scheduled {
		t.Fatalf("relaunch %s once capacity returned: %s", in.State, in.Reason)
	}
	mk.step()
	if r := mk.request("p"); r.State != cloud.SpotActive {
		t.Fatalf("request %s with its instance placed", r.State)
	}
}

func TestStopBehaviourRestartsTheSameInstance(t *testing.T) {
	mk := newMarket(t)
	in := mk.spotRequest("s", cloud.SpotPersistent, cloud.ActionStop, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.2x")
	mk.step()
	if it := mk.get(in.ID).Interruption; it == nil || it.Action != cloud.ActionStop {
		t.Fatalf("notice %+v, want stop", it)
	}
	mk.clock.Advance(DefaultNotice)
	mk.step()
	if got := mk.get(in.ID); got.State != cloud.Stopping {
		t.Fatalf("%s at the deadline, want stopping", got.State)
	}
	mk.move(in.ID, cloud.Stopped)
	mk.step()
	got := mk.get(in.ID)
	if got.State != cloud.Pending || got.Interruption != nil {
		t.Fatalf("stopped spot instance of a persistent request: %s %+v", got.State, got.Interruption)
	}
	if r := mk.request("s"); r.Launches != 1 || r.InstanceID != in.ID {
		t.Fatalf("stop behaviour launched anew: %+v", r)
	}
}

func TestFailedInstanceIsKeptThenRelaunched(t *testing.T) {
	mk := newMarket(t)
	mk.m.KeepFailed = time.Hour
	in := mk.spotRequest("f", cloud.SpotPersistent, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Failed)
	mk.step()
	if r := mk.request("f"); r.Launches != 1 || !strings.Contains(r.Reason, "kept for inspection") {
		t.Fatalf("request right after the failure: %+v", r)
	}
	mk.clock.Advance(time.Hour)
	mk.step()
	if got := mk.get(in.ID); got.State != cloud.Terminated {
		t.Fatalf("failed instance %s after keep time", got.State)
	}
	if r := mk.request("f"); r.Launches != 2 {
		t.Fatalf("no relaunch after the keep time: %+v", r)
	}
}

func TestWorkloadCompletionClosesTheRequest(t *testing.T) {
	mk := newMarket(t)
	in := mk.spotRequest("c", cloud.SpotPersistent, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Running)
	// The workload exits 0: the agent reports it stopped with that reason.
	testkit.Walk(t, mk.st, in.ID, cloud.Stopped, testkit.Via{Reason: cloud.ReasonExitedOK}, mk.clock.Now())
	mk.step()
	if r := mk.request("c"); r.State != cloud.SpotClosed || r.Launches != 1 {
		t.Fatalf("request after its workload completed: %+v", r)
	}
}

func TestSpotPricesClearAndRecord(t *testing.T) {
	mk := newMarket(t)
	mk.m.ClearInterval = time.Second
	mk.step()
	pool := cloud.Pool{Offering: "l40s.1x", Zone: fleet.MockZone}
	od, _ := billing.ListPrice(catalog.Default(), "l40s.1x")
	idle := mk.m.Prices()[pool]
	if idle <= 0 || idle >= od {
		t.Fatalf("idle pool price %s, on-demand %s", idle, od)
	}
	// Fill the host with on-demand work: the price climbs toward the
	// on-demand price, step by step, never past it.
	mk.onDemand("od", "t2", "l40s.2x")
	prev := idle
	for i := 0; i < 40; i++ {
		mk.clock.Advance(time.Second)
		mk.step()
		p := mk.m.Prices()[pool]
		if p < prev || p > od {
			t.Fatalf("step %d: price %s after %s (on-demand %s)", i, p, prev, od)
		}
		prev = p
	}
	if prev <= idle {
		t.Fatalf("a full pool's price %s did not rise above the idle %s", prev, idle)
	}
	var hist []cloud.SpotPrice
	tx(t, mk.st, func(tx cloud.Tx) (err error) {
		hist, err = tx.ListSpotPrices(context.Background(), cloud.SpotPriceFilter{Pools: []cloud.Pool{pool}})
		return
	})
	if len(hist) < 2 || hist[0].Price != idle || hist[len(hist)-1].Price != prev {
		t.Fatalf("history %v: want every change from %s to %s", hist, idle, prev)
	}
	for i := 1; i < len(hist); i++ {
		if hist[i].Price == hist[i-1].Price {
			t.Fatalf("history records an unchanged price: %v", hist[i])
		}
	}
}

func TestMaxPriceReclaimsAndGates(t *testing.T) {
	mk := newMarket(t)
	mk.m.ClearInterval = time.Second
	// A max price of one micro is below any price: the request waits.
	in := mk.spotRequest("cheap", cloud.SpotOneTime, cloud.ActionTerminate, 1)
	mk.step()
	mk.step()
	if got := mk.get(in.ID); got.State != cloud.Pending || !strings.Contains(got.Reason, "above the max price") {
		t.Fatalf("spot below the price: %s %q", got.State, got.Reason)
	}
	// One placed within its max price is reclaimed once the price rises
	// past it.
	pool := cloud.Pool{Offering: "l40s.1x", Zone: fleet.MockZone}
	price := mk.m.Prices()[pool]
	ok := mk.spotRequest("ok", cloud.SpotOneTime, cloud.ActionTerminate, price)
	mk.step()
	mk.move(ok.ID, cloud.Starting)
	mk.move(ok.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.1x")
	for i := 0; i < 20 && mk.get(ok.ID).Interruption == nil; i++ {
		mk.clock.Advance(time.Second)
		mk.step()
	}
	it := mk.get(ok.ID).Interruption
	if it == nil || it.Action == "" {
		t.Fatalf("no reclaim once the price passed the max price: %+v (price %s)", it, mk.m.Prices()[pool])
	}
}

func TestReservationHoldsCapacity(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	// A spot instance holds one GPU when t1 reserves both.
	sp := mk.spotRequest("sp", cloud.SpotOneTime, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(sp.ID, cloud.Starting)
	mk.move(sp.ID, cloud.Running)
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.CreateCommitment(ctx, &cloud.Commitment{ID: "c1", TenantID: "t1", Plan: cloud.PlanReservation,
			Offering: "l40s.1x", Zone: fleet.MockZone, Quantity: 2, Payment: cloud.PaymentNoUpfront,
			HourlyFee: 1, Start: t0, End: t0.Add(24 * time.Hour), CreatedAt: t0})
	})
	mk.step()
	if it := mk.get(sp.ID).Interruption; it == nil || it.Reason != cloud.ReclaimCapacity || !strings.HasPrefix(it.For, placeholderPrefix) {
		t.Fatalf("spot on reserved capacity not reclaimed: %+v", it)
	}
	mk.clock.Advance(DefaultNotice)
	mk.step()
	mk.move(sp.ID, cloud.Terminated)
	mk.step()
	if n := len(mk.s.placeholders); n != 2 {
		t.Fatalf("%d reservations held, want 2", n)
	}
	// Another tenant's on-demand request is refused the reserved GPUs.
	mk.onDemand("other", "t2", "l40s.1x")
	mk.step()
	if in := mk.get("other"); in.State != cloud.Pending {
		t.Fatalf("another tenant took reserved capacity: %s", in.State)
	}
	// The tenant's own instances use it.
	mk.onDemand("mine-1", "t1", "l40s.1x")
	mk.onDemand("mine-2", "t1", "l40s.1x")
	mk.step()
	for _, id := range []string{"mine-1", "mine-2"} {
		if in := mk.get(id); in.State != cloud.Scheduled {
			t.Fatalf("tenant's own %s on its reservation: %s %s", id, in.State, in.Reason)
		}
	}
	if n := len(mk.s.placeholders); n != 0 {
		t.Fatalf("%d placeholders left while the tenant uses its reservation", n)
	}
	// A restart (new scheduler) keeps the reservation.
	mk.move("mine-1", cloud.Terminating)
	mk.move("mine-1", cloud.Terminated)
	s2 := NewScheduler(mk.st, nil)
	s2.Now = mk.clock.Now
	if _, err := s2.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if in := mk.get("other"); in.State != cloud.Pending || len(s2.placeholders) != 1 {
		t.Fatalf("after a restart: other %s, %d placeholders", in.State, len(s2.placeholders))
	}
}

func TestBudgetAlertsOnce(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.PutBudget(ctx, &cloud.Budget{TenantID: "t1", Amount: money.MustParse("1.00"), Thresholds: []int{50, 100}, UpdatedAt: t0})
	})
	// A 500 GiB volume for a month costs $40: both thresholds.
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: "vol-b", TenantID: "t1", Name: "big", SizeGiB: 500, CreatedAt: t0})
	})
	at := t0.Add(24 * time.Hour)
	got, err := service.CheckBudgets(ctx, mk.st, at)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Threshold != 50 || got[1].Threshold != 100 {
		t.Fatalf("alerts %+v, want 50 and 100", got)
	}
	again, err := service.CheckBudgets(ctx, mk.st, at.Add(time.Hour))
	if err != nil || len(again) != 0 {
		t.Fatalf("alerts repeated: %+v %v", again, err)
	}
}

func TestRebalanceRecommendedWhenRiskRises(t *testing.T) {
	mk := newMarket(t)
	mk.m.ClearInterval = time.Second
	in := mk.spotRequest("r", cloud.SpotOneTime, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Running)
	mk.step()
	if it := mk.get(in.ID).Interruption; it != nil {
		t.Fatalf("notice with no on-demand demand: %+v", it)
	}
	// On-demand demand for the last free GPU: the pool's risk is full,
	// and the spot instance hears it before any reclaim.
	mk.onDemand("od", "t2", "l40s.1x")
	mk.clock.Advance(time.Second)
	mk.step()
	it := mk.get(in.ID).Interruption
	if it == nil || it.Action != "" || it.Reason != cloud.ReclaimRebalance || !it.NoticedAt.Equal(mk.clock.Now()) {
		t.Fatalf("rebalance recommendation %+v", it)
	}
	if od := mk.get("od"); od.State != cloud.Scheduled {
		t.Fatalf("on-demand %s: the free GPU was there", od.State)
	}
	if got := mk.get(in.ID); got.State != cloud.Running {
		t.Fatalf("a recommendation stopped the instance: %s", got.State)
	}
}

func TestPendingLaunchMovesToABackupPool(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	h := fleet.MockNVLinkHost("h100-a", "H100-80GB-SXM", 8)
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.PutHost(ctx, &cloud.Host{ID: h.ID, State: fleet.Schedulable, Spec: *h, LastHeartbeat: t0})
	})
	mk.onDemand("od", "t2", "l40s.2x")
	mk.clock.Advance(time.Second)
	mk.step()
	mk.step()
	var first *cloud.Instance
	tx(t, mk.st, func(tx cloud.Tx) error {
		r := &cloud.SpotRequest{ID: "b", TenantID: "t1", Type: cloud.SpotPersistent, Interruption: cloud.ActionTerminate,
			Pools:   []cloud.Pool{{Offering: "l40s.1x", Zone: fleet.MockZone}, {Offering: "h100.1x"}},
			Command: []string{"train"}, State: cloud.SpotOpen, CreatedAt: t0, UpdatedAt: t0}
		if err := tx.CreateSpotRequest(ctx, r); err != nil {
			return err
		}
		var err error
		first, err = service.LaunchSpot(ctx, tx, catalog.Default(), r, r.Pools[0], "test", t0)
		return err
	})
	for i := 0; i < 4; i++ {
		mk.clock.Advance(time.Second)
		mk.step()
	}
	if got := mk.get(first.ID); got.State != cloud.Terminated || !strings.Contains(got.Reason, "backup pool h100.1x/") {
		t.Fatalf("launch in the full primary pool: %s %q", got.State, got.Reason)
	}
	r := mk.request("b")
	next := mk.get(r.InstanceID)
	if r.Launches != 2 || next.Offering != "h100.1x" || next.State != cloud.Scheduled {
		t.Fatalf("request %+v, launch %s %s", r, next.Offering, next.State)
	}
}

// TestRelaunchRefusedForQuota: a relaunch the instance service refuses
// for the tenant's quota does not fail the market's round: the request
// stays open with the refusal as its reason (one event, not one per
// round), the failed instance is terminated, and the relaunch happens once
// the quota allows it.
func TestRelaunchRefusedForQuota(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	mk.m.KeepFailed = time.Minute
	first := mk.spotRequest("q", cloud.SpotPersistent, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(first.ID, cloud.Starting)
	mk.move(first.ID, cloud.Failed)
	// Another instance of the tenant takes the one instance its quota
	// allows.
	mk.onDemand("other", "t1", "l40s.2x")
	tx(t, mk.st, func(tx cloud.Tx) error { return tx.PutQuota(ctx, &cloud.Quota{TenantID: "t1", Instances: 1}) })
	mk.clock.Advance(time.Hour)
	mk.step() // fails the test if the round fails
	if got := mk.get(first.ID); got.State != cloud.Terminated {
		t.Fatalf("failed instance %s, want terminated", got.State)
	}
	r := mk.request("q")
	if r.State != cloud.SpotOpen || r.Launches != 1 || !strings.HasPrefix(r.Reason, reasonRefused) || !strings.Contains(r.Reason, "quota") {
		t.Fatalf("request after a refused relaunch: %s %d %q", r.State, r.Launches, r.Reason)
	}
	refusals := events(t, mk.st, cloud.EventSpotRequest)
	for i := 0; i < 3; i++ {
		mk.clock.Advance(time.Second)
		mk.step()
	}
	if n := events(t, mk.st, cloud.EventSpotRequest); n != refusals {
		t.Fatalf("%d spot request events after three more refused rounds, want %d", n, refusals)
	}
	// The quota frees up: the next round relaunches.
	mk.move("other", cloud.Terminated)
	mk.step()
	r = mk.request("q")
	if r.Launches != 2 || r.InstanceID == first.ID || strings.HasPrefix(r.Reason, reasonRefused) {
		t.Fatalf("request once the quota allows a relaunch: %+v", r)
	}
	if next := mk.get(r.InstanceID); next.SpotRequestID != "q" || next.Market != cloud.MarketSpot {
		t.Fatalf("relaunch %+v", next)
	}
}

// TestRelaunchRefusedForAttachedVolume: a relaunch whose volume the
// tenant attached to another live instance is refused by the volume
// rule; the request stays open with the reason, the market's round does
// not fail (so other requests are still driven), and once the volume is
// free the next round relaunches.
func TestRelaunchRefusedForAttachedVolume(t *testing.T) {
	mk := newMarket(t)
	ctx := context.Background()
	mk.m.KeepFailed = time.Minute
	tx(t, mk.st, func(tx cloud.Tx) error {
		return tx.CreateVolume(ctx, &cloud.Volume{ID: "vol-a", TenantID: "t1", Name: "ckpt", SizeGiB: 10, Zone: fleet.MockZone, CreatedAt: t0})
	})
	first := mk.spotRequest("q", cloud.SpotPersistent, cloud.ActionTerminate, 0, "vol-a")
	mk.step()
	mk.move(first.ID, cloud.Starting)
	mk.move(first.ID, cloud.Failed)
	// The tenant attaches the volume to another instance that runs on.
	mk.onDemand("other", "t1", "l40s.2x")
	tx(t, mk.st, func(tx cloud.Tx) error {
		v, err := tx.GetVolume(ctx, "vol-a")
		if err != nil {
			return err
		}
		v.InstanceID = "other"
		return tx.UpdateVolume(ctx, v)
	})
	mk.clock.Advance(time.Hour)
	mk.step() // fails the test if the round fails
	r := mk.request("q")
	if r.State != cloud.SpotOpen || r.Launches != 1 || !strings.HasPrefix(r.Reason, reasonRefused) || !strings.Contains(r.Reason, "vol-a") {
		t.Fatalf("request after a refused relaunch: %s %d %q", r.State, r.Launches, r.Reason)
	}
	mk.move("other", cloud.Terminated)
	mk.step()
	if r = mk.request("q"); r.Launches != 2 || strings.HasPrefix(r.Reason, reasonRefused) {
		t.Fatalf("request once the volume is free: %+v", r)
	}
}
