package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// EventBudgetUpdated records a budget set or changed.
const EventBudgetUpdated cloud.EventKind = "budget.updated"

// Bounds of a budget.
const (
	maxThresholds   = 10
	maxThresholdPct = 1000
	maxBudget       = 1_000_000_000 * money.Unit
)

// defaultThresholds are a budget's alert levels when none are given.
var defaultThresholds = []int{50, 80, 100}

// checkBudget validates a budget body and returns its thresholds sorted.
func checkBudget(spec BudgetSpec) ([]int, error) {
	if spec.Amount <= 0 || spec.Amount > maxBudget {
		return nil, field("amount", "%s is out of range (0, %s]", spec.Amount, maxBudget)
	}
	if spec.Thresholds == nil {
		return slices.Clone(defaultThresholds), nil
	}
	if len(spec.Thresholds) == 0 || len(spec.Thresholds) > maxThresholds {
		return nil, field("thresholds", "%d thresholds; give 1 to %d (or leave them out for %v)", len(spec.Thresholds), maxThresholds, defaultThresholds)
	}
	ths := slices.Clone(spec.Thresholds)
	slices.Sort(ths)
	for i, t := range ths {
		if t < 1 || t > maxThresholdPct {
			return nil, field("thresholds", "%d%% is out of range 1..%d", t, maxThresholdPct)
		}
		if i > 0 && ths[i-1] == t {
			return nil, field("thresholds", "%d%% is given twice", t)
		}
	}
	return ths, nil
}

// putBudget handles PUT /v1/budget: sets the monthly budget of the
// caller's tenant (admins: ?tenant's, else their own). Budgets alert when
// spending crosses a threshold; they never stop anything.
func (s *api) putBudget(w http.ResponseWriter, r *http.Request, p principal) error {
	var spec BudgetSpec
	if err := decodeMoneyBody(w, r, &spec, "amount"); err != nil {
		return err
	}
	ths, err := checkBudget(spec)
	if err != nil {
		return err
	}
	var out *BudgetStatus
	err = s.tx(r.Context(), func(tx cloud.Tx) error {
		ctx := r.Context()
		tenant, err := s.scope(ctx, tx, p, r.URL.Query().Get("tenant"), p.TenantID)
		if err != nil {
			return err
		}
		now := s.now()
		b := &cloud.Budget{TenantID: tenant, Amount: spec.Amount, Thresholds: ths, UpdatedAt: now}
		if err := tx.PutBudget(ctx, b); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventBudgetUpdated, TenantID: tenant, Actor: p.UserID,
			Reason: fmt.Sprintf("monthly budget %s with alerts at %s", b.Amount.Cents(), percents(ths))}); err != nil {
			return err
		}
		out, err = s.budgetStatus(ctx, tx, tenant)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// percents renders thresholds as "50%, 80%, 100%".
func percents(ths []int) string {
	parts := make([]string, len(ths))
	for i, t := range ths {
		parts[i] = strconv.Itoa(t) + "%"
	}
	return strings.Join(parts, ", ")
}

// getBudget handles GET /v1/budget: the budget of the caller's tenant
// (admins: ?tenant's, else their own), null when none is set, with the
// spending of the current month rated live and this month's alerts.
func (s *api) getBudget(w http.ResponseWriter, r *http.Request, p principal) error {
	var out *BudgetStatus
	err := s.tx(r.Context(), func(tx cloud.Tx) error {
		tenant, err := s.scope(r.Context(), tx, p, r.URL.Query().Get("tenant"), p.TenantID)
		if err != nil {
			return err
		}
		out, err = s.budgetStatus(r.Context(), tx, tenant)
		return err
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// budgetStatus reads a tenant's budget, rates its current month and lists
// the month's alerts.
func (s *api) budgetStatus(ctx context.Context, tx cloud.Tx, tenant string) (*BudgetStatus, error) {
	now := s.now().UTC()
	period := billing.Month(now.Year(), now.Month())
	out := &BudgetStatus{TenantID: tenant, Month: period.Name(), Alerts: []*cloud.BudgetAlert{}}
	b, err := tx.GetBudget(ctx, tenant)
	switch {
	case err == nil:
		out.Budget = b
	case !cloud.IsNotFound(err):
		return nil, err
	}
	invs, err := rate(ctx, tx, tenant, period, now)
	if err != nil {
		return nil, err
	}
	for _, inv := range invs {
		out.Spent += inv.Total
	}
	alerts, err := tx.ListBudgetAlerts(ctx, tenant)
	if err != nil {
		return nil, err
	}
	for _, a := range alerts {
		if a.Month == out.Month {
			out.Alerts = append(out.Alerts, a)
		}
	}
	return out, nil
}
