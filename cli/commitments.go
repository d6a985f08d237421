package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

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
	return newDescribeCommand(s, "Show a commitment", commitmentKind,
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
