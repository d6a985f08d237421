package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
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

// Market runs the spot market around the pure core of package spot: it
// clears each pool's price from supply (the scheduler's fleet) and demand
// (instances and reservations), records every change, reclaims spot
// instances whose max price the price passed, recommends rebalancing when a
// pool's risk rises, keeps pending spot instances to the zones within their
// max price, and drives spot requests: one-time requests close when their
// instance ends, persistent ones relaunch after a reclaim (in the first
// pool with room, backups included, with the same volumes), and a pending
// launch moves to a backup pool that has room. Instances move only through
// service.MoveInstance and launch only through service.LaunchSpot (quota
// and volume rule included); a relaunch the service refuses (a quota, a
// deleted volume) is recorded on the request, which stays open and is
// tried again on later rounds.
//
// It reads the scheduler's fleet through Sched.FleetView and tells the
// scheduler what it decided through Sched.SetSpotHints, nothing else. It
// runs in the scheduler's goroutine, before the scheduler's Step (the
// leader's Loop lists it first), from the second round on: the first
// builds the fleet. A pending spot instance is placed only once the market
// has seen it.
type Market struct {
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

// NewMarket returns a market controller with the default configuration,
// for sched's fleet and catalog.
func NewMarket(st cloud.Store, sched *Scheduler) *Market {
	return &Market{Store: st, Sched: sched, Catalog: sched.Catalog, Config: spot.DefaultConfig(), ClearInterval: DefaultClearInterval,
		KeepFailed: DefaultKeepFailed, Now: time.Now, Log: slog.Default()}
}

// Name is the market's name as a Controller.
func (m *Market) Name() string { return "market" }

// Interval is how often the leader runs a round: Every, or
// DefaultMarketInterval.
func (m *Market) Interval() time.Duration {
	if m.Every > 0 {
		return m.Every
	}
	return DefaultMarketInterval
}

// Reconcile runs one Step, as a Controller.
func (m *Market) Reconcile(ctx context.Context) error { return m.Step(ctx) }

// marketSnap is what one market step reads.
type marketSnap struct {
	prices   *billing.PriceBook
	requests map[string]*cloud.SpotRequest
	spot     []*cloud.Instance // non-terminated spot instances
	pending  []*cloud.Instance // pending on-demand instances
}

func (m *Market) read(ctx context.Context) (*marketSnap, error) {
	var ms *marketSnap
	err := m.Store.Tx(ctx, func(tx cloud.Tx) error {
		ms = &marketSnap{requests: map[string]*cloud.SpotRequest{}}
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
		live := []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping,
			cloud.Terminating, cloud.Stopped, cloud.Failed, cloud.Lost}
		if ms.spot, err = tx.ListInstances(ctx, cloud.InstanceFilter{Market: cloud.MarketSpot, States: live}); err != nil {
			return err
		}
		if ms.pending, err = tx.ListInstances(ctx, cloud.InstanceFilter{Market: cloud.MarketOnDemand, States: []cloud.State{cloud.Pending}}); err != nil {
			return err
		}
		if m.last == nil {
			latest, err := tx.LatestSpotPrices(ctx)
			if err != nil {
				return err
			}
			m.last = map[cloud.Pool]money.Micros{}
			for _, p := range latest {
				m.last[p.Pool] = p.Price
			}
		}
		return nil
	})
	return ms, err
}

