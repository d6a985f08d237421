package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// maxPrice bounds a price: anything above a million currency units per
// hour (or GiB-month) is a typo, not a price.
const maxPrice = 1_000_000 * money.Unit

// priceBackdate is how far in the past a new price may take effect: a
// little, for clock skew between the operator and the server, but never
// enough to change what was already billed.
const priceBackdate = time.Minute

// priceKind parses a price kind; empty is compute.
func priceKind(fieldName, s string) (cloud.PriceKind, error) {
	switch k := cloud.PriceKind(s); k {
	case "":
		return cloud.PriceCompute, nil
	case cloud.PriceCompute, cloud.PriceVolume, cloud.PriceAddress:
		return k, nil
	}
	return "", field(fieldName, "unknown kind %s (want compute, volume or address)", quote(s))
}

// offeringField resolves an offering of the catalog for a request field,
// answering the closest names when it does not exist.
func (s *api) offeringField(name, offering string) (*catalog.Offering, error) {
	if offering == "" {
		return nil, field(name, "is required; GET /v1/offerings lists them")
	}
	o, err := s.cat.Offering(offering)
	if err != nil {
		var nf *catalog.NotFoundError
		if errors.As(err, &nf) {
			return nil, &cloud.Error{Code: cloud.Invalid, Message: name + ": " + err.Error(),
				Details: map[string]any{"field": name, "known": nf.Known[:min(len(nf.Known), 8)]}}
		}
		return nil, field(name, "%v", err)
	}
	return o, nil
}

// decodeMoneyBody is decodeBody for bodies with an amount: an amount that
// is not a decimal (money.Parse's error) names its field instead of
// reading as malformed JSON.
func decodeMoneyBody(w http.ResponseWriter, r *http.Request, v any, amountField string) error {
	err := decodeBody(w, r, v)
	var ce *cloud.Error
	if errors.As(err, &ce) && strings.HasPrefix(ce.Message, "malformed JSON: money: ") {
		return field(amountField, "%s; send a decimal string such as \"12.50\" (at most 6 decimals)",
			strings.TrimPrefix(ce.Message, "malformed JSON: money: "))
	}
	return err
}

// listPrices handles GET /v1/prices: every version of the prices that
// match ?kind, ?offering and ?zone, or with ?at (RFC 3339) only the
// versions in force at that time.
func (s *api) listPrices(w http.ResponseWriter, r *http.Request, p principal) error {
	q := r.URL.Query()
	f := cloud.PriceFilter{Zone: q.Get("zone")}
	if k := q.Get("kind"); k != "" {
		var err error
		if f.Kind, err = priceKind("kind", k); err != nil {
			return err
		}
	}
	if name := q.Get("offering"); name != "" {
		o, err := s.offeringField("offering", name)
		if err != nil {
			return err
		}
		f.Offering = o.Name
	}
	var at time.Time
	if v := q.Get("at"); v != "" {
		var err error
		if at, err = time.Parse(time.RFC3339, v); err != nil {
			return field("at", "%s is not an RFC 3339 time such as 2026-12-01T00:00:00Z", quote(v))
		}
	}
	out := PriceList{Prices: []*cloud.Price{}}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		ps, err := tx.ListPrices(r.Context(), f)
		if err != nil {
			return err
		}
		if !at.IsZero() {
			ps = inForce(ps, at)
		}
		out.Prices = append(out.Prices[:0], ps...)
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// inForce keeps, of each kind, offering and zone, the version in force at
// t: the one that took effect last at or before t (of two that took effect
// at once, the later one set). The order of ps is kept.
func inForce(ps []*cloud.Price, t time.Time) []*cloud.Price {
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

// setPrice handles POST /v1/prices (admin): a new version of a price, in
// force from effective_at (default now) until the next version. Versions
// are never changed or deleted, and a new one may not take effect in the
// past, so that what was billed stays billed. With an Idempotency-Key
// (one key space for every price: they are the operator's), a retry
// answers the version the first call added, with 200 instead of 201, even
// once its effective_at has passed; the same key with another kind,
// offering, zone, amount or effective_at is a conflict.
func (s *api) setPrice(w http.ResponseWriter, r *http.Request, p principal) error {
	var req SetPriceRequest
	if err := decodeMoneyBody(w, r, &req, "amount"); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	kind, err := priceKind("kind", string(req.Kind))
	if err != nil {
		return err
	}
	offering := ""
	if kind == cloud.PriceCompute {
		o, err := s.offeringField("offering", req.Offering)
		if err != nil {
			return err
		}
		offering = o.Name
	} else if req.Offering != "" {
		return field("offering", "a %s price is the same for every offering; leave offering out", kind)
	}
	if err := checkName("zone", req.Zone, false); err != nil {
		return err
	}
	if req.Amount < 0 || req.Amount > maxPrice {
		return field("amount", "%s is out of range 0..%s", req.Amount, maxPrice)
	}
	now := s.now()
	effective := now
	var past error
	if req.EffectiveAt != nil {
		effective = *req.EffectiveAt
		if effective.Before(now.Add(-priceBackdate)) {
			past = field("effective_at", "%s is in the past; a price takes effect now or later, so that billed usage keeps its price (leave it out for now)",
				effective.UTC().Format(time.RFC3339))
		}
	}
	if past != nil && key == "" {
		return past
	}
	var out *cloud.Price
	created := false
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		out, created = nil, false
		if key != "" {
			old, err := priceByKey(ctx, tx, key)
			if err != nil {
				return err
			}
			if old != nil {
				out = old
				return samePrice(old, kind, offering, &req)
			}
		}
		// Only a retry, answered above, may name a time now past.
		if past != nil {
			return past
		}
		price := &cloud.Price{Kind: kind, Offering: offering, Zone: req.Zone, Amount: req.Amount,
			EffectiveAt: effective.UTC(), CreatedAt: now, Actor: p.UserID, IdempotencyKey: key}
		if err := tx.AddPrice(ctx, price); err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) && ce.Code == cloud.Conflict && key != "" {
				if id, ok := ce.Details["existing_id"].(int64); ok {
					return &keyRace{id: strconv.FormatInt(id, 10)}
				}
			}
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventPriceChange, Actor: p.UserID,
			Reason: priceReason(price)}); err != nil {
			return err
		}
		out, created = price, true
		return nil
	})
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.Price, error) {
		p, err := priceByKey(r.Context(), tx, key)
		if err == nil && p == nil {
			err = fmt.Errorf("price %s of idempotency key %s not found", id, quote(key))
		}
		return p, err
	}, func(p *cloud.Price) error { return samePrice(p, kind, offering, &req) })
	if err != nil {
		return err
	}
	writeCreated(w, created, "", out)
	return nil
}

