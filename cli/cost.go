package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/estimate"
	"github.com/gpucloud/gpucloud/money"
)

func newCostCommand() *cobra.Command {
	return groupCommand("cost", "Estimate what workloads cost on each pricing plan",
		"Estimate what a workload costs on demand, on reservations, on a retainer and\n"+
			"on spot, against list prices offline, or against a server's prices and its\n"+
			"spot pool's recent reclaim rate.",
		newCostEstimateCommand())
}

// costOptions are the flags of cost estimate; the decimal ones stay strings
// until they are parsed into integers (no float is ever involved).
type costOptions struct {
	f                   catalogFlags
	offering            string
	zone                string
	offline             bool
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
		Long: "Compare what a workload costs on each pricing plan. By default it runs offline:\n" +
			"nothing is sent to a server, and --offering is priced at the catalog's built-in\n" +
			"list price (an operator's price book may differ); --price-per-hour sets the\n" +
			"on-demand price instead.\n\n" +
			"With --offering and --zone, and a server configured (--server and --token, the\n" +
			"environment or the config file of `gpucloud login`), it uses live numbers: the\n" +
			"on-demand price in force now, and the pool's current spot price and its reclaims\n" +
			"per spot instance-hour over the last 7 days (`gpucloud spot pools`). Explicit\n" +
			"--spot-price, --spot-discount and --reclaim-rate win over the live ones; a pool\n" +
			"that ran no spot instances in that time keeps the --reclaim-rate default. When\n" +
			"no server is configured or it cannot be reached, or with --offline, the estimate\n" +
			"runs offline. The output says which numbers it used and where they came from.\n\n" +
			"The workload is --count instances, each running --hours-per-day for --days.\n" +
			"Each row's BILLED column says what its TOTAL is, hours times a price:\n\n" +
			"  on demand     the used hours at the on-demand price\n" +
			"  reserved ...  a reservation (1y and 3y, no, partial or all upfront:\n" +
			"                25/30/35% and 45/50/55% off; or one per --reserved-discount)\n" +
			"                bills every hour of its term. When the workload does not run\n" +
			"                around the clock it has two rows: \"(24 h/day)\", held for this\n" +
			"                workload alone, with the utilisation at which that breaks\n" +
			"                even; and \"(used hours)\", what it costs if other work uses\n" +
			"                the hours this one leaves idle\n" +
			"  retainer      a fee of --retainer-fee of the on-demand price for every\n" +
			"                hour of the days, plus the used hours at --retainer-discount\n" +
			"  spot          the used hours plus the work lost to reclaims, at the spot\n" +
			"                price: expected reclaims (--reclaim-rate per instance-hour)\n" +
			"                times half a --checkpoint-interval plus --restart-overhead.\n" +
			"                Unsuitable unless the workload is --interruptible\n\n" +
			"Totals are in dollars and cents, prices to a hundredth of a cent. Amounts are\n" +
			"exact decimal arithmetic; -o json and -o yaml print them as strings with every\n" +
			"digit (a reservation's total is its used hours, held_total its 24 h/day),\n" +
			"rates and discounts in basis points.",
		Example: strings.Join([]string{
			"  # $12/h for 12 h/day over 30 days, against a 25% reservation",
			"  gpucloud cost estimate --price-per-hour 12 --hours-per-day 12 --days 30 --reserved-discount 25",
			"",
			"  # Four h100.8x at list price around the clock for 90 days; training that",
			"  # checkpoints every 30 minutes",
			"  gpucloud cost estimate --offering h100.8x --count 4 --days 90 --interruptible --checkpoint-interval 30m",
			"",
			"  # The same at the server's prices and zone-a's recent reclaim rate",
			"  gpucloud cost estimate --offering h100.8x --zone zone-a --count 4 --days 90 --interruptible",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.f.validate(cmd); err != nil {
				return err
			}
			w, src, err := o.workload(cmd)
			if err != nil {
				return err
			}
			c, err := estimate.Compare(*w)
			if err != nil {
				var fe *estimate.FieldError
				if errors.As(err, &fe) {
					return cmdutil.Usagef(cmd, "%s", costFieldErrors(err))
				}
				return err
			}
			out := cmd.OutOrStdout()
			if o.f.output != "table" {
				return writeData(out, o.f.output, struct {
					Offering    string       `json:"offering,omitempty"`
					Zone        string       `json:"zone,omitempty"`
					PriceSource string       `json:"price_source"`
					Sources     *costSources `json:"sources"`
					*estimate.Comparison
				}{o.offering, o.zone, src.price, src, c})
			}
			return writeCostTable(cmd, c, o.offering, src)
		},
	}
	o.f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&o.offering, "offering", "", "price the workload at this offering's list price (one of --offering and --price-per-hour)")
	fl.StringVar(&o.zone, "zone", "", "the zone of --offering: with a server configured, use its live prices and this pool's reclaim rate")
	fl.BoolVar(&o.offline, "offline", false, "use list prices and the flags only, even with --zone and a server configured")
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

