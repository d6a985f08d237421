package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/spf13/cobra"
)

// resourceTable says how resources of one kind print: as a table, one row
// each, or in a data format (JSON or YAML: one resource as an object,
// several as a list).
type resourceTable[T any] struct {
	// none is the line printed instead of a table when there are no
	// resources, e.g. "no volumes"; when empty, the header alone prints.
	none   string
	header []string
	row    func(*T) []string
	// tenant, when set, is the tenant a resource belongs to: a TENANT
	// column leads when the resources are of more than one.
	tenant func(*T) string
}

// print writes items in format ("table", "json" or "yaml"); one says that
// the data formats write the first item as an object.
func (t resourceTable[T]) print(w io.Writer, format string, one bool, items ...*T) error {
	if format != "table" {
		if one {
			return writeData(w, format, items[0])
		}
		return writeData(w, format, items)
	}
	if len(items) == 0 && t.none != "" {
		_, err := fmt.Fprintln(w, t.none)
		return err
	}
	tenants := false
	for _, it := range items {
		tenants = tenants || t.tenant != nil && t.tenant(it) != t.tenant(items[0])
	}
	header := t.header
	if tenants {
		header = append([]string{"TENANT"}, header...)
	}
	rows := [][]string{header}
	for _, it := range items {
		row := t.row(it)
		if tenants {
			row = append([]string{t.tenant(it)}, row...)
		}
		rows = append(rows, row)
	}
	return writeTable(w, rows)
}

// newIDCommand completes cmd, whose use and help text are set, as a
// command that takes one resource of kind k, by ID or (for a kind with
// names) by name (c.resolve), calls call with its ID and prints what call
// returns with show, in the output format of -o.
func newIDCommand[T any](s *session, cmd *cobra.Command, k resourceKind,
	call func(ctx context.Context, c *conn, id string) (*T, error),
	show func(ctx context.Context, c *conn, w io.Writer, format string, v *T) error) *cobra.Command {
	return idCommand(s, cmd, k, nil, call, show)
}

// newToInstanceCommand is newIDCommand for a resource put on an instance
// (attach, associate): it takes a required --instance too (an ID or a
// name), described by instanceHelp.
func newToInstanceCommand[T any](s *session, cmd *cobra.Command, k resourceKind, instanceHelp string,
	call func(ctx context.Context, c *conn, id, instance string) (*T, error),
	print func(w io.Writer, format string, one bool, items ...*T) error) *cobra.Command {
	var instance string
	check := func(cmd *cobra.Command) error {
		if instance == "" {
			return cmdutil.Usagef(cmd, "--instance is required")
		}
		return nil
	}
	cmd = idCommand(s, cmd, k, check, func(ctx context.Context, c *conn, id string) (*T, error) {
		in, err := c.resolve(ctx, instanceKind, instance)
		if err != nil {
			return nil, err
		}
		return call(ctx, c, id, in)
	}, asOne(print))
	cmd.Flags().StringVar(&instance, "instance", "", instanceHelp)
	_ = cmd.RegisterFlagCompletionFunc("instance", s.completeInstances(false))
	return cmd
}

// idCommand is newIDCommand with check, when not nil, run on the command
// line before connecting.
func idCommand[T any](s *session, cmd *cobra.Command, k resourceKind, check func(*cobra.Command) error,
	call func(ctx context.Context, c *conn, id string) (*T, error),
	show func(ctx context.Context, c *conn, w io.Writer, format string, v *T) error) *cobra.Command {
	var out outputFlag
	cmd.Args = exactArgs(1, k.arg())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(cmd); err != nil {
			return err
		}
		if check != nil {
			if err := check(cmd); err != nil {
				return err
			}
		}
		return s.withConn(cmd, func(ctx context.Context, c *conn) error {
			id, err := c.resolve(ctx, k, args[0])
			if err != nil {
				return err
			}
			v, err := call(ctx, c, id)
			if err != nil {
				return c.explain(err)
			}
			return show(ctx, c, cmd.OutOrStdout(), out.format, v)
		})
	}
	out.register(cmd)
	return cmd
}

// asOne is a show function for newIDCommand that prints the one resource
// with print, a printer of a list (an object, not a list, in the data
// formats).
func asOne[T any](print func(w io.Writer, format string, one bool, items ...*T) error) func(context.Context, *conn, io.Writer, string, *T) error {
	return func(_ context.Context, _ *conn, w io.Writer, format string, v *T) error {
		return print(w, format, true, v)
	}
}

