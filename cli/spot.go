package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

func newSpotCommand(s *session) *cobra.Command {
	requests := groupCommand("requests", "Create, list and cancel spot requests",
		"A spot request asks for capacity in one of its pools (an offering in a zone; the\n"+
			"first is preferred, the others are backups) at the spot price, up to a max\n"+
			"price. A one-time request launches once; a persistent one relaunches after\n"+
			"every interruption until cancelled.",
		newSpotRequestsCreateCommand(s), newSpotRequestsListCommand(s), newSpotRequestsDescribeCommand(s),
		newSpotRequestsCancelCommand(s))
	requests.Aliases = []string{"request", "req"}
	return groupCommand("spot", "Spot prices, pools and requests",
		"The spot market prices each pool (an offering in a zone) by its demand: cheap\n"+
			"while it has room, up to the on-demand price when full. Spot instances may be\n"+
			"reclaimed with a notice.",
		newSpotPricesCommand(s), newSpotPoolsCommand(s), requests)
}

// parsePool reads OFFERING/ZONE (zone may be empty: OFFERING or OFFERING/).
func parsePool(cmd *cobra.Command, flag, v string, zoneRequired bool) (cloud.Pool, error) {
	off, zone, _ := strings.Cut(v, "/")
	if off == "" || zoneRequired && zone == "" {
		return cloud.Pool{}, cmdutil.Usagef(cmd, "--%s %q: want OFFERING/ZONE, e.g. h100.1x/zone-a", flag, v)
	}
	return cloud.Pool{Offering: off, Zone: zone}, nil
}

func newSpotPricesCommand(s *session) *cobra.Command {
	var (
		pools        []string
		since, until string
		limit        int
		out          outputFlag
	)
	cmd := &cobra.Command{
		Use:   "prices [--pool OFFERING/ZONE ...]",
		Short: "Show spot price history",
		Long: "Show the spot price history of some pools (every pool by default), oldest\n" +
			"first: each point is the price per hour from its time until the next point.",
		Example: "  gpucloud spot prices --pool h100.1x/zone-a --since 2h\n  gpucloud spot prices --since 2026-12-01T00:00:00Z -o json",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			o := client.SpotPricesOptions{Limit: limit}
			for _, v := range pools {
				p, err := parsePool(cmd, "pool", v, true)
				if err != nil {
					return err
				}
				o.Pools = append(o.Pools, p)
			}
			var err error
			if o.Since, err = parseWhen(cmd, "since", since); err != nil {
				return err
			}
			if o.Until, err = parseWhen(cmd, "until", until); err != nil {
				return err
			}
			if limit < 0 || limit > 10_000 {
				return cmdutil.Usagef(cmd, "--limit %d: want 1..10000", limit)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				ps, err := c.SpotPrices(ctx, o)
				if err != nil {
					return c.explain(err)
				}
				if ps == nil {
					ps = []cloud.SpotPrice{}
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, ps)
				}
				if len(ps) == 0 {
					_, err := fmt.Fprintln(w, "no spot prices in that window")
					return err
				}
				rows := [][]string{{"TIME", "POOL", "PRICE"}}
				for _, p := range ps {
					rows = append(rows, []string{p.Time.UTC().Format(time.RFC3339), p.Pool.String(), formatPrice(p.Price) + "/h"})
				}
				return writeTable(w, rows)
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&pools, "pool", nil, "only this pool, OFFERING/ZONE (repeatable)")
	f.StringVar(&since, "since", "", "from this time, RFC 3339 or a duration ago such as 2h (default 24h)")
	f.StringVar(&until, "until", "", "until this time, RFC 3339 or a duration ago (default now)")
	f.IntVar(&limit, "limit", 0, "at most this many points (default 1000, at most 10000)")
	out.register(cmd)
	return cmd
}

