package controller

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/spot"
)

// Defaults of the spot market controller.
const (
	DefaultMarketInterval = time.Second
	DefaultClearInterval  = 10 * time.Second
	DefaultKeepFailed     = 10 * time.Minute
)

// SpotScheduler is what the market needs of the scheduler: a read-only
// view of its fleet, and a way to tell it the spot prices and where each
// pending spot instance may go. *Scheduler implements it.
type SpotScheduler interface {
	FleetView() FleetView
	SetSpotHints(SpotHints)
}

// SpotMarket runs the spot market around the pure core of package spot: it
// clears each pool's price from supply (the scheduler's fleet) and demand
// (instances and reservations), records every change, reclaims spot
// instances whose max price the price passed, recommends rebalancing when a
// pool's risk rises, keeps pending spot instances to the zones within their
// max price, and drives spot requests: one-time requests close when their
// instance ends, persistent ones relaunch after a reclaim (in the first
// pool with room, backups included, with the same volumes), and a pending
// launch moves to a backup pool that has room. Each round it plans all of
// that over a snapshot, writing nothing (a service.MarketPlan), and
// service.ApplyMarketPlan applies the plan in one transaction: instances
// move only through service.MoveInstance and launch only through
// service.LaunchSpot (quota and volume rule included); a relaunch the
// service refuses (a quota, a deleted volume) is recorded on the request,
// which stays open and is tried again on later rounds.
//
// It reads the scheduler's fleet through Sched.FleetView and tells the
// scheduler what it decided through Sched.SetSpotHints, nothing else. It
// runs in the scheduler's goroutine, before the scheduler's Step (the
// leader's Loop lists it first), from the second round on: the first
// builds the fleet. A pending spot instance is placed only once the market
// has seen it.
type SpotMarket struct {
	Store   cloud.Store
	Sched   SpotScheduler
	Catalog *catalog.Catalog
	Config  spot.Config
	// ClearInterval is how often prices are cleared; KeepFailed how long
	// a failed spot instance is kept for inspection before its persistent
	// request relaunches.
	ClearInterval time.Duration
	KeepFailed    time.Duration
	// Every is how often the leader runs a round (Interval); 0 is
	// DefaultMarketInterval. Prices clear every ClearInterval regardless.
	Every time.Duration
	Now   func() time.Time
	Log   *slog.Logger
	// The metrics' hooks, each called (when set) once what it counts is
	// committed: Reclaimed with a reason (cloud.ReclaimPrice: notices for
	// instances whose max price the price passed; cloud.ReclaimRebalance:
	// rebalance recommendations) and how many spot instances got one;
	// Relaunched with how many instances spot requests launched again
	// (see drive); Cleared after every clearing of the prices that
	// recorded them, with the wall-clock time it took.
	Reclaimed  func(reason string, n int)
	Relaunched func(n int)
	Cleared    func(took time.Duration)

	last      map[cloud.Pool]money.Micros
	lastClear time.Time
	hosts     int
	supply    map[cloud.Pool]spot.Supply
	// prices is m.last as last given to the scheduler (a copy: the
	// scheduler keeps it).
	prices map[cloud.Pool]money.Micros
	// quotes is what Quotes returns, made at each clearing.
	quotes atomic.Pointer[map[cloud.Pool]PoolQuote]
}

// NewSpotMarket returns a market controller with the default configuration,
// for sched's fleet and catalog.
func NewSpotMarket(st cloud.Store, sched *Scheduler) *SpotMarket {
	return &SpotMarket{Store: st, Sched: sched, Catalog: sched.Catalog, Config: spot.DefaultConfig(), ClearInterval: DefaultClearInterval,
		KeepFailed: DefaultKeepFailed, Now: time.Now, Log: slog.Default()}
}

// Name is the market's name as a Controller.
func (m *SpotMarket) Name() string { return "market" }

// Interval is how often the leader runs a round: Every, or
// DefaultMarketInterval.
func (m *SpotMarket) Interval() time.Duration {
	if m.Every > 0 {
		return m.Every
	}
	return DefaultMarketInterval
}