// priceByKey finds the price version added with an idempotency key.
func priceByKey(ctx context.Context, tx cloud.Tx, key string) (*cloud.Price, error) {
	ps, err := tx.ListPrices(ctx, cloud.PriceFilter{})
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if p.IdempotencyKey == key {
			return p, nil
		}
	}
	return nil, nil
}

// samePrice reports a conflict when an idempotency key is reused for
// another price version. A request without effective_at took effect when
// it was first made, so its retry matches any time.
func samePrice(old *cloud.Price, kind cloud.PriceKind, offering string, req *SetPriceRequest) error {
	var d keyDiffs
	d.addString("kind", string(old.Kind), string(kind))
	d.addString("offering", old.Offering, offering)
	d.addString("zone", old.Zone, req.Zone)
	if old.Amount != req.Amount {
		d.add("amount", quote(old.Amount.String()), quote(req.Amount.String()))
	}
	if req.EffectiveAt != nil {
		if at := req.EffectiveAt.UTC().Truncate(time.Microsecond); !at.Equal(old.EffectiveAt) {
			d.add("effective_at", old.EffectiveAt.UTC().Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
	return d.err("price", strconv.FormatInt(old.ID, 10), old.ID)
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

// BootstrapPrices gives a store without any price the built-in price book
// (billing.DefaultPrices of cat), so that a new cloud bills something
// sensible until the operator sets its own prices. A store with any price
// is left alone: prices the operator set are never added to. It reports
// how many prices it added.
func BootstrapPrices(ctx context.Context, store cloud.Store, cat *catalog.Catalog, now time.Time) (added int, err error) {
	defaults, err := billing.DefaultPrices(cat)
	if err != nil {
		return 0, fmt.Errorf("built-in prices: %w", err)
	}
	err = store.Tx(ctx, func(tx cloud.Tx) error {
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

// BootstrapCatalog is what a server runs at every start: BootstrapPrices,
// then Bootstrap. The prices come first, so that a failure there leaves
// the store without its admin token and the next start shows one.
func BootstrapCatalog(ctx context.Context, store cloud.Store, cat *catalog.Catalog, now time.Time) (adminToken string, created bool, err error) {
	if _, err := BootstrapPrices(ctx, store, cat, now); err != nil {
		return "", false, fmt.Errorf("prices: %w", err)
	}
	return Bootstrap(ctx, store, now)
}
