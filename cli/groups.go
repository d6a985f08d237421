package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

// newGroupCommands returns the commands of autoscaling groups and their
// custom metrics, bound to root's connection flags, and adds protect and
// unprotect to root's instances command.
func newGroupCommands(root *cobra.Command) []*cobra.Command {
	s := &session{}
	cmds := []*cobra.Command{newGroupsCommand(s), newMetricsCommand(s)}
	for _, c := range cmds {
		bindConnFlags(root, s, c)
	}
	for _, c := range root.Commands() {
		if c.Name() != "instances" {
			continue
		}
		for _, p := range []*cobra.Command{newInstanceProtectCommand(s, true), newInstanceProtectCommand(s, false)} {
			bindConnFlags(root, s, p)
			c.AddCommand(p)
		}
	}
	return cmds
}

func newGroupsCommand(s *session) *cobra.Command {
	cmd := groupCommand("groups", "Create and manage autoscaling groups",
		"An autoscaling group keeps a number of instances of a launch template running:\n"+
			"between its min and max, at the capacity its policies decide (target tracking\n"+
			"on GPU or CPU utilization or a custom metric, schedules, a forecast), with an\n"+
			"on-demand/spot mix, a budget ceiling and idle release. Members chosen for\n"+
			"scale-in get a notice first, as a spot reclaim gives; a protected member, or one\n"+
			"whose workload holds its completion lock, is never scaled in.",
		newGroupsCreateCommand(s), newGroupsListCommand(s), newGroupsDescribeCommand(s), newGroupsUpdateCommand(s),
		newGroupsSetDesiredCommand(s), newGroupsDeleteCommand(s), newGroupsForecastCommand(s))
	cmd.Aliases = []string{"group", "asg"}
	return cmd
}

