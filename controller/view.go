package controller

import (
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// SpotHints is what the spot market tells the scheduler before a step.
// The scheduler keeps the maps it is given: the caller must not change
// them afterwards.
type SpotHints struct {
	// Prices is each pool's current spot price: what a spot victim pays,
	// for the preemption planner.
	Prices map[cloud.Pool]money.Micros
	// Gates holds, for every pending spot instance the market has looked
	// at, where it may be placed. A pending spot instance absent from it
	// waits: its max price is unchecked until the market's next round.
	Gates map[string]SpotGate
}

// SpotGate is where the market lets a pending spot instance be placed.
type SpotGate struct {
	// Zones are the zones of its pool whose price is within its max
	// price; nil places no restriction (a request without a max price).
	Zones []string
	// Blocked, when not empty, is why no zone is within the max price:
	// the instance stays pending with it as its reason.
	Blocked string
}

// SetSpotHints replaces what the scheduler knows of the spot market (see
// SpotHints). The market calls it in the scheduler's goroutine, before a
// Step.
func (s *Scheduler) SetSpotHints(h SpotHints) { s.hints = h }

// FleetView is the read-only view of the scheduler's fleet that the spot
// market works from: just what it needs, nothing it could change. It reads
// the live fleet, so it is valid in the scheduler's goroutine, between
// steps.
type FleetView interface {
	// Built reports whether the fleet has been built from the store (by a
	// Step or a Rebuild).
	Built() bool
	// Hosts is how many hosts the fleet has, in any state.
	Hosts() int
	// Supply estimates, for every offering in every zone, how many
	// instances the zone's schedulable hosts could hold when empty, and
	// how many more fit now: the supply side of the market.
	Supply() map[cloud.Pool]PoolSupply
	// Reserved counts, per pool, the capacity placeholders the scheduler
	// holds in the fleet for zonal commitments.
	Reserved() map[cloud.Pool]int
	// FitsSpot reports whether a spot instance of the offering fits the
	// fleet now in one of the zones (the placement engine decides).
	FitsSpot(offering string, zones []string) bool
	// Notice is the reclaim notice of spot instances in the pool.
	Notice(pool cloud.Pool) time.Duration
}

// FleetView returns the read-only view of the fleet for the market.
func (s *Scheduler) FleetView() FleetView { return fleetView{s} }

// fleetView implements FleetView over the scheduler's fields.
type fleetView struct{ s *Scheduler }

func (v fleetView) Built() bool { return v.s.fleet != nil }

func (v fleetView) Hosts() int {
	if v.s.fleet == nil {
		return 0
	}
	return len(v.s.fleet.Hosts)
}

func (v fleetView) Supply() map[cloud.Pool]PoolSupply {
	if v.s.fleet == nil {
		return map[cloud.Pool]PoolSupply{}
	}
	return poolSupply(v.s.fleet, v.s.Catalog)
}

func (v fleetView) Reserved() map[cloud.Pool]int {
	out := make(map[cloud.Pool]int, len(v.s.placeholders))
	for _, ph := range v.s.placeholders {
		out[ph.pool]++
	}
	return out
}

func (v fleetView) FitsSpot(offering string, zones []string) bool {
	if v.s.fleet == nil || len(zones) == 0 {
		return false
	}
	o, err := v.s.Catalog.Offering(offering)
	if err != nil {
		return false
	}
	req, err := RequestFor(&cloud.Instance{ID: "probe", Zones: zones}, o)
	if err != nil {
		return false
	}
	req.Preemptible = true
	_, err = v.s.Engine.Place(v.s.fleet, req)
	return err == nil
}

func (v fleetView) Notice(pool cloud.Pool) time.Duration { return v.s.noticeFor(pool) }
