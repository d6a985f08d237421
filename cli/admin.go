package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// --- hosts ---

func newHostsCommand(s *session) *cobra.Command {
	cmd := groupCommand("hosts", "List, describe, cordon, uncordon, drain and remove GPU hosts (admins)",
		"The GPU servers whose agents joined the cloud, as the control plane records\n"+
			"them. A cordoned host keeps what it runs and takes nothing new.",
		newHostsListCommand(s), newHostDescribeCommand(s), newHostStateCommand(s, "cordon"), newHostStateCommand(s, "uncordon"), newDrainCommand(s), newHostRemoveCommand(s), newJoinTokenCommand(s))
	cmd.Aliases = []string{"host"}
	return cmd
}

// gpuSummary says what GPUs a host has: "8x H100-80GB-SXM", and for AMD
// GPUs their operator's partition mode, "4x MI300X CPX/NPS1, 4x MI300X
// SPX/NPS1"; "-" for none.
func gpuSummary(h *cloud.Host) string {
	counts := map[string]int{}
	var models []string
	for _, g := range h.Spec.GPUs {
		m := g.Model
		if mode := g.ModeString(); mode != "" {
			m += " " + mode
		}
		if counts[m] == 0 {
			models = append(models, m)
		}
		counts[m]++
	}
	parts := make([]string, len(models))
	for i, m := range models {
		parts[i] = strconv.Itoa(counts[m]) + "x " + m
	}
	return dash(strings.Join(parts, ", "))
}

// printHosts prints hosts as a table or as JSON or YAML.
var printHosts = resourceTable[cloud.Host]{
	none:   "no hosts: start an agent with a join token to add one",
	header: []string{"ID", "STATE", "ZONE", "GPUS", "VCPUS", "MEMORY", "HEARTBEAT"},
	row: func(h *cloud.Host) []string {
		hb := "never"
		if !h.LastHeartbeat.IsZero() {
			hb = ago(h.LastHeartbeat) + " ago"
		}
		return []string{h.ID, string(h.State), dash(h.Spec.Zone), gpuSummary(h),
			strconv.FormatFloat(float64(h.Spec.CPUMilli)/1000, 'f', -1, 64), formatMiB(h.Spec.MemoryMiB), hb}
	},
}.print

func newHostsListCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the hosts",
		Long: "List the hosts: scheduling state (schedulable, cordoned, unhealthy), zone,\n" +
			"GPUs, CPU and memory, and when the agent last reported. -o json and -o yaml\n" +
			"include every GPU with its UUID, NVLink island and MIG layout.",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				hs, err := c.Hosts(ctx)
				if err != nil {
					return c.explain(err)
				}
				if hs == nil {
					hs = []*cloud.Host{}
				}
				return printHosts(cmd.OutOrStdout(), out.format, false, hs...)
			})
		},
	}
	out.register(cmd)
	return cmd
}

// newHostStateCommand builds cordon and uncordon.
func newHostStateCommand(s *session, verb string) *cobra.Command {
	short := "Stop placing new instances on hosts"
	long := "Cordon hosts: they keep the instances they run and take no new ones, for\n" +
		"maintenance. Cordoning a cordoned host changes nothing."
	if verb == "uncordon" {
		short = "Let cordoned hosts take new instances again"
		long = "Uncordon hosts: they take new instances again, and pending instances that\n" +
			"fit are placed on them. An unhealthy host stays unhealthy until its agent\n" +
			"reports again."
	}
	var out outputFlag
	cmd := &cobra.Command{
		Use:     verb + " ID...",
		Short:   short,
		Long:    long,
		Example: "  gpucloud hosts " + verb + " h100-a h100-b",
		Args:    minArgs(1, "one or more host IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var done []*cloud.Host
				for _, id := range args {
					var h *cloud.Host
					var err error
					if verb == "cordon" {
						h, err = c.CordonHost(ctx, id, 0)
					} else {
						h, err = c.UncordonHost(ctx, id, 0)
					}
					if err != nil {
						if len(done) > 0 {
							_ = printHosts(cmd.OutOrStdout(), out.format, false, done...)
						}
						if len(args) > 1 {
							return fmt.Errorf("%s: %w", id, c.explain(err))
						}
						return c.explain(err)
					}
					done = append(done, h)
				}
				return printHosts(cmd.OutOrStdout(), out.format, len(args) == 1, done...)
			})
		},
	}
	out.register(cmd)
	return cmd
}

