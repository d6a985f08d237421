package controller

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
)

// schedulerAsActor is the scheduler as the actor of what it applies.
var schedulerAsActor = service.Controller("scheduler")

// round is one step's decisions as the scheduler makes them: the plan not
// yet applied, and the instances left waiting.
type round struct {
	snap *snapshot
	plan service.SchedulePlan
	// waiting maps each instance that did not fit to its wait. A wait
	// whose reason the plan records gets its version once the plan is
	// applied (settle).
	waiting map[string]wait
	// view is the round's reclaim view (see reclaimView), made when first
	// needed.
	view *reclaimView
}

func newRound(snap *snapshot) *round {
	return &round{snap: snap, waiting: map[string]wait{}}
}

// fail plans to fail a pending instance that can never be placed.
func (r *round) fail(in *cloud.Instance, reason string) {
	r.plan.Failures = append(r.plan.Failures, service.PlannedFailure{Instance: in, Reason: reason})
}

// wait leaves a pending instance waiting, with reason (the engine's
// explanation) as its recorded reason and why as its PendingReasons
// name, until capacity may have been freed (epoch). A reason that differs
// from the recorded one is planned to be written.
func (r *round) wait(in *cloud.Instance, reason, why string, epoch uint64) {
	w := wait{version: in.Version, epoch: epoch, reason: why}
	if in.Reason != reason {
		w.version = 0 // known once applied
		r.plan.Waits = append(r.plan.Waits, service.PlannedWait{Instance: in, Reason: reason})
	}
	r.waiting[in.ID] = w
}

// settle gives the waits of an applied plan their instances' new
// versions (res is nil when the apply failed). An instance whose reason
// was not written (it changed, or the apply failed) does not wait: the
// next step looks at it again.
func (r *round) settle(waits []service.PlannedWait, res *service.ScheduleResult) {
	for _, pw := range waits {
		id := pw.Instance.ID
		var (
			v  int64
			ok bool
		)
		if res != nil {
			v, ok = res.Waiting[id]
		}
		if !ok {
			delete(r.waiting, id)
			continue
		}
		w := r.waiting[id]
		w.version = v
		r.waiting[id] = w
	}
}

// plan decides for one pending instance, into r: a placement chosen by
// the engine and applied to the fleet, a failure for an instance that can
// never be placed, or a wait with the engine's explanation for one that
// does not fit now (after planning a reclaim of spot capacity for an
// on-demand instance). It writes nothing.
func (s *Scheduler) plan(ctx context.Context, r *round, in *cloud.Instance) error {
	o, err := s.Catalog.Offering(in.Offering)
	if err != nil {
		r.fail(in, fmt.Sprintf("offering %q no longer exists", in.Offering))
		return nil
	}
	req, err := RequestFor(in, o)
	if err != nil {
		r.fail(in, err.Error())
		return nil
	}
	if shared, err := s.hasSharedVolume(ctx, in); err != nil {
		return err
	} else if shared {
		req.Labels = append(req.Labels, NeedsSharedVolumes)
	}
	if in.PlacementGroupID != "" {
		if req.Group, err = s.placementGroup(ctx, r.snap, in.PlacementGroupID); err != nil {
			return err
		}
	}
	if in.Market == cloud.MarketSpot {
		if !s.gateSpot(r, in, req) {
			return nil
		}
	} else {
		s.takeReservation(r.snap, in)
	}
	p, err := s.Engine.Place(s.fleet, req)
	if err != nil {
		return s.notPlaced(r, in, req, err)
	}
	p.ID = in.ID
	if err := s.fleet.Apply(p); err != nil {
		// The engine chose from this very fleet, so this is a bug; the
		// instance stays pending and is tried again.
		s.Log.Error("placement does not fit the fleet it was chosen from", "instance", in.ID, "err", err)
		return nil
	}
	h := s.fleet.Host(p.HostID)
	if g := req.Group; g != nil {
		// The group's next member this step sees this one.
		g.Hosts = append(g.Hosts, p.HostID)
		if h != nil {
			g.Racks = append(g.Racks, h.Rack)
		}
	}
	pp := service.PlannedPlacement{Instance: in, Placement: p, HostVersion: s.versions[p.HostID]}
	if h != nil {
		pp.Zone = h.Zone
	}
	r.plan.Placements = append(r.plan.Placements, pp)
	return nil
}

// gateSpot applies what the market said of a pending spot instance to its
// request: the zones within its max price, and the pools' prices for the
// preemption planner. It reports whether the instance may be placed now:
// not when the market has not looked at it yet (its max price is
// unchecked until the market's next round), nor when no zone is within
// its max price (it waits, with the market's reason).
func (s *Scheduler) gateSpot(r *round, in *cloud.Instance, req *placement.Request) bool {
	gate, seen := s.hints.Gates[in.ID]
	if !seen {
		return false
	}
	req.Preemptible = true
	if why := gate.Blocked; why != "" {
		r.wait(in, why, PendingSpotPrice, s.epoch)
		return false
	}
	if gate.Zones != nil {
		req.Zones = gate.Zones
	}
	for _, z := range req.Zones {
		req.PriceMicros = max(req.PriceMicros, int64(s.hints.Prices[cloud.Pool{Offering: in.Offering, Zone: z}]))
	}
	return true
}

