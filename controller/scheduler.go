// Package controller runs the control plane's controllers around the pure
// core. Each is a Controller: a name, an interval and one Reconcile round;
// the leader runs them as one list (Loop), in order. The scheduler places
// pending instances with the placement engine and commits each allocation
// together with the state change; the market clears spot prices and drives
// spot requests, talking to the scheduler only through SetSpotHints and its
// FleetView; the budget checker and the heartbeat watcher are small
// wrappers around CheckBudgets and MarkSilentHosts.
//
// No controller writes the store itself: each reads a snapshot, plans
// (service.SchedulePlan, service.MarketPlan, service.GroupPlan) and hands
// the plan to one service function that applies it in one re-checked
// transaction (service.ApplySchedule, ApplyMarketPlan, ApplyGroupPlan);
// internal/archtest fails on a cloud.Tx write here. Through those applies
// every move goes through service.MoveInstance or MoveInstances, and every
// launch through service.CreateInstance (LaunchSpot for a spot request,
// LaunchGroupMember for a group), so the lifecycle rules, the events and
// the usage ledger are the API's.
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

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// DefaultBatchSize is how many pending instances the scheduler writes in
// one store transaction at most, and DefaultScheduleInterval how often the
// leader runs a scheduler step (a create that leaves the creates idle also
// kicks a step at once: service.Options.CreatesIdle). Each batch waits its
// turn for the store behind the creates' own transactions (on SQLite, one
// connection runs them all), so a step that finds a burst's backlog (600
// pending after 2,000 creates) takes as many turns as it has batches; 256
// halves the turns of 128 at a few milliseconds more per transaction
// (docs/BENCHMARKS.md, "The scheduler's tail").
const (
	DefaultBatchSize        = 256
	DefaultScheduleInterval = 200 * time.Millisecond
)

// Scheduler places pending instances. It keeps an in-memory fleet index,
// rebuilt from the store by Rebuild, and plans over it: placements,
// failures, why instances wait, reclaims of spot capacity and their
// deadlines (a service.SchedulePlan). service.ApplySchedule writes each
// plan, of up to BatchSize placements, in one store transaction, each
// placement with the instance's state change (checking its version) and
// its event, and each host it lands on with a version bump that checks
// the version the fleet was built from. A placement whose instance
// changed meanwhile is dropped; a host that changed loses every placement
// of the plan, and the fleet is rebuilt. Either way the instances are
// retried on the next Step. Only the leader runs it.
//
// The fleet is rebuilt from the store only when a host changed (the host
// stamp) or a commit lost a host race; an instance that stops holding its
// allocation (stopped, terminated, failed, lost: the agent's final report,
// the health watcher) is released from the fleet incrementally on the next
// Step, which reads the IDs of the instances that still hold one. Rebuilds
// counts the full rebuilds.
//
// The spot market talks to it through two methods only: SetSpotHints
// (prices, and the zones each pending spot instance may use) before a
// step, and FleetView, a read-only view of the fleet, between steps.
type Scheduler struct {
	Store   cloud.Store
	Catalog *catalog.Catalog
	Engine  *placement.Engine
	Now     func() time.Time
	Log     *slog.Logger
	// BatchSize caps the pending instances one apply writes (placements,
	// failures and reasons to wait); 0 is DefaultBatchSize.
	BatchSize int
	// Notice is the spot reclaim notice (DefaultNotice when below
	// MinNotice); PoolNotice overrides it per pool ("offering/zone") or
	// per offering.
	Notice     time.Duration
	PoolNotice map[string]time.Duration
	// Every is how often the leader runs a step (Interval);
	// 0 is DefaultScheduleInterval.
	Every time.Duration
	// LearnEvery is how often, at most, a step measures the mix the fleet
	// runs for the placement policy (learn.go); 0 is
	// DefaultLearnInterval, negative never.
	LearnEvery time.Duration
	// Placed, when set, is called after every Reconcile with the number of
	// instances the step placed (the metrics' hook).
	Placed func(n int)
	// Reclaimed, when set, is called after a step's reclaim notices
	// commit, with their reason (cloud.ReclaimCapacity) and how many spot
	// instances got one (the metrics' hook).
	Reclaimed func(reason string, n int)

	fleet *fleet.Fleet
	// rebuilds counts full rebuilds of the fleet (read by Rebuilds from
	// any goroutine).
	rebuilds atomic.Int64
	// grows counts the steps that added joined hosts to the fleet without
	// a rebuild (grow).
	grows atomic.Int64
	// placed holds the IDs of the instances whose placements are applied
	// to the fleet and committed.
	placed map[string]bool
	// pools holds the pool of each spot instance among them, for the
	// notice a reclaim gives it.
	pools map[string]cloud.Pool
	// versions is the store version of each host the fleet was built from,
	// and stamp the summary of all of them, which tells whether any host
	// changed behind the scheduler's back.
	versions map[string]int64
	stamp    cloud.HostStamp
	// epoch counts the events that can free capacity: rebuilds, releases,
	// placements given back. waiting maps each instance that did not fit
	// to its version and the epoch then: until one of them changes it
	// cannot fit, and Step does not ask the engine again.
	epoch   uint64
	waiting map[string]wait
	steps   int

	// placeholders are the capacity placeholders placed in the fleet, by
	// placeholder ID; shortfall counts, per commitment, the placeholders
	// that found no room.
	placeholders map[string]placeholder
	shortfall    map[string]int
	// hints is what the market last told the scheduler (SetSpotHints).
	hints SpotHints
	// learner gives the engine the mix the fleet runs, last at learnedAt
	// (learn.go).
	learner   placement.Learner
	learnedAt time.Time
	// usage is the GPU usage of the fleet as of the last step (GPUUsage),
	// computed from the fleet usageOf at its change count usageAt.
	usage atomic.Pointer[[]fleet.GPUCount]
	// schedulable counts the fleet's schedulable hosts as of the last
	// rebuild (Schedulable).
	schedulable atomic.Int64
	usageOf     *fleet.Fleet
	usageAt     uint64
	// pending is what PendingByReason returns (pending.go).
	pending atomic.Pointer[map[string]int]
	// avail is the availability summary (Availability).
	avail capacity
}