// workload parses the flags into a workload and says where its numbers
// come from. With --offering and --zone (and not --offline) it then asks
// the server for the live numbers (see fetchCostLive), once every flag is
// known to be valid. Bad values are usage errors.
func (o *costOptions) workload(cmd *cobra.Command) (*estimate.Workload, *costSources, error) {
	fl := cmd.Flags()
	o.zone = strings.TrimSpace(o.zone)
	switch {
	case fl.Changed("offering") == fl.Changed("price-per-hour"):
		return nil, nil, cmdutil.Usagef(cmd, "give one of --offering and --price-per-hour")
	case fl.Changed("spot-price") && fl.Changed("spot-discount"):
		return nil, nil, cmdutil.Usagef(cmd, "give --spot-price or --spot-discount, not both")
	case fl.Changed("zone") && !fl.Changed("offering"):
		return nil, nil, cmdutil.Usagef(cmd, "--zone needs --offering: a spot pool is an offering in a zone")
	case fl.Changed("zone") && o.zone == "":
		return nil, nil, cmdutil.Usagef(cmd, "--zone must not be empty")
	}
	w := &estimate.Workload{Days: o.days, Count: o.count, InterruptionTolerant: o.interruptible}
	src := &costSources{}
	if err := o.price(cmd, w, src); err != nil {
		return nil, nil, err
	}
	if err := o.timing(cmd, w, src); err != nil {
		return nil, nil, err
	}
	spotDiscountBP, err := o.discounts(cmd, w, src)
	if err != nil {
		return nil, nil, err
	}
	o.live(cmd, w, src)
	if w.SpotPrice == 0 {
		w.SpotDiscountBP = spotDiscountBP
		if spotDiscountBP == 0 {
			// The package reads zero as the default: no discount is
			// spot at the on-demand price.
			w.SpotPrice = w.PricePerHour
		}
	}
	return w, src, nil
}

// price sets the workload's on-demand price: the list price of --offering,
// or --price-per-hour.
func (o *costOptions) price(cmd *cobra.Command, w *estimate.Workload, src *costSources) error {
	fl := cmd.Flags()
	if fl.Changed("offering") {
		cat, err := o.f.load()
		if err != nil {
			return err
		}
		if w.PricePerHour, err = billing.ListPrice(cat, o.offering); err != nil {
			return cmdutil.Usagef(cmd, "--offering: %v", err)
		}
		if of, err := cat.Offering(o.offering); err == nil {
			o.offering = of.Name // the canonical spelling, for the output
		}
		src.price, src.OnDemand = "list price of "+o.offering, "list price"
	} else {
		p, err := costAmount(cmd, "--price-per-hour", o.pricePerHour)
		if err != nil {
			return err
		}
		w.PricePerHour, src.price, src.OnDemand = p, "--price-per-hour", "--price-per-hour"
	}
	return nil
}

