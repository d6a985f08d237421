package controller

import (
	"fmt"
	"sort"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

// placeholderPrefix starts the IDs of the placeholder allocations that
// hold capacity for zonal commitments: "placeholder/<commitment>/<n>". They live
// only in the scheduler's fleet (a new leader places them again), are not
// preemptible, and so make others' on-demand and spot requests fail for
// that capacity or, through reclaim, evict spot instances from it.
const placeholderPrefix = "placeholder/"

// placeholder is a capacity placeholder: the commitment it holds capacity for and the pool it holds it in.
type placeholder struct {
	commitment string
	pool       cloud.Pool
}

func reservationID(commitment string, n int) string {
	return fmt.Sprintf("%s%s/%d", placeholderPrefix, commitment, n)
}

// reserve keeps, for every active zonal commitment of an exact offering,
// as many placeholders in the fleet as the tenant has not used with
// instances of its own: quantity minus the tenant's on-demand instances of
// that offering holding capacity in the zone. A placeholder that does not
// fit plans a reclaim of spot capacity; when even that fails, the plan
// records the shortfall (an event, once until it changes). Family
// commitments are billing only.
func (s *Scheduler) reserve(r *round) error {
	want := s.wantedPlaceholders(r.snap)
	for id := range s.placeholders {
		if want[id] == nil {
			if err := s.fleet.Release(id); err != nil {
				s.Log.Error("release a capacity reservation", "id", id, "err", err)
			}
			delete(s.placeholders, id)
			s.epoch++
		}
	}
	short := map[string]int{}
	for _, id := range sortedKeys(want) {
		if _, ok := s.placeholders[id]; ok {
			continue
		}
		c := want[id]
		o, _ := s.Catalog.Offering(c.Offering)
		// The placeholder holds room for the commitment's tenant: a
		// shared offering's placeholder takes a GPU only that tenant's
		// shares may join.
		req, err := RequestFor(&cloud.Instance{ID: id, TenantID: c.TenantID, Zones: []string{c.Zone}}, o)
		if err != nil {
			return err
		}
		p, err := s.Engine.Place(s.fleet, req)
		if err == nil {
			p.ID = id
			if err := s.fleet.Apply(p); err != nil {
				return err
			}
			s.placeholders[id] = placeholder{commitment: c.ID, pool: cloud.Pool{Offering: c.Offering, Zone: c.Zone}}
			continue
		}
		ok, err := s.reclaim(r, id, req)
		if err != nil {
			return err
		}
		if !ok {
			short[c.ID]++
		}
	}
	s.planShortfalls(r, short)
	return nil
}

// wantedPlaceholders maps the ID of every placeholder the active zonal
// commitments of snap want to its commitment.
func (s *Scheduler) wantedPlaceholders(snap *snapshot) map[string]*cloud.Commitment {
	now := s.Now()
	want := map[string]*cloud.Commitment{}
	for _, c := range snap.commitments {
		if c.Zone == "" || !c.Active(now) {
			continue
		}
		if _, err := s.Catalog.Offering(c.Offering); err != nil {
			continue
		}
		used := 0
		for _, in := range snap.tenantHolding[c.TenantID] {
			if in.Offering == c.Offering && in.Zone == c.Zone && in.Market != cloud.MarketSpot {
				used++
			}
		}
		for n := 0; n < c.Quantity-used; n++ {
			want[reservationID(c.ID, n)] = c
		}
	}
	return want
}

// planShortfalls plans an event for each commitment whose count of
// placeholders without room (short) changed since the last step.
func (s *Scheduler) planShortfalls(r *round, short map[string]int) {
	for _, cid := range sortedKeys(short) {
		n := short[cid]
		if s.shortfall[cid] == n {
			continue
		}
		s.shortfall[cid] = n
		for _, c := range r.snap.commitments {
			if c.ID == cid {
				sf := service.Shortfall{Commitment: c, Missing: n}
				s.Log.Warn(sf.Reason())
				r.plan.Shortfalls = append(r.plan.Shortfalls, sf)
				break
			}
		}
	}
	for cid := range s.shortfall {
		if short[cid] == 0 {
			delete(s.shortfall, cid)
		}
	}
}

// takeReservation frees one of the tenant's placeholders that an
// on-demand instance of the same offering may use, so that the instance
// lands in the capacity kept for it.
func (s *Scheduler) takeReservation(snap *snapshot, in *cloud.Instance) {
	if in.Market == cloud.MarketSpot || len(s.placeholders) == 0 {
		return
	}
	for _, c := range snap.commitments {
		if c.TenantID != in.TenantID || c.Offering != in.Offering || c.Zone == "" {
			continue
		}
		if len(in.Zones) > 0 && !contains(in.Zones, c.Zone) {
			continue
		}
		for _, id := range sortedKeys(s.placeholders) {
			if s.placeholders[id].commitment != c.ID {
				continue
			}
			if err := s.fleet.Release(id); err == nil {
				delete(s.placeholders, id)
				s.epoch++
				return
			}
		}
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