type wait struct {
	version int64
	epoch   uint64
	// reason is why the instance waits (PendingReasons).
	reason string
}

// NewScheduler returns a scheduler with the default policy.
func NewScheduler(st cloud.Store, cat *catalog.Catalog) *Scheduler {
	if cat == nil {
		cat = catalog.Default()
	}
	sc, _ := placement.NewScorer(placement.DefaultPolicy, nil)
	return &Scheduler{Store: st, Catalog: cat, Engine: placement.NewEngine(cat, sc, 1), Now: time.Now, Log: slog.Default(),
		placeholders: map[string]placeholder{}, shortfall: map[string]int{}}
}

// Fleet returns the scheduler's fleet index (read it, do not change it).
func (s *Scheduler) Fleet() *fleet.Fleet { return s.fleet }

// Rebuilds counts the full rebuilds of the fleet from the store since the
// scheduler was made: the first, one per host change seen and one per
// commit that lost a host race. Safe to call from any goroutine.
func (s *Scheduler) Rebuilds() int { return int(s.rebuilds.Load()) }

// Grows counts the steps that added hosts that joined to the fleet
// without rebuilding it. Safe to call from any goroutine.
func (s *Scheduler) Grows() int { return int(s.grows.Load()) }

// Schedulable is how many schedulable hosts the scheduler's fleet holds,
// as of its last rebuild from the store (a host that joins or changes
// state makes the next step rebuild): 0 before the first. `up` waits for
// its hosts here before it says the cloud is up. Safe to call from any
// goroutine.
func (s *Scheduler) Schedulable() int { return int(s.schedulable.Load()) }

// Name is the scheduler's name as a Controller.
func (s *Scheduler) Name() string { return "scheduler" }

// Interval is how often the leader runs a step: Every, or
// DefaultScheduleInterval.
// Kickable: a kicked loop places at once what the controllers before the
// scheduler launched (an endpoint's new worker).
func (s *Scheduler) Kickable() bool { return true }

func (s *Scheduler) Interval() time.Duration {
	if s.Every > 0 {
		return s.Every
	}
	return DefaultScheduleInterval
}

// Reconcile runs one Step, as a Controller.
func (s *Scheduler) Reconcile(ctx context.Context) error {
	n, err := s.Step(ctx)
	s.publishAvailability()
	if s.Placed != nil {
		s.Placed(n)
	}
	return err
}

// GPUUsage counts the fleet's GPUs by model, mode and allocation
// (fleet.GPUUsage) as of the end of the last Step or Rebuild; nil before
// the fleet is built. Unlike Fleet and FleetView it is safe to call from
// any goroutine: the scrape of the metrics reads it.
func (s *Scheduler) GPUUsage() []fleet.GPUCount {
	if p := s.usage.Load(); p != nil {
		return *p
	}
	return nil
}

// publishUsage recounts the GPUs for GPUUsage when the fleet changed.
func (s *Scheduler) publishUsage() {
	if s.fleet == nil || (s.fleet == s.usageOf && s.fleet.Changes() == s.usageAt) {
		return
	}
	u := s.fleet.GPUUsage()
	s.usage.Store(&u)
	s.usageOf, s.usageAt = s.fleet, s.fleet.Changes()
}