// notPlaced plans what follows the engine's refusal err to place in: a
// failure for a request that can never be valid; for one that does not
// fit now a wait, after a reclaim of spot capacity for an on-demand
// instance. Any other error is returned.
func (s *Scheduler) notPlaced(r *round, in *cloud.Instance, req *placement.Request, err error) error {
	if placement.IsInvalidRequest(err) {
		r.fail(in, err.Error())
		return nil
	}
	if !placement.IsInsufficientCapacity(err) {
		return err
	}
	reason := err.Error()
	if in.Market != cloud.MarketSpot {
		ok, rerr := s.reclaim(r, in.ID, req)
		if rerr != nil {
			return rerr
		}
		if ok {
			reason += "; reclaiming spot capacity for it"
		}
	}
	r.wait(in, reason, pendingReason(req, err), s.epoch)
	return nil
}

// apply hands the plan r holds to service.ApplySchedule, which writes it
// in one transaction, and starts r's next plan. Placements that were
// written stay in the fleet; one whose instance changed meanwhile is
// given back to it. A host that changed fails every placement: they are
// given back and the fleet rebuilt. A plan that keeps losing
// serialization races is given back too, for the next step to try again,
// with no rebuild: the fleet is still right. It returns how many
// instances it placed.
func (s *Scheduler) apply(ctx context.Context, r *round) (int, error) {
	plan := r.plan
	r.plan = service.SchedulePlan{}
	if plan.Empty() {
		return 0, nil
	}
	res, err := service.ApplySchedule(ctx, s.Store, schedulerAsActor, &plan, s.Now())
	r.settle(plan.Waits, res)
	if err != nil {
		s.giveBack(plan.Placements)
		if cloud.IsConflict(err) {
			s.Log.Info("placements lost serialization races; retrying on the next step", "placements", len(plan.Placements), "err", err)
			return 0, nil
		}
		return 0, err
	}
	if res.Noticed > 0 && s.Reclaimed != nil {
		s.Reclaimed(cloud.ReclaimCapacity, res.Noticed)
	}
	if res.HostChanged != nil {
		// Someone else changed a host: re-read the fleet; the instances
		// are tried again on the next step.
		s.giveBack(plan.Placements)
		s.Log.Info("placements lost a race for a host; rebuilding", "placements", len(plan.Placements), "err", res.HostChanged)
		return 0, s.Rebuild(ctx)
	}
	placed := 0
	for i, p := range plan.Placements {
		in := p.Instance
		if res.Stale[in.ID] {
			s.Log.Info("instance changed while being placed", "instance", in.ID)
			s.giveBack(plan.Placements[i : i+1])
			continue
		}
		s.placed[in.ID] = true
		if in.Market == cloud.MarketSpot {
			s.pools[in.ID] = cloud.Pool{Offering: in.Offering, Zone: p.Zone}
		}
		placed++
	}
	for id, v := range res.Hosts {
		s.versions[id] = v
		s.stamp.VersionSum++
	}
	return placed, nil
}

// giveBack releases unapplied placements from the fleet.
func (s *Scheduler) giveBack(ps []service.PlannedPlacement) {
	for _, p := range ps {
		if err := s.fleet.Release(p.Instance.ID); err != nil {
			s.Log.Error("give back an uncommitted placement", "instance", p.Instance.ID, "err", err)
		}
	}
	if len(ps) > 0 {
		s.epoch++
	}
}

// placementGroup is the placement.Group of placement group id for this
// step: its strategy, and the hosts and racks where its members hold
// capacity. The members this step places are added as it goes (plan), so
// that a cluster's second member follows its first before either commits.
// A group that no longer exists places its instance without a group. It
// reads the group from the store when the snapshot does not hold it yet.
// hasSharedVolume reports whether instance in names a shared volume,
// which only hosts with the shared filesystem can mount. A volume that is
// gone counts as not shared: the agent reports it missing.
func (s *Scheduler) hasSharedVolume(ctx context.Context, in *cloud.Instance) (bool, error) {
	if len(in.Volumes) == 0 {
		return false, nil
	}
	shared := false
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		shared = false
		for _, id := range in.Volumes {
			v, err := tx.GetVolume(ctx, id)
			if cloud.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			shared = shared || v.Shared()
		}
		return nil
	})
	return shared, err
}

func (s *Scheduler) placementGroup(ctx context.Context, snap *snapshot, id string) (*placement.Group, error) {
	if g, ok := snap.placementGroups[id]; ok {
		return g, nil
	}
	if snap.placementGroups == nil {
		snap.placementGroups = map[string]*placement.Group{}
	}
	var g *placement.Group
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		g = nil
		pg, err := tx.GetPlacementGroup(ctx, id)
		if cloud.ErrorCode(err) == cloud.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		members, err := tx.ListInstances(ctx, cloud.InstanceFilter{PlacementGroupID: id, States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		g = &placement.Group{Name: pg.Name, Strategy: placement.Strategy(pg.Strategy), ByRack: pg.ByRack}
		for _, m := range members {
			if m.HostID == "" {
				continue
			}
			g.Hosts = append(g.Hosts, m.HostID)
			if h := s.fleet.Host(m.HostID); h != nil {
				g.Racks = append(g.Racks, h.Rack)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	snap.placementGroups[id] = g
	return g, nil
}
