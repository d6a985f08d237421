package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// Defaults of the group controller.
const (
	DefaultGroupInterval   = 10 * time.Second
	DefaultHistorySave     = 10 * time.Minute
	DefaultMetricRetention = time.Hour
	// DefaultNoticeSeconds is the scale-in notice of a group member when
	// its group sets none: the default spot reclaim notice.
	DefaultNoticeSeconds = int(DefaultNotice / time.Second)
	// maxDecisions bounds the decisions a group's status keeps.
	maxDecisions = 20
	// staleSample: a utilization sample older than this many intervals of
	// the agent's is no longer the member's load.
	staleSample = 2 * time.Minute
)

var groupsActor = service.Controller("groups")

// QuoteSource gives the group controller the market's view of each pool
// (the Market is one).
type QuoteSource interface {
	Quotes() map[cloud.Pool]PoolQuote
}

// Groups is the autoscaling group controller. Each round it reads the
// groups, their members and the metrics reported since the last round;
// folds the metrics into each group's bounded history; asks the pure
// planner (autoscale.PlanGroup) what to do; and carries the plan out
// through the domain services, one transaction per group: launches through
// service.LaunchGroupMember (so CreateInstance's quota and rules apply, with
// an idempotency key per launch), scale-in through
// service.NoticeGroupMember (the notice a spot reclaim gives), and the
// terminate at the notice's deadline through service.Act. It runs after
// the market in the leader's loop (it reads the market's quotes) and
// before the scheduler places what it launched.
type Groups struct {
	Store   cloud.Store
	Catalog *catalog.Catalog
	// Quotes is the spot market (nil: on-demand only, prices from the
	// price book).
	Quotes QuoteSource
	Now    func() time.Time
	Log    *slog.Logger
	// Every is the round's interval (DefaultGroupInterval when 0);
	// HistorySave how often each group's history is saved (its state
	// survives a leader change up to that); MetricRetention how long raw
	// metric points are kept in the store.
	Every           time.Duration
	HistorySave     time.Duration
	MetricRetention time.Duration

	runs      map[string]*groupRun
	groups    map[string]*cloud.Group
	members   map[string]*cloud.Instance
	watermark time.Time
	lastPrune time.Time
}

// groupRun is what the controller remembers of one group between rounds.
type groupRun struct {
	plan  *autoscale.GroupState
	hist  *autoscale.History
	saved time.Time
	// util is each member's latest sample.
	util map[string]*memberUtil
	// runningSince is when the controller first saw each member running.
	runningSince map[string]time.Time
	custom       map[string]float64
	// customAt is the time of each custom metric's latest point: the
	// rounds' reads overlap a little, and a point is folded in once.
	customAt map[string]time.Time
	// rounds counts the rounds that stepped the group.
	rounds int
}

type memberUtil struct {
	gpu, cpu       float64
	hasGPU, hasCPU bool
	at             time.Time
	idleSince      time.Time
}

// Name is the controller's name.
func (c *Groups) Name() string { return "groups" }

// Interval is how often the leader runs a round.
func (c *Groups) Interval() time.Duration {
	if c.Every > 0 {
		return c.Every
	}
	return DefaultGroupInterval
}

// Reconcile runs one round.
func (c *Groups) Reconcile(ctx context.Context) error { return c.Step(ctx) }

func (c *Groups) log() *slog.Logger {
	if c.Log != nil {
		return c.Log
	}
	return slog.Default()
}

// groupSnap is what one round reads, in one transaction.
type groupSnap struct {
	groups  []*cloud.Group
	members map[string][]*cloud.Instance
	points  []cloud.MetricPoint
	prices  *billing.PriceBook
}

// liveStates are the states of a member: everything but terminated.
var liveStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping,
	cloud.Stopped, cloud.Terminating, cloud.Failed, cloud.Lost}

// readChunk bounds the IDs of one re-read (an IN list).
const readChunk = 500