// timing sets the workload's hours a day, checkpoint interval, restart
// overhead and reclaim rate.
func (o *costOptions) timing(cmd *cobra.Command, w *estimate.Workload, src *costSources) error {
	fl := cmd.Flags()
	hours, err := costDecimal(cmd, "--hours-per-day", o.hoursPerDay, 1_000_000)
	if err != nil {
		return err
	}
	// hours is in micro-hours; a second is 1/3600 h.
	switch {
	case hours > 24_000_000:
		return cmdutil.Usagef(cmd, "--hours-per-day %s: must be at most 24", o.hoursPerDay)
	case hours*money.SecondsPerHour%1_000_000 != 0:
		return cmdutil.Usagef(cmd, "--hours-per-day %s: not a whole number of seconds", o.hoursPerDay)
	}
	w.SecondsPerDay = hours * money.SecondsPerHour / 1_000_000

	for _, d := range []struct {
		flag string
		v    time.Duration
		to   *int64
	}{{"--checkpoint-interval", o.checkpoint, &w.CheckpointIntervalSeconds}, {"--restart-overhead", o.restart, &w.RestartOverheadSeconds}} {
		if d.v%time.Second != 0 {
			return cmdutil.Usagef(cmd, "%s %s: not a whole number of seconds", d.flag, d.v)
		}
		*d.to = int64(d.v / time.Second)
	}
	if w.ReclaimRateBP, err = costDecimal(cmd, "--reclaim-rate", o.reclaimRate, 10_000); err != nil {
		return err
	}
	src.ReclaimRate = flagSource(fl.Changed("reclaim-rate"), "--reclaim-rate")
	return nil
}

// discounts sets the workload's spot price (or returns the spot discount,
// in basis points), its reserved discounts and its retainer's terms.
func (o *costOptions) discounts(cmd *cobra.Command, w *estimate.Workload, src *costSources) (int64, error) {
	fl := cmd.Flags()
	var err error
	var spotDiscountBP int64
	if fl.Changed("spot-price") {
		if w.SpotPrice, err = costAmount(cmd, "--spot-price", o.spotPrice); err != nil {
			return 0, err
		}
		if w.SpotPrice == 0 {
			return 0, cmdutil.Usagef(cmd, "--spot-price must be more than 0")
		}
		src.Spot = "--spot-price"
	} else {
		if spotDiscountBP, err = costPercent(cmd, "--spot-discount", o.spotDiscount); err != nil {
			return 0, err
		}
		src.Spot = flagSource(fl.Changed("spot-discount"), "--spot-discount")
	}
	for _, s := range o.reservedDiscounts {
		bp, err := costPercent(cmd, "--reserved-discount", s)
		if err != nil {
			return 0, err
		}
		w.ReservedDiscountsBP = append(w.ReservedDiscountsBP, bp)
	}
	for _, p := range []struct {
		flag, s string
		to      *int64
	}{{"--retainer-fee", o.retainerFee, &w.RetainerFeeBP}, {"--retainer-discount", o.retainerDiscount, &w.RetainerDiscountBP}} {
		if *p.to, err = costPercent(cmd, p.flag, p.s); err != nil {
			return 0, err
		}
		if *p.to == 0 {
			return 0, cmdutil.Usagef(cmd, "%s must be more than 0", p.flag)
		}
	}
	return spotDiscountBP, nil
}

// live replaces the list price and the defaults with a server's numbers
// for --offering in --zone, never a flag given explicitly; when it cannot
// read them, src says why.
func (o *costOptions) live(cmd *cobra.Command, w *estimate.Workload, src *costSources) {
	fl := cmd.Flags()
	var err error
	var live *costLive
	switch {
	case !fl.Changed("offering"):
	case o.offline:
		src.OfflineReason = "--offline"
	case o.zone != "":
		if live, err = fetchCostLive(cmd, o.offering, o.zone); err != nil {
			src.OfflineReason, live = err.Error(), nil
		}
	}
	if live != nil {
		w.PricePerHour = live.onDemand
		src.Live, src.Server, src.Pool, src.WindowSeconds = true, live.server, live.pool.String(), live.windowSeconds
		src.price, src.OnDemand = "live from "+live.server, "live"
		if !fl.Changed("reclaim-rate") {
			switch {
			case live.spot == nil || live.spot.SpotSeconds <= 0:
				src.ReclaimRateNote = "no spot usage in the pool over " + costWindow(live.windowSeconds)
			case live.spot.ReclaimRateBP > estimate.MaxReclaimRateBP:
				w.ReclaimRateBP, src.ReclaimRate = estimate.MaxReclaimRateBP, "live"
				src.ReclaimRateNote = "capped at 1 from " + reclaimsPerHour(live.spot.ReclaimRateBP)
			default:
				w.ReclaimRateBP, src.ReclaimRate = live.spot.ReclaimRateBP, "live"
			}
		}
		if !fl.Changed("spot-price") && !fl.Changed("spot-discount") {
			if live.spot != nil && live.spot.Price > 0 {
				w.SpotPrice, src.Spot = live.spot.Price, "live"
			} else {
				src.SpotNote = "the pool has no spot price yet"
			}
		}
	}
}