// Step runs one round of the market. The scheduler's fleet must be built
// (run Scheduler.Step first); until it is, Step does nothing.
func (m *Market) Step(ctx context.Context) error {
	view := m.Sched.FleetView()
	if !view.Built() {
		return nil
	}
	now := m.Now()
	ms, err := m.read(ctx)
	if err != nil {
		return err
	}
	// Clear on the interval, and at once when hosts come or go, so that a
	// new host's pools get a price without waiting.
	// (Never twice at one instant: a pool has one price per time.)
	if hosts := view.Hosts(); m.supply == nil || (hosts != m.hosts && now.After(m.lastClear)) || now.Sub(m.lastClear) >= m.interval() {
		m.hosts = hosts
		start := time.Now()
		if err := m.clear(ctx, view, ms, now); err != nil {
			return err
		}
		if m.Cleared != nil {
			m.Cleared(time.Since(start))
		}
		m.lastClear = now
	}
	m.Sched.SetSpotHints(SpotHints{Prices: m.prices, Gates: m.gate(ms)})
	if err := m.watch(ctx, view, ms, now); err != nil {
		return err
	}
	return m.drive(ctx, view, ms, now)
}

func (m *Market) interval() time.Duration {
	if m.ClearInterval > 0 {
		return m.ClearInterval
	}
	return DefaultClearInterval
}

// Prices returns the current spot price of every pool.
func (m *Market) Prices() map[cloud.Pool]money.Micros {
	out := make(map[cloud.Pool]money.Micros, len(m.last))
	for k, v := range m.last {
		out[k] = v
	}
	return out
}

// clear computes every pool's supply and demand, clears the prices and
// records the ones that changed.
func (m *Market) clear(ctx context.Context, view FleetView, ms *marketSnap, now time.Time) error {
	counts := view.Supply()
	zonesOf := map[string][]string{}
	for _, p := range sortedPools(counts) {
		zonesOf[p.Offering] = append(zonesOf[p.Offering], p.Zone)
	}
	supply := map[cloud.Pool]*spot.Supply{}
	for p, c := range counts {
		od, ok := ms.prices.Compute(p.Offering, p.Zone, now)
		if !ok {
			continue // no on-demand price: no market
		}
		supply[p] = &spot.Supply{Pool: p, Capacity: c.Capacity, Free: c.Free, OnDemandPrice: od, Prev: m.last[p]}
	}
	// Demand without a zone weighs on every zone of its offering.
	each := func(offering string, zones []string, f func(*spot.Supply)) {
		if len(zones) == 0 {
			zones = zonesOf[offering]
		}
		for _, z := range zones {
			if s := supply[cloud.Pool{Offering: offering, Zone: z}]; s != nil {
				f(s)
			}
		}
	}
	for _, in := range ms.spot {
		switch {
		case in.State == cloud.Pending:
			each(in.Offering, in.Zones, func(s *spot.Supply) { s.SpotPending++ })
		case in.State.Holds():
			each(in.Offering, []string{in.Zone}, func(s *spot.Supply) { s.SpotRunning++ })
		}
	}
	for _, in := range ms.pending {
		each(in.Offering, in.Zones, func(s *spot.Supply) { s.OnDemandPending++ })
	}
	for p, n := range view.Reserved() {
		each(p.Offering, []string{p.Zone}, func(s *spot.Supply) { s.Reserved += n })
	}
	pools := sortedPools(supply)
	in := make([]spot.Supply, len(pools))
	for i, p := range pools {
		in[i] = *supply[p]
	}
	prices := spot.ClearAll(in, m.Config, nil)
	var changed []cloud.SpotPrice
	m.supply = make(map[cloud.Pool]spot.Supply, len(pools))
	for i, p := range pools {
		m.supply[p] = in[i]
		if prices[i] != m.last[p] {
			changed = append(changed, cloud.SpotPrice{Pool: p, Time: now, Price: prices[i]})
		}
	}
	if len(changed) > 0 {
		if err := m.Store.Tx(ctx, func(tx cloud.Tx) error { return tx.AppendSpotPrices(ctx, changed) }); err != nil {
			m.publishQuotes()
			return err
		}
		for _, c := range changed {
			m.last[c.Pool] = c.Price
		}
	}
	m.prices = make(map[cloud.Pool]money.Micros, len(m.last))
	for k, v := range m.last {
		m.prices[k] = v
	}
	m.publishQuotes()
	return nil
}