func newSpotPoolsCommand(s *session) *cobra.Command {
	var (
		out    outputFlag
		window time.Duration
	)
	cmd := &cobra.Command{
		Use:   "pools",
		Short: "Show every pool's current spot price beside its on-demand price, and its reclaim rate",
		Long: "Show every pool's newest spot price beside the on-demand price of its offering in\n" +
			"its zone, and how often its spot instances were reclaimed over the last --window:\n" +
			"RECLAIMS/H is reclaim notices per spot instance-hour (0.05: one in 20 hours),\n" +
			"counted over every tenant's instances; \"-\" when the pool ran no spot instances\n" +
			"in the window. -o json adds the counts (reclaims, spot_seconds) and the rate in\n" +
			"basis points (reclaim_rate_bp).",
		Example: "  gpucloud spot pools\n  gpucloud spot pools --window 24h -o json",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := checkReclaimWindow(cmd, window); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				ps, err := c.SpotPoolsOver(ctx, window)
				if err != nil {
					return c.explain(err)
				}
				if ps == nil {
					ps = []api.SpotPool{}
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, ps)
				}
				if len(ps) == 0 {
					_, err := fmt.Fprintln(w, "no spot pools have a price yet")
					return err
				}
				rows := [][]string{{"POOL", "SPOT", "ON-DEMAND", "SAVING", "RECLAIMS/H", "SINCE"}}
				for _, p := range ps {
					od, saving := "-", "-"
					if p.OnDemand != nil {
						od = formatPrice(*p.OnDemand) + "/h"
						if *p.OnDemand > 0 {
							if bp, err := money.MulDiv(*p.OnDemand-p.Price, 10_000, int64(*p.OnDemand)); err == nil {
								saving = basisPoints(int64(bp))
							}
						}
					}
					rate := "-"
					if p.SpotSeconds > 0 {
						rate = reclaimsPerHour(p.ReclaimRateBP)
					}
					rows = append(rows, []string{p.Pool.String(), formatPrice(p.Price) + "/h", od, saving, rate, ago(p.Time)})
				}
				return writeTable(w, rows)
			})
		},
	}
	cmd.Flags().DurationVar(&window, "window", 7*24*time.Hour, "count reclaims over this long before now, whole seconds up to 720h")
	out.register(cmd)
	return cmd
}

// maxReclaimWindow is the longest window GET /v1/spot/pools counts
// reclaims over.
const maxReclaimWindow = 30 * 24 * time.Hour

// checkReclaimWindow checks a --window flag as the server would.
func checkReclaimWindow(cmd *cobra.Command, d time.Duration) error {
	if d < time.Second || d > maxReclaimWindow || d%time.Second != 0 {
		return cmdutil.Usagef(cmd, "--window %s: want whole seconds from 1s to 720h", d)
	}
	return nil
}

// reclaimsPerHour prints a rate in basis points per hour as a decimal
// number per hour: 310 is "0.031", 500 "0.05", 0 "0".
func reclaimsPerHour(bp int64) string {
	s := strconv.FormatInt(bp/10_000, 10)
	if r := bp % 10_000; r != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%04d", r), "0")
	}
	return s
}

// printSpotRequests prints spot requests as a table or as JSON or YAML.
func printSpotRequests(w io.Writer, format string, one bool, rs ...*cloud.SpotRequest) error {
	return printSpotRequestsOf(w, format, one, nil, rs...)
}

// printSpotRequestsOf is printSpotRequests with the requests' current
// instances (by ID; nil or missing: unknown), whose reclaim notice shows
// in the STATE column ("active (reclaim in 1m32s)") and whose pending
// reason completes the request's.
func printSpotRequestsOf(w io.Writer, format string, one bool, ins map[string]*cloud.Instance, rs ...*cloud.SpotRequest) error {
	now := clockNow()
	return resourceTable[cloud.SpotRequest]{
		none:   "no spot requests",
		header: []string{"ID", "NAME", "TYPE", "STATE", "POOLS", "MAX PRICE", "SUBNET", "INSTANCE", "LAUNCHES", "AGE", "REASON"},
		row: func(r *cloud.SpotRequest) []string {
			state, reason := string(r.State), r.Reason
			if in := ins[r.InstanceID]; in != nil && r.InstanceID != "" {
				if n := instanceNotice(in, now); n != "" {
					state += " (" + n + ")"
				}
				if in.State == cloud.Pending && in.Reason != "" && !strings.Contains(reason, in.Reason) {
					reason = strings.TrimSuffix(cmpOrDash(reason, "pending"), ".") + ": " + in.Reason
				}
			}
			// The reason is last and never cut.
			return []string{r.ID, dash(r.Name), string(r.Type), state, poolList(r.Pools), maxPriceText(r.MaxPrice),
				cmpOrDash(r.Subnet, "default"), dash(r.InstanceID), strconv.Itoa(r.Launches), ago(r.CreatedAt), dash(oneLineText(reason))}
		},
		tenant: func(r *cloud.SpotRequest) string { return r.TenantID },
	}.print(w, format, one, rs...)
}

// liveSpotInstances reads the spot instances of a tenant ("" for every
// one the caller sees) that may still be under a notice or waiting, by ID.
func (c *conn) liveSpotInstances(ctx context.Context, tenant string) (map[string]*cloud.Instance, error) {
	o := client.ListInstancesOptions{Tenant: tenant, Market: cloud.MarketSpot, Limit: 1000,
		States: []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running}}
	out := map[string]*cloud.Instance{}
	for {
		page, err := c.ListInstances(ctx, o)
		if err != nil {
			return nil, err
		}
		for _, in := range page.Instances {
			out[in.ID] = in
		}
		if page.Next == "" {
			return out, nil
		}
		o.After = page.Next
	}
}