// costSources says where the numbers of an estimate came from: "live" (the
// server), "list price", or a flag ("--reclaim-rate" when given, "the
// --reclaim-rate default" when not).
type costSources struct {
	// Live is true when the estimate used a server's numbers: its URL,
	// the pool, and the window its reclaim rate covers.
	Live          bool   `json:"live"`
	Server        string `json:"server,omitempty"`
	Pool          string `json:"pool,omitempty"`
	WindowSeconds int64  `json:"window_seconds,omitempty"`
	OnDemand      string `json:"on_demand"`
	Spot          string `json:"spot"`
	ReclaimRate   string `json:"reclaim_rate"`
	// SpotNote and ReclaimRateNote say why a live estimate did not use
	// the server's number.
	SpotNote        string `json:"spot_note,omitempty"`
	ReclaimRateNote string `json:"reclaim_rate_note,omitempty"`
	// OfflineReason says why an estimate with --offering and --zone ran
	// offline: --offline, no server configured, or the server's error.
	OfflineReason string `json:"offline_reason,omitempty"`

	price string // price_source: what the on-demand price is
}

// flagSource is a flag's name when it was given, else its default's.
func flagSource(changed bool, flag string) string {
	if changed {
		return flag
	}
	return "the " + flag + " default"
}

// liveLine is the line of a live estimate that says where each number
// came from: "Live from http://…, pool h100.1x/zone-a: on-demand
// $2.4900/h, spot $0.8500/h, 0.031 reclaims per instance-hour over 7 days."
func (s *costSources) liveLine(c *estimate.Comparison) string {
	w := c.Workload
	why := func(from, note string) string {
		switch {
		case from == "live" && note == "":
			return ""
		case from == "live":
			return " (" + note + ")"
		case note != "":
			return " (" + from + ": " + note + ")"
		}
		return " (" + from + ")"
	}
	over := ""
	if s.ReclaimRate == "live" {
		over = " over " + costWindow(s.WindowSeconds)
	}
	return fmt.Sprintf("Live from %s, pool %s: on-demand %s/h, spot %s/h%s, %s reclaims per instance-hour%s%s.",
		s.Server, s.Pool, formatPrice(w.PricePerHour), formatPrice(c.SpotPrice), why(s.Spot, s.SpotNote),
		reclaimsPerHour(w.ReclaimRateBP), over, why(s.ReclaimRate, s.ReclaimRateNote))
}

// costWindow prints a window in days or hours when it is whole ones:
// "7 days", "36 hours", "90s".
func costWindow(seconds int64) string {
	switch {
	case seconds > 0 && seconds%86400 == 0:
		return plural(int(seconds/86400), "day", "days")
	case seconds > 0 && seconds%3600 == 0:
		return plural(int(seconds/3600), "hour", "hours")
	}
	return (time.Duration(seconds) * time.Second).String()
}

// Live numbers: the window the reclaim rate covers, and how long the
// estimate waits for the server before it runs offline.
const (
	costReclaimWindow = 7 * 24 * time.Hour
	costLiveTimeout   = 10 * time.Second
)

// costLive is what a live estimate read from the server: the on-demand
// price of the offering in the zone now, and its spot pool (nil when the
// pool has no spot price yet).
type costLive struct {
	server        string
	pool          cloud.Pool
	onDemand      money.Micros
	spot          *api.SpotPool
	windowSeconds int64
}

