package service_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/testkit"
)

// billFixture is a store with three tenants (acme and globex, each with a
// member, and ops, the admin's), the built-in prices, and the services
// over it on a test clock.
type billFixture struct {
	t                    *testing.T
	st                   cloud.Store
	svc                  *service.Services
	clock                *testkit.Clock
	acme, globex, admin  service.Actor
	acmeID, globexID, op string
}

func newBillFixture(t *testing.T, st cloud.Store) *billFixture {
	t.Helper()
	f := &billFixture{t: t, st: st, clock: testkit.NewClock(time.Time{}), acmeID: "tn-acme", globexID: "tn-globex", op: "tn-ops"}
	f.acme = service.Actor{ID: "u-acme", TenantID: f.acmeID, Role: cloud.RoleMember}
	f.globex = service.Actor{ID: "u-globex", TenantID: f.globexID, Role: cloud.RoleMember}
	f.admin = service.Actor{ID: "u-admin", TenantID: f.op, Role: cloud.RoleAdmin}
	ctx := context.Background()
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		for _, id := range []string{f.acmeID, f.globexID, f.op} {
			if err := tx.CreateTenant(ctx, &cloud.Tenant{ID: id, Name: strings.TrimPrefix(id, "tn-"), CreatedAt: f.clock.Now()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.BootstrapPrices(ctx, st, catalog.Default(), f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	f.svc = service.New(st, nil, service.Options{Now: f.clock.Now})
	return f
}

// volume stores a volume of tenant in zone and returns its ID.
func (f *billFixture) volume(tenant, zone string) string {
	f.t.Helper()
	v := &cloud.Volume{ID: service.NewID(service.VolumePrefix), TenantID: tenant, Name: "data", SizeGiB: 10, Zone: zone,
		CreatedAt: f.clock.Now()}
	if err := f.st.Tx(context.Background(), func(tx cloud.Tx) error { return tx.CreateVolume(context.Background(), v) }); err != nil {
		f.t.Fatal(err)
	}
	return v.ID
}

// unchanged fails the test when the store's counts moved from before.
func (f *billFixture) unchanged(before testkit.Rows, what string) {
	f.t.Helper()
	if after := f.counts(); after != before {
		f.t.Errorf("%s wrote something: counts %+v -> %+v", what, before, after)
	}
}

// wantCode checks that err is a *cloud.Error of code and returns it.
func billCode(t *testing.T, err error, code cloud.Code) *cloud.Error {
	t.Helper()
	var ce *cloud.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
	return ce
}

// wantKeyConflict checks the conflict of an idempotency key reused for a
// create that differs in exactly field: it names the first resource and
// only that field.
func billKeyConflict(t *testing.T, err error, existing any, field string) {
	t.Helper()
	ce := billCode(t, err, cloud.Conflict)
	if ce.Details["existing_id"] != existing {
		t.Errorf("existing_id %v (%T), want %v (%T)", ce.Details["existing_id"], ce.Details["existing_id"], existing, existing)
	}
	if fields, _ := ce.Details["fields"].([]string); !slices.Equal(fields, []string{field}) {
		t.Errorf("fields %v, want [%s] (%s)", ce.Details["fields"], field, ce.Message)
	}
	if !strings.Contains(ce.Message, field) {
		t.Errorf("message %q does not name %s", ce.Message, field)
	}
}

// wantHidden checks that err is the NotFound a missing resource of kind
// answers (want, from a read of an ID that does not exist), so that
// another tenant's resource cannot be told from a missing one.
func billHidden(t *testing.T, err, want error, kind, id string) {
	t.Helper()
	ce := billCode(t, err, cloud.NotFound)
	we := billCode(t, want, cloud.NotFound)
	if ce.Details["kind"] != kind || ce.Details["id"] != id || we.Details["kind"] != kind ||
		strings.Replace(ce.Message, id, "X", 1) != strings.Replace(we.Message, we.Details["id"].(string), "X", 1) {
		t.Errorf("another tenant's %s answers %v, a missing one %v", kind, err, want)
	}
}

func TestInvoiceAndBudgetTenancy(t *testing.T) {
	testkit.EachStore(t, func(t *testing.T, st cloud.Store) {
		f := newBillFixture(t, st)
		ctx := context.Background()
		period, err := f.svc.Billing.Month("")
		if err != nil || period.Name() != "2025-03" {
			t.Fatalf("Month(\"\") = %v, %v", period, err)
		}
		if _, err := f.svc.Billing.Month("2025-13"); billCode(t, err, cloud.Invalid).Details["field"] != "month" {
			t.Errorf("a bad month: %v", err)
		}

		if _, err := f.svc.Billing.PutBudget(ctx, f.acme, "", api.BudgetSpec{Amount: money.MustParse("100")}); err != nil {
			t.Fatal(err)
		}
		before := f.counts()
		// Another tenant's member can neither read nor set acme's budget,
		// nor read its invoices: the tenant answers like a missing one.
		_, err = f.svc.Billing.Budget(ctx, f.globex, f.acmeID)
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)
		_, err = f.svc.Billing.PutBudget(ctx, f.globex, f.acmeID, api.BudgetSpec{Amount: money.MustParse("1")})
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)
		_, err = f.svc.Billing.Invoices(ctx, f.globex, f.acmeID, period)
		billHidden(t, err, service.NotFound("tenant", "tn-none"), "tenant", f.acmeID)
		f.unchanged(before, "another tenant's reads and writes")
		if st, err := f.svc.Billing.Budget(ctx, f.globex, ""); err != nil || st.TenantID != f.globexID || st.Budget != nil {
			t.Errorf("globex's own budget = %+v, %v", st, err)
		}

		// An admin reads and sets any tenant's.
		st1, err := f.svc.Billing.Budget(ctx, f.admin, f.acmeID)
		if err != nil || st1.Budget == nil || st1.Budget.Amount != money.MustParse("100") ||
			!slices.Equal(st1.Budget.Thresholds, []int{50, 80, 100}) {
			t.Errorf("admin reads acme's budget = %+v, %v", st1, err)
		}
		st2, err := f.svc.Billing.PutBudget(ctx, f.admin, f.acmeID, api.BudgetSpec{Amount: money.MustParse("5"), Thresholds: []int{90, 10}})
		if err != nil || st2.TenantID != f.acmeID || !slices.Equal(st2.Budget.Thresholds, []int{10, 90}) {
			t.Errorf("admin sets acme's budget = %+v, %v", st2, err)
		}
		if invs, err := f.svc.Billing.Invoices(ctx, f.admin, f.acmeID, period); err != nil || len(invs) > 1 {
			t.Errorf("admin reads acme's invoices = %v, %v", invs, err)
		}
		_, err = f.svc.Billing.PutBudget(ctx, f.acme, "", api.BudgetSpec{Amount: 1, Thresholds: []int{50, 50}})
		if billCode(t, err, cloud.Invalid).Details["field"] != "thresholds" {
			t.Errorf("duplicate thresholds: %v", err)
		}
	})
}

// counts is what a retry or a refused create must leave as it was.
func (f *billFixture) counts() testkit.Rows { return testkit.CountRows(f.t, f.st) }
