package controller

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// hooks records what the metrics' hooks of a scheduler and a market hear.
type hooks struct {
	reclaims   map[string]int
	relaunches int
	clearings  int
}

func (mk *market) hook() *hooks {
	h := &hooks{reclaims: map[string]int{}}
	reclaimed := func(reason string, n int) {
		if n <= 0 {
			mk.t.Errorf("hook called with %d %s reclaims", n, reason)
		}
		h.reclaims[reason] += n
	}
	mk.s.Reclaimed, mk.m.Reclaimed = reclaimed, reclaimed
	mk.m.Relaunched = func(n int) { h.relaunches += n }
	mk.m.Cleared = func(took time.Duration) {
		if took < 0 {
			mk.t.Errorf("a clearing took %s", took)
		}
		h.clearings++
	}
	return h
}

// TestHooksCountCapacityReclaimsAndRelaunches: a capacity reclaim is
// counted once, when its notice is written (not on the steps that follow),
// and the persistent request's next instance once it is launched.
func TestHooksCountCapacityReclaimsAndRelaunches(t *testing.T) {
	mk := newMarket(t)
	h := mk.hook()
	first := mk.spotRequest("p", cloud.SpotPersistent, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(first.ID, cloud.Starting)
	mk.move(first.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.2x")
	mk.step()
	mk.step()
	if want := map[string]int{cloud.ReclaimCapacity: 1}; !maps.Equal(h.reclaims, want) {
		t.Fatalf("reclaims %v, want %v", h.reclaims, want)
	}
	if h.relaunches != 0 {
		t.Fatalf("%d relaunches before the reclaim", h.relaunches)
	}
	mk.clock.Advance(DefaultNotice)
	mk.step()
	if h.clearings == 0 {
		t.Error("no clearing counted after the clearing interval")
	}
	mk.move(first.ID, cloud.Terminated)
	mk.step()
	mk.step()
	if r := mk.request("p"); r.Launches != 2 || h.relaunches != 1 {
		t.Fatalf("%d launches, %d relaunches counted; want 2 and 1", r.Launches, h.relaunches)
	}
}

// TestHooksCountStopRestarts: the stop behaviour's restart of the same
// instance counts as a relaunch.
func TestHooksCountStopRestarts(t *testing.T) {
	mk := newMarket(t)
	h := mk.hook()
	in := mk.spotRequest("s", cloud.SpotPersistent, cloud.ActionStop, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.2x")
	mk.step()
	mk.clock.Advance(DefaultNotice)
	mk.step()
	mk.move(in.ID, cloud.Stopped)
	mk.step()
	if got := mk.get(in.ID); got.State != cloud.Pending || h.relaunches != 1 {
		t.Fatalf("%s with %d relaunches counted", got.State, h.relaunches)
	}
}

// TestHooksCountPriceReclaimsAndRebalances: the market counts its price
// reclaims and its rebalance recommendations, each under its reason.
func TestHooksCountPriceReclaimsAndRebalances(t *testing.T) {
	mk := newMarket(t)
	mk.m.ClearInterval = time.Second
	h := mk.hook()
	// A launch whose max price is below any price adds demand.
	mk.spotRequest("cheap", cloud.SpotOneTime, cloud.ActionTerminate, 1)
	mk.step()
	pool := cloud.Pool{Offering: "l40s.1x", Zone: fleet.MockZone}
	ok := mk.spotRequest("ok", cloud.SpotOneTime, cloud.ActionTerminate, mk.m.Prices()[pool])
	mk.step()
	mk.move(ok.ID, cloud.Starting)
	mk.move(ok.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.1x")
	for i := 0; i < 20 && (mk.get(ok.ID).Interruption == nil || mk.get(ok.ID).Interruption.Action == ""); i++ {
		mk.clock.Advance(time.Second)
		mk.step()
	}
	if it := mk.get(ok.ID).Interruption; it == nil || it.Reason != cloud.ReclaimPrice {
		t.Fatalf("no price reclaim: %+v", it)
	}
	if h.reclaims[cloud.ReclaimPrice] != 1 || h.reclaims[cloud.ReclaimCapacity] != 0 {
		t.Fatalf("reclaims %v, want one price reclaim", h.reclaims)
	}
	if h.clearings < 2 {
		t.Errorf("%d clearings counted over several clearing intervals", h.clearings)
	}

	// On-demand demand for the last free GPU: a rebalance recommendation.
	mk = newMarket(t)
	mk.m.ClearInterval = time.Second
	h = mk.hook()
	in := mk.spotRequest("r", cloud.SpotOneTime, cloud.ActionTerminate, 0)
	mk.step()
	mk.move(in.ID, cloud.Starting)
	mk.move(in.ID, cloud.Running)
	mk.onDemand("od", "t2", "l40s.1x")
	mk.clock.Advance(time.Second)
	mk.step()
	mk.clock.Advance(time.Second)
	mk.step()
	if it := mk.get(in.ID).Interruption; it == nil || it.Reason != cloud.ReclaimRebalance {
		t.Fatalf("no rebalance recommendation: %+v", it)
	}
	if want := map[string]int{cloud.ReclaimRebalance: 1}; !maps.Equal(h.reclaims, want) {
		t.Fatalf("reclaims %v, want %v", h.reclaims, want)
	}
}

// TestPendingByReason: the scheduler publishes why the instances it could
// not place wait, one reason each, from the bounded set.
func TestPendingByReason(t *testing.T) {
	mk := newMarket(t)
	if got := mk.s.PendingByReason(); len(got) != 0 {
		t.Fatalf("pending %v with nothing pending", got)
	}
	mk.onDemand("fits", "t1", "l40s.2x")
	mk.onDemand("model", "t1", "h100.1x")
	mk.onDemand("gpus", "t2", "l40s.1x")
	mk.spotRequest("cheap", cloud.SpotOneTime, cloud.ActionTerminate, 1)
	mk.step()
	mk.step()
	want := map[string]int{PendingModel: 1, PendingGPUs: 1, PendingSpotPrice: 1}
	if got := mk.s.PendingByReason(); !maps.Equal(got, want) {
		t.Fatalf("pending by reason %v, want %v", got, want)
	}
	// The map is the caller's.
	mk.s.PendingByReason()[PendingModel] = 7
	if got := mk.s.PendingByReason(); got[PendingModel] != 1 {
		t.Fatalf("a caller changed the published summary: %v", got)
	}
	for r := range mk.s.PendingByReason() {
		if !contains(PendingReasons(), r) {
			t.Errorf("reason %q is not in PendingReasons", r)
		}
	}
	// Capacity comes back: the GPU instance is placed, the others wait.
	mk.move("fits", cloud.Terminated)
	mk.step()
	want = map[string]int{PendingModel: 1, PendingSpotPrice: 1}
	if got := mk.s.PendingByReason(); !maps.Equal(got, want) {
		t.Fatalf("after capacity returned: %v, want %v", got, want)
	}
}

// TestPendingReasonCoversTheEngine: every reason the placement engine has
// maps to a reason of its own (a reason added to the engine fails here
// until it is named), and the hosts that came closest decide.
func TestPendingReasonCoversTheEngine(t *testing.T) {
	req := &placement.Request{ID: "x", GPUs: 2, MIGProfile: "3g.40gb", ShareMilli: 500, ShareMemoryMiB: 1024,
		Group: &placement.Group{Name: "g", Strategy: placement.Cluster}}
	seen := map[string]bool{}
	for r := placement.Reason(1); r < 64 && r.Describe(req) != "unknown"; r++ {
		name, ok := pendingOf[r]
		if !ok {
			t.Errorf("engine reason %d (%q) has no pending reason", r, r.Describe(req))
			continue
		}
		if seen[name] {
			t.Errorf("pending reason %q is used twice", name)
		}
		seen[name] = true
		err := &placement.InsufficientCapacityError{Hosts: 10, Reasons: map[string]int{r.Describe(req): 10}}
		if got := pendingReason(req, err); got != name {
			t.Errorf("reason %q: %q, want %q", r.Describe(req), got, name)
		}
	}
	if len(seen) != len(pendingOf) {
		t.Errorf("%d engine reasons seen, %d named", len(seen), len(pendingOf))
	}
	mixed := &placement.InsufficientCapacityError{Hosts: 1000, Reasons: map[string]int{
		placement.ReasonModel.Describe(req): 900, placement.ReasonGPUs.Describe(req): 100}}
	if got := pendingReason(req, mixed); got != PendingGPUs {
		t.Errorf("900 wrong model, 100 without GPUs: %q, want %q", got, PendingGPUs)
	}
	for name, err := range map[string]error{
		PendingNoHosts: &placement.InsufficientCapacityError{},
		PendingOther:   &placement.InsufficientCapacityError{Hosts: 1, Reasons: map[string]int{"a reason from the future": 1}},
	} {
		if got := pendingReason(req, err); got != name {
			t.Errorf("%v: %q, want %q", err, got, name)
		}
	}
	if got := pendingReason(req, context.Canceled); got != PendingOther {
		t.Errorf("not a capacity error: %q", got)
	}
}
