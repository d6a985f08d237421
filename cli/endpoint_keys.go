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

// gpucloud endpoints keys: an endpoint's keys (docs/ENDPOINTS.md,
// "Endpoint keys").

func newEndpointsKeysCommand(s *session) *cobra.Command {
	cmd := groupCommand("keys", "Make, list and revoke an endpoint's keys",
		"An endpoint key calls one endpoint only (run, runsync, status, cancel and the\n"+
			"HTTP mode), for apps that must not hold a user's token. Every other route\n"+
			"refuses it, and another endpoint answers not_found. Each key has its own\n"+
			"request rate (default 100 requests a second, bursts of 200). Its secret is\n"+
			"shown once, when it is made. Use it as any token:\n"+
			"  curl -H \"Authorization: Bearer gpc_ek-...\" https://SERVER/v1/endpoints/echo/runsync -d '{\"input\": 1}'",
		newEndpointsKeysCreateCommand(s), newEndpointsKeysListCommand(s), newEndpointsKeysRevokeCommand(s))
	cmd.Aliases = []string{"key"}
	return cmd
}

// printEndpointKeys prints endpoint keys as a table or as JSON or YAML.
var printEndpointKeys = resourceTable[cloud.EndpointKey]{
	none:   "no keys",
	header: []string{"ID", "NAME", "RATE", "BURST", "AGE", "LAST USED", "STATUS"},
	row: func(k *cloud.EndpointKey) []string {
		used, status := "never", "active"
		if k.LastUsedAt != nil {
			used = ago(*k.LastUsedAt)
		}
		if k.RevokedAt != nil {
			status = "revoked"
		}
		return []string{k.ID, k.Name, strconv.Itoa(k.Rate) + "/s", strconv.Itoa(k.Burst), ago(k.CreatedAt), used, status}
	},
}.print

func newEndpointsKeysCreateCommand(s *session) *cobra.Command {
	var (
		name, key   string
		rate, burst int
		out         outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create ENDPOINT --name NAME [--rate N] [--burst N]",
		Short: "Make a key for an endpoint and print its secret once",
		Long: "Make a key that calls ENDPOINT (by name or ID) only, and print its secret,\n" +
			"which is shown only this once. --rate is requests per second (1 to 1000,\n" +
			"default 100), --burst requests at once (1 to 2000, default twice the rate).\n" +
			"A retry with the same --idempotency-key answers the key without its secret.",
		Example: "  gpucloud endpoints keys create echo --name web-app\n  gpucloud endpoints keys create echo --name batch --rate 10 --burst 10 -o json",
		Args:    exactArgs(1, endpointKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if name == "" {
				return cmdutil.Usagef(cmd, "--name is required: what the key is for")
			}
			if key == "" {
				key = newUUID()
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				k, err := c.CreateEndpointKey(ctx, id, api.CreateEndpointKeyRequest{Name: name, Rate: rate, Burst: burst}, key)
				if err != nil {
					return c.explain(err)
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, k)
				}
				secret := k.Secret
				if secret == "" {
					secret = "(not shown again: this key was made by an earlier call with the same idempotency key)"
				}
				if err := writeTable(w, [][]string{{"Key:", k.Key.ID}, {"Endpoint:", k.Key.EndpointID}, {"Rate:", fmt.Sprintf("%d/s, bursts of %d", k.Key.Rate, k.Key.Burst)},
					{"Secret:", secret}}); err != nil {
					return err
				}
				_, err = fmt.Fprintln(w, "\nThe secret is shown only this once; store it now.")
				return err
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "what the key is for, e.g. the app that holds it (required)")
	cmd.Flags().IntVar(&rate, "rate", 0, "requests per second the key may send (default 100, at most 1000)")
	cmd.Flags().IntVar(&burst, "burst", 0, "requests the key may send at once (default twice the rate, at most 2000)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same endpoint key (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newEndpointsKeysListCommand(s *session) *cobra.Command {
	var (
		all bool
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list ENDPOINT",
		Aliases: []string{"ls"},
		Short:   "List an endpoint's keys (never their secrets)",
		Long:    "List the live keys of ENDPOINT (by name or ID); --all adds the revoked ones.",
		Args:    exactArgs(1, endpointKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				ks, err := c.EndpointKeys(ctx, id, all)
				if err != nil {
					return c.explain(err)
				}
				if ks == nil {
					ks = []*cloud.EndpointKey{}
				}
				return printEndpointKeys(cmd.OutOrStdout(), out.format, false, ks...)
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "revoked keys too")
	out.register(cmd)
	return cmd
}

func newEndpointsKeysRevokeCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:   "revoke ENDPOINT KEY...",
		Short: "Revoke an endpoint's keys",
		Long: "Revoke keys (ek-...) of ENDPOINT: they open nothing from then on (within a\n" +
			"second on every server replica). Revoking a revoked key changes nothing.",
		Example: "  gpucloud endpoints keys revoke echo ek-0123456789abcdef",
		Args:    minArgs(2, "an endpoint and one or more key IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.endpointID(ctx, args[0])
				if err != nil {
					return err
				}
				var done []*cloud.EndpointKey
				for _, k := range args[1:] {
					r, err := c.RevokeEndpointKey(ctx, id, k)
					if err != nil {
						if len(done) > 0 {
							_ = printEndpointKeys(cmd.OutOrStdout(), out.format, false, done...)
						}
						return fmt.Errorf("%s: %w", k, c.explain(err))
					}
					done = append(done, r)
				}
				return printEndpointKeys(cmd.OutOrStdout(), out.format, len(done) == 1, done...)
			})
		},
	}
	out.register(cmd)
	return cmd
}