// --- tenants ---

func newTenantsCommand(s *session) *cobra.Command {
	cmd := groupCommand("tenants", "List and create tenants and their users (admins)",
		"Tenants are the accounts that rent capacity; each has users, and each user\n"+
			"has tokens. Commands that take a TENANT accept its name or its ID.",
		newTenantsListCommand(s), newTenantsCreateCommand(s), newTenantsAddUserCommand(s))
	cmd.Aliases = []string{"tenant"}
	return cmd
}

// printTenants prints tenants as a table or as JSON or YAML.
var printTenants = resourceTable[cloud.Tenant]{
	header: []string{"ID", "NAME", "AGE"},
	row:    func(t *cloud.Tenant) []string { return []string{t.ID, t.Name, ago(t.CreatedAt)} },
}.print

func newTenantsListCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the tenants",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				ts, err := c.Tenants(ctx)
				if err != nil {
					return c.explain(err)
				}
				if ts == nil {
					ts = []*cloud.Tenant{}
				}
				return printTenants(cmd.OutOrStdout(), out.format, false, ts...)
			})
		},
	}
	out.register(cmd)
	return cmd
}

func newTenantsCreateCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "create NAME",
		Short:   "Create a tenant",
		Long:    "Create a tenant. Then add its first user with 'gpucloud tenants add-user'.",
		Example: "  gpucloud tenants create acme\n  gpucloud tenants add-user acme --name alice",
		Args:    exactArgs(1, "one tenant NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.CreateTenant(ctx, args[0])
				if err != nil {
					return c.explain(err)
				}
				return printTenants(cmd.OutOrStdout(), out.format, true, t)
			})
		},
	}
	out.register(cmd)
	return cmd
}

