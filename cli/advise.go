package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/advise"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// adviseOptions are the flags of advise; decimals stay strings until they
// are parsed into integers.
type adviseOptions struct {
	params, memoryGiB string
	precision, task   string
	nodes, days, top  int
	hoursPerDay       string
	checkpoint        time.Duration
	deadline, budget  string
	offline           bool
	catalogFile       string
	out               outputFlag
	topSet            bool
	workload          advise.Workload
	market            *advise.MarketView
	// unknownOfferings are the server's offerings that the local
	// catalog does not have, so that the advice cannot consider them.
	unknownOfferings []string
}

// adviseFlagOf names the flag behind each field of advise.Workload.
var adviseFlagOf = map[string]string{
	advise.FieldParams:             "--params",
	advise.FieldMemoryMiB:          "--memory-gib",
	advise.FieldPrecision:          "--precision",
	advise.FieldTask:               "--task",
	advise.FieldNodes:              "--nodes",
	advise.FieldPerDay:             "--hours-per-day",
	advise.FieldDays:               "--days",
	advise.FieldCheckpointInterval: "--checkpoint-every",
	advise.FieldDeadline:           "--deadline",
	advise.FieldBudget:             "--budget",
	advise.FieldScratchGiB:         "--scratch-gib",
}

// adviseReclaimWindow is the window of the reclaim rates the advisor
// reads, as `cost estimate` does.
const adviseReclaimWindow = 7 * 24 * time.Hour

