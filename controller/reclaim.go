package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
	"github.com/gpucloud/gpucloud/service"
)

// DefaultNotice is how long a spot instance is warned before a reclaim
// stops it, and MinNotice the shortest notice a pool may be configured with.
const (
	DefaultNotice = 120 * time.Second
	MinNotice     = 30 * time.Second
)

// noticeFor is the reclaim notice of a pool.
func (s *Scheduler) noticeFor(pool cloud.Pool) time.Duration {
	if d, ok := s.PoolNotice[pool.String()]; ok && d >= MinNotice {
		return d
	}
	if d, ok := s.PoolNotice[pool.Offering]; ok && d >= MinNotice {
		return d
	}
	if s.Notice >= MinNotice {
		return s.Notice
	}
	return DefaultNotice
}

// reclaimView is the fleet as it will be once every spot instance under
// notice has left, with the capacity already promised to waiting
// instances applied: the planner works on it so that two pending
// instances never count the same reclaimed capacity, and a step never
// reclaims twice for one instance. It is built lazily, once per step.
type reclaimView struct {
	f *fleet.Fleet
	// noticed holds the spot instances under a reclaim notice.
	noticed map[string]bool
}

func (s *Scheduler) reclaimFleet(snap *snapshot) *reclaimView {
	if s.view != nil {
		return s.view
	}
	v := &reclaimView{f: s.fleet.Clone(), noticed: map[string]bool{}}
	for _, in := range snap.spot {
		if in.Interruption != nil && in.Interruption.Action != "" {
			v.noticed[in.ID] = true
			_ = v.f.Release(in.ID) // not in the fleet: already gone
		}
	}
	s.view = v
	return v
}

// reclaim is called for a pending on-demand instance (or a capacity
// reservation) that does not fit. When the capacity that spot instances
// under notice will free is enough, it promises that capacity to the
// instance and returns true: the instance waits. Otherwise it asks the
// preemption planner for the cheapest set of spot instances to evict,
// announces the reclaim to each (the metadata instance-action, an event,
// and at the deadline a stop or terminate), and returns true. It returns
// false when no reclaim can make room.
func (s *Scheduler) reclaim(ctx context.Context, snap *snapshot, id string, req *placement.Request) (bool, error) {
	v := s.reclaimFleet(snap)
	plan, err := s.Engine.PlanPreemption(v.f, req)
	if err != nil {
		if placement.IsInsufficientCapacity(err) {
			return false, nil
		}
		return false, err
	}
	if len(plan.Victims) > 0 {
		if err := s.notice(ctx, plan.Victims, id); err != nil {
			return false, err
		}
		for _, victim := range plan.Victims {
			v.noticed[victim] = true
			_ = v.f.Release(victim)
		}
	}
	p := *plan.Placement
	p.ID = id
	if err := v.f.Apply(&p); err != nil {
		s.Log.Error("reclaim plan does not fit the view it was made on", "for", id, "err", err)
	}
	return true, nil
}

// notice announces capacity reclaims to spot instances, in one
// transaction. An instance that changed meanwhile (stopped, already under
// notice) is skipped. The Reclaimed hook hears of the notices once they
// are committed.
func (s *Scheduler) notice(ctx context.Context, victims []string, forID string) error {
	now := s.Now()
	noticed := 0
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		noticed = 0 // the function may run again
		for _, id := range victims {
			in, err := tx.GetInstance(ctx, id)
			if err != nil {
				if cloud.IsNotFound(err) {
					continue
				}
				return err
			}
			if !in.State.Holds() || in.Market != cloud.MarketSpot || (in.Interruption != nil && in.Interruption.Action != "") {
				continue
			}
			notice := s.noticeFor(cloud.Pool{Offering: in.Offering, Zone: in.Zone})
			done, err := announce(ctx, tx, in, cloud.ReclaimCapacity, forID, notice, now)
			if err != nil {
				return err
			}
			if done {
				noticed++
			}
		}
		return nil
	})
	if err == nil && noticed > 0 && s.Reclaimed != nil {
		s.Reclaimed(cloud.ReclaimCapacity, noticed)
	}
	return err
}

