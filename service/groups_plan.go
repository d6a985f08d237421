package service

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
)

// GroupPlan is what the group controller decided for one group in one
// round: the controller computes it over a snapshot, with no write, and
// ApplyGroupPlan carries it out in one transaction.
type GroupPlan struct {
	GroupID string
	// Name is the group's name, for the events' and reasons' text.
	Name string
	// Version is the group's version as read. Scale applies only to the
	// group still at it and active; Deleted only to a group still
	// deleting.
	Version int64
	// Scale is the planner's decision for an active group (nil: nothing
	// to change).
	Scale *GroupScale
	// Withdraw lists the members whose scale-in notice is withdrawn (they
	// took a completion lock or were protected); Due those whose notice
	// ran out, terminated.
	Withdraw, Due []string
	// Drain lists the members of a deleting group, terminated at once;
	// Deleted marks the group deleted (no member is left).
	Drain   []string
	Deleted bool
	// History, when not nil, is the group's history document to save.
	History []byte
}

// Empty reports whether the plan writes nothing.
func (p *GroupPlan) Empty() bool {
	return p.Scale == nil && len(p.Withdraw) == 0 && len(p.Due) == 0 && len(p.Drain) == 0 && !p.Deleted && p.History == nil
}

// GroupScale is the sizing part of a group's plan.
type GroupScale struct {
	// Replace lists the failed, lost or stopped members, terminated so
	// that launches replace them.
	Replace []string
	// Launch lists the members to launch (LaunchGroupMember), numbered
	// from the group's Status.LaunchSeq.
	Launch []GroupLaunch
	// Release lists the members to scale in: a pending one is terminated,
	// any other given Notice (NoticeGroupMember).
	Release []GroupRelease
	Notice  time.Duration
	// Desired is the desired capacity the group's status records with
	// Decision when Record (clamped to the group's bounds); Min and Max,
	// when not nil, are new bounds (a scheduled action's).
	Desired  int
	Min, Max *int
	// Decision is the planner's decision; Record records it (in the
	// status, with a group.scaling event), and Action counts it as a
	// scaling action (a budget hold is not one).
	Decision cloud.GroupDecision
	Record   bool
	Action   bool
	// Backoff is the relaunch backoff the group's status keeps.
	Backoff *cloud.GroupBackoff
}

// GroupLaunch is one launch of a group member.
type GroupLaunch struct {
	Offering, Zone string
	Market         cloud.Market
}

// GroupRelease is one member chosen for scale-in, with a cloud.Reclaim*
// reason.
type GroupRelease struct {
	InstanceID, Reason string
}

// ApplyGroupPlan carries out the plan of one group in one transaction of
// st, as actor: its scaling, when the group is still at the version read
// and active (otherwise the decision is left for the next round); the
// notices withdrawn and enforced; the drain of a deleting group; and its
// history. Members are re-read: one that became held since the snapshot
// is never scaled in, and a notice is enforced only if still due.
func ApplyGroupPlan(ctx context.Context, st cloud.Store, cat *catalog.Catalog, actor Actor, p *GroupPlan, now time.Time) error {
	if p.Empty() {
		return nil
	}
	return st.Tx(ctx, func(tx cloud.Tx) error {
		if p.Scale != nil {
			if err := applyGroupScale(ctx, tx, cat, actor, p, now); err != nil {
				return err
			}
		}
		if err := enforceGroupNotices(ctx, tx, actor, p, now); err != nil {
			return err
		}
		if err := drainGroup(ctx, tx, actor, p, now); err != nil {
			return err
		}
		if p.History != nil {
			return tx.PutGroupHistory(ctx, p.GroupID, p.History)
		}
		return nil
	})
}

// applyGroupScale applies a plan's scaling to the group, if it is still
// at the version read and active: the failed members terminated, the
// launches, the scale-in notices, and the group's new desired capacity,
// status and event.
func applyGroupScale(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, actor Actor, p *GroupPlan, now time.Time) error {
	sc := p.Scale
	cur, err := tx.GetGroup(ctx, p.GroupID)
	if err != nil {
		return err
	}
	if cur.Version != p.Version || cur.State != cloud.GroupActive {
		return nil // changed meanwhile: plan again next round
	}
	for _, id := range sc.Replace {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		why := fmt.Sprintf("group %s replaces its %s member", p.Name, in.State)
		if in.Reason != "" {
			why += " (" + in.Reason + ")"
		}
		if _, err := Act(ctx, tx, actor, in, Terminate, why, now); err != nil {
			return err
		}
	}
	msgs, launched, err := launchGroupMembers(ctx, tx, cat, actor, cur, sc.Launch, now)
	if err != nil {
		return err
	}
	if err := releaseGroupMembers(ctx, tx, actor, p.Name, sc, now); err != nil {
		return err
	}
	cur.Status.Backoff = sc.Backoff
	if sc.Min != nil {
		cur.Min = *sc.Min
	}
	if sc.Max != nil {
		cur.Max = *sc.Max
	}
	if sc.Record {
		if err := recordGroupDecision(ctx, tx, actor, cur, sc, now); err != nil {
			return err
		}
	}
	switch {
	case len(msgs) > 0:
		cur.Status.Message = strings.Join(msgs, "; ")
	case sc.Decision.Limit != "":
		cur.Status.Message = sc.Decision.Reason
	case launched > 0 || len(sc.Release) > 0:
		cur.Status.Message = ""
	}
	cur.Desired = min(max(cur.Desired, cur.Min), cur.Max)
	cur.UpdatedAt = now
	return writeGroup(ctx, tx, cur, cloud.GroupActive)
}

