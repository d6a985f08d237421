package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// TestCommitmentIdempotency reuses a key with a request that differs in
// one field at a time: each is a conflict that names that field and
// writes nothing, and the identical request answers the first commitment.
func TestCommitmentIdempotency(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		start := f.clock.Now().Add(time.Hour)
		later := start.Add(time.Hour)
		base := api.CreateCommitmentRequest{Plan: cloud.PlanReservation, Offering: "h100.8x", Zone: "zone-a", Quantity: 2,
			Term: "1y", Payment: cloud.PaymentAllUpfront, DiscountPct: "40", Start: &start}
		before := f.counts()
		c, created, err := f.svc.Commitments.Create(ctx, f.admin, base, "buy-1")
		if err != nil || !created || c.TenantID != f.op || c.DiscountBP != 4000 || !c.Start.Equal(start) {
			t.Fatalf("create = %+v, %v, %v", c, created, err)
		}
		if after := f.counts(); after.Commitments != before.Commitments+1 || after.Events != before.Events+1 {
			t.Errorf("counts %+v -> %+v: want one commitment and one event", before, after)
		}

		before = f.counts()
		for _, tc := range []struct {
			field string
			edit  func(s *api.CreateCommitmentRequest)
		}{
			// A retainer has no payment: the plan alone differs.
			{"plan", func(s *api.CreateCommitmentRequest) { s.Plan, s.Payment = cloud.PlanRetainer, "" }},
			{"offering", func(s *api.CreateCommitmentRequest) { s.Offering = "l4.1x" }},
			{"offering", func(s *api.CreateCommitmentRequest) { s.Offering = "h100" }},
			{"zone", func(s *api.CreateCommitmentRequest) { s.Zone = "zone-b" }},
			{"zone", func(s *api.CreateCommitmentRequest) { s.Zone = "" }},
			{"quantity", func(s *api.CreateCommitmentRequest) { s.Quantity = 3 }},
			{"term", func(s *api.CreateCommitmentRequest) { s.Term = "26280h" }},
			{"term", func(s *api.CreateCommitmentRequest) { s.Term = "1h" }},
			{"payment", func(s *api.CreateCommitmentRequest) { s.Payment = cloud.PaymentNoUpfront }},
			{"payment", func(s *api.CreateCommitmentRequest) { s.Payment = "" }},
			{"discount_pct", func(s *api.CreateCommitmentRequest) { s.DiscountPct = "30" }},
			{"discount_pct", func(s *api.CreateCommitmentRequest) { s.DiscountPct = "" }},
			{"start", func(s *api.CreateCommitmentRequest) { s.Start = &later }},
		} {
			spec := base
			tc.edit(&spec)
			_, created, err := f.svc.Commitments.Create(ctx, f.admin, spec, "buy-1")
			if created {
				t.Errorf("%s: created", tc.field)
			}
			billKeyConflict(t, err, c.ID, tc.field)
		}
		f.unchanged(before, "keys reused for other commitments")

		// The identical request, the same term spelled in hours, and a
		// request that leaves the start out answer the first commitment,
		// even once the start has passed.
		hours := base
		hours.Term = "8760h"
		noStart := base
		noStart.Start = nil
		f.clock.Advance(3 * time.Hour)
		for _, spec := range []api.CreateCommitmentRequest{base, hours, noStart} {
			again, created, err := f.svc.Commitments.Create(ctx, f.admin, spec, "buy-1")
			if err != nil || created || again.ID != c.ID {
				t.Errorf("retry of %+v = %+v, %v, %v; want %s", spec, again, created, err, c.ID)
			}
		}
		f.unchanged(before, "retries")
		// A new key with that start is refused: it is in the past now.
		_, _, err = f.svc.Commitments.Create(ctx, f.admin, base, "buy-2")
		if billCode(t, err, cloud.Invalid).Details["field"] != "start" {
			t.Errorf("a new commitment in the past: %v", err)
		}
		f.unchanged(before, "a commitment in the past")
	})
}

