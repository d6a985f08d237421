package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newPlacementGroupsCommand(s *session) *cobra.Command {
	cmd := groupCommand("placement-groups", "Create, list and delete placement groups",
		"A placement group places its instances relative to each other. cluster keeps\n"+
			"them close: on one host's NVLink island when they fit, else on one rack's\n"+
			"fabric (InfiniBand or RoCE), as multi-node training needs. spread keeps them\n"+
			"apart: on different hosts, or different racks with --by-rack.\n\n"+
			"An instance joins a group at creation (instances create --placement-group ID).",
		newPlacementCreateCommand(s), newPlacementListCommand(s), newPlacementDescribeCommand(s), newPlacementDeleteCommand(s))
	cmd.Aliases = []string{"placement-group", "pg"}
	return cmd
}

// printPlacementGroups prints groups as a table, or as JSON or YAML (one
// group as an object, several as a list).
var printPlacementGroups = resourceTable[cloud.PlacementGroup]{
	none:   "no placement groups",
	header: []string{"ID", "NAME", "STRATEGY", "AGE"},
	row: func(g *cloud.PlacementGroup) []string {
		strategy := string(g.Strategy)
		if g.ByRack {
			strategy += " (by rack)"
		}
		return []string{g.ID, g.Name, strategy, ago(g.CreatedAt)}
	},
	tenant: func(g *cloud.PlacementGroup) string { return g.TenantID },
}.print

func newPlacementCreateCommand(s *session) *cobra.Command {
	var (
		req      api.CreatePlacementGroupRequest
		strategy string
		key      string
		out      outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create NAME --strategy cluster|spread",
		Short: "Create a placement group",
		Example: "  gpucloud placement-groups create train --strategy cluster\n" +
			"  gpucloud instances create --offering h100.8x --placement-group pg-0123456789abcdef\n" +
			"  gpucloud placement-groups create web --strategy spread --by-rack",
		Args: exactArgs(1, "the group's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			switch strategy {
			case string(cloud.PlacementCluster), string(cloud.PlacementSpread):
			case "":
				return cmdutil.Usagef(cmd, "--strategy is required: cluster or spread")
			default:
				return cmdutil.Usagef(cmd, "--strategy %q is not cluster or spread", strategy)
			}
			req.Name, req.Strategy = args[0], cloud.PlacementStrategy(strategy)
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.PlacementGroup, error) {
					return c.CreatePlacementGroup(ctx, req, key)
				},
				printPlacementGroups)
		},
	}
	cmd.Flags().StringVar(&strategy, "strategy", "", "cluster (close: one NVLink island or rack fabric) or spread (apart); required")
	cmd.Flags().BoolVar(&req.ByRack, "by-rack", false, "spread across racks instead of hosts (spread only)")
	cmd.Flags().StringToStringVar(&req.Tags, "tag", nil, "a tag KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same group (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newPlacementListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "placement groups", "List placement groups: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.PlacementGroup, error) {
			return c.PlacementGroups(ctx, t)
		},
		printPlacementGroups)
}

func newPlacementDescribeCommand(s *session) *cobra.Command {
	return newIDCommand(s, &cobra.Command{Use: "describe ID", Aliases: []string{"show", "get"}, Short: "Show a placement group"}, placementGroupKind,
		func(ctx context.Context, c *conn, id string) (*cloud.PlacementGroup, error) {
			return c.GetPlacementGroup(ctx, id)
		},
		asOne(printPlacementGroups))
}

func newPlacementDeleteCommand(s *session) *cobra.Command {
	return newDeleteCommand(s, placementGroupKind, "Delete a placement group no live instance is in",
		func(ctx context.Context, c *conn, id string) error { return c.DeletePlacementGroup(ctx, id) })
}
