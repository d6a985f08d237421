package service

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// SchedulePlan is what one scheduler step decided, computed over the
// scheduler's snapshot and fleet index without writing anything. It holds
// instances as the scheduler read them: ApplySchedule writes each decision
// only if what it rests on is still true.
type SchedulePlan struct {
	// Placements move pending instances to scheduled.
	Placements []PlannedPlacement
	// Failures move pending instances that can never be placed to failed.
	Failures []PlannedFailure
	// Waits record why pending instances that do not fit now wait.
	Waits []PlannedWait
	// Notices announce capacity reclaims to spot instances.
	Notices []ReclaimNotice
	// Deadlines are the IDs of spot instances whose reclaim deadline
	// passed: each stops or terminates (see ReclaimDue).
	Deadlines []string
	// Shortfalls are the zonal commitments whose capacity cannot be held
	// (each an event).
	Shortfalls []Shortfall
}

// Empty reports whether the plan decides nothing.
func (p *SchedulePlan) Empty() bool {
	return len(p.Placements) == 0 && len(p.Failures) == 0 && len(p.Waits) == 0 && len(p.Notices) == 0 &&
		len(p.Deadlines) == 0 && len(p.Shortfalls) == 0
}

// PlannedPlacement places a pending instance.
type PlannedPlacement struct {
	// Instance is the pending instance as read: it moves only if its
	// stored version is still Instance.Version.
	Instance *cloud.Instance
	// Placement is what it takes on its host, and Zone the host's zone.
	Placement *fleet.Placement
	Zone      string
	// HostVersion is the version of Placement.HostID the scheduler's fleet
	// was built from; the host must still have it.
	HostVersion int64
}

// PlannedFailure fails a pending instance that can never be placed (its
// offering is gone, its request is invalid), if it is still as read.
type PlannedFailure struct {
	Instance *cloud.Instance
	Reason   string
}

// PlannedWait records Reason, the placement engine's explanation, as why a
// pending instance waits, with an instance.unschedulable event, if the
// instance is still as read.
type PlannedWait struct {
	Instance *cloud.Instance
	Reason   string
}

// ReclaimNotice announces a capacity reclaim to the spot instance
// InstanceID (NoticeSpotReclaim): its deadline is the time of the notice
// plus Notice. For is the instance (or capacity placeholder) that the
// reclaimed capacity makes room for, and Why the event's explanation.
type ReclaimNotice struct {
	InstanceID string
	For        string
	Why        string
	Notice     time.Duration
}

// Shortfall is a zonal commitment of which Missing reserved instances
// cannot be held, even by reclaiming spot capacity.
type Shortfall struct {
	Commitment *cloud.Commitment
	Missing    int
}

// Reason is the shortfall's event text.
func (s Shortfall) Reason() string {
	c := s.Commitment
	return fmt.Sprintf("commitment %s: %d of %d reserved %s instances in %s cannot be held: no capacity, even by reclaiming spot",
		c.ID, s.Missing, c.Quantity, c.Offering, c.Zone)
}

// ScheduleResult is what ApplySchedule wrote.
type ScheduleResult struct {
	// Stale holds the pending instances of placements, failures and waits
	// that changed since they were read: nothing was written for them.
	Stale map[string]bool
	// HostChanged, when not nil, is why no placement was written: a host
	// changed since the fleet was read (a Conflict) or went (NotFound).
	// The rest of the plan was written.
	HostChanged error
	// Hosts is the new version of each host that received a placement.
	Hosts map[string]int64
	// Waiting is the version of each waiting instance once its reason is
	// recorded.
	Waiting map[string]int64
	// Placed, Failed, Noticed and Reclaimed count the placements, failures,
	// reclaim notices and reclaims at the deadline written.
	Placed, Failed, Noticed, Reclaimed int
}

// ApplySchedule writes plan for actor (the scheduler) in one transaction,
// re-checking every decision against the store:
//
//   - each spot instance whose reclaim deadline passed (re-read, ReclaimDue)
//     stops or terminates through MoveInstance;
//   - each reclaim notice is written (NoticeSpotReclaim) on an instance that
//     still holds capacity as spot and is under no notice;
//   - placements and failures move their instances with MoveInstances (a
//     few statements for them all), each only if its version is still the
//     one read (else it is in Stale), and every host that receives a
//     placement has its version bumped from the one read;
//   - waits record their reason on instances still at the version read,
//     with their events; commitment shortfalls append their events.
//
// A host that changed fails every placement of the plan: the transaction
// is rolled back and the rest of the plan written in a second one, and
// HostChanged says why. A transaction that keeps losing serialization
// races returns the store's Conflict, with nothing written.
func ApplySchedule(ctx context.Context, st cloud.Store, actor Actor, plan *SchedulePlan, now time.Time) (*ScheduleResult, error) {
	res, err := applySchedule(ctx, st, actor.ID, plan, now, true)
	if err == nil || res == nil || res.HostChanged == nil || err != res.HostChanged {
		return res, err
	}
	hostErr := res.HostChanged
	rest := *plan
	rest.Placements = nil
	if rest.Empty() {
		return &ScheduleResult{HostChanged: hostErr}, nil
	}
	res, err = applySchedule(ctx, st, actor.ID, &rest, now, false)
	if err != nil {
		return nil, err
	}
	res.HostChanged = hostErr
	return res, nil
}