// read reads a round's snapshot in one transaction. Groups and members are
// cached between rounds: the round reads every row's ID and version and
// re-reads only the rows that changed, so that a quiet round over
// thousands of members reads no JSON.
func (c *Groups) read(ctx context.Context) (*groupSnap, error) {
	var s *groupSnap
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		s = &groupSnap{members: map[string][]*cloud.Instance{}}
		gf := cloud.GroupFilter{States: []cloud.GroupState{cloud.GroupActive, cloud.GroupDeleting}}
		gv, err := tx.GroupVersions(ctx, gf)
		if err != nil {
			return err
		}
		c.groups, err = refresh(c.groups, gv, func(ids []string) ([]*cloud.Group, error) {
			f := gf
			f.IDs = ids
			return tx.ListGroups(ctx, f)
		}, func(g *cloud.Group) (string, int64) { return g.ID, g.Version })
		if err != nil {
			return err
		}
		for _, v := range gv {
			if g := c.groups[v.ID]; g != nil {
				s.groups = append(s.groups, g)
			}
		}
		if len(s.groups) == 0 {
			c.members = nil
			return nil
		}
		mf := cloud.InstanceFilter{InGroup: true, States: liveStates}
		mv, err := tx.InstanceVersions(ctx, mf)
		if err != nil {
			return err
		}
		c.members, err = refresh(c.members, mv, func(ids []string) ([]*cloud.Instance, error) {
			f := mf
			f.IDs = ids
			return tx.ListInstances(ctx, f)
		}, func(in *cloud.Instance) (string, int64) { return in.ID, in.Version })
		if err != nil {
			return err
		}
		for _, v := range mv {
			if in := c.members[v.ID]; in != nil {
				s.members[in.GroupID] = append(s.members[in.GroupID], in)
			}
		}
		if s.points, err = tx.ListMetrics(ctx, cloud.MetricFilter{After: c.watermark}); err != nil {
			return err
		}
		ps, err := tx.ListPrices(ctx, cloud.PriceFilter{Kind: cloud.PriceCompute})
		if err != nil {
			return err
		}
		s.prices = billing.NewPriceBook(ps, nil)
		return nil
	})
	return s, err
}

// refresh brings a cache of rows up to the versions listed: rows no longer
// listed leave it, rows whose version moved are re-read (by ID, in chunks).
// A row that left the selection between the two reads is simply absent.
func refresh[T any](cache map[string]*T, vs []cloud.RowVersion, get func(ids []string) ([]*T, error),
	key func(*T) (string, int64)) (map[string]*T, error) {
	next := make(map[string]*T, len(vs))
	var stale []string
	for _, v := range vs {
		if row, ok := cache[v.ID]; ok {
			if _, ver := key(row); ver == v.Version {
				next[v.ID] = row
				continue
			}
		}
		stale = append(stale, v.ID)
	}
	for len(stale) > 0 {
		n := min(len(stale), readChunk)
		rows, err := get(stale[:n])
		if err != nil {
			return cache, err
		}
		for _, row := range rows {
			id, _ := key(row)
			next[id] = row
		}
		stale = stale[n:]
	}
	return next, nil
}

