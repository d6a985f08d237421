package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

// groupFlags are the flags that describe a group, shared by create and
// update.
type groupFlags struct {
	file                                    string
	offerings, zones, labels, env, tags     []string
	image                                   string
	min, max, desired                       int
	targetGPU, targetCPU                    float64
	targetMetrics, schedules                []string
	predictive, gpucloud                    string
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
	"predictive", "gpucloud", "no-policies", "spot", "capacity-rebalance", "on-demand-base", "on-demand-percent", "max-spot-price-ratio",
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
	f.StringVar(&g.gpucloud, "gpucloud", "", "the gpucloud policy on METRIC=VALUE per member, e.g. custom:demand_gpus=8 or gpu_utilization=0.9: a forecast over the boot time with its own error margin, and a reactive floor")
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
	if g.gpucloud != "" {
		i := strings.LastIndex(g.gpucloud, "=")
		if i <= 0 {
			return nil, cmdutil.Usagef(cmd, "--gpucloud %q: want METRIC=VALUE, e.g. custom:demand_gpus=8", g.gpucloud)
		}
		metric, v := g.gpucloud[:i], g.gpucloud[i+1:]
		target, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return nil, cmdutil.Usagef(cmd, "--gpucloud %q: %q is not a number", g.gpucloud, v)
		}
		switch metric {
		case cloud.MetricGPUUtilization, cloud.MetricCPUUtilization, cloud.MetricGPUOrCPU:
		default:
			if !strings.HasPrefix(metric, cloud.CustomMetricPrefix) {
				metric = cloud.CustomMetricPrefix + metric
			}
		}
		ps = append(ps, cloud.ScalingPolicy{Name: "gpucloud", Type: cloud.PolicyGPUCloud, Metric: metric, Target: target})
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
	if changed(cmd, "target-gpu", "target-cpu", "target-metric", "schedule", "predictive", "gpucloud") {
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

// createRequest is the request of groups create: read from -f FILE (the
// name from NAME when given), or made of the flags, NAME and the command
// after "--".
func (g *groupFlags) createRequest(cmd *cobra.Command, names, command []string) (api.CreateGroupRequest, error) {
	var req api.CreateGroupRequest
	if g.file != "" {
		if command != nil {
			return req, cmdutil.Usagef(cmd, "-f %s and a command after \"--\" do not mix: put the command in the file", g.file)
		}
		if err := readBody(cmd, g.file, &req); err != nil {
			return req, err
		}
		if len(names) == 1 {
			req.Name = names[0]
		}
		if req.Name == "" {
			return req, cmdutil.Usagef(cmd, "the group needs a name: give NAME or name: in %s", g.file)
		}
	} else {
		if len(names) == 0 {
			return req, cmdutil.Usagef(cmd, "give the group's NAME")
		}
		if len(g.offerings) == 0 {
			return req, cmdutil.Usagef(cmd, "--offering is required ('gpucloud offerings' lists them; repeat it for fallbacks)")
		}
		if !changed(cmd, "min") || !changed(cmd, "max") {
			return req, cmdutil.Usagef(cmd, "--min and --max are required")
		}
		var err error
		req = api.CreateGroupRequest{Name: names[0], Min: g.min, Max: g.max}
		if changed(cmd, "desired") {
			d := g.desired
			req.Desired = &d
		}
		if req.Template, err = g.template(cmd, cloud.GroupTemplate{}, command); err != nil {
			return req, err
		}
		if req.Policies, err = g.policies(cmd); err != nil {
			return req, err
		}
		if req.Mixed, err = g.mixed(cmd); err != nil {
			return req, err
		}
		if req.Timing, err = g.timing(cmd, cloud.GroupTiming{}); err != nil {
			return req, err
		}
		req.BudgetPerHour = g.budget.v
		if g.idle != "" {
			if req.IdleRelease, err = parseIdleRelease(cmd, g.idle); err != nil {
				return req, err
			}
		}
	}
	return req, nil
}
