package billing

import (
	"sort"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// PriceBook answers which price is in force at a time: on-demand compute
// prices by offering and zone, the spot history of each pool, and the
// volume and address prices. It is immutable once built and safe for
// concurrent use.
type PriceBook struct {
	compute map[okey][]version
	volume  []version
	address []version
	spot    map[cloud.Pool][]version
}

// okey is an offering in a zone ("" for the every-zone price).
type okey struct{ offering, zone string }

// version is a price in force from at until the next version.
type version struct {
	at     time.Time
	amount money.Micros
}

// NewPriceBook indexes price versions and spot history. Versions of one
// key taking effect at the same time resolve to the one with the larger
// ID, or the later one in prices when IDs are equal; likewise the later of
// two spot points at the same time wins. Volume and address prices are
// the versions without offering and zone.
func NewPriceBook(prices []*cloud.Price, spot []cloud.SpotPrice) *PriceBook {
	b := &PriceBook{compute: map[okey][]version{}, spot: map[cloud.Pool][]version{}}
	ps := make([]*cloud.Price, 0, len(prices))
	for _, p := range prices {
		if p != nil {
			ps = append(ps, p)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if !ps[i].EffectiveAt.Equal(ps[j].EffectiveAt) {
			return ps[i].EffectiveAt.Before(ps[j].EffectiveAt)
		}
		return ps[i].ID < ps[j].ID
	})
	for _, p := range ps {
		v := version{at: p.EffectiveAt, amount: p.Amount}
		switch p.Kind {
		case cloud.PriceCompute:
			k := okey{p.Offering, p.Zone}
			b.compute[k] = append(b.compute[k], v)
		case cloud.PriceVolume:
			if p.Offering == "" && p.Zone == "" {
				b.volume = append(b.volume, v)
			}
		case cloud.PriceAddress:
			if p.Offering == "" && p.Zone == "" {
				b.address = append(b.address, v)
			}
		}
	}
	for _, s := range spot {
		b.spot[s.Pool] = append(b.spot[s.Pool], version{at: s.Time, amount: s.Price})
	}
	for _, vs := range b.spot {
		if !sort.SliceIsSorted(vs, func(i, j int) bool { return vs[i].at.Before(vs[j].at) }) {
			sort.SliceStable(vs, func(i, j int) bool { return vs[i].at.Before(vs[j].at) })
		}
	}
	return b
}

// at returns the version in force at t: the last one taking effect at or
// before t.
func at(vs []version, t time.Time) (money.Micros, bool) {
	i := sort.Search(len(vs), func(i int) bool { return vs[i].at.After(t) })
	if i == 0 {
		return 0, false
	}
	return vs[i-1].amount, true
}

// Compute is the on-demand price per hour of offering in zone at t: the
// zonal price version in force, else the zone "" version; ok=false when
// none.
func (b *PriceBook) Compute(offering, zone string, t time.Time) (money.Micros, bool) {
	if zone != "" {
		if p, ok := at(b.compute[okey{offering, zone}], t); ok {
			return p, true
		}
	}
	return at(b.compute[okey{offering, ""}], t)
}

// Spot is the spot price per hour in force at t (the newest history point
// at or before t), never above Compute at t; ok=false if no spot point yet
// (then spot usage rates at on-demand).
func (b *PriceBook) Spot(pool cloud.Pool, t time.Time) (money.Micros, bool) {
	p, ok := at(b.spot[pool], t)
	if !ok {
		return 0, false
	}
	if od, ok := b.Compute(pool.Offering, pool.Zone, t); ok && od < p {
		p = od
	}
	return p, true
}

// Volume is the volume price per GiB-month in force at t.
func (b *PriceBook) Volume(t time.Time) (money.Micros, bool) { return at(b.volume, t) }

// Address is the public address price per hour in force at t.
func (b *PriceBook) Address(t time.Time) (money.Micros, bool) { return at(b.address, t) }

// changes appends the whole seconds in (lo, hi) at which a version of vs
// takes effect (a version applies from the first whole second at or after
// its time).
func changes(dst []int64, vs []version, lo, hi int64) []int64 {
	i := sort.Search(len(vs), func(i int) bool { return ceilSec(vs[i].at) > lo })
	for ; i < len(vs); i++ {
		s := ceilSec(vs[i].at)
		if s >= hi {
			break
		}
		dst = append(dst, s)
	}
	return dst
}

// floorSec and ceilSec are t in whole Unix seconds, rounded down and up.
func floorSec(t time.Time) int64 {
	s := t.Unix() // Unix floors: the nanoseconds part is always >= 0
	return s
}

func ceilSec(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() != 0 {
		s++
	}
	return s
}

func unix(s int64) time.Time { return time.Unix(s, 0).UTC() }
