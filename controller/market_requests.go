package controller

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// drive plans how every live spot request moves along with its instance.
// A request already where its instance puts it (active while the instance
// holds capacity, open while it waits in its only pool) is left out.
//
// One-time requests close when their instance ends; persistent ones
// relaunch after a reclaim, a failure or a loss (in the first pool with
// room, backups included), or start their stopped instance again (the
// stop behaviour); a pending launch the scheduler could not place moves to
// a backup pool that has room (not a relaunch).
func (rd *marketRound) drive() {
	byID := make(map[string]*cloud.Instance, len(rd.ms.spot))
	for _, in := range rd.ms.spot {
		byID[in.ID] = in
	}
	for _, id := range sortedKeys(rd.ms.requests) {
		r := rd.ms.requests[id]
		in := rd.ms.instance(byID, r)
		if settled(r, in) {
			continue
		}
		if mv := rd.decide(r, in); mv != nil {
			rd.plan.Moves = append(rd.plan.Moves, *mv)
		}
	}
}

// The reasons a request keeps while nothing happens to it.
const reasonWaiting = "waiting for capacity"

// reasonRefused starts the reason of a request whose relaunch the instance
// service refused (see service.ReasonRelaunchRefused).
const reasonRefused = service.ReasonRelaunchRefused

func reasonActive(in *cloud.Instance) string { return "instance " + in.ID + " holds capacity" }

// settled reports whether decide would leave the request as it is, as far
// as the snapshot tells, without asking the fleet.
func settled(r *cloud.SpotRequest, in *cloud.Instance) bool {
	switch {
	case in == nil:
		return false
	case in.State.Holds():
		return r.State == cloud.SpotActive && r.Reason == reasonActive(in)
	case in.State == cloud.Pending:
		return r.State == cloud.SpotOpen && r.Reason == reasonWaiting && (len(r.Pools) < 2 || in.Reason == "")
	}
	return false
}

// spotMove builds one request's move.
type spotMove struct {
	r  *cloud.SpotRequest
	mv service.SpotMove
}

// set moves the request to st with reason.
func (s *spotMove) set(st cloud.SpotRequestState, reason string) {
	s.mv.State, s.mv.Reason = st, reason
}

// done is the move, or nil when it changes nothing.
func (s *spotMove) done() *service.SpotMove {
	mv := &s.mv
	if mv.Instance == nil && mv.Launch == nil && !mv.Relaunch && s.r.State == mv.State && s.r.Reason == mv.Reason {
		return nil
	}
	return mv
}

