package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/money"
)

func newBudgetCommand(s *session) *cobra.Command {
	cmd := groupCommand("budget", "Show and set the monthly budget",
		"A budget is a monthly spending limit with alert thresholds in percent. When\n"+
			"this month's spending crosses a threshold, an alert is recorded once (and a\n"+
			"budget.alert event). Budgets alert; they never stop instances.",
		newBudgetShowCommand(s), newBudgetSetCommand(s))
	cmd.Aliases = []string{"budgets"}
	return cmd
}

// printBudget writes a budget status.
func printBudget(w io.Writer, format string, st *api.BudgetStatus) error {
	if format != "table" {
		return writeData(w, format, st)
	}
	var rows fieldRows
	add := rows.add
	add("Tenant", st.TenantID)
	if st.Budget == nil {
		add("Budget", "none (gpucloud budget set --amount N sets one)")
		add("Spent "+st.Month, formatAmount(st.Spent))
	} else {
		add("Budget", formatAmount(st.Budget.Amount)+" per month")
		ths := make([]string, len(st.Budget.Thresholds))
		for i, t := range st.Budget.Thresholds {
			ths[i] = strconv.Itoa(t) + "%"
		}
		add("Alerts at", strings.Join(ths, ", "))
		spent := formatAmount(st.Spent)
		if pct, err := money.MulDiv(st.Spent, 10_000, int64(st.Budget.Amount)); err == nil {
			spent += " (" + basisPoints(int64(pct)) + " of the budget)"
		}
		add("Spent "+st.Month, spent)
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(st.Alerts) == 0 {
		_, err := fmt.Fprintln(w, "Alerts: none this month")
		return err
	}
	fmt.Fprintln(w, "Alerts:")
	arows := [][]string{{"  THRESHOLD", "SPENT", "TIME"}}
	for _, a := range st.Alerts {
		arows = append(arows, []string{"  " + strconv.Itoa(a.Threshold) + "%", formatAmount(a.Spent), a.Time.UTC().Format(time.RFC3339)})
	}
	return writeTable(w, arows)
}

func newBudgetShowCommand(s *session) *cobra.Command {
	var (
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "show",
		Aliases: []string{"get"},
		Short:   "Show the budget, this month's spending and its alerts",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				st, err := c.Budget(ctx, t)
				if err != nil {
					return c.explain(err)
				}
				return printBudget(cmd.OutOrStdout(), out.format, st)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "this tenant's budget, by name or ID (admins; default your own)")
	out.register(cmd)
	return cmd
}

func newBudgetSetCommand(s *session) *cobra.Command {
	var (
		amount     moneyFlag
		thresholds []int
		tenant     string
		out        outputFlag
	)
	cmd := &cobra.Command{
		Use:     "set --amount N [--threshold PCT ...]",
		Short:   "Set the monthly budget",
		Example: "  gpucloud budget set --amount 1000\n  gpucloud budget set --amount 5000 --threshold 50 --threshold 90 --threshold 100",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if !amount.set {
				return cmdutil.Usagef(cmd, "--amount is required")
			}
			spec := api.BudgetSpec{Amount: amount.v, Thresholds: thresholds}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				st, err := c.SetBudget(ctx, t, spec)
				if err != nil {
					return c.explain(err)
				}
				return printBudget(cmd.OutOrStdout(), out.format, st)
			})
		},
	}
	f := cmd.Flags()
	f.Var(&amount, "amount", "the monthly limit, e.g. 1000; required")
	f.IntSliceVar(&thresholds, "threshold", nil, "alert at this percent of the budget, 1..1000 (repeatable; default 50, 80, 100)")
	f.StringVar(&tenant, "tenant", "", "set this tenant's budget, by name or ID (admins; default your own)")
	out.register(cmd)
	return cmd
}
