package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newGroupsDescribeCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "describe GROUP",
		Aliases: []string{"show", "get"},
		Short:   "Show a group: its template, policies, members and latest decisions",
		Long: "Show a group by ID or name: its sizes, template, policies, mix, timing, budget\n" +
			"and idle release; its members with their protection, completion lock and\n" +
			"scale-in notice; its latest scaling decisions (policy, metric values, the\n" +
			"limit that cut them, why); the launch backoff; and its recent events.",
		Example: "  gpucloud groups describe web\n  gpucloud groups describe asg-0123456789abcdef -o json",
		Args:    exactArgs(1, "one group ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, args[0])
				if err != nil {
					return err
				}
				d, err := c.GetGroup(ctx, id)
				if err != nil {
					return c.explain(err)
				}
				if !out.table() {
					return writeData(cmd.OutOrStdout(), out.format, d)
				}
				return describeGroup(cmd.OutOrStdout(), d)
			})
		},
	}
	out.register(cmd)
	return cmd
}

// percent renders a utilization (0..1) as a percentage.
func percent(v float64) string { return strconv.FormatFloat(v*100, 'f', -1, 64) + "%" }

// timingText renders a timing field: "default" for 0.
func timingText(n int) string {
	if n == 0 {
		return "default"
	}
	return (time.Duration(n) * time.Second).String()
}

// policyText says what a policy does, in one line.
func policyText(p cloud.ScalingPolicy) string {
	target := func() string {
		if strings.HasPrefix(p.Metric, cloud.CustomMetricPrefix) {
			return strconv.FormatFloat(p.Target, 'f', -1, 64) + " per member"
		}
		return percent(p.Target)
	}
	switch p.Type {
	case cloud.PolicyTarget:
		return fmt.Sprintf("%s: hold %s at %s", p.Name, p.Metric, target())
	case cloud.PolicyStep:
		return fmt.Sprintf("%s: step on %s around %s (%d steps)", p.Name, p.Metric, target(), len(p.Steps))
	case cloud.PolicyPredictive:
		s := fmt.Sprintf("%s: forecast %s at %s", p.Name, p.Metric, target())
		if p.ForecastOnly {
			s += ", forecast only"
		}
		return s
	case cloud.PolicyGPUCloud:
		return fmt.Sprintf("%s: forecast %s at %s with a margin and a reactive floor", p.Name, p.Metric, target())
	case cloud.PolicyScheduled:
		var sets []string
		for _, v := range []struct {
			k string
			n *int
		}{{"min", p.SetMin}, {"max", p.SetMax}, {"desired", p.SetDesired}} {
			if v.n != nil {
				sets = append(sets, v.k+"="+strconv.Itoa(*v.n))
			}
		}
		return fmt.Sprintf("%s: at %q %s sets %s", p.Name, p.Cron, cmpOrDash(p.TimeZone, "UTC"), strings.Join(sets, " "))
	}
	return p.Name + ": " + p.Type
}

// describeGroup writes the detail view of a group.
func describeGroup(w io.Writer, d *api.GroupDescribe) error {
	if err := writeTable(w, groupFields(d)); err != nil {
		return err
	}
	if err := writeGroupMembers(w, d.Members); err != nil {
		return err
	}
	if err := writeGroupDecisions(w, d.Group.Status.Decisions); err != nil {
		return err
	}
	if len(d.RecentEvents) == 0 {
		fmt.Fprintln(w, "Events: none")
		return nil
	}
	fmt.Fprintln(w, "Events:")
	return writeEvents(w, d.RecentEvents, "  ")
}

