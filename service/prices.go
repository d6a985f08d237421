package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// maxPrice bounds a price and a spot request's max price: anything above
// a million currency units per hour (or GiB-month) is a typo, not a price.
const maxPrice = 1_000_000 * money.Unit

// PriceBackdate is how far in the past a new price may take effect: a
// little, for clock skew between the operator and the server, but never
// enough to change what was already billed.
const PriceBackdate = time.Minute

// priceKind parses a price kind; empty is compute.
func priceKind(fieldName string, k cloud.PriceKind) (cloud.PriceKind, error) {
	switch k {
	case "":
		return cloud.PriceCompute, nil
	case cloud.PriceCompute, cloud.PriceVolume, cloud.PriceAddress:
		return k, nil
	}
	return "", Field(fieldName, "unknown kind %s (want compute, volume or address)", Quote(string(k)))
}

// offeringOf resolves an offering of the catalog for a request field,
// answering the closest names when it does not exist.
func offeringOf(cat *catalog.Catalog, fieldName, name string) (*catalog.Offering, error) {
	if name == "" {
		return nil, Field(fieldName, "is required; GET /v1/offerings lists them")
	}
	o, err := cat.Offering(name)
	if err != nil {
		var nf *catalog.NotFoundError
		if errors.As(err, &nf) {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: fieldName + ": " + err.Error(),
				Details: map[string]any{"field": fieldName, "known": nf.Known[:min(len(nf.Known), 8)]}}
		}
		return nil, Field(fieldName, "%v", err)
	}
	return o, nil
}

// Set adds a new version of a price (admins only), in force from
// spec.EffectiveAt (default now) until the next version. Versions are
// never changed or deleted, and a new one may not take effect more than
// PriceBackdate in the past, so that what was billed stays billed. With an
// idempotency key (one key space for every price: they are the
// operator's), a retry answers the version the first call added (created
// false), even once its effective time has passed; the same key with a
// request that differs in any field is a Conflict naming the fields, whose
// "existing_id" is the version's ID (an int64, as price IDs are).
func (s *Prices) Set(ctx context.Context, a Actor, spec api.SetPriceRequest, key string) (out *cloud.Price, created bool, err error) {
	if !a.Admin() {
		return nil, false, &cloud.Error{Code: cloud.PermissionDenied, Message: "prices are set by admins"}
	}
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	kind, err := priceKind("kind", spec.Kind)
	if err != nil {
		return nil, false, err
	}
	offering := ""
	if kind == cloud.PriceCompute {
		o, err := offeringOf(s.cat, "offering", spec.Offering)
		if err != nil {
			return nil, false, err
		}
		offering = o.Name
	} else if spec.Offering != "" {
		return nil, false, Field("offering", "a %s price is the same for every offering; leave offering out", kind)
	}
	if err := CheckName("zone", spec.Zone, false); err != nil {
		return nil, false, err
	}
	if spec.Amount < 0 || spec.Amount > maxPrice {
		return nil, false, Field("amount", "%s is out of range 0..%s", spec.Amount, maxPrice)
	}
	now := s.now()
	effective, past := startAt("effective_at", spec.EffectiveAt, now, PriceBackdate,
		"a price takes effect now or later, so that billed usage keeps its price (leave it out for now)")
	if past != nil && key == "" {
		return nil, false, past
	}
	same := func(p *cloud.Price) error { return samePrice(p, kind, offering, &spec) }
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		byKey := func(k string) (*cloud.Price, error) { return tx.PriceByKey(ctx, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		// Only a retry, answered above, may name a time now past.
		if past != nil {
			return past
		}
		p := &cloud.Price{Kind: kind, Offering: offering, Zone: spec.Zone, Amount: spec.Amount,
			EffectiveAt: effective.UTC(), CreatedAt: now, Actor: a.ID, IdempotencyKey: key}
		if err := tx.AddPrice(ctx, p); err != nil {
			return asPriceKeyRace(err, key)
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventPriceChange, Actor: a.ID,
			Reason: priceReason(p)}); err != nil {
			return err
		}
		out, created = p, true
		return nil
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Price, error) {
		return tx.PriceByKey(ctx, key)
	}, same)
	return out, created && err == nil, err
}

// asPriceKeyRace is asKeyRace for prices, whose store Conflict carries the
// existing version's ID as an int64.
func asPriceKeyRace(err error, key string) error {
	var ce *cloud.Error
	if key != "" && errors.As(err, &ce) && ce.Code == cloud.Conflict {
		if id, ok := ce.Details["existing_id"].(int64); ok {
			return &keyRace{id: strconv.FormatInt(id, 10)}
		}
	}
	return err
}

