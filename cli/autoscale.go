package cli

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/autoscale"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
	"github.com/gpucloud/gpucloud/sim"
)

var autoscaleExample = strings.Join([]string{
	"  # Every policy on a demand series, as a table and a chart",
	"  gpucloud sim autoscale --demand demand.csv --chart capacity.svg",
	"",
	"  # A demand series from the Alibaba trace, at 1-minute steps, then the replay",
	"  gpucloud sim demand --pods " + traceDir + "/openb_pod_list_default.csv --out alibaba.csv",
	"  gpucloud sim autoscale --demand alibaba.csv --policy gpucloud,target -o json",
	"",
	"  # Hourly steps, 4-GPU instances, a 10-minute boot and a dollar figure",
	"  gpucloud sim autoscale --demand hourly.csv --unit-gpus 4 --boot 10m \\",
	"    --on-demand-price 2.50 --spot-price 1.00 --on-demand-percent 20",
}, "\n")

type autoscaleOptions struct {
	demand, timeCol, valueCol string
	policy                    string
	target                    float64
	unitGPUs                  int
	boot                      time.Duration
	history                   string
	minInst, maxInst          int
	onDemandPrice, spotPrice  string
	onDemandBase, onDemandPct int
	output, chart             string
	policies, trace           string
	notice                    time.Duration
}

func newAutoscaleCommand() *cobra.Command {
	o := autoscaleOptions{}
	cmd := &cobra.Command{
		Use:   "autoscale",
		Short: "Replay a GPU demand series through the autoscaling policies",
		Long: "Replay a demand series (GPUs wanted over time) through the autoscaling\n" +
			"policies and report what each one paid for and how much demand it left\n" +
			"unmet, against an oracle that knows the future and holds exactly the demand\n" +
			"rounded up to whole instances.\n\n" +
			"Each policy is a live group's policy list, run by the group controller's\n" +
			"planner over simulated time: at the start of every step the demand of the step\n" +
			"before is published as the custom metric demand_gpus and the planner decides.\n" +
			"A launch is usable --boot later; a member scaled in gets --notice, during which\n" +
			"it is paid for and serves. --policies runs a group's own policy list.\n" +
			"The first --history of the series only feeds the policies and is left out of\n" +
			"the figures. Policies: " + strings.Join(autoscale.Policies(), ", ") + ".\n\n" +
			"The demand file is a CSV with a header; the time column is RFC 3339 or\n" +
			"2006-01-02T15:04 (UTC), rows sorted, one fixed interval.",
		Example: autoscaleExample,
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.demand, "demand", "", "demand CSV (required)")
	f.StringVar(&o.timeCol, "time-column", "time", "name of the time column")
	f.StringVar(&o.valueCol, "value-column", "gpus", "name of the demand column (GPUs wanted)")
	f.StringVar(&o.policy, "policy", "all", "policy: "+strings.Join(autoscale.Policies(), ", ")+`; a comma-separated list; or "all"`)
	f.Float64Var(&o.target, "target-utilization", 0.7, "target tracking's target utilization (target and step)")
	f.IntVar(&o.unitGPUs, "unit-gpus", 8, "GPUs per instance")
	f.DurationVar(&o.boot, "boot", 5*time.Minute, "from a scale-out decision to usable capacity")
	f.StringVar(&o.history, "history", "", `prefix that only feeds the policies, e.g. "7d" or "36h" (default: 7 days or a tenth of the series, whichever is shorter)`)
	f.IntVar(&o.minInst, "min", 0, "the group's minimum instances")
	f.IntVar(&o.maxInst, "max", 0, "the group's maximum instances (0: no maximum)")
	f.StringVar(&o.onDemandPrice, "on-demand-price", "", "on-demand price per GPU-hour, for a dollar figure")
	f.StringVar(&o.spotPrice, "spot-price", "", "spot price per GPU-hour (needs --on-demand-price)")
	f.IntVar(&o.onDemandBase, "on-demand-base", 0, "with --spot-price: instances always on demand")
	f.IntVar(&o.onDemandPct, "on-demand-percent", 0, "with --spot-price: percentage on demand above the base (without --spot-price everything is on demand)")
	f.StringVarP(&o.output, "output", "o", "table", `output format: "table" or "json"`)
	f.StringVar(&o.chart, "chart", "", "also write an SVG chart of demand and each policy's capacity")
	f.StringVar(&o.policies, "policies", "", `a JSON file of a group's policies (a list of {"type": ...} on the metric custom:demand_gpus) to replay instead of a named policy`)
	f.StringVar(&o.trace, "trace", "", "write each step of one policy (gpucloud unless --policy names one) to this CSV: time, demand, ready, booting, leaving, desired, launched, released, policy, reason")
	f.DurationVar(&o.notice, "notice", 120*time.Second, "the scale-in notice: a member scaled in is paid for and serves this long")
	return cmd
}