// Step runs one round.
func (c *Groups) Step(ctx context.Context) error {
	now := orNow(c.Now)()
	if c.runs == nil {
		c.runs = map[string]*groupRun{}
	}
	s, err := c.read(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, g := range s.groups {
		live[g.ID] = true
	}
	for id := range c.runs {
		if !live[id] {
			delete(c.runs, id)
		}
	}
	c.load(ctx, s.groups, now)
	c.ingest(s)
	var quotes map[cloud.Pool]PoolQuote
	if c.Quotes != nil {
		quotes = c.Quotes.Quotes()
	}
	var firstErr error
	for _, g := range s.groups {
		if err := c.stepGroup(ctx, g, s, quotes, now); err != nil {
			c.log().Warn("group step", "group", g.ID, "err", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("group %s: %w", g.ID, err)
			}
		}
	}
	if now.Sub(c.lastPrune) >= time.Minute {
		c.lastPrune = now
		keep := c.MetricRetention
		if keep <= 0 {
			keep = DefaultMetricRetention
		}
		if err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
			_, err := tx.PruneMetrics(ctx, now.Add(-keep))
			return err
		}); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// ingest folds the metric points read since the last round into the
// members' latest samples and the groups' custom metrics.
func (c *Groups) ingest(s *groupSnap) {
	owner := map[string]string{}
	for gid, ms := range s.members {
		for _, in := range ms {
			owner[in.ID] = gid
		}
	}
	for _, p := range s.points {
		if p.At.After(c.watermark) {
			c.watermark = p.At
		}
		gid := p.GroupID
		if p.InstanceID != "" {
			if o, ok := owner[p.InstanceID]; ok {
				gid = o
			}
		}
		r := c.runs[gid]
		if gid == "" || r == nil && !c.known(s, gid) {
			continue
		}
		if r == nil {
			r = c.run(gid)
		}
		switch {
		case p.InstanceID != "":
			u := r.util[p.InstanceID]
			if u == nil {
				u = &memberUtil{}
				r.util[p.InstanceID] = u
			}
			if p.At.Before(u.at) {
				continue
			}
			u.at = p.At
			switch p.Name {
			case cloud.MetricGPUUtilization:
				u.gpu, u.hasGPU = p.Value, true
			case cloud.MetricCPUUtilization:
				u.cpu, u.hasCPU = p.Value, true
			}
		default:
			if !p.At.After(r.customAt[p.Name]) {
				continue
			}
			r.customAt[p.Name] = p.At
			r.custom[p.Name] = p.Value
			r.hist.Add(cloud.CustomMetricPrefix+p.Name, p.At, p.Value)
		}
	}
	// The watermark may not pass points a slower transaction has yet to
	// commit with an earlier time; a small overlap costs a re-read of a
	// few points, which the sample times make harmless.
	c.watermark = c.watermark.Add(-5 * time.Second)
}

func (c *Groups) known(s *groupSnap, gid string) bool {
	for _, g := range s.groups {
		if g.ID == gid {
			return true
		}
	}
	return false
}

func (c *Groups) run(gid string) *groupRun {
	if c.runs == nil {
		c.runs = map[string]*groupRun{}
	}
	r := c.runs[gid]
	if r == nil {
		r = &groupRun{plan: autoscale.NewGroupState(), hist: autoscale.NewHistory(), util: map[string]*memberUtil{},
			runningSince: map[string]time.Time{}, custom: map[string]float64{}, customAt: map[string]time.Time{}}
		c.runs[gid] = r
	}
	return r
}

// load restores the histories an earlier leader saved of the groups this
// controller has not met yet, in one transaction, before the round's
// metrics are folded in.
func (c *Groups) load(ctx context.Context, groups []*cloud.Group, now time.Time) {
	var todo []*cloud.Group
	for _, g := range groups {
		if c.runs[g.ID] == nil {
			todo = append(todo, g)
		}
	}
	if len(todo) == 0 {
		return
	}
	docs := map[string][]byte{}
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		clear(docs)
		for _, g := range todo {
			doc, err := tx.GroupHistory(ctx, g.ID)
			if cloud.IsNotFound(err) {
				continue
			}
			if err != nil {
				return err
			}
			docs[g.ID] = doc
		}
		return nil
	})
	if err != nil {
		c.log().Warn("group histories not restored", "err", err)
	}
	for _, g := range todo {
		r := c.run(g.ID)
		r.saved = now
		if doc, ok := docs[g.ID]; ok {
			if err := r.hist.UnmarshalBinary(doc); err != nil {
				c.log().Warn("group history not restored", "group", g.ID, "err", err)
				r.hist = autoscale.NewHistory()
			}
		}
	}
}

