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
// groups the caller sees that are not deleted (resolve).
func (c *conn) groupID(ctx context.Context, arg string) (string, error) {
	return c.resolve(ctx, groupKind, arg)
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
			req, err := g.createRequest(cmd, names, command)
			if err != nil {
				return err
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
	return newStateListCommand(s, "List autoscaling groups (not deleted ones unless --state says)",
		"only this tenant's groups, by name or ID (admins)", groupStates,
		func(ctx context.Context, cmd *cobra.Command, c *conn, t string, want []cloud.GroupState, format string) error {
			gs, err := c.Groups(ctx, t, want...)
			if err != nil {
				return c.explain(err)
			}
			if gs == nil {
				gs = []*cloud.Group{}
			}
			return printGroups(cmd.OutOrStdout(), format, false, gs...)
		})
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
		Args:    minArgs(1, "one or more instance IDs or names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var done []*cloud.Instance
				var failed []error
				for _, arg := range args {
					id, err := c.resolve(ctx, instanceKind, arg)
					var in *cloud.Instance
					if err == nil {
						in, err = c.SetProtection(ctx, id, protect)
						err = c.explain(err)
					}
					if err != nil {
						if len(args) > 1 {
							err = fmt.Errorf("%s: %w", arg, err)
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