// publishQuotes makes the quotes that Quotes returns from the supply and
// prices of the last clearing.
func (m *Market) publishQuotes() {
	quotes := make(map[cloud.Pool]PoolQuote, len(m.supply))
	for p, s := range m.supply {
		quotes[p] = PoolQuote{OnDemand: s.OnDemandPrice, Spot: m.last[p], Free: s.Free, Risk: spot.RiskOf(s)}
	}
	m.quotes.Store(&quotes)
}

// maxPrice is a request's max price in a pool: its own, or the on-demand
// price when it has none.
func maxPrice(r *cloud.SpotRequest, od money.Micros) money.Micros {
	if r.MaxPrice > 0 {
		return r.MaxPrice
	}
	return od
}

// gate finds, for every pending spot instance, the zones of its pool
// whose price is within the request's max price (nil: any zone, when the
// request has no max price), or why none is: the gates the scheduler
// places them by.
func (m *Market) gate(ms *marketSnap) map[string]SpotGate {
	gates := map[string]SpotGate{}
	for _, in := range ms.spot {
		if in.State != cloud.Pending {
			continue
		}
		r := ms.requests[in.SpotRequestID]
		if r == nil || r.MaxPrice == 0 {
			gates[in.ID] = SpotGate{}
			continue
		}
		ok := []string{}
		cheapest := money.Micros(-1)
		for p, s := range m.supply {
			if p.Offering != in.Offering || (len(in.Zones) > 0 && !contains(in.Zones, p.Zone)) {
				continue
			}
			price := m.last[p]
			if price <= maxPrice(r, s.OnDemandPrice) {
				ok = append(ok, p.Zone)
			} else if cheapest < 0 || price < cheapest {
				cheapest = price
			}
		}
		sort.Strings(ok)
		g := SpotGate{Zones: ok}
		if len(ok) == 0 {
			g.Blocked = fmt.Sprintf("spot price %s is above the max price %s in every zone of %s", cheapest, r.MaxPrice, in.Offering)
		}
		gates[in.ID] = g
	}
	return gates
}

// watch reclaims spot instances whose pool price passed their max price
// and recommends rebalancing to those in pools at risk.
func (m *Market) watch(ctx context.Context, view FleetView, ms *marketSnap, now time.Time) error {
	type move struct {
		id     string
		reason string
	}
	var moves []move
	for _, in := range ms.spot {
		if !in.State.Holds() || in.State == cloud.Stopping || in.State == cloud.Terminating {
			continue
		}
		if in.Interruption != nil && in.Interruption.Action != "" {
			continue
		}
		p := cloud.Pool{Offering: in.Offering, Zone: in.Zone}
		s, ok := m.supply[p]
		if !ok {
			continue
		}
		if r := ms.requests[in.SpotRequestID]; r != nil && m.last[p] > maxPrice(r, s.OnDemandPrice) {
			moves = append(moves, move{in.ID, cloud.ReclaimPrice})
			continue
		}
		if in.Interruption == nil && spot.RiskOf(s).Rebalance() {
			moves = append(moves, move{in.ID, cloud.ReclaimRebalance})
		}
	}
	if len(moves) == 0 {
		return nil
	}
	var priced, rebalanced int
	err := m.Store.Tx(ctx, func(tx cloud.Tx) error {
		priced, rebalanced = 0, 0 // the function may run again
		for _, mv := range moves {
			in, err := tx.GetInstance(ctx, mv.id)
			if err != nil {
				if cloud.IsNotFound(err) {
					continue
				}
				return err
			}
			if !in.State.Holds() || (in.Interruption != nil && in.Interruption.Action != "") {
				continue
			}
			if mv.reason == cloud.ReclaimPrice {
				notice := view.Notice(cloud.Pool{Offering: in.Offering, Zone: in.Zone})
				done, err := announce(ctx, tx, in, cloud.ReclaimPrice, "", notice, now)
				if err != nil {
					return err
				}
				if done {
					priced++
				}
				continue
			}
			if in.Interruption != nil {
				continue
			}
			in.Interruption = &cloud.Interruption{Reason: cloud.ReclaimRebalance, NoticedAt: now}
			in.UpdatedAt = now
			if err := tx.UpdateInstance(ctx, in); err != nil {
				if cloud.IsConflict(err) {
					continue
				}
				return err
			}
			if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRebalance, TenantID: in.TenantID,
				InstanceID: in.ID, HostID: in.HostID, Actor: marketActor,
				Reason: "rebalance recommended: reclaim risk in pool " + cloud.Pool{Offering: in.Offering, Zone: in.Zone}.String() + " is elevated"}); err != nil {
				return err
			}
			rebalanced++
		}
		return nil
	})
	if err == nil && m.Reclaimed != nil {
		if priced > 0 {
			m.Reclaimed(cloud.ReclaimPrice, priced)
		}
		if rebalanced > 0 {
			m.Reclaimed(cloud.ReclaimRebalance, rebalanced)
		}
	}
	return err
}

