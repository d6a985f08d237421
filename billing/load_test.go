package billing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// fakeTx implements the few store methods Load calls.
type fakeTx struct {
	cloud.Tx
	prices    []*cloud.Price
	spot      []cloud.SpotPrice
	usage     []*cloud.Usage
	commits   []*cloud.Commitment
	spotCalls []cloud.SpotPriceFilter
	usageF    cloud.UsageFilter
	commitT   string
	fail      bool
}

func (f *fakeTx) ListPrices(ctx context.Context, pf cloud.PriceFilter) ([]*cloud.Price, error) {
	if f.fail {
		return nil, errors.New("boom")
	}
	return f.prices, nil
}

func (f *fakeTx) ListSpotPrices(ctx context.Context, sf cloud.SpotPriceFilter) ([]cloud.SpotPrice, error) {
	f.spotCalls = append(f.spotCalls, sf)
	var out []cloud.SpotPrice
	for _, s := range f.spot {
		if len(sf.Pools) > 0 {
			found := false
			for _, p := range sf.Pools {
				found = found || p == s.Pool
			}
			if !found {
				continue
			}
		}
		if s.Time.Before(sf.Since) || !sf.Until.IsZero() && !s.Time.Before(sf.Until) {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeTx) ListUsage(ctx context.Context, uf cloud.UsageFilter) ([]*cloud.Usage, error) {
	f.usageF = uf
	var out []*cloud.Usage
	for _, u := range f.usage {
		if (uf.TenantID == "" || u.TenantID == uf.TenantID) && u.Time.Before(uf.Before) && !u.Time.Before(uf.Since) {
			out = append(out, u)
		}
	}
	return out, nil
}

// OpenUsage is the store's contract in a few lines: the On entries before
// at that no Off of the same resource follows before at.
func (f *fakeTx) OpenUsage(ctx context.Context, tenantID string, at time.Time) ([]*cloud.Usage, error) {
	var out []*cloud.Usage
	for i, u := range f.usage {
		if !u.On || !u.Time.Before(at) || tenantID != "" && u.TenantID != tenantID {
			continue
		}
		closed := false
		for _, v := range f.usage[i+1:] {
			closed = closed || !v.On && v.ResourceID == u.ResourceID && v.Kind == u.Kind && v.TenantID == u.TenantID && v.Time.Before(at)
		}
		if !closed {
			out = append(out, u)
		}
	}
	return out, nil
}

func (f *fakeTx) ListCommitments(ctx context.Context, tenantID string) ([]*cloud.Commitment, error) {
	f.commitT = tenantID
	var out []*cloud.Commitment
	for _, c := range f.commits {
		if tenantID == "" || c.TenantID == tenantID {
			out = append(out, c)
		}
	}
	return out, nil
}

func TestLoad(t *testing.T) {
	pool := cloud.Pool{Offering: "h100.8x", Zone: "z1"}
	var l ledger
	l.inst("acme", "i-1", "h100.8x", "z1", cloud.MarketSpot, ts(-day(20)), ts(time.Hour))
	l.inst("beta", "i-2", "h100.8x", "z1", od, ts(0), ts(time.Hour))
	l.inst("acme", "i-3", "h100.8x", "z1", od, dec.End.Add(time.Hour), dec.End.Add(2*time.Hour)) // January
	f := &fakeTx{
		prices: basePrices(),
		// The point in force at the start of December is ten days old.
		spot: []cloud.SpotPrice{{Pool: pool, Time: ts(-day(10)), Price: usd("3")}, {Pool: pool, Time: ts(30 * time.Minute), Price: usd("4")},
			{Pool: pool, Time: dec.End.Add(time.Minute), Price: usd("1")}},
		usage:   l.us,
		commits: []*cloud.Commitment{{ID: "c-1", TenantID: "acme", Plan: cloud.PlanRetainer, Offering: "h100", Quantity: 1, HourlyFee: usd("1"), Start: ts(0), End: ts(time.Hour)}},
	}
	ctx := context.Background()
	in, err := Load(ctx, f, "acme", dec, dec.End)
	if err != nil {
		t.Fatal(err)
	}
	if f.usageF.TenantID != "acme" || !f.usageF.Before.Equal(dec.End) || !f.usageF.Since.Equal(dec.Start) || f.commitT != "acme" || len(in.Usage) != 2 ||
		len(in.Tenants) != 1 || in.Tenants[0] != "acme" || !in.AsOf.Equal(dec.End) || in.Period != dec {
		t.Errorf("input %+v, usage filter %+v", in, f.usageF)
	}
	if len(f.spotCalls) != 2 || !f.spotCalls[0].Until.Equal(dec.End) || len(f.spotCalls[1].Pools) != 1 {
		t.Errorf("spot reads %+v", f.spotCalls)
	}
	if p, ok := in.Prices.Spot(pool, ts(0)); !ok || p != usd("3") {
		t.Errorf("spot price at the start %s, %v", p, ok)
	}
	res, err := Rate(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Invoices) != 1 || res.Invoices[0].Total != usd("1.5")+usd("2")+usd("1") {
		t.Errorf("invoices %+v", res.Invoices[0])
	}

	// Every tenant; a pool whose start price is in the window needs no
	// second read.
	f.spot[0].Time = ts(-time.Hour)
	f.spotCalls = nil
	in, err = Load(ctx, f, "", dec, ts(day(2)))
	if err != nil || f.usageF.TenantID != "" || f.commitT != "" || in.Tenants != nil || len(in.Usage) != 4 || len(f.spotCalls) != 1 {
		t.Fatalf("all tenants: %+v, %v, %d spot reads", in, err, len(f.spotCalls))
	}
	res, err = Rate(in)
	if err != nil || len(res.Invoices) != 2 || res.Invoices[0].Final {
		t.Errorf("all tenants: %+v, %v", res, err)
	}
	f.fail = true
	if _, err := Load(ctx, f, "", dec, dec.End); err == nil {
		t.Error("store error not returned")
	}
}
