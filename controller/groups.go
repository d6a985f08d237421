package controller

import (
	"context"
	"fmt"
	"log/slog"
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
// planner (autoscale.PlanGroup) what to do; and turns its answer into a
// service.GroupPlan per group, which it writes nothing to compute:
// service.ApplyGroupPlan carries each out in one transaction (launches
// through service.LaunchGroupMember, so CreateInstance's quota and rules
// apply, with an idempotency key per launch; scale-in through
// service.NoticeGroupMember, the notice a spot reclaim gives; the
// terminate at the notice's deadline through service.Act). It runs after
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
var liveStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping,
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
		if _, err := service.PruneMetrics(ctx, c.Store, now.Add(-keep)); err != nil && firstErr == nil {
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