// drive moves every live spot request along with its instance. A request
// already where its instance puts it (active while the instance holds
// capacity, open while it waits in its only pool) costs no transaction.
//
// The Relaunched hook counts the relaunches it committed: a request's next
// instance after the last was reclaimed, failed, was lost or went away
// (persistent requests), one tried again after a refusal, and a
// persistent request's stopped instance started again (the stop
// behaviour). A pending launch moved to a backup pool is not a relaunch.
func (m *Market) drive(ctx context.Context, view FleetView, ms *marketSnap, now time.Time) error {
	byID := map[string]*cloud.Instance{}
	for _, in := range ms.spot {
		byID[in.ID] = in
	}
	relaunched := 0
	defer func() {
		if relaunched > 0 && m.Relaunched != nil {
			m.Relaunched(relaunched)
		}
	}()
	for _, id := range sortedKeys(ms.requests) {
		if settled(ms.requests[id], byID[ms.requests[id].InstanceID]) {
			continue
		}
		n := 0
		if err := m.Store.Tx(ctx, func(tx cloud.Tx) error {
			n = 0 // the function may run again
			return m.driveOne(ctx, tx, view, id, now, &n)
		}); err != nil {
			if cloud.IsConflict(err) {
				continue // changed meanwhile: next step
			}
			return err
		}
		relaunched += n
	}
	return nil
}

// The reasons a request keeps while nothing happens to it.
const reasonWaiting = "waiting for capacity"

// reasonRefused starts the reason of a request whose relaunch (persistent
// requests, moves to a backup pool) the instance service refused: a
// quota, a volume. It stays open, the instance the market ended does not
// close it, and the relaunch is tried again on every round.
const reasonRefused = "relaunch refused: "

func reasonActive(in *cloud.Instance) string { return "instance " + in.ID + " holds capacity" }

// settled reports whether driveOne would leave the request as it is, as
// far as the snapshot tells.
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

