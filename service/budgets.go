package service

import (
	"context"
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// CheckBudgets rates the current month of every tenant with a budget and
// records an alert (a budget.alert event, and the alert the API lists) for
// each threshold its spending crossed for the first time this month. It
// returns the alerts it recorded. Budgets alert; they never stop anything.
// The budget checker (controller.BudgetChecker) runs it.
func CheckBudgets(ctx context.Context, st cloud.Store, now time.Time) ([]*cloud.BudgetAlert, error) {
	now = now.UTC()
	period := billing.Month(now.Year(), now.Month())
	type due struct {
		b     *cloud.Budget
		spent money.Micros
		cross []int
	}
	var dues []due
	err := st.Tx(ctx, func(tx cloud.Tx) error {
		dues = nil
		budgets, err := tx.ListBudgets(ctx)
		if err != nil {
			return err
		}
		for _, b := range budgets {
			if b.Amount <= 0 || len(b.Thresholds) == 0 {
				continue
			}
			in, err := billing.Load(ctx, tx, b.TenantID, period, now)
			if err != nil {
				return err
			}
			res, err := billing.Rate(in)
			if err != nil {
				return fmt.Errorf("budget of tenant %s: %w", b.TenantID, err)
			}
			spent := money.Micros(0)
			for _, inv := range res.Invoices {
				if inv.TenantID == b.TenantID {
					spent += inv.Total
				}
			}
			alerts, err := tx.ListBudgetAlerts(ctx, b.TenantID)
			if err != nil {
				return err
			}
			var fired []int
			for _, a := range alerts {
				if a.Month == period.Name() {
					fired = append(fired, a.Threshold)
				}
			}
			if cross := billing.BudgetCrossings(b, spent, fired); len(cross) > 0 {
				dues = append(dues, due{b, spent, cross})
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []*cloud.BudgetAlert
	for _, d := range dues {
		for _, th := range d.cross {
			a := &cloud.BudgetAlert{TenantID: d.b.TenantID, Month: period.Name(), Threshold: th, Spent: d.spent, Time: now}
			err := st.Tx(ctx, func(tx cloud.Tx) error {
				if err := tx.RecordBudgetAlert(ctx, a); err != nil {
					return err
				}
				return tx.AppendEvent(ctx, &cloud.Event{Time: now, Kind: cloud.EventBudgetAlert, TenantID: a.TenantID,
					Actor: "billing", Reason: fmt.Sprintf("spending %s in %s reached %d%% of the budget %s",
						money.FormatAmount(d.spent), a.Month, th, money.FormatAmount(d.b.Amount))})
			})
			if cloud.IsConflict(err) {
				continue // another replica alerted first
			}
			if err != nil {
				return out, err
			}
			out = append(out, a)
		}
	}
	return out, nil
}
