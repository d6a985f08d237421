package service

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// CommitmentBackdate is how far in the past a commitment may start: clock
// skew, never enough to cover usage already billed.
const CommitmentBackdate = time.Minute

// commitmentAsk is a checked api.CreateCommitmentRequest: its offering resolved, its
// term parsed and its defaults filled in, as the commitment will hold
// them.
type commitmentAsk struct {
	plan      cloud.Plan
	offering  string
	offerings []*catalog.Offering
	zone      string
	quantity  int
	term      time.Duration
	payment   cloud.Payment
	// discount is the override in basis points; 0 is the default.
	discount int64
	tags     map[string]string
	start    *time.Time
}

// checkCommitment validates what can be checked without the store, in
// the order of the request's fields. Only admins may override the
// discount.
func checkCommitment(cat *catalog.Catalog, a Actor, spec *api.CreateCommitmentRequest) (*commitmentAsk, error) {
	ask := &commitmentAsk{plan: spec.Plan, zone: spec.Zone, quantity: spec.Quantity, payment: spec.Payment, start: spec.Start}
	switch spec.Plan {
	case cloud.PlanReservation, cloud.PlanRetainer:
	case "":
		return nil, Field("plan", "is required: reservation or retainer")
	default:
		return nil, Field("plan", "unknown plan %s (want reservation or retainer)", Quote(string(spec.Plan)))
	}
	var err error
	if ask.offering, ask.offerings, err = commitmentOfferings(cat, spec.Offering); err != nil {
		return nil, err
	}
	if err := CheckName("zone", spec.Zone, false); err != nil {
		return nil, err
	}
	if spec.Quantity < 1 || spec.Quantity > billing.MaxCommitmentQuantity {
		return nil, Field("quantity", "%d is out of range 1..%d", spec.Quantity, billing.MaxCommitmentQuantity)
	}
	if ask.term, err = parseTerm(spec.Term); err != nil {
		return nil, err
	}
	switch {
	case spec.Plan == cloud.PlanRetainer && spec.Payment != "":
		return nil, Field("payment", "a retainer is paid by the hour; leave payment out")
	case spec.Plan == cloud.PlanReservation && spec.Payment == "":
		ask.payment = cloud.PaymentNoUpfront
	case spec.Plan == cloud.PlanReservation:
		switch spec.Payment {
		case cloud.PaymentAllUpfront, cloud.PaymentPartialUpfront, cloud.PaymentNoUpfront:
		default:
			return nil, Field("payment", "unknown payment %s (want all_upfront, partial_upfront or no_upfront)", Quote(string(spec.Payment)))
		}
	}
	if spec.DiscountPct != "" {
		if !a.Admin() {
			return nil, &cloud.Error{Code: cloud.PermissionDenied,
				Message: "discount_pct is for admins; leave it out for the standard discount of the term and payment",
				Details: map[string]any{"field": "discount_pct"}}
		}
		if ask.discount, err = parseDiscountPct(string(spec.DiscountPct)); err != nil {
			return nil, err
		}
	}
	return ask, nil
}

// discountOverride is the override a commitment's discount bp is: 0 when
// it is the default of its plan, term and payment (as
// billing.NewCommitment fixes it), else bp.
func discountOverride(bp int64, plan cloud.Plan, term time.Duration, payment cloud.Payment) int64 {
	dflt := int64(billing.RetainerUsageDiscountBP)
	if plan == cloud.PlanReservation {
		dflt, _ = billing.DefaultDiscountBP(term, payment)
	}
	if bp == dflt {
		return 0
	}
	return bp
}

// parseTerm reads a commitment term: "1y" to "3y" (a year is 8,760 hours)
// or a Go duration such as "720h", from 1h to 3 years.
func parseTerm(s string) (time.Duration, error) {
	if s == "" {
		return 0, Field("term", "is required: \"1y\", \"3y\" or a duration such as \"720h\"")
	}
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "y"); ok {
		y, err := strconv.Atoi(n)
		if err != nil || y < 1 || y > 3 {
			return 0, Field("term", "%s: want 1y, 2y, 3y or a duration such as \"720h\"", Quote(s))
		}
		d = time.Duration(y) * billing.OneYear
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, Field("term", "%s: want \"1y\", \"3y\" or a duration such as \"720h\"", Quote(s))
		}
	}
	if d < billing.MinCommitmentTerm || d > billing.MaxCommitmentTerm || d%time.Second != 0 {
		return 0, Field("term", "%s is out of range 1h..3y (whole seconds)", Quote(s))
	}
	return d, nil
}