// parseHistory reads a duration that may use days ("7d", "1.5d").
func parseHistory(s string) (time.Duration, error) {
	if v, ok := strings.CutSuffix(s, "d"); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("%q is not a number of days", s)
		}
		return time.Duration(f * float64(24*time.Hour)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration like 7d or 36h", s)
	}
	return d, nil
}

func parseAutoscalePolicies(s string) ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		return autoscale.Policies(), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" || seen[name] {
			continue
		}
		if _, err := autoscale.PolicySpec(name, autoscale.Config{}); err != nil {
			return nil, fmt.Errorf(`--policy: %v, or "all"`, err)
		}
		seen[name] = true
		out = append(out, name)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf(`--policy: no policy given (known: %s, or "all")`, strings.Join(autoscale.Policies(), ", "))
	}
	return out, nil
}

type autoscaleReport struct {
	Demand       string             `json:"demand"`
	Start        time.Time          `json:"start"`
	Interval     string             `json:"interval"`
	Steps        int                `json:"steps"`
	HistorySteps int                `json:"history_steps"`
	UnitGPUs     int                `json:"unit_gpus"`
	Boot         string             `json:"boot"`
	Oracle       autoscale.Result   `json:"oracle"`
	Policies     []autoscale.Result `json:"policies"`
}

