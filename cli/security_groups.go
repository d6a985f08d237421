package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newSecurityGroupsCommand(s *session) *cobra.Command {
	cmd := groupCommand("security-groups", "Create, list, change and delete security groups",
		"A security group is a stateful, allow-only firewall of a network's instances:\n"+
			"ingress and egress rules by protocol, port range, and a peer that is a CIDR or\n"+
			"the members of another group of the network. Replies to allowed traffic are\n"+
			"allowed. An instance has one to five groups (instances create\n"+
			"--security-group); a new group allows all egress and no ingress. Rule changes\n"+
			"apply to running instances at once.",
		newSecurityGroupsCreateCommand(s), newSecurityGroupsListCommand(s), newSecurityGroupsDescribeCommand(s),
		newRuleCommand(s, true), newRuleCommand(s, false),
		newDeleteCommand(s, securityGroupKind, "Delete a security group that no instance is in and no rule names",
			func(ctx context.Context, c *conn, id string) error { return c.DeleteSecurityGroup(ctx, id) }))
	cmd.Aliases = []string{"security-group", "sg"}
	return cmd
}

// printSecurityGroups prints groups as a table or as JSON or YAML.
var printSecurityGroups = resourceTable[cloud.SecurityGroup]{
	none:   "no security groups",
	header: []string{"ID", "NAME", "NETWORK", "INGRESS", "EGRESS", "AGE"},
	row: func(g *cloud.SecurityGroup) []string {
		return []string{g.ID, g.Name, g.NetworkID, strconv.Itoa(len(g.Ingress)), strconv.Itoa(len(g.Egress)), ago(g.CreatedAt)}
	},
	tenant: func(g *cloud.SecurityGroup) string { return g.TenantID },
}.print

func newSecurityGroupsCreateCommand(s *session) *cobra.Command {
	var (
		req api.CreateSecurityGroupRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create NAME --network ID",
		Short: "Create a security group",
		Example: "  gpucloud security-groups create ssh --network vpc-0123456789abcdef\n" +
			"  gpucloud security-groups authorize sg-0123456789abcdef --ingress --protocol tcp --port 22 --cidr 0.0.0.0/0",
		Args: exactArgs(1, "the group's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if req.Network == "" {
				return cmdutil.Usagef(cmd, "--network is required")
			}
			req.Name = args[0]
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.SecurityGroup, error) {
					return c.CreateSecurityGroup(ctx, req, key)
				},
				printSecurityGroups)
		},
	}
	cmd.Flags().StringVar(&req.Network, "network", "", "the ID of the network; required")
	cmd.Flags().StringVar(&req.Description, "description", "", "what the group is for")
	cmd.Flags().StringToStringVar(&req.Tags, "tag", nil, "a tag KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same group (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newSecurityGroupsListCommand(s *session) *cobra.Command {
	var network string
	cmd := newTenantListCommand(s, "security groups", "List security groups: members their tenant's, admins every tenant's or one tenant's; --network one network's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.SecurityGroup, error) {
			return c.SecurityGroups(ctx, t, network)
		},
		printSecurityGroups)
	cmd.Flags().StringVar(&network, "network", "", "only this network's groups")
	return cmd
}

func newSecurityGroupsDescribeCommand(s *session) *cobra.Command {
	return newDescribeCommand(s, "Show a security group with its rules", securityGroupKind,
		func(ctx context.Context, c *conn, id string) (*cloud.SecurityGroup, error) {
			return c.GetSecurityGroup(ctx, id)
		},
		func(_ context.Context, _ *conn, g *cloud.SecurityGroup) fieldRows {
			var rows fieldRows
			rows.add("ID", g.ID)
			rows.add("Name", g.Name)
			rows.add("Tenant", g.TenantID)
			rows.add("Network", g.NetworkID)
			rows.add("Description", dash(g.Description))
			rows.add("Default", yesNo(g.Default))
			rows.list("Ingress", len(g.Ingress), func(i int) string { return ruleText(g.Ingress[i], "from") })
			rows.list("Egress", len(g.Egress), func(i int) string { return ruleText(g.Egress[i], "to") })
			rows.add("Tags", dash(joinMap(g.Tags)))
			rows.add("Version", strconv.FormatInt(g.Version, 10))
			rows.add("Created", stamp(g.CreatedAt))
			return rows
		})
}

// ruleText says a rule on one line: "sgr-...  tcp 22  from 10.0.0.0/8".
func ruleText(r cloud.SecurityRule, dir string) string {
	ports := "all ports"
	switch {
	case r.Protocol == cloud.ProtocolICMP || r.Protocol == cloud.ProtocolAll:
		ports = ""
	case r.FromPort == r.ToPort:
		ports = strconv.Itoa(r.FromPort)
	default:
		ports = fmt.Sprintf("%d-%d", r.FromPort, r.ToPort)
	}
	peer := r.CIDR
	if r.GroupID != "" {
		peer = "group " + r.GroupID
	}
	s := strings.Join(strings.Fields(r.ID+"  "+r.Protocol+" "+ports), " ") + "  " + dir + " " + peer
	if r.Description != "" {
		s += "  (" + r.Description + ")"
	}
	if r.Owner != "" {
		// A stack's security_group_rule made it; only that stack deletes it.
		s += "  [owned by " + r.Owner + "]"
	}
	return s
}

