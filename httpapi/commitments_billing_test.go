package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
)

func TestCommitments(t *testing.T) { onBothStores(t, testCommitments) }

func testCommitments(t *testing.T, e *env) {
	ctx := context.Background()
	now := e.clock.Now()
	req := api.CreateCommitmentRequest{Plan: cloud.PlanReservation, Offering: "h100.8x", Zone: "zone-a", Quantity: 2,
		Term: "1y", Payment: cloud.PaymentAllUpfront}

	// Without a price there is nothing to fix the fees from.
	before := e.billingCounts()
	_, err := e.acme.CreateCommitment(ctx, req, "")
	if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != "offering" || !strings.Contains(ce.Message, "POST /v1/prices") {
		t.Errorf("no price: %v", ce)
	}
	e.billingUnchanged(before, "commitment without a price")

	e.withPrices()
	c, err := e.acme.CreateCommitment(ctx, req, "buy-1")
	if err != nil {
		t.Fatal(err)
	}
	list, _ := billing.ListPrice(catalog.Default(), "h100.8x")
	want, err := billing.NewCommitment(billing.CommitmentSpec{TenantID: e.acmeID, Plan: "reservation", Offering: "h100.8x",
		Zone: "zone-a", Quantity: 2, Term: billing.OneYear, Payment: cloud.PaymentAllUpfront, Start: now}, list, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(c.ID, "cm-") || c.TenantID != e.acmeID || c.UpfrontFee != want.UpfrontFee || c.UpfrontFee == 0 ||
		c.HourlyFee != 0 || c.DiscountBP != want.DiscountBP || !c.Start.Equal(now) || !c.End.Equal(now.Add(billing.OneYear)) {
		t.Errorf("commitment = %+v, want fees of %+v", c, want)
	}
	// The same key answers the same commitment; another commitment under
	// it is a conflict.
	before = e.billingCounts()
	again, err := e.acme.CreateCommitment(ctx, req, "buy-1")
	if err != nil || again.ID != c.ID {
		t.Errorf("retry = %+v, %v", again, err)
	}
	other := req
	other.Quantity = 3
	_, err = e.acme.CreateCommitment(ctx, other, "buy-1")
	if ce := wantCode(t, err, cloud.Conflict); ce.Details["existing_id"] != c.ID {
		t.Errorf("reused key: %v", ce)
	}
	code, hdr, _ := e.raw("POST", "/v1/commitments", e.acmeToken, strings.NewReader(mustJSON(t, req)), map[string]string{"Idempotency-Key": "buy-1"})
	if code != http.StatusOK || hdr.Get("Location") != "" {
		t.Errorf("raw retry: %d, Location %q", code, hdr.Get("Location"))
	}
	e.billingUnchanged(before, "idempotent retries")

	// A family is priced from its cheapest offering; a retainer by the hour.
	fam, err := e.acme.CreateCommitment(ctx, api.CreateCommitmentRequest{Plan: cloud.PlanRetainer, Offering: "h100", Quantity: 1, Term: "720h"}, "")
	if err != nil {
		t.Fatal(err)
	}
	cheapest := list
	for _, o := range catalog.Default().Offerings() {
		if strings.HasPrefix(o.Name, "h100.") {
			p, _ := billing.ListPrice(catalog.Default(), o.Name)
			cheapest = min(cheapest, p)
		}
	}
	wantFam, _ := billing.NewCommitment(billing.CommitmentSpec{TenantID: e.acmeID, Plan: "retainer", Offering: "h100",
		Quantity: 1, Term: 720 * time.Hour}, cheapest, now)
	if fam.Offering != "h100" || fam.HourlyFee != wantFam.HourlyFee || fam.UsageRate != wantFam.UsageRate || fam.Payment != "" {
		t.Errorf("family retainer = %+v, want fees of %+v", fam, wantFam)
	}

	// Admins may set the discount, for any tenant.
	g, err := e.admin.CreateCommitment(ctx, api.CreateCommitmentRequest{Tenant: e.globexID, Plan: cloud.PlanReservation,
		Offering: "l4.1x", Quantity: 1, Term: "3y", DiscountPct: "62.5"}, "")
	if err != nil || g.TenantID != e.globexID || g.DiscountBP != 6250 || g.Payment != cloud.PaymentNoUpfront {
		t.Errorf("admin commitment = %+v, %v", g, err)
	}

	// Tenancy.
	_, err = e.globex.GetCommitment(ctx, c.ID)
	wantCode(t, err, cloud.NotFound)
	if got, err := e.acme.GetCommitment(ctx, c.ID); err != nil || got.UpfrontFee != c.UpfrontFee {
		t.Errorf("GetCommitment = %+v, %v", got, err)
	}
	if cs, err := e.acme.Commitments(ctx, ""); err != nil || len(cs) != 2 {
		t.Errorf("acme commitments = %v, %v", cs, err)
	}
	if cs, err := e.globex.Commitments(ctx, ""); err != nil || len(cs) != 1 || cs[0].ID != g.ID {
		t.Errorf("globex commitments = %v, %v", cs, err)
	}
	if cs, err := e.admin.Commitments(ctx, ""); err != nil || len(cs) != 3 {
		t.Errorf("admin commitments = %v, %v", cs, err)
	}
	_, err = e.acme.Commitments(ctx, e.globexID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.acme.CreateCommitment(ctx, api.CreateCommitmentRequest{Tenant: e.globexID, Plan: cloud.PlanRetainer, Offering: "l4.1x", Quantity: 1, Term: "1y"}, "")
	wantCode(t, err, cloud.NotFound)

	var events int
	evs, _ := e.admin.Events(ctx, client.EventsOptions{Limit: 1000})
	for _, ev := range evs.Events {
		if ev.Kind == cloud.EventCommitment {
			events++
		}
	}
	if events != 3 {
		t.Errorf("%d commitment events, want 3", events)
	}
}

func TestCommitmentRejects(t *testing.T) { onBothStores(t, testCommitmentRejects) }

func testCommitmentRejects(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	past := e.clock.Now().Add(-time.Hour)
	ok := api.CreateCommitmentRequest{Plan: cloud.PlanReservation, Offering: "h100.8x", Quantity: 1, Term: "1y"}
	before := e.billingCounts()
	for _, tc := range []struct {
		name  string
		edit  func(*api.CreateCommitmentRequest)
		field string
	}{
		{"no plan", func(r *api.CreateCommitmentRequest) { r.Plan = "" }, "plan"},
		{"unknown plan", func(r *api.CreateCommitmentRequest) { r.Plan = "lease" }, "plan"},
		{"unknown offering", func(r *api.CreateCommitmentRequest) { r.Offering = "h900" }, "offering"},
		{"prefix that is no family", func(r *api.CreateCommitmentRequest) { r.Offering = "h10" }, "offering"},
		{"zero quantity", func(r *api.CreateCommitmentRequest) { r.Quantity = 0 }, "quantity"},
		{"no term", func(r *api.CreateCommitmentRequest) { r.Term = "" }, "term"},
		{"term too short", func(r *api.CreateCommitmentRequest) { r.Term = "59m" }, "term"},
		{"term too long", func(r *api.CreateCommitmentRequest) { r.Term = "4y" }, "term"},
		{"term nonsense", func(r *api.CreateCommitmentRequest) { r.Term = "forever" }, "term"},
		{"unknown payment", func(r *api.CreateCommitmentRequest) { r.Payment = "later" }, "payment"},
		{"retainer with payment", func(r *api.CreateCommitmentRequest) { r.Plan, r.Payment = cloud.PlanRetainer, cloud.PaymentAllUpfront }, "payment"},
		{"start in the past", func(r *api.CreateCommitmentRequest) { r.Start = &past }, "start"},
	} {
		req := ok
		tc.edit(&req)
		_, err := e.acme.CreateCommitment(ctx, req, "")
		if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != tc.field {
			t.Errorf("%s: field %v, want %s (%s)", tc.name, ce.Details["field"], tc.field, ce.Message)
		}
	}
	for _, pct := range []json.Number{"0", "95", "12.345", "-5", "1e1"} {
		req := ok
		req.DiscountPct = pct
		_, err := e.admin.CreateCommitment(ctx, req, "")
		if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != "discount_pct" {
			t.Errorf("discount %s: %v", pct, ce)
		}
	}
	// Members get the standard discounts.
	req := ok
	req.DiscountPct = "50"
	_, err := e.acme.CreateCommitment(ctx, req, "")
	wantCode(t, err, cloud.PermissionDenied)
	e.billingUnchanged(before, "rejected commitments")
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