func (o autoscaleOptions) run(cmd *cobra.Command) error {
	if o.demand == "" {
		return cmdutil.Usagef(cmd, "--demand is required: a CSV of time,gpus (gpucloud sim demand makes one from the Alibaba trace)")
	}
	if o.trace != "" && !cmd.Flags().Changed("policy") {
		// A trace is of one policy: without --policy, the gpucloud one.
		o.policy = "gpucloud"
	}
	policies, err := parseAutoscalePolicies(o.policy)
	if err != nil {
		return &cmdutil.UsageError{Err: err, Path: cmd.CommandPath()}
	}
	var given []cloud.ScalingPolicy
	if o.policies != "" {
		b, err := os.ReadFile(o.policies)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &given); err != nil || len(given) == 0 {
			return cmdutil.Usagef(cmd, "--policies %s: want a JSON list of policies (%v)", o.policies, err)
		}
		policies = []string{strings.TrimSuffix(filepath.Base(o.policies), filepath.Ext(o.policies))}
	}
	if o.trace != "" && len(policies) != 1 {
		return cmdutil.Usagef(cmd, "--trace writes one policy's steps: give one --policy")
	}
	if err := o.check(cmd); err != nil {
		return err
	}
	prices, err := o.prices(cmd)
	if err != nil {
		return err
	}
	s, err := autoscale.ReadCSV(o.demand, autoscale.CSVOptions{TimeColumn: o.timeCol, ValueColumn: o.valueCol})
	if err != nil {
		return err
	}
	hist := -1
	if o.history != "" {
		d, err := parseHistory(o.history)
		if err != nil {
			return cmdutil.Usagef(cmd, "--history: %v", err)
		}
		hist = int(d / s.Interval)
		if hist >= len(s.GPUs) {
			return cmdutil.Usagef(cmd, "--history %s is the whole series (%d steps of %v)", o.history, len(s.GPUs), s.Interval)
		}
	}
	maxInst := o.maxInst
	if maxInst == 0 {
		maxInst = 1 << 30
	}
	opt := autoscale.ReplayOptions{
		Config: autoscale.Config{
			UnitGPUs: o.unitGPUs, Boot: o.boot, TargetUtilization: o.target,
			Limits: autoscale.Limits{Min: o.minInst, Max: maxInst}, Notice: o.notice, Policies: given,
		},
		HistorySteps: hist,
		Prices:       prices,
		KeepTrace:    o.chart != "",
	}
	oracle, err := autoscale.Oracle(s, opt)
	if err != nil {
		return fmt.Errorf("%s: %w", o.demand, err)
	}
	var trace *csv.Writer
	if o.trace != "" {
		f, err := os.Create(o.trace)
		if err != nil {
			return err
		}
		defer f.Close()
		trace = csv.NewWriter(f)
		_ = trace.Write([]string{"time", "demand_gpus", "ready", "booting", "leaving", "desired", "launched", "released", "policy", "limit", "reason"})
		opt.Steps = func(_ int, st autoscale.Step) {
			_ = trace.Write([]string{st.Time.UTC().Format(time.RFC3339), strconv.FormatFloat(st.Demand, 'f', -1, 64),
				strconv.Itoa(st.Ready), strconv.Itoa(st.Booting), strconv.Itoa(st.Leaving), strconv.Itoa(st.Desired),
				strconv.Itoa(st.Launched), strconv.Itoa(st.Released), st.Policy, st.Limit, st.Reason})
		}
	}
	results := make([]autoscale.Result, len(policies))
	err = parallel(len(policies), runtime.NumCPU(), func(i int) error {
		r, err := autoscale.Replay(policies[i], s, opt)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", o.demand, policies[i], err)
		}
		results[i] = r
		return nil
	})
	if err != nil {
		return err
	}
	if trace != nil {
		trace.Flush()
		if err := trace.Error(); err != nil {
			return fmt.Errorf("--trace %s: %w", o.trace, err)
		}
	}
	if hist < 0 {
		hist = autoscale.DefaultHistory(len(s.GPUs), s.Interval)
	}
	rep := autoscaleReport{
		Demand: o.demand, Start: s.Start, Interval: s.Interval.String(), Steps: len(s.GPUs),
		HistorySteps: hist, UnitGPUs: o.unitGPUs, Boot: o.boot.String(),
		Oracle: oracle, Policies: results,
	}
	if o.chart != "" {
		if err := writeChart(o.chart, func(w io.Writer) error { return writeAutoscaleChart(w, s, hist, o.unitGPUs, results) }); err != nil {
			return err
		}
	}
	return o.write(cmd.OutOrStdout(), rep, prices != nil)
}

// check checks the options' values.
func (o autoscaleOptions) check(cmd *cobra.Command) error {
	switch o.output {
	case "table", "json":
	default:
		return cmdutil.Usagef(cmd, `--output %q: want "table" or "json"`, o.output)
	}
	switch {
	case o.unitGPUs < 1:
		return cmdutil.Usagef(cmd, "--unit-gpus %d: must be at least 1", o.unitGPUs)
	case o.boot < 0 || o.boot%time.Second != 0:
		return cmdutil.Usagef(cmd, "--boot %v: want whole seconds, not negative", o.boot)
	case o.notice <= 0 || o.notice%time.Second != 0:
		return cmdutil.Usagef(cmd, "--notice %v: want whole seconds, at least one", o.notice)
	case !(o.target > 0 && o.target <= 1):
		return cmdutil.Usagef(cmd, "--target-utilization %v: want more than 0 and at most 1", o.target)
	case o.minInst < 0 || o.maxInst < 0 || (o.maxInst > 0 && o.maxInst < o.minInst):
		return cmdutil.Usagef(cmd, "--min %d --max %d: want 0 <= min <= max", o.minInst, o.maxInst)
	case o.onDemandPct < 0 || o.onDemandPct > 100:
		return cmdutil.Usagef(cmd, "--on-demand-percent %d: want 0..100", o.onDemandPct)
	case o.onDemandBase < 0:
		return cmdutil.Usagef(cmd, "--on-demand-base %d: must not be negative", o.onDemandBase)
	case o.spotPrice != "" && o.onDemandPrice == "":
		return cmdutil.Usagef(cmd, "--spot-price needs --on-demand-price")
	}
	return nil
}

