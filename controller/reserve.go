package controller

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpucloud/gpucloud/cloud"
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
// fit reclaims spot capacity; when even that fails, the shortfall is an
// event (once until it changes). Family commitments are billing only.
func (s *Scheduler) reserve(ctx context.Context, snap *snapshot) error {
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
		ok, err := s.reclaim(ctx, snap, id, req)
		if err != nil {
			return err
		}
		if !ok {
			short[c.ID]++
		}
	}
	for cid, n := range short {
		if s.shortfall[cid] == n {
			continue
		}
		s.shortfall[cid] = n
		var c *cloud.Commitment
		for _, x := range snap.commitments {
			if x.ID == cid {
				c = x
			}
		}
		if c == nil {
			continue
		}
		reason := fmt.Sprintf("commitment %s: %d of %d reserved %s instances in %s cannot be held: no capacity, even by reclaiming spot",
			c.ID, n, c.Quantity, c.Offering, c.Zone)
		s.Log.Warn(reason)
		if err := s.Store.Tx(ctx, func(tx cloud.Tx) error {
			return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventCommitment, TenantID: c.TenantID,
				Reason: reason, Actor: schedulerActor})
		}); err != nil {
			return err
		}
	}
	for cid := range s.shortfall {
		if short[cid] == 0 {
			delete(s.shortfall, cid)
		}
	}
	return nil
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