// poolList renders pools as "h100.1x/a, l40s.1x/*" (* is any zone).
func poolList(ps []cloud.Pool) string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Offering + "/" + cmpOrDash(p.Zone, "*")
	}
	return strings.Join(names, ", ")
}

func maxPriceText(m money.Micros) string {
	if m == 0 {
		return "on-demand"
	}
	return formatPrice(m) + "/h"
}

func newSpotRequestsCreateCommand(s *session) *cobra.Command {
	var (
		f   spotCreateFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create --offering NAME [--zone Z] [flags] [-- COMMAND ARGS...]",
		Short: "Request spot capacity",
		Long: "Create a spot request for an offering in a zone (any zone when left out), with\n" +
			"backup pools to use when the first has no room, and launch its first instance.\n" +
			"The max price defaults to the on-demand price. On interruption the instance is\n" +
			"terminated, or with --interruption stop stopped with its volumes (for one-time\n" +
			"and persistent requests alike). With --subnet every launch is on that subnet, in\n" +
			"its zone (give pools in that zone or without one), with the --security-group\n" +
			"groups; without it, on the tenant's default network.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given):\n" +
			"a retry with the same key answers the request the first call made.",
		Example: strings.Join([]string{
			"  gpucloud spot requests create --offering h100.1x --zone a -- python train.py",
			"  gpucloud spot requests create --offering h100.1x --image ghcr.io/acme/train:1 -- python /app/train.py",
			"  gpucloud spot requests create --offering h100.1x --subnet subnet-0123 --security-group sg-0123 -- python train.py",
			"  gpucloud spot requests create --offering h100.1x --zone a --backup h100.1x/b --backup a100.1x/a \\",
			"      --persistent --max-price 1.20 --interruption stop --volume v-0123 -- python train.py --resume",
		}, "\n"),
		Args: commandAfterDash,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := f.request(cmd, args); err != nil {
				return err
			}
			return createResource(s, cmd, &f.key, &f.req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.SpotRequest, error) {
					return c.CreateSpotRequest(ctx, f.req, key)
				},
				printSpotRequests)
		},
	}
	f.register(cmd)
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	_ = cmd.RegisterFlagCompletionFunc("interruption", cobra.FixedCompletions([]string{"terminate", "stop"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// spotCreateFlags are the flags of spot requests create that make its
// request.
type spotCreateFlags struct {
	req                api.CreateSpotRequestRequest
	offering, zone     string
	backups, env, tags []string
	persistent         bool
	maxPrice           moneyFlag
	key                string
}

func (f *spotCreateFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.offering, "offering", "", "the offering to rent; required")
	fs.StringVar(&f.zone, "zone", "", "the zone of the first pool (default any zone)")
	fs.StringArrayVar(&f.backups, "backup", nil, "a backup pool OFFERING/ZONE, in order of preference (repeatable)")
	fs.BoolVar(&f.persistent, "persistent", false, "relaunch after every interruption until cancelled")
	fs.Var(&f.maxPrice, "max-price", "the most to pay per hour (default the on-demand price)")
	fs.StringVar(&f.req.Interruption, "interruption", "", "on reclaim: terminate (default) or stop")
	fs.StringVar(&f.req.Name, "name", "", "a name for the request and its instances")
	fs.StringVar(&f.req.Image, "image", "", `the OCI image every launch runs in, e.g. "python:3.12" (default: the hosts' default image)`)
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE for the workload (repeatable)")
	fs.StringSliceVar(&f.req.Volumes, "volume", nil, "ID of a detached volume to attach to every launch (repeatable)")
	fs.StringArrayVar(&f.tags, "tag", nil, "tag KEY=VALUE (repeatable)")
	fs.StringVar(&f.req.Subnet, "subnet", "", "the ID of a subnet every launch is put in (default: the tenant's default subnet, any zone); its zone must suit every pool")
	fs.StringArrayVar(&f.req.SecurityGroups, "security-group", nil, "the ID of a security group of the subnet's network for every launch (repeatable, 1 to 5; default: the network's default group)")
	fs.StringVar(&f.req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	fs.StringVar(&f.key, "idempotency-key", "", "retry key: the same key returns the same request (default: a random UUID)")
}

// request completes f.req from the flags and the workload's command (args).
func (f *spotCreateFlags) request(cmd *cobra.Command, args []string) error {
	if f.offering == "" {
		return cmdutil.Usagef(cmd, "--offering is required ('gpucloud offerings' lists them)")
	}
	f.req.Pools = []cloud.Pool{{Offering: f.offering, Zone: f.zone}}
	for _, b := range f.backups {
		p, err := parsePool(cmd, "backup", b, false)
		if err != nil {
			return err
		}
		f.req.Pools = append(f.req.Pools, p)
	}
	if f.persistent {
		f.req.Type = cloud.SpotPersistent
	}
	if f.maxPrice.set {
		v := f.maxPrice.v
		f.req.MaxPrice = &v
	}
	if f.req.Interruption != "" && !slices.Contains([]string{cloud.ActionTerminate, cloud.ActionStop}, f.req.Interruption) {
		return cmdutil.Usagef(cmd, "--interruption %q: want terminate or stop", f.req.Interruption)
	}
	var err error
	if f.req.Env, err = keyValues(cmd, "env", f.env); err != nil {
		return err
	}
	if f.req.Tags, err = keyValues(cmd, "tag", f.tags); err != nil {
		return err
	}
	f.req.Command = args
	warnRelativeCommand(cmd.ErrOrStderr(), f.req.Command)
	return nil
}

// spotStates are the values of --state.
var spotStates = []string{"open", "active", "disabled", "closed", "cancelled"}

func newSpotRequestsListCommand(s *session) *cobra.Command {
	cmd := newStateListCommand(s, "List spot requests", "only this tenant's requests, by name or ID (admins)", spotStates,
		func(ctx context.Context, cmd *cobra.Command, c *conn, t string, want []cloud.SpotRequestState, format string) error {
			rs, err := c.SpotRequests(ctx, t, want...)
			if err != nil {
				return c.explain(err)
			}
			if rs == nil {
				rs = []*cloud.SpotRequest{}
			}
			var ins map[string]*cloud.Instance
			if format == "table" && len(rs) > 0 {
				// Without the instances the table still lists the
				// requests, only without their notices.
				if ins, err = c.liveSpotInstances(ctx, t); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: cannot read the requests' instances, so reclaim notices are not shown: %v\n", c.explain(err))
				}
			}
			return printSpotRequestsOf(cmd.OutOrStdout(), format, false, ins, rs...)
		})
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(spotStates, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func newSpotRequestsDescribeCommand(s *session) *cobra.Command {
	return newDescribeCommand(s, "Show a spot request", spotRequestKind,
		func(ctx context.Context, c *conn, id string) (*cloud.SpotRequest, error) {
			return c.GetSpotRequest(ctx, id)
		},
		func(ctx context.Context, c *conn, r *cloud.SpotRequest) fieldRows {
			var f fieldRows
			f.add("ID", r.ID)
			f.add("Name", dash(r.Name))
			f.add("Tenant", r.TenantID)
			f.add("Type", string(r.Type))
			f.add("State", string(r.State))
			f.add("Reason", dash(r.Reason))
			f.add("Pools", poolList(r.Pools))
			f.add("Max price", maxPriceText(r.MaxPrice))
			f.add("Interruption", r.Interruption)
			inst := dash(r.InstanceID)
			if r.InstanceID != "" {
				// The instance's state and notice, when it can be read.
				if in, err := c.GetInstance(ctx, r.InstanceID); err == nil {
					inst += ": " + stateText(in, clockNow())
				}
			}
			f.add("Instance", inst)
			f.add("Launches", strconv.Itoa(r.Launches))
			f.add("Image", imageText(r.Image))
			f.add("Command", dash(shellJoin(r.Command)))
			f.add("Env", dash(joinMap(r.Env)))
			f.add("Volumes", dash(strings.Join(r.Volumes, ", ")))
			f.add("Tags", dash(joinMap(r.Tags)))
			f.add("Subnet", cmpOrDash(r.Subnet, "the tenant's default subnet"))
			f.add("Security groups", cmpOrDash(strings.Join(r.SecurityGroups, ", "), "the network's default group"))
			f.add("Version", strconv.FormatInt(r.Version, 10))
			f.add("Created", stamp(r.CreatedAt))
			f.add("Updated", stamp(r.UpdatedAt))
			return f
		})
}

func newSpotRequestsCancelCommand(s *session) *cobra.Command {
	var (
		kill    bool
		ifMatch string
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   "cancel ID [--terminate-instance]",
		Short: "Cancel a spot request",
		Long: "Cancel a spot request: it launches nothing more. Its current instance keeps\n" +
			"running unless --terminate-instance is given. Cancelling a cancelled or closed\n" +
			"request changes nothing.",
		Args: exactArgs(1, spotRequestKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var version int64
			if ifMatch != "" {
				v, err := parseIfMatch(ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%s", strings.Replace(err.Error(), "instance's", "request's", 1))
				}
				version = v
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.resolve(ctx, spotRequestKind, args[0])
				if err != nil {
					return err
				}
				r, err := c.CancelSpotRequest(ctx, id, kill, version)
				if err != nil {
					return c.explain(err)
				}
				return printSpotRequests(cmd.OutOrStdout(), out.format, true, r)
			})
		},
	}
	cmd.Flags().BoolVar(&kill, "terminate-instance", false, "also terminate the request's current instance")
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "fail unless the request is still at this version")
	out.register(cmd)
	return cmd
}
