package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/estimate"
	"github.com/gpucloud/gpucloud/money"
)

func newCostCommand() *cobra.Command {
	return groupCommand("cost", "Estimate what workloads cost on each pricing plan",
		"Estimate what a workload costs on demand, on reservations, on a retainer and\n"+
			"on spot. The estimates run offline, against list prices.",
		newCostEstimateCommand())
}

// costOptions are the flags of cost estimate; the decimal ones stay strings
// until they are parsed into integers (no float is ever involved).
type costOptions struct {
	f                   catalogFlags
	offering            string
	pricePerHour        string
	hoursPerDay         string
	days, count         int
	interruptible       bool
	checkpoint, restart time.Duration
	reclaimRate         string
	spotPrice           string
	spotDiscount        string
	reservedDiscounts   []string
	retainerFee         string
	retainerDiscount    string
}

// costFlagOf names the flag behind each estimate.FieldError field.
var costFlagOf = map[string]string{
	"price per hour":      "--price-per-hour",
	"hours per day":       "--hours-per-day",
	"days":                "--days",
	"count":               "--count",
	"checkpoint interval": "--checkpoint-interval",
	"restart overhead":    "--restart-overhead",
	"reclaim rate":        "--reclaim-rate",
	"spot price":          "--spot-price",
	"spot discount":       "--spot-discount",
	"reserved discount":   "--reserved-discount",
	"retainer fee":        "--retainer-fee",
	"retainer discount":   "--retainer-discount",
}

