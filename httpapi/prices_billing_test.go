package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

func TestSetAndListPrices(t *testing.T) { onBothStores(t, testSetAndListPrices) }

func testSetAndListPrices(t *testing.T, e *env) {
	ctx := context.Background()
	now := e.clock.Now()
	ptr := func(t time.Time) *time.Time { return &t }

	p, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Amount: money.MustParse("1.50")}, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == 0 || p.Kind != cloud.PriceCompute || p.Offering != "l4.1x" || p.Amount != 1_500_000 ||
		!p.EffectiveAt.Equal(now) || p.Actor == "" {
		t.Errorf("SetPrice = %+v", p)
	}
	// A later version, and zonal and volume prices.
	later, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Amount: money.MustParse("2"), EffectiveAt: ptr(now.Add(time.Hour))}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Zone: "zone-b", Amount: money.MustParse("1.25")}, ""); err != nil {
		t.Fatal(err)
	}
	vol, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Kind: cloud.PriceVolume, Amount: money.MustParse("0.10")}, "")
	if err != nil || vol.Kind != cloud.PriceVolume || vol.Offering != "" {
		t.Fatalf("volume price = %+v, %v", vol, err)
	}

	// Members read prices; every version, or those in force at a time.
	all, err := e.acme.Prices(ctx, client.PricesOptions{Offering: "l4.1x"})
	if err != nil || len(all) != 3 {
		t.Fatalf("l4.1x prices = %v, %v", all, err)
	}
	at, err := e.acme.Prices(ctx, client.PricesOptions{Offering: "l4.1x", Zone: "", At: now.Add(30 * time.Minute)})
	if err != nil || len(at) != 2 || at[0].Amount != money.MustParse("1.50") || at[1].Zone != "zone-b" {
		t.Errorf("in force at +30m = %v, %v", at, err)
	}
	at, err = e.acme.Prices(ctx, client.PricesOptions{Offering: "l4.1x", At: now.Add(2 * time.Hour)})
	if err != nil || len(at) != 2 || at[0].ID != later.ID {
		t.Errorf("in force at +2h = %v, %v", at, err)
	}
	at, err = e.acme.Prices(ctx, client.PricesOptions{At: now.Add(-time.Hour)})
	if err != nil || len(at) != 0 {
		t.Errorf("in force before any price = %v, %v", at, err)
	}
	if vs, err := e.acme.Prices(ctx, client.PricesOptions{Kind: cloud.PriceVolume}); err != nil || len(vs) != 1 || vs[0].ID != vol.ID {
		t.Errorf("volume prices = %v, %v", vs, err)
	}
	var changes int
	evs, _ := e.admin.Events(ctx, client.EventsOptions{Limit: 1000})
	for _, ev := range evs.Events {
		if ev.Kind == cloud.EventPriceChange {
			changes++
		}
	}
	if changes != 4 {
		t.Errorf("%d price.change events, want 4", changes)
	}

	for _, q := range []string{"?kind=gpu", "?offering=nope.1x", "?at=yesterday"} {
		code, _, body := e.raw("GET", "/v1/prices"+q, e.acmeToken, nil, nil)
		if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Code != cloud.Invalid {
			t.Errorf("GET /v1/prices%s = %d %s", q, code, body)
		}
	}
}

func TestSetPriceRejects(t *testing.T) { onBothStores(t, testSetPriceRejects) }