// launchGroupMembers launches a plan's members into g, numbering them on
// from g's Status.LaunchSeq (which it advances). A launch the rules refuse
// (quota, a volume) is the tenant's to fix: it is skipped, and its
// message returned for the group's status.
func launchGroupMembers(ctx context.Context, tx cloud.Tx, cat *catalog.Catalog, actor Actor, g *cloud.Group, ls []GroupLaunch, now time.Time) (msgs []string, launched int, err error) {
	for _, l := range ls {
		seq := g.Status.LaunchSeq + 1
		_, err := LaunchGroupMember(ctx, tx, cat, g, LaunchSpec{Offering: l.Offering, Zone: l.Zone, Market: l.Market, Seq: seq}, actor.ID, now)
		if err != nil {
			if refusedLaunch(err) {
				msgs = append(msgs, "launch refused: "+errorMessage(err))
				continue
			}
			return nil, 0, err
		}
		g.Status.LaunchSeq = seq
		launched++
	}
	return msgs, launched, nil
}

// releaseGroupMembers scales in a plan's members: a pending one (nothing
// runs yet) is terminated, any other is given the scale-in notice. A member
// that became held since the snapshot is left alone.
func releaseGroupMembers(ctx context.Context, tx cloud.Tx, actor Actor, name string, sc *GroupScale, now time.Time) error {
	for _, rel := range sc.Release {
		in, err := tx.GetInstance(ctx, rel.InstanceID)
		if err != nil {
			return err
		}
		if in.ScaleIn.Held() {
			continue // locked since the snapshot: never scale it in
		}
		if in.State == cloud.Pending {
			if _, err := Act(ctx, tx, actor, in, Terminate, "group "+name+" scale-in ("+rel.Reason+") before it ran", now); err != nil {
				return err
			}
			continue
		}
		if err := NoticeGroupMember(ctx, tx, in, rel.Reason, sc.Notice, actor.ID, now); err != nil {
			return err
		}
	}
	return nil
}

// recordGroupDecision sets g's desired capacity to the plan's, keeps the
// decision in its status (the newest MaxGroupDecisions) and writes a
// group.scaling event whose details carry the decision's inputs: the
// metric values, the forecast and the limit.
func recordGroupDecision(ctx context.Context, tx cloud.Tx, actor Actor, g *cloud.Group, sc *GroupScale, now time.Time) error {
	g.Desired = sc.Desired
	if sc.Action {
		g.Status.LastActionAt = now
	}
	d := sc.Decision
	d.Time = now
	g.Status.Decisions = append(g.Status.Decisions, d)
	if n := len(g.Status.Decisions); n > MaxGroupDecisions {
		g.Status.Decisions = slices.Clone(g.Status.Decisions[n-MaxGroupDecisions:])
	}
	details, err := json.Marshal(struct {
		GroupID string `json:"group_id"`
		cloud.GroupDecision
	}{g.ID, d})
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: g.TenantID,
		Reason: fmt.Sprintf("group %s: %d -> %d: %s", g.Name, d.From, d.To, d.Reason), Actor: actor.ID,
		Details: details})
}

// enforceGroupNotices withdraws the scale-in notices of the members that
// are held now, and terminates the members whose notice ran out (and
// which are not held). A spot reclaim is the scheduler's to enforce and
// is left alone.
func enforceGroupNotices(ctx context.Context, tx cloud.Tx, actor Actor, p *GroupPlan, now time.Time) error {
	for _, id := range p.Withdraw {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		if in.Interruption == nil || !cloud.IsGroupNotice(in.Interruption.Reason) || !in.ScaleIn.Held() {
			continue
		}
		if err := WithdrawGroupNotice(ctx, tx, in, actor.ID, now); err != nil {
			return err
		}
	}
	for _, id := range p.Due {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		it := in.Interruption
		if it == nil || it.Action == "" || now.Before(it.Deadline) || in.ScaleIn.Held() {
			continue
		}
		if _, err := Act(ctx, tx, actor, in, Terminate, fmt.Sprintf("group %s %s: notice ended", p.Name, it.Reason), now); err != nil {
			return err
		}
	}
	return nil
}

// drainGroup terminates every member of a deleting group at once
// (deleting a group is the tenant's explicit order; there is no notice),
// and marks the group deleted once none is left.
func drainGroup(ctx context.Context, tx cloud.Tx, actor Actor, p *GroupPlan, now time.Time) error {
	for _, id := range p.Drain {
		in, err := tx.GetInstance(ctx, id)
		if err != nil {
			return err
		}
		if in.State == cloud.Terminating {
			continue
		}
		if _, err := Act(ctx, tx, actor, in, Terminate, "group "+p.Name+" deleted", now); err != nil {
			return err
		}
	}
	if !p.Deleted {
		return nil
	}
	cur, err := tx.GetGroup(ctx, p.GroupID)
	if err != nil {
		return err
	}
	if cur.State != cloud.GroupDeleting {
		return nil
	}
	cur.State, cur.Desired, cur.UpdatedAt = cloud.GroupDeleted, 0, now
	cur.Min = 0
	if err := writeGroup(ctx, tx, cur, cloud.GroupDeleting); err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroup, TenantID: cur.TenantID,
		Reason: "group " + p.Name + " deleted: no member left", Actor: actor.ID,
		Details: []byte(fmt.Sprintf(`{"group_id":%q}`, cur.ID))})
}

// PruneMetrics deletes, in one transaction of st, the metric points
// older than before, and returns how many it deleted.
func PruneMetrics(ctx context.Context, st cloud.Store, before time.Time) (int64, error) {
	var n int64
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		var err error
		n, err = tx.PruneMetrics(ctx, before)
		return err
	})
	return n, err
}
