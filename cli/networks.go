package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newNetworksCommand(s *session) *cobra.Command {
	cmd := groupCommand("networks", "Create, list and delete private networks (VPCs)",
		"A network is a tenant's private address space: an IPv4 CIDR from /16 to /28.\n"+
			"Its instances reach each other across hosts, and no other tenant's network,\n"+
			"whatever its CIDR. Every network has a default security group (all traffic\n"+
			"among its members, all egress).\n\n"+
			"Every tenant has a default network (default, 172.31.0.0/16), made on first\n"+
			"use, with one default subnet over all of it in any zone: instances created\n"+
			"without --subnet go there and place exactly as without networks.",
		newNetworksCreateCommand(s), newNetworksListCommand(s), newNetworksDescribeCommand(s),
		newDeleteCommand(s, networkKind, "Delete a network that has no instances, with its subnets and groups",
			func(ctx context.Context, c *conn, id string) error { return c.DeleteNetwork(ctx, id) }))
	cmd.Aliases = []string{"network", "net", "vpc"}
	return cmd
}

// printNetworks prints networks as a table or as JSON or YAML.
var printNetworks = resourceTable[cloud.Network]{
	none:   "no networks",
	header: []string{"ID", "NAME", "CIDR", "DEFAULT", "AGE"},
	row: func(n *cloud.Network) []string {
		return []string{n.ID, n.Name, n.CIDR, yesNo(n.Default), ago(n.CreatedAt)}
	},
	tenant: func(n *cloud.Network) string { return n.TenantID },
}.print

// yesNo says a flag in a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "-"
}

func newNetworksCreateCommand(s *session) *cobra.Command {
	var (
		req api.CreateNetworkRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:     "create NAME --cidr CIDR",
		Short:   "Create a network",
		Example: "  gpucloud networks create train --cidr 10.0.0.0/16\n  gpucloud subnets create a --network vpc-0123456789abcdef --cidr 10.0.1.0/24 --zone a",
		Args:    exactArgs(1, "the network's name (a DNS label)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if req.CIDR == "" {
				return cmdutil.Usagef(cmd, "--cidr is required, e.g. 10.0.0.0/16")
			}
			req.Name = args[0]
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Network, error) {
					return c.CreateNetwork(ctx, req, key)
				},
				printNetworks)
		},
	}
	cmd.Flags().StringVar(&req.CIDR, "cidr", "", "the network's IPv4 block, /16 to /28; required")
	cmd.Flags().StringToStringVar(&req.Tags, "tag", nil, "a tag KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same network (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newNetworksListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "networks", "List networks: members their tenant's (the first listing makes its default network), admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Network, error) { return c.Networks(ctx, t) },
		printNetworks)
}

func newNetworksDescribeCommand(s *session) *cobra.Command {
	return newDescribeCommand(s, "Show a network with its subnets and security groups", networkKind,
		func(ctx context.Context, c *conn, id string) (*cloud.Network, error) { return c.GetNetwork(ctx, id) },
		func(ctx context.Context, c *conn, n *cloud.Network) fieldRows {
			var rows fieldRows
			rows.add("ID", n.ID)
			rows.add("Name", n.Name)
			rows.add("Tenant", n.TenantID)
			rows.add("CIDR", n.CIDR)
			rows.add("VNI", strconv.FormatUint(uint64(n.VNI), 10))
			rows.add("Default", yesNo(n.Default))
			rows.add("Tags", dash(joinMap(n.Tags)))
			rows.add("Version", strconv.FormatInt(n.Version, 10))
			rows.add("Created", stamp(n.CreatedAt))
			if subs, err := c.Subnets(ctx, n.TenantID, n.ID); err == nil {
				rows.list("Subnets", len(subs), func(i int) string {
					return fmt.Sprintf("%s  %s  %s  %s", subs[i].ID, subs[i].Name, subs[i].CIDR, zoneText(subs[i].Zone))
				})
			}
			if gs, err := c.SecurityGroups(ctx, n.TenantID, n.ID); err == nil {
				rows.list("Security groups", len(gs), func(i int) string { return gs[i].ID + "  " + gs[i].Name })
			}
			return rows
		})
}

// list appends the rows of a list field: its first value beside the key,
// the others under it; "-" when it is empty.
func (r *fieldRows) list(k string, n int, value func(i int) string) {
	if n == 0 {
		r.add(k, "-")
		return
	}
	for i := range n {
		if i == 0 {
			r.add(k, value(i))
		} else {
			*r = append(*r, []string{"", value(i)})
		}
	}
}