// applySchedule runs one transaction of ApplySchedule; places leaves the
// placements out when false. The function given to the store may run more
// than once, so it builds its result from scratch each time.
func applySchedule(ctx context.Context, st cloud.Store, actor string, plan *SchedulePlan, now time.Time, places bool) (*ScheduleResult, error) {
	var res *ScheduleResult
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		res = &ScheduleResult{Stale: map[string]bool{}, Hosts: map[string]int64{}, Waiting: map[string]int64{}}
		if err := reclaimDue(ctx, tx, plan.Deadlines, actor, now, res); err != nil {
			return err
		}
		if err := noticeReclaims(ctx, tx, plan.Notices, actor, now, res); err != nil {
			return err
		}
		var placements []PlannedPlacement
		if places {
			placements = plan.Placements
		}
		if err := moveScheduled(ctx, tx, placements, plan.Failures, actor, now, res); err != nil {
			return err
		}
		if err := recordWaits(ctx, tx, plan.Waits, actor, now, res); err != nil {
			return err
		}
		return appendShortfalls(ctx, tx, plan.Shortfalls, actor, now)
	})
	return res, err
}

// moveScheduled writes placements and failures with one MoveInstances
// (the version check is the state check: each instance was pending at the
// version read), then bumps the hosts of the placements written. A host
// that changed is recorded in res.HostChanged and returned.
func moveScheduled(ctx context.Context, tx cloud.Tx, placements []PlannedPlacement, failures []PlannedFailure, actor string, now time.Time, res *ScheduleResult) error {
	n := len(placements) + len(failures)
	if n == 0 {
		return nil
	}
	// Copies: MoveInstances updates what it moves, and the transaction
	// may run again from the instances as read.
	ins := make([]cloud.Instance, n)
	ptrs := make([]*cloud.Instance, n)
	moves := make([]Move, n)
	for i, p := range placements {
		ins[i] = *p.Instance
		moves[i] = Move{To: cloud.Scheduled, Reason: "placed on " + placement.Explain(p.Placement), Actor: actor,
			Placement: p.Placement, Zone: p.Zone}
	}
	for i, f := range failures {
		j := len(placements) + i
		ins[j] = *f.Instance
		moves[j] = Move{To: cloud.Failed, Reason: f.Reason, Actor: actor}
	}
	for i := range ins {
		ptrs[i] = &ins[i]
	}
	stale, err := MoveInstances(ctx, tx, ptrs, moves, now)
	if err != nil {
		return err
	}
	for _, id := range stale {
		res.Stale[id] = true
	}
	read := map[string]int64{}
	for _, p := range placements {
		if !res.Stale[p.Instance.ID] {
			read[p.Placement.HostID] = p.HostVersion
			res.Placed++
		}
	}
	res.Failed = len(failures)
	for _, f := range failures {
		if res.Stale[f.Instance.ID] {
			res.Failed--
		}
	}
	err = tx.BumpHosts(ctx, read)
	if cloud.IsConflict(err) || cloud.IsNotFound(err) {
		res.HostChanged = err
	}
	if err != nil {
		return err
	}
	for id, v := range read {
		res.Hosts[id] = v + 1
	}
	return nil
}

// recordWaits writes each wait's reason on its instance, if still at the
// version read, with an instance.unschedulable event.
func recordWaits(ctx context.Context, tx cloud.Tx, waits []PlannedWait, actor string, now time.Time, res *ScheduleResult) error {
	if len(waits) == 0 {
		return nil
	}
	ins := make([]cloud.Instance, len(waits))
	ptrs := make([]*cloud.Instance, len(waits))
	for i, w := range waits {
		ins[i] = *w.Instance
		ins[i].Reason, ins[i].UpdatedAt = w.Reason, now
		ptrs[i] = &ins[i]
	}
	stale, err := tx.UpdateInstanceStates(ctx, ptrs) // the reason and the time
	if err != nil {
		return err
	}
	for _, id := range stale {
		res.Stale[id] = true
	}
	evs := make([]*cloud.Event, 0, len(waits))
	for i, w := range waits {
		in := &ins[i]
		if res.Stale[in.ID] {
			continue
		}
		res.Waiting[in.ID] = in.Version
		evs = append(evs, &cloud.Event{Time: now, Kind: cloud.EventInstanceUnschedulable, TenantID: in.TenantID,
			InstanceID: in.ID, Reason: w.Reason, Actor: actor})
	}
	if len(evs) == 0 {
		return nil
	}
	return tx.AppendEvents(ctx, evs)
}

