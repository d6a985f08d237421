package controller

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
)

// planWorld is what a plan test starts from, with no store: the hosts of
// the fleet (each at version 3), the spot instances that hold capacity in
// it, the snapshot's pending instances, spot instances under notice and
// commitments, and what the market told the scheduler.
type planWorld struct {
	hosts       []*fleet.Host
	running     []*cloud.Instance
	pending     []*cloud.Instance
	noticed     []*cloud.Instance
	commitments []*cloud.Commitment
	groups      map[string]*placement.Group
	gates       map[string]SpotGate
	poolNotice  map[string]time.Duration
}

// planScheduler is a scheduler over w's fleet with no store behind it.
func planScheduler(t *testing.T, w planWorld) (*Scheduler, *snapshot) {
	t.Helper()
	s := NewScheduler(nil, nil)
	s.Now = func() time.Time { return t0 }
	s.Log = slog.New(slog.DiscardHandler)
	s.PoolNotice = w.poolNotice
	s.fleet, s.placed, s.pools, s.versions = fleet.New(), map[string]bool{}, map[string]cloud.Pool{}, map[string]int64{}
	for _, h := range w.hosts {
		if err := s.fleet.AddHost(h, s.Catalog); err != nil {
			t.Fatal(err)
		}
		s.versions[h.ID] = 3
	}
	for _, in := range w.running {
		o, err := s.Catalog.Offering(in.Offering)
		if err != nil {
			t.Fatal(err)
		}
		req, err := RequestFor(in, o)
		if err != nil {
			t.Fatal(err)
		}
		req.Preemptible = in.Market == cloud.MarketSpot
		p, err := s.Engine.Place(s.fleet, req)
		if err != nil {
			t.Fatal(err)
		}
		p.ID = in.ID
		if err := s.fleet.Apply(p); err != nil {
			t.Fatal(err)
		}
		s.placed[in.ID] = true
		s.pools[in.ID] = cloud.Pool{Offering: in.Offering, Zone: s.fleet.Host(p.HostID).Zone}
	}
	s.hints = SpotHints{Gates: w.gates}
	snap := &snapshot{pending: w.pending, spot: w.noticed, commitments: w.commitments,
		tenantHolding: map[string][]*cloud.Instance{}, placementGroups: w.groups}
	return s, snap
}

// summary writes a plan as one line per decision, in a fixed order.
func summary(p *service.SchedulePlan, waiting map[string]wait) []string {
	var out []string
	for _, x := range p.Placements {
		out = append(out, fmt.Sprintf("place %s on %s in %s at host version %d", x.Instance.ID, x.Placement.HostID, x.Zone, x.HostVersion))
	}
	for _, x := range p.Failures {
		out = append(out, fmt.Sprintf("fail %s: %s", x.Instance.ID, x.Reason))
	}
	for _, x := range p.Waits {
		line := fmt.Sprintf("wait %s (%s)", x.Instance.ID, waiting[x.Instance.ID].reason)
		if strings.HasSuffix(x.Reason, "; reclaiming spot capacity for it") {
			line += " reclaiming"
		}
		out = append(out, line)
	}
	for _, x := range p.Notices {
		out = append(out, fmt.Sprintf("notice %s for %s (%s) in %s", x.InstanceID, x.For, x.Why, x.Notice))
	}
	for _, id := range p.Deadlines {
		out = append(out, "deadline "+id)
	}
	for _, x := range p.Shortfalls {
		out = append(out, fmt.Sprintf("shortfall %s: %d", x.Commitment.ID, x.Missing))
	}
	return out
}

func pendingIn(id, offering string, at int) *cloud.Instance {
	when := t0.Add(time.Duration(at) * time.Second)
	return &cloud.Instance{ID: id, TenantID: "t1", Offering: offering, State: cloud.Pending, Market: cloud.MarketOnDemand,
		Version: 1, CreatedAt: when, UpdatedAt: when}
}

func spotIn(id, offering string, at int) *cloud.Instance {
	in := pendingIn(id, offering, at)
	in.Market = cloud.MarketSpot
	return in
}

func noticedIn(id string, deadline time.Time, reason string) *cloud.Instance {
	in := spotIn(id, "l40s.1x", 0)
	in.State = cloud.Running
	in.Interruption = &cloud.Interruption{Action: cloud.ActionTerminate, Reason: reason, Deadline: deadline}
	return in
}