// prices are the prices of --on-demand-price and --spot-price, or nil
// without them.
func (o autoscaleOptions) prices(cmd *cobra.Command) (*autoscale.Prices, error) {
	var prices *autoscale.Prices
	if o.onDemandPrice != "" {
		od, err := money.Parse(o.onDemandPrice)
		if err != nil || od < 0 {
			return nil, cmdutil.Usagef(cmd, "--on-demand-price %q: not a non-negative amount", o.onDemandPrice)
		}
		prices = &autoscale.Prices{OnDemand: od, OnDemandPercent: 100}
		if o.spotPrice != "" {
			sp, err := money.Parse(o.spotPrice)
			if err != nil || sp < 0 {
				return nil, cmdutil.Usagef(cmd, "--spot-price %q: not a non-negative amount", o.spotPrice)
			}
			prices.Spot, prices.OnDemandBase, prices.OnDemandPercent = sp, o.onDemandBase, o.onDemandPct
		}
	}
	return prices, nil
}

// write writes the report to w, as JSON or as a table (with its costs
// when priced, and where the chart is).
func (o autoscaleOptions) write(w io.Writer, rep autoscaleReport, priced bool) error {
	out := bufio.NewWriter(w)
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
		return out.Flush()
	}
	writeAutoscaleTable(out, rep, priced)
	if o.chart != "" {
		fmt.Fprintf(out, "\nchart: %s\n", o.chart)
	}
	return out.Flush()
}

func writeAutoscaleTable(w io.Writer, rep autoscaleReport, priced bool) {
	evalFrom := rep.Start.Add(time.Duration(rep.HistorySteps) * mustDuration(rep.Interval))
	fmt.Fprintf(w, "demand %s: %d steps of %s from %s; figures from %s (history %d steps)\n",
		rep.Demand, rep.Steps, rep.Interval, rep.Start.Format(time.RFC3339), evalFrom.Format(time.RFC3339), rep.HistorySteps)
	fmt.Fprintf(w, "%d GPUs per instance, boot %s; demand %.1f GPU-h, oracle capacity %.1f GPU-h\n\n",
		rep.UnitGPUs, rep.Boot, rep.Oracle.DemandGPUHours, rep.Oracle.CapacityGPUHours)
	tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', tabwriter.AlignRight)
	head := "policy\tshortfall %\tcost vs oracle\tcapacity GPU-h\tshortfall GPU-h\tidle GPU-h\tactions\tpeak\t"
	if priced {
		head += "cost\t"
	}
	fmt.Fprintln(tw, head)
	row := func(r autoscale.Result) {
		line := fmt.Sprintf("%s\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%d\t%d\t", r.Policy, r.ShortfallPercent, r.CostVsOracle,
			r.CapacityGPUHours, r.ShortfallGPUHours, r.IdleGPUHours, r.ScalingActions, r.PeakInstances)
		if priced && r.Cost != nil {
			line += formatAmount(*r.Cost) + "\t"
		}
		fmt.Fprintln(tw, line)
	}
	for _, r := range rep.Policies {
		row(r)
	}
	row(rep.Oracle)
	tw.Flush()
}

func mustDuration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

// writeAutoscaleChart draws demand and each policy's capacity in GPUs
// over days since the start, with the end of the history marked.
func writeAutoscaleChart(w io.Writer, s autoscale.Series, hist, unit int, results []autoscale.Result) error {
	days := make([]float64, len(s.GPUs))
	step := s.Interval.Hours() / 24
	for i := range days {
		days[i] = float64(i) * step
	}
	series := []sim.Series{{Name: "demand", X: days, Y: s.GPUs}}
	for _, r := range results {
		y := make([]float64, len(r.Capacity))
		for i, n := range r.Capacity {
			y[i] = float64(int(n) * unit)
		}
		series = append(series, sim.Series{Name: r.Policy, X: days, Y: y})
	}
	return sim.WriteSVG(w, sim.Chart{
		Title:  "GPU demand and each policy's capacity",
		XLabel: "days since " + s.Start.Format("2006-01-02 15:04"), YLabel: "GPUs",
		Series: series,
		VLines: []sim.VLine{{X: float64(hist) * step, Label: "history ends"}},
	})
}