// zoneText is a subnet's zone; "any" for the default subnet's.
func zoneText(z string) string {
	if z == "" {
		return "any zone"
	}
	return z
}

func newSubnetsCommand(s *session) *cobra.Command {
	cmd := groupCommand("subnets", "Create, list and delete subnets",
		"A subnet is a CIDR inside its network's, in one zone. Its instances run in that\n"+
			"zone and get their private address from it, which they keep across stop and\n"+
			"start until they terminate. Five addresses of every subnet are reserved: the\n"+
			"first, the gateway (+1), the DNS resolver (+2), one more (+3) and the last.",
		newSubnetsCreateCommand(s), newSubnetsListCommand(s), newSubnetsDescribeCommand(s),
		newDeleteCommand(s, subnetKind, "Delete a subnet that has no instances",
			func(ctx context.Context, c *conn, id string) error { return c.DeleteSubnet(ctx, id) }))
	cmd.Aliases = []string{"subnet", "sn"}
	return cmd
}

// printSubnets prints subnets as a table or as JSON or YAML.
var printSubnets = resourceTable[cloud.Subnet]{
	none:   "no subnets",
	header: []string{"ID", "NAME", "NETWORK", "CIDR", "ZONE", "AGE"},
	row: func(s *cloud.Subnet) []string {
		return []string{s.ID, s.Name, s.NetworkID, s.CIDR, zoneText(s.Zone), ago(s.CreatedAt)}
	},
	tenant: func(s *cloud.Subnet) string { return s.TenantID },
}.print

func newSubnetsCreateCommand(s *session) *cobra.Command {
	var (
		req api.CreateSubnetRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:     "create NAME --network ID --cidr CIDR --zone Z",
		Short:   "Create a subnet",
		Example: "  gpucloud subnets create a --network vpc-0123456789abcdef --cidr 10.0.1.0/24 --zone a",
		Args:    exactArgs(1, "the subnet's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			for _, f := range []struct{ name, v string }{{"network", req.Network}, {"cidr", req.CIDR}, {"zone", req.Zone}} {
				if f.v == "" {
					return cmdutil.Usagef(cmd, "--%s is required", f.name)
				}
			}
			req.Name = args[0]
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Subnet, error) {
					return c.CreateSubnet(ctx, req, key)
				},
				printSubnets)
		},
	}
	cmd.Flags().StringVar(&req.Network, "network", "", "the ID of the network; required")
	cmd.Flags().StringVar(&req.CIDR, "cidr", "", "the subnet's IPv4 block, inside the network's, /16 to /28; required")
	cmd.Flags().StringVar(&req.Zone, "zone", "", "the zone its instances run in; required")
	cmd.Flags().StringToStringVar(&req.Tags, "tag", nil, "a tag KEY=VALUE (repeatable)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "create in this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same subnet (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newSubnetsListCommand(s *session) *cobra.Command {
	var network string
	cmd := newTenantListCommand(s, "subnets", "List subnets: members their tenant's, admins every tenant's or one tenant's; --network one network's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Subnet, error) {
			return c.Subnets(ctx, t, network)
		},
		printSubnets)
	cmd.Flags().StringVar(&network, "network", "", "only this network's subnets")
	return cmd
}

func newSubnetsDescribeCommand(s *session) *cobra.Command {
	return newDescribeCommand(s, "Show a subnet", subnetKind,
		func(ctx context.Context, c *conn, id string) (*cloud.Subnet, error) { return c.GetSubnet(ctx, id) },
		func(_ context.Context, _ *conn, sub *cloud.Subnet) fieldRows {
			var rows fieldRows
			rows.add("ID", sub.ID)
			rows.add("Name", sub.Name)
			rows.add("Tenant", sub.TenantID)
			rows.add("Network", sub.NetworkID)
			rows.add("CIDR", sub.CIDR)
			rows.add("Zone", zoneText(sub.Zone))
			rows.add("Default", yesNo(sub.Default))
			rows.add("Tags", dash(joinMap(sub.Tags)))
			rows.add("Version", strconv.FormatInt(sub.Version, 10))
			rows.add("Created", stamp(sub.CreatedAt))
			return rows
		})
}