func newTenantsAddUserCommand(s *session) *cobra.Command {
	var (
		req  api.CreateUserRequest
		role string
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "add-user TENANT --name NAME",
		Short: "Add a user to a tenant and print its first token",
		Long: "Add a user to a tenant (by name or ID) and print the user's first token. The\n" +
			"token's secret is shown this once: the server keeps only its hash. Admin\n" +
			"users belong to the \"operator\" tenant.",
		Example: "  gpucloud tenants add-user acme --name alice\n  gpucloud tenants add-user operator --name bob --role admin -o json",
		Args:    exactArgs(1, "one TENANT (name or ID)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if req.Name == "" {
				return cmdutil.Usagef(cmd, "--name is required")
			}
			switch role {
			case "member", "admin":
				req.Role = cloud.Role(role)
			default:
				return cmdutil.Usagef(cmd, "--role %q: want member or admin", role)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				tenant, err := c.tenantID(ctx, args[0])
				if err != nil {
					return err
				}
				u, err := c.CreateUser(ctx, tenant, req)
				if err != nil {
					return c.explain(err)
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, u)
				}
				if err := writeTable(w, [][]string{
					{"User:", u.User.ID + " (" + u.User.Name + ", " + string(u.User.Role) + ")"},
					{"Tenant:", u.User.TenantID},
					{"Token:", u.Token.ID},
					{"Secret:", u.Secret},
				}); err != nil {
					return err
				}
				fmt.Fprintf(w, "\nThe secret is shown only this once. Give it to %s, who runs:\n  gpucloud login --server %s --token %s\n",
					u.User.Name, c.server, u.Secret)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the user's name; required")
	cmd.Flags().StringVar(&role, "role", "member", `"member", or "admin" (operator tenant only)`)
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("role", cobra.FixedCompletions([]string{"member", "admin"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// --- quotas ---

func newQuotasCommand(s *session) *cobra.Command {
	cmd := groupCommand("quotas", "Show and set tenants' quotas",
		"A quota caps what a tenant holds at once: non-terminated instances, and\n"+
			"whole-GPU equivalents per GPU model (a MIG slice counts its compute slices\n"+
			"/ 7, a share its fraction); and how fast each of its users may call the API\n"+
			"(requests per second, and a burst). A new tenant starts with 64 instances\n"+
			"and 16 GPUs of each model, at the server's default rate; the operator\n"+
			"tenant has no limits. An admin changes them with quotas set.",
		newQuotasGetCommand(s), newQuotasSetCommand(s))
	cmd.Aliases = []string{"quota"}
	return cmd
}

// printQuota prints a quota with its usage, one row per limited or used
// resource.
func printQuota(w io.Writer, format string, q *api.QuotaStatus) error {
	if format != "table" {
		return writeData(w, format, q)
	}
	limit := func(v float64) string {
		if v == 0 {
			return "unlimited"
		}
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	rate := func(v int) string {
		if v == 0 {
			return "server default"
		}
		return strconv.Itoa(v)
	}
	rows := [][]string{{"RESOURCE", "LIMIT", "USED"},
		{"instances", limit(float64(q.Instances)), strconv.Itoa(q.Used.Instances)},
		{"gpus per model", limit(q.GPUsPerModel), "-"}}
	seen := map[string]bool{}
	var models []string
	for _, m := range [2]map[string]float64{q.GPUs, q.Used.GPUs} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				models = append(models, k)
			}
		}
	}
	sort.Strings(models)
	for _, m := range models {
		l, own := q.GPUs[m]
		if !own {
			l = q.GPUsPerModel
		}
		rows = append(rows, []string{"gpus " + m, limit(l), strconv.FormatFloat(q.Used.GPUs[m], 'f', -1, 64)})
	}
	rows = append(rows, []string{"requests per second", rate(q.RequestsPerSecond), "-"},
		[]string{"burst", rate(q.Burst), "-"})
	fmt.Fprintf(w, "Quota of tenant %s\n", q.TenantID)
	return writeTable(w, rows)
}

func newQuotasGetCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "get TENANT",
		Short:   "Show a tenant's quota and what it uses",
		Example: "  gpucloud quotas get acme",
		Args:    exactArgs(1, "one TENANT (name or ID)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				tenant, err := c.tenantID(ctx, args[0])
				if err != nil {
					return err
				}
				q, err := c.Quota(ctx, tenant)
				if err != nil {
					return c.explain(err)
				}
				return printQuota(cmd.OutOrStdout(), out.format, q)
			})
		},
	}
	out.register(cmd)
	return cmd
}

func newQuotasSetCommand(s *session) *cobra.Command {
	var (
		q   quotaFlags
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "set TENANT [--instances N] [--gpus MODEL=N]... [--gpus-per-model N] [--requests-per-second N] [--burst N]",
		Short: "Change a tenant's quota (admins)",
		Long: "Change the limits given and keep the others: --instances N caps the tenant's\n" +
			"non-terminated instances, --gpus MODEL=N its whole-GPU equivalents of a model\n" +
			"(name or alias; N may be fractional), --gpus-per-model N those of each model\n" +
			"without its own --gpus limit. 0 removes a limit (a model without its own\n" +
			"then falls under --gpus-per-model). --requests-per-second N and --burst N\n" +
			"set the token bucket of each of the tenant's users: N requests a second,\n" +
			"up to --burst at once; 0 is the server's default (members 50 a second,\n" +
			"500 at once; admins 200 and 2000). A user over it gets 429 rate_limited\n" +
			"with Retry-After. --reset starts from no limits and the default rate\n" +
			"instead of the current quota.",
		Example: strings.Join([]string{
			"  gpucloud quotas set acme --instances 20 --gpus H100=16 --gpus A100=4.5",
			"",
			"  # Remove the H100 limit, keep the rest",
			"  gpucloud quotas set acme --gpus H100=0",
			"",
			"  # Raise a new tenant's defaults, and let its CI send 200 requests a second",
			"  gpucloud quotas set acme --instances 500 --gpus-per-model 64 --requests-per-second 200 --burst 2000",
		}, "\n"),
		Args: exactArgs(1, "one TENANT (name or ID)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			want, err := q.check(cmd)
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				tenant, err := c.tenantID(ctx, args[0])
				if err != nil {
					return err
				}
				spec := api.QuotaSpec{GPUs: map[string]float64{}}
				if !q.reset {
					cur, err := c.Quota(ctx, tenant)
					if err != nil {
						return c.explain(err)
					}
					spec.Instances = cur.Instances
					spec.GPUsPerModel, spec.RequestsPerSecond, spec.Burst = cur.GPUsPerModel, cur.RequestsPerSecond, cur.Burst
					for m, v := range cur.GPUs {
						spec.GPUs[m] = v
					}
				}
				q.apply(cmd, &spec, want)
				qt, err := c.SetQuota(ctx, tenant, spec)
				if err != nil {
					return c.explain(err)
				}
				return printQuota(cmd.OutOrStdout(), out.format, qt)
			})
		},
	}
	q.register(cmd)
	out.register(cmd)
	return cmd
}

