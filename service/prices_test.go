package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestPriceIdempotency reuses a key with a request that differs in one
// field at a time: each is a conflict that names that field and adds no
// version, and the identical request answers the first version.
func TestPriceIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		at := f.clock.Now().Add(time.Hour)
		other := at.Add(time.Second)
		compute := api.SetPriceRequest{Kind: cloud.PriceCompute, Offering: "l4.1x", Zone: "zone-a", Amount: money.MustParse("1.50"), EffectiveAt: &at}
		volume := api.SetPriceRequest{Kind: cloud.PriceVolume, Amount: money.MustParse("0.10")}
		before := f.counts()
		pc, created, err := f.svc.Prices.Set(ctx, f.admin, compute, "compute")
		if err != nil || !created || pc.ID == 0 || !pc.EffectiveAt.Equal(at) || pc.Actor != f.admin.ID {
			t.Fatalf("set = %+v, %v, %v", pc, created, err)
		}
		pv, _, err := f.svc.Prices.Set(ctx, f.admin, volume, "volume")
		if err != nil {
			t.Fatal(err)
		}
		if after := f.counts(); after.Prices != before.Prices+2 || after.Events != before.Events+2 {
			t.Errorf("counts %+v -> %+v: want two versions and two events", before, after)
		}

		before = f.counts()
		for _, tc := range []struct {
			field string
			key   string
			id    int64
			spec  api.SetPriceRequest
			edit  func(s *api.SetPriceRequest)
		}{
			// A compute price needs an offering and the others refuse
			// one: the kind alone differs between volume and address.
			{"kind", "volume", pv.ID, volume, func(s *api.SetPriceRequest) { s.Kind = cloud.PriceAddress }},
			{"offering", "compute", pc.ID, compute, func(s *api.SetPriceRequest) { s.Offering = "l40s.1x" }},
			{"zone", "compute", pc.ID, compute, func(s *api.SetPriceRequest) { s.Zone = "zone-b" }},
			{"zone", "compute", pc.ID, compute, func(s *api.SetPriceRequest) { s.Zone = "" }},
			{"amount", "compute", pc.ID, compute, func(s *api.SetPriceRequest) { s.Amount = money.MustParse("1.75") }},
			{"effective_at", "compute", pc.ID, compute, func(s *api.SetPriceRequest) { s.EffectiveAt = &other }},
			{"effective_at", "volume", pv.ID, volume, func(s *api.SetPriceRequest) { s.EffectiveAt = &other }},
		} {
			spec := tc.spec
			tc.edit(&spec)
			_, created, err := f.svc.Prices.Set(ctx, f.admin, spec, tc.key)
			if created {
				t.Errorf("%s: created", tc.field)
			}
			// Price IDs are integers, and so is existing_id.
			billKeyConflict(t, err, tc.id, tc.field)
		}
		f.unchanged(before, "keys reused for other prices")

		// The identical requests answer the first versions, even once in
		// force; leaving effective_at out matches the time it took.
		f.clock.Advance(2 * time.Hour)
		noTime := compute
		noTime.EffectiveAt = nil
		for _, c := range []struct {
			key  string
			spec api.SetPriceRequest
			id   int64
		}{{"compute", compute, pc.ID}, {"compute", noTime, pc.ID}, {"volume", volume, pv.ID}} {
			again, created, err := f.svc.Prices.Set(ctx, f.admin, c.spec, c.key)
			if err != nil || created || again.ID != c.id {
				t.Errorf("retry %s %+v = %+v, %v, %v; want %d", c.key, c.spec, again, created, err, c.id)
			}
		}
		f.unchanged(before, "retries")
	})
}

// TestPriceRules: prices are the operator's, and a version never takes
// effect more than a minute in the past.
func TestPriceRules(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		now := f.clock.Now()
		before := f.counts()
		_, _, err := f.svc.Prices.Set(ctx, f.acme, api.SetPriceRequest{Offering: "l4.1x", Amount: 1}, "")
		billCode(t, err, cloud.PermissionDenied)
		past := now.Add(-service.PriceBackdate - time.Second)
		for _, key := range []string{"", "k"} {
			_, _, err = f.svc.Prices.Set(ctx, f.admin, api.SetPriceRequest{Offering: "l4.1x", Amount: 1, EffectiveAt: &past}, key)
			if billCode(t, err, cloud.Invalid).Details["field"] != "effective_at" {
				t.Errorf("a version in the past (key %q): %v", key, err)
			}
		}
		_, _, err = f.svc.Prices.Set(ctx, f.admin, api.SetPriceRequest{Kind: cloud.PriceVolume, Offering: "l4.1x", Amount: 1}, "")
		if billCode(t, err, cloud.Invalid).Details["field"] != "offering" {
			t.Errorf("an offering on a volume price: %v", err)
		}
		f.unchanged(before, "refused prices")
		skew := now.Add(-30 * time.Second)
		p, _, err := f.svc.Prices.Set(ctx, f.admin, api.SetPriceRequest{Offering: "l4.1x", Amount: money.MustParse("9"), EffectiveAt: &skew}, "")
		if err != nil {
			t.Fatalf("a version 30 s in the past: %v", err)
		}
		// Members read prices, all versions or those in force.
		all, err := f.svc.Prices.List(ctx, f.acme, service.PriceQuery{Offering: "l4.1x"})
		if err != nil || len(all) < 2 {
			t.Errorf("l4.1x prices = %v, %v", all, err)
		}
		in, err := f.svc.Prices.List(ctx, f.acme, service.PriceQuery{Offering: "l4.1x", At: now})
		if err != nil || len(in) != 1 || in[0].ID != p.ID {
			t.Errorf("in force now = %v, %v; want %d", in, err, p.ID)
		}
		_, err = f.svc.Prices.List(ctx, f.acme, service.PriceQuery{Kind: "gpu"})
		if billCode(t, err, cloud.Invalid).Details["field"] != "kind" {
			t.Errorf("an unknown kind: %v", err)
		}
	})
}