// groupFields are the "Key: value" rows of a group's description.
func groupFields(d *api.GroupDescribe) fieldRows {
	g := &d.Group
	run, other := running(d)
	var f fieldRows
	f.add("ID", g.ID)
	f.add("Name", g.Name)
	f.add("Tenant", g.TenantID)
	f.add("State", string(g.State))
	f.add("Size", fmt.Sprintf("min %d, desired %d, max %d (%d running, %d other)", g.Min, g.Desired, g.Max, run, other))
	t := g.Template
	f.add("Offerings", strings.Join(t.Offerings, ", "))
	f.add("Image", imageText(t.Image))
	f.add("Command", dash(shellJoin(t.Command)))
	f.add("Env", dash(joinMap(t.Env)))
	f.add("Zones", dash(strings.Join(t.Zones, ", ")))
	f.add("Labels", dash(strings.Join(t.Labels, ", ")))
	f.add("Tags", dash(joinMap(t.Tags)))
	if t.VolumeGiB > 0 {
		f.add("Volume", fmt.Sprintf("%d GiB per member", t.VolumeGiB))
	}
	if len(g.Policies) == 0 {
		f.add("Policies", "-")
	}
	for i, p := range g.Policies {
		if i == 0 {
			f.add("Policies", policyText(p))
		} else {
			f = append(f, []string{"", policyText(p)})
		}
	}
	m := g.Mixed
	mix := "on demand"
	if m.Spot {
		mix = fmt.Sprintf("spot above %d on demand and %d%% on demand, spot up to %d%% of on demand", m.OnDemandBase, m.OnDemandPercent,
			cmpInt(m.MaxSpotPriceRatio, 80))
		if m.CapacityRebalance {
			mix += ", capacity rebalance"
		}
	}
	f.add("Mix", mix)
	tm := g.Timing
	f.add("Timing", fmt.Sprintf("cooldown %s, warmup %s, stabilization %s, notice %s", timingText(tm.CooldownSeconds),
		timingText(tm.WarmupSeconds), timingText(tm.StabilizationSeconds), timingText(tm.NoticeSeconds)))
	budget := "-"
	if g.BudgetPerHour > 0 {
		budget = formatPrice(g.BudgetPerHour) + "/h"
	}
	f.add("Budget", budget)
	idle := "-"
	if r := g.IdleRelease; r != nil {
		idle = fmt.Sprintf("under %s GPU for %s", percent(r.Threshold), time.Duration(r.IdleSeconds)*time.Second)
	}
	f.add("Idle release", idle)
	backoff := "-"
	if b := g.Status.Backoff; b != nil {
		backoff = fmt.Sprintf("%d failures, launches wait until %s: %s", b.Failures, stamp(b.Until), b.Reason)
	}
	f.add("Backoff", backoff)
	f.add("Message", dash(g.Status.Message))
	f.add("Last action", stamp(g.Status.LastActionAt))
	f.add("Version", strconv.FormatInt(g.Version, 10))
	f.add("Created", stamp(g.CreatedAt))
	f.add("Updated", stamp(g.UpdatedAt))
	return f
}

// writeGroupMembers writes a group's members, as a table under "Members:".
func writeGroupMembers(w io.Writer, members []api.GroupMember) error {
	if len(members) == 0 {
		fmt.Fprintln(w, "Members: none")
		return nil
	}
	fmt.Fprintln(w, "Members:")
	rows := [][]string{{"  ID", "NAME", "STATE", "MARKET", "OFFERING", "ZONE", "PROTECTION", "NOTICE", "AGE"}}
	for _, mb := range members {
		rows = append(rows, []string{"  " + mb.ID, dash(mb.Name), string(mb.State), string(mb.Market), mb.Offering,
			dash(mb.Zone), protectionText(mb.ScaleIn), noticeText(mb.Interruption), ago(mb.CreatedAt)})
	}
	return writeTable(w, rows)
}

// writeGroupDecisions writes a group's recent scaling decisions, as a
// table under "Decisions:".
func writeGroupDecisions(w io.Writer, decisions []cloud.GroupDecision) error {
	if len(decisions) == 0 {
		fmt.Fprintln(w, "Decisions: none")
		return nil
	}
	fmt.Fprintln(w, "Decisions:")
	rows := [][]string{{"  TIME", "CHANGE", "POLICY", "METRICS", "LIMIT", "REASON"}}
	for _, dc := range decisions {
		rows = append(rows, []string{"  " + dc.Time.UTC().Format(time.RFC3339), fmt.Sprintf("%d -> %d", dc.From, dc.To),
			dash(dc.Policy), dash(metricsText(dc)), dash(dc.Limit), dash(clip(dc.Reason, 80))})
	}
	return writeTable(w, rows)
}

func cmpInt(n, dflt int) int {
	if n == 0 {
		return dflt
	}
	return n
}

