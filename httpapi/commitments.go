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

// commitmentBackdate is how far in the past a commitment may start: clock
// skew, never enough to cover usage already billed.
const commitmentBackdate = time.Minute

// parseTerm reads a commitment term: "1y" to "3y" (a year is 8,760 hours)
// or a Go duration such as "720h", from 1h to 3 years.
func parseTerm(s string) (time.Duration, error) {
	if s == "" {
		return 0, field("term", "is required: \"1y\", \"3y\" or a duration such as \"720h\"")
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "y"); ok {
		y, err := strconv.Atoi(n)
		if err != nil || y < 1 || y > 3 {
			return 0, field("term", "%s: want 1y, 2y, 3y or a duration such as \"720h\"", quote(s))
		}
		d = time.Duration(y) * billing.OneYear
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, field("term", "%s: want \"1y\", \"3y\" or a duration such as \"720h\"", quote(s))
		}
	}
	if d < billing.MinCommitmentTerm || d > billing.MaxCommitmentTerm || d%time.Second != 0 {
		return 0, field("term", "%s is out of range 1h..3y (whole seconds)", quote(s))
	}
	return d, nil
}

// parseDiscountPct reads a discount in percent with at most two decimals
// ("30", "37.5") into basis points: more than 0, at most
// billing.MaxDiscountBP.
func parseDiscountPct(n string) (int64, error) {
	bad := field("discount_pct", "%s: want a percentage above 0 and at most %d with at most two decimals, e.g. 37.5",
		quote(n), billing.MaxDiscountBP/100)
	whole, frac, _ := strings.Cut(n, ".")
	if whole == "" || len(frac) > 2 || strings.ContainsAny(n, "eE+-") {
		return 0, bad
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 100 {
		return 0, bad
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt((frac + "0")[:2], 10, 64); err != nil {
			return 0, bad
		}
	}
	bp := w*100 + f
	if bp <= 0 || bp > billing.MaxDiscountBP {
		return 0, bad
	}
	return bp, nil
}

// commitmentOfferings resolves a commitment's offering: an offering name,
// or a family that prefixes at least one offering ("h100" matches every
// "h100.*"). It returns the canonical name and the offerings it covers.
func (s *api) commitmentOfferings(name string) (string, []*catalog.Offering, error) {
	if name == "" {
		return "", nil, field("offering", "is required: an offering (\"h100.8x\") or a family (\"h100\")")
	}
	if o, err := s.cat.Offering(name); err == nil {
		return o.Name, []*catalog.Offering{o}, nil
	}
	var family []*catalog.Offering
	for _, o := range s.cat.Offerings() {
		if strings.HasPrefix(o.Name, name+".") {
			family = append(family, o)
		}
	}
	if len(family) == 0 {
		_, err := s.offeringField("offering", name)
		return "", nil, err
	}
	return name, family, nil
}

// onDemandPrice is the on-demand price a commitment's fees are fixed from:
// the price in force at t of the offering in the zone, or for a family the
// price of its cheapest offering (so a family commitment never costs more
// than the smallest thing it covers would on demand).
func onDemandPrice(ctx context.Context, tx cloud.Tx, offerings []*catalog.Offering, zone string, t time.Time) (money.Micros, error) {
	prices, err := tx.ListPrices(ctx, cloud.PriceFilter{Kind: cloud.PriceCompute})
	if err != nil {
		return 0, err
	}
	book := billing.NewPriceBook(prices, nil)
	best, found := money.Micros(0), false
	for _, o := range offerings {
		if p, ok := book.Compute(o.Name, zone, t); ok && (!found || p < best) {
			best, found = p, true
		}
	}
	if !found {
		where := "any zone"
		if zone != "" {
			where = "zone " + zone
		}
		return 0, field("offering", "%s has no on-demand price in %s to fix the commitment's fees from; an admin sets one with POST /v1/prices",
			offerings[0].Name, where)
	}
	return best, nil
}

// createCommitment handles POST /v1/commitments: a reservation or a
// retainer whose fees billing.NewCommitment fixes now from the on-demand
// price in force. With an Idempotency-Key, a retry answers the commitment
// the first call made, with 200; the same key for another commitment is a
// conflict.
func (s *api) createCommitment(w http.ResponseWriter, r *http.Request, p principal) error {
	var req CreateCommitmentRequest
	if err := decodeBody(w, r, &req); err != nil {
		return err
	}
	key := r.Header.Get("Idempotency-Key")
	if err := checkIdempotencyKey(key); err != nil {
		return err
	}
	asked, err := bodyOrQueryTenant(r, req.Tenant)
	if err != nil {
		return err
	}
	switch req.Plan {
	case cloud.PlanReservation, cloud.PlanRetainer:
	case "":
		return field("plan", "is required: reservation or retainer")
	default:
		return field("plan", "unknown plan %s (want reservation or retainer)", quote(string(req.Plan)))
	}
	name, offerings, err := s.commitmentOfferings(req.Offering)
	if err != nil {
		return err
	}
	if err := checkName("zone", req.Zone, false); err != nil {
		return err
	}
	if req.Quantity < 1 || req.Quantity > billing.MaxCommitmentQuantity {
		return field("quantity", "%d is out of range 1..%d", req.Quantity, billing.MaxCommitmentQuantity)
	}
	term, err := parseTerm(req.Term)
	if err != nil {
		return err
	}
	switch {
	case req.Plan == cloud.PlanRetainer && req.Payment != "":
		return field("payment", "a retainer is paid by the hour; leave payment out")
	case req.Plan == cloud.PlanReservation && req.Payment == "":
		req.Payment = cloud.PaymentNoUpfront
	case req.Plan == cloud.PlanReservation:
		switch req.Payment {
		case cloud.PaymentAllUpfront, cloud.PaymentPartialUpfront, cloud.PaymentNoUpfront:
		default:
			return field("payment", "unknown payment %s (want all_upfront, partial_upfront or no_upfront)", quote(string(req.Payment)))
		}
	}
	discount := int64(0) // billing's default table
	if req.DiscountPct != "" {
		if !p.admin() {
			return &cloud.Error{Code: cloud.PermissionDenied,
				Message: "discount_pct is for admins; leave it out for the standard discount of the term and payment",
				Details: map[string]any{"field": "discount_pct"}}
		}
		if discount, err = parseDiscountPct(string(req.DiscountPct)); err != nil {
			return err
		}
	}
	now := s.now()
	start := now
	if req.Start != nil {
		start = *req.Start
		if start.Before(now.Add(-commitmentBackdate)) {
			return field("start", "%s is in the past; a commitment starts now or later (leave start out for now)",
				start.UTC().Format(time.RFC3339))
		}
	}
	var out *cloud.Commitment
	created := false
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		out, created = nil, false
		tenant, err := s.scope(ctx, tx, p, asked, p.TenantID)
		if err != nil {
			return err
		}
		if key != "" {
			old, err := commitmentByKey(ctx, tx, tenant, key)
			if err != nil {
				return err
			}
			if old != nil {
				out = old
				return sameCommitment(old, &req, name)
			}
		}
		price, err := onDemandPrice(ctx, tx, offerings, req.Zone, now)
		if err != nil {
			return err
		}
		spec := billing.CommitmentSpec{TenantID: tenant, Plan: string(req.Plan), Offering: name, Zone: req.Zone,
			Quantity: req.Quantity, Term: term, Payment: req.Payment, DiscountBP: discount, Start: start.UTC()}
		c, err := billing.NewCommitment(spec, price, now)
		if err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) {
				return err
			}
			return invalid("commitment: %v", err)
		}
		if c.ID == "" {
			c.ID = newID("cm-")
		}
		c.IdempotencyKey, c.CreatedAt = key, now
		if err := tx.CreateCommitment(ctx, c); err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) && ce.Code == cloud.Conflict && key != "" {
				if id, ok := ce.Details["existing_id"].(string); ok {
					return &keyRace{id: id}
				}
			}
			return err
		}
		out, created = c, true
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventCommitment, TenantID: tenant, Actor: p.UserID,
			Reason: fmt.Sprintf("commitment %s: %s of %d %s%s for %s from %s, fixed from the on-demand price %s",
				c.ID, c.Plan, c.Quantity, c.Offering, inZone(c.Zone), req.Term, c.Start.Format(time.RFC3339), price)})
	})
	out, err = raceWinner(s, r.Context(), out, err, func(tx cloud.Tx, id string) (*cloud.Commitment, error) { return tx.GetCommitment(r.Context(), id) }, func(c *cloud.Commitment) error { return sameCommitment(c, &req, name) })
	if err != nil {
		return err
	}
	writeCreated(w, created, "/v1/commitments/"+out.ID, out)
	return nil
}

