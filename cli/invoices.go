package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/money"
)

func newInvoicesCommand(s *session) *cobra.Command {
	cmd := groupCommand("invoices", "Show invoices",
		"Invoices are rated live from the usage ledger: the current month's is a\n"+
			"running total until the month ends.",
		newInvoicesShowCommand(s))
	cmd.Aliases = []string{"invoice"}
	return cmd
}

// printInvoices writes invoices as tables: a heading per invoice, its lines
// (those that differ only in price summed, unless detail) and its total.
func printInvoices(w io.Writer, invs []*billing.Invoice, detail bool) error {
	if len(invs) == 0 {
		_, err := fmt.Fprintln(w, "no invoices")
		return err
	}
	for i, inv := range invs {
		if i > 0 {
			fmt.Fprintln(w)
		}
		status := "running total as of " + inv.AsOf.UTC().Format(time.RFC3339)
		if inv.Final {
			status = "final"
		}
		fmt.Fprintf(w, "Invoice %s, tenant %s (%s)\n", inv.Month, inv.TenantID, status)
		rows := [][]string{{"DESCRIPTION", "QUANTITY", "UNIT PRICE", "AMOUNT"}}
		groups := billing.GroupLines(inv.Lines, detail)
		amounts := make([]money.Micros, len(groups))
		for i, g := range groups {
			amounts[i] = g.Amount
		}
		// Lines are metered to the micro-dollar and shown to the cent, so
		// that the printed lines add up to the printed total (-o json
		// shows every digit).
		cents := money.RoundToCents(amounts, inv.Total)
		for i, g := range groups {
			price := billing.FormatUnitPrice(g.Line)
			if g.Prices() > 1 {
				price = fmt.Sprintf("%d prices, avg %s", g.Prices(), billing.FormatUnitPrice(billing.Line{Unit: g.Unit, UnitPrice: g.AveragePrice()}))
			}
			rows = append(rows, []string{g.Description, billing.FormatQuantity(g.Line), price, formatAmount(cents[i])})
		}
		rows = append(rows, []string{"TOTAL", "", "", formatAmount(inv.Total)})
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	return nil
}

func newInvoicesShowCommand(s *session) *cobra.Command {
	var (
		o      client.InvoicesOptions
		format string
		detail bool
	)
	formats := []string{"table", "json", "yaml", "csv"}
	cmd := &cobra.Command{
		Use:   "show",
		Short: "Show the invoice of a month",
		Long: "Show a month's invoice (default the current month, UTC): each line with its\n" +
			"quantity in the unit of its price (hours, or GiB-months for volumes), unit\n" +
			"price and amount, in dollars and cents, and the total.\n" +
			"Members see their tenant's; admins one tenant's with --tenant, else every\n" +
			"tenant's. Spot seconds are billed at the price in force each second; the table\n" +
			"sums them per pool with the average price (--detail shows every price), and\n" +
			"-o json and -o csv keep one line per price, with exact quantities in seconds.",
		Example: "  gpucloud invoices show\n  gpucloud invoices show --month 2026-12 -o csv > invoice.csv",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(formats, format) {
				return cmdutil.Usagef(cmd, `--output %q: want "table", "json", "yaml" or "csv"`, format)
			}
			if o.Month != "" {
				if _, err := billing.ParseMonth(o.Month); err != nil {
					return cmdutil.Usagef(cmd, "--month %q: want YYYY-MM, e.g. 2026-12", o.Month)
				}
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var err error
				if o.Tenant, err = c.tenantID(ctx, o.Tenant); err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if format == "csv" {
					b, err := c.InvoicesCSV(ctx, o)
					if err != nil {
						return c.explain(err)
					}
					_, err = w.Write(b)
					return err
				}
				invs, err := c.Invoices(ctx, o)
				if err != nil {
					return c.explain(err)
				}
				if invs == nil {
					invs = []*billing.Invoice{}
				}
				if format != "table" {
					return writeData(w, format, invs)
				}
				return printInvoices(w, invs, detail)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Month, "month", "", "the month, YYYY-MM (default the current month, UTC)")
	f.StringVar(&o.Tenant, "tenant", "", "only this tenant, by name or ID (admins; default every tenant)")
	f.StringVarP(&format, "output", "o", "table", `output format: "table", "json", "yaml" or "csv"`)
	f.BoolVar(&detail, "detail", false, "one table row per unit price (spot lines are otherwise summed per pool, with their average price)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