// samePrice reports a conflict when an idempotency key is reused for
// another price version. A request without effective_at took effect when
// it was first made, so its retry matches any time.
func samePrice(old *cloud.Price, kind cloud.PriceKind, offering string, spec *api.SetPriceRequest) error {
	var d KeyDiffs
	d.String("kind", string(old.Kind), string(kind))
	d.String("offering", old.Offering, offering)
	d.String("zone", old.Zone, spec.Zone)
	if old.Amount != spec.Amount {
		d.Add("amount", Quote(old.Amount.String()), Quote(spec.Amount.String()))
	}
	if spec.EffectiveAt != nil {
		if at := spec.EffectiveAt.UTC().Truncate(time.Microsecond); !at.Equal(old.EffectiveAt.Truncate(time.Microsecond)) {
			d.Add("effective_at", old.EffectiveAt.UTC().Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
	err := d.Err("price", strconv.FormatInt(old.ID, 10))
	var ce *cloud.Error
	if errors.As(err, &ce) {
		ce.Details["existing_id"] = old.ID
	}
	return err
}

// priceReason describes a price version for the event trail.
func priceReason(p *cloud.Price) string {
	what := string(p.Kind)
	if p.Offering != "" {
		what += " " + p.Offering
	}
	where := "every zone"
	if p.Zone != "" {
		where = "zone " + p.Zone
	}
	return what + " in " + where + " costs " + p.Amount.String() + " from " + p.EffectiveAt.Format(time.RFC3339)
}

// PriceQuery selects price versions; zero fields match everything.
type PriceQuery struct {
	Kind     cloud.PriceKind
	Offering string
	Zone     string
	// At, when set, keeps only the versions in force at that time.
	At time.Time
}

// List answers the price versions that match q. Prices are public to
// every user of the cloud: any actor may read them.
func (s *Prices) List(ctx context.Context, a Actor, q PriceQuery) ([]*cloud.Price, error) {
	f := cloud.PriceFilter{Zone: q.Zone}
	if q.Kind != "" {
		var err error
		if f.Kind, err = priceKind("kind", q.Kind); err != nil {
			return nil, err
		}
	}
	if q.Offering != "" {
		o, err := offeringOf(s.cat, "offering", q.Offering)
		if err != nil {
			return nil, err
		}
		f.Offering = o.Name
	}
	var out []*cloud.Price
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ps, err := tx.ListPrices(ctx, f)
		if err != nil {
			return err
		}
		if !q.At.IsZero() {
			ps = InForce(ps, q.At)
		}
		out = append([]*cloud.Price{}, ps...)
		return nil
	})
	return out, err
}

// InForce keeps, of each kind, offering and zone, the version in force at
// t: the one that took effect last at or before t (of two that took effect
// at once, the later one set). The order of ps is kept.
func InForce(ps []*cloud.Price, t time.Time) []*cloud.Price {
	type key struct {
		kind           cloud.PriceKind
		offering, zone string
	}
	best := map[key]*cloud.Price{}
	for _, p := range ps {
		if p.EffectiveAt.After(t) {
			continue
		}
		k := key{p.Kind, p.Offering, p.Zone}
		if b := best[k]; b == nil || p.EffectiveAt.After(b.EffectiveAt) ||
			p.EffectiveAt.Equal(b.EffectiveAt) && p.ID > b.ID {
			best[k] = p
		}
	}
	out := []*cloud.Price{}
	for _, p := range ps {
		if best[key{p.Kind, p.Offering, p.Zone}] == p {
			out = append(out, p)
		}
	}
	return out
}

// BootstrapPrices gives a store without any price the built-in price book
// (billing.DefaultPrices of cat), so that a new cloud bills something
// sensible until the operator sets its own prices. A store with any price
// is left alone: prices the operator set are never added to. It reports
// how many prices it added.
func BootstrapPrices(ctx context.Context, st cloud.Store, cat *catalog.Catalog, now time.Time) (added int, err error) {
	defaults, err := billing.DefaultPrices(cat)
	if err != nil {
		return 0, fmt.Errorf("built-in prices: %w", err)
	}
	err = st.Tx(ctx, func(tx cloud.Tx) error {
		added = 0
		have, err := tx.ListPrices(ctx, cloud.PriceFilter{})
		if err != nil || len(have) > 0 {
			return err
		}
		for _, p := range defaults {
			c := *p
			if c.CreatedAt.IsZero() {
				c.CreatedAt = now
			}
			if err := tx.AddPrice(ctx, &c); err != nil {
				return err
			}
		}
		added = len(defaults)
		return nil
	})
	return added, err
}