// noticeReclaims writes the plan's capacity reclaim notices. An instance
// gone, no longer holding capacity as spot, or already under notice is
// skipped.
func noticeReclaims(ctx context.Context, tx cloud.Tx, notices []ReclaimNotice, actor string, now time.Time, res *ScheduleResult) error {
	for _, n := range notices {
		in, err := tx.GetInstance(ctx, n.InstanceID)
		if cloud.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !in.State.Holds() || in.Market != cloud.MarketSpot || (in.Interruption != nil && in.Interruption.Action != "") {
			continue
		}
		done, err := NoticeSpotReclaim(ctx, tx, in, cloud.ReclaimCapacity, n.For, n.Why, n.Notice, actor, now)
		if err != nil {
			return err
		}
		if done {
			res.Noticed++
		}
	}
	return nil
}

// reclaimDue stops or terminates the spot instances among ids whose
// reclaim deadline passed, as re-read (ReclaimDue): the agent then sends
// SIGTERM (and SIGKILL after the grace period). One that changed
// meanwhile is left alone.
func reclaimDue(ctx context.Context, tx cloud.Tx, ids []string, actor string, now time.Time, res *ScheduleResult) error {
	for _, id := range ids {
		in, err := tx.GetInstance(ctx, id)
		if cloud.IsNotFound(err) {
			continue
		}
		if err != nil {
			return err
		}
		m, ok := ReclaimDue(in, now)
		if !ok {
			continue
		}
		m.Actor = actor
		if err := MoveInstance(ctx, tx, in, m, now); err != nil {
			if cloud.IsConflict(err) {
				continue // changed meanwhile
			}
			return err
		}
		res.Reclaimed++
	}
	return nil
}

// ReclaimDue reports whether the reclaim notice of spot instance in has
// reached its deadline at now, and the move that carries it out: to
// stopping or terminating, as the notice's action says (MoveInstance
// detaches the volumes of a terminating one). A group's scale-in notice is
// the group controller's; an instance already stopping or terminating, or
// holding no capacity, has nothing left to reclaim. The move has no actor.
func ReclaimDue(in *cloud.Instance, now time.Time) (Move, bool) {
	it := in.Interruption
	if it == nil || it.Action == "" || now.Before(it.Deadline) || cloud.IsGroupNotice(it.Reason) || !in.State.Holds() ||
		in.State == cloud.Stopping || in.State == cloud.Terminating {
		return Move{}, false
	}
	to := cloud.Terminating
	if it.Action == cloud.ActionStop {
		to = cloud.Stopping
	}
	return Move{To: to, Reason: fmt.Sprintf("%s (%s): deadline %s reached", reclaimMoveReason, it.Reason, it.Deadline.UTC().Format(time.RFC3339))}, true
}

// reclaimMoveReason starts the reason of ReclaimDue's move, by which a
// status report tells a reclaim's stop from a tenant's (reclaimOf).
const reclaimMoveReason = "spot reclaim"

// reclaimOf is the reason ("capacity", "price") of the spot reclaim that
// is stopping or terminating in, "" when in is not being reclaimed (a
// tenant's stop during the notice is not a reclaim).
func reclaimOf(in *cloud.Instance) string {
	it := in.Interruption
	if it == nil || in.State != cloud.Stopping && in.State != cloud.Terminating ||
		!strings.HasPrefix(in.Reason, reclaimMoveReason+" (") {
		return ""
	}
	return it.Reason
}

// appendShortfalls appends a commitment event for each shortfall.
func appendShortfalls(ctx context.Context, tx cloud.Tx, shortfalls []Shortfall, actor string, now time.Time) error {
	if len(shortfalls) == 0 {
		return nil
	}
	evs := make([]*cloud.Event, len(shortfalls))
	for i, s := range shortfalls {
		evs[i] = &cloud.Event{Time: now, Kind: cloud.EventCommitment, TenantID: s.Commitment.TenantID,
			Reason: s.Reason(), Actor: actor}
	}
	return tx.AppendEvents(ctx, evs)
}