// Reconcile runs one Step, as a Controller.
func (m *SpotMarket) Reconcile(ctx context.Context) error { return m.Step(ctx) }

// marketSnap is what one market step reads.
type marketSnap struct {
	prices   *billing.PriceBook
	requests map[string]*cloud.SpotRequest
	spot     []*cloud.Instance // non-terminated spot instances
	pending  []*cloud.Instance // pending on-demand instances
	// ended holds the terminated instances of the live requests.
	ended map[string]*cloud.Instance
	// last is the latest recorded price of each pool, read on the first
	// round only (nil afterwards: the market keeps it).
	last map[cloud.Pool]money.Micros
}

// instance is the instance a request names, if the snapshot has it.
func (ms *marketSnap) instance(byID map[string]*cloud.Instance, r *cloud.SpotRequest) *cloud.Instance {
	if in := byID[r.InstanceID]; in != nil {
		return in
	}
	return ms.ended[r.InstanceID]
}

func (m *SpotMarket) read(ctx context.Context) (*marketSnap, error) {
	var ms *marketSnap
	err := m.Store.Tx(ctx, func(tx cloud.Tx) error {
		ms = &marketSnap{requests: map[string]*cloud.SpotRequest{}, ended: map[string]*cloud.Instance{}}
		ps, err := tx.ListPrices(ctx, cloud.PriceFilter{Kind: cloud.PriceCompute})
		if err != nil {
			return err
		}
		ms.prices = billing.NewPriceBook(ps, nil)
		rs, err := tx.ListSpotRequests(ctx, cloud.SpotRequestFilter{States: []cloud.SpotRequestState{cloud.SpotOpen, cloud.SpotActive, cloud.SpotDisabled}})
		if err != nil {
			return err
		}
		for _, r := range rs {
			ms.requests[r.ID] = r
		}
		live := []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Paused, cloud.Stopping,
			cloud.Terminating, cloud.Stopped, cloud.Failed, cloud.Lost}
		if ms.spot, err = tx.ListInstances(ctx, cloud.InstanceFilter{Market: cloud.MarketSpot, States: live}); err != nil {
			return err
		}
		if ms.pending, err = tx.ListInstances(ctx, cloud.InstanceFilter{Market: cloud.MarketOnDemand, States: []cloud.State{cloud.Pending}}); err != nil {
			return err
		}
		if err := ms.readEnded(ctx, tx); err != nil {
			return err
		}
		if m.last == nil {
			latest, err := tx.LatestSpotPrices(ctx)
			if err != nil {
				return err
			}
			ms.last = map[cloud.Pool]money.Micros{}
			for _, p := range latest {
				ms.last[p.Pool] = p.Price
			}
		}
		return nil
	})
	return ms, err
}

// readEnded reads, by ID in chunks, the instances of the live requests
// that are not among the live spot instances: the ones that ended.
func (ms *marketSnap) readEnded(ctx context.Context, tx cloud.Tx) error {
	live := make(map[string]bool, len(ms.spot))
	for _, in := range ms.spot {
		live[in.ID] = true
	}
	var ids []string
	for _, id := range sortedKeys(ms.requests) {
		if r := ms.requests[id]; r.InstanceID != "" && !live[r.InstanceID] {
			ids = append(ids, r.InstanceID)
		}
	}
	for len(ids) > 0 {
		n := min(len(ids), readChunk)
		ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{IDs: ids[:n]})
		if err != nil {
			return err
		}
		for _, in := range ins {
			ms.ended[in.ID] = in
		}
		ids = ids[n:]
	}
	return nil
}

