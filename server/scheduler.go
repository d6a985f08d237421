// Package server runs the control plane's controllers around the pure
// core: the scheduler loop places pending instances with the placement
// engine and commits each allocation together with the state change.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// Scheduler places pending instances. It keeps an in-memory fleet index,
// rebuilt from the store by Rebuild, and commits every placement in one
// store transaction with the instance's state change, the host's version
// bump and the event, checking both versions; a placement that loses a
// race is dropped and retried on the next Step. Only the leader runs it.
type Scheduler struct {
	Store   cloud.Store
	Catalog *catalog.Catalog
	Engine  *placement.Engine
	Now     func() time.Time
	Log     *slog.Logger

	fleet *fleet.Fleet
	// placed maps instance ID to the placement applied to the fleet.
	placed map[string]bool
	// versions is the store version of each host the fleet was built from.
	versions map[string]int64
	steps    int
}

// NewScheduler returns a scheduler with the default policy.
func NewScheduler(st cloud.Store, cat *catalog.Catalog) *Scheduler {
	if cat == nil {
		cat = catalog.Default()
	}
	sc, _ := placement.NewScorer(placement.DefaultPolicy, nil)
	return &Scheduler{Store: st, Catalog: cat, Engine: placement.NewEngine(cat, sc, 1), Now: time.Now, Log: slog.Default()}
}

// Fleet returns the scheduler's fleet index (read it, do not change it).
func (s *Scheduler) Fleet() *fleet.Fleet { return s.fleet }

// Rebuild loads hosts and the allocations of instances that hold one from
// the store. A server restart loses nothing: pending stays pending, running
// keeps its allocation.
func (s *Scheduler) Rebuild(ctx context.Context) error {
	f := fleet.New()
	placed := map[string]bool{}
	versions := map[string]int64{}
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		hosts, err := tx.ListHosts(ctx)
		if err != nil {
			return err
		}
		sort.Slice(hosts, func(i, j int) bool { return hosts[i].ID < hosts[j].ID })
		for _, h := range hosts {
			spec := h.Spec
			spec.ID, spec.State = h.ID, h.State
			if err := f.AddHost(&spec, s.Catalog); err != nil {
				return fmt.Errorf("rebuild: host %s: %w", h.ID, err)
			}
			versions[h.ID] = h.Version
		}
		holding, err := tx.ListInstances(ctx, cloud.InstanceFilter{States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		for _, in := range holding {
			if in.Placement == nil {
				continue
			}
			p := *in.Placement
			p.ID = in.ID
			// The instance that switched a GPU into MIG mode may be gone
			// while others remain on it; whichever comes first now
			// switches the mode again.
			p.Devices = append([]fleet.Device(nil), p.Devices...)
			if h := f.Host(p.HostID); h != nil {
				for i, d := range p.Devices {
					if d.Kind == fleet.MIGSlice && d.GPU < len(h.GPUs) {
						p.Devices[i].EnableMIG = !h.GPUs[d.GPU].MIG
					}
				}
			}
			if err := f.Apply(&p); err != nil {
				// A stored allocation that no longer fits is a bug or a
				// changed host: say so loudly, keep the rest going.
				s.Log.Error("rebuild: stored allocation does not fit", "instance", in.ID, "host", p.HostID, "err", err)
				continue
			}
			placed[in.ID] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.fleet, s.placed, s.versions = f, placed, versions
	return nil
}

// Step places every pending instance it can, oldest first, and releases
// the allocations of instances that no longer hold one. It returns how
// many instances it placed.
func (s *Scheduler) Step(ctx context.Context) (int, error) {
	stale, err := s.stale(ctx)
	if err != nil {
		return 0, err
	}
	if stale {
		if err := s.Rebuild(ctx); err != nil {
			return 0, err
		}
	}
	if err := s.release(ctx); err != nil {
		return 0, err
	}
	var pending []*cloud.Instance
	err = s.Store.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		pending, err = tx.ListInstances(ctx, cloud.InstanceFilter{States: []cloud.State{cloud.Pending}})
		return err
	})
	if err != nil {
		return 0, err
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].CreatedAt.Before(pending[j].CreatedAt) })
	placed := 0
	for _, in := range pending {
		s.steps++
		if s.steps%256 == 0 {
			s.Engine.Recalibrate(s.fleet)
		}
		ok, err := s.placeOne(ctx, in)
		if err != nil {
			return placed, err
		}
		if ok {
			placed++
		}
	}
	return placed, nil
}

// stale reports whether the fleet index must be rebuilt: never built, or a
// host was added, removed or changed (cordoned, re-inventoried) by someone
// other than this scheduler.
func (s *Scheduler) stale(ctx context.Context) (bool, error) {
	if s.fleet == nil {
		return true, nil
	}
	stale := false
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		hosts, err := tx.ListHosts(ctx)
		if err != nil {
			return err
		}
		if len(hosts) != len(s.versions) {
			stale = true
			return nil
		}
		for _, h := range hosts {
			if v, ok := s.versions[h.ID]; !ok || v != h.Version {
				stale = true
				return nil
			}
		}
		return nil
	})
	return stale, err
}

