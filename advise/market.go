package advise

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/estimate"
	"github.com/gpucloud/gpucloud/money"
)

// Defaults the advisor assumes where the market does not say: with list
// prices (offline), and for a spot pool that ran no spot instances
// recently. They are `gpucloud cost estimate`'s defaults, so that the two
// commands agree.
const (
	// DefaultSpotDiscountBP prices spot at 60% off on demand.
	DefaultSpotDiscountBP = estimate.DefaultSpotDiscountBP
	// DefaultReclaimRateBP is 0.05 reclaims per spot instance-hour: one
	// in 20 hours.
	DefaultReclaimRateBP = 500
)

// MarketView is what renting costs and what the fleet can run, as a tenant
// may read it: LiveMarket builds it from what a server shows (GET
// /v1/offerings, /v1/prices and /v1/spot/pools), ListMarket offline from
// list prices. Advise reads it and never changes it.
type MarketView struct {
	// Source says where the numbers come from, for the reasons: "list
	// prices" or "live from https://...".
	Source string `json:"source"`
	// Live is true when the numbers come from a server.
	Live bool `json:"live"`
	// Offerings holds a quote per offering name. An offering of the
	// catalog without a quote is not sold by this market and is
	// excluded, saying so.
	Offerings map[string]Quote `json:"offerings"`
	// VolumePerGiBMonth is the price of volume storage per GiB-month (a
	// 730-hour month), which the checkpoint volume pays.
	VolumePerGiBMonth money.Micros `json:"volume_per_gib_month"`
	// Terms are the commitment terms a tenant can buy; the zero value is
	// billing's defaults.
	Terms CommitmentTerms `json:"terms"`
}

// CommitmentTerms are the discounts of the commitments a tenant can buy
// (billing.NewCommitment prices them). Zero fields take billing's
// defaults: a reservation's discount by term and payment
// (billing.DefaultDiscountBP), a retainer's fee (billing.RetainerFeeBP)
// and its usage discount (billing.RetainerUsageDiscountBP).
type CommitmentTerms struct {
	// ReservationDiscountBP overrides the reservation discount table (an
	// operator's negotiated rate); 0 is the table.
	ReservationDiscountBP int64 `json:"reservation_discount_bp,omitempty"`
	// RetainerDiscountBP overrides the retainer's usage discount.
	RetainerDiscountBP int64 `json:"retainer_discount_bp,omitempty"`
	// NoCommitments, when true, leaves reservations and retainers out
	// (a market that does not sell them).
	NoCommitments bool `json:"no_commitments,omitempty"`
}

// Quote is one offering's market.
type Quote struct {
	// OnDemand is the on-demand price per instance-hour; Zone is set when
	// it is one zone's price (the market has no every-zone price).
	OnDemand money.Micros `json:"on_demand"`
	Zone     string       `json:"zone,omitempty"`
	// Spot lists the offering's spot pools, one per zone. Empty: the
	// offering has no spot market.
	Spot []SpotQuote `json:"spot,omitempty"`
	// Availability is what the fleet can do for the offering; nil is
	// unknown (offline, or a server that does not know its fleet).
	Availability *Availability `json:"availability,omitempty"`
}

// SpotQuote is one spot pool: the offering in a zone.
type SpotQuote struct {
	// Zone is the pool's zone; empty for an assumed pool (offline).
	Zone string `json:"zone,omitempty"`
	// Price is the pool's newest spot price per instance-hour.
	Price money.Micros `json:"price"`
	// ReclaimRateBP is reclaims per spot instance-hour in basis points,
	// as api.SpotPool.ReclaimRateBP: 500 is 0.05 an hour.
	ReclaimRateBP int64 `json:"reclaim_rate_bp"`
	// RateKnown is false when the pool ran no spot instances over the
	// window, so that ReclaimRateBP says nothing; the advisor then
	// assumes DefaultReclaimRateBP.
	RateKnown bool `json:"rate_known"`
	// Assumed marks a pool the market does not have (offline): its
	// price is DefaultSpotDiscountBP off the list price.
	Assumed bool `json:"assumed,omitempty"`
}

// Availability is api.OfferingAvailability's two counts.
type Availability struct {
	// Hosts counts the hosts that could run one instance if they were
	// empty; zero means no host of the fleet ever could.
	Hosts int `json:"hosts"`
	// FitsNow counts the hosts with room for one instance now.
	FitsNow int `json:"fits_now"`
}