func newCostEstimateCommand() *cobra.Command {
	var o costOptions
	cmd := &cobra.Command{
		Use:   "estimate",
		Short: "Compare a workload's cost on demand, reserved, on a retainer and on spot",
		Long: "Compare what a workload costs on each pricing plan. It runs offline: nothing\n" +
			"is sent to a server, and --offering is priced at the catalog's built-in list\n" +
			"price (an operator's price book may differ); --price-per-hour sets the\n" +
			"on-demand price instead.\n\n" +
			"The workload is --count instances, each running --hours-per-day for --days.\n" +
			"The rows:\n\n" +
			"  on demand     the used hours at the on-demand price\n" +
			"  reserved ...  the used hours at the reservation's discount (1y and 3y, no,\n" +
			"                partial or all upfront: 25/30/35% and 45/50/55% off; or one\n" +
			"                row per --reserved-discount). The note gives what the same\n" +
			"                reservation costs held 24 h/day, as a commitment is billed,\n" +
			"                and the utilisation at which that breaks even\n" +
			"  retainer      a fee of --retainer-fee of the on-demand price for every\n" +
			"                hour of the days, plus the used hours at --retainer-discount\n" +
			"  spot          the used hours plus the work lost to reclaims, at the spot\n" +
			"                price: expected reclaims (--reclaim-rate per instance-hour)\n" +
			"                times half a --checkpoint-interval plus --restart-overhead.\n" +
			"                Unsuitable unless the workload is --interruptible\n\n" +
			"Amounts are exact decimal arithmetic; -o json and -o yaml print them as\n" +
			"strings with every digit, rates and discounts in basis points.",
		Example: strings.Join([]string{
			"  # $12/h for 12 h/day over 30 days, against a 25% reservation",
			"  gpucloud cost estimate --price-per-hour 12 --hours-per-day 12 --days 30 --reserved-discount 25",
			"",
			"  # Four h100.8x at list price around the clock for 90 days; training that",
			"  # checkpoints every 30 minutes",
			"  gpucloud cost estimate --offering h100.8x --count 4 --days 90 --interruptible --checkpoint-interval 30m",
		}, "\n"),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.f.validate(cmd); err != nil {
				return err
			}
			w, source, err := o.workload(cmd)
			if err != nil {
				return err
			}
			c, err := estimate.Compare(*w)
			if err != nil {
				var fe *estimate.FieldError
				if errors.As(err, &fe) {
					return usagef(cmd, "%s", costFieldErrors(err))
				}
				return err
			}
			out := cmd.OutOrStdout()
			if o.f.output != "table" {
				return writeData(out, o.f.output, struct {
					Offering    string `json:"offering,omitempty"`
					PriceSource string `json:"price_source"`
					*estimate.Comparison
				}{o.offering, source, c})
			}
			return writeCostTable(cmd, c, o.offering, source)
		},
	}
	o.f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.offering, "offering", "", "price the workload at this offering's list price (one of --offering and --price-per-hour)")
	fl.StringVar(&o.pricePerHour, "price-per-hour", "", "on-demand price of one instance per hour, e.g. 12 or 2.49")
	fl.StringVar(&o.hoursPerDay, "hours-per-day", "24", "hours each instance runs a day (decimals ok), up to 24")
	fl.IntVar(&o.days, "days", 30, "days the workload runs")
	fl.IntVar(&o.count, "count", 1, "number of instances")
	fl.BoolVar(&o.interruptible, "interruptible", false, "the workload survives spot reclaims (it checkpoints and restarts)")
	fl.DurationVar(&o.checkpoint, "checkpoint-interval", 10*time.Minute, "how often the workload checkpoints; a reclaim loses half of it on average")
	fl.DurationVar(&o.restart, "restart-overhead", 2*time.Minute, "time a relaunch takes to get back to work")
	fl.StringVar(&o.reclaimRate, "reclaim-rate", "0.05", "expected spot reclaims per instance-hour (0.05: one in 20 hours)")
	fl.StringVar(&o.spotPrice, "spot-price", "", "spot price per hour (default: --spot-discount off on demand)")
	fl.StringVar(&o.spotDiscount, "spot-discount", "60", "spot discount off on demand, in percent")
	fl.StringSliceVar(&o.reservedDiscounts, "reserved-discount", nil, "a reservation discount in percent, e.g. 25 or 12.5; repeatable; replaces the built-in 1y/3y options")
	fl.StringVar(&o.retainerFee, "retainer-fee", "10", "retainer fee per hour, in percent of the on-demand price, charged 24 h/day")
	fl.StringVar(&o.retainerDiscount, "retainer-discount", "30", "discount on the hours a retainer covers, in percent")
	_ = cmd.RegisterFlagCompletionFunc("offering", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := o.f.load()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, of := range c.Offerings() {
			names = append(names, of.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// workload parses the flags into a workload and says where its price
// comes from. Bad values are usage errors.
func (o *costOptions) workload(cmd *cobra.Command) (*estimate.Workload, string, error) {
	fl := cmd.Flags()
	switch {
	case fl.Changed("offering") == fl.Changed("price-per-hour"):
		return nil, "", usagef(cmd, "give one of --offering and --price-per-hour")
	case fl.Changed("spot-price") && fl.Changed("spot-discount"):
		return nil, "", usagef(cmd, "give --spot-price or --spot-discount, not both")
	}
	w := &estimate.Workload{Days: o.days, Count: o.count, InterruptionTolerant: o.interruptible}
	var source string
	if fl.Changed("offering") {
		cat, err := o.f.load()
		if err != nil {
			return nil, "", err
		}
		if w.PricePerHour, err = billing.ListPrice(cat, o.offering); err != nil {
			return nil, "", usagef(cmd, "--offering: %v", err)
		}
		if of, err := cat.Offering(o.offering); err == nil {
			o.offering = of.Name // the canonical spelling, for the output
		}
		source = "list price of " + o.offering
	} else {
		p, err := costAmount(cmd, "--price-per-hour", o.pricePerHour)
		if err != nil {
			return nil, "", err
		}
		w.PricePerHour, source = p, "--price-per-hour"
	}

	hours, err := costDecimal(cmd, "--hours-per-day", o.hoursPerDay, 1_000_000)
	if err != nil {
		return nil, "", err
	}
	// hours is in micro-hours; a second is 1/3600 h.
	switch {
	case hours > 24_000_000:
		return nil, "", usagef(cmd, "--hours-per-day %s: must be at most 24", o.hoursPerDay)
	case hours*money.SecondsPerHour%1_000_000 != 0:
		return nil, "", usagef(cmd, "--hours-per-day %s: not a whole number of seconds", o.hoursPerDay)
	}
	w.SecondsPerDay = hours * money.SecondsPerHour / 1_000_000

	for _, d := range []struct {
		flag string
		v    time.Duration
		to   *int64
	}{{"--checkpoint-interval", o.checkpoint, &w.CheckpointIntervalSeconds}, {"--restart-overhead", o.restart, &w.RestartOverheadSeconds}} {
		if d.v%time.Second != 0 {
			return nil, "", usagef(cmd, "%s %s: not a whole number of seconds", d.flag, d.v)
		}
		*d.to = int64(d.v / time.Second)
	}
	if w.ReclaimRateBP, err = costDecimal(cmd, "--reclaim-rate", o.reclaimRate, 10_000); err != nil {
		return nil, "", err
	}

	if fl.Changed("spot-price") {
		if w.SpotPrice, err = costAmount(cmd, "--spot-price", o.spotPrice); err != nil {
			return nil, "", err
		}
		if w.SpotPrice == 0 {
			return nil, "", usagef(cmd, "--spot-price must be more than 0")
		}
	} else {
		if w.SpotDiscountBP, err = costPercent(cmd, "--spot-discount", o.spotDiscount); err != nil {
			return nil, "", err
		}
		if w.SpotDiscountBP == 0 {
			// The package reads zero as the default: no discount is
			// spot at the on-demand price.
			w.SpotPrice = w.PricePerHour
		}
	}
	for _, s := range o.reservedDiscounts {
		bp, err := costPercent(cmd, "--reserved-discount", s)
		if err != nil {
			return nil, "", err
		}
		w.ReservedDiscountsBP = append(w.ReservedDiscountsBP, bp)
	}
	for _, p := range []struct {
		flag, s string
		to      *int64
	}{{"--retainer-fee", o.retainerFee, &w.RetainerFeeBP}, {"--retainer-discount", o.retainerDiscount, &w.RetainerDiscountBP}} {
		if *p.to, err = costPercent(cmd, p.flag, p.s); err != nil {
			return nil, "", err
		}
		if *p.to == 0 {
			return nil, "", usagef(cmd, "%s must be more than 0", p.flag)
		}
	}
	return w, source, nil
}

// costDecimal parses a non-negative decimal into units of 1/scale (scale a
// power of ten up to 10⁶): costDecimal("0.05", 10_000) is 500. Precision
// beyond 1/scale is an error, not rounded away.
func costDecimal(cmd *cobra.Command, flag, s string, scale int64) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.ContainsAny(t, "$-+") {
		return 0, usagef(cmd, "%s %q: want a non-negative number", flag, s)
	}
	m, err := money.Parse(t)
	if err != nil {
		return 0, usagef(cmd, "%s %q: want a non-negative number with at most %d decimals", flag, s, len(strconv.FormatInt(scale, 10))-1)
	}
	per := int64(money.Unit) / scale
	if int64(m)%per != 0 {
		return 0, usagef(cmd, "%s %q: at most %d decimals", flag, s, len(strconv.FormatInt(scale, 10))-1)
	}
	return int64(m) / per, nil
}

// costPercent parses a percentage ("25", "12.5", "25%") into basis points.
func costPercent(cmd *cobra.Command, flag, s string) (int64, error) {
	return costDecimal(cmd, flag, strings.TrimSuffix(strings.TrimSpace(s), "%"), 100)
}

// costAmount parses a non-negative amount of money ("12", "$2.49").
func costAmount(cmd *cobra.Command, flag, s string) (money.Micros, error) {
	m, err := money.Parse(s)
	if err != nil || m < 0 {
		return 0, usagef(cmd, "%s %q: want an amount such as 12 or 2.49", flag, s)
	}
	return m, nil
}

// costFieldErrors words validation errors with the flags' names.
func costFieldErrors(err error) string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var parts []string
	for _, e := range errs {
		var fe *estimate.FieldError
		if errors.As(e, &fe) {
			if flag, ok := costFlagOf[fe.Field]; ok {
				parts = append(parts, flag+": "+fe.Msg)
				continue
			}
		}
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "; ")
}

// writeCostTable prints the comparison as a table under two header lines.
func writeCostTable(cmd *cobra.Command, c *estimate.Comparison, offering, source string) error {
	w := c.Workload
	out := cmd.OutOrStdout()
	what, price := plural(w.Count, "instance", "instances"), "Offline estimate"
	if offering != "" {
		what, price = plural(w.Count, offering, offering), "Offline estimate against the "+source
	}
	fmt.Fprintf(out, "%s at %s/h on demand, %s h/day for %s: %s instance-hours, %s utilisation.\n",
		what, w.PricePerHour.Cents(), estimate.Hours(w.SecondsPerDay), plural(w.Days, "day", "days"),
		estimate.Hours(c.InstanceSeconds), estimate.Percent(c.UtilisationBP))
	fmt.Fprintf(out, "%s; spot at %s/h.\n\n", price, c.SpotPrice.Cents())
	rows := [][]string{{"PLAN", "TOTAL", "PER HOUR", "SAVINGS", "NOTE"}}
	for _, r := range c.Rows {
		savings := "-"
		if r.Kind != estimate.KindOnDemand {
			savings = estimate.Percent(r.SavingsBP)
		}
		rows = append(rows, []string{r.Plan, costThousands(r.Total), r.PerHour.Cents(), savings, dash(r.Note)})
	}
	return writeTable(out, rows)
}

// costThousands prints an amount in cents with thousands separators:
// "4,320.00".
func costThousands(m money.Micros) string {
	s := m.Cents()
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return sign + b.String() + "." + frac
}
