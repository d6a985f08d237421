// Package controller runs the control plane's controllers around the pure
// core: the scheduler loop places pending instances with the placement
// engine and commits each allocation together with the state change.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// DefaultBatchSize is how many placements the scheduler commits in one
// store transaction at most.
const DefaultBatchSize = 128

// Scheduler places pending instances. It keeps an in-memory fleet index,
// rebuilt from the store by Rebuild, and commits placements in store
// transactions of up to BatchSize, each placement with the instance's state
// change (checking its version) and its event, and each host it lands on
// with a version bump that checks the version the fleet was built from. A
// placement whose instance changed meanwhile is dropped; a host that
// changed loses the whole batch, and the fleet is rebuilt. Either way the
// instances are retried on the next Step. Only the leader runs it.
type Scheduler struct {
	Store   cloud.Store
	Catalog *catalog.Catalog
	Engine  *placement.Engine
	Now     func() time.Time
	Log     *slog.Logger
	// BatchSize caps the placements of one commit; 0 is DefaultBatchSize.
	BatchSize int
	// Notice is the spot reclaim notice (DefaultNotice when below
	// MinNotice); PoolNotice overrides it per pool ("offering/zone") or
	// per offering.
	Notice     time.Duration
	PoolNotice map[string]time.Duration

	fleet *fleet.Fleet
	// placed holds the IDs of the instances whose placements are applied
	// to the fleet and committed.
	placed map[string]bool
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
	// view is this step's reclaim view (see reclaimView).
	view *reclaimView
	// spotPrice is each pool's current spot price in micros (set by the
	// market), the victims' price for the preemption planner; spotZones
	// restricts a pending spot instance to the zones whose price is within
	// its max price (absent: no restriction), with spotBlocked the reason
	// when none is.
	spotPrice   map[cloud.Pool]int64
	spotZones   map[string][]string
	spotBlocked map[string]string
}

type wait struct {
	version int64
	epoch   uint64
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

// Rebuild loads hosts and the allocations of instances that hold one from
// the store. A server restart loses nothing: pending stays pending, running
// keeps its allocation.
func (s *Scheduler) Rebuild(ctx context.Context) error {
	var (
		f        *fleet.Fleet
		placed   map[string]bool
		versions map[string]int64
		stamp    cloud.HostStamp
	)
	err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
		f, placed, versions, stamp = fleet.New(), map[string]bool{}, map[string]int64{}, cloud.HostStamp{}
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
			if in.Placement == nil {
				continue
			}
			p := *in.Placement
			p.ID = in.ID
			p.Preemptible = in.Market == cloud.MarketSpot
			// The instance that switched a GPU into MIG mode may be gone
			// while others remain on it; whichever comes first now
			// switches the mode again.
			p.Devices = append([]fleet.Device(nil), p.Devices...)
			if h := f.Host(p.HostID); h != nil {
				for i, d := range p.Devices {
					if d.Kind == fleet.MIGSlice && d.GPU < len(h.GPUs) {
						p.Devices[i].EnableMIG = !h.GPUs[d.GPU].MIG
					}
				}
			}
			if err := f.Apply(&p); err != nil {
				// A stored allocation that no longer fits is a bug or a
				// changed host: say so loudly, keep the rest going.
				s.Log.Error("rebuild: stored allocation does not fit", "instance", in.ID, "host", p.HostID, "err", err)
				continue
			}
			placed[in.ID] = true
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.fleet, s.placed, s.versions, s.stamp = f, placed, versions, stamp
	// Capacity reservations live only in the fleet: the next step places
	// them again on the new one.
	s.placeholders = map[string]placeholder{}
	s.epoch++
	return nil
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
// host changed. An instance that did not fit is not looked at again until
// capacity may have been freed. Placements are applied to the fleet as
// they are chosen, so that the next ones see them, and committed in
// batches; what a batch fails to commit is given back to the fleet.
func (s *Scheduler) Step(ctx context.Context) (int, error) {
	snap, err := s.snapshot(ctx)
	if err != nil {
		return 0, err
	}
	if s.fleet == nil || snap.stamp != s.stamp {
		if err := s.Rebuild(ctx); err != nil {
			return 0, err
		}
	} else if err := s.release(snap.holding); err != nil {
		return 0, err
	}
	s.view = nil
	defer func() { s.view = nil }()
	if _, err := s.enforceDeadlines(ctx, snap); err != nil {
		return 0, err
	}
	if err := s.reserve(ctx, snap); err != nil {
		return 0, err
	}
	// On-demand instances first, then spot, each oldest first: spot never
	// takes capacity an on-demand instance waits for in the same step.
	pending := snap.pending
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
	waiting := map[string]wait{}
	var batch []assignment
	placed := 0
	flush := func() error {
		n, err := s.commit(ctx, batch)
		placed += n
		batch = batch[:0]
		return err
	}
	for _, in := range pending {
		if s.placed[in.ID] {
			// Placed by another scheduler after the snapshot: the rebuilt
			// fleet holds it.
			continue
		}
		if w, ok := s.waiting[in.ID]; ok && w.version == in.Version && w.epoch == s.epoch {
			waiting[in.ID] = w
			continue
		}
		s.steps++
		if s.steps%256 == 0 {
			s.Engine.Recalibrate(s.fleet)
		}
		a, w, err := s.plan(ctx, snap, in)
		if err != nil {
			s.giveBack(batch)
			return placed, err
		}
		if w != nil {
			waiting[in.ID] = *w
		}
		if a == nil {
			continue
		}
		if batch = append(batch, *a); len(batch) >= size {
			if err := flush(); err != nil {
				return placed, err
			}
		}
	}
	s.waiting = waiting
	return placed, flush()
}

// release frees the fleet allocations of instances that stopped holding
// one (stopped, terminated, failed, lost, or back to pending).
func (s *Scheduler) release(holding map[string]bool) error {
	for id := range s.placed {
		if holding[id] {
			continue
		}
		if err := s.fleet.Release(id); err != nil && !errors.Is(err, fleet.ErrUnknown) {
			return err
		}
		delete(s.placed, id)
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
