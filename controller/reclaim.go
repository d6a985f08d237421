package controller

import (
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

func (s *Scheduler) reclaimFleet(r *round) *reclaimView {
	if r.view != nil {
		return r.view
	}
	v := &reclaimView{f: s.fleet.Clone(), noticed: map[string]bool{}}
	for _, in := range r.snap.spot {
		if in.Interruption != nil && in.Interruption.Action != "" {
			v.noticed[in.ID] = true
			_ = v.f.Release(in.ID) // not in the fleet: already gone
		}
	}
	r.view = v
	return v
}

// reclaim is called for a pending on-demand instance (or a capacity
// reservation) that does not fit. When the capacity that spot instances
// under notice will free is enough, it promises that capacity to the
// instance and returns true: the instance waits. Otherwise it asks the
// preemption planner for the cheapest set of spot instances to evict,
// plans a reclaim notice for each (the metadata instance-action, an
// event, and at the deadline a stop or terminate), and returns true. It
// returns false when no reclaim can make room.
func (s *Scheduler) reclaim(r *round, id string, req *placement.Request) (bool, error) {
	v := s.reclaimFleet(r)
	plan, err := s.Engine.PlanPreemption(v.f, req)
	if err != nil {
		if placement.IsInsufficientCapacity(err) {
			return false, nil
		}
		return false, err
	}
	for _, victim := range plan.Victims {
		r.plan.Notices = append(r.plan.Notices, service.ReclaimNotice{InstanceID: victim, For: id,
			Why: reclaimWhy(cloud.ReclaimCapacity, id), Notice: s.noticeFor(s.pools[victim])})
		v.noticed[victim] = true
		_ = v.f.Release(victim)
	}
	p := *plan.Placement
	p.ID = id
	if err := v.f.Apply(&p); err != nil {
		s.Log.Error("reclaim plan does not fit the view it was made on", "for", id, "err", err)
	}
	return true, nil
}

// reclaimWhy is the explanation a reclaim notice's event gives: a price
// above the max price, or the capacity that the instance (or the capacity
// placeholder) forID needs.
func reclaimWhy(reason, forID string) string {
	switch {
	case reason == cloud.ReclaimPrice:
		return "spot price above the max price"
	case strings.HasPrefix(forID, placeholderPrefix):
		return "reserved capacity needed"
	case forID != "":
		return "capacity needed by " + forID
	}
	return "on-demand capacity needed"
}

// planDeadlines plans the reclaim of every spot instance under notice
// whose deadline has come (service.ReclaimDue): it stops or terminates.
func (s *Scheduler) planDeadlines(r *round) {
	now := s.Now()
	for _, in := range r.snap.spot {
		if _, due := service.ReclaimDue(in, now); due {
			r.plan.Deadlines = append(r.plan.Deadlines, in.ID)
		}
	}
}