func (c *Groups) save(ctx context.Context, r *groupRun, gid string, now time.Time) error {
	every := c.HistorySave
	if every <= 0 {
		every = DefaultHistorySave
	}
	if now.Sub(r.saved) < every {
		return nil
	}
	doc, err := r.hist.MarshalBinary()
	if err != nil {
		return err
	}
	r.saved = now
	return c.Store.Tx(ctx, func(tx cloud.Tx) error { return tx.PutGroupHistory(ctx, gid, doc) })
}

func (c *Groups) stepGroup(ctx context.Context, g *cloud.Group, s *groupSnap, quotes map[cloud.Pool]PoolQuote, now time.Time) error {
	r := c.run(g.ID)
	fresh := r.rounds == 0
	r.rounds++
	members := s.members[g.ID]
	if g.State == cloud.GroupDeleting {
		return c.drain(ctx, g, members, now)
	}
	// Members that failed or were lost leave the group: terminated, so
	// that the plan replaces them.
	// A member that stopped (its workload exited) is replaced too, but
	// only failures count towards the relaunch backoff.
	var failed []*cloud.Instance
	var kept []*cloud.Instance
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
	in := autoscale.GroupInput{Now: now, Group: g, Failed: nfailed, History: r.hist}
	warmup := time.Duration(g.Timing.WarmupSeconds) * time.Second
	if g.Timing.WarmupSeconds == 0 {
		warmup = 300 * time.Second
	}
	idle := g.IdleRelease
	var loadGPU, loadCPU float64
	ready := 0
	seen := map[string]bool{}
	for _, m := range kept {
		seen[m.ID] = true
		mb := autoscale.Member{ID: m.ID, Offering: m.Offering, Zone: memberZone(m), Market: m.Market, State: m.State,
			CreatedAt: m.CreatedAt, Held: m.ScaleIn.Held()}
		if m.State == cloud.Stopping || m.State == cloud.Terminating ||
			(m.Interruption != nil && m.Interruption.Action != "") {
			mb.Leaving = true
		}
		if m.Interruption != nil && m.Interruption.Action == "" && m.Interruption.Reason == cloud.ReclaimRebalance {
			mb.Rebalance = true
		}
		if m.State == cloud.Running {
			since, ok := r.runningSince[m.ID]
			if !ok {
				since = now
				if fresh {
					// A new leader cannot tell how long a running member
					// has run; the last update is the best bound it has.
					since = m.UpdatedAt
				}
				r.runningSince[m.ID] = since
			}
			mb.RunningSince = since
		} else {
			delete(r.runningSince, m.ID)
		}
		if u := r.util[m.ID]; u != nil && now.Sub(u.at) <= staleSample && m.State == cloud.Running {
			mb.GPU, mb.CPU, mb.HasUtil = u.gpu, u.cpu, u.hasGPU || u.hasCPU
			if idle != nil && u.hasGPU && u.gpu < idle.Threshold {
				if u.idleSince.IsZero() {
					u.idleSince = u.at
				}
			} else {
				u.idleSince = time.Time{}
			}
			mb.IdleSince = u.idleSince
			if !mb.Leaving && !mb.RunningSince.IsZero() && now.Sub(mb.RunningSince) >= warmup {
				loadGPU += u.gpu
				loadCPU += u.cpu
				ready++
			}
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
	in.Pools = pools(g, s.prices, quotes, now)
	plan := autoscale.PlanGroup(r.plan, in)
	if err := c.apply(ctx, g, kept, failed, plan, now); err != nil {
		return err
	}
	if err := c.enforce(ctx, g, kept, now); err != nil {
		return err
	}
	return c.save(ctx, r, g.ID, now)
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

// apply carries out a plan in one transaction on the group's current
// version: the failed members terminated, the launches, the scale-in
// notices, and the group's new desired capacity, status and event. A
// stale group (the tenant changed it meanwhile) is left for the next
// round.
func (c *Groups) apply(ctx context.Context, g *cloud.Group, members, failed []*cloud.Instance, plan autoscale.Plan, now time.Time) error {
	held := budgetHold(g, plan)
	if len(failed) == 0 && len(plan.Launch) == 0 && len(plan.Release) == 0 && !plan.Changed && !held &&
		backoffEqual(g.Status.Backoff, plan.Backoff) && plan.Min == nil && plan.Max == nil {
		return nil
	}
	byID := map[string]*cloud.Instance{}
	for _, m := range members {
		byID[m.ID] = m
	}
	notice := time.Duration(g.Timing.NoticeSeconds) * time.Second
	if g.Timing.NoticeSeconds == 0 {
		notice = time.Duration(DefaultNoticeSeconds) * time.Second
	}
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		cur, err := tx.GetGroup(ctx, g.ID)
		if err != nil {
			return err
		}
		if cur.Version != g.Version || cur.State != cloud.GroupActive {
			return nil // changed meanwhile: plan again next round
		}
		var msgs []string
		for _, f := range failed {
			in, err := tx.GetInstance(ctx, f.ID)
			if err != nil {
				return err
			}
			why := fmt.Sprintf("group %s replaces its %s member", g.Name, in.State)
			if in.Reason != "" {
				why += " (" + in.Reason + ")"
			}
			if _, err := service.Act(ctx, tx, groupsActor, in, service.Terminate, why, now); err != nil {
				return err
			}
		}
		seq := cur.Status.LaunchSeq
		launched := 0
		for _, l := range plan.Launch {
			seq++
			_, err := service.LaunchGroupMember(ctx, tx, c.Catalog, cur,
				service.LaunchSpec{Offering: l.Offering, Zone: l.Zone, Market: l.Market, Seq: seq}, groupsActor.ID, now)
			if err != nil {
				if service.RefusedLaunch(err) {
					// A launch the rules refuse (quota, a volume) is the
					// tenant's to fix: say so, keep the rest of the plan.
					msgs = append(msgs, "launch refused: "+service.ErrorMessage(err))
					seq--
					continue
				}
				return err
			}
			launched++
		}
		for _, rel := range plan.Release {
			in, ok := byID[rel.InstanceID]
			if !ok {
				continue
			}
			fresh, err := tx.GetInstance(ctx, in.ID)
			if err != nil {
				return err
			}
			if fresh.ScaleIn.Held() {
				continue // locked since the snapshot: never scale it in
			}
			if fresh.State == cloud.Pending {
				// Nothing runs yet: no notice to give.
				if _, err := service.Act(ctx, tx, groupsActor, fresh, service.Terminate,
					"group "+g.Name+" scale-in ("+rel.Reason+") before it ran", now); err != nil {
					return err
				}
				continue
			}
			if err := service.NoticeGroupMember(ctx, tx, fresh, rel.Reason, notice, groupsActor.ID, now); err != nil {
				return err
			}
		}
		cur.Status.LaunchSeq = seq
		cur.Status.Backoff = plan.Backoff
		if plan.Min != nil {
			cur.Min = *plan.Min
		}
		if plan.Max != nil {
			cur.Max = *plan.Max
		}
		if plan.Changed || plan.Min != nil || plan.Max != nil || held {
			cur.Desired = plan.Desired
			if plan.Changed || plan.Min != nil || plan.Max != nil {
				cur.Status.LastActionAt = now // a budget hold is no scaling action
			}
			d := plan.Decision
			d.Time = now
			cur.Status.Decisions = append(cur.Status.Decisions, d)
			if n := len(cur.Status.Decisions); n > maxDecisions {
				cur.Status.Decisions = slices.Clone(cur.Status.Decisions[n-maxDecisions:])
			}
			// The event carries the decision's inputs: the metric values,
			// the forecast and the limit.
			details, err := json.Marshal(struct {
				GroupID string `json:"group_id"`
				cloud.GroupDecision
			}{g.ID, d})
			if err != nil {
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroupScaling, TenantID: g.TenantID,
				Reason: fmt.Sprintf("group %s: %d -> %d: %s", g.Name, d.From, d.To, d.Reason), Actor: groupsActor.ID,
				Details: details}); err != nil {
				return err
			}
		}
		switch {
		case len(msgs) > 0:
			cur.Status.Message = strings.Join(msgs, "; ")
		case plan.Decision.Limit != "":
			cur.Status.Message = plan.Decision.Reason
		case launched > 0 || len(plan.Release) > 0:
			cur.Status.Message = ""
		}
		if cur.Desired < cur.Min {
			cur.Desired = cur.Min
		}
		if cur.Desired > cur.Max {
			cur.Desired = cur.Max
		}
		cur.UpdatedAt = now
		return tx.UpdateGroup(ctx, cur)
	})
	return ignoreConflict(err)
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

// enforce terminates the members whose scale-in notice has run out, and
// withdraws a scale-in notice from a member that took a completion lock
// (or was protected) before its deadline: a held instance is never scaled
// in. Spot reclaims are the scheduler's to enforce and are left alone.
func (c *Groups) enforce(ctx context.Context, g *cloud.Group, members []*cloud.Instance, now time.Time) error {
	var due, withdraw []string
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
	if len(due) == 0 && len(withdraw) == 0 {
		return nil
	}
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		for _, id := range withdraw {
			in, err := tx.GetInstance(ctx, id)
			if err != nil {
				return err
			}
			if in.Interruption == nil || !cloud.IsGroupNotice(in.Interruption.Reason) || !in.ScaleIn.Held() {
				continue
			}
			if err := service.WithdrawGroupNotice(ctx, tx, in, groupsActor.ID, now); err != nil {
				return err
			}
		}
		for _, id := range due {
			in, err := tx.GetInstance(ctx, id)
			if err != nil {
				return err
			}
			it := in.Interruption
			if it == nil || it.Action == "" || now.Before(it.Deadline) || in.ScaleIn.Held() {
				continue
			}
			if _, err := service.Act(ctx, tx, groupsActor, in, service.Terminate,
				fmt.Sprintf("group %s %s: notice ended", g.Name, it.Reason), now); err != nil {
				return err
			}
		}
		return nil
	})
	return ignoreConflict(err)
}

