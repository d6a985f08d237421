package cli

import (
	"context"
	"io"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/spf13/cobra"
)

// newTenantListCommand builds the "list" command of a tenant's resources
// (volumes, tokens, addresses, commitments): members list their tenant's,
// admins every tenant's or, with --tenant, one tenant's. fetch reads them
// for a tenant ID ("" for all); print writes them in the output format.
func newTenantListCommand[T any](s *session, noun, long string,
	fetch func(ctx context.Context, c *conn, tenant string) ([]*T, error),
	print func(w io.Writer, format string, one bool, items ...*T) error) *cobra.Command {
	var (
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List " + noun,
		Long:    long,
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				items, err := fetch(ctx, c, t)
				if err != nil {
					return c.explain(err)
				}
				if items == nil {
					items = []*T{}
				}
				return print(cmd.OutOrStdout(), out.format, false, items...)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "only this tenant's "+noun+", by name or ID (admins)")
	out.register(cmd)
	return cmd
}
