package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
)

func newTokensCommand(s *session) *cobra.Command {
	cmd := groupCommand("tokens", "List, create and revoke API tokens",
		"API tokens authenticate every call. A token has its user's role; its secret\n"+
			"(gpc_...) is shown once, when it is created, and the server keeps only a hash.",
		newTokensListCommand(s), newTokensCreateCommand(s), newTokensRevokeCommand(s))
	cmd.Aliases = []string{"token"}
	return cmd
}

// tokenStatus says whether a token still works.
func tokenStatus(t *cloud.Token) string {
	switch {
	case t.RevokedAt != nil:
		return "revoked"
	case t.ExpiresAt != nil && !t.ExpiresAt.After(clockNow()):
		return "expired"
	}
	return "active"
}

// printTokens prints tokens as a table or as JSON or YAML.
var printTokens = resourceTable[cloud.Token]{
	none:   "no tokens",
	header: []string{"ID", "NAME", "ROLE", "USER", "TENANT", "AGE", "EXPIRES", "STATUS"},
	row: func(t *cloud.Token) []string {
		exp := "never"
		if t.ExpiresAt != nil {
			exp = t.ExpiresAt.UTC().Format(time.RFC3339)
		}
		return []string{t.ID, dash(t.Name), string(t.Role), t.UserID, t.TenantID, ago(t.CreatedAt), exp, tokenStatus(t)}
	},
}.print

func newTokensListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "tokens", "List tokens (never their secrets): members their own, admins every\ntenant's or one tenant's with --tenant.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Token, error) { return c.Tokens(ctx, t) }, printTokens)
}

// parseExpiry parses --expires-in: a Go duration ("12h", "90m") or a
// number of days ("30d").
func parseExpiry(s string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n float64
		if n, err = strconv.ParseFloat(days, 64); err == nil {
			d = time.Duration(n * float64(24*time.Hour))
		}
	} else {
		d, err = time.ParseDuration(s)
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("--expires-in %q: want a positive duration such as 12h or 30d", s)
	}
	return d, nil
}

func newTokensCreateCommand(s *session) *cobra.Command {
	var (
		name, expiresIn string
		out             outputFlag
	)
	cmd := &cobra.Command{
		Use:   "create [--name NAME] [--expires-in DURATION]",
		Short: "Create a token for yourself and print its secret once",
		Long: "Create a token for the calling user, with the user's role, and print its\n" +
			"secret. The secret is shown only this once.",
		Example: "  gpucloud tokens create --name ci --expires-in 30d\n  gpucloud tokens create -o json",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			req := api.CreateTokenRequest{Name: name}
			if expiresIn != "" {
				d, err := parseExpiry(expiresIn)
				if err != nil {
					return cmdutil.Usagef(cmd, "%v", err)
				}
				at := clockNow().Add(d).UTC().Truncate(time.Second)
				req.ExpiresAt = &at
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.CreateToken(ctx, req)
				if err != nil {
					return c.explain(err)
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, t)
				}
				exp := "never"
				if t.Token.ExpiresAt != nil {
					exp = t.Token.ExpiresAt.UTC().Format(time.RFC3339)
				}
				if err := writeTable(w, [][]string{{"Token:", t.Token.ID}, {"Expires:", exp}, {"Secret:", t.Secret}}); err != nil {
					return err
				}
				_, err = fmt.Fprintln(w, "\nThe secret is shown only this once; store it now.")
				return err
			})
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "a name for the token, e.g. where it is used")
	cmd.Flags().StringVar(&expiresIn, "expires-in", "", "make the token expire after this long, e.g. 12h or 30d (default: never)")
	out.register(cmd)
	return cmd
}

func newTokensRevokeCommand(s *session) *cobra.Command {
	var out outputFlag
	cmd := &cobra.Command{
		Use:     "revoke ID...",
		Short:   "Revoke tokens",
		Long:    "Revoke tokens by ID (tk-...; 'gpucloud tokens list' shows them). Revoking a\nrevoked token changes nothing.",
		Example: "  gpucloud tokens revoke tk-0123456789abcdef",
		Args:    minArgs(1, "one or more token IDs"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				var done []*cloud.Token
				for _, id := range args {
					t, err := c.RevokeToken(ctx, id)
					if err != nil {
						if len(done) > 0 {
							_ = printTokens(cmd.OutOrStdout(), out.format, false, done...)
						}
						if len(args) > 1 {
							return fmt.Errorf("%s: %w", id, c.explain(err))
						}
						return c.explain(err)
					}
					done = append(done, t)
				}
				return printTokens(cmd.OutOrStdout(), out.format, len(args) == 1, done...)
			})
		},
	}
	out.register(cmd)
	return cmd
}
