package controller

import (
	"context"
	"fmt"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
)

// assignment is a placement chosen for a pending instance and applied to
// the fleet, not committed yet.
type assignment struct {
	in *cloud.Instance
	p  *fleet.Placement
}

// plan asks the engine for a placement of a pending instance and applies
// it to the fleet. An instance that can never be placed is failed; one that
// does not fit now gets the engine's explanation as its reason, and plan
// returns when to look at it again.
func (s *Scheduler) plan(ctx context.Context, snap *snapshot, in *cloud.Instance) (*assignment, *wait, error) {
	o, err := s.Catalog.Offering(in.Offering)
	if err != nil {
		return nil, nil, s.fail(ctx, in, fmt.Sprintf("offering %q no longer exists", in.Offering))
	}
	req, err := RequestFor(in, o)
	if err != nil {
		return nil, nil, s.fail(ctx, in, err.Error())
	}
	if in.PlacementGroupID != "" {
		if req.Group, err = s.placementGroup(ctx, snap, in.PlacementGroupID); err != nil {
			return nil, nil, err
		}
	}
	spot := in.Market == cloud.MarketSpot
	if spot {
		gate, seen := s.hints.Gates[in.ID]
		if !seen {
			// The market has not looked at this instance yet, so its max
			// price is unchecked: it waits for the market's next round.
			return nil, nil, nil
		}
		req.Preemptible = true
		if why := gate.Blocked; why != "" {
			v, err := s.unschedulable(ctx, in, why)
			if err != nil || v == 0 {
				return nil, nil, err
			}
			return nil, &wait{version: v, epoch: s.epoch, reason: PendingSpotPrice}, nil
		}
		if gate.Zones != nil {
			req.Zones = gate.Zones
		}
		for _, z := range req.Zones {
			req.PriceMicros = max(req.PriceMicros, int64(s.hints.Prices[cloud.Pool{Offering: in.Offering, Zone: z}]))
		}
	} else {
		s.takeReservation(snap, in)
	}
	p, err := s.Engine.Place(s.fleet, req)
	if err != nil {
		if placement.IsInvalidRequest(err) {
			return nil, nil, s.fail(ctx, in, err.Error())
		}
		if placement.IsInsufficientCapacity(err) {
			reason := err.Error()
			if !spot {
				ok, rerr := s.reclaim(ctx, snap, in.ID, req)
				if rerr != nil {
					return nil, nil, rerr
				}
				if ok {
					reason += "; reclaiming spot capacity for it"
				}
			}
			v, uerr := s.unschedulable(ctx, in, reason)
			if uerr != nil || v == 0 {
				return nil, nil, uerr
			}
			return nil, &wait{version: v, epoch: s.epoch, reason: pendingReason(req, err)}, nil
		}
		return nil, nil, err
	}
	p.ID = in.ID
	if err := s.fleet.Apply(p); err != nil {
		// The engine chose from this very fleet, so this is a bug; the
		// instance stays pending and is tried again.
		s.Log.Error("placement does not fit the fleet it was chosen from", "instance", in.ID, "err", err)
		return nil, nil, nil
	}
	if g := req.Group; g != nil {
		// The group's next member this step sees this one.
		g.Hosts = append(g.Hosts, p.HostID)
		if h := s.fleet.Host(p.HostID); h != nil {
			g.Racks = append(g.Racks, h.Rack)
		}
	}
	return &assignment{in: in, p: p}, nil, nil
}