// termString renders a term as the API takes it: "1y" for whole years,
// "720h" for whole hours.
func termString(d time.Duration) string {
	switch {
	case d%billing.OneYear == 0:
		return strconv.FormatInt(int64(d/billing.OneYear), 10) + "y"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return d.String()
}

// parseDiscountPct reads a discount in percent with at most two decimals
// ("30", "37.5") into basis points: more than 0, at most
// billing.MaxDiscountBP.
func parseDiscountPct(n string) (int64, error) {
	bad := Field("discount_pct", "%s: want a percentage above 0 and at most %d with at most two decimals, e.g. 37.5",
		Quote(n), billing.MaxDiscountBP/100)
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

// pctText renders a discount override for a message as discount_pct
// takes it ("37.5"), or "the default" for none.
func pctText(bp int64) string {
	if bp == 0 {
		return "the default"
	}
	s := strconv.FormatInt(bp/100, 10)
	if f := bp % 100; f != 0 {
		s += strings.TrimSuffix(fmt.Sprintf(".%02d", f), "0")
	}
	return Quote(s)
}

// commitmentOfferings resolves a commitment's offering: an offering name,
// or a family that prefixes at least one offering ("h100" matches every
// "h100.*"). It returns the canonical name and the offerings it covers.
func commitmentOfferings(cat *catalog.Catalog, name string) (string, []*catalog.Offering, error) {
	if name == "" {
		return "", nil, Field("offering", "is required: an offering (\"h100.8x\") or a family (\"h100\")")
	}
	if o, err := cat.Offering(name); err == nil {
		return o.Name, []*catalog.Offering{o}, nil
	}
	var family []*catalog.Offering
	for _, o := range cat.Offerings() {
		if strings.HasPrefix(o.Name, name+".") {
			family = append(family, o)
		}
	}
	if len(family) == 0 {
		_, err := offeringOf(cat, "offering", name)
		return "", nil, err
	}
	return name, family, nil
}

// onDemandPrice is the on-demand price a commitment's fees are fixed
// from: the price in force at t of the offering in the zone, or for a
// family the price of its cheapest offering (so a family commitment never
// costs more than the smallest thing it covers would on demand).
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
		return 0, Field("offering", "%s has no on-demand price in %s to fix the commitment's fees from; an admin sets one with POST /v1/prices",
			offerings[0].Name, where)
	}
	return best, nil
}