// quotaFlags are the limits quotas set changes.
type quotaFlags struct {
	instances, rps, burst int
	perModel              float64
	gpus                  []string
	reset                 bool
}

func (q *quotaFlags) register(cmd *cobra.Command) {
	cmd.Flags().IntVar(&q.instances, "instances", 0, "cap on non-terminated instances (0: no limit)")
	cmd.Flags().StringArrayVar(&q.gpus, "gpus", nil, "cap MODEL=N on whole-GPU equivalents of a model (0: no limit; repeatable)")
	cmd.Flags().Float64Var(&q.perModel, "gpus-per-model", 0, "cap on whole-GPU equivalents of each model without its own --gpus (0: no limit)")
	cmd.Flags().IntVar(&q.rps, "requests-per-second", 0, "API requests per second of each of the tenant's users (0: the server's default)")
	cmd.Flags().IntVar(&q.burst, "burst", 0, "API requests each of the tenant's users may send at once (0: the server's default)")
	cmd.Flags().BoolVar(&q.reset, "reset", false, "start from no limits and the default rate rather than the current quota")
}

// check checks the flags and returns the --gpus limits by canonical model.
func (q *quotaFlags) check(cmd *cobra.Command) (map[string]float64, error) {
	changed := cmd.Flags().Changed
	if !changed("instances") && len(q.gpus) == 0 && !q.reset && !changed("gpus-per-model") && !changed("requests-per-second") && !changed("burst") {
		return nil, cmdutil.Usagef(cmd, "nothing to set: give --instances, --gpus, --gpus-per-model, --requests-per-second, --burst or --reset")
	}
	if q.instances < 0 {
		return nil, cmdutil.Usagef(cmd, "--instances %d: want 0 (no limit) or more", q.instances)
	}
	if !(q.perModel >= 0) { // negative, or NaN
		return nil, cmdutil.Usagef(cmd, "--gpus-per-model %v: want 0 (no limit) or more", q.perModel)
	}
	if q.rps < 0 {
		return nil, cmdutil.Usagef(cmd, "--requests-per-second %d: want 0 (the server's default) or more", q.rps)
	}
	if q.burst < 0 {
		return nil, cmdutil.Usagef(cmd, "--burst %d: want 0 (the server's default) or more", q.burst)
	}
	kv, err := keyValues(cmd, "gpus", q.gpus)
	if err != nil {
		return nil, err
	}
	want := map[string]float64{}
	for m, v := range kv {
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || n < 0 {
			return nil, cmdutil.Usagef(cmd, "--gpus %s=%s: want a number of GPUs, 0 or more", m, v)
		}
		want[canonicalModel(strings.TrimSpace(m))] = n
	}
	return want, nil
}