// newDescribeCommand builds the "describe ID" command (aliases show and
// get) of a resource: get reads it, and fields says it as "Key: value"
// rows, or the resource is written whole in a data format.
func newDescribeCommand[T any](s *session, short string, k resourceKind,
	get func(ctx context.Context, c *conn, id string) (*T, error),
	fields func(ctx context.Context, c *conn, v *T) fieldRows) *cobra.Command {
	cmd := &cobra.Command{Use: "describe ID", Aliases: []string{"show", "get"}, Short: short}
	return newIDCommand(s, cmd, k, get, func(ctx context.Context, c *conn, w io.Writer, format string, v *T) error {
		if format != "table" {
			return writeData(w, format, v)
		}
		return writeTable(w, fields(ctx, c, v))
	})
}

// newDeleteCommand builds the "delete ID" command (alias rm) of a resource
// of kind k, given by ID or name, which del deletes.
func newDeleteCommand(s *session, k resourceKind, short string, del func(ctx context.Context, c *conn, id string) error) *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID",
		Aliases: []string{"rm"},
		Short:   short,
		Args:    exactArgs(1, k.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				id, err := c.resolve(ctx, k, args[0])
				if err != nil {
					return err
				}
				if err := del(ctx, c, id); err != nil {
					return c.explain(err)
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s deleted\n", k.noun, id)
				return err
			})
		},
	}
}

// fieldRows are the "Key: value" rows of a describe table.
type fieldRows [][]string

// add appends the row of key k with value v.
func (r *fieldRows) add(k, v string) { *r = append(*r, []string{k + ":", v}) }

// createResource is the end of a create command that sends an
// Idempotency-Key: the key (*key, or a random UUID kept there), the tenant
// (*tenant, a name or an ID; "" the caller's) resolved to its ID, create
// called with the key, and the resource it returns printed in format.
func createResource[T any](s *session, cmd *cobra.Command, key, tenant *string, format string,
	create func(ctx context.Context, c *conn, key string) (*T, error),
	print func(w io.Writer, format string, one bool, items ...*T) error) error {
	if *key == "" {
		*key = newUUID()
	}
	return s.withConn(cmd, func(ctx context.Context, c *conn) error {
		var err error
		if *tenant, err = c.tenantID(ctx, *tenant); err != nil {
			return err
		}
		v, err := create(ctx, c, *key)
		if err != nil {
			return c.explain(err)
		}
		return print(cmd.OutOrStdout(), format, true, v)
	})
}

// parseStates reads the values of a --state flag (case and surrounding
// spaces ignored) as states of type S, each one of valid.
func parseStates[S ~string](cmd *cobra.Command, vals, valid []string) ([]S, error) {
	var out []S
	for _, st := range vals {
		st = strings.ToLower(strings.TrimSpace(st))
		if !slices.Contains(valid, st) {
			return nil, cmdutil.Usagef(cmd, "--state %q: want one of %s", st, strings.Join(valid, ", "))
		}
		out = append(out, S(st))
	}
	return out, nil
}

// commandAfterDash is the Args of a create command whose only arguments
// are the workload's command, after "--".
func commandAfterDash(cmd *cobra.Command, args []string) error {
	if dash := cmd.ArgsLenAtDash(); len(args) > 0 && dash != 0 {
		return cmdutil.Usagef(cmd, "unexpected argument %q: put the workload's command after \"--\", e.g. -- python train.py", args[0])
	}
	return nil
}

// newStateListCommand builds the "list" command of resources that have
// states: --state (comma-separated values of valid) and --tenant (by name
// or ID, for admins; tenantHelp says whose) filter what list reads; list
// prints it in format.
func newStateListCommand[S ~string](s *session, short, tenantHelp string, valid []string,
	list func(ctx context.Context, cmd *cobra.Command, c *conn, tenant string, states []S, format string) error) *cobra.Command {
	var (
		states []string
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   short,
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			want, err := parseStates[S](cmd, states, valid)
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				return list(ctx, cmd, c, t, want, out.format)
			})
		},
	}
	cmd.Flags().StringSliceVar(&states, "state", nil, "only these states, comma-separated: "+strings.Join(valid, ", "))
	cmd.Flags().StringVar(&tenant, "tenant", "", tenantHelp)
	out.register(cmd)
	return cmd
}