// fetchCostLive reads the live numbers of the pool offering/zone from the
// server that --server and --token (or the environment, or the config
// file) name. Its error says why the estimate runs offline instead.
func fetchCostLive(cmd *cobra.Command, offering, zone string) (*costLive, error) {
	// The cost command is not among the billing commands that
	// bindConnFlags feeds, so it reads root's connection flags itself.
	s := &session{}
	if f := cmd.Flags().Lookup("server"); f != nil {
		s.server = f.Value.String()
	}
	if f := cmd.Flags().Lookup("token"); f != nil {
		s.token = f.Value.String()
	}
	// No server at all is the ordinary offline case: say so briefly,
	// without connect's advice on starting one. connect reads the
	// settings again and warns about the config file, once.
	if server, _, _, _, err := s.settings(io.Discard); err == nil && server == "" {
		return nil, errors.New("no gpucloud server configured")
	}
	c, err := s.connect(cmd)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(contextOf(cmd), costLiveTimeout)
	defer cancel()
	live := &costLive{server: c.server, pool: cloud.Pool{Offering: offering, Zone: zone},
		windowSeconds: int64(costReclaimWindow / time.Second)}

	prices, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceCompute, Offering: offering, At: clockNow()})
	if err != nil {
		return nil, costExplain(c, err)
	}
	// A zone without a price of its own is priced by the zoneless one.
	var zoned, zoneless *cloud.Price
	for _, p := range prices {
		switch p.Zone {
		case zone:
			zoned = p
		case "":
			zoneless = p
		}
	}
	switch {
	case zoned != nil:
		live.onDemand = zoned.Amount
	case zoneless != nil:
		live.onDemand = zoneless.Amount
	default:
		return nil, fmt.Errorf("%s has no on-demand price for %s in %s", c.server, offering, zone)
	}

	pools, err := c.SpotPoolsOver(ctx, costReclaimWindow)
	if err != nil {
		return nil, costExplain(c, err)
	}
	for i := range pools {
		if pools[i].Pool == live.pool {
			live.spot = &pools[i]
			if pools[i].WindowSeconds > 0 {
				live.windowSeconds = pools[i].WindowSeconds
			}
		}
	}
	return live, nil
}

// costExplain is conn.explain without its hint at `gpucloud up`, which
// an estimate that falls back to list prices does not need; a deadline is
// the server not answering in time.
func costExplain(c *conn, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("the gpucloud server at %s did not answer within %s", c.server, costLiveTimeout)
	}
	return c.explain(err)
}