// TestCommitmentIdempotencyDefaults: a request that leaves payment and the
// discount out is compared with their defaults, as the commitment holds
// them; the default discount follows from the term and is not a
// difference of its own.
func TestCommitmentIdempotencyDefaults(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		base := api.CreateCommitmentRequest{Plan: cloud.PlanReservation, Offering: "l4.1x", Quantity: 1, Term: "1y"}
		c, _, err := f.svc.Commitments.Create(ctx, f.acme, base, "k")
		if err != nil || c.Payment != cloud.PaymentNoUpfront || c.DiscountBP != 2500 {
			t.Fatalf("create = %+v, %v", c, err)
		}
		before := f.counts()
		explicit := base
		explicit.Payment = cloud.PaymentNoUpfront
		if again, created, err := f.svc.Commitments.Create(ctx, f.acme, explicit, "k"); err != nil || created || again.ID != c.ID {
			t.Errorf("retry with the default payment = %+v, %v, %v", again, created, err)
		}
		f.unchanged(before, "a retry with the default payment")
		longer := base
		longer.Term = "3y"
		_, _, err = f.svc.Commitments.Create(ctx, f.acme, longer, "k")
		billKeyConflict(t, err, c.ID, "term")
		// An admin sending the default discount asks for what the
		// commitment has.
		same := base
		same.Tenant, same.DiscountPct = f.acmeID, "25"
		if again, created, err := f.svc.Commitments.Create(ctx, f.admin, same, "k"); err != nil || created || again.ID != c.ID {
			t.Errorf("admin retry with the default discount = %+v, %v, %v", again, created, err)
		}
		same.DiscountPct = "26"
		_, _, err = f.svc.Commitments.Create(ctx, f.admin, same, "k")
		billKeyConflict(t, err, c.ID, "discount_pct")

		// Retainers: the same, without payment.
		ret := api.CreateCommitmentRequest{Plan: cloud.PlanRetainer, Offering: "l4.1x", Quantity: 1, Term: "720h"}
		r, _, err := f.svc.Commitments.Create(ctx, f.acme, ret, "r")
		if err != nil {
			t.Fatal(err)
		}
		before = f.counts()
		res := ret
		res.Plan = cloud.PlanReservation
		_, _, err = f.svc.Commitments.Create(ctx, f.acme, res, "r")
		billKeyConflict(t, err, r.ID, "plan")
		f.unchanged(before, "a reservation under a retainer's key")
	})
}

// TestCommitmentIdempotencyTenants: keys are a tenant's own. An admin
// creating for a tenant uses that tenant's keys; the same key in another
// tenant is a new commitment there, not a conflict.
func TestCommitmentIdempotencyTenants(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		spec := api.CreateCommitmentRequest{Plan: cloud.PlanRetainer, Offering: "l4.1x", Quantity: 1, Term: "1y"}
		c, _, err := f.svc.Commitments.Create(ctx, f.acme, spec, "k")
		if err != nil {
			t.Fatal(err)
		}
		before := f.counts()
		forAcme := spec
		forAcme.Tenant = f.acmeID
		if again, created, err := f.svc.Commitments.Create(ctx, f.admin, forAcme, "k"); err != nil || created || again.ID != c.ID {
			t.Errorf("admin retry for acme = %+v, %v, %v; want %s", again, created, err, c.ID)
		}
		forAcme.Quantity = 2
		_, _, err = f.svc.Commitments.Create(ctx, f.admin, forAcme, "k")
		billKeyConflict(t, err, c.ID, "quantity")
		f.unchanged(before, "retries for acme")

		forGlobex := spec
		forGlobex.Tenant = f.globexID
		g, created, err := f.svc.Commitments.Create(ctx, f.admin, forGlobex, "k")
		if err != nil || !created || g.ID == c.ID || g.TenantID != f.globexID {
			t.Errorf("the key in globex = %+v, %v, %v; want globex's own commitment", g, created, err)
		}
		// A member names only its own tenant.
		_, _, err = f.svc.Commitments.Create(ctx, f.globex, forAcme, "k2")
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)
	})
}

// TestCommitmentTenancy: another tenant's member cannot read a
// commitment, which answers like a missing one; an admin can.
func TestCommitmentTenancy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		c, _, err := f.svc.Commitments.Create(ctx, f.acme, api.CreateCommitmentRequest{Plan: cloud.PlanReservation,
			Offering: "l4.1x", Quantity: 1, Term: "1y"}, "")
		if err != nil {
			t.Fatal(err)
		}
		_, missing := f.svc.Commitments.Get(ctx, f.globex, "cm-missing")
		_, err = f.svc.Commitments.Get(ctx, f.globex, c.ID)
		billHidden(t, err, missing, "commitment", c.ID)
		if cs, err := f.svc.Commitments.List(ctx, f.globex, ""); err != nil || len(cs) != 0 {
			t.Errorf("globex's commitments = %v, %v", cs, err)
		}
		_, err = f.svc.Commitments.List(ctx, f.globex, f.acmeID)
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)

		if got, err := f.svc.Commitments.Get(ctx, f.acme, c.ID); err != nil || got.ID != c.ID {
			t.Errorf("acme reads its own = %+v, %v", got, err)
		}
		if got, err := f.svc.Commitments.Get(ctx, f.admin, c.ID); err != nil || got.ID != c.ID {
			t.Errorf("admin reads acme's = %+v, %v", got, err)
		}
		if cs, err := f.svc.Commitments.List(ctx, f.admin, f.acmeID); err != nil || len(cs) != 1 || cs[0].ID != c.ID {
			t.Errorf("admin lists acme's = %v, %v", cs, err)
		}
		if cs, err := f.svc.Commitments.List(ctx, f.admin, ""); err != nil || len(cs) != 1 {
			t.Errorf("admin lists every tenant's = %v, %v", cs, err)
		}
		// Only admins override the discount.
		_, _, err = f.svc.Commitments.Create(ctx, f.acme, api.CreateCommitmentRequest{Plan: cloud.PlanReservation,
			Offering: "l4.1x", Quantity: 1, Term: "1y", DiscountPct: "50"}, "")
		billCode(t, err, cloud.PermissionDenied)
	})
}
