package cli

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
)

func newKeysCommand(s *session) *cobra.Command {
	cmd := groupCommand("keys", "Import, list and delete SSH public keys",
		"A tenant's SSH public keys may open SSH sessions to its instances\n"+
			"(gpucloud instances ssh ID, or plain ssh after gpucloud ssh-config). The\n"+
			"server keeps the public half only: import the .pub file, never the private key.",
		newKeyImportCommand(s), newKeyListCommand(s), newKeyDescribeCommand(s), newKeyDeleteCommand(s))
	cmd.Aliases = []string{"key", "ssh-keys"}
	return cmd
}

// printKeys prints keys as a table, or as JSON or YAML.
var printKeys = resourceTable[cloud.Key]{
	none:   "no SSH keys",
	header: []string{"ID", "NAME", "TYPE", "FINGERPRINT", "AGE"},
	row: func(k *cloud.Key) []string {
		return []string{k.ID, k.Name, k.Type, k.Fingerprint, ago(k.CreatedAt)}
	},
	tenant: func(k *cloud.Key) string { return k.TenantID },
}.print

// maxKeyFile bounds what import reads: a public key is a few KB at most,
// and a mistaken path (a disk image, /dev/zero) must not be read whole.
const maxKeyFile = 64 << 10

func newKeyImportCommand(s *session) *cobra.Command {
	var (
		req api.ImportKeyRequest
		key string
		out outputFlag
	)
	cmd := &cobra.Command{
		Use:   "import [--name NAME] FILE|-",
		Short: "Import an SSH public key (a .pub file, or - for standard input)",
		Example: "  gpucloud keys import ~/.ssh/id_ed25519.pub\n" +
			"  gpucloud keys import --name laptop ~/.ssh/id_ed25519.pub\n" +
			"  ssh-add -L | head -1 | gpucloud keys import -",
		Args: exactArgs(1, "one public key file, or - for standard input"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var r io.Reader = cmd.InOrStdin()
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			b, err := io.ReadAll(io.LimitReader(r, maxKeyFile+1))
			if err != nil {
				return err
			}
			if len(b) > maxKeyFile {
				return fmt.Errorf("%s is over %d KiB: not a public key", args[0], maxKeyFile>>10)
			}
			req.PublicKey = string(b)
			return createResource(s, cmd, &key, &req.Tenant, out.format,
				func(ctx context.Context, c *conn, key string) (*cloud.Key, error) {
					return c.ImportKey(ctx, req, key)
				},
				printKeys)
		},
	}
	cmd.Flags().StringVar(&req.Name, "name", "", "the key's name (default: from the key's comment, else its fingerprint)")
	cmd.Flags().StringVar(&req.Tenant, "tenant", "", "import into this tenant, by name or ID (admins only)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "retry key: the same key returns the same imported key (default: a random UUID)")
	out.register(cmd)
	return cmd
}

func newKeyListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "SSH keys", "List SSH public keys: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Key, error) {
			return c.Keys(ctx, t)
		},
		printKeys)
}

func newKeyDescribeCommand(s *session) *cobra.Command {
	return newIDCommand(s, &cobra.Command{Use: "describe ID", Aliases: []string{"show", "get"}, Short: "Show an SSH public key"}, keyKind,
		func(ctx context.Context, c *conn, id string) (*cloud.Key, error) {
			return c.GetKey(ctx, id)
		},
		asOne(printKeys))
}

func newKeyDeleteCommand(s *session) *cobra.Command {
	return newDeleteCommand(s, keyKind, "Delete an SSH public key (new SSH sessions can no longer use it)",
		func(ctx context.Context, c *conn, id string) error { return c.DeleteKey(ctx, id) })
}