// placeOne places one pending instance, or records why it cannot be.
func (s *Scheduler) placeOne(ctx context.Context, in *cloud.Instance) (bool, error) {
	o, err := s.Catalog.Offering(in.Offering)
	if err != nil {
		return false, s.fail(ctx, in, fmt.Sprintf("offering %q no longer exists", in.Offering))
	}
	req, err := RequestFor(in, o)
	if err != nil {
		return false, s.fail(ctx, in, err.Error())
	}
	p, err := s.Engine.Place(s.fleet, req)
	if err != nil {
		if placement.IsInvalidRequest(err) {
			return false, s.fail(ctx, in, err.Error())
		}
		if placement.IsInsufficientCapacity(err) {
			return false, s.unschedulable(ctx, in, err.Error())
		}
		return false, err
	}
	now := s.Now()
	err = s.Store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetInstance(ctx, in.ID)
		if err != nil {
			return err
		}
		if cur.State != cloud.Pending || cur.Version != in.Version {
			return cloud.Errorf(cloud.Conflict, "instance %s changed while being placed", in.ID)
		}
		h, err := tx.GetHost(ctx, p.HostID)
		if err != nil {
			return err
		}
		if h.Version != s.versions[h.ID] {
			return cloud.Errorf(cloud.Conflict, "host %s changed while placing %s", h.ID, in.ID)
		}
		if err := tx.PutHost(ctx, h); err != nil { // bumps the version
			return err
		}
		cur.State, cur.Reason, cur.HostID, cur.Placement, cur.UpdatedAt = cloud.Scheduled, "placed on "+placement.Explain(p), p.HostID, p, now
		if err := tx.UpdateInstance(ctx, cur); err != nil {
			return err
		}
		s.versions[h.ID] = h.Version
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: "instance.scheduled", TenantID: cur.TenantID, InstanceID: cur.ID,
			HostID: p.HostID, From: cloud.Pending, To: cloud.Scheduled, Reason: cur.Reason, Actor: "scheduler"})
	})
	if cloud.IsConflict(err) || cloud.IsNotFound(err) {
		// Someone else changed the instance or the host: re-read the
		// fleet and try again on the next step.
		s.Log.Info("placement lost a race; rebuilding", "instance", in.ID, "err", err)
		return false, s.Rebuild(ctx)
	}
	if err != nil {
		return false, err
	}
	if err := s.fleet.Apply(p); err != nil {
		return false, fmt.Errorf("apply committed placement of %s: %w", in.ID, err)
	}
	s.placed[in.ID] = true
	return true, nil
}

// unschedulable records the engine's explanation on a pending instance, with
// an event only when the explanation changes.
func (s *Scheduler) unschedulable(ctx context.Context, in *cloud.Instance, reason string) error {
	if in.Reason == reason {
		return nil
	}
	return s.Store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetInstance(ctx, in.ID)
		if err != nil || cur.State != cloud.Pending {
			return ignoreNotFound(err)
		}
		cur.Reason, cur.UpdatedAt = reason, s.Now()
		if err := tx.UpdateInstance(ctx, cur); err != nil {
			return ignoreConflict(err)
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: cur.UpdatedAt, Kind: "instance.unschedulable", TenantID: cur.TenantID,
			InstanceID: cur.ID, Reason: reason, Actor: "scheduler"})
	})
}

// fail moves a pending instance that can never be placed to failed.
func (s *Scheduler) fail(ctx context.Context, in *cloud.Instance, reason string) error {
	return s.Store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetInstance(ctx, in.ID)
		if err != nil || cur.State != cloud.Pending {
			return ignoreNotFound(err)
		}
		cur.State, cur.Reason, cur.UpdatedAt = cloud.Failed, reason, s.Now()
		if err := tx.UpdateInstance(ctx, cur); err != nil {
			return ignoreConflict(err)
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: cur.UpdatedAt, Kind: "instance.failed", TenantID: cur.TenantID,
			InstanceID: cur.ID, From: cloud.Pending, To: cloud.Failed, Reason: reason, Actor: "scheduler"})
	})
}

// release frees the fleet allocations of instances that stopped holding
// one (stopped, terminated, failed, lost, or back to pending).
func (s *Scheduler) release(ctx context.Context) error {
	if len(s.placed) == 0 {
		return nil
	}
	holding := map[string]bool{}
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{States: cloud.HoldingStates()})
		for _, in := range ins {
			holding[in.ID] = true
		}
		return err
	})
	if err != nil {
		return err
	}
	for id := range s.placed {
		if holding[id] {
			continue
		}
		if err := s.fleet.Release(id); err != nil && !errors.Is(err, fleet.ErrUnknown) {
			return err
		}
		delete(s.placed, id)
	}
	return nil
}

func ignoreNotFound(err error) error {
	if cloud.IsNotFound(err) {
		return nil
	}
	return err
}

func ignoreConflict(err error) error {
	if cloud.IsConflict(err) {
		return nil
	}
	return err
}