// drain terminates every member of a deleting group at once (deleting a
// group is the tenant's explicit order; there is no notice), and marks the
// group deleted once none is left.
func (c *Groups) drain(ctx context.Context, g *cloud.Group, members []*cloud.Instance, now time.Time) error {
	err := c.Store.Tx(ctx, func(tx cloud.Tx) error {
		for _, m := range members {
			in, err := tx.GetInstance(ctx, m.ID)
			if err != nil {
				return err
			}
			if in.State == cloud.Terminating {
				continue
			}
			if _, err := service.Act(ctx, tx, groupsActor, in, service.Terminate, "group "+g.Name+" deleted", now); err != nil {
				return err
			}
		}
		if len(members) > 0 {
			return nil
		}
		cur, err := tx.GetGroup(ctx, g.ID)
		if err != nil {
			return err
		}
		if cur.State != cloud.GroupDeleting {
			return nil
		}
		cur.State, cur.Desired, cur.UpdatedAt = cloud.GroupDeleted, 0, now
		cur.Min = 0
		if err := tx.UpdateGroup(ctx, cur); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventGroup, TenantID: g.TenantID,
			Reason: "group " + g.Name + " deleted: no member left", Actor: groupsActor.ID,
			Details: []byte(fmt.Sprintf(`{"group_id":%q}`, g.ID))})
	})
	return ignoreConflict(err)
}
