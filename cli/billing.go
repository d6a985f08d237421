package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
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

// formatAmount prints an amount in dollars and cents: money.FormatAmount,
// the one format of amounts in the CLI's tables and messages.
func formatAmount(m money.Micros) string { return money.FormatAmount(m) }

// formatPrice prints a price to a hundredth of a cent, without its unit:
// money.FormatPrice, the one format of prices in the CLI.
func formatPrice(m money.Micros) string { return money.FormatPrice(m) }

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