// Create buys a commitment for actor a: a reservation or a retainer whose
// fees billing.NewCommitment fixes now from the on-demand price in force,
// with a commitment event. With an idempotency key (a tenant's own), a
// retry answers the commitment the first call made (created false), even
// once its start has passed; the same key with a request that differs in
// any field is a Conflict naming the fields.
func (s *Commitments) Create(ctx context.Context, a Actor, spec api.CreateCommitmentRequest, key string) (out *cloud.Commitment, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return nil, false, err
	}
	ask, err := checkCommitment(s.cat, a, &spec)
	if err != nil {
		return nil, false, err
	}
	if err := CheckTags("tags", spec.Tags); err != nil {
		return nil, false, err
	}
	ask.tags = addSystemTags(ctx, spec.Tags)
	now := s.now()
	start, past := startAt("start", spec.Start, now, CommitmentBackdate, "a commitment starts now or later (leave start out for now)")
	if past != nil && key == "" {
		return nil, false, past
	}
	same := func(c *cloud.Commitment) error { return sameCommitment(c, ask) }
	err = s.tx(ctx, func(tx cloud.Tx) error {
		out, created = nil, false
		tenant, err := Scope(ctx, tx, a, spec.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		byKey := func(k string) (*cloud.Commitment, error) { return tx.CommitmentByKey(ctx, tenant, k) }
		if old, found, err := prior(key, byKey, same); found || err != nil {
			out = old
			return err
		}
		// Only a retry, answered above, may name a start now past.
		if past != nil {
			return past
		}
		price, err := onDemandPrice(ctx, tx, ask.offerings, ask.zone, now)
		if err != nil {
			return err
		}
		c, err := billing.NewCommitment(billing.CommitmentSpec{TenantID: tenant, Plan: string(ask.plan), Offering: ask.offering,
			Zone: ask.zone, Quantity: ask.quantity, Term: ask.term, Payment: ask.payment, DiscountBP: ask.discount,
			Start: start.UTC()}, price, now)
		if err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) {
				return err
			}
			return cloud.Errorf(cloud.Invalid, "commitment: %v", err)
		}
		if c.ID == "" {
			c.ID = NewID(CommitmentPrefix)
		}
		c.IdempotencyKey, c.CreatedAt, c.Tags = key, now, ask.tags
		if err := tx.CreateCommitment(ctx, c); err != nil {
			return asKeyRace(err, key)
		}
		out, created = c, true
		return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventCommitment, TenantID: tenant, Actor: a.ID,
			Reason: fmt.Sprintf("commitment %s: %s of %d %s%s for %s from %s, fixed from the on-demand price %s",
				c.ID, c.Plan, c.Quantity, c.Offering, inZone(c.Zone), spec.Term, c.Start.Format(time.RFC3339), price)})
	})
	out, err = settleRace(ctx, s.store, out, err, func(tx cloud.Tx, id string) (*cloud.Commitment, error) { return tx.GetCommitment(ctx, id) }, same)
	return out, created && err == nil, err
}

// inZone renders a zone for messages.
func inZone(zone string) string {
	if zone == "" {
		return ""
	}
	return " in zone " + zone
}

// sameCommitment reports a conflict when an idempotency key is reused for
// a commitment that differs in any field the request sent. Terms compare
// as durations ("1y" is "8760h"). Payment, which follows from the plan (a
// retainer has none), compares when both are reservations, with the
// default filled in. The discount compares as an override, or none: a
// default discount follows from the plan, term and payment, compared on
// their own. A request without start began when it was first made, so its
// retry matches any start.
func sameCommitment(old *cloud.Commitment, ask *commitmentAsk) error {
	var d KeyDiffs
	d.String("plan", string(old.Plan), string(ask.plan))
	d.String("offering", old.Offering, ask.offering)
	d.String("zone", old.Zone, ask.zone)
	Value(&d, "quantity", old.Quantity, ask.quantity)
	d.Map("tags", old.Tags, ask.tags)
	term := old.End.Sub(old.Start)
	if term != ask.term {
		d.Add("term", Quote(termString(term)), Quote(termString(ask.term)))
	}
	if old.Plan == ask.plan {
		d.String("payment", string(old.Payment), string(ask.payment))
	}
	was := discountOverride(old.DiscountBP, old.Plan, term, old.Payment)
	if asked := discountOverride(ask.discount, ask.plan, ask.term, ask.payment); asked != was {
		d.Add("discount_pct", pctText(was), pctText(ask.discount))
	}
	if ask.start != nil {
		if at := ask.start.UTC().Truncate(time.Microsecond); !at.Equal(old.Start.Truncate(time.Microsecond)) {
			d.Add("start", old.Start.UTC().Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
	}
	return d.Err("commitment", old.ID)
}

// Get reads a commitment actor a may see; another tenant's answers like a
// missing one.
func (s *Commitments) Get(ctx context.Context, a Actor, id string) (*cloud.Commitment, error) {
	var c *cloud.Commitment
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		c, err = Visible(ctx, a, "commitment", id, tx.GetCommitment)
		return err
	})
	return c, err
}

// List answers the commitments of a tenant in ID order: a member's own,
// an admin's of tenant (every tenant's when empty).
func (s *Commitments) List(ctx context.Context, a Actor, tenant string) ([]*cloud.Commitment, error) {
	out := []*cloud.Commitment{}
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = out[:0]
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		cs, err := tx.ListCommitments(ctx, t)
		out = append(out, cs...)
		return err
	})
	return out, err
}