func newDemandCommand() *cobra.Command {
	var pods, out, origin string
	var interval time.Duration
	var synthetic bool
	var days int
	var seed uint64
	cmd := &cobra.Command{
		Use:   "demand",
		Short: "Derive a GPU demand series from a pod trace",
		Long: "Derive a demand series (time,gpus) from an Alibaba openb pod list with\n" +
			"creation and deletion times: each step holds the GPUs that pods wanted in\n" +
			"it, averaged over the step (a pod with 0.5 GPU counts half). A pod without a\n" +
			"deletion time runs to the end of the trace. The trace's times are seconds\n" +
			"from an unknown start; --origin places them (by default a Sunday, so that\n" +
			"the trace's week starts on the calendar's).\n\n" +
			"--synthetic makes a seeded series instead, with daily and weekly cycles,\n" +
			"slow noise and bursts (400 GPUs on average).",
		Example: "  gpucloud sim demand --pods " + traceDir + "/openb_pod_list_default.csv --out alibaba-1m.csv\n" +
			"  gpucloud sim demand --pods " + traceDir + "/openb_pod_list_default.csv --interval 1h --out alibaba-1h.csv\n" +
			"  gpucloud sim demand --synthetic --days 365 --seed 1 --out synthetic-1m.csv",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if (pods == "") == !synthetic {
				return cmdutil.Usagef(cmd, "give either --pods or --synthetic")
			}
			if interval < time.Second || interval%time.Second != 0 {
				return cmdutil.Usagef(cmd, "--interval %v: want whole seconds, at least 1s", interval)
			}
			if days < 1 {
				return cmdutil.Usagef(cmd, "--days %d: must be at least 1", days)
			}
			org, err := time.Parse(time.RFC3339, origin)
			if err != nil {
				return cmdutil.Usagef(cmd, "--origin %q: want RFC 3339", origin)
			}
			var s autoscale.Series
			if synthetic {
				s = autoscale.Synthetic(autoscale.SyntheticConfig{
					Start: org, Interval: interval, Seed: seed,
					Steps: int(time.Duration(days) * 24 * time.Hour / interval),
				})
			} else if s, err = podDemand(pods, org, interval); err != nil {
				return err
			}
			var w io.Writer = cmd.OutOrStdout()
			if out != "" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriter(w)
			if err := autoscale.WriteCSV(bw, s); err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			if f, ok := w.(*os.File); ok && out != "" {
				return f.Close()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&pods, "pods", "", "pod list CSV with creation_time and deletion_time (openb_pod_list_*.csv)")
	f.DurationVar(&interval, "interval", time.Minute, "step of the series")
	f.StringVar(&origin, "origin", "2023-01-01T00:00:00Z", "the time of the trace's second 0")
	f.StringVar(&out, "out", "", "write the CSV here instead of to stdout")
	f.BoolVar(&synthetic, "synthetic", false, "make a seeded synthetic series instead of reading --pods")
	f.IntVar(&days, "days", 56, "with --synthetic: length of the series in days")
	f.Uint64Var(&seed, "seed", 1, "with --synthetic: random seed")
	return cmd
}

// podDemand derives the GPUs wanted over time from an openb pod list.
func podDemand(pods string, origin time.Time, interval time.Duration) (autoscale.Series, error) {
	list, err := sim.ReadPods(pods)
	if err != nil {
		return autoscale.Series{}, err
	}
	if len(list) > 0 && !list[0].HasTimes {
		return autoscale.Series{}, fmt.Errorf("%s has no creation_time/deletion_time columns", pods)
	}
	var end int64
	for _, p := range list {
		end = max(end, p.Creation, p.Deletion)
	}
	iv := make([]autoscale.Interval, 0, len(list))
	for _, p := range list {
		del := p.Deletion
		if del < 0 {
			del = end
		}
		iv = append(iv, autoscale.Interval{Start: p.Creation, End: del, GPUs: float64(p.NumGPU) * float64(p.GPUMilli) / 1000})
	}
	return autoscale.DemandFromIntervals(iv, origin, interval), nil
}
