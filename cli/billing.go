package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// newBillingCommands returns the commands of prices, commitments, the spot
// market, invoices, budgets and addresses. They use the connection flags
// (--server, --token) that newCloudCommands put on root, read when a
// command runs, so root must have them before these run.
func newBillingCommands(root *cobra.Command) []*cobra.Command {
	s := &session{}
	cmds := []*cobra.Command{newPricesCommand(s), newCommitmentsCommand(s), newSpotCommand(s),
		newInvoicesCommand(s), newBudgetCommand(s), newAddressesCommand(s)}
	for _, c := range cmds {
		bindConnFlags(root, s, c)
	}
	return cmds
}

// bindConnFlags makes cmd and its subcommands fill s from root's
// connection flags before they run or complete arguments.
func bindConnFlags(root *cobra.Command, s *session, cmd *cobra.Command) {
	load := func() {
		if f := root.PersistentFlags().Lookup("server"); f != nil {
			s.server = f.Value.String()
		}
		if f := root.PersistentFlags().Lookup("token"); f != nil {
			s.token = f.Value.String()
		}
	}
	if run := cmd.RunE; run != nil {
		cmd.RunE = func(c *cobra.Command, args []string) error {
			load()
			return run(c, args)
		}
	}
	if complete := cmd.ValidArgsFunction; complete != nil {
		cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			load()
			return complete(c, args, toComplete)
		}
	}
	for _, sub := range cmd.Commands() {
		bindConnFlags(root, s, sub)
	}
}

// moneyFlag is a flag holding an amount ("12.50"); set reports whether it
// was given.
type moneyFlag struct {
	v   money.Micros
	set bool
}

func (m *moneyFlag) String() string {
	if !m.set {
		return ""
	}
	return m.v.String()
}

func (m *moneyFlag) Set(s string) error {
	v, err := money.Parse(s)
	if err != nil {
		return fmt.Errorf("want an amount such as 12.50: %v", strings.TrimPrefix(err.Error(), "money: "))
	}
	m.v, m.set = v, true
	return nil
}

func (m *moneyFlag) Type() string { return "amount" }

// parseWhen reads a time flag: RFC 3339, or a duration before now ("2h").
func parseWhen(cmd *cobra.Command, flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return clockNow().Add(-d), nil
	}
	return time.Time{}, cmdutil.Usagef(cmd, "--%s %q: want an RFC 3339 time (2026-12-01T00:00:00Z) or a duration ago (2h)", flag, v)
}

// priceUnit says what a price is per.
func priceUnit(k cloud.PriceKind) string {
	if k == cloud.PriceVolume {
		return "/GiB-month"
	}
	return "/h"
}

// Money in the CLI's tables and messages has one format (-o json, yaml and
// csv keep the API's exact decimal strings instead):
//
//   - an amount (a total, a fee paid once, a budget) is in dollars and cents
//     with thousands separators: "$4,320.00", "-$0.13";
//   - a price (per hour, per GiB-month) has four decimals, a hundredth of a
//     cent: "$2.4900/h", "$0.2557/h" for 0.255714. A price under half of
//     that, which four decimals would show as zero, is shown exactly:
//     "$0.00004/h".
//
// Both round half away from zero. Every amount is USD (billing.Currency).
const currencySign = "$"

// formatAmount prints an amount rounded to cents: "$4,320.00", "-$0.13".
func formatAmount(m money.Micros) string {
	return formatMoney(m, 2)
}

// formatPrice prints a price without its unit: "$2.4900", "$1,200.0000",
// "$0.00004".
func formatPrice(m money.Micros) string {
	if m != 0 && m.Round(100) == 0 {
		return formatMoney(m, 6)
	}
	return formatMoney(m, 4)
}

// formatMoney prints m rounded to decimals (2, 4 or 6) with the currency
// sign and thousands separators; six decimals drop trailing zeros.
func formatMoney(m money.Micros, decimals int) string {
	unit := money.Micros(1)
	for i := decimals; i < 6; i++ {
		unit *= 10
	}
	r := m.Round(unit)
	sign := ""
	if r < 0 {
		sign, r = "-", -r
	}
	frac := fmt.Sprintf("%06d", int64(r%money.Unit))[:decimals]
	if decimals == 6 {
		frac = strings.TrimRight(frac, "0")
	}
	return sign + currencySign + thousands(int64(r/money.Unit)) + "." + frac
}