// apply sets the limits the flags give on spec, and the --gpus limits of
// want (0 removes a model's limit, under any of its names).
func (q *quotaFlags) apply(cmd *cobra.Command, spec *api.QuotaSpec, want map[string]float64) {
	changed := cmd.Flags().Changed
	if changed("instances") {
		spec.Instances = q.instances
	}
	if changed("gpus-per-model") {
		spec.GPUsPerModel = q.perModel
	}
	if changed("requests-per-second") {
		spec.RequestsPerSecond = q.rps
	}
	if changed("burst") {
		spec.Burst = q.burst
	}
	for m, v := range want {
		for old := range spec.GPUs {
			if strings.EqualFold(canonicalModel(old), m) {
				delete(spec.GPUs, old)
			}
		}
		if v > 0 {
			spec.GPUs[m] = v
		}
	}
}

// newJoinTokenCommand creates a join token for new hosts' agents, with
// list and revoke under it.
func newJoinTokenCommand(s *session) *cobra.Command {
	var (
		name      string
		expiresIn time.Duration
		maxJoins  int
	)
	cmd := &cobra.Command{
		Use:   "join-token",
		Short: "Create a join token for new hosts (admins); list and revoke them",
		Long: "Create a join token: a new GPU host's agent presents it once to join the cloud.\n" +
			"The token is shown once. Give it to the agent in a file (--join-token-file) or\n" +
			"in $GPUCLOUD_JOIN_TOKEN, never on its command line, where every user of the\n" +
			"host would see it.\n\n" +
			"A token joins one host unless --max-joins says how many (a fleet's token):\n" +
			"each join counts one use, and a join past the last is refused. It joins new\n" +
			"hosts only: a host ID that has joined joins again only after an admin removes\n" +
			"the host (`gpucloud hosts remove ID`). `gpucloud hosts join-token list` shows\n" +
			"the tokens and their joins; `gpucloud hosts join-token revoke ID` revokes one.",
		Example: "  gpucloud hosts join-token --name rack-12 --expires-in 24h\n" +
			"  gpucloud hosts join-token --name rack-12 --max-joins 16\n" +
			"  gpucloud hosts join-token list\n" +
			"  gpucloud hosts join-token revoke tk-0123456789abcdef",
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if expiresIn <= 0 {
				return cmdutil.Usagef(cmd, "--expires-in must be positive: join tokens always expire (the default is 24h)")
			}
			if maxJoins < 1 {
				return cmdutil.Usagef(cmd, "--max-joins must be at least 1: how many hosts the token joins")
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			at := time.Now().Add(expiresIn)
			req := api.CreateJoinTokenRequest{Name: name, ExpiresAt: &at, MaxUses: maxJoins}
			t, err := c.CreateJoinToken(contextOf(cmd), req)
			if err != nil {
				return c.explain(err)
			}
			// The join string carries the fingerprint of the CA this CLI
			// trusts for the server, so that the new host can trust it too.
			join := t.Secret
			if caPEM, err := trustedCA(c.server, cmd.ErrOrStderr()); err == nil && len(caPEM) > 0 {
				if ca, err := pki.ParseCert(caPEM); err == nil {
					join = agentapi.JoinString(t.Secret, pki.Fingerprint(ca))
				}
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "join token %s (shown once): %s\n", t.Token.ID, join)
			hosts := "1 host"
			if t.Token.MaxUses != 1 {
				hosts = fmt.Sprintf("%d hosts", t.Token.MaxUses)
			}
			if t.Token.ExpiresAt != nil {
				fmt.Fprintf(w, "it joins %s until %s (%s from now)\n", hosts, t.Token.ExpiresAt.UTC().Format(time.RFC3339), expiresIn)
			}
			fmt.Fprintf(w, "on the new host, keep it in a file only root reads, then:\n  gpucloud agent --server %s --join-token-file FILE\n", c.server)
			fmt.Fprintf(w, "or pass it in the environment: GPUCLOUD_JOIN_TOKEN=... gpucloud agent --server %s\n", c.server)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "hosts", "what the token is for (shown in the token list)")
	cmd.Flags().DurationVar(&expiresIn, "expires-in", 24*time.Hour, "how long the token joins hosts")
	cmd.Flags().IntVar(&maxJoins, "max-joins", 1, "how many hosts the token joins (a fleet's token: the fleet's size)")
	revoke := newTokensRevokeCommand(s)
	revoke.Short = "Revoke join tokens"
	revoke.Long = "Revoke join tokens by ID ('gpucloud hosts join-token list' shows them): they join\nno host from then on. Hosts that have joined keep their own credentials."
	revoke.Example = "  gpucloud hosts join-token revoke tk-0123456789abcdef"
	cmd.AddCommand(newJoinTokenListCommand(s), revoke)
	return cmd
}

// printJoinTokens prints join tokens, with their joins.
var printJoinTokens = resourceTable[cloud.Token]{
	none:   "no join tokens",
	header: []string{"ID", "NAME", "JOINS", "AGE", "EXPIRES", "STATUS"},
	row: func(t *cloud.Token) []string {
		exp := "never"
		if t.ExpiresAt != nil {
			exp = t.ExpiresAt.UTC().Format(time.RFC3339)
		}
		joins, status := fmt.Sprintf("%d", t.Uses), tokenStatus(t)
		if t.MaxUses > 0 {
			joins = fmt.Sprintf("%d/%d", t.Uses, t.MaxUses)
			if status == "active" && t.Uses >= t.MaxUses {
				status = "used up"
			}
		}
		return []string{t.ID, dash(t.Name), joins, ago(t.CreatedAt), exp, status}
	},
}.print

// newJoinTokenListCommand lists the join tokens (admins).
func newJoinTokenListCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "list",
		Short:   "List join tokens and their joins (admins)",
		Long:    "List every join token, revoked, expired and used-up ones included, with its joins\n(made/allowed). Never their secrets.",
		Example: "  gpucloud hosts join-token list",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				ts, err := c.JoinTokens(ctx)
				if err != nil {
					return c.explain(err)
				}
				return printJoinTokens(cmd.OutOrStdout(), out.format, false, ts...)
			})
		},
	}
	out.register(cmd)
	return cmd
}