// decide is what the market does with request r, whose instance is in
// (nil: gone), or nil for nothing.
func (rd *marketRound) decide(r *cloud.SpotRequest, in *cloud.Instance) *service.SpotMove {
	s := &spotMove{r: r, mv: service.SpotMove{RequestID: r.ID, Version: r.Version, InstanceID: r.InstanceID,
		State: r.State, Reason: r.Reason}}
	if in != nil {
		s.mv.InstanceVersion = in.Version
	}
	persistent := r.Type == cloud.SpotPersistent
	if in == nil {
		if persistent {
			rd.relaunch(s, "its instance is gone")
		} else {
			s.set(cloud.SpotClosed, "its instance is gone")
		}
		return s.done()
	}
	reclaimed := in.Interruption != nil && in.Interruption.Action != ""
	switch in.State {
	case cloud.Pending:
		if !rd.toBackup(s, in) {
			s.set(cloud.SpotOpen, reasonWaiting)
		}
	case cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping, cloud.Terminating:
		s.set(cloud.SpotActive, reasonActive(in))
	case cloud.Stopped:
		switch {
		case in.Reason == cloud.ReasonExitedOK:
			s.set(cloud.SpotClosed, "its workload completed")
		case reclaimed && persistent:
			// Stop behaviour: the same instance, with its volumes, starts
			// again when capacity returns (the move to pending clears the
			// notice and the reason).
			s.mv.Instance = &service.Move{To: cloud.Pending, Reason: "persistent spot request " + r.ID + " restarts its stopped instance"}
			s.mv.Relaunch = true
			s.set(cloud.SpotOpen, "restarting its stopped instance")
		default:
			s.set(cloud.SpotDisabled, "its instance is stopped; start it to resume")
		}
	case cloud.Terminated:
		switch {
		case reclaimed && persistent:
			rd.relaunch(s, "instance "+in.ID+" was reclaimed")
		case strings.HasPrefix(r.Reason, reasonRefused):
			// The market ended it to relaunch (a failed or lost instance
			// of a persistent request, a move to a backup pool) and the
			// relaunch was refused: try again.
			rd.relaunch(s, "instance "+in.ID+" ended")
		case !persistent:
			s.set(cloud.SpotClosed, "its instance terminated")
		default:
			s.set(cloud.SpotClosed, "its instance was terminated by the tenant")
		}
	case cloud.Failed, cloud.Lost:
		keep := rd.m.keepFailed()
		switch {
		case !persistent:
			s.set(cloud.SpotClosed, "its instance "+string(in.State))
		case in.State == cloud.Failed && rd.now.Sub(in.UpdatedAt) < keep:
			s.set(cloud.SpotOpen, fmt.Sprintf("instance %s failed; kept for inspection until %s", in.ID,
				in.UpdatedAt.Add(keep).UTC().Format(time.RFC3339)))
		default:
			// The instance keeps the reason it failed or was lost with.
			s.mv.Instance = &service.Move{To: cloud.Terminated, KeepReason: true,
				Reason: "persistent spot request " + r.ID + " relaunches"}
			rd.relaunch(s, "instance "+in.ID+" "+string(in.State))
		}
	}
	return s.done()
}

// relaunch plans the request's next instance in its best pool (the
// service records a launch its rules refuse on the request).
func (rd *marketRound) relaunch(s *spotMove, why string) {
	if len(s.r.Pools) == 0 {
		s.set(cloud.SpotOpen, reasonRefused+fmt.Sprintf("spot request %s has no pools", s.r.ID))
		return
	}
	pool, _ := rd.bestPool(s.r, cloud.Pool{})
	s.mv.Launch = &service.SpotRelaunch{Pool: pool, Why: why}
}

// bestPool is the first of the request's pools (backups in order) where an
// instance fits now within the max price; the primary when none does.
func (rd *marketRound) bestPool(r *cloud.SpotRequest, skip cloud.Pool) (cloud.Pool, bool) {
	for _, p := range r.Pools {
		if p == skip {
			continue
		}
		if rd.fits(r, p) {
			return p, true
		}
	}
	return r.Pools[0], false
}

// fits reports whether an instance of the pool's offering fits the
// scheduler's fleet now, in a zone whose price is within the max price.
func (rd *marketRound) fits(r *cloud.SpotRequest, p cloud.Pool) bool {
	var zones []string
	for pool, s := range rd.supply {
		if pool.Offering != p.Offering || (p.Zone != "" && pool.Zone != p.Zone) {
			continue
		}
		if rd.last[pool] <= maxPrice(r, s.OnDemandPrice) {
			zones = append(zones, pool.Zone)
		}
	}
	return rd.view.FitsSpot(p.Offering, zones)
}

// toBackup plans to move a pending launch that the scheduler could not
// place to the first other pool of the request that has room now: it
// terminates the launch and relaunches in that pool. It reports whether
// it did.
func (rd *marketRound) toBackup(s *spotMove, in *cloud.Instance) bool {
	r := s.r
	if len(r.Pools) < 2 || in.Reason == "" {
		return false
	}
	cur := cloud.Pool{Offering: in.Offering}
	if len(in.Zones) == 1 {
		cur.Zone = in.Zones[0]
	}
	if rd.fits(r, cur) {
		return false // the scheduler will place it
	}
	pool, ok := rd.bestPool(r, cur)
	if !ok {
		return false
	}
	s.mv.Instance = &service.Move{To: cloud.Terminated, Reason: "moved to backup pool " + pool.String()}
	s.mv.Launch = &service.SpotRelaunch{Pool: pool, Why: "no room in pool " + cur.String(), Backup: true}
	return true
}