// groupID resolves a group given by ID (asg-...) or by name among the
// groups the caller sees that are not deleted.
func (c *conn) groupID(ctx context.Context, arg string) (string, error) {
	if strings.HasPrefix(arg, "asg-") {
		return arg, nil
	}
	gs, err := c.Groups(ctx, "")
	if err != nil {
		return "", c.explain(err)
	}
	var ids []string
	for _, g := range gs {
		if g.Name == arg {
			ids = append(ids, g.ID)
		}
	}
	switch len(ids) {
	case 0:
		return "", fmt.Errorf("no group named %q ('gpucloud groups list' lists them)", arg)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("%d groups of different tenants are named %q: give the ID (%s)", len(ids), arg, strings.Join(ids, ", "))
}

// groupFlags are the flags that describe a group, shared by create and
// update.
type groupFlags struct {
	file                                    string
	offerings, zones, labels, env, tags     []string
	image                                   string
	min, max, desired                       int
	targetGPU, targetCPU                    float64
	targetMetrics, schedules                []string
	predictive                              string
	noPolicies                              bool
	spot, rebalance                         bool
	onDemandBase, onDemandPct, maxSpotRatio int
	budget                                  moneyFlag
	idle                                    string
	volumeGiB                               int64
	warmup, cooldown, stabilization, notice time.Duration
}

// describing are the flags of groupFlags that -f may not be mixed with.
var describing = []string{"offering", "image", "min", "max", "desired", "target-gpu", "target-cpu", "target-metric", "schedule",
	"predictive", "no-policies", "spot", "capacity-rebalance", "on-demand-base", "on-demand-percent", "max-spot-price-ratio",
	"budget", "idle-release", "volume-gib", "env", "tag", "zone", "label", "warmup", "cooldown", "stabilization", "notice"}

func (g *groupFlags) register(cmd *cobra.Command, update bool) {
	f := cmd.Flags()
	f.StringVarP(&g.file, "file", "f", "", "read the request body from this YAML or JSON file (- for stdin)")
	f.StringArrayVar(&g.offerings, "offering", nil, "an acceptable offering, in order of preference (repeatable)")
	f.StringVar(&g.image, "image", "", `the OCI image the members run in, e.g. "python:3.12" (default: the hosts' default image)`)
	f.IntVar(&g.min, "min", 0, "the fewest members")
	f.IntVar(&g.max, "max", 0, "the most members (at most 1000)")
	f.IntVar(&g.desired, "desired", 0, "the members to start with (default --min)")
	f.Float64Var(&g.targetGPU, "target-gpu", 0, "target tracking: hold the members' mean GPU utilization at this (0..1)")
	f.Float64Var(&g.targetCPU, "target-cpu", 0, "target tracking: hold the members' mean CPU utilization at this (0..1)")
	f.StringArrayVar(&g.targetMetrics, "target-metric", nil, "target tracking on METRIC=VALUE per member, e.g. custom:queue=10 (repeatable)")
	f.StringArrayVar(&g.schedules, "schedule", nil, "a scheduled action: cron=EXPR[,tz=ZONE][,min=N][,max=N][,desired=N][,name=NAME] (repeatable)")
	f.StringVar(&g.predictive, "predictive", "", "forecast the first target's metric and scale ahead; =forecast-only computes without acting")
	f.Lookup("predictive").NoOptDefVal = "on"
	f.BoolVar(&g.spot, "spot", false, "use spot capacity above the on-demand base and percent")
	f.BoolVar(&g.rebalance, "capacity-rebalance", false, "replace a spot member as soon as it gets a rebalance recommendation")
	f.IntVar(&g.onDemandBase, "on-demand-base", 0, "with --spot: members always on demand")
	f.IntVar(&g.onDemandPct, "on-demand-percent", 0, "with --spot: percent on demand above the base (0..100)")
	f.IntVar(&g.maxSpotRatio, "max-spot-price-ratio", 0, "with --spot: leave a pool whose spot price passes this percent of on demand (default 80)")
	f.Var(&g.budget, "budget", "the most the members may cost per hour, e.g. 12.50 (0: no budget)")
	f.StringVar(&g.idle, "idle-release", "", "release members under THRESHOLD GPU utilization for DURATION: THRESHOLD:DURATION, e.g. 0.1:30m")
	f.Int64Var(&g.volumeGiB, "volume-gib", 0, "give each member a new volume of this size")
	f.StringArrayVar(&g.env, "env", nil, "environment variable KEY=VALUE of the members (repeatable)")
	f.StringArrayVar(&g.tags, "tag", nil, "tag KEY=VALUE of the members (repeatable)")
	f.StringSliceVar(&g.zones, "zone", nil, "an allowed zone (repeatable)")
	f.StringArrayVar(&g.labels, "label", nil, `host label selector such as "driver>=550" (repeatable)`)
	f.DurationVar(&g.warmup, "warmup", 0, "a new member stays out of the metrics this long (default 5m)")
	f.DurationVar(&g.cooldown, "cooldown", 0, "the pause after a scaling action (default 5m)")
	f.DurationVar(&g.stabilization, "stabilization", 0, "scale-in takes the highest recommendation of this window (default 5m)")
	f.DurationVar(&g.notice, "notice", 0, "the notice a member chosen for scale-in gets (default 2m)")
	if update {
		f.BoolVar(&g.noPolicies, "no-policies", false, "remove every scaling policy")
		f.Lookup("idle-release").Usage += "; off removes it"
	}
}

// changed reports whether any of the named flags was given.
func changed(cmd *cobra.Command, names ...string) bool {
	for _, n := range names {
		if f := cmd.Flags().Lookup(n); f != nil && f.Changed {
			return true
		}
	}
	return false
}

// checkFileMix refuses -f together with flags that describe the group.
func (g *groupFlags) checkFileMix(cmd *cobra.Command) error {
	if g.file == "" {
		return nil
	}
	for _, n := range describing {
		if changed(cmd, n) {
			return cmdutil.Usagef(cmd, "-f %s and --%s do not mix: put everything in the file", g.file, n)
		}
	}
	return nil
}

// readBody reads -f's YAML or JSON into v, refusing unknown fields.
func readBody(cmd *cobra.Command, file string, v any) error {
	var b []byte
	var err error
	if file == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return err
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %v", file, strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// seconds is a duration flag in whole seconds.
func seconds(cmd *cobra.Command, flag string, d time.Duration) (int, error) {
	if d < 0 || d%time.Second != 0 {
		return 0, cmdutil.Usagef(cmd, "--%s %s: want whole seconds, 0 or more", flag, d)
	}
	return int(d / time.Second), nil
}

// policies builds the scaling policies of the flags, in the order target
// (GPU, CPU, metrics), schedules, predictive.
func (g *groupFlags) policies(cmd *cobra.Command) ([]cloud.ScalingPolicy, error) {
	var ps []cloud.ScalingPolicy
	if changed(cmd, "target-gpu") {
		ps = append(ps, cloud.ScalingPolicy{Name: "target-gpu", Type: cloud.PolicyTarget, Metric: cloud.MetricGPUUtilization, Target: g.targetGPU})
	}
	if changed(cmd, "target-cpu") {
		ps = append(ps, cloud.ScalingPolicy{Name: "target-cpu", Type: cloud.PolicyTarget, Metric: cloud.MetricCPUUtilization, Target: g.targetCPU})
	}
	for _, tm := range g.targetMetrics {
		i := strings.LastIndex(tm, "=")
		if i <= 0 {
			return nil, cmdutil.Usagef(cmd, "--target-metric %q: want METRIC=VALUE, e.g. custom:queue=10", tm)
		}
		metric, v := tm[:i], tm[i+1:]
		target, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, cmdutil.Usagef(cmd, "--target-metric %q: %q is not a number", tm, v)
		}
		switch metric {
		case cloud.MetricGPUUtilization, cloud.MetricCPUUtilization, cloud.MetricGPUOrCPU:
		default:
			if !strings.HasPrefix(metric, cloud.CustomMetricPrefix) {
				metric = cloud.CustomMetricPrefix + metric
			}
		}
		name := "target-" + strings.TrimPrefix(metric, cloud.CustomMetricPrefix)
		ps = append(ps, cloud.ScalingPolicy{Name: name, Type: cloud.PolicyTarget, Metric: metric, Target: target})
	}
	for i, sc := range g.schedules {
		p, err := parseSchedule(sc)
		if err != nil {
			return nil, cmdutil.Usagef(cmd, "--schedule %q: %v", sc, err)
		}
		if p.Name == "" {
			p.Name = "schedule-" + strconv.Itoa(i+1)
		}
		ps = append(ps, p)
	}
	switch g.predictive {
	case "":
	case "on", "true", "forecast-only":
		var first *cloud.ScalingPolicy
		for i := range ps {
			if ps[i].Type == cloud.PolicyTarget {
				first = &ps[i]
				break
			}
		}
		if first == nil {
			return nil, cmdutil.Usagef(cmd, "--predictive forecasts the metric of a target: give --target-gpu, --target-cpu or --target-metric too")
		}
		ps = append(ps, cloud.ScalingPolicy{Name: "predictive", Type: cloud.PolicyPredictive, Metric: first.Metric,
			Target: first.Target, ForecastOnly: g.predictive == "forecast-only"})
	default:
		return nil, cmdutil.Usagef(cmd, "--predictive=%s: want --predictive or --predictive=forecast-only", g.predictive)
	}
	return ps, nil
}

// parseSchedule reads cron=EXPR,tz=ZONE,min=N,max=N,desired=N,name=NAME;
// the cron expression may hold commas ("0 8,20 * * *"): a part that does
// not start with a known key continues the one before.
func parseSchedule(v string) (cloud.ScalingPolicy, error) {
	p := cloud.ScalingPolicy{Type: cloud.PolicyScheduled}
	keys := []string{"cron", "tz", "min", "max", "desired", "name"}
	var parts []string
	for _, part := range strings.Split(v, ",") {
		k, _, ok := strings.Cut(part, "=")
		if ok && slices.Contains(keys, strings.TrimSpace(k)) || len(parts) == 0 {
			parts = append(parts, part)
			continue
		}
		parts[len(parts)-1] += "," + part
	}
	seen := map[string]bool{}
	for _, part := range parts {
		k, val, ok := strings.Cut(part, "=")
		k = strings.TrimSpace(k)
		if !ok || !slices.Contains(keys, k) {
			return p, fmt.Errorf("%q is not KEY=VALUE with a key of %s", part, strings.Join(keys, ", "))
		}
		if seen[k] {
			return p, fmt.Errorf("%s is given twice", k)
		}
		seen[k] = true
		val = strings.TrimSpace(val)
		switch k {
		case "cron":
			p.Cron = val
		case "tz":
			p.TimeZone = val
		case "name":
			p.Name = val
		default:
			n, err := strconv.Atoi(val)
			if err != nil {
				return p, fmt.Errorf("%s=%s is not a whole number", k, val)
			}
			switch k {
			case "min":
				p.SetMin = &n
			case "max":
				p.SetMax = &n
			default:
				p.SetDesired = &n
			}
		}
	}
	if p.Cron == "" {
		return p, errors.New("cron=EXPR is required, e.g. cron=0 20 * * *")
	}
	if p.SetMin == nil && p.SetMax == nil && p.SetDesired == nil {
		return p, errors.New("give min=N, max=N or desired=N")
	}
	return p, nil
}

// parseIdleRelease reads --idle-release THRESHOLD:DURATION.
func parseIdleRelease(cmd *cobra.Command, v string) (*cloud.IdleRelease, error) {
	th, dur, ok := strings.Cut(v, ":")
	t, err1 := strconv.ParseFloat(th, 64)
	d, err2 := time.ParseDuration(dur)
	if !ok || err1 != nil || err2 != nil || d%time.Second != 0 {
		return nil, cmdutil.Usagef(cmd, "--idle-release %q: want THRESHOLD:DURATION, e.g. 0.1:30m", v)
	}
	return &cloud.IdleRelease{Threshold: t, IdleSeconds: int(d / time.Second)}, nil
}

// mixed builds the on-demand/spot mix of the flags.
func (g *groupFlags) mixed(cmd *cobra.Command) (cloud.MixedInstances, error) {
	if !g.spot {
		for _, n := range []string{"on-demand-base", "on-demand-percent", "max-spot-price-ratio", "capacity-rebalance"} {
			if changed(cmd, n) {
				return cloud.MixedInstances{}, cmdutil.Usagef(cmd, "--%s applies to spot groups: add --spot", n)
			}
		}
	}
	return cloud.MixedInstances{Spot: g.spot, OnDemandBase: g.onDemandBase, OnDemandPercent: g.onDemandPct,
		MaxSpotPriceRatio: g.maxSpotRatio, CapacityRebalance: g.rebalance}, nil
}

// timing builds the timing of the flags, starting from was.
func (g *groupFlags) timing(cmd *cobra.Command, was cloud.GroupTiming) (cloud.GroupTiming, error) {
	t := was
	for _, f := range []struct {
		name string
		d    time.Duration
		dst  *int
	}{{"warmup", g.warmup, &t.WarmupSeconds}, {"cooldown", g.cooldown, &t.CooldownSeconds},
		{"stabilization", g.stabilization, &t.StabilizationSeconds}, {"notice", g.notice, &t.NoticeSeconds}} {
		if !changed(cmd, f.name) {
			continue
		}
		n, err := seconds(cmd, f.name, f.d)
		if err != nil {
			return t, err
		}
		*f.dst = n
	}
	return t, nil
}

// template builds the launch template of the flags over was; command is
// the workload after "--" (nil: was's).
func (g *groupFlags) template(cmd *cobra.Command, was cloud.GroupTemplate, command []string) (cloud.GroupTemplate, error) {
	t := was
	if changed(cmd, "offering") {
		t.Offerings = g.offerings
	}
	if changed(cmd, "image") {
		t.Image = g.image
	}
	if changed(cmd, "zone") {
		t.Zones = g.zones
	}
	if changed(cmd, "label") {
		t.Labels = g.labels
	}
	if changed(cmd, "volume-gib") {
		t.VolumeGiB = g.volumeGiB
	}
	var err error
	if changed(cmd, "env") {
		if t.Env, err = keyValues(cmd, "env", g.env); err != nil {
			return t, err
		}
	}
	if changed(cmd, "tag") {
		if t.Tags, err = keyValues(cmd, "tag", g.tags); err != nil {
			return t, err
		}
	}
	if command != nil {
		t.Command = command
	}
	return t, nil
}

// commandArgs splits a command line of NAME [-- COMMAND...]: the names
// before "--" and the workload after it (nil without "--").
func commandArgs(cmd *cobra.Command, args []string) (names, command []string) {
	dash := cmd.ArgsLenAtDash()
	if dash < 0 {
		return args, nil
	}
	return args[:dash], args[dash:]
}

func newGroupsCreateCommand(s *session) *cobra.Command {
	var (
		g      groupFlags
		tenant string
		key    string
		w      groupWait
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create NAME --offering NAME... --min N --max N [flags] [-- COMMAND ARGS...]",
		Short: "Create an autoscaling group",
		Long: "Create an autoscaling group of instances launched from a template (offerings in\n" +
			"order of preference, image, command after \"--\", env, tags, zones, labels, a\n" +
			"volume per member), between --min and --max, sized by its policies:\n\n" +
			"  --target-gpu 0.6              hold the mean GPU utilization at 60%\n" +
			"  --target-metric custom:queue=10   10 per member of a metric you publish\n" +
			"                                (gpucloud metrics put GROUP queue=42)\n" +
			"  --schedule 'cron=0 20 * * *,tz=Asia/Shanghai,desired=0'   a scheduled action\n" +
			"  --predictive[=forecast-only]  forecast the first target's metric, act ahead\n\n" +
			"--spot mixes in spot capacity above --on-demand-base members and\n" +
			"--on-demand-percent; --budget caps the cost per hour; --idle-release 0.1:30m\n" +
			"releases members under 10% GPU for 30 minutes. -f FILE reads the request body\n" +
			"(YAML or JSON, the API's fields) instead of the flags.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given).\n" +
			"With --wait the command returns once the group runs its desired members.",
		Example: strings.Join([]string{
			"  gpucloud groups create web --offering l4.1x --offering l40s.1x --min 1 --max 8 \\",
			"      --target-gpu 0.6 --spot --on-demand-base 1 --budget 12.50 -- python serve.py",
			"  gpucloud groups create batch --offering h100.1x --min 0 --max 16 --target-metric custom:queue=10 \\",
			"      --schedule 'cron=0 20 * * *,tz=Asia/Shanghai,desired=0' --idle-release 0.1:30m",
			"  gpucloud groups create -f web.yaml --wait",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if names, _ := commandArgs(cmd, args); len(names) > 1 {
				return cmdutil.Usagef(cmd, "unexpected argument %q: put the workload's command after \"--\", e.g. -- python serve.py", names[1])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			if err := g.checkFileMix(cmd); err != nil {
				return err
			}
			names, command := commandArgs(cmd, args)
			var req api.CreateGroupRequest
			if g.file != "" {
				if command != nil {
					return cmdutil.Usagef(cmd, "-f %s and a command after \"--\" do not mix: put the command in the file", g.file)
				}
				if err := readBody(cmd, g.file, &req); err != nil {
					return err
				}
				if len(names) == 1 {
					req.Name = names[0]
				}
				if req.Name == "" {
					return cmdutil.Usagef(cmd, "the group needs a name: give NAME or name: in %s", g.file)
				}
			} else {
				if len(names) == 0 {
					return cmdutil.Usagef(cmd, "give the group's NAME")
				}
				if len(g.offerings) == 0 {
					return cmdutil.Usagef(cmd, "--offering is required ('gpucloud offerings' lists them; repeat it for fallbacks)")
				}
				if !changed(cmd, "min") || !changed(cmd, "max") {
					return cmdutil.Usagef(cmd, "--min and --max are required")
				}
				var err error
				req = api.CreateGroupRequest{Name: names[0], Min: g.min, Max: g.max}
				if changed(cmd, "desired") {
					d := g.desired
					req.Desired = &d
				}
				if req.Template, err = g.template(cmd, cloud.GroupTemplate{}, command); err != nil {
					return err
				}
				if req.Policies, err = g.policies(cmd); err != nil {
					return err
				}
				if req.Mixed, err = g.mixed(cmd); err != nil {
					return err
				}
				if req.Timing, err = g.timing(cmd, cloud.GroupTiming{}); err != nil {
					return err
				}
				req.BudgetPerHour = g.budget.v
				if g.idle != "" {
					if req.IdleRelease, err = parseIdleRelease(cmd, g.idle); err != nil {
						return err
					}
				}
			}
			if key == "" {
				key = newUUID()
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t := req.Tenant
				if tenant != "" {
					t = tenant
				}
				var err error
				if req.Tenant, err = c.tenantID(ctx, t); err != nil {
					return err
				}
				grp, err := c.CreateGroup(ctx, req, key)
				if err != nil {
					return c.explain(err)
				}
				if w.wait {
					if grp, err = c.waitGroup(ctx, cmd.ErrOrStderr(), grp.ID, false, w.timeout); err != nil {
						return err
					}
				}
				return printGroups(cmd.OutOrStdout(), out.format, true, grp)
			})
		},
	}
	g.register(cmd, false)
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	f.StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same group (default: a random UUID)")
	w.register(cmd, "runs its desired members")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// groupWait is --wait and --timeout of the group commands.
type groupWait struct{ waitFlags }

func (w *groupWait) register(cmd *cobra.Command, target string) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until the group "+target+" (a progress line shows on a terminal)")
	cmd.Flags().DurationVar(&w.timeout, "timeout", defaultWaitTimeout, "with --wait, give up after this long")
}

// running counts a group's members by state.
func running(d *api.GroupDescribe) (run, other int) {
	for _, m := range d.Members {
		if m.State == cloud.Running && (m.Interruption == nil || m.Interruption.Action == "") {
			run++
		} else {
			other++
		}
	}
	return run, other
}

// waitGroup polls a group until it runs exactly its desired members (or,
// with deleted, until it is deleted), drawing a progress line on a
// terminal.
func (c *conn) waitGroup(ctx context.Context, stderr io.Writer, id string, deleted bool, timeout time.Duration) (*cloud.Group, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := newProgressLine(stderr)
	defer p.clear()
	var last *api.GroupDescribe
	for {
		d, err := c.GetGroup(ctx, id)
		if err == nil {
			last = d
			run, other := running(d)
			switch {
			case deleted && d.State == cloud.GroupDeleted:
				return &d.Group, nil
			case !deleted && d.State != cloud.GroupActive:
				return nil, fmt.Errorf("group %s is %s, so it will not run its members", id, d.State)
			case !deleted && run == d.Desired && other == 0:
				return &d.Group, nil
			}
			line := fmt.Sprintf("%s: %s, %d/%d running", id, d.State, run, d.Desired)
			if other > 0 {
				line += fmt.Sprintf(", %d other", other)
			}
			if d.Status.Message != "" {
				line += " (" + d.Status.Message + ")"
			}
			p.show(line)
		}
		if err == nil {
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(pollEvery):
				continue
			}
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			what := "not deleted"
			if last != nil && !deleted {
				run, _ := running(last)
				what = fmt.Sprintf("%d of %d desired members running", run, last.Desired)
			}
			return nil, fmt.Errorf("gave up after %s: group %s has %s; it keeps going (see `gpucloud groups describe %s`)", timeout, id, what, id)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted: group %s keeps going (see `gpucloud groups describe %s`)", id, id)
		}
		return nil, c.explain(err)
	}
}

// printGroups prints groups as a table or as JSON or YAML.
var printGroups = resourceTable[cloud.Group]{
	none:   "no groups",
	header: []string{"ID", "NAME", "STATE", "MIN", "DESIRED", "MAX", "OFFERINGS", "MARKET", "POLICIES", "AGE"},
	row: func(g *cloud.Group) []string {
		var pols []string
		for _, p := range g.Policies {
			pols = append(pols, p.Name)
		}
		market := "on-demand"
		if g.Mixed.Spot {
			market = "spot mix"
		}
		return []string{g.ID, g.Name, string(g.State), strconv.Itoa(g.Min), strconv.Itoa(g.Desired), strconv.Itoa(g.Max),
			clip(strings.Join(g.Template.Offerings, ","), 40), market, dash(clip(strings.Join(pols, ","), 40)), ago(g.CreatedAt)}
	},
	tenant: func(g *cloud.Group) string { return g.TenantID },
}.print

// groupStates are the values of --state.
var groupStates = []string{"active", "deleting", "deleted"}

func newGroupsListCommand(s *session) *cobra.Command {
	var (
		states []string
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List autoscaling groups (not deleted ones unless --state says)",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			want, err := parseStates[cloud.GroupState](cmd, states, groupStates)
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				gs, err := c.Groups(ctx, t, want...)
				if err != nil {
					return c.explain(err)
				}
				if gs == nil {
					gs = []*cloud.Group{}
				}
				return printGroups(cmd.OutOrStdout(), out.format, false, gs...)
			})
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states, comma-separated: "+strings.Join(groupStates, ", "))
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's groups, by name or ID (admins)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(groupStates, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

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
	g := &d.Group
	run, other := running(d)
	var rows [][]string
	add := func(k, v string) { rows = append(rows, []string{k + ":", v}) }
	add("ID", g.ID)
	add("Name", g.Name)
	add("Tenant", g.TenantID)
	add("State", string(g.State))
	add("Size", fmt.Sprintf("min %d, desired %d, max %d (%d running, %d other)", g.Min, g.Desired, g.Max, run, other))
	t := g.Template
	add("Offerings", strings.Join(t.Offerings, ", "))
	add("Image", imageText(t.Image))
	add("Command", dash(shellJoin(t.Command)))
	add("Env", dash(joinMap(t.Env)))
	add("Zones", dash(strings.Join(t.Zones, ", ")))
	add("Labels", dash(strings.Join(t.Labels, ", ")))
	add("Tags", dash(joinMap(t.Tags)))
	if t.VolumeGiB > 0 {
		add("Volume", fmt.Sprintf("%d GiB per member", t.VolumeGiB))
	}
	if len(g.Policies) == 0 {
		add("Policies", "-")
	}
	for i, p := range g.Policies {
		if i == 0 {
			add("Policies", policyText(p))
		} else {
			rows = append(rows, []string{"", policyText(p)})
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
	add("Mix", mix)
	tm := g.Timing
	add("Timing", fmt.Sprintf("cooldown %s, warmup %s, stabilization %s, notice %s", timingText(tm.CooldownSeconds),
		timingText(tm.WarmupSeconds), timingText(tm.StabilizationSeconds), timingText(tm.NoticeSeconds)))
	budget := "-"
	if g.BudgetPerHour > 0 {
		budget = formatPrice(g.BudgetPerHour) + "/h"
	}
	add("Budget", budget)
	idle := "-"
	if r := g.IdleRelease; r != nil {
		idle = fmt.Sprintf("under %s GPU for %s", percent(r.Threshold), time.Duration(r.IdleSeconds)*time.Second)
	}
	add("Idle release", idle)
	backoff := "-"
	if b := g.Status.Backoff; b != nil {
		backoff = fmt.Sprintf("%d failures, launches wait until %s: %s", b.Failures, stamp(b.Until), b.Reason)
	}
	add("Backoff", backoff)
	add("Message", dash(g.Status.Message))
	add("Last action", stamp(g.Status.LastActionAt))
	add("Version", strconv.FormatInt(g.Version, 10))
	add("Created", stamp(g.CreatedAt))
	add("Updated", stamp(g.UpdatedAt))
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(d.Members) == 0 {
		fmt.Fprintln(w, "Members: none")
	} else {
		fmt.Fprintln(w, "Members:")
		rows := [][]string{{"  ID", "NAME", "STATE", "MARKET", "OFFERING", "ZONE", "PROTECTION", "NOTICE", "AGE"}}
		for _, mb := range d.Members {
			rows = append(rows, []string{"  " + mb.ID, dash(mb.Name), string(mb.State), string(mb.Market), mb.Offering,
				dash(mb.Zone), protectionText(mb.ScaleIn), noticeText(mb.Interruption), ago(mb.CreatedAt)})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	if len(g.Status.Decisions) == 0 {
		fmt.Fprintln(w, "Decisions: none")
	} else {
		fmt.Fprintln(w, "Decisions:")
		rows := [][]string{{"  TIME", "CHANGE", "POLICY", "METRICS", "LIMIT", "REASON"}}
		for _, dc := range g.Status.Decisions {
			rows = append(rows, []string{"  " + dc.Time.UTC().Format(time.RFC3339), fmt.Sprintf("%d -> %d", dc.From, dc.To),
				dash(dc.Policy), dash(metricsText(dc)), dash(dc.Limit), dash(clip(dc.Reason, 80))})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	if len(d.RecentEvents) == 0 {
		fmt.Fprintln(w, "Events: none")
		return nil
	}
	fmt.Fprintln(w, "Events:")
	return writeEvents(w, d.RecentEvents, "  ")
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

func newGroupsUpdateCommand(s *session) *cobra.Command {
	var (
		g       groupFlags
		ifMatch string
		w       groupWait
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "update GROUP [flags] [-- COMMAND ARGS...]",
		Short: "Change a group's sizes, template, policies, mix, timing, budget or idle release",
		Long: "Change a group, by ID or name; what no flag names is kept. Template flags\n" +
			"(--offering, --image, --env, --tag, --zone, --label, --volume-gib, a command\n" +
			"after \"--\") change the template for new launches only: running members keep\n" +
			"what they were launched with. Any policy flag (--target-*, --schedule,\n" +
			"--predictive) replaces every policy; --no-policies removes them. The mix flags\n" +
			"replace the whole mix. --budget 0 and --idle-release off remove those. -f FILE\n" +
			"reads the PATCH body (YAML or JSON) instead.",
		Example: strings.Join([]string{
			"  gpucloud groups update web --max 16 --budget 20",
			"  gpucloud groups update web --target-gpu 0.7 --schedule 'cron=0 8 * * 1-5,desired=4'",
			"  gpucloud groups update web --offering l40s.1x -- python serve.py --v2",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if names, _ := commandArgs(cmd, args); len(names) != 1 {
				return cmdutil.Usagef(cmd, "%s takes one group ID or name, and the workload's command after \"--\"", cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			if err := g.checkFileMix(cmd); err != nil {
				return err
			}
			names, command := commandArgs(cmd, args)
			var version int64
			if ifMatch != "" {
				v, err := parseIfMatch(ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%s", strings.Replace(err.Error(), "instance's", "group's", 1))
				}
				version = v
			}
			var req api.UpdateGroupRequest
			if g.file != "" {
				if command != nil {
					return cmdutil.Usagef(cmd, "-f %s and a command after \"--\" do not mix", g.file)
				}
				if err := readBody(cmd, g.file, &req); err != nil {
					return err
				}
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, names[0])
				if err != nil {
					return err
				}
				if g.file == "" {
					cur, err := c.GetGroup(ctx, id)
					if err != nil {
						return c.explain(err)
					}
					if req, err = g.patch(cmd, &cur.Group, command); err != nil {
						return err
					}
				}
				grp, err := c.UpdateGroup(ctx, id, req, version)
				if err != nil {
					return c.explain(err)
				}
				if w.wait {
					if grp, err = c.waitGroup(ctx, cmd.ErrOrStderr(), grp.ID, false, w.timeout); err != nil {
						return err
					}
				}
				return printGroups(cmd.OutOrStdout(), out.format, true, grp)
			})
		},
	}
	g.register(cmd, true)
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "change only if the group's version is still this one")
	w.register(cmd, "runs its desired members")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// patch builds an update of cur from the flags that were given; an update
// without any is a usage error.
func (g *groupFlags) patch(cmd *cobra.Command, cur *cloud.Group, command []string) (api.UpdateGroupRequest, error) {
	var req api.UpdateGroupRequest
	var err error
	for _, f := range []struct {
		name string
		v    int
		dst  **int
	}{{"min", g.min, &req.Min}, {"max", g.max, &req.Max}, {"desired", g.desired, &req.Desired}} {
		if changed(cmd, f.name) {
			v := f.v
			*f.dst = &v
		}
	}
	if changed(cmd, "offering", "image", "zone", "label", "volume-gib", "env", "tag") || command != nil {
		t, err := g.template(cmd, cur.Template, command)
		if err != nil {
			return req, err
		}
		req.Template = &t
	}
	if changed(cmd, "target-gpu", "target-cpu", "target-metric", "schedule", "predictive") {
		if g.noPolicies {
			return req, cmdutil.Usagef(cmd, "--no-policies and policy flags do not mix")
		}
		ps, err := g.policies(cmd)
		if err != nil {
			return req, err
		}
		req.Policies = &ps
	} else if g.noPolicies {
		req.Policies = &[]cloud.ScalingPolicy{}
	}
	if changed(cmd, "spot", "on-demand-base", "on-demand-percent", "max-spot-price-ratio", "capacity-rebalance") {
		if !changed(cmd, "spot") {
			g.spot = cur.Mixed.Spot
		}
		m, err := g.mixed(cmd)
		if err != nil {
			return req, err
		}
		req.Mixed = &m
	}
	if changed(cmd, "warmup", "cooldown", "stabilization", "notice") {
		t, err := g.timing(cmd, cur.Timing)
		if err != nil {
			return req, err
		}
		req.Timing = &t
	}
	if g.budget.set {
		b := g.budget.v
		req.BudgetPerHour = &b
	}
	switch g.idle {
	case "":
	case "off":
		req.IdleRelease = &cloud.IdleRelease{}
	default:
		if req.IdleRelease, err = parseIdleRelease(cmd, g.idle); err != nil {
			return req, err
		}
	}
	if req == (api.UpdateGroupRequest{}) {
		return req, cmdutil.Usagef(cmd, "nothing to change: give a flag such as --max, --target-gpu or --budget")
	}
	return req, nil
}

func newGroupsSetDesiredCommand(s *session) *cobra.Command {
	var (
		honor bool
		w     groupWait
		out   outputFlag
	)
	cmd := &cobra.Command{
		Use:   "set-desired GROUP N",
		Short: "Set a group's desired capacity",
		Long: "Set a group's desired capacity, within its min and max. The group's policies\n" +
			"may change it again on their next decision. --honor-cooldown refuses the\n" +
			"change while the group is in its cooldown after its last scaling action.",
		Example: "  gpucloud groups set-desired web 4 --wait",
		Args:    exactArgs(2, "a group ID or name and the desired capacity"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			n, err := strconv.Atoi(args[1])
			if err != nil || n < 0 {
				return cmdutil.Usagef(cmd, "desired capacity %q: want a whole number, 0 or more", args[1])
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, args[0])
				if err != nil {
					return err
				}
				grp, err := c.SetGroupDesired(ctx, id, api.SetDesiredRequest{Desired: n, HonorCooldown: honor})
				if err != nil {
					return c.explain(err)
				}
				if w.wait {
					if grp, err = c.waitGroup(ctx, cmd.ErrOrStderr(), grp.ID, false, w.timeout); err != nil {
						return err
					}
				}
				return printGroups(cmd.OutOrStdout(), out.format, true, grp)
			})
		},
	}
	cmd.Flags().BoolVar(&honor, "honor-cooldown", false, "refuse while the group is in its cooldown")
	w.register(cmd, "runs its desired members")
	out.register(cmd)
	return cmd
}

func newGroupsDeleteCommand(s *session) *cobra.Command {
	var (
		ifMatch string
		w       groupWait
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "delete GROUP",
		Short: "Delete a group and terminate its members",
		Long: "Delete a group, by ID or name: it launches nothing more, its members are\n" +
			"terminated (without a notice: this is your order), and then it is deleted.\n" +
			"Deleting a deleting or deleted group changes nothing.",
		Example: "  gpucloud groups delete web --wait",
		Args:    exactArgs(1, "one group ID or name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			var version int64
			if ifMatch != "" {
				v, err := parseIfMatch(ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%s", strings.Replace(err.Error(), "instance's", "group's", 1))
				}
				version = v
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.groupID(ctx, args[0])
				if err != nil {
					return err
				}
				grp, err := c.DeleteGroup(ctx, id, version)
				if err != nil {
					return c.explain(err)
				}
				if w.wait {
					if grp, err = c.waitGroup(ctx, cmd.ErrOrStderr(), grp.ID, true, w.timeout); err != nil {
						return err
					}
				}
				return printGroups(cmd.OutOrStdout(), out.format, true, grp)
			})
		},
	}
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "delete only if the group's version is still this one")
	w.register(cmd, "is deleted")
	out.register(cmd)
	return cmd
}

// newInstanceProtectCommand builds instances protect and unprotect.
func newInstanceProtectCommand(s *session, protect bool) *cobra.Command {
	verb, short := "protect", "Protect instances from scale-in and idle release"
	long := "Protect instances from scale-in: their group never picks them to scale in or\n" +
		"to release when idle ('gpucloud instances unprotect' lifts it). The workload's\n" +
		"own completion lock is separate and stays as it is."
	if !protect {
		verb, short = "unprotect", "Lift instances' scale-in protection"
		long = "Lift the scale-in protection of instances: their group may pick them again\n" +
			"(unless their workload holds its completion lock)."
	}
	var out outputFlag
	cmd := &cobra.Command{
		Use:     verb + " ID...",
		Short:   short,
		Long:    long,
		Example: fmt.Sprintf("  gpucloud instances %s i-0123456789abcdef", verb),
		Args:    minArgs(1, "one or more instance IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var done []*cloud.Instance
				var failed []error
				for _, id := range args {
					in, err := c.SetProtection(ctx, id, protect)
					if err != nil {
						err = c.explain(err)
						if len(args) > 1 {
							err = fmt.Errorf("%s: %w", id, err)
						}
						failed = append(failed, err)
						continue
					}
					done = append(done, in)
				}
				if len(done) > 0 {
					if err := printInstances(cmd.OutOrStdout(), out.format, done...); err != nil {
						return err
					}
				}
				switch {
				case len(args) == 1 && len(failed) == 1:
					return failed[0]
				case len(failed) > 0:
					return fmt.Errorf("%d of %d instances failed: %w", len(failed), len(args), errors.Join(failed...))
				}
				return nil
			})
		},
		ValidArgsFunction: s.completeInstances(true),
	}
	out.register(cmd)
	return cmd
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
