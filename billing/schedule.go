package billing

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// This file holds the price schedules the rater accrues seconds at.

type schedKind uint8

const (
	schedOnDemand schedKind = iota
	schedSpot
	schedVolume
	schedAddress
)

// schedule is a price as a step function of whole seconds over the
// period: price[i] (ok[i] false when there is none) from at[i] until
// at[i+1]. at[0] is the period's start; equal neighbours are merged.
type schedule struct {
	id             int32
	kind           schedKind
	offering, zone string
	at             []int64
	price          []money.Micros
	ok             []bool
}

// find returns the index of the segment holding second t >= at[0].
func (s *schedule) find(t int64) int {
	return sort.Search(len(s.at), func(i int) bool { return s.at[i] > t }) - 1
}

func (r *rater) build(kind schedKind, offering, zone string, pts []int64, price func(time.Time) (money.Micros, bool)) *schedule {
	sort.Slice(pts, func(i, j int) bool { return pts[i] < pts[j] })
	s := &schedule{id: int32(len(r.scheds)), kind: kind, offering: offering, zone: zone}
	for i, t := range pts {
		if i > 0 && t == pts[i-1] {
			continue
		}
		p, ok := price(unix(t))
		if n := len(s.at); n > 0 && s.ok[n-1] == ok && s.price[n-1] == p {
			continue
		}
		s.at = append(s.at, t)
		s.price = append(s.price, p)
		s.ok = append(s.ok, ok)
	}
	r.scheds = append(r.scheds, s)
	return s
}

func (r *rater) computePoints(pts []int64, offering, zone string) []int64 {
	if zone != "" {
		pts = changes(pts, r.book.compute[okey{offering, zone}], r.start, r.end)
	}
	return changes(pts, r.book.compute[okey{offering, ""}], r.start, r.end)
}

func (r *rater) onDemand(offering, zone string) *schedule {
	k := okey{offering, zone}
	if s := r.od[k]; s != nil {
		return s
	}
	pts := r.computePoints([]int64{r.start}, offering, zone)
	s := r.build(schedOnDemand, offering, zone, pts, func(t time.Time) (money.Micros, bool) {
		return r.book.Compute(offering, zone, t)
	})
	r.od[k] = s
	return s
}

func (r *rater) spotSched(offering, zone string) *schedule {
	k := okey{offering, zone}
	if s := r.spot[k]; s != nil {
		return s
	}
	pool := cloud.Pool{Offering: offering, Zone: zone}
	pts := changes([]int64{r.start}, r.book.spot[pool], r.start, r.end)
	pts = r.computePoints(pts, offering, zone)
	s := r.build(schedSpot, offering, zone, pts, func(t time.Time) (money.Micros, bool) {
		if p, ok := r.book.Spot(pool, t); ok {
			return p, true
		}
		return r.book.Compute(offering, zone, t)
	})
	r.spot[k] = s
	return s
}

func (r *rater) volSched() *schedule {
	if r.vol == nil {
		r.vol = r.build(schedVolume, "", "", changes([]int64{r.start}, r.book.volume, r.start, r.end), r.book.Volume)
	}
	return r.vol
}

func (r *rater) addrSched() *schedule {
	if r.addr == nil {
		r.addr = r.build(schedAddress, "", "", changes([]int64{r.start}, r.book.address, r.start, r.end), r.book.Address)
	}
	return r.addr
}

// MissingPriceError says that usage accrued where the price book has no
// price: an operator's gap to fill, not an internal failure.
type MissingPriceError struct {
	What string    // e.g. "on-demand price for offering h100.1x in us-east-1a"
	At   time.Time // when the usage accrued
}

func (e *MissingPriceError) Error() string {
	return "billing: no " + e.What + " at " + e.At.Format(time.RFC3339)
}

func (r *rater) noPrice(s *schedule, t int64) error {
	e := &MissingPriceError{At: unix(t)}
	switch s.kind {
	case schedOnDemand:
		e.What = fmt.Sprintf("on-demand price for offering %s in %s", s.offering, zoneName(s.zone))
	case schedSpot:
		e.What = fmt.Sprintf("price for spot pool %s/%s (no spot price yet and no on-demand price for offering %s in %s)",
			s.offering, s.zone, s.offering, zoneName(s.zone))
	case schedVolume:
		e.What = "volume price"
	default:
		e.What = "address price"
	}
	return e
}

func zoneName(z string) string {
	if z == "" {
		return "any zone"
	}
	return "zone " + z
}

// add accrues qty units for each second of [a, b) at the prices of s, on
// the lines of endpoint ep (an index into r.eps, 0 for none).
func (r *rater) add(cat uint8, s *schedule, ep int32, a, b, qty int64) error {
	if a >= b || qty == 0 {
		return nil
	}
	for i := s.find(a); i < len(s.at) && s.at[i] < b; i++ {
		lo, hi := max(a, s.at[i]), b
		if i+1 < len(s.at) {
			hi = min(b, s.at[i+1])
		}
		if !s.ok[i] {
			return r.noPrice(s, lo)
		}
		r.acc[lkey{cat, s.id, -1, s.price[i], ep}] += (hi - lo) * qty
	}
	return nil
}