// TestSchedulerPlans feeds snapshots to the scheduler's planning, with no
// store, and checks the plan it returns: placements with the host
// versions read, failures, waits with their reasons, reclaim notices with
// the pool's notice, deadlines and commitment shortfalls.
func TestSchedulerPlans(t *testing.T) {
	h100 := func() *fleet.Host { return fleet.MockNVLinkHost("h100-a", "H100-80GB-SXM", 8) }
	l40s := func() *fleet.Host { return fleet.MockHost("l40s-a", "L40S", 2) }
	labelled := pendingIn("bad-label", "l40s.1x", 1)
	labelled.Labels = []string{"driver>="}
	explained := pendingIn("explained", "h100.1x", 0)
	explained.Reason = "0/1 hosts available: 1 wrong GPU model"
	grouped := func(id string, at int) *cloud.Instance {
		in := pendingIn(id, "h100.1x", at)
		in.PlacementGroupID = "pg-1"
		return in
	}
	for _, c := range []struct {
		name string
		w    planWorld
		want []string
	}{{
		name: "places oldest first, on-demand before spot",
		w: planWorld{hosts: []*fleet.Host{h100(), l40s()},
			pending: []*cloud.Instance{spotIn("spot", "l40s.1x", 0), pendingIn("late", "l40s.1x", 2), pendingIn("early", "h100.2x", 1)},
			gates:   map[string]SpotGate{"spot": {}}},
		want: []string{"place early on h100-a in zone-a at host version 3", "place late on l40s-a in zone-a at host version 3",
			"place spot on l40s-a in zone-a at host version 3"},
	}, {
		name: "fails what can never be placed",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			pending: []*cloud.Instance{pendingIn("gone", "no-such-offering", 0), labelled}},
		want: []string{`fail gone: offering "no-such-offering" no longer exists`,
			"fail bad-label: invalid_argument: instance bad-label: " + labelError(t, "driver>=")},
	}, {
		name: "a new reason is written, an unchanged one is not",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			pending: []*cloud.Instance{explained, pendingIn("big", "h100.2x", 1)}},
		want: []string{"wait big (gpu_model)"},
	}, {
		name: "spot waits for the market, and for its price",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			pending: []*cloud.Instance{spotIn("unseen", "l40s.1x", 0), spotIn("dear", "l40s.1x", 1)},
			gates:   map[string]SpotGate{"dear": {Blocked: "spot price above max price"}}},
		want: []string{"wait dear (spot_price)"},
	}, {
		name: "on-demand reclaims spot capacity with the pool's notice",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			running:    []*cloud.Instance{spotIn("victim", "l40s.2x", 0)},
			pending:    []*cloud.Instance{pendingIn("od", "l40s.1x", 1), pendingIn("od2", "l40s.1x", 2)},
			poolNotice: map[string]time.Duration{"l40s.2x": 45 * time.Second}},
		want: []string{"wait od (gpus) reclaiming", "wait od2 (gpus) reclaiming", "notice victim for od (capacity needed by od) in 45s"},
	}, {
		name: "deadlines passed, not yet, and the groups' own",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			noticed: []*cloud.Instance{noticedIn("due", t0, cloud.ReclaimCapacity), noticedIn("later", t0.Add(time.Second), cloud.ReclaimCapacity),
				noticedIn("member", t0.Add(-time.Minute), cloud.ReclaimScaleIn)}},
		want: []string{"deadline due"},
	}, {
		name: "a commitment that cannot be held reclaims, then falls short",
		w: planWorld{hosts: []*fleet.Host{l40s()},
			running: []*cloud.Instance{spotIn("victim", "l40s.1x", 0)},
			commitments: []*cloud.Commitment{{ID: "c1", TenantID: "t1", Plan: cloud.PlanReservation, Offering: "l40s.1x",
				Zone: fleet.MockZone, Quantity: 3, Start: t0.Add(-time.Hour), End: t0.Add(time.Hour)}}},
		want: []string{"notice victim for placeholder/c1/1 (reserved capacity needed) in 2m0s", "shortfall c1: 1"},
	}, {
		name: "a cluster group's members follow its first",
		w: planWorld{hosts: []*fleet.Host{h100(), fleet.MockNVLinkHost("h100-b", "H100-80GB-SXM", 8)},
			pending: []*cloud.Instance{grouped("m1", 0), grouped("m2", 1)},
			groups:  map[string]*placement.Group{"pg-1": {Name: "pg", Strategy: placement.Cluster, Hosts: []string{"h100-b"}}}},
		want: []string{"place m1 on h100-b in zone-a at host version 3", "place m2 on h100-b in zone-a at host version 3"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			s, snap := planScheduler(t, c.w)
			r := newRound(snap)
			if err := s.decide(context.Background(), r, nil); err != nil {
				t.Fatal(err)
			}
			if got := summary(&r.plan, r.waiting); !slices.Equal(got, c.want) {
				t.Fatalf("plan:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(c.want, "\n  "))
			}
			if err := s.fleet.Check(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// labelError is the error the placement engine gives a label selector.
func labelError(t *testing.T, sel string) string {
	_, err := placement.ParseLabelSelector(sel)
	if err == nil {
		t.Fatalf("%q parses", sel)
	}
	return err.Error()
}

// TestSchedulerPlanWaitsSettle: a step that found nothing changed asks the
// engine nothing and plans nothing; the waits of an applied plan get the
// versions the apply wrote, and a wait whose reason was not written is
// dropped, to be looked at again.
func TestSchedulerPlanWaitsSettle(t *testing.T) {
	for _, c := range []struct {
		name    string
		res     *service.ScheduleResult
		waiting map[string]int64
	}{
		{"written", &service.ScheduleResult{Waiting: map[string]int64{"a": 5, "b": 7}}, map[string]int64{"a": 5, "b": 7}},
		{"one changed", &service.ScheduleResult{Waiting: map[string]int64{"b": 7}, Stale: map[string]bool{"a": true}}, map[string]int64{"b": 7}},
		{"apply failed", nil, map[string]int64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := planWorld{hosts: []*fleet.Host{fleet.MockHost("l40s-a", "L40S", 2)},
				pending: []*cloud.Instance{pendingIn("a", "h100.1x", 0), pendingIn("b", "h100.2x", 1)}}
			s, snap := planScheduler(t, w)
			r := newRound(snap)
			if err := s.decide(context.Background(), r, nil); err != nil {
				t.Fatal(err)
			}
			if len(r.plan.Waits) != 2 {
				t.Fatalf("%d waits planned, want 2", len(r.plan.Waits))
			}
			r.settle(r.plan.Waits, c.res)
			got := map[string]int64{}
			for id, w := range r.waiting {
				got[id] = w.version
			}
			if fmt.Sprint(got) != fmt.Sprint(c.waiting) {
				t.Fatalf("waiting %v, want %v", got, c.waiting)
			}
			// The next step, with the instances at the versions written,
			// skips them without asking the engine.
			s.waiting = r.waiting
			for _, in := range snap.pending {
				in.Version = c.waiting[in.ID]
			}
			asked := s.steps
			next := newRound(snap)
			if err := s.decide(context.Background(), next, nil); err != nil {
				t.Fatal(err)
			}
			if want := 2 - len(c.waiting); s.steps-asked != want || len(next.plan.Waits) != want {
				t.Fatalf("next step asked the engine %d times and planned %d waits, want %d", s.steps-asked, len(next.plan.Waits), want)
			}
		})
	}
}

// TestCapacityReclaimUsesThePoolNotice: a capacity reclaim gives its
// victim the notice of the victim's pool, whether this scheduler placed
// the victim or found it in the store on a rebuild.
func TestCapacityReclaimUsesThePoolNotice(t *testing.T) {
	for _, c := range []struct {
		name    string
		rebuilt bool
	}{{"placed by this scheduler", false}, {"found by a rebuild", true}} {
		t.Run(c.name, func(t *testing.T) {
			st := newStore(t)
			seed(t, st)
			tx(t, st, func(tx cloud.Tx) error {
				return tx.CreateInstance(context.Background(), &cloud.Instance{ID: "sp", TenantID: "t1", Offering: "l40s.2x",
					Market: cloud.MarketSpot, State: cloud.Pending, CreatedAt: t0, UpdatedAt: t0})
			})
			s := newScheduler(st)
			s.PoolNotice = map[string]time.Duration{"l40s.2x/" + fleet.MockZone: 45 * time.Second}
			s.SetSpotHints(SpotHints{Gates: map[string]SpotGate{"sp": {}}})
			if n, err := s.Step(context.Background()); err != nil || n != 1 {
				t.Fatalf("placed %d, err %v", n, err)
			}
			if c.rebuilt {
				pools := s.PoolNotice
				s = newScheduler(st)
				s.PoolNotice = pools
			}
			create(t, st, "od", "l40s.1x", t0.Add(time.Second))
			if _, err := s.Step(context.Background()); err != nil {
				t.Fatal(err)
			}
			if it := get(t, st, "sp").Interruption; it == nil || it.For != "od" || !it.Deadline.Equal(t0.Add(45*time.Second)) {
				t.Fatalf("notice %+v, want one for od with a deadline 45s on", it)
			}
		})
	}
}
