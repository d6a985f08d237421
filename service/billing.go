package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
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

// Month resolves the month a billing read asks for: "YYYY-MM", or the
// current month in UTC when empty.
func (s *Billing) Month(month string) (billing.Period, error) {
	if month == "" {
		now := s.now().UTC()
		return billing.Month(now.Year(), now.Month()), nil
	}
	period, err := billing.ParseMonth(month)
	if err != nil {
		return billing.Period{}, Field("month", "%s", strings.TrimPrefix(err.Error(), "billing: "))
	}
	return period, nil
}

// Invoices rates period live, as of now, and answers its invoices, so
// that the current month's is a running total (final is false until the
// month is over): a member's own tenant's, an admin's of tenant (every
// tenant's when empty).
func (s *Billing) Invoices(ctx context.Context, a Actor, tenant string, period billing.Period) ([]*billing.Invoice, error) {
	now := s.now()
	var invs []*billing.Invoice
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		invs, err = Rate(ctx, tx, t, period, now)
		return err
	})
	return invs, err
}

// Rate rates a period for one tenant, or every tenant when tenant is
// empty, as of asOf, and returns the invoices of that tenant (or all). A
// gap in the price book where usage accrued is a Conflict naming it: the
// operator's to fix.
func Rate(ctx context.Context, tx cloud.Tx, tenant string, period billing.Period, asOf time.Time) ([]*billing.Invoice, error) {
	in, err := billing.Load(ctx, tx, tenant, period, asOf)
	if err != nil {
		return nil, err
	}
	res, err := billing.Rate(in)
	if err != nil {
		var missing *billing.MissingPriceError
		if errors.As(err, &missing) {
			return nil, &cloud.Error{Code: cloud.Conflict,
				Message: "cannot rate " + period.Name() + ": " + strings.TrimPrefix(err.Error(), "billing: ") + "; an admin sets prices with POST /v1/prices",
				Details: map[string]any{"month": period.Name()}}
		}
		return nil, fmt.Errorf("rate %s: %w", period.Name(), err)
	}
	out := []*billing.Invoice{}
	for _, inv := range res.Invoices {
		if inv != nil && (tenant == "" || inv.TenantID == tenant) {
			out = append(out, inv)
		}
	}
	return out, nil
}

// checkBudget validates a budget and returns its thresholds sorted.
func checkBudget(spec api.BudgetSpec) ([]int, error) {
	if spec.Amount <= 0 || spec.Amount > maxBudget {
		return nil, Field("amount", "%s is out of range (0, %s]", spec.Amount, maxBudget)
	}
	if spec.Thresholds == nil {
		return slices.Clone(defaultThresholds), nil
	}
	if len(spec.Thresholds) == 0 || len(spec.Thresholds) > maxThresholds {
		return nil, Field("thresholds", "%d thresholds; give 1 to %d (or leave them out for %v)", len(spec.Thresholds), maxThresholds, defaultThresholds)
	}
	ths := slices.Clone(spec.Thresholds)
	slices.Sort(ths)
	for i, t := range ths {
		if t < 1 || t > maxThresholdPct {
			return nil, Field("thresholds", "%d%% is out of range 1..%d", t, maxThresholdPct)
		}
		if i > 0 && ths[i-1] == t {
			return nil, Field("thresholds", "%d%% is given twice", t)
		}
	}
	return ths, nil
}

// PutBudget sets the monthly budget of a tenant (a member's own; an
// admin's of tenant, its own when empty), with a budget.updated event, and
// answers the budget's status. Budgets alert when spending crosses a
// threshold; they never stop anything.
func (s *Billing) PutBudget(ctx context.Context, a Actor, tenant string, spec api.BudgetSpec) (*api.BudgetStatus, error) {
	ths, err := checkBudget(spec)
	if err != nil {
		return nil, err
	}
	var out *api.BudgetStatus
	err = s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, a.TenantID)
		if err != nil {
			return err
		}
		now := s.now()
		b := &cloud.Budget{TenantID: t, Amount: spec.Amount, Thresholds: ths, UpdatedAt: now}
		if err := tx.PutBudget(ctx, b); err != nil {
			return err
		}
		if err := tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: EventBudgetUpdated, TenantID: t, Actor: a.ID,
			Reason: fmt.Sprintf("monthly budget %s with alerts at %s", money.FormatAmount(b.Amount), percents(ths))}); err != nil {
			return err
		}
		out, err = s.budgetStatus(ctx, tx, t)
		return err
	})
	return out, err
}

// percents renders thresholds as "50%, 80%, 100%".
func percents(ths []int) string {
	parts := make([]string, len(ths))
	for i, t := range ths {
		parts[i] = strconv.Itoa(t) + "%"
	}
	return strings.Join(parts, ", ")
}

// Budget answers the budget status of a tenant (a member's own; an
// admin's of tenant, its own when empty).
func (s *Billing) Budget(ctx context.Context, a Actor, tenant string) (*api.BudgetStatus, error) {
	var out *api.BudgetStatus
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, a.TenantID)
		if err != nil {
			return err
		}
		out, err = s.budgetStatus(ctx, tx, t)
		return err
	})
	return out, err
}

// budgetStatus reads a tenant's budget, rates its current month and lists
// the month's alerts.
func (s *Billing) budgetStatus(ctx context.Context, tx cloud.Tx, tenant string) (*api.BudgetStatus, error) {
	now := s.now().UTC()
	period := billing.Month(now.Year(), now.Month())
	out := &api.BudgetStatus{TenantID: tenant, Month: period.Name(), Alerts: []*cloud.BudgetAlert{}}
	b, err := tx.GetBudget(ctx, tenant)
	switch {
	case err == nil:
		out.Budget = b
	case !cloud.IsNotFound(err):
		return nil, err
	}
	invs, err := Rate(ctx, tx, tenant, period, now)
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
	for _, al := range alerts {
		if al.Month == out.Month {
			out.Alerts = append(out.Alerts, al)
		}
	}
	return out, nil
}

// InstanceCost is what an instance a may see has cost from its creation
// until now, rated exactly as its tenant's invoices rate it (per second,
// at its offering's on-demand price or its pool's spot price, with the
// one-minute minimum), before any commitment discount: commitments cover
// a tenant's hours, not one instance's.
func (s *Billing) InstanceCost(ctx context.Context, a Actor, id string) (money.Micros, error) {
	now := s.now()
	var total money.Micros
	err := s.tx(ctx, func(tx cloud.Tx) error {
		in, err := Visible(ctx, a, "instance", id, tx.GetInstance)
		if err != nil {
			return err
		}
		period := billing.Period{Start: in.CreatedAt.Truncate(time.Second), End: now.Add(time.Second)}
		input, err := billing.Load(ctx, tx, in.TenantID, period, now)
		if err != nil {
			return err
		}
		mine := input.Usage[:0:0]
		for _, u := range input.Usage {
			if u.ResourceID == in.ID {
				mine = append(mine, u)
			}
		}
		input.Usage, input.Commitments, input.Tenants = mine, nil, []string{in.TenantID}
		res, err := billing.Rate(input)
		if err != nil {
			return err
		}
		for _, inv := range res.Invoices {
			if inv != nil && inv.TenantID == in.TenantID {
				total = inv.Total
			}
		}
		return nil
	})
	return total, err
}