// driveOne handles one request in its own transaction, re-reading it and
// its instance. It adds the relaunches it made to *relaunched.
func (m *Market) driveOne(ctx context.Context, tx cloud.Tx, view FleetView, id string, now time.Time, relaunched *int) error {
	r, err := tx.GetSpotRequest(ctx, id)
	if err != nil {
		return ignoreNotFound(err)
	}
	if r.State != cloud.SpotOpen && r.State != cloud.SpotActive && r.State != cloud.SpotDisabled {
		return nil
	}
	in, err := tx.GetInstance(ctx, r.InstanceID)
	if err != nil && !cloud.IsNotFound(err) {
		return err
	}
	set := func(st cloud.SpotRequestState, reason string) error {
		if r.State == st && r.Reason == reason {
			return nil
		}
		r.State, r.Reason, r.UpdatedAt = st, reason, now
		if err := tx.UpdateSpotRequest(ctx, r); err != nil {
			return err
		}
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: r.TenantID,
			InstanceID: r.InstanceID, Reason: fmt.Sprintf("spot request %s %s: %s", r.ID, st, reason), Actor: marketActor})
	}
	// relaunch launches the request's next instance, or records why the
	// instance service refused it.
	relaunch := func(why string) error {
		err := m.relaunch(ctx, tx, view, r, why, now)
		if refused(err) {
			return set(cloud.SpotOpen, reasonRefused+errMessage(err))
		}
		if err == nil {
			*relaunched++
		}
		return err
	}
	persistent := r.Type == cloud.SpotPersistent
	if in == nil {
		if persistent {
			return relaunch("its instance is gone")
		}
		return set(cloud.SpotClosed, "its instance is gone")
	}
	reclaimed := in.Interruption != nil && in.Interruption.Action != ""
	switch in.State {
	case cloud.Pending:
		moved, err := m.toBackup(ctx, tx, view, r, in, now)
		if refused(err) {
			// The launch is terminated; the next rounds relaunch.
			return set(cloud.SpotOpen, reasonRefused+errMessage(err))
		}
		if err != nil || moved {
			return err
		}
		return set(cloud.SpotOpen, reasonWaiting)
	case cloud.Scheduled, cloud.Starting, cloud.Running, cloud.Stopping, cloud.Terminating:
		return set(cloud.SpotActive, reasonActive(in))
	case cloud.Stopped:
		if in.Reason == cloud.ReasonExitedOK {
			return set(cloud.SpotClosed, "its workload completed")
		}
		if reclaimed && persistent {
			// Stop behaviour: the same instance, with its volumes, starts
			// again when capacity returns (the move to pending clears the
			// notice and the reason).
			if err := service.MoveInstance(ctx, tx, in, service.Move{To: cloud.Pending, Actor: marketActor,
				Reason: "persistent spot request " + r.ID + " restarts its stopped instance"}, now); err != nil {
				return err
			}
			*relaunched++
			return set(cloud.SpotOpen, "restarting its stopped instance")
		}
		return set(cloud.SpotDisabled, "its instance is stopped; start it to resume")
	case cloud.Terminated:
		if reclaimed && persistent {
			return relaunch("instance " + in.ID + " was reclaimed")
		}
		if strings.HasPrefix(r.Reason, reasonRefused) {
			// The market ended it to relaunch (a failed or lost instance
			// of a persistent request, a move to a backup pool) and the
			// relaunch was refused: try again.
			return relaunch("instance " + in.ID + " ended")
		}
		if !persistent {
			return set(cloud.SpotClosed, "its instance terminated")
		}
		return set(cloud.SpotClosed, "its instance was terminated by the tenant")
	case cloud.Failed, cloud.Lost:
		if !persistent {
			return set(cloud.SpotClosed, "its instance "+string(in.State))
		}
		if in.State == cloud.Failed && now.Sub(in.UpdatedAt) < m.keepFailed() {
			return set(cloud.SpotOpen, fmt.Sprintf("instance %s failed; kept for inspection until %s", in.ID,
				in.UpdatedAt.Add(m.keepFailed()).UTC().Format(time.RFC3339)))
		}
		from := in.State
		// The instance keeps the reason it failed or was lost with.
		if err := service.MoveInstance(ctx, tx, in, service.Move{To: cloud.Terminated, Actor: marketActor, KeepReason: true,
			Reason: "persistent spot request " + r.ID + " relaunches"}, now); err != nil {
			return err
		}
		return relaunch("instance " + in.ID + " " + string(from))
	}
	return nil
}

// errMessage is the message of a domain error, without its code.
func errMessage(err error) string {
	var e *cloud.Error
	if errors.As(err, &e) {
		return e.Message
	}
	return err.Error()
}

