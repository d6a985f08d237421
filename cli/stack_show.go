package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

func newStacksListCommand(s *session) *cobra.Command {
	return newTenantListCommand(s, "stacks", "List the stacks that are not destroyed: members their tenant's, admins every tenant's or one tenant's.",
		func(ctx context.Context, c *conn, t string) ([]*cloud.Stack, error) {
			return c.Stacks(ctx, t)
		},
		printStacks)
}

// printStacks prints stacks as a table, or as JSON or YAML.
var printStacks = resourceTable[cloud.Stack]{
	none:   "no stacks",
	header: []string{"NAME", "ID", "STATE", "REASON", "UPDATED", "AGE"},
	row: func(st *cloud.Stack) []string {
		return []string{st.Name, st.ID, string(st.State), dash(clip(st.Reason, 60)), ago(st.UpdatedAt), ago(st.CreatedAt)}
	},
	tenant: func(st *cloud.Stack) string { return st.TenantID },
}.print

func newStacksShowCommand(s *session) *cobra.Command {
	var (
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:     "show NAME",
		Aliases: []string{"describe", "get"},
		Short:   "Show a stack: its resources with their IDs and status, outputs and parameters",
		Args:    exactArgs(1, "the stack's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				v, err := c.GetStack(ctx, t, args[0])
				if err != nil {
					return c.explain(err)
				}
				if !out.table() {
					return writeData(cmd.OutOrStdout(), out.format, v)
				}
				return describeStack(cmd.OutOrStdout(), v)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the stack of this tenant, by name or ID (admins only)")
	out.register(cmd)
	return cmd
}

// describeStack writes the detail view of a stack.
func describeStack(w io.Writer, v *api.StackView) error {
	var rows fieldRows
	add := rows.add
	add("Name", v.Name)
	add("ID", v.ID)
	add("Tenant", v.TenantID)
	add("State", string(v.State))
	add("Reason", dash(v.Reason))
	add("Created", stamp(v.CreatedAt))
	add("Updated", stamp(v.UpdatedAt))
	if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(v.Resources) == 0 {
		fmt.Fprintln(w, "Resources: none")
	} else {
		fmt.Fprintln(w, "Resources:")
		rows := [][]string{{"  ADDRESS", "TYPE", "ID", "STATUS"}}
		for _, r := range v.Resources {
			rows = append(rows, []string{"  " + r.Address, r.Type, dash(r.ID), dash(r.Status)})
		}
		if err := writeTable(w, rows); err != nil {
			return err
		}
	}
	if err := writeValues(w, "Outputs", v.Outputs); err != nil {
		return err
	}
	return writeValues(w, "Parameters", v.Params)
}

// writeValues writes a titled map of values, one "  K = V" line each, in
// key order.
func writeValues(w io.Writer, title string, m map[string]any) error {
	if len(m) == 0 {
		_, err := fmt.Fprintf(w, "%s: none\n", title)
		return err
	}
	fmt.Fprintf(w, "%s:\n", title)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, []string{"  " + k, "=", valueText(m[k])})
	}
	return writeTable(w, rows)
}

// valueText prints an output or parameter value on one line: strings as
// they are, anything else as JSON.
func valueText(v any) string {
	if s, ok := v.(string); ok {
		return oneLineText(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func newStacksEventsCommand(s *session) *cobra.Command {
	var (
		tenant string
		limit  int
		after  int64
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "events NAME",
		Short: "List a stack's events: every step of its applies, destroys and drift checks",
		Long: "List a stack's events: every step of its applies, destroys and drift checks.\n" +
			"After a destroy the name still finds the destroyed stack's events (the latest\n" +
			"stack of that name) until another apply makes a new stack of it.",
		Args: exactArgs(1, "the stack's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if limit < 1 || limit > 1000 {
				return cmdutil.Usagef(cmd, "--limit %d: want 1 to 1000", limit)
			}
			if after < 0 {
				return cmdutil.Usagef(cmd, "--after %d: want an event ID", after)
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				page, err := c.StackEvents(ctx, t, args[0], after, limit)
				if err != nil {
					return c.explain(err)
				}
				w := cmd.OutOrStdout()
				if !out.table() {
					return writeData(w, out.format, page)
				}
				if len(page.Events) == 0 {
					_, err := fmt.Fprintln(w, "no events")
					return err
				}
				rows := [][]string{{"ID", "TIME", "ADDRESS", "ACTION", "OUTCOME", "RESOURCE", "MESSAGE"}}
				for _, ev := range page.Events {
					rows = append(rows, []string{fmt.Sprint(ev.ID), ev.Time.UTC().Format(time.RFC3339), cmpOrDash(ev.Address, "stack"),
						ev.Action, ev.Outcome, dash(ev.Resource), dash(oneLineText(ev.Message))})
				}
				if err := writeTable(w, rows); err != nil {
					return err
				}
				if page.Next != "" {
					_, err = fmt.Fprintf(w, "more: gpucloud stacks events %s --after %s\n", args[0], page.Next)
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the stack of this tenant, by name or ID (admins only)")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many events (1 to 1000)")
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this event ID (the \"more\" line gives it)")
	out.register(cmd)
	return cmd
}

func newStacksBlueprintsCommand() *cobra.Command {
	list := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the built-in blueprints",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			rows := [][]string{{"NAME", "DESCRIPTION"}}
			for _, b := range stack.Blueprints() {
				rows = append(rows, []string{b.Name, oneLineText(b.Description)})
			}
			return writeTable(cmd.OutOrStdout(), rows)
		},
	}
	show := &cobra.Command{
		Use:     "show NAME",
		Aliases: []string{"get"},
		Short:   "Print a blueprint's template, to save, edit and apply",
		Example: "  gpucloud stacks blueprints show llm-finetune > train.yaml\n" +
			"  gpucloud stacks plan train.yaml --param nodes=2",
		Args: exactArgs(1, "a blueprint's name (gpucloud stacks blueprints list)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := stack.Blueprint(args[0])
			if err != nil {
				return cmdutil.Usagef(cmd, "%s", strings.TrimPrefix(err.Error(), "stack: "))
			}
			_, err = cmd.OutOrStdout().Write(src)
			return err
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []string
			for _, b := range stack.Blueprints() {
				names = append(names, b.Name)
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
	}
	return groupCommand("blueprints", "List and print the built-in stack templates",
		"Blueprints are ordinary templates: print one, save it, edit it and apply it.\n"+
			"They need no server.", list, show)
}