func testSetPriceRejects(t *testing.T, e *env) {
	ctx := context.Background()
	now := e.clock.Now()
	before := e.billingCounts()
	for _, tc := range []struct {
		name  string
		req   api.SetPriceRequest
		field string
	}{
		{"no offering for compute", api.SetPriceRequest{Amount: 1}, "offering"},
		{"unknown offering", api.SetPriceRequest{Offering: "h900.1x", Amount: 1}, "offering"},
		{"offering on a volume price", api.SetPriceRequest{Kind: cloud.PriceVolume, Offering: "l4.1x", Amount: 1}, "offering"},
		{"offering on an address price", api.SetPriceRequest{Kind: cloud.PriceAddress, Offering: "l4.1x", Amount: 1}, "offering"},
		{"unknown kind", api.SetPriceRequest{Kind: "gpu", Offering: "l4.1x", Amount: 1}, "kind"},
		{"negative amount", api.SetPriceRequest{Offering: "l4.1x", Amount: -1}, "amount"},
		{"bad zone", api.SetPriceRequest{Offering: "l4.1x", Zone: "zone a", Amount: 1}, "zone"},
		{"history rewritten", api.SetPriceRequest{Offering: "l4.1x", Amount: 1, EffectiveAt: func() *time.Time { t := now.Add(-2 * time.Minute); return &t }()}, "effective_at"},
	} {
		_, err := e.admin.SetPrice(ctx, tc.req, "")
		ce := wantCode(t, err, cloud.Invalid)
		if ce.Details["field"] != tc.field {
			t.Errorf("%s: field %v, want %s (%s)", tc.name, ce.Details["field"], tc.field, ce.Message)
		}
	}
	code, _, body := e.raw("POST", "/v1/prices", e.adminToken, strings.NewReader(`{"offering":"l4.1x","amount":"1.2.3"}`), nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "amount" {
		t.Errorf("amount 1.2.3: %d %s", code, body)
	}
	code, _, body = e.raw("POST", "/v1/prices", e.adminToken, strings.NewReader(`{"offering":"l4.1x","amount":"0.0000001"}`), nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "amount" {
		t.Errorf("amount with 7 decimals: %d %s", code, body)
	}
	// Members may read prices but not set them.
	_, err := e.acme.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Amount: 1}, "")
	wantCode(t, err, cloud.PermissionDenied)
	e.billingUnchanged(before, "rejected prices")

	// A little skew is fine.
	if _, err := e.admin.SetPrice(ctx, api.SetPriceRequest{Offering: "l4.1x", Amount: 0,
		EffectiveAt: func() *time.Time { t := now.Add(-30 * time.Second); return &t }()}, ""); err != nil {
		t.Errorf("price 30 s in the past: %v", err)
	}
}

func TestBootstrapPrices(t *testing.T) { onBothStores(t, testBootstrapPrices) }

func testBootstrapPrices(t *testing.T, e *env) {
	ctx := context.Background()
	want, err := billing.DefaultPrices(catalog.Default())
	if err != nil {
		t.Fatal(err)
	}
	n, err := service.BootstrapPrices(ctx, e.store, catalog.Default(), e.clock.Now())
	if err != nil || n != len(want) {
		t.Fatalf("BootstrapPrices = %d, %v; want %d", n, err, len(want))
	}
	ps, err := e.acme.Prices(ctx, client.PricesOptions{Offering: "h100.8x"})
	if lp, _ := billing.ListPrice(catalog.Default(), "h100.8x"); err != nil || len(ps) != 1 || ps[0].Amount != lp {
		t.Errorf("h100.8x prices = %v, %v", ps, err)
	}
	// A store with prices is left alone.
	if n, err := service.BootstrapPrices(ctx, e.store, catalog.Default(), e.clock.Now()); err != nil || n != 0 {
		t.Errorf("second BootstrapPrices = %d, %v", n, err)
	}
	// A server's start on a bootstrapped store (prices, then the admin)
	// makes no token and no prices.
	before := e.billingCounts()
	if n, err := service.BootstrapPrices(ctx, e.store, catalog.Default(), e.clock.Now()); err != nil || n != 0 {
		t.Errorf("BootstrapPrices again = %d, %v", n, err)
	}
	if tok, created, err := e.Services.Accounts.Bootstrap(ctx); err != nil || created || tok != "" {
		t.Errorf("Bootstrap again = %q, %v, %v", tok, created, err)
	}
	e.billingUnchanged(before, "a start on a bootstrapped store")
}