// newHostRemoveCommand removes hosts' agents, so that their IDs may join
// again.
func newHostRemoveCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "remove ID...",
		Short: "Remove hosts' agents, so that the hosts may join again (admins)",
		Long: "Remove a host's agent: every credential of the host is revoked, so that its\n" +
			"agent is refused, and the host's ID may join again with a join token (a join\n" +
			"token never joins under the ID of a host whose agent has a live credential).\n" +
			"Use it when a host lost its credential (a reinstall, a wiped disk) or its agent\n" +
			"must be shut out. The host keeps its record and state; a host that holds\n" +
			"instances is refused until it is drained (`gpucloud hosts drain ID`).",
		Example: "  gpucloud hosts drain h100-a && gpucloud hosts remove h100-a",
		Args:    minArgs(1, "one or more host IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				for _, id := range args {
					res, err := c.RemoveHost(ctx, id)
					if err != nil {
						return fmt.Errorf("%s: %w", id, c.explain(err))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: removed, %d agent credentials revoked; it may join again with a join token\n", id, res.Revoked)
				}
				return nil
			})
		},
	}
}

// newDrainCommand cordons hosts and stops what runs on them.
func newDrainCommand(s *session) *cobra.Command {
	return &cobra.Command{
		Use:   "drain ID...",
		Short: "Cordon hosts and stop the instances running on them",
		Long: "Drain hosts for maintenance: each is cordoned, and every instance running on\n" +
			"it is asked to stop (its agent stops the workload and the GPUs are released).\n" +
			"The tenants may start their instances again; they are placed elsewhere.",
		Example: "  gpucloud hosts drain h100-a",
		Args:    minArgs(1, "one or more host IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				for _, id := range args {
					res, err := c.DrainHost(ctx, id)
					if err != nil {
						return fmt.Errorf("%s: %w", id, c.explain(err))
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s: cordoned, %d instances stopping\n", id, len(res.Stopping))
					for _, in := range res.Stopping {
						fmt.Fprintf(cmd.OutOrStdout(), "  %s (%s, tenant %s)\n", in.ID, in.Offering, in.TenantID)
					}
				}
				return nil
			})
		},
	}
}