func newAdviseCommand() *cobra.Command {
	var o adviseOptions
	cmd := &cobra.Command{
		Use:   "advise",
		Short: "Recommend offerings and pricing for a workload (the selection matrix)",
		Long: "Rank the offerings and pricing mixes that can run a workload, with what each\n" +
			"costs, whether it fits in the fleet now, and why, along the three dimensions\n" +
			"of a selection matrix: compute density (memory, Tensor Core precision\n" +
			"support), network topology (NVLink across GPUs, InfiniBand/RoCE across nodes)\n" +
			"and storage (the checkpoint volume). docs/ADVISE.md has the rules.\n\n" +
			"The workload: the model's size (--params, or --memory-gib when you know the\n" +
			"GPU memory it needs), --precision, --task, --nodes, the schedule\n" +
			"(--hours-per-day for --days), how it survives interruptions\n" +
			"(--checkpoint-every; 0 means it cannot be interrupted, which rules spot out),\n" +
			"and optionally a --deadline and a --budget.\n\n" +
			"Connected (the default), it reads the server's offerings with their\n" +
			"availability, the prices in force now and the spot pools with their reclaim\n" +
			"rates over the last 7 days, all of which any tenant may read; --server and\n" +
			"--token, the environment or the config file of `gpucloud login` say which\n" +
			"server. With --offline it uses the catalog's list prices, spot assumed at 60%\n" +
			"off with 0.05 reclaims per hour, and availability unknown.\n\n" +
			"The pricing mixes: on demand; a reservation for the days, all upfront, held\n" +
			"24 h/day; the retainer plan; spot in the pool with the lowest expected cost\n" +
			"(reclaim losses included: half a checkpoint interval per reclaim); and for\n" +
			"two nodes or more, one node on demand with the rest on spot. Options that fit\n" +
			"now (or may) come first, each group by total cost. The table shows --top\n" +
			"options (5) with their reasons; -o json and -o yaml give every option and\n" +
			"every exclusion unless --top is given.",
		Example: strings.Join([]string{
			"  # Serve a 7B model in int8, 8 hours a day for a month, from list prices",
			"  gpucloud advise --params 7B --precision int8 --hours-per-day 8 --days 30 --offline",
			"",
			"  # Train a 70B model on 2 nodes for 14 days, checkpointing every 30 minutes,",
			"  # done within 16 days, at the server's live prices",
			"  gpucloud advise --params 70B --task train --precision bf16 --nodes 2 --days 14 \\",
			"      --checkpoint-every 30m --deadline 16d",
			"",
			"  # A job that needs 40 GiB of GPU memory, under 500 in total",
			"  gpucloud advise --memory-gib 40 --precision fp16 --days 10 --hours-per-day 6 --budget 500",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.out.check(cmd); err != nil {
				return err
			}
			if err := o.parse(cmd); err != nil {
				return err
			}
			cat, err := o.loadCatalog()
			if err != nil {
				return err
			}
			if o.offline {
				if o.market, err = advise.ListMarket(cat); err != nil {
					return err
				}
				o.market.Source = "list prices (offline)"
			} else if err := o.fetchMarket(cmd, cat); err != nil {
				return err
			}
			a, err := advise.Advise(o.workload, o.market, cat)
			if err != nil {
				var ce *cloud.Error
				if errors.As(err, &ce) {
					return cmdutil.Usagef(cmd, "%s", adviseFieldErrors(err))
				}
				return err
			}
			return o.write(cmd, a)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&o.params, "params", "", "the model's parameters, e.g. 7B, 70B, 350M, 1.5T")
	fl.StringVar(&o.memoryGiB, "memory-gib", "", "the GPU memory the whole job needs, in GiB (wins over the estimate from --params)")
	fl.StringVar(&o.precision, "precision", "", "fp32, tf32, bf16, fp16, fp8, int8 or int4 (default bf16 to train, fp16 for inference)")
	fl.StringVar(&o.task, "task", "inference", "train or inference")
	fl.IntVar(&o.nodes, "nodes", 1, "instances running the job together (more than 1 needs InfiniBand/RoCE-class offerings)")
	fl.StringVar(&o.hoursPerDay, "hours-per-day", "24", "hours the job runs a day (decimals ok), up to 24")
	fl.IntVar(&o.days, "days", 30, "days the job runs")
	fl.DurationVar(&o.checkpoint, "checkpoint-every", 0, "how often the job checkpoints, e.g. 30m; 0: it cannot be interrupted (no spot)")
	fl.StringVar(&o.deadline, "deadline", "", "finish within this long of the start, e.g. 72h or 16d")
	fl.StringVar(&o.budget, "budget", "", "the most the whole workload may cost, e.g. 5000")
	fl.Int64Var(&o.workload.ScratchGiB, "scratch-gib", 0, "local disk each node needs at /scratch (the offering's instance store), in GiB; 0: none")
	fl.BoolVar(&o.offline, "offline", false, "use the catalog's list prices; ask no server")
	fl.IntVar(&o.top, "top", 5, "options to show (0: all)")
	fl.StringVar(&o.catalogFile, "catalog", "", "a catalog file extending the built-in catalog, as the server's")
	o.out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("precision", cobra.FixedCompletions(
		[]string{"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("task", cobra.FixedCompletions([]string{"train", "inference"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parse turns the flags into the workload; a bad value is a usage error.
// Ranges are advise.Workload.Validate's, worded with the flags' names.
func (o *adviseOptions) parse(cmd *cobra.Command) error {
	fl := cmd.Flags()
	o.topSet = fl.Changed("top")
	if o.top < 0 {
		return cmdutil.Usagef(cmd, "--top must not be negative")
	}
	w := &o.workload
	task, err := advise.ParseTask(o.task)
	if err != nil {
		return cmdutil.Usagef(cmd, "--task: %v", err)
	}
	w.Task = task
	switch {
	case fl.Changed("precision"):
		if w.Precision, err = advise.ParsePrecision(o.precision); err != nil {
			return cmdutil.Usagef(cmd, "--precision: %v", err)
		}
	case task == advise.Training:
		w.Precision = advise.BF16
	default:
		w.Precision = advise.FP16
	}
	if !fl.Changed("params") && !fl.Changed("memory-gib") {
		return cmdutil.Usagef(cmd, "give the model's size: --params (e.g. 7B) or --memory-gib")
	}
	if fl.Changed("params") {
		if w.Params, err = advise.ParseParams(o.params); err != nil {
			return cmdutil.Usagef(cmd, "--params: %v", err)
		}
	}
	if fl.Changed("memory-gib") {
		gib, err := costDecimal(cmd, "--memory-gib", o.memoryGiB, 1000)
		if err != nil {
			return err
		}
		if gib == 0 {
			return cmdutil.Usagef(cmd, "--memory-gib must be more than 0")
		}
		if gib > advise.MaxMemoryMiB/1024*1000 {
			return cmdutil.Usagef(cmd, "--memory-gib %s: at most %d", o.memoryGiB, advise.MaxMemoryMiB/1024)
		}
		w.MemoryMiB = (gib*1024 + 999) / 1000 // thousandths of a GiB, rounded up to a MiB
	}
	w.Nodes, w.Days = o.nodes, o.days

	hours, err := costDecimal(cmd, "--hours-per-day", o.hoursPerDay, 1_000_000)
	if err != nil {
		return err
	}
	switch {
	case hours > 24_000_000:
		return cmdutil.Usagef(cmd, "--hours-per-day %s: must be at most 24", o.hoursPerDay)
	case hours*money.SecondsPerHour%1_000_000 != 0:
		return cmdutil.Usagef(cmd, "--hours-per-day %s: not a whole number of seconds", o.hoursPerDay)
	}
	w.PerDay = time.Duration(hours*money.SecondsPerHour/1_000_000) * time.Second
	w.CheckpointInterval = o.checkpoint

	if fl.Changed("deadline") {
		if w.Deadline, err = parseDays(o.deadline); err != nil || w.Deadline <= 0 {
			return cmdutil.Usagef(cmd, "--deadline %q: want a duration such as 72h or 16d", o.deadline)
		}
	}
	if fl.Changed("budget") {
		if w.Budget, err = costAmount(cmd, "--budget", o.budget); err != nil {
			return err
		}
		if w.Budget == 0 {
			return cmdutil.Usagef(cmd, "--budget must be more than 0")
		}
	}
	if err := w.Validate(); err != nil {
		return cmdutil.Usagef(cmd, "%s", adviseFieldErrors(err))
	}
	return nil
}

// parseDays reads a Go duration, or whole days with a "d" suffix ("16d").
func parseDays(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(d)
		if err != nil || n < 0 || n > 100_000 {
			return 0, fmt.Errorf("bad day count %q", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(s)
}

// adviseFieldErrors words workload errors with the flags' names.
func adviseFieldErrors(err error) string {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var parts []string
	for _, e := range errs {
		var ce *cloud.Error
		if errors.As(e, &ce) {
			if field, _ := ce.Details["field"].(string); adviseFlagOf[field] != "" {
				parts = append(parts, adviseFlagOf[field]+strings.TrimPrefix(ce.Message, field))
				continue
			}
		}
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "; ")
}

func (o *adviseOptions) loadCatalog() (*catalog.Catalog, error) {
	if o.catalogFile == "" {
		return catalog.Default(), nil
	}
	return catalog.LoadFile(o.catalogFile)
}

// fetchMarket reads the market from the server the connection flags, the
// environment or the config file name. Its errors suggest --offline.
func (o *adviseOptions) fetchMarket(cmd *cobra.Command, cat *catalog.Catalog) error {
	s := &session{}
	if f := cmd.Flags().Lookup("server"); f != nil {
		s.server = f.Value.String()
	}
	if f := cmd.Flags().Lookup("token"); f != nil {
		s.token = f.Value.String()
	}
	if server, _, _, _, err := s.settings(io.Discard); err == nil && server == "" {
		return errors.New("no gpucloud server configured: run `gpucloud login --server URL --token TOKEN`, " +
			"or use --offline to advise from list prices")
	}
	c, err := s.connect(cmd)
	if err != nil {
		return fmt.Errorf("%v; or use --offline to advise from list prices", err)
	}
	ctx, cancel := interruptible(cmd)
	defer cancel()
	m, err := readMarket(ctx, c.Client, c.server, clockNow())
	if err != nil {
		return fmt.Errorf("%v; use --offline to advise from list prices", c.explain(err))
	}
	o.market = m
	for name := range m.Offerings {
		if _, err := cat.Offering(name); err != nil {
			o.unknownOfferings = append(o.unknownOfferings, name)
		}
	}
	slices.Sort(o.unknownOfferings)
	return nil
}

// readMarket reads what any tenant may read (the offerings with their
// availability, the prices in force at now, the spot pools with their
// reclaim rates) and builds the advisor's market from it.
func readMarket(ctx context.Context, c *client.Client, server string, now time.Time) (*advise.MarketView, error) {
	list, err := c.OfferingList(ctx)
	if err != nil {
		return nil, err
	}
	compute, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceCompute, At: now})
	if err != nil {
		return nil, err
	}
	volume, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceVolume, At: now})
	if err != nil {
		return nil, err
	}
	pools, err := c.SpotPoolsOver(ctx, adviseReclaimWindow)
	if err != nil {
		return nil, err
	}
	return advise.LiveMarket(liveOf(server, list, append(compute, volume...), pools)), nil
}

// liveOf puts the API's answers into advise.Live.
func liveOf(server string, list *api.OfferingList, prices []*cloud.Price, pools []api.SpotPool) advise.Live {
	l := advise.Live{Source: "live from " + server, Prices: prices}
	for _, o := range list.Offerings {
		l.Offerings = append(l.Offerings, o.Name)
	}
	l.Availability = list.Availability
	for _, p := range pools {
		l.Pools = append(l.Pools, advise.LivePool{Pool: p.Pool, Price: p.Price, ReclaimRateBP: p.ReclaimRateBP, SpotSeconds: p.SpotSeconds})
	}
	return l
}

// write prints the advice in the output format.
func (o *adviseOptions) write(cmd *cobra.Command, a *advise.Advice) error {
	out := cmd.OutOrStdout()
	if !o.out.table() {
		if o.topSet && o.top > 0 && len(a.Options) > o.top {
			a.Options = a.Options[:o.top]
		}
		return writeData(out, o.out.format, a)
	}
	w, n := a.Workload, a.Need
	size := advise.FormatParams(w.Params) + " parameters"
	if w.Params == 0 {
		size = advise.GiBString(w.MemoryMiB) + " of GPU memory"
	}
	interrupt := "cannot be interrupted"
	if w.Interruptible() {
		interrupt = "checkpoints every " + advise.Duration(int64(w.CheckpointInterval/time.Second))
	}
	each := ""
	if w.Nodes > 1 {
		each = " on each node"
	}
	fmt.Fprintf(out, "Workload: %s, %s %s, %s, %s/day for %s (%s%s); %s.\n", size, w.Precision, w.Task,
		plural(w.Nodes, "node", "nodes"), advise.Hours(int64(w.PerDay/time.Second)), plural(w.Days, "day", "days"),
		advise.Hours(n.RunSeconds), each, interrupt)
	var limits []string
	if w.Deadline > 0 {
		limits = append(limits, "done within "+advise.Duration(int64(w.Deadline/time.Second)))
	}
	if w.Budget > 0 {
		limits = append(limits, "at most "+formatAmount(w.Budget))
	}
	if len(limits) > 0 {
		fmt.Fprintf(out, "Limits: %s.\n", strings.Join(limits, ", "))
	}
	perNode := ""
	if w.Nodes > 1 {
		perNode = fmt.Sprintf(", %s per node", advise.GiBString(n.PerNodeMiB))
	}
	fmt.Fprintf(out, "Needs %s of GPU memory (%s)%s.\n", advise.GiBString(n.MemoryMiB), n.MemoryRule, perNode)
	if len(a.Options) > 0 {
		for _, r := range a.Options[0].Reasons {
			if r.Dimension == advise.DimStorage {
				fmt.Fprintf(out, "Storage, in every total: a %s.\n", r.Text)
			}
		}
	}
	fmt.Fprintf(out, "Prices: %s.\n", a.Source)
	if len(o.unknownOfferings) > 0 {
		fmt.Fprintf(out, "Not considered: %s (not in the local catalog; give the server's with --catalog).\n",
			strings.Join(o.unknownOfferings, ", "))
	}
	for _, note := range a.Notes {
		fmt.Fprintf(out, "Note: %s.\n", note)
	}
	fmt.Fprintln(out)

	shown := a.Options
	if o.top > 0 && len(shown) > o.top {
		shown = shown[:o.top]
	}
	if len(shown) == 0 {
		fmt.Fprintln(out, "No offering can run this workload.")
	} else {
		rows := [][]string{{"RANK", "OFFERING", "MIX", "ZONE", "GPU MEMORY", "FITS NOW", "TOTAL", "PER HOUR", "DONE IN"}}
		for _, op := range shown {
			rows = append(rows, []string{strconv.Itoa(op.Rank), op.Offering, op.Mix.String(), dash(op.Zone),
				gpuMemory(op), string(op.FitsNow), formatAmount(op.Total), formatPrice(op.PerInstanceHour.Round(100)),
				advise.Duration(op.CompletionSeconds)})
		}
		if err := writeTable(out, rows); err != nil {
			return err
		}
		if len(a.Options) > len(shown) {
			fmt.Fprintf(out, "(%d more; --top 0 shows all)\n", len(a.Options)-len(shown))
		}
		// Compute, network and availability are the offering's, the same
		// for each of its mixes: said once, at its first option.
		first := map[string]int{}
		for _, op := range shown {
			fmt.Fprintf(out, "\n%d. %s, %s: %s\n", op.Rank, op.Offering, op.Mix, formatAmount(op.Total))
			rank, seen := first[op.Offering]
			for _, r := range op.Reasons {
				if r.Dimension == advise.DimStorage || seen && r.Dimension != advise.DimPricing {
					continue
				}
				fmt.Fprintf(out, "   %-13s %s\n", r.Dimension, r.Text)
			}
			if seen {
				fmt.Fprintf(out, "   compute, network and availability as for %d.\n", rank)
			} else {
				first[op.Offering] = op.Rank
			}
		}
	}
	writeExclusions(out, a.Excluded)
	return nil
}

// gpuMemory prints an option's GPU memory: "80 GiB", "2 × 80 GiB",
// "10 GiB MIG", "8 GiB share".
func gpuMemory(o advise.Option) string {
	mem := advise.GiBString(o.GPUMemoryMiB)
	switch {
	case o.Mode == catalog.ModeMIG:
		return mem + " MIG"
	case o.Mode == catalog.ModeShared:
		return mem + " share"
	case o.GPUs > 1:
		return fmt.Sprintf("%d × %s", o.GPUs, mem)
	}
	return mem
}

// writeExclusions summarises what was left out: how many offerings and
// mixes for each dimension, with one example each. -o json lists them all.
func writeExclusions(out io.Writer, ex []advise.Exclusion) {
	if len(ex) == 0 {
		return
	}
	type group struct {
		offerings, mixes int
		example          advise.Exclusion
	}
	var order []advise.Dimension
	groups := map[advise.Dimension]*group{}
	for _, e := range ex {
		g := groups[e.Dimension]
		if g == nil {
			g = &group{example: e}
			groups[e.Dimension] = g
			order = append(order, e.Dimension)
		}
		if e.Mix == "" {
			g.offerings++
		} else {
			g.mixes++
		}
	}
	fmt.Fprintf(out, "\nExcluded (-o json lists each with its reason):\n")
	for _, d := range order {
		g := groups[d]
		var what []string
		if g.offerings > 0 {
			what = append(what, plural(g.offerings, "offering", "offerings"))
		}
		if g.mixes > 0 {
			what = append(what, plural(g.mixes, "pricing mix", "pricing mixes"))
		}
		name := g.example.Offering
		if g.example.Mix != "" {
			name += " " + g.example.Mix.String()
		}
		fmt.Fprintf(out, "   %-13s %s, e.g. %s: %s\n", d, strings.Join(what, " and "), name, g.example.Reason)
	}
}