// Step runs one round of the market: it reads a snapshot, plans the round
// over it (plan: no write), applies the plan in one transaction
// (service.ApplyMarketPlan), and then tells the scheduler the prices and
// gates. The scheduler's fleet must be built (run Scheduler.Step first);
// until it is, Step does nothing.
func (m *SpotMarket) Step(ctx context.Context) error {
	view := m.Sched.FleetView()
	if !view.Built() {
		return nil
	}
	now := m.Now()
	ms, err := m.read(ctx)
	if err != nil {
		return err
	}
	if ms.last != nil {
		m.last = ms.last
	}
	// Clear on the interval, and at once when hosts come or go, so that a
	// new host's pools get a price without waiting.
	// (Never twice at one instant: a pool has one price per time.)
	hosts := view.Hosts()
	clearing := m.supply == nil || (hosts != m.hosts && now.After(m.lastClear)) || now.Sub(m.lastClear) >= m.interval()
	rd := m.plan(view, ms, now, clearing)
	res, err := service.ApplyMarketPlan(ctx, m.Store, m.catalog(), service.Controller(marketActor), &rd.plan, now)
	if err != nil {
		if cloud.IsConflict(err) {
			return nil // changed meanwhile: the next round plans again
		}
		return err
	}
	m.last, m.supply = rd.last, rd.supply
	if clearing {
		m.hosts, m.lastClear = hosts, now
		m.publishQuotes()
		if m.Cleared != nil {
			m.Cleared(rd.took)
		}
	}
	m.prices = make(map[cloud.Pool]money.Micros, len(m.last))
	for k, v := range m.last {
		m.prices[k] = v
	}
	m.Sched.SetSpotHints(SpotHints{Prices: m.prices, Gates: rd.gates})
	m.count(res)
	return nil
}

// count calls the hooks with what a round committed.
func (m *SpotMarket) count(res service.MarketResult) {
	if m.Reclaimed != nil {
		if res.Priced > 0 {
			m.Reclaimed(cloud.ReclaimPrice, res.Priced)
		}
		if res.Rebalanced > 0 {
			m.Reclaimed(cloud.ReclaimRebalance, res.Rebalanced)
		}
	}
	if res.Relaunched > 0 && m.Relaunched != nil {
		m.Relaunched(res.Relaunched)
	}
}

func (m *SpotMarket) interval() time.Duration {
	if m.ClearInterval > 0 {
		return m.ClearInterval
	}
	return DefaultClearInterval
}

// Prices returns the current spot price of every pool.
func (m *SpotMarket) Prices() map[cloud.Pool]money.Micros {
	out := make(map[cloud.Pool]money.Micros, len(m.last))
	for k, v := range m.last {
		out[k] = v
	}
	return out
}

// publishQuotes makes the quotes that Quotes returns from the supply and
// prices of the last clearing.
func (m *SpotMarket) publishQuotes() {
	quotes := make(map[cloud.Pool]PoolQuote, len(m.supply))
	for p, s := range m.supply {
		quotes[p] = PoolQuote{OnDemand: s.OnDemandPrice, Spot: m.last[p], Free: s.Free, Risk: spot.RiskOf(s)}
	}
	m.quotes.Store(&quotes)
}

func (m *SpotMarket) keepFailed() time.Duration {
	if m.KeepFailed > 0 {
		return m.KeepFailed
	}
	return DefaultKeepFailed
}

func (m *SpotMarket) catalog() *catalog.Catalog {
	if m.Catalog != nil {
		return m.Catalog
	}
	return catalog.Default()
}

// PoolQuote is what the market knows of one pool for a buyer choosing
// where to launch: the prices, the room left, and the reclaim risk.
type PoolQuote struct {
	OnDemand, Spot money.Micros
	// Free is how many more instances of the offering fit in the zone now
	// (the market's last supply count).
	Free int
	// Risk is the pool's reclaim risk (spot.RiskOf), in basis points.
	Risk spot.Risk
}

// Quotes returns every pool's quote as of the last clearing (nil before
// the first), in a map of the caller's. The autoscaling group controller
// reads it (it runs after the market in the leader's loop) and so do the
// metrics, at scrape: it is safe to call from any goroutine.
func (m *SpotMarket) Quotes() map[cloud.Pool]PoolQuote {
	p := m.quotes.Load()
	if p == nil {
		return nil
	}
	out := make(map[cloud.Pool]PoolQuote, len(*p))
	for k, v := range *p {
		out[k] = v
	}
	return out
}
