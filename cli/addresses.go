package cli

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newAddressesCommand(s *session) *cobra.Command {
	cmd := groupCommand("addresses", "Allocate, associate and release public addresses",
		"A public address is held by a tenant from allocation to release and billed all\n"+
			"that time, associated with an instance or not.",
		newAddressesAllocateCommand(s), newAddressesListCommand(s), newAddressesAssociateCommand(s),
		newAddressesDisassociateCommand(s), newAddressesReleaseCommand(s))
	cmd.Aliases = []string{"address", "addr"}
	return cmd
}

// printAddresses prints addresses as a table or as JSON or YAML.
var printAddresses = resourceTable[cloud.Address]{
	none:   "no addresses",
	header: []string{"ID", "IP", "ZONE", "INSTANCE", "AGE", "RELEASED"},
	row: func(a *cloud.Address) []string {
		released := "-"
		if a.ReleasedAt != nil {
			released = ago(*a.ReleasedAt) + " ago"
		}
		return []string{a.ID, a.IP, dash(a.Zone), dash(a.InstanceID), ago(a.CreatedAt), released}
	},
	tenant: func(a *cloud.Address) string { return a.TenantID },
}.print

func newAddressesAllocateCommand(s *session) *cobra.Command {
	var (
		req api.AllocateAddressRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "allocate [--zone Z] [--instance ID]",
		Short: "Allocate a public address",
		Long: "Allocate the lowest free address of the server's pool, and with --instance\n" +
			"associate it with that instance at once.\n\n" +
			"Every call sends an Idempotency-Key (random unless --idempotency-key is given):\n" +
			"a retry with the same key answers the address the first call allocated.",
		Example: "  gpucloud addresses allocate --zone a\n  gpucloud addresses allocate --instance i-0123456789abcdef",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Address, error) {
					return c.AllocateAddress(ctx, req, key)
				},
				printAddresses)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Zone, "zone", "", "the zone (default the instance's)")
	f.StringVar(&req.InstanceID, "instance", "", "associate it with this instance")
	f.StringVar(&req.Tenant, "tenant", "", "allocate for this tenant, by name or ID (admins only)")
	f.StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same address (default: a random UUID)")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("instance", s.completeInstances(false))
	return cmd
}

func newAddressesListCommand(s *session) *cobra.Command {
	var released bool
	cmd := newTenantListCommand(s, "addresses", "List addresses: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Address, error) {
			return c.Addresses(ctx, t, released)
		}, printAddresses)
	cmd.Flags().BoolVar(&released, "released", false, "include released addresses")
	return cmd
}

func newAddressesAssociateCommand(s *session) *cobra.Command {
	return newToInstanceCommand(s, &cobra.Command{
		Use:     "associate ADDRESS --instance ID",
		Short:   "Associate an address with an instance",
		Example: "  gpucloud addresses associate eip-0123456789abcdef --instance i-0123456789abcdef",
	}, addressKind, "the instance; required",
		func(ctx context.Context, c *conn, id, instance string) (*cloud.Address, error) {
			return c.AssociateAddress(ctx, id, instance)
		}, printAddresses)
}

// newAddressActionCommand builds disassociate and release, which take an
// address ID and nothing else.
func newAddressActionCommand(s *session, use, short, long string,
	call func(c *conn) func(context.Context, string) (*cloud.Address, error)) *cobra.Command {
	return newIDCommand(s, &cobra.Command{Use: use + " ADDRESS", Short: short, Long: long}, addressKind,
		func(ctx context.Context, c *conn, id string) (*cloud.Address, error) { return call(c)(ctx, id) }, asOne(printAddresses))
}

func newAddressesDisassociateCommand(s *session) *cobra.Command {
	return newAddressActionCommand(s, "disassociate", "Disassociate an address from its instance",
		"Disassociate an address from its instance; it stays allocated (and billed).",
		func(c *conn) func(context.Context, string) (*cloud.Address, error) { return c.DisassociateAddress })
}

func newAddressesReleaseCommand(s *session) *cobra.Command {
	return newAddressActionCommand(s, "release", "Release an address",
		"Release an address: it stops billing and goes back to the pool. Releasing a\nreleased address changes nothing.",
		func(c *conn) func(context.Context, string) (*cloud.Address, error) { return c.ReleaseAddress })
}