// refused reports whether the instance service refused a launch for a
// reason that only the tenant or the operator can change (a quota, a
// volume that is gone or attached to another live instance, an offering
// that left the catalog), as opposed to a race (a version conflict: the
// next round tries again) or a failure of the store.
func refused(err error) bool {
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		return false
	}
	switch ce.Code {
	case cloud.QuotaExceeded, cloud.Invalid, cloud.NotFound:
		return true
	case cloud.Conflict:
		// The volume rule names the volume's field; a race names none.
		f, _ := ce.Details["field"].(string)
		return strings.HasPrefix(f, "volumes[")
	}
	return false
}

func (m *Market) keepFailed() time.Duration {
	if m.KeepFailed > 0 {
		return m.KeepFailed
	}
	return DefaultKeepFailed
}

// bestPool is the first of the request's pools (backups in order) where an
// instance fits now within the max price; the primary when none does.
func (m *Market) bestPool(view FleetView, r *cloud.SpotRequest, skip cloud.Pool) (cloud.Pool, bool) {
	for _, p := range r.Pools {
		if p == skip {
			continue
		}
		if m.fits(view, r, p) {
			return p, true
		}
	}
	return r.Pools[0], false
}

// fits reports whether an instance of the pool's offering fits the
// scheduler's fleet now, in a zone whose price is within the max price.
func (m *Market) fits(view FleetView, r *cloud.SpotRequest, p cloud.Pool) bool {
	var zones []string
	for pool, s := range m.supply {
		if pool.Offering != p.Offering || (p.Zone != "" && pool.Zone != p.Zone) {
			continue
		}
		if m.last[pool] <= maxPrice(r, s.OnDemandPrice) {
			zones = append(zones, pool.Zone)
		}
	}
	return view.FitsSpot(p.Offering, zones)
}

// relaunch launches the request's next instance in its best pool, through
// service.LaunchSpot. A launch the service refuses changes nothing and
// returns its error (see refused).
func (m *Market) relaunch(ctx context.Context, tx cloud.Tx, view FleetView, r *cloud.SpotRequest, why string, now time.Time) error {
	if len(r.Pools) == 0 {
		return cloud.Errorf(cloud.Invalid, "spot request %s has no pools", r.ID)
	}
	pool, _ := m.bestPool(view, r, cloud.Pool{})
	in, err := service.LaunchSpot(ctx, tx, m.catalog(), r, pool, marketActor, now)
	if err != nil {
		return err
	}
	return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventSpotRequest, TenantID: r.TenantID,
		InstanceID: in.ID, Actor: marketActor,
		Reason: fmt.Sprintf("spot request %s relaunched as %s in pool %s (launch %d): %s", r.ID, in.ID, pool, r.Launches, why)})
}

func (m *Market) catalog() *catalog.Catalog {
	if m.Catalog != nil {
		return m.Catalog
	}
	return catalog.Default()
}

// toBackup moves a pending launch that the scheduler could not place to
// the first other pool of the request that has room now: it terminates
// the launch and relaunches in that pool.
func (m *Market) toBackup(ctx context.Context, tx cloud.Tx, view FleetView, r *cloud.SpotRequest, in *cloud.Instance, now time.Time) (bool, error) {
	if len(r.Pools) < 2 || in.Reason == "" {
		return false, nil
	}
	cur := cloud.Pool{Offering: in.Offering}
	if len(in.Zones) == 1 {
		cur.Zone = in.Zones[0]
	}
	if m.fits(view, r, cur) {
		return false, nil // the scheduler will place it
	}
	pool, ok := m.bestPool(view, r, cur)
	if !ok {
		return false, nil
	}
	if err := service.MoveInstance(ctx, tx, in, service.Move{To: cloud.Terminated,
		Reason: "moved to backup pool " + pool.String(), Actor: marketActor}, now); err != nil {
		return false, err
	}
	return true, m.relaunch(ctx, tx, view, r, "no room in pool "+cur.String(), now)
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
func (m *Market) Quotes() map[cloud.Pool]PoolQuote {
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