// costDecimal parses a non-negative decimal into units of 1/scale (scale a
// power of ten up to 10⁶): costDecimal("0.05", 10_000) is 500. Precision
// beyond 1/scale is an error, not rounded away.
func costDecimal(cmd *cobra.Command, flag, s string, scale int64) (int64, error) {
	t := strings.TrimSpace(s)
	if strings.ContainsAny(t, "$-+") {
		return 0, cmdutil.Usagef(cmd, "%s %q: want a non-negative number", flag, s)
	}
	m, err := money.Parse(t)
	if err != nil {
		return 0, cmdutil.Usagef(cmd, "%s %q: want a non-negative number with at most %d decimals", flag, s, len(strconv.FormatInt(scale, 10))-1)
	}
	per := int64(money.Unit) / scale
	if int64(m)%per != 0 {
		return 0, cmdutil.Usagef(cmd, "%s %q: at most %d decimals", flag, s, len(strconv.FormatInt(scale, 10))-1)
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
		return 0, cmdutil.Usagef(cmd, "%s %q: want an amount such as 12 or 2.49", flag, s)
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

// writeCostTable prints the comparison as a table under header lines: the
// workload, then where the numbers came from (and, for an estimate that
// could not go live, why). Each row's BILLED column says what its TOTAL
// is, hours times a price, so that no figure leaves its assumption
// unsaid. A reservation bills every hour of its term; when the workload
// does not run around the clock a reservation has two rows: held 24 h/day
// for this workload alone (what the commitment bills) and its used hours
// only (what it costs if other work fills the rest).
func writeCostTable(cmd *cobra.Command, c *estimate.Comparison, offering string, src *costSources) error {
	w := c.Workload
	out := cmd.OutOrStdout()
	what, price := plural(w.Count, "instance", "instances"), "Offline estimate"
	if offering != "" {
		what, price = plural(w.Count, offering, offering), "Offline estimate against the "+src.price
	}
	held := 86400 * int64(w.Days) * int64(w.Count)
	fmt.Fprintf(out, "%s at %s/h on demand, %s h/day for %s: %s of %s instance-hours used (%s utilisation).\n",
		what, formatPrice(w.PricePerHour), estimate.Hours(w.SecondsPerDay), plural(w.Days, "day", "days"),
		estimate.Hours(c.InstanceSeconds), estimate.Hours(held), estimate.Percent(c.UtilisationBP))
	switch {
	case src.Live:
		fmt.Fprintf(out, "%s\n\n", src.liveLine(c))
	case src.OfflineReason != "":
		fmt.Fprintf(out, "%s; spot at %s/h.\nOffline: list prices (%s).\n\n", price, formatPrice(c.SpotPrice), src.OfflineReason)
	default:
		fmt.Fprintf(out, "%s; spot at %s/h.\n\n", price, formatPrice(c.SpotPrice))
	}
	return writeTable(out, costRows(c))
}

// costRows are the rows of the cost table, header first.
func costRows(c *estimate.Comparison) [][]string {
	w := c.Workload
	used := c.InstanceSeconds
	held := 86400 * int64(w.Days) * int64(w.Count)
	billed := func(seconds int64, price money.Micros) string {
		return estimate.Hours(seconds) + " h × " + formatPrice(price) + "/h"
	}
	// An average, not a price anyone set: four decimals.
	perUsedHour := func(total money.Micros) string {
		v, err := money.MulDiv(total, money.SecondsPerHour, used)
		if err != nil {
			return "-"
		}
		return formatPrice(v.Round(100))
	}
	savings := func(bp int64) string {
		if bp == 0 {
			return "0%"
		}
		return estimate.Percent(bp)
	}
	rows := [][]string{{"PLAN", "TOTAL", "BILLED", "PER USED HOUR", "SAVINGS", "NOTE"}}
	add := func(plan string, total money.Micros, bill, save, note string) {
		rows = append(rows, []string{plan, formatAmount(total), bill, perUsedHour(total), save, cmpOrDash(note, "-")})
	}
	for _, r := range c.Rows {
		switch r.Kind {
		case estimate.KindOnDemand:
			add(r.Plan, r.Total, billed(used, w.PricePerHour), "-", "")
		case estimate.KindReservation:
			rate := money.BasisPoints(w.PricePerHour, 10_000-r.DiscountBP)
			term := ""
			if r.TermDays > w.Days {
				term = fmt.Sprintf("; the term commits %d days", r.TermDays)
			}
			if used == held {
				add(r.Plan, r.Total, billed(used, rate), savings(r.SavingsBP),
					fmt.Sprintf("breaks even at %s utilisation%s", estimate.Percent(r.BreakEvenBP), term))
				continue
			}
			add(r.Plan+" (24 h/day)", r.HeldTotal, billed(held, rate), savings(r.HeldSavingsBP),
				fmt.Sprintf("a reservation bills every hour; breaks even at %s utilisation%s", estimate.Percent(r.BreakEvenBP), term))
			add(r.Plan+" (used hours)", r.Total, billed(used, rate), savings(r.SavingsBP),
				fmt.Sprintf("only if other work uses the %s reserved hours this workload leaves idle", estimate.Hours(held-used)))
		case estimate.KindRetainer:
			fee := money.BasisPoints(w.PricePerHour, w.RetainerFeeBP)
			rate := money.BasisPoints(w.PricePerHour, 10_000-w.RetainerDiscountBP)
			note := fmt.Sprintf("a fee of %s of on demand every hour, usage %s off", estimate.Percent(w.RetainerFeeBP), estimate.Percent(w.RetainerDiscountBP))
			if r.BreakEvenBP > 0 {
				note += fmt.Sprintf("; breaks even at %s utilisation", estimate.Percent(r.BreakEvenBP))
			} else {
				note += "; never cheaper than on demand"
			}
			add(r.Plan, r.Total, billed(held, fee)+" + "+billed(used, rate), savings(r.SavingsBP), note)
		case estimate.KindSpot:
			note := fmt.Sprintf("%s expected reclaims add %s h of lost work and restarts",
				estimate.Milli(r.ExpectedReclaimsMilli), estimate.Hours(r.OverheadSeconds))
			if r.Unsuitable {
				note = "unsuitable: the workload does not tolerate interruptions (--interruptible); " + note
			}
			add(r.Plan, r.Total, billed(used+r.OverheadSeconds, c.SpotPrice), savings(r.SavingsBP), note)
		default:
			add(r.Plan, r.Total, "-", savings(r.SavingsBP), r.Note)
		}
	}
	return rows
}