// announce writes a reclaim notice (notice long) on a spot instance with
// its event: a field of the instance, not a state change. The action
// follows the spot request's interruption behaviour (terminate when the
// request is gone). The scheduler announces capacity reclaims, the market
// price reclaims; the event names the scheduler, which enforces the
// deadline. It reports whether it wrote the notice: false when the
// instance changed meanwhile.
func announce(ctx context.Context, tx cloud.Tx, in *cloud.Instance, reason, forID string, notice time.Duration, now time.Time) (bool, error) {
	action := cloud.ActionTerminate
	if in.SpotRequestID != "" {
		r, err := tx.GetSpotRequest(ctx, in.SpotRequestID)
		if err != nil && !cloud.IsNotFound(err) {
			return false, err
		}
		if err == nil && r.Interruption == cloud.ActionStop {
			action = cloud.ActionStop
		}
	}
	in.Interruption = &cloud.Interruption{Action: action, Reason: reason, NoticedAt: now,
		Deadline: now.Add(notice), For: forID}
	in.UpdatedAt = now
	if err := tx.UpdateInstance(ctx, in); err != nil {
		return false, ignoreConflict(err)
	}
	why := "on-demand capacity needed"
	switch {
	case reason == cloud.ReclaimPrice:
		why = "spot price above the max price"
	case strings.HasPrefix(forID, placeholderPrefix):
		why = "reserved capacity needed"
	case forID != "":
		why = "capacity needed by " + forID
	}
	details := fmt.Sprintf(`{"action":%q,"reason":%q,"deadline":%q,"notice_seconds":%d}`,
		action, reason, in.Interruption.Deadline.UTC().Format(time.RFC3339Nano), int(notice/time.Second))
	err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotInterruption, TenantID: in.TenantID,
		InstanceID: in.ID, HostID: in.HostID, Reason: fmt.Sprintf("spot %s in %s: %s", action, notice, why),
		Actor: schedulerActor, Details: []byte(details)})
	return err == nil, err
}

// enforceDeadlines stops or terminates the spot instances whose reclaim
// deadline has come (service.MoveInstance, which detaches the volumes of
// a terminating one): the agent then sends SIGTERM (and SIGKILL after the
// grace period). It returns how many it moved.
func (s *Scheduler) enforceDeadlines(ctx context.Context, snap *snapshot) (int, error) {
	now := s.Now()
	var due []string
	for _, in := range snap.spot {
		it := in.Interruption
		if it == nil || it.Action == "" || now.Before(it.Deadline) || cloud.IsGroupNotice(it.Reason) {
			continue
		}
		if in.State == cloud.Stopping || in.State == cloud.Terminating {
			continue
		}
		due = append(due, in.ID)
	}
	if len(due) == 0 {
		return 0, nil
	}
	moved := 0
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		moved = 0
		for _, id := range due {
			in, err := tx.GetInstance(ctx, id)
			if err != nil {
				if cloud.IsNotFound(err) {
					continue
				}
				return err
			}
			it := in.Interruption
			if it == nil || it.Action == "" || now.Before(it.Deadline) || cloud.IsGroupNotice(it.Reason) || !in.State.Holds() ||
				in.State == cloud.Stopping || in.State == cloud.Terminating {
				continue
			}
			to := cloud.Terminating
			if it.Action == cloud.ActionStop {
				to = cloud.Stopping
			}
			reason := fmt.Sprintf("spot reclaim (%s): deadline %s reached", it.Reason, it.Deadline.UTC().Format(time.RFC3339))
			if err := service.MoveInstance(ctx, tx, in, service.Move{To: to, Reason: reason, Actor: schedulerActor}, now); err != nil {
				if cloud.IsConflict(err) {
					continue // changed meanwhile
				}
				return err
			}
			moved++
		}
		return nil
	})
	return moved, err
}