// check reports a negative price: the API never serves one, so it is a
// caller's bug, not something to advise around.
func (m *MarketView) check() error {
	if m.VolumePerGiBMonth < 0 {
		return fmt.Errorf("advise: market: negative volume price %s", m.VolumePerGiBMonth)
	}
	for name, q := range m.Offerings {
		if q.OnDemand < 0 {
			return fmt.Errorf("advise: market: negative on-demand price %s of %s", q.OnDemand, name)
		}
		for _, s := range q.Spot {
			if s.Price < 0 || s.ReclaimRateBP < 0 {
				return fmt.Errorf("advise: market: negative spot price or reclaim rate in pool %s/%s", name, s.Zone)
			}
		}
	}
	return nil
}

// ListMarket is the offline market: every offering of cat at its list
// price (billing.ListPrice), an assumed spot pool at
// DefaultSpotDiscountBP off with DefaultReclaimRateBP reclaims, volumes
// at billing.DefaultVolumePrice, availability unknown. An operator's
// price book may differ; the advice says which prices it used.
func ListMarket(cat *catalog.Catalog) (*MarketView, error) {
	m := &MarketView{Source: "list prices", Offerings: map[string]Quote{}, VolumePerGiBMonth: billing.DefaultVolumePrice}
	for _, o := range cat.Offerings() {
		od, err := billing.ListPrice(cat, o.Name)
		if err != nil {
			return nil, fmt.Errorf("list price of %s: %w", o.Name, err)
		}
		sp, err := money.MulDiv(od, 10_000-DefaultSpotDiscountBP, 10_000)
		if err != nil {
			return nil, fmt.Errorf("spot price of %s: %w", o.Name, err)
		}
		m.Offerings[o.Name] = Quote{OnDemand: od,
			Spot: []SpotQuote{{Price: sp, ReclaimRateBP: DefaultReclaimRateBP, Assumed: true}}}
	}
	return m, nil
}

// Live is what a server shows any tenant, in the domain's types: the
// input of LiveMarket. The CLI fills it from GET /v1/offerings,
// /v1/prices and /v1/spot/pools; the console from the same services.
type Live struct {
	// Source names the server for the reasons: "live from https://...".
	Source string
	// Offerings are the names of the offerings the server sells.
	Offerings []string
	// Prices are the price versions in force now, compute and volume
	// (others are ignored).
	Prices []*cloud.Price
	// Availability is the scheduler's, per offering; nil or a missing
	// entry is unknown.
	Availability map[string]cloud.OfferingAvailability
	// Pools are the spot pools with their newest price and their
	// reclaims over a recent window.
	Pools []LivePool
}

// LivePool is one spot pool as GET /v1/spot/pools shows it.
type LivePool struct {
	cloud.Pool
	Price         money.Micros
	ReclaimRateBP int64
	// SpotSeconds is the spot usage the rate was measured over; zero
	// means the rate says nothing.
	SpotSeconds int64
}

// LiveMarket builds the market of a server: each offering at its
// every-zone on-demand price, or else its cheapest zone's (Quote.Zone says
// which); an offering without a price is not sold. Its availability when
// the server knows it, and its pools that have a price, by zone. Volumes
// at the every-zone volume price, else billing.DefaultVolumePrice.
func LiveMarket(l Live) *MarketView {
	m := &MarketView{Source: l.Source, Live: true, Offerings: map[string]Quote{}, VolumePerGiBMonth: billing.DefaultVolumePrice}
	type od struct {
		price money.Micros
		zone  string
	}
	prices := map[string]od{}
	for _, p := range l.Prices {
		switch {
		case p == nil:
		case p.Kind == cloud.PriceVolume && p.Offering == "" && p.Zone == "":
			m.VolumePerGiBMonth = p.Amount
		case p.Kind == cloud.PriceCompute:
			cur, ok := prices[p.Offering]
			switch {
			case p.Zone == "":
				prices[p.Offering] = od{p.Amount, ""}
			case !ok || cur.zone != "" && (p.Amount < cur.price || p.Amount == cur.price && p.Zone < cur.zone):
				prices[p.Offering] = od{p.Amount, p.Zone}
			}
		}
	}
	for _, name := range l.Offerings {
		p, ok := prices[name]
		if !ok {
			continue
		}
		q := Quote{OnDemand: p.price, Zone: p.zone}
		if av, ok := l.Availability[name]; ok {
			q.Availability = &Availability{Hosts: av.Hosts, FitsNow: av.FitsNow}
		}
		for _, sp := range l.Pools {
			if sp.Offering == name && sp.Price > 0 {
				q.Spot = append(q.Spot, SpotQuote{Zone: sp.Zone, Price: sp.Price, ReclaimRateBP: sp.ReclaimRateBP, RateKnown: sp.SpotSeconds > 0})
			}
		}
		slices.SortFunc(q.Spot, func(a, b SpotQuote) int { return strings.Compare(a.Zone, b.Zone) })
		m.Offerings[name] = q
	}
	return m
}