// commit writes a batch of assignments in one transaction: each instance
// moves to scheduled with its placement (service.MoveInstances, a few
// statements for the whole batch) if its version is still the one read
// (else it is left out, and its placement given back to the fleet), with
// its event, and each host that receives a placement has its version
// bumped from the one the fleet was built from. A host that changed fails
// the batch: every placement is given back and the fleet rebuilt. A batch
// that keeps losing serialization races to concurrent transactions is
// given back too, for the next step to try again, with no rebuild: the
// fleet is still right. It returns how many instances it placed.
func (s *Scheduler) commit(ctx context.Context, batch []assignment) (int, error) {
	if len(batch) == 0 {
		return 0, nil
	}
	now := s.Now()
	var (
		stale   map[string]bool
		bumped  map[string]int64
		hostErr error
	)
	// The function may run more than once (a lost serialization race), so
	// it only sets these variables, from scratch, and leaves the
	// scheduler's state to the code after the commit.
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		stale, bumped, hostErr = map[string]bool{}, map[string]int64{}, nil
		// Copies: MoveInstances updates what it moves, and this function
		// may run again from the instances as read.
		ins := make([]*cloud.Instance, len(batch))
		moves := make([]service.Move, len(batch))
		for i, a := range batch {
			in := *a.in
			ins[i] = &in
			moves[i] = service.Move{To: cloud.Scheduled, Reason: "placed on " + placement.Explain(a.p),
				Actor: schedulerActor, Placement: a.p}
			if h := s.fleet.Host(a.p.HostID); h != nil {
				moves[i].Zone = h.Zone
			}
		}
		// The version check is the state check: each instance was
		// pending at the version read.
		ids, err := service.MoveInstances(ctx, tx, ins, moves, now)
		if err != nil {
			return err
		}
		for _, id := range ids {
			stale[id] = true
		}
		for _, a := range batch {
			if !stale[a.in.ID] {
				bumped[a.p.HostID] = s.versions[a.p.HostID]
			}
		}
		err = tx.BumpHosts(ctx, bumped)
		if cloud.IsConflict(err) || cloud.IsNotFound(err) {
			hostErr = err
		}
		return err
	})
	if err != nil {
		s.giveBack(batch)
		switch {
		case hostErr != nil && err == hostErr:
			// Someone else changed a host: re-read the fleet; the
			// instances are tried again on the next step.
			s.Log.Info("placements lost a race for a host; rebuilding", "placements", len(batch), "err", err)
			return 0, s.Rebuild(ctx)
		case cloud.IsConflict(err):
			s.Log.Info("placements lost serialization races; retrying on the next step", "placements", len(batch), "err", err)
			return 0, nil
		}
		return 0, err
	}
	placed := 0
	for i, a := range batch {
		if stale[a.in.ID] {
			s.Log.Info("instance changed while being placed", "instance", a.in.ID)
			s.giveBack(batch[i : i+1])
			continue
		}
		s.placed[a.in.ID] = true
		placed++
	}
	for id, v := range bumped {
		s.versions[id] = v + 1
		s.stamp.VersionSum++
	}
	return placed, nil
}

// giveBack releases uncommitted placements from the fleet.
func (s *Scheduler) giveBack(batch []assignment) {
	for _, a := range batch {
		if err := s.fleet.Release(a.in.ID); err != nil {
			s.Log.Error("give back an uncommitted placement", "instance", a.in.ID, "err", err)
		}
	}
	if len(batch) > 0 {
		s.epoch++
	}
}

// unschedulable records the engine's explanation on a pending instance, with
// an event only when the explanation changes. It returns the instance's
// version once the reason is recorded, 0 when the instance changed or went.
func (s *Scheduler) unschedulable(ctx context.Context, in *cloud.Instance, reason string) (int64, error) {
	if in.Reason == reason {
		return in.Version, nil
	}
	var version int64
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		version = 0
		cur, err := tx.GetInstance(ctx, in.ID)
		if err != nil || cur.State != cloud.Pending {
			return ignoreNotFound(err)
		}
		cur.Reason, cur.UpdatedAt = reason, s.Now()
		if err := tx.UpdateInstance(ctx, cur); err != nil {
			return ignoreConflict(err)
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: cur.UpdatedAt, Kind: cloud.EventInstanceUnschedulable, TenantID: cur.TenantID,
			InstanceID: cur.ID, Reason: reason, Actor: schedulerActor}); err != nil {
			return err
		}
		version = cur.Version
		return nil
	})
	return version, err
}

// fail moves a pending instance that can never be placed to failed. An
// instance that changed meanwhile is left alone.
func (s *Scheduler) fail(ctx context.Context, in *cloud.Instance, reason string) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetInstance(ctx, in.ID)
		if err != nil || cur.State != cloud.Pending {
			return ignoreNotFound(err)
		}
		return ignoreConflict(service.MoveInstance(ctx, tx, cur,
			service.Move{To: cloud.Failed, Reason: reason, Actor: schedulerActor}, s.Now()))
	})
}

// placementGroup is the placement.Group of placement group id for this
// step: its strategy, and the hosts and racks where its members hold
// capacity. The members this step places are added as it goes (plan), so
// that a cluster's second member follows its first before either commits.
// A group that no longer exists places its instance without a group.
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