// ruleFlags are the flags of authorize and revoke that say a rule.
type ruleFlags struct {
	ingress, egress bool
	protocol        string
	port            int
	ports           string
	cidr, group     string
	description     string
	ifMatch         string
}

func (f *ruleFlags) register(cmd *cobra.Command, revoke bool) {
	fs := cmd.Flags()
	fs.BoolVar(&f.ingress, "ingress", false, "a rule for traffic into the group's members (the peer is the source)")
	fs.BoolVar(&f.egress, "egress", false, "a rule for traffic out of the group's members (the peer is the destination)")
	fs.StringVar(&f.protocol, "protocol", "", "all, tcp, udp or icmp (default tcp with --port or --ports)")
	fs.IntVar(&f.port, "port", 0, "one port (tcp and udp)")
	fs.StringVar(&f.ports, "ports", "", "a port range FROM-TO (tcp and udp)")
	fs.StringVar(&f.cidr, "cidr", "", "the peer as an IPv4 block (0.0.0.0/0: everyone)")
	fs.StringVar(&f.group, "group", "", "the peer as the members of a group of the same network")
	if !revoke {
		fs.StringVar(&f.description, "description", "", "what the rule is for")
	}
	fs.StringVar(&f.ifMatch, "if-match", "", "change the group only if its version is still this one (describe shows it)")
}

// rule reads the flags into a rule request.
func (f *ruleFlags) rule(cmd *cobra.Command) (api.AuthorizeRequest, error) {
	var r api.AuthorizeRequest
	switch {
	case f.ingress == f.egress:
		return r, cmdutil.Usagef(cmd, "give one of --ingress and --egress")
	case f.ingress:
		r.Direction = api.Ingress
	default:
		r.Direction = api.Egress
	}
	if f.port != 0 && f.ports != "" {
		return r, cmdutil.Usagef(cmd, "give --port or --ports, not both")
	}
	r.FromPort, r.ToPort = f.port, f.port
	if f.ports != "" {
		from, to, ok := strings.Cut(f.ports, "-")
		a, err1 := strconv.Atoi(from)
		b, err2 := strconv.Atoi(to)
		if !ok || err1 != nil || err2 != nil {
			return r, cmdutil.Usagef(cmd, "--ports %q: want FROM-TO, e.g. 8000-8100", f.ports)
		}
		r.FromPort, r.ToPort = a, b
	}
	r.Protocol = f.protocol
	if r.Protocol == "" {
		if r.FromPort == 0 {
			return r, cmdutil.Usagef(cmd, "--protocol is required: all, tcp, udp or icmp")
		}
		r.Protocol = cloud.ProtocolTCP
	}
	if (f.cidr == "") == (f.group == "") {
		return r, cmdutil.Usagef(cmd, "give one of --cidr and --group")
	}
	r.CIDR, r.Group, r.Description = f.cidr, f.group, f.description
	return r, nil
}

// newRuleCommand builds "authorize" (add) or "revoke".
func newRuleCommand(s *session, add bool) *cobra.Command {
	var (
		f      ruleFlags
		ruleID string
		out    outputFlag
	)
	verb, short := "authorize", "Add a rule to a security group"
	if !add {
		verb, short = "revoke", "Remove a rule from a security group, by --rule ID or by its fields"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID (--ingress|--egress) [--protocol P] [--port N | --ports A-B] (--cidr X | --group sg-...)",
		Short: short,
		Example: fmt.Sprintf("  gpucloud security-groups %s sg-0123456789abcdef --ingress --protocol tcp --port 22 --cidr 0.0.0.0/0\n"+
			"  gpucloud security-groups %s sg-0123456789abcdef --ingress --ports 8000-8100 --group sg-fedcba9876543210", verb, verb),
		Args: exactArgs(1, securityGroupKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var version int64
			if f.ifMatch != "" {
				v, err := parseIfMatch(f.ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%v", err)
				}
				version = v
			}
			var req api.RevokeRequest
			if ruleID == "" {
				r, err := f.rule(cmd)
				if err != nil {
					return err
				}
				req.AuthorizeRequest = r
			}
			req.RuleID = ruleID
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var g *cloud.SecurityGroup
				id, err := c.resolve(ctx, securityGroupKind, args[0])
				if err != nil {
					return err
				}
				if add {
					g, err = c.Authorize(ctx, id, req.AuthorizeRequest, version)
				} else {
					g, err = c.Revoke(ctx, id, req, version)
				}
				if err != nil {
					return c.explain(err)
				}
				return printSecurityGroups(cmd.OutOrStdout(), out.format, true, g)
			})
		},
	}
	f.register(cmd, !add)
	if !add {
		cmd.Flags().StringVar(&ruleID, "rule", "", "the ID of the rule to remove (sgr-...; describe shows them)")
	}
	out.register(cmd)
	return cmd
}