// grow adds to the fleet the hosts that joined since it was built, when
// they are the only change: every host the fleet holds is still in the
// store at the version it was built from. It reads their IDs and versions,
// and only the new hosts' specs; a fleet of thousands that hosts join one
// after another thus costs each step a read of the newcomers, not a
// rebuild from every host (issue 26: 5,000 joins took 50–120 s of
// rebuilds). It answers false, leaving the fleet as it was, when anything
// else changed (a host's spec or state, a lost host race): then the caller
// rebuilds.
func (s *Scheduler) grow(ctx context.Context) (bool, error) {
	var (
		added []*cloud.Host
		stamp cloud.HostStamp
		ok    bool
	)
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		added, stamp, ok = nil, cloud.HostStamp{}, false
		vs, err := tx.ListHostVersions(ctx)
		if err != nil {
			return err
		}
		known := 0
		var fresh []string
		for _, v := range vs {
			stamp.Hosts++
			stamp.VersionSum += v.Version
			old, have := s.versions[v.ID]
			switch {
			case !have:
				fresh = append(fresh, v.ID)
			case old != v.Version:
				return nil
			default:
				known++
			}
		}
		if known != len(s.versions) || len(fresh) == 0 {
			return nil
		}
		for _, id := range fresh {
			h, err := tx.GetHost(ctx, id)
			if err != nil {
				return err
			}
			if h.Version != versionIn(vs, id) {
				return nil // changed between the two reads: rebuild
			}
			added = append(added, h)
		}
		ok = true
		return nil
	})
	if err != nil || !ok {
		return false, err
	}
	for _, h := range added {
		spec := h.Spec
		spec.ID, spec.State = h.ID, h.State
		if err := s.fleet.AddHost(&spec, s.Catalog); err != nil {
			// The fleet may hold some of them now: rebuild it.
			return false, nil
		}
		s.versions[h.ID] = h.Version
		if h.State == fleet.Schedulable {
			s.schedulable.Add(1)
		}
	}
	s.stamp = stamp
	s.grows.Add(1)
	// New capacity: what did not fit may fit now.
	s.epoch++
	return true, nil
}

// versionIn is id's version in vs (ID order), or -1.
func versionIn(vs []cloud.RowVersion, id string) int64 {
	i, found := sort.Find(len(vs), func(i int) int { return strings.Compare(id, vs[i].ID) })
	if !found {
		return -1
	}
	return vs[i].Version
}

