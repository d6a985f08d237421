package controller

import (
	"sync/atomic"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
	"github.com/gpucloud/gpucloud/placement"
)

// availabilityEvery is how often at most the scheduler recounts the
// offerings' availability while the fleet keeps changing.
const availabilityEvery = time.Second

// capacity is the scheduler's availability summary (Availability): per
// offering, how many hosts could ever run it and how many have room now.
// It is counted with an engine of its own, so that the counts never evict
// the scheduler's cache, over the live fleet and over an "empty" copy of
// it (every host as it would be with nothing placed and not cordoned),
// which answers "could ever run".
type capacity struct {
	engine *placement.Engine
	// empty is built from the fleet emptyOf when it held emptyHosts hosts
	// (a rebuild makes a new fleet; hosts that join are added to the same
	// one, Scheduler.grow: either changes the host set).
	empty      *fleet.Fleet
	emptyOf    *fleet.Fleet
	emptyHosts int
	// counted is the fleet and change count of the last count, at wall
	// time last.
	countedOf *fleet.Fleet
	countedAt uint64
	last      time.Time

	published atomic.Pointer[map[string]cloud.OfferingAvailability]
	// snapshot is a copy of the live fleet as of the last count, for
	// DryRun: never changed once stored.
	snapshot atomic.Pointer[fleet.Fleet]
}

// Availability answers, per offering name, how many hosts could ever run
// one instance of it and how many could now, as of the last step (see
// cloud.OfferingAvailability); nil before the fleet is built. It is safe
// to call from any goroutine: the API's offering list and instance create
// read it.
func (s *Scheduler) Availability() map[string]cloud.OfferingAvailability {
	if p := s.avail.published.Load(); p != nil {
		return *p
	}
	return nil
}

// SnapshotHosts is how many hosts the fleet DryRun places on holds: 0
// before the scheduler's first pass. Safe to call from any goroutine.
func (s *Scheduler) SnapshotHosts() int {
	if snap := s.avail.snapshot.Load(); snap != nil {
		return len(snap.Hosts)
	}
	return 0
}

// publishAvailability recounts the availability when the fleet changed,
// at most every availabilityEvery.
func (s *Scheduler) publishAvailability() {
	c := &s.avail
	f := s.fleet
	if f == nil || (f == c.countedOf && f.Changes() == c.countedAt) {
		return
	}
	if c.countedOf != nil && time.Since(c.last) < availabilityEvery {
		return
	}
	if c.engine == nil {
		c.engine = placement.NewEngine(s.Catalog, s.Engine.Scorer(), 1)
	}
	if c.emptyOf != f || c.emptyHosts != len(f.Hosts) {
		c.empty = emptyFleet(f, s)
		c.emptyOf, c.emptyHosts = f, len(f.Hosts)
	}
	now := s.Now()
	out := map[string]cloud.OfferingAvailability{}
	for _, o := range s.Catalog.Offerings() {
		req, err := RequestFor(&cloud.Instance{ID: "availability"}, o)
		if err != nil {
			continue
		}
		_, ever, _, err := c.engine.Count(c.empty, req)
		if err != nil {
			continue
		}
		_, fit, reasons, err := c.engine.Count(f, req)
		if err != nil {
			continue
		}
		a := cloud.OfferingAvailability{Hosts: ever, FitsNow: fit, AsOf: now, FleetHosts: len(f.Hosts)}
		a.Containers = ever
		if ever > 0 {
			img := *req
			img.Labels = append(img.Labels, NeedsContainers)
			if _, n, _, err := c.engine.Count(c.empty, &img); err == nil {
				a.Containers = n
			}
		}
		if fit == 0 && len(reasons) > 0 {
			a.Reasons = reasons
		}
		out[o.Name] = a
	}
	c.published.Store(&out)
	c.snapshot.Store(f.Clone())
	c.countedOf, c.countedAt, c.last = f, f.Changes(), time.Now()
}

// emptyFleet copies f's hosts with nothing placed on them, every one
// schedulable, and GPUs that placement switched into MIG mode switched
// back: the fleet as it could be.
func emptyFleet(f *fleet.Fleet, s *Scheduler) *fleet.Fleet {
	e := fleet.New()
	for _, h := range f.Hosts {
		c := *h
		c.State = fleet.Schedulable
		c.GPUs = append([]fleet.GPU(nil), h.GPUs...)
		for i := range c.GPUs {
			if c.GPUs[i].MIGAuto {
				c.GPUs[i].MIG = false
			}
		}
		if err := e.AddHost(&c, s.Catalog); err != nil {
			s.Log.Error("availability: host does not copy", "host", h.ID, "err", err)
		}
	}
	return e
}

// DryRun places reqs in order on a copy of the fleet as of the last
// availability count (at most availabilityEvery old), each after the ones
// before it, honouring their placement groups within the run, and reserves
// nothing: a stack's plan asks whether its compute fits now. It is safe to
// call from any goroutine; ok is false before the fleet is built or while
// it has no host.
func (s *Scheduler) DryRun(reqs []cloud.DryRunRequest) (out []cloud.DryRunResult, ok bool) {
	snap := s.avail.snapshot.Load()
	if snap == nil || len(snap.Hosts) == 0 {
		// No fleet yet, or none joined: nothing to say.
		return nil, false
	}
	f := snap.Clone()
	eng := placement.NewEngine(s.Catalog, s.Engine.Scorer(), 1)
	groups := map[string]*placement.Group{}
	for _, r := range reqs {
		res := cloud.DryRunResult{ID: r.ID}
		o, err := s.Catalog.Offering(r.Offering)
		if err != nil {
			res.Reason = err.Error()
			out = append(out, res)
			continue
		}
		req, err := RequestFor(&cloud.Instance{ID: r.ID, TenantID: r.Tenant, Zones: r.Zones, Labels: r.Labels}, o)
		if err != nil {
			res.Reason = err.Error()
			out = append(out, res)
			continue
		}
		if r.Group != "" {
			g := groups[r.Group]
			if g == nil {
				g = &placement.Group{Name: r.Group, Strategy: placement.Strategy(r.Strategy), ByRack: r.ByRack}
				groups[r.Group] = g
			}
			req.Group = g
		}
		p, err := eng.Place(f, req)
		if err != nil {
			res.Reason = err.Error()
			out = append(out, res)
			continue
		}
		p.ID = r.ID
		if err := f.Apply(p); err != nil {
			res.Reason = err.Error()
			out = append(out, res)
			continue
		}
		res.Fits, res.Host = true, p.HostID
		if g := req.Group; g != nil {
			g.Hosts = append(g.Hosts, p.HostID)
			if h := f.Host(p.HostID); h != nil {
				g.Racks = append(g.Racks, h.Rack)
			}
		}
		out = append(out, res)
	}
	return out, true
}
