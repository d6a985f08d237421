package cli

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

// allStates lists the instance states in lifecycle order, for --state.
var allStates = []cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running,
	cloud.Stopping, cloud.Stopped, cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}

// defaultWaitTimeout is how long --wait waits unless --timeout says.
const defaultWaitTimeout = 5 * time.Minute

func newInstancesCommand(s *session) *cobra.Command {
	cmd := groupCommand("instances", "Create, list and manage GPU instances",
		"Create instances of an offering, follow them through their lifecycle\n"+
			"(pending, scheduled, starting, running, stopping, stopped, terminated), and\n"+
			"read their events and output.",
		newInstancesCreateCommand(s), newInstancesListCommand(s), newInstancesDescribeCommand(s),
		newInstanceActionCommand(s, "stop"), newInstanceActionCommand(s, "start"), newInstanceActionCommand(s, "terminate"),
		newInstancesEventsCommand(s), newInstancesLogsCommand(s),
		newInstancesExecCommand(s), newInstancesPortForwardCommand(s), newInstancesOpenCommand(s),
		newInstancesSSHCommand(s), newInstancesSSHProxyCommand(s), newCopyCommand(s, instanceKind))
	cmd.Aliases = []string{"instance", "i"}
	return cmd
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

func newInstancesCreateCommand(s *session) *cobra.Command {
	var (
		f   instanceCreateFlags
		w   waitFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create --offering NAME [flags] [-- COMMAND ARGS...]",
		Short: "Create an instance",
		Long: "Create an instance of an offering ('gpucloud offerings' lists them). It starts\n" +
			"pending; the scheduler places it on a host and the host's agent runs the\n" +
			"command given after \"--\" with exactly the allocated GPUs visible.\n\n" +
			"Every call sends an Idempotency-Key: a retry with the same key returns the\n" +
			"instance the first call created instead of creating another. The default key\n" +
			"is random, so running the command twice creates two instances; pass\n" +
			"--idempotency-key to make a script's retries safe.\n\n" +
			"With --wait the command returns once the instance runs, and fails (exit 1)\n" +
			"if it fails, stops or is terminated first, or at --timeout.\n\n" +
			"--image names the OCI image the command runs in (\"python:3.12\" is\n" +
			"docker.io/library/python:3.12); without it the workload runs in the default\n" +
			"image the operator configured on the hosts. Hosts pull images from their\n" +
			"registry, or an operator imports them (gpucloud images import). Hosts that run\n" +
			"workloads as plain processes (single-tenant development mode) use no image.",
		Example: strings.Join([]string{
			"  gpucloud instances create --offering h100.1x --name train -- python train.py --epochs 3",
			"",
			"  # In an image of your own",
			"  gpucloud instances create --offering h100.1x --image ghcr.io/acme/train:1 -- python /app/train.py",
			"",
			"  # Two zones allowed, a driver constraint, environment, and wait until running",
			"  gpucloud instances create --offering h100.mig.3g.40gb --zone a --zone b \\",
			"      --label 'driver>=550' --env HF_HOME=/data/hf --volume v-0123 --wait",
			"",
			"  # Jupyter through the server, at its own base URL (gpucloud instances open ID 8888)",
			"  gpucloud instances create --offering h100.1x --image jupyter/base-notebook --publish 8888/keep-prefix -- \\",
			"      sh -c 'exec jupyter lab --ip 127.0.0.1 --ServerApp.base_url=/v1/instances/$GPUCLOUD_INSTANCE_ID/ports/8888/'",
			"",
			"  # Safe to retry from a script",
			"  gpucloud instances create --offering l40s.shared.0.25 --idempotency-key job-42 -o json",
		}, "\n"),
		Args: commandAfterDash,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			if f.req.Offering == "" {
				return cmdutil.Usagef(cmd, "--offering is required ('gpucloud offerings' lists them)")
			}
			var err error
			if f.req.Env, err = keyValues(cmd, "env", f.env); err != nil {
				return err
			}
			if f.req.Tags, err = keyValues(cmd, "tag", f.tags); err != nil {
				return err
			}
			if f.req.Publish, f.req.PublishKeepPrefix, err = parsePublish(f.publish); err != nil {
				return cmdutil.Usagef(cmd, "--publish: %v", err)
			}
			f.req.Command = args
			warnRelativeCommand(cmd.ErrOrStderr(), f.req.Command)
			if f.key == "" {
				f.key = newUUID()
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			if f.req.Tenant, err = c.tenantID(ctx, f.req.Tenant); err != nil {
				return err
			}
			if f.count < 1 || f.count > 100 {
				return cmdutil.Usagef(cmd, "--count %d: want 1..100", f.count)
			}
			if f.count > 1 && len(f.req.Volumes) > 0 {
				return cmdutil.Usagef(cmd, "--volume attaches to one instance: it cannot go with --count %d", f.count)
			}
			if f.req.Volumes, err = c.resolveAll(ctx, volumeKind, f.req.Volumes); err != nil {
				return err
			}
			made, err := c.createInstances(ctx, cmd.OutOrStdout(), out.format, f.req, f.key, f.count)
			if err != nil {
				return err
			}
			if w.wait {
				for i, in := range made {
					if made[i], err = c.waitFor(ctx, cmd.ErrOrStderr(), in, cloud.Running, w.timeout); err != nil {
						return err
					}
				}
			}
			return printInstances(cmd.OutOrStdout(), out.format, made...)
		},
	}
	f.register(cmd)
	w.register(cmd, "running")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// instanceCreateFlags are the flags of instances create that make its
// request.
type instanceCreateFlags struct {
	req                api.CreateInstanceRequest
	count              int
	env, tags, publish []string
	key                string
}

func (f *instanceCreateFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.req.Offering, "offering", "", "the offering (instance type) to rent; required")
	fs.IntVar(&f.count, "count", 1, "how many identical instances to create (1..100)")
	fs.StringVar(&f.req.Name, "name", "", "a name for the instance (letters, digits, '-', '_', '.')")
	fs.StringVar(&f.req.Image, "image", "", `the OCI image the command runs in, e.g. "python:3.12" or "ghcr.io/acme/train:1" (default: the hosts' default image)`)
	fs.StringSliceVar(&f.req.Zones, "zone", nil, "allowed zone (repeat or comma-separate for several)")
	fs.StringArrayVar(&f.req.Labels, "label", nil, `host label selector such as "driver>=550" or "!maintenance" (repeatable)`)
	fs.StringVar(&f.req.PlacementGroup, "placement-group", "", "the ID of a placement group to place it in (gpucloud placement-groups create)")
	fs.StringVar(&f.req.Subnet, "subnet", "", "the ID of a subnet to put it in (default: the tenant's default subnet, any zone)")
	fs.StringArrayVar(&f.req.SecurityGroups, "security-group", nil, "the ID of a security group of the subnet's network (repeatable, 1 to 5; default: the network's default group)")
	fs.StringSliceVar(&f.publish, "publish", nil, "a TCP port inside the instance to open as HTTP through the server, PORT or PORT/keep-prefix "+
		"(the path keeps /v1/instances/ID/ports/PORT: for Jupyter or TensorBoard given it as their base URL); repeatable, at most 8; gpucloud instances open ID PORT")
	fs.StringArrayVar(&f.env, "env", nil, "environment variable KEY=VALUE for the workload (repeatable)")
	fs.StringSliceVar(&f.req.Volumes, "volume", nil, "ID or name of a detached volume to attach (repeatable)")
	fs.StringArrayVar(&f.tags, "tag", nil, "tag KEY=VALUE (repeatable)")
	fs.StringVar(&f.req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	fs.StringVar(&f.key, "idempotency-key", "", "retry key: the same key returns the same instance (default: a random UUID)")
}

// createInstances creates count copies of req (each with its own name and
// key, derived from req's and key, so that retrying the whole command
// stays safe). When one fails, those made before it are printed in format
// on out, and the error is returned explained.
func (c *conn) createInstances(ctx context.Context, out io.Writer, format string, req api.CreateInstanceRequest, key string, count int) ([]*cloud.Instance, error) {
	var made []*cloud.Instance
	for i := 0; i < count; i++ {
		k, r := key, req
		if count > 1 {
			// Each copy gets its own key, derived from the given one so
			// that retrying the whole command stays safe.
			if k != "" {
				k = fmt.Sprintf("%s-%d", key, i)
			}
			if r.Name != "" {
				r.Name = fmt.Sprintf("%s-%d", req.Name, i)
			}
		}
		in, err := c.CreateInstance(ctx, r, k)
		if err != nil {
			if len(made) > 0 {
				_ = printInstances(out, format, made...)
			}
			return nil, c.explain(err)
		}
		made = append(made, in)
	}
	return made, nil
}

func newInstancesListCommand(s *session) *cobra.Command {
	var (
		states               []string
		offering, tenant, hn string
		out                  outputFlag
	)
	names := make([]string, len(allStates))
	for i, st := range allStates {
		names[i] = string(st)
	}
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List instances",
		Long: "List instances, oldest ID first. Members see their tenant's; admins see every\n" +
			"tenant's (a TENANT column then appears when there are several), or one\n" +
			"tenant's with --tenant.",
		Example: strings.Join([]string{
			"  gpucloud instances list",
			"  gpucloud instances list --state pending,running --offering h100.1x",
			"  gpucloud instances list --tenant tn-0123456789abcdef -o json",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			o := client.ListInstancesOptions{Tenant: tenant, Offering: offering, Host: hn, Limit: 1000}
			var err error
			if o.States, err = parseStates[cloud.State](cmd, states, names); err != nil {
				return err
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			if o.Tenant, err = c.tenantID(ctx, o.Tenant); err != nil {
				return err
			}
			all := []*cloud.Instance{}
			for {
				page, err := c.ListInstances(ctx, o)
				if err != nil {
					return c.explain(err)
				}
				all = append(all, page.Instances...)
				if page.Next == "" {
					break
				}
				o.After = page.Next
			}
			if !out.table() {
				return writeData(cmd.OutOrStdout(), out.format, all)
			}
			if len(all) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no instances")
				return nil
			}
			return printInstances(cmd.OutOrStdout(), "table", all...)
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only these states, comma-separated: "+strings.Join(names, ", "))
	f.StringVar(&offering, "offering", "", "only instances of this offering")
	f.StringVar(&tenant, "tenant", "", "only this tenant's instances, by name or ID (admins)")
	f.StringVar(&hn, "host", "", "only instances on this host")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(names, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("offering", s.completeOfferings)
	return cmd
}

// printInstances prints instances as a table (one row each) or as JSON or
// YAML: one instance as an object, several as a list.
func printInstances(w io.Writer, format string, ins ...*cloud.Instance) error {
	if format != "table" {
		if len(ins) == 1 {
			return writeData(w, format, ins[0])
		}
		return writeData(w, format, ins)
	}
	tenants := false
	for _, in := range ins {
		tenants = tenants || in.TenantID != ins[0].TenantID
	}
	header := []string{"ID", "NAME", "OFFERING", "MARKET", "STATE", "HOST", "AGE", "REASON"}
	if tenants {
		header = append([]string{"TENANT"}, header...)
	}
	rows := [][]string{header}
	now := clockNow()
	for _, in := range ins {
		// The reason is the last column and is never cut: a pending
		// instance's reason is the whole answer to "why is it waiting?".
		market := in.Market
		if market == "" {
			market = cloud.MarketOnDemand
		}
		row := []string{in.ID, dash(in.Name), in.Offering, string(market), stateText(in, now), dash(in.HostID), ago(in.CreatedAt), dash(oneLineText(in.Reason))}
		if tenants {
			row = append([]string{in.TenantID}, row...)
		}
		rows = append(rows, row)
	}
	return writeTable(w, rows)
}

// stateText is an instance's state for a table, with the notice it is
// under: "running (reclaim in 1m32s)", "running (scale-in in 30s)".
func stateText(in *cloud.Instance, now time.Time) string {
	if n := instanceNotice(in, now); n != "" {
		return string(in.State) + " (" + n + ")"
	}
	return string(in.State)
}

// instanceNotice says, for an instance whose workload still runs, what notice
// it is under and how long is left: "reclaim in 1m32s" (a spot reclaim),
// "scale-in in 30s" (its group's notice), "reclaim due" once the deadline
// has passed, "rebalance recommended"; "" for none.
func instanceNotice(in *cloud.Instance, now time.Time) string {
	it := in.Interruption
	if it == nil || finished(in.State) || in.State == cloud.Terminating || in.State == cloud.Stopping {
		return ""
	}
	if it.Action == "" {
		return "rebalance recommended"
	}
	what := "reclaim"
	if cloud.IsGroupNotice(it.Reason) {
		what = "scale-in"
	}
	if left := it.Deadline.Sub(now); left > 0 {
		return what + " in " + shortDuration(left)
	}
	return what + " due"
}

// shortDuration renders a duration rounded up to the second without zero
// parts: "1m32s", "2m", "45s", "1h5m".
func shortDuration(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	h, m, sec := secs/3600, secs%3600/60, secs%60
	var b strings.Builder
	if h > 0 {
		fmt.Fprintf(&b, "%dh", h)
	}
	if m > 0 {
		fmt.Fprintf(&b, "%dm", m)
	}
	if sec > 0 || b.Len() == 0 {
		fmt.Fprintf(&b, "%ds", sec)
	}
	return b.String()
}

// oneLineText keeps a free-text value on one table row.
func oneLineText(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func newInstancesDescribeCommand(s *session) *cobra.Command {
	var (
		out    outputFlag
		events int
	)
	cmd := &cobra.Command{
		Use:     "describe ID",
		Aliases: []string{"show", "get"},
		Short:   "Show everything about an instance",
		Long: "Show an instance: its offering, state and the reason for it (while pending,\n" +
			"why no host fits: \"0/8 hosts available: ...\"; when failed, the exit status),\n" +
			"the workload, the host and the exact GPUs or MIG slices it holds, and its\n" +
			"last events.\n\n" +
			"-o json and -o yaml print the instance with an \"events\" list added.",
		Example: "  gpucloud instances describe i-0123456789abcdef\n  gpucloud instances describe i-0123456789abcdef -o yaml --events 50",
		Args:    exactArgs(1, instanceKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if events < 0 {
				return cmdutil.Usagef(cmd, "--events %d: want 0 or more", events)
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			id, err := c.resolve(ctx, instanceKind, args[0])
			if err != nil {
				return err
			}
			in, err := c.GetInstance(ctx, id)
			if err != nil {
				return c.explain(err)
			}
			evs, err := c.allEvents(ctx, in.ID)
			if err != nil {
				return c.explain(err)
			}
			evs = evs[max(len(evs)-events, 0):]
			if !out.table() {
				return writeData(cmd.OutOrStdout(), out.format, struct {
					*cloud.Instance
					Events []*cloud.Event `json:"events"`
				}{in, evs})
			}
			return describeInstance(cmd.OutOrStdout(), in, evs, c.publicAddress(ctx, in), c.portURLs(in))
		},
		ValidArgsFunction: s.completeInstances(false),
	}
	cmd.Flags().IntVar(&events, "events", 10, "how many of the last events to show")
	out.register(cmd)
	return cmd
}

// publicAddress is the public address associated with an instance, or
// "" (none, or the addresses cannot be read).
func (c *conn) publicAddress(ctx context.Context, in *cloud.Instance) string {
	as, err := c.Addresses(ctx, in.TenantID, false)
	if err != nil {
		return ""
	}
	for _, a := range as {
		if a.InstanceID == in.ID {
			return a.IP
		}
	}
	return ""
}

// describeInstance writes the detail view of an instance, with the public
// address associated with it (public; "" for none).
func describeInstance(w io.Writer, in *cloud.Instance, evs []*cloud.Event, public string, ports []string) error {
	var rows fieldRows
	add := rows.add
	add("ID", in.ID)
	add("Name", dash(in.Name))
	add("Tenant", in.TenantID)
	add("Offering", in.Offering)
	market := string(in.Market)
	if market == "" {
		market = string(cloud.MarketOnDemand)
	}
	if in.SpotRequestID != "" {
		market += " (request " + in.SpotRequestID + ")"
	}
	add("Market", market)
	now := clockNow()
	add("State", stateText(in, now))
	add("Reason", dash(in.Reason))
	if it := in.Interruption; it != nil {
		if it.Action != "" {
			why := it.Reason
			if it.For != "" {
				why += " for " + it.For
			}
			add("Interruption", fmt.Sprintf("%s at %s (%s; %s), noticed %s", it.Action, it.Deadline.UTC().Format(time.RFC3339),
				relative(it.Deadline, now), why, stamp(it.NoticedAt)))
		} else {
			add("Interruption", "rebalance recommended "+stamp(it.NoticedAt))
		}
	}
	add("Version", strconv.FormatInt(in.Version, 10))
	add("Created", stamp(in.CreatedAt))
	add("Updated", stamp(in.UpdatedAt))
	add("Zones", dash(strings.Join(in.Zones, ", ")))
	if in.Zone != "" {
		add("Placed in", in.Zone)
	}
	add("Labels", dash(strings.Join(in.Labels, ", ")))
	if in.PlacementGroupID != "" {
		add("Placement group", in.PlacementGroupID)
	}
	add("Tags", dash(joinMap(in.Tags)))
	add("Image", imageText(in.Image))
	add("Command", dash(shellJoin(in.Command)))
	add("Env", dash(joinMap(in.Env)))
	add("Volumes", dash(strings.Join(in.Volumes, ", ")))
	add("Network", dash(in.NetworkID))
	add("Subnet", dash(in.SubnetID))
	add("Security groups", dash(strings.Join(in.SecurityGroupIDs, ", ")))
	add("Private address", dash(in.PrivateAddress))
	add("Public address", dash(public))
	add("Published ports", dash(strings.Join(ports, ", ")))
	add("Host", dash(in.HostID))
	if p := in.Placement; p != nil {
		add("Allocation", allocationSummary(p))
	}
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if p := in.Placement; p != nil && len(p.Devices) > 0 {
		fmt.Fprintln(w, "Devices:")
		rows := [][]string{{"  GPU", "VISIBLE UUID", "KIND", "DETAIL"}}
		for _, d := range p.Devices {
			// The workload's UUID (a MIG slice's own MIG-... one) once the
			// agent reported it; until then the GPU's.
			uuid := d.VisibleUUID
			if uuid == "" {
				uuid = d.UUID
				if d.Kind == fleet.MIGSlice && uuid != "" {
					uuid += " (parent GPU; its agent has not reported the slice's MIG UUID yet)"
				}
			}
			rows = append(rows, []string{"  " + strconv.Itoa(d.GPU), dash(uuid), string(d.Kind), deviceDetail(d)})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	if len(evs) == 0 {
		fmt.Fprintln(w, "Events: none")
		return nil
	}
	fmt.Fprintln(w, "Events:")
	return writeEvents(w, evs, "  ")
}

// warnRelativeCommand notes on stderr that a workload's program given as
// a relative path ("./train", "bin/train") is looked up in the instance's
// working directory on its host (the first volume, else a directory of
// the instance's own), not in the directory this command runs in; and
// when the file exists here, which absolute path to give instead.
func warnRelativeCommand(stderr io.Writer, command []string) {
	if len(command) == 0 {
		return
	}
	prog := command[0]
	if !strings.Contains(prog, "/") || filepath.IsAbs(prog) {
		return
	}
	msg := fmt.Sprintf("note: %s is relative to the instance's working directory on its host (its first volume, else a directory of its own), not to this directory", prog)
	if abs, err := filepath.Abs(prog); err == nil {
		if fi, err := os.Stat(abs); err == nil && fi.Mode().IsRegular() {
			msg += "; to run this file, give " + abs
		}
	}
	fmt.Fprintln(stderr, msg)
}

// relative says how far t is from now: "in 1m32s", "45s ago".
func relative(t, now time.Time) string {
	if d := t.Sub(now); d > 0 {
		return "in " + shortDuration(d)
	}
	return shortDuration(now.Sub(t)) + " ago"
}

// allocationSummary says what a placement holds: "2 GPUs, 52 vCPUs, 512 GiB".
func allocationSummary(p *fleet.Placement) string {
	var parts []string
	if p.Metal {
		parts = append(parts, "whole host")
	}
	if n := len(p.Devices); n > 0 {
		parts = append(parts, plural(n, "device", "devices"))
	}
	parts = append(parts, strconv.FormatFloat(float64(p.CPUMilli)/1000, 'f', -1, 64)+" vCPUs", formatMiB(p.MemoryMiB))
	return strings.Join(parts, ", ")
}

// deviceDetail describes the part of a GPU a device takes.
func deviceDetail(d fleet.Device) string {
	switch d.Kind {
	case fleet.MIGSlice:
		s := fmt.Sprintf("MIG %s on GPU %d (profile %d, memory slots %d-%d, %d compute slices)", d.MIGProfile, d.GPU, d.MIGProfileID,
			d.MIGStart, d.MIGStart+d.MIGSlots-1, d.MIGSlices)
		if d.VisibleUUID != "" && d.UUID != "" {
			s += ", parent " + d.UUID
		}
		if d.EnableMIG {
			s += ", enables MIG"
		}
		return s
	case fleet.Share:
		return strconv.FormatFloat(float64(d.Milli)/1000, 'f', -1, 64) + " GPU, " + formatMiB(d.MemoryMiB)
	case fleet.Partition:
		return fmt.Sprintf("%s partition %d of %d on GPU %d", d.Partition, d.Part, d.Parts, d.GPU)
	case fleet.VF:
		return fmt.Sprintf("VF %d of %d on GPU %d", d.Part, d.Parts, d.GPU)
	}
	return "whole GPU"
}

// joinMap renders a map as "k=v, k2=v2" in key order.
func joinMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ", ")
}

// shellJoin renders a command so that it can be pasted into a shell.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// allEvents reads every event of an instance, oldest first.
func (c *conn) allEvents(ctx context.Context, id string) ([]*cloud.Event, error) {
	return readEvents(func(o client.EventsOptions) (*api.EventList, error) { return c.InstanceEvents(ctx, id, o) })
}

// allVolumeEvents reads every event of a volume, oldest first.
func (c *conn) allVolumeEvents(ctx context.Context, id string) ([]*cloud.Event, error) {
	return readEvents(func(o client.EventsOptions) (*api.EventList, error) { return c.VolumeEvents(ctx, id, o) })
}

// readEvents reads every page that read answers, oldest first.
func readEvents(read func(client.EventsOptions) (*api.EventList, error)) ([]*cloud.Event, error) {
	all := []*cloud.Event{}
	o := client.EventsOptions{Limit: 1000}
	for {
		page, err := read(o)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if page.Next == "" {
			return all, nil
		}
		o.After = page.Next
	}
}

// writeEvents writes events as a table, each row starting with indent.
func writeEvents(w io.Writer, evs []*cloud.Event, indent string) error {
	rows := [][]string{{indent + "TIME", "EVENT", "STATE", "ACTOR", "REASON"}}
	for _, e := range evs {
		state := "-"
		switch {
		case e.From != "" && e.To != "":
			state = string(e.From) + " -> " + string(e.To)
		case e.To != "":
			state = string(e.To)
		}
		rows = append(rows, []string{indent + e.Time.UTC().Format(time.RFC3339), string(e.Kind), state, dash(e.Actor), dash(e.Reason)})
	}
	return writeTable(w, rows)
}

// completeInstances returns a completion of instance IDs from the server,
// leaving out ended instances and IDs already on the command line;
// multi says whether the command takes several IDs.
func (s *session) completeInstances(multi bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !multi {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := s.connect(cmd)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		// Terminating instances are nearly gone, and not every server
		// accepts the state as a filter.
		live := slices.DeleteFunc(slices.Clone(allStates), func(st cloud.State) bool {
			return st == cloud.Terminated || st == cloud.Terminating
		})
		page, err := c.ListInstances(contextOf(cmd), client.ListInstancesOptions{States: live, Limit: 1000})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var ids []string
		for _, in := range page.Instances {
			if strings.HasPrefix(in.ID, toComplete) && !slices.Contains(args, in.ID) {
				ids = append(ids, in.ID+"\t"+strings.TrimSpace(in.Name+" "+in.Offering+" "+string(in.State)))
			}
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeOfferings completes offering names from the server.
func (s *session) completeOfferings(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	c, err := s.connect(cmd)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	offerings, err := c.Offerings(contextOf(cmd))
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, o := range offerings {
		if strings.HasPrefix(o.Name, toComplete) {
			names = append(names, o.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}

// imageText shows an image, or that the hosts' default is used.
func imageText(image string) string {
	if image == "" {
		return "(the hosts' default)"
	}
	return image
}

// parsePublish reads --publish values, PORT or PORT/keep-prefix, into the
// published ports and those of them that keep their path's prefix.
func parsePublish(vals []string) (ports, keep []int, err error) {
	for _, v := range vals {
		num, opt, hasOpt := strings.Cut(strings.TrimSpace(v), "/")
		p, err := strconv.Atoi(num)
		if err != nil || p < 1 || p > 65535 {
			return nil, nil, fmt.Errorf("%q: want a TCP port from 1 to 65535, optionally followed by /keep-prefix", v)
		}
		if hasOpt && opt != "keep-prefix" {
			return nil, nil, fmt.Errorf("%q: the only option after the port is /keep-prefix", v)
		}
		ports = append(ports, p)
		if hasOpt {
			keep = append(keep, p)
		}
	}
	return ports, keep, nil
}