// thousands prints a non-negative integer with a comma every three digits.
func thousands(v int64) string {
	s := strconv.FormatInt(v, 10)
	var b strings.Builder
	for i, d := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// --- prices ---

func newPricesCommand(s *session) *cobra.Command {
	cmd := groupCommand("prices", "List and set prices",
		"Prices are versioned: each version is in force from its effective time until\n"+
			"the next version of the same kind, offering and zone. A compute price is per\n"+
			"instance-hour of an offering, a volume price per GiB-month (730 hours), an\n"+
			"address price per address-hour. An empty zone prices every zone without a\n"+
			"price of its own. Everyone reads prices; admins set them.",
		newPricesListCommand(s), newPricesSetCommand(s))
	cmd.Aliases = []string{"price"}
	return cmd
}

// printPrices prints price versions as a table or as JSON or YAML.
var printPrices = resourceTable[cloud.Price]{
	none:   "no prices",
	header: []string{"KIND", "OFFERING", "ZONE", "PRICE", "EFFECTIVE", "BY"},
	row: func(p *cloud.Price) []string {
		return []string{string(p.Kind), dash(p.Offering), cmpOrDash(p.Zone, "(all)"),
			formatPrice(p.Amount) + priceUnit(p.Kind), p.EffectiveAt.UTC().Format(time.RFC3339), dash(p.Actor)}
	},
}.print

// cmpOrDash is s, or alt when s is empty.
func cmpOrDash(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// priceKinds are the values of --kind.
var priceKinds = []string{string(cloud.PriceCompute), string(cloud.PriceVolume), string(cloud.PriceAddress)}

func checkKind(cmd *cobra.Command, kind string) (cloud.PriceKind, error) {
	if kind != "" && !slices.Contains(priceKinds, kind) {
		return "", cmdutil.Usagef(cmd, "--kind %q: want one of %s", kind, strings.Join(priceKinds, ", "))
	}
	return cloud.PriceKind(kind), nil
}

func newPricesListCommand(s *session) *cobra.Command {
	var (
		o                    client.PricesOptions
		kind, offering, zone string
		at                   string
		out                  outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List price versions",
		Long: "List price versions by kind, offering, zone and effective time; with --at only\n" +
			"the versions in force at that time.",
		Example: "  gpucloud prices list --offering h100.8x\n  gpucloud prices list --kind volume\n  gpucloud prices list --at 2026-12-01T00:00:00Z",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var err error
			if o.Kind, err = checkKind(cmd, kind); err != nil {
				return err
			}
			if o.At, err = parseWhen(cmd, "at", at); err != nil {
				return err
			}
			o.Offering, o.Zone = offering, zone
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				ps, err := c.Prices(ctx, o)
				if err != nil {
					return c.explain(err)
				}
				if ps == nil {
					ps = []*cloud.Price{}
				}
				return printPrices(cmd.OutOrStdout(), out.format, false, ps...)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "only this kind: "+strings.Join(priceKinds, ", "))
	f.StringVar(&offering, "offering", "", "only this offering's prices")
	f.StringVar(&zone, "zone", "", "only prices of this zone")
	f.StringVar(&at, "at", "", "only the versions in force at this time (RFC 3339, or a duration ago such as 24h)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(priceKinds, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

func newPricesSetCommand(s *session) *cobra.Command {
	var (
		req         api.SetPriceRequest
		kind        string
		amount      moneyFlag
		effectiveAt string
		key         string
		out         outputFlag
	)
	cmd := &cobra.Command{
		Use:   "set --offering NAME --amount 12.50 [flags]",
		Short: "Set a price from now or a later time (admin)",
		Long: "Add a price version, in force from --effective-at (default now) until the next\n" +
			"version. Prices are never changed in the past: what was billed stays billed.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given):\n" +
			"a retry with the same key answers the version the first call added. Keys are\n" +
			"one space for every price, not per tenant.",
		Example: strings.Join([]string{
			"  gpucloud prices set --offering h100.8x --amount 19.92",
			"  gpucloud prices set --offering h100.8x --zone b --amount 17.50 --effective-at 2026-12-01T00:00:00Z",
			"  gpucloud prices set --kind volume --amount 0.10",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			k, err := checkKind(cmd, kind)
			if err != nil {
				return err
			}
			req.Kind = k
			if (k == "" || k == cloud.PriceCompute) && req.Offering == "" {
				return cmdutil.Usagef(cmd, "--offering is required for a compute price")
			}
			if !amount.set {
				return cmdutil.Usagef(cmd, "--amount is required")
			}
			req.Amount = amount.v
			if effectiveAt != "" {
				t, err := time.Parse(time.RFC3339, effectiveAt)
				if err != nil {
					return cmdutil.Usagef(cmd, "--effective-at %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", effectiveAt)
				}
				req.EffectiveAt = &t
			}
			if key == "" {
				key = newUUID()
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				p, err := c.SetPrice(ctx, req, key)
				if err != nil {
					return c.explain(err)
				}
				return printPrices(cmd.OutOrStdout(), out.format, true, p)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&kind, "kind", "", "compute (the default), volume or address")
	f.StringVar(&req.Offering, "offering", "", "the offering a compute price is for")
	f.StringVar(&req.Zone, "zone", "", "price this zone only (default: every zone without its own price)")
	f.Var(&amount, "amount", "the price: per hour, per GiB-month for volumes (e.g. 12.50); required")
	f.StringVar(&effectiveAt, "effective-at", "", "when the price takes effect, RFC 3339 (default now)")
	f.StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same version (default: a random UUID)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(priceKinds, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// --- commitments ---

func newCommitmentsCommand(s *session) *cobra.Command {
	cmd := groupCommand("commitments", "Buy and list reservations and retainers",
		"A commitment covers up to QUANTITY instance-hours of matching on-demand usage\n"+
			"each hour of its term. A reservation charges every hour of the term at a\n"+
			"discount (all, part or none up front) and covered usage costs nothing more; a\n"+
			"retainer charges a small hourly fee and bills covered usage at a lower rate.\n"+
			"Fees are fixed at purchase from the on-demand price then in force.",
		newCommitmentsCreateCommand(s), newCommitmentsListCommand(s), newCommitmentsDescribeCommand(s))
	cmd.Aliases = []string{"commitment"}
	return cmd
}

// printCommitments prints commitments as a table or as JSON or YAML.
var printCommitments = resourceTable[cloud.Commitment]{
	none:   "no commitments",
	header: []string{"ID", "PLAN", "OFFERING", "ZONE", "QTY", "START", "END", "UPFRONT", "HOURLY", "USAGE RATE", "DISCOUNT"},
	row: func(c *cloud.Commitment) []string {
		return []string{c.ID, string(c.Plan), c.Offering, dash(c.Zone), strconv.Itoa(c.Quantity),
			c.Start.UTC().Format("2006-01-02 15:04"), c.End.UTC().Format("2006-01-02 15:04"),
			formatAmount(c.UpfrontFee), formatPrice(c.HourlyFee) + "/h", formatPrice(c.UsageRate) + "/h", basisPoints(c.DiscountBP)}
	},
	tenant: func(c *cloud.Commitment) string { return c.TenantID },
}.print

// basisPoints renders basis points as a percentage: 3500 is "35%", 6250
// "62.5%".
func basisPoints(bp int64) string {
	s := strconv.FormatInt(bp/100, 10)
	if r := bp % 100; r != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%02d", r), "0")
	}
	return s + "%"
}

func newCommitmentsCreateCommand(s *session) *cobra.Command {
	var (
		req        api.CreateCommitmentRequest
		plan, pay  string
		discount   string
		start, key string
		out        outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create --offering NAME --term 1y [flags]",
		Short: "Buy a reservation or a retainer",
		Long: "Buy a commitment for an offering (h100.8x) or a family (h100: every h100.*\n" +
			"offering; its fees come from the on-demand price of the family's cheapest\n" +
			"offering). A zone also reserves the capacity there. The term is 1y, 2y, 3y or a\n" +
			"duration such as 720h. Admins may give --discount-pct instead of the standard\n" +
			"discount table.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given):\n" +
			"a retry with the same key answers the commitment the first call made.",
		Example: strings.Join([]string{
			"  gpucloud commitments create --offering h100.8x --zone a --quantity 2 --term 1y --payment all_upfront",
			"  gpucloud commitments create --plan retainer --offering h100 --term 720h",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if req.Offering == "" {
				return cmdutil.Usagef(cmd, "--offering is required (an offering such as h100.8x, or a family such as h100)")
			}
			if req.Term == "" {
				return cmdutil.Usagef(cmd, "--term is required: 1y, 3y or a duration such as 720h")
			}
			switch plan {
			case string(cloud.PlanReservation), string(cloud.PlanRetainer):
				req.Plan = cloud.Plan(plan)
			default:
				return cmdutil.Usagef(cmd, "--plan %q: want reservation or retainer", plan)
			}
			req.Payment = cloud.Payment(pay)
			if discount != "" {
				if _, err := strconv.ParseFloat(discount, 64); err != nil {
					return cmdutil.Usagef(cmd, "--discount-pct %q: want a percentage such as 37.5", discount)
				}
				req.DiscountPct = json.Number(discount)
			}
			if start != "" {
				t, err := time.Parse(time.RFC3339, start)
				if err != nil {
					return cmdutil.Usagef(cmd, "--start %q: want an RFC 3339 time such as 2026-12-01T00:00:00Z", start)
				}
				req.Start = &t
			}
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Commitment, error) {
					return c.CreateCommitment(ctx, req, key)
				},
				printCommitments)
		},
	}
	f := cmd.Flags()
	f.StringVar(&plan, "plan", string(cloud.PlanReservation), "reservation or retainer")
	f.StringVar(&req.Offering, "offering", "", "an offering (h100.8x) or a family (h100); required")
	f.StringVar(&req.Zone, "zone", "", "reserve the capacity in this zone")
	f.IntVar(&req.Quantity, "quantity", 1, "how many instances the commitment covers at once")
	f.StringVar(&req.Term, "term", "", "1y, 2y, 3y or a duration such as 720h; required")
	f.StringVar(&pay, "payment", "", "a reservation's payment: all_upfront, partial_upfront or no_upfront (default)")
	f.StringVar(&discount, "discount-pct", "", "discount in percent instead of the standard table (admins only)")
	f.StringVar(&start, "start", "", "when the term starts, RFC 3339 (default now)")
	f.StringVar(&req.Tenant, "tenant", "", "buy for this tenant, by name or ID (admins only)")
	f.StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same commitment (default: a random UUID)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("plan", cobra.FixedCompletions([]string{"reservation", "retainer"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("payment", cobra.FixedCompletions([]string{"all_upfront", "partial_upfront", "no_upfront"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newCommitmentsListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "commitments", "List commitments: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Commitment, error) {
			return c.Commitments(ctx, t)
		}, printCommitments)
}

func newCommitmentsDescribeCommand(s *session) *cobra.Command {
	return newDescribeCommand(s, "Show a commitment", "one commitment ID",
		func(ctx context.Context, c *conn, id string) (*cloud.Commitment, error) {
			return c.GetCommitment(ctx, id)
		},
		func(_ context.Context, _ *conn, cm *cloud.Commitment) fieldRows {
			var f fieldRows
			f.add("ID", cm.ID)
			f.add("Tenant", cm.TenantID)
			f.add("Plan", string(cm.Plan))
			f.add("Offering", cm.Offering)
			f.add("Zone", dash(cm.Zone))
			f.add("Quantity", strconv.Itoa(cm.Quantity))
			f.add("Payment", dash(string(cm.Payment)))
			f.add("Discount", basisPoints(cm.DiscountBP))
			f.add("Upfront fee", formatAmount(cm.UpfrontFee))
			f.add("Hourly fee", formatPrice(cm.HourlyFee)+"/h per unit")
			f.add("Usage rate", formatPrice(cm.UsageRate)+"/h per covered hour")
			f.add("Start", stamp(cm.Start))
			f.add("End", cm.End.UTC().Format(time.RFC3339))
			f.add("Created", stamp(cm.CreatedAt))
			return f
		})
}

// --- invoices ---

func newInvoicesCommand(s *session) *cobra.Command {
	cmd := groupCommand("invoices", "Show invoices",
		"Invoices are rated live from the usage ledger: the current month's is a\n"+
			"running total until the month ends.",
		newInvoicesShowCommand(s))
	cmd.Aliases = []string{"invoice"}
	return cmd
}

// lineQuantity renders a line's quantity in the unit its price is per
// (lineUnitPrice): hours for time-metered lines, GiB-months for storage,
// so that quantity × unit price is the amount. Under an hour, four
// decimals keep what was billed visible.
func lineQuantity(l billing.Line) string {
	switch l.Unit {
	case billing.UnitSecond:
		return secondsIn(l.Quantity, money.SecondsPerHour) + " h"
	case billing.UnitGiBSecond:
		return secondsIn(l.Quantity, money.SecondsPerMonth) + " GiB-month"
	case billing.UnitUnitSecond:
		return secondsIn(l.Quantity, money.SecondsPerHour) + " unit-h"
	}
	return strconv.FormatInt(l.Quantity, 10)
}

// secondsIn renders seconds in units of per seconds (an hour, a billing
// month), computed in integers and rounded half up: two decimals from one
// unit up, four below it, and "<0.0001" for a quantity too small for
// that: secondsIn(5400, 3600) is "1.50", secondsIn(60, 3600) "0.0167".
func secondsIn(seconds, per int64) string {
	sign := ""
	if seconds < 0 {
		sign, seconds = "-", -seconds
	}
	decimals, scale := 2, int64(100)
	if seconds < per {
		decimals, scale = 4, 10_000
	}
	v := (seconds*scale*2 + per) / (2 * per)
	if v == 0 && seconds > 0 {
		return sign + "<0.0001"
	}
	return fmt.Sprintf("%s%d.%0*d", sign, v/scale, decimals, v%scale)
}

// lineUnitPrice renders a line's unit price with what it is per.
func lineUnitPrice(l billing.Line) string {
	switch l.Unit {
	case billing.UnitGiBSecond:
		return formatPrice(l.UnitPrice) + "/GiB-month"
	case billing.UnitUnitSecond:
		return formatPrice(l.UnitPrice) + "/unit-h"
	case billing.UnitEach:
		return formatPrice(l.UnitPrice) + " each"
	}
	return formatPrice(l.UnitPrice) + "/h"
}

// lineGroup is invoice lines that differ only in unit price (a spot
// pool's seconds at each price in force), summed for the table.
type lineGroup struct {
	billing.Line
	n int
}

// average is the group's average unit price, rounded to a micro.
func (g lineGroup) average() money.Micros {
	per := int64(money.SecondsPerHour)
	if g.Unit == billing.UnitGiBSecond {
		per = money.SecondsPerMonth
	}
	if g.Quantity == 0 {
		return g.UnitPrice
	}
	avg, err := money.MulDiv(g.Amount, per, g.Quantity)
	if err != nil {
		return g.UnitPrice
	}
	return avg
}

// groupLines sums consecutive lines that differ only in unit price, unless
// detail asks for every line. Amounts add exactly, so the total is the
// same either way.
func groupLines(lines []billing.Line, detail bool) []lineGroup {
	var out []lineGroup
	for _, l := range lines {
		if n := len(out); !detail && n > 0 {
			p := &out[n-1]
			if p.Category == l.Category && p.Model == l.Model && p.Offering == l.Offering && p.Zone == l.Zone &&
				p.CommitmentID == l.CommitmentID && p.Unit == l.Unit && p.Description == l.Description {
				p.Quantity += l.Quantity
				p.Amount += l.Amount
				p.n++
				continue
			}
		}
		out = append(out, lineGroup{Line: l, n: 1})
	}
	return out
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
		var shown money.Micros
		for _, g := range groupLines(inv.Lines, detail) {
			price := lineUnitPrice(g.Line)
			if g.n > 1 {
				price = fmt.Sprintf("%d prices, avg %s", g.n, lineUnitPrice(billing.Line{Unit: g.Unit, UnitPrice: g.average()}))
			}
			rows = append(rows, []string{g.Description, lineQuantity(g.Line), price, formatAmount(g.Amount)})
			shown += g.Amount.Round(10_000)
		}
		rows = append(rows, []string{"TOTAL", "", "", formatAmount(inv.Total)})
		if err := writeTable(w, rows); err != nil {
			return err
		}
		if shown != inv.Total.Round(10_000) {
			// Lines are metered to the micro-dollar and shown to the cent.
			fmt.Fprintln(w, "Line amounts are rounded to cents; the total is their exact sum (-o json shows every digit).")
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

// --- budget ---

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
	var rows [][]string
	add := func(k, v string) { rows = append(rows, []string{k + ":", v}) }
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