// Rebuild loads hosts and the allocations of instances that hold one from
// the store. A server restart loses nothing: pending stays pending, running
// keeps its allocation.
func (s *Scheduler) Rebuild(ctx context.Context) error {
	var (
		f        *fleet.Fleet
		placed   map[string]bool
		pools    map[string]cloud.Pool
		versions map[string]int64
		stamp    cloud.HostStamp
	)
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		f, placed, pools, versions, stamp = fleet.New(), map[string]bool{}, map[string]cloud.Pool{}, map[string]int64{}, cloud.HostStamp{}
		hosts, err := tx.ListHosts(ctx)
		if err != nil {
			return err
		}
		sort.Slice(hosts, func(i, j int) bool { return hosts[i].ID < hosts[j].ID })
		for _, h := range hosts {
			spec := h.Spec
			spec.ID, spec.State = h.ID, h.State
			if err := f.AddHost(&spec, s.Catalog); err != nil {
				return fmt.Errorf("rebuild: host %s: %w", h.ID, err)
			}
			versions[h.ID] = h.Version
			stamp.Hosts++
			stamp.VersionSum += h.Version
		}
		holding, err := tx.ListInstances(ctx, cloud.InstanceFilter{States: cloud.HoldingStates()})
		if err != nil {
			return err
		}
		for _, in := range holding {
			if in.Placement == nil || !s.restore(f, in) {
				continue
			}
			placed[in.ID] = true
			if in.Market == cloud.MarketSpot {
				pools[in.ID] = cloud.Pool{Offering: in.Offering, Zone: in.Zone}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.fleet, s.placed, s.pools, s.versions, s.stamp = f, placed, pools, versions, stamp
	s.rebuilds.Add(1)
	n := 0
	for _, h := range f.Hosts {
		if h.State == fleet.Schedulable {
			n++
		}
	}
	s.schedulable.Store(int64(n))
	// Capacity reservations live only in the fleet: the next step places
	// them again on the new one.
	s.placeholders = map[string]placeholder{}
	s.epoch++
	s.publishUsage()
	return nil
}

// restore applies the stored allocation of in, an instance that holds
// one, to f, a fleet being rebuilt. An allocation that no longer fits is
// a bug or a changed host: it says so loudly and reports false, and the
// rebuild goes on.
func (s *Scheduler) restore(f *fleet.Fleet, in *cloud.Instance) bool {
	p := *in.Placement
	p.ID = in.ID
	p.Preemptible = in.Market == cloud.MarketSpot
	// Placements stored before they recorded their tenant get it here:
	// the shares of one GPU belong to one tenant.
	p.Tenant = in.TenantID
	// The instance that switched a GPU into MIG mode may be gone while
	// others remain on it; whichever comes first now switches the mode
	// again.
	p.Devices = append([]fleet.Device(nil), p.Devices...)
	if h := f.Host(p.HostID); h != nil {
		for i, d := range p.Devices {
			if d.Kind == fleet.MIGSlice && d.GPU < len(h.GPUs) {
				p.Devices[i].EnableMIG = !h.GPUs[d.GPU].MIG
			}
		}
	}
	err := f.Apply(&p)
	if err != nil {
		err = s.applyLegacyShare(f, &p, in.ID, err)
	}
	if err != nil {
		s.Log.Error("rebuild: stored allocation does not fit", "instance", in.ID, "host", p.HostID, "err", err)
		return false
	}
	return true
}

// snapshot is what Step reads in one transaction: the host stamp, the
// instances that hold an allocation (IDs only) and the pending ones.
type snapshot struct {
	stamp   cloud.HostStamp
	holding map[string]bool
	pending []*cloud.Instance
	// spot holds the spot instances that hold capacity and carry an
	// interruption; commitments the
	// active zonal commitments, and tenantHolding the instances holding
	// capacity of the tenants that have one.
	spot          []*cloud.Instance
	commitments   []*cloud.Commitment
	tenantHolding map[string][]*cloud.Instance
	// placementGroups are the placement groups of this step's pending
	// instances, read when first needed, with the hosts their members hold
	// and the ones this step placed members on.
	placementGroups map[string]*placement.Group
}

func (s *Scheduler) snapshot(ctx context.Context) (*snapshot, error) {
	var snap *snapshot
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		snap = &snapshot{}
		var err error
		if snap.stamp, err = tx.HostStamp(ctx); err != nil {
			return err
		}
		if len(s.placed) > 0 {
			ids, err := tx.InstanceIDs(ctx, cloud.InstanceFilter{States: cloud.HoldingStates()})
			if err != nil {
				return err
			}
			snap.holding = make(map[string]bool, len(ids))
			for _, id := range ids {
				snap.holding[id] = true
			}
		}
		snap.pending, err = tx.ListInstances(ctx, cloud.InstanceFilter{States: []cloud.State{cloud.Pending}})
		if err != nil {
			return err
		}
		// Only spot instances under a notice matter here (the reclaim
		// view, the deadlines): a cheap read however many run.
		snap.spot, err = tx.ListInstances(ctx, cloud.InstanceFilter{Market: cloud.MarketSpot, States: cloud.HoldingStates(), Interrupted: true})
		if err != nil {
			return err
		}
		cs, err := tx.ListCommitments(ctx, "")
		if err != nil {
			return err
		}
		now := s.Now()
		snap.tenantHolding = map[string][]*cloud.Instance{}
		for _, c := range cs {
			if c.Zone == "" || !c.Active(now) {
				continue
			}
			snap.commitments = append(snap.commitments, c)
			if _, ok := snap.tenantHolding[c.TenantID]; ok {
				continue
			}
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: c.TenantID, States: cloud.HoldingStates()})
			if err != nil {
				return err
			}
			snap.tenantHolding[c.TenantID] = ins
		}
		return nil
	})
	return snap, err
}

// Step places every pending instance it can, oldest first, and releases
// the allocations of instances that no longer hold one. It returns how
// many instances it placed.
//
// One transaction reads what Step needs; the fleet is rebuilt only when a
// host changed. The step then plans over that snapshot and its fleet
// (decide), writing nothing, and service.ApplySchedule writes the plan
// every BatchSize instances decided, and once more at the end. An instance that did not fit is not looked at
// again until capacity may have been freed. Placements are applied to the
// fleet as they are chosen, so that the next ones see them; what an apply
// does not write is given back to the fleet.
func (s *Scheduler) Step(ctx context.Context) (int, error) {
	defer s.publishUsage()
	snap, err := s.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	grown := false
	if s.fleet != nil && snap.stamp != s.stamp {
		if grown, err = s.grow(ctx); err != nil {
			return 0, err
		}
	}
	if s.fleet == nil || snap.stamp != s.stamp && !grown {
		if err := s.Rebuild(ctx); err != nil {
			return 0, err
		}
	} else if err := s.release(snap.holding); err != nil {
		return 0, err
	}
	s.learn()
	r := newRound(snap)
	placed := 0
	apply := func() error {
		n, err := s.apply(ctx, r)
		placed += n
		return err
	}
	if err := s.decide(ctx, r, apply); err != nil {
		return placed, err
	}
	err = apply()
	s.waiting = r.waiting
	s.publishPending(r.waiting)
	return placed, err
}