// inZone renders a zone for messages.
func inZone(zone string) string {
	if zone == "" {
		return ""
	}
	return " in zone " + zone
}

// commitmentByKey finds a tenant's commitment made with an idempotency key.
func commitmentByKey(ctx context.Context, tx cloud.Tx, tenant, key string) (*cloud.Commitment, error) {
	cs, err := tx.ListCommitments(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.IdempotencyKey == key {
			return c, nil
		}
	}
	return nil, nil
}

// sameCommitment reports a conflict when an idempotency key is reused for
// another commitment.
func sameCommitment(old *cloud.Commitment, req *CreateCommitmentRequest, offering string) error {
	if old.Plan == req.Plan && old.Offering == offering && old.Zone == req.Zone && old.Quantity == req.Quantity {
		return nil
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "the Idempotency-Key was used for commitment " + old.ID + " with another plan, offering, zone or quantity; use a new key for a new commitment",
		Details: map[string]any{"existing_id": old.ID}}
}

// listCommitments handles GET /v1/commitments: the tenant's (admins:
// every tenant's, or ?tenant's).
func (s *api) listCommitments(w http.ResponseWriter, r *http.Request, p principal) error {
	out := CommitmentList{}
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		out.Commitments = []*cloud.Commitment{}
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), "")
		if err != nil {
			return err
		}
		cs, err := tx.ListCommitments(r.Context(), tenant)
		if err != nil {
			return err
		}
		out.Commitments = append(out.Commitments, cs...)
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getCommitment handles GET /v1/commitments/{id}; another tenant's answers
// like a missing one.
func (s *api) getCommitment(w http.ResponseWriter, r *http.Request, p principal) error {
	id := r.PathValue("id")
	var c *cloud.Commitment
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		var err error
		c, err = tx.GetCommitment(r.Context(), id)
		if cloud.IsNotFound(err) || err == nil && !p.visible(c.TenantID) {
			return notFound("commitment", id)
		}
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, c)
	return nil
}
