package controller

import (
	"context"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// stepGroup plans one group's round and applies the plan
// (service.ApplyGroupPlan, one transaction). A group that changed since
// the snapshot is left for the next round.
func (c *Groups) stepGroup(ctx context.Context, g *cloud.Group, s *groupSnap, quotes map[cloud.Pool]PoolQuote, now time.Time) error {
	p, err := c.planGroup(g, s, quotes, now)
	if err != nil {
		return err
	}
	return ignoreConflict(service.ApplyGroupPlan(ctx, c.Store, c.Catalog, groupsActor, p, now))
}

// planGroup plans one group's round over the snapshot, with no write: a
// deleting group is drained; an active one is sized by the planner
// (autoscale.PlanGroup), its due scale-in notices enforced, and its
// history saved when due.
func (c *Groups) planGroup(g *cloud.Group, s *groupSnap, quotes map[cloud.Pool]PoolQuote, now time.Time) (*service.GroupPlan, error) {
	r := c.run(g.ID)
	fresh := r.rounds == 0
	r.rounds++
	members := s.members[g.ID]
	p := &service.GroupPlan{GroupID: g.ID, Name: g.Name, Version: g.Version}
	if g.State == cloud.GroupDeleting {
		for _, m := range members {
			p.Drain = append(p.Drain, m.ID)
		}
		p.Deleted = len(members) == 0
		return p, nil
	}
	// Members that failed or were lost leave the group: terminated, so
	// that the plan replaces them.
	// A member that stopped (its workload exited) is replaced too, but
	// only failures count towards the relaunch backoff.
	var failed, kept []*cloud.Instance
	nfailed := 0
	for _, in := range members {
		switch in.State {
		case cloud.Failed, cloud.Lost:
			nfailed++
			failed = append(failed, in)
		case cloud.Stopped:
			failed = append(failed, in)
		default:
			kept = append(kept, in)
		}
	}
	in := c.groupInput(r, g, kept, fresh, now)
	in.Failed = nfailed
	in.Pools = pools(g, s.prices, quotes, now)
	p.Scale = scaling(g, kept, failed, autoscale.PlanGroup(r.plan, in))
	p.Withdraw, p.Due = notices(kept, now)
	doc, err := c.history(r, now)
	if err != nil {
		return nil, err
	}
	p.History = doc
	return p, nil
}

// groupInput is the planner's input for group g whose members (but the
// failed ones) are kept: each member's state and latest utilization, and
// the group's load. It adds the round's load to the group's history and
// forgets the members that left.
func (c *Groups) groupInput(r *groupRun, g *cloud.Group, kept []*cloud.Instance, fresh bool, now time.Time) autoscale.GroupInput {
	in := autoscale.GroupInput{Now: now, Group: g, History: r.hist}
	warmup := time.Duration(g.Timing.WarmupSeconds) * time.Second
	if g.Timing.WarmupSeconds == 0 {
		warmup = 300 * time.Second
	}
	var loadGPU, loadCPU float64
	ready := 0
	seen := map[string]bool{}
	for _, m := range kept {
		seen[m.ID] = true
		mb, sampled := r.member(m, g.IdleRelease, fresh, now)
		if sampled && !mb.Leaving && !mb.RunningSince.IsZero() && now.Sub(mb.RunningSince) >= warmup {
			loadGPU += mb.GPU
			loadCPU += mb.CPU
			ready++
		}
		in.Members = append(in.Members, mb)
	}
	for id := range r.util {
		if !seen[id] {
			delete(r.util, id)
		}
	}
	for id := range r.runningSince {
		if !seen[id] {
			delete(r.runningSince, id)
		}
	}
	// With members but none warm, nothing was measured: a load of zero
	// would pull the minute's mean down.
	in.Current = map[string]float64{"ready": float64(ready)}
	if ready > 0 || len(kept) == 0 {
		r.hist.Add("load:gpu", now, loadGPU)
		r.hist.Add("load:cpu", now, loadCPU)
		in.Current["load:gpu"], in.Current["load:cpu"] = loadGPU, loadCPU
	}
	r.hist.Add("ready", now, float64(ready))
	for name, v := range r.custom {
		in.Current[cloud.CustomMetricPrefix+name] = v
	}
	return in
}

// member is the planner's view of member m: its state, whether it is
// leaving or recommended to rebalance, since when it runs (as this
// controller saw it; a fresh controller takes the last update), and its
// latest utilization while running, with since when it is idle by the
// group's idle release. sampled reports whether it has a recent sample.
func (r *groupRun) member(m *cloud.Instance, idle *cloud.IdleRelease, fresh bool, now time.Time) (mb autoscale.Member, sampled bool) {
	mb = autoscale.Member{ID: m.ID, Offering: m.Offering, Zone: memberZone(m), Market: m.Market, State: m.State,
		CreatedAt: m.CreatedAt, Held: m.ScaleIn.Held()}
	if m.State == cloud.Stopping || m.State == cloud.Terminating ||
		(m.Interruption != nil && m.Interruption.Action != "") {
		mb.Leaving = true
	}
	if m.Interruption != nil && m.Interruption.Action != "" {
		mb.LeavingUntil = m.Interruption.Deadline
	}
	if m.Interruption != nil && m.Interruption.Action == "" && m.Interruption.Reason == cloud.ReclaimRebalance {
		mb.Rebalance = true
	}
	if m.State != cloud.Running {
		delete(r.runningSince, m.ID)
		return mb, false
	}
	since, ok := r.runningSince[m.ID]
	if !ok {
		since = now
		if fresh {
			// A new leader cannot tell how long a running member has
			// run; the last update is the best bound it has.
			since = m.UpdatedAt
		}
		r.runningSince[m.ID] = since
	}
	mb.RunningSince = since
	u := r.util[m.ID]
	if u == nil || now.Sub(u.at) > staleSample {
		return mb, false
	}
	mb.GPU, mb.CPU, mb.HasUtil = u.gpu, u.cpu, u.hasGPU || u.hasCPU
	if idle != nil && u.hasGPU && u.gpu < idle.Threshold {
		if u.idleSince.IsZero() {
			u.idleSince = u.at
		}
	} else {
		u.idleSince = time.Time{}
	}
	mb.IdleSince = u.idleSince
	return mb, true
}

// scaling turns the planner's plan into the sizing part of the group's
// plan: the failed members replaced, the launches, the releases of kept
// members, and the new desired capacity, bounds, decision and backoff;
// nil when it changes nothing.
func scaling(g *cloud.Group, kept, failed []*cloud.Instance, plan autoscale.Plan) *service.GroupScale {
	held := budgetHold(g, plan)
	if len(failed) == 0 && len(plan.Launch) == 0 && len(plan.Release) == 0 && !plan.Changed && !held &&
		backoffEqual(g.Status.Backoff, plan.Backoff) && plan.Min == nil && plan.Max == nil {
		return nil
	}
	notice := time.Duration(g.Timing.NoticeSeconds) * time.Second
	if g.Timing.NoticeSeconds == 0 {
		notice = time.Duration(DefaultNoticeSeconds) * time.Second
	}
	bounds := plan.Min != nil || plan.Max != nil
	sc := &service.GroupScale{Notice: notice, Desired: plan.Desired, Min: plan.Min, Max: plan.Max,
		Decision: plan.Decision, Record: plan.Changed || bounds || held, Action: plan.Changed || bounds, Backoff: plan.Backoff}
	for _, f := range failed {
		sc.Replace = append(sc.Replace, f.ID)
	}
	for _, l := range plan.Launch {
		sc.Launch = append(sc.Launch, service.GroupLaunch{Offering: l.Offering, Zone: l.Zone, Market: l.Market})
	}
	isKept := make(map[string]bool, len(kept))
	for _, m := range kept {
		isKept[m.ID] = true
	}
	for _, rel := range plan.Release {
		if isKept[rel.InstanceID] {
			sc.Release = append(sc.Release, service.GroupRelease{InstanceID: rel.InstanceID, Reason: rel.Reason})
		}
	}
	return sc
}

// budgetHold reports whether a plan that leaves the desired capacity as
// it is was cut by the budget (the policies ask for more than the budget
// pays for), and the group's newest decision does not say so yet. Such a
// hold is recorded once, as a decision and a group.scaling event, with the
// budget in the group's message: a plan that changes nothing is otherwise
// not written, and describe would not tell why a loaded group below its max
// does not grow.
func budgetHold(g *cloud.Group, plan autoscale.Plan) bool {
	if plan.Changed || plan.Decision.Limit != "budget" {
		return false
	}
	if n := len(g.Status.Decisions); n > 0 {
		last := g.Status.Decisions[n-1]
		if last.Limit == "budget" && last.To == plan.Desired {
			return false
		}
	}
	return true
}

func backoffEqual(a, b *cloud.GroupBackoff) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// notices finds the members whose scale-in notice is to be withdrawn (they
// took a completion lock or were protected before its deadline: a held
// instance is never scaled in) and those whose notice has run out (to
// terminate). Spot reclaims are the scheduler's to enforce and are left
// alone.
func notices(members []*cloud.Instance, now time.Time) (withdraw, due []string) {
	for _, m := range members {
		it := m.Interruption
		if it == nil || it.Action == "" || !cloud.IsGroupNotice(it.Reason) {
			continue
		}
		if m.State == cloud.Stopping || m.State == cloud.Terminating {
			continue
		}
		switch {
		case m.ScaleIn.Held():
			withdraw = append(withdraw, m.ID)
		case !now.Before(it.Deadline):
			due = append(due, m.ID)
		}
	}
	return withdraw, due
}

// history is the group's history document when it is due to be saved
// (every HistorySave; its state survives a leader change up to that), or
// nil.
func (c *Groups) history(r *groupRun, now time.Time) ([]byte, error) {
	every := c.HistorySave
	if every <= 0 {
		every = DefaultHistorySave
	}
	if now.Sub(r.saved) < every {
		return nil, nil
	}
	doc, err := r.hist.MarshalBinary()
	if err != nil {
		return nil, err
	}
	r.saved = now
	return doc, nil
}

// memberZone is where a member runs, or the zone it asked for.
func memberZone(in *cloud.Instance) string {
	if in.Zone != "" {
		return in.Zone
	}
	if len(in.Zones) == 1 {
		return in.Zones[0]
	}
	return ""
}

// pools lists the pools a group may launch into: its offerings in its
// zones (every zone the market or price book knows when it names none),
// with the prices and room the market quoted.
func pools(g *cloud.Group, prices *billing.PriceBook, quotes map[cloud.Pool]PoolQuote, now time.Time) []autoscale.Pool {
	var out []autoscale.Pool
	for _, off := range g.Template.Offerings {
		var zones []string
		if len(g.Template.Zones) > 0 {
			zones = g.Template.Zones
		} else {
			for p := range quotes {
				if p.Offering == off {
					zones = append(zones, p.Zone)
				}
			}
			sort.Strings(zones)
			if len(zones) == 0 {
				zones = []string{""}
			}
		}
		for _, z := range zones {
			p := autoscale.Pool{Offering: off, Zone: z, FreeOnDemand: -1, FreeSpot: -1}
			if od, ok := prices.Compute(off, z, now); ok {
				p.OnDemand = od
			}
			if q, ok := quotes[cloud.Pool{Offering: off, Zone: z}]; ok {
				if q.OnDemand > 0 {
					p.OnDemand = q.OnDemand
				}
				p.Spot = q.Spot
				p.FreeOnDemand, p.FreeSpot = q.Free, q.Free
				p.ReclaimRate = float64(q.Risk) / 10_000
			} else if quotes != nil {
				// The market knows no host of this offering in this zone.
				p.FreeOnDemand, p.FreeSpot = 0, 0
			}
			out = append(out, p)
		}
	}
	return out
}