// decide plans one step over r's snapshot into r: the reclaims whose
// deadline passed, the capacity placeholders of zonal commitments, then
// every pending instance, on-demand first, then spot, each oldest first
// (spot never takes capacity an on-demand instance waits for in the same
// step). It calls flush whenever r's plan writes BatchSize instances
// (placements, failures and waits together); with a nil flush it plans
// the whole step. It writes nothing itself; on
// an error the placements not yet flushed are given back to the fleet.
func (s *Scheduler) decide(ctx context.Context, r *round, flush func() error) error {
	s.planDeadlines(r)
	if err := s.reserve(r); err != nil {
		return err
	}
	pending := r.snap.pending
	sort.SliceStable(pending, func(i, j int) bool {
		si, sj := pending[i].Market == cloud.MarketSpot, pending[j].Market == cloud.MarketSpot
		if si != sj {
			return !si
		}
		return pending[i].CreatedAt.Before(pending[j].CreatedAt)
	})
	size := s.BatchSize
	if size <= 0 {
		size = DefaultBatchSize
	}
	for _, in := range pending {
		if s.placed[in.ID] {
			// Placed by another scheduler after the snapshot: the rebuilt
			// fleet holds it.
			continue
		}
		if w, ok := s.waiting[in.ID]; ok && w.version == in.Version && w.epoch == s.epoch {
			r.waiting[in.ID] = w
			continue
		}
		s.steps++
		if s.steps%256 == 0 {
			s.Engine.Recalibrate(s.fleet)
		}
		if err := s.plan(ctx, r, in); err != nil {
			s.giveBack(r.plan.Placements)
			r.plan.Placements = nil
			return err
		}
		if flush != nil && len(r.plan.Placements)+len(r.plan.Failures)+len(r.plan.Waits) >= size {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// release frees the fleet allocations of instances that stopped holding
// one (stopped, terminated, failed, lost, or back to pending). This is how
// capacity comes back after an agent's final report, which changes the
// instance and not the host: no rebuild is needed.
func (s *Scheduler) release(holding map[string]bool) error {
	for id := range s.placed {
		if holding[id] {
			continue
		}
		if err := s.fleet.Release(id); err != nil && !errors.Is(err, fleet.ErrUnknown) {
			return err
		}
		delete(s.placed, id)
		delete(s.pools, id)
		s.epoch++
	}
	return nil
}

func ignoreNotFound(err error) error {
	if cloud.IsNotFound(err) {
		return nil
	}
	return err
}

func ignoreConflict(err error) error {
	if cloud.IsConflict(err) {
		return nil
	}
	return err
}

// shareTenantOf is the tenant that holds the shares of the GPU a share
// placement p asks for, when another tenant does; "" otherwise.
func shareTenantOf(f *fleet.Fleet, p *fleet.Placement) string {
	h := f.Host(p.HostID)
	if h == nil {
		return ""
	}
	for _, d := range p.Devices {
		if d.Kind == fleet.Share && d.GPU < len(h.GPUs) {
			if t := h.GPUs[d.GPU].ShareTenant; h.GPUs[d.GPU].Shares > 0 && t != p.Tenant {
				return t
			}
		}
	}
	return ""
}

// applyLegacyShare handles a stored share that another tenant's shares on
// its GPU refuse: shares placed before one GPU's shares belonged to one
// tenant. The GPU keeps them all, under its first tenant, so that none of
// its capacity is handed out twice; no other tenant joins it until they
// end. Any other refusal is answered as is.
func (s *Scheduler) applyLegacyShare(f *fleet.Fleet, p *fleet.Placement, id string, err error) error {
	owner := shareTenantOf(f, p)
	if owner == "" {
		return err
	}
	legacy := *p
	legacy.Tenant = owner
	if lerr := f.Apply(&legacy); lerr != nil {
		return err
	}
	s.Log.Warn("rebuild: a GPU holds shares of several tenants (placed before shares were kept to one tenant); kept until they end",
		"instance", id, "host", p.HostID, "recorded_as", owner)
	return nil
}