// protectionText says what holds a member from scale-in.
func protectionText(s *cloud.ScaleIn) string {
	if s == nil {
		return "-"
	}
	var parts []string
	if s.Protected {
		parts = append(parts, "protected")
	}
	if s.Lock != nil {
		l := "locked"
		if s.Lock.Reason != "" {
			l += " (" + clip(s.Lock.Reason, 30) + ")"
		}
		parts = append(parts, l)
	}
	return cmpOrDash(strings.Join(parts, ", "), "-")
}

// noticeText says what interruption a member carries.
func noticeText(it *cloud.Interruption) string {
	switch {
	case it == nil:
		return "-"
	case it.Action == "":
		return "rebalance recommended"
	}
	return fmt.Sprintf("%s at %s (%s)", it.Action, it.Deadline.UTC().Format(time.RFC3339), it.Reason)
}

// metricsText renders a decision's inputs: "gpu_utilization=0.82 forecast=3.1".
func metricsText(d cloud.GroupDecision) string {
	keys := make([]string, 0, len(d.Metrics))
	for k := range d.Metrics {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+"="+strconv.FormatFloat(d.Metrics[k], 'g', 4, 64))
	}
	if d.Forecast != 0 {
		parts = append(parts, "forecast="+strconv.FormatFloat(d.Forecast, 'g', 4, 64))
	}
	return strings.Join(parts, " ")
}

func newGroupsForecastCommand(s *session) *cobra.Command {
	var (
		hours int
		out   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "forecast GROUP",
		Short: "Show a group's load forecast beside its actual load, with the backtest error",
		Long: "Replay the forecaster of the group's first predictive policy (or, without one,\n" +
			"of its first target tracking policy) over the group's saved history: each past\n" +
			"hour's forecast, made from the history before that hour, beside the load that\n" +
			"came, in instances (load / target). MAPE is the mean absolute percentage error\n" +
			"over the hours with load, WAPE the sum of absolute errors over the sum of load.\n" +
			"Then the forecast of the next 48 hours. The group controller saves the history\n" +
			"every 10 minutes; a backtest needs 25 hours of it.",
		Example: "  gpucloud groups forecast web\n  gpucloud groups forecast web --hours 72\n  gpucloud groups forecast web -o json",
		Args:    exactArgs(1, "one group ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if hours < 0 {
				return cmdutil.Usagef(cmd, "--hours %d: want 0 (all) or more", hours)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, args[0])
				if err != nil {
					return err
				}
				f, err := c.GroupForecast(ctx, id)
				if err != nil {
					return c.explain(err)
				}
				if !out.table() {
					return writeData(cmd.OutOrStdout(), out.format, f)
				}
				return printForecast(cmd.OutOrStdout(), f, hours)
			})
		},
	}
	cmd.Flags().IntVar(&hours, "hours", 24, "backtested hours to list, newest last (0: all)")
	out.register(cmd)
	return cmd
}

// printForecast writes a forecast as two tables: the last hours of the
// backtest with their error, and the next 48 hours.
func printForecast(w io.Writer, f *api.GroupForecast, hours int) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Group:     %s\n", f.GroupID)
	fmt.Fprintf(&b, "Policy:    %s (%s, target %s)\n", f.Policy, f.Metric, strconv.FormatFloat(f.Target, 'f', -1, 64))
	fmt.Fprintf(&b, "History:   %.1f h\n", f.HistoryHours)
	fmt.Fprintf(&b, "Backtest:  %d h, MAPE %.1f%%, WAPE %.1f%%\n\n", len(f.Backtest), f.MAPE, f.WAPE)
	bt := f.Backtest
	if hours > 0 && len(bt) > hours {
		bt = bt[len(bt)-hours:]
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOUR (UTC)\tACTUAL\tFORECAST\tERROR")
	for _, h := range bt {
		act := 0.0
		if h.Actual != nil {
			act = *h.Actual
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%+.2f\n", h.Time.UTC().Format("2006-01-02 15:04"), act, h.Forecast, h.Forecast-act)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\nNext %d hours (instances):\n", len(f.Ahead))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOUR (UTC)\tFORECAST")
	for _, h := range f.Ahead {
		fmt.Fprintf(tw, "%s\t%.2f\n", h.Time.UTC().Format("2006-01-02 15:04"), h.Forecast)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := io.WriteString(w, b.String())
	return err
}
