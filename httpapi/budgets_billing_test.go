package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/service"
)

func TestBudgets(t *testing.T) { onBothStores(t, testBudgets) }

func testBudgets(t *testing.T, e *env) {
	e.withPrices()
	ctx := context.Background()
	e.runFor(2 * time.Hour)

	// No budget yet: spending shows anyway.
	st, err := e.acme.Budget(ctx, "")
	if err != nil || st.Budget != nil || st.Spent != money.MustParse("2") || st.Month != "2025-03" || st.TenantID != e.acmeID {
		t.Fatalf("no budget = %+v, %v", st, err)
	}
	code, _, body := e.raw("GET", "/v1/budget", e.acmeToken, nil, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"budget":null`) || !strings.Contains(string(body), `"alerts":[]`) {
		t.Errorf("no budget JSON: %s", body)
	}

	st, err = e.acme.SetBudget(ctx, "", api.BudgetSpec{Amount: money.MustParse("3")})
	if err != nil || st.Budget == nil || st.Budget.Amount != money.MustParse("3") ||
		!slices.Equal(st.Budget.Thresholds, []int{50, 80, 100}) || st.Spent != money.MustParse("2") {
		t.Fatalf("SetBudget = %+v, %v", st, err)
	}
	// The controller alerts; the budget shows this month's alerts.
	if _, err := service.CheckBudgets(ctx, e.store, e.clock.Now()); err != nil {
		t.Fatal(err)
	}
	st, err = e.acme.Budget(ctx, "")
	if err != nil || len(st.Alerts) != 1 || st.Alerts[0].Threshold != 50 {
		t.Errorf("after the check = %+v, %v", st, err)
	}

	// Thresholds are kept sorted; admins set any tenant's budget.
	st, err = e.admin.SetBudget(ctx, e.globexID, api.BudgetSpec{Amount: money.MustParse("1000"), Thresholds: []int{120, 10}})
	if err != nil || st.TenantID != e.globexID || !slices.Equal(st.Budget.Thresholds, []int{10, 120}) || st.Spent != 0 {
		t.Errorf("admin SetBudget = %+v, %v", st, err)
	}
	if st, err := e.globex.Budget(ctx, ""); err != nil || st.Budget == nil || st.Budget.Amount != money.MustParse("1000") {
		t.Errorf("globex budget = %+v, %v", st, err)
	}
	if st, err := e.admin.Budget(ctx, e.acmeID); err != nil || st.Budget.Amount != money.MustParse("3") {
		t.Errorf("admin reads acme's budget = %+v, %v", st, err)
	}

	before := e.billingCounts()
	_, err = e.globex.Budget(ctx, e.acmeID)
	wantCode(t, err, cloud.NotFound)
	_, err = e.globex.SetBudget(ctx, e.acmeID, api.BudgetSpec{Amount: 1})
	wantCode(t, err, cloud.NotFound)
	for _, tc := range []struct {
		name  string
		spec  api.BudgetSpec
		field string
	}{
		{"zero", api.BudgetSpec{}, "amount"},
		{"negative", api.BudgetSpec{Amount: -1}, "amount"},
		{"threshold 0", api.BudgetSpec{Amount: 1, Thresholds: []int{0}}, "thresholds"},
		{"threshold 1001", api.BudgetSpec{Amount: 1, Thresholds: []int{1001}}, "thresholds"},
		{"repeated", api.BudgetSpec{Amount: 1, Thresholds: []int{50, 50}}, "thresholds"},
		{"too many", api.BudgetSpec{Amount: 1, Thresholds: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}, "thresholds"},
	} {
		_, err := e.acme.SetBudget(ctx, "", tc.spec)
		if ce := wantCode(t, err, cloud.Invalid); ce.Details["field"] != tc.field {
			t.Errorf("%s: field %v, want %s", tc.name, ce.Details["field"], tc.field)
		}
	}
	code, _, body = e.raw("PUT", "/v1/budget", e.acmeToken, strings.NewReader(`{"amount":"lots"}`), nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "amount" {
		t.Errorf("amount lots: %d %s", code, body)
	}
	code, _, body = e.raw("PUT", "/v1/budget", e.acmeToken, strings.NewReader(`{"amount":"10","thresholds":[50.5]}`), nil)
	if eb := decodeErr(t, body); code != http.StatusBadRequest || eb.Details["field"] != "thresholds" {
		t.Errorf("threshold 50.5: %d %s", code, body)
	}
	e.billingUnchanged(before, "rejected budgets")
}
