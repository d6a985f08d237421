package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

func newStacksCommand(s *session) *cobra.Command {
	cmd := groupCommand("stacks", "Plan, apply, check and destroy stacks of resources made from templates",
		"A stack is a set of resources (instances, spot requests, volumes, addresses,\n"+
			"groups, placement groups, commitments, networks, subnets, security groups)\n"+
			"made from one YAML or JSON template\n"+
			"(docs/STACKS.md). plan shows what an apply would change, what the stack\n"+
			"costs per hour and whether it fits in the fleet now; apply makes it so;\n"+
			"drift compares the live resources with the last apply; destroy deletes\n"+
			"everything but what the template retains.\n\n"+
			"Start from a blueprint: gpucloud stacks blueprints show llm-finetune > train.yaml",
		newStacksPlanCommand(s), newStacksApplyCommand(s), newStacksDriftCommand(s), newStacksDestroyCommand(s),
		newStacksListCommand(s), newStacksShowCommand(s), newStacksEventsCommand(s), newStacksBlueprintsCommand())
	cmd.Aliases = []string{"stack"}
	return cmd
}

// templateFlags are what plan and apply read: the template file and its
// --param values.
type templateFlags struct {
	params []string
	tenant string
}

func (f *templateFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.params, "param", nil, "a template parameter K=V, parsed by its type (repeatable; a list as a,b or a JSON array)")
	cmd.Flags().StringVar(&f.tenant, "tenant", "", "the stack of this tenant, by name or ID (admins only)")
}

// read reads the template (FILE, or "-" for stdin) and parses --param;
// a malformed --param is a usage error.
func (f *templateFlags) read(cmd *cobra.Command, file string) (template string, params map[string]string, err error) {
	if params, err = keyValues(cmd, "param", f.params); err != nil {
		return "", nil, err
	}
	var b []byte
	if file == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", nil, err
	}
	if len(b) > stack.MaxTemplateBytes {
		return "", nil, fmt.Errorf("%s: the template is %d bytes; the limit is %d", file, len(b), stack.MaxTemplateBytes)
	}
	return string(b), params, nil
}

func newStacksPlanCommand(s *session) *cobra.Command {
	var (
		f    templateFlags
		name string
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "plan FILE [--param K=V]... [--name NAME]",
		Short: "Show what applying a template would change, cost and place",
		Long: "Plan a template against the stack NAME (a new stack without --name, or when\n" +
			"the tenant has none of that name): each resource to create, update in place,\n" +
			"replace, start or delete, and why; the stack's price per hour, on demand and\n" +
			"with spot; and whether its instances fit in the fleet now (a dry run through\n" +
			"the placement engine that reserves nothing). It changes nothing. FILE may be\n" +
			"- for stdin. The exit status is 3 when the instances do not fit now (each one\n" +
			"that does not is shown with the engine's per-reason host counts).",
		Example: "  gpucloud stacks blueprints show llm-finetune > train.yaml\n" +
			"  gpucloud stacks plan train.yaml --param nodes=4 --name train",
		Args: exactArgs(1, "the template file (- for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			tmpl, params, err := f.read(cmd, args[0])
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				tenant, err := c.tenantID(ctx, f.tenant)
				if err != nil {
					return err
				}
				p, err := c.PlanStack(ctx, api.StackRequest{Tenant: tenant, Name: name, Template: tmpl, Parameters: params})
				if err != nil {
					return c.explain(err)
				}
				if !out.table() {
					err = writeData(cmd.OutOrStdout(), out.format, p)
				} else {
					err = printPlan(cmd.OutOrStdout(), p)
				}
				if err == nil && p.Fit != nil && p.Fit.Known && !p.Fit.Fits {
					err = &codeError{code: ExitNoFit, err: fmt.Errorf("the stack's instances do not fit in the fleet now (see Fit above)")}
				}
				return err
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&name, "name", "", "plan against this stack (default: a new stack)")
	out.register(cmd)
	return cmd
}

// printPlan writes a plan: its changes, the summary line, the cost per
// hour and the fit.
func printPlan(w io.Writer, p *api.StackPlan) error {
	rows := [][]string{{"ACTION", "ADDRESS", "TYPE", "REASON"}}
	var diffs []string
	for _, c := range p.Changes {
		if c.Action == stack.ActionNone && len(c.Diffs) == 0 {
			continue
		}
		rows = append(rows, []string{string(c.Action), c.Address, c.Type, dash(c.Reason)})
		for _, d := range c.Diffs {
			diffs = append(diffs, fmt.Sprintf("  %s %s: %s -> %s", c.Address, d.Path, diffValue(d.Old), diffValue(d.New)))
		}
	}
	if len(rows) == 1 {
		fmt.Fprintln(w, "No changes: the stack is as the template says.")
	} else if err := writeTable(w, rows); err != nil {
		return err
	}
	if len(diffs) > 0 {
		fmt.Fprintln(w, "Differences:")
		for _, d := range diffs {
			fmt.Fprintln(w, d)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, planSummary(p.Summary))
	fmt.Fprintf(w, "Cost: %s/h on demand, %s/h with spot\n", formatPrice(p.Cost.OnDemand), formatPrice(p.Cost.WithSpot))
	for _, a := range p.Cost.Assumptions {
		fmt.Fprintf(w, "  note: %s\n", a)
	}
	_, err := fmt.Fprintln(w, fitText(p.Fit))
	return err
}

// planSummary is the plan's one line of counts; starts and retentions are
// named only when there are some.
func planSummary(sum map[stack.Action]int) string {
	line := fmt.Sprintf("Plan: %d to create, %d to update, %d to replace, %d to delete",
		sum[stack.ActionCreate], sum[stack.ActionUpdate], sum[stack.ActionReplace], sum[stack.ActionDelete])
	if n := sum[stack.ActionStart]; n > 0 {
		line += fmt.Sprintf(", %d to start", n)
	}
	if n := sum[stack.ActionRetain]; n > 0 {
		line += fmt.Sprintf(", %d to retain", n)
	}
	return line + "."
}

// fitText says whether the plan's instances fit now, with each one that
// does not and why.
func fitText(f *api.StackFit) string {
	switch {
	case f != nil && !f.Known && f.Reason != "":
		return "Fit: unknown (" + f.Reason + ")"
	case f == nil || !f.Known:
		return "Fit: unknown (the server cannot dry-run the placement now)"
	case f.Fits:
		return "Fit: fits now"
	}
	lines := []string{"Fit: does not fit now"}
	for _, l := range f.Lines {
		if !l.Fits {
			lines = append(lines, fmt.Sprintf("  %s: %s", l.Address, dash(l.Reason)))
		}
	}
	return strings.Join(lines, "\n")
}

// diffValue prints one side of a difference; absent is "-".
func diffValue(v any) string {
	if v == nil {
		return "-"
	}
	return valueText(v)
}

func newStacksApplyCommand(s *session) *cobra.Command {
	var (
		f    templateFlags
		name string
		keep bool
		w    waitFlags
		out  outputFlag
	)
	cmd := &cobra.Command{
		Use:   "apply FILE --name NAME [--param K=V]... [--wait]",
		Short: "Create or update a stack from a template",
		Long: "Make the template the stack's wanted state (creating the stack when the\n" +
			"tenant has none of that name). The server creates, updates, replaces and\n" +
			"deletes resources in dependency order, in parallel where it can; a failed\n" +
			"step rolls back what the apply changed, unless --keep-on-failure. A retried\n" +
			"apply resumes; nothing is created twice. FILE may be - for stdin.\n\n" +
			"With --wait the command prints each step as it happens, then waits until every\n" +
			"instance of the stack runs; it exits non-zero when the apply fails.",
		Example: "  gpucloud stacks apply train.yaml --name train --param nodes=4 --wait",
		Args:    exactArgs(1, "the template file (- for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if name == "" {
				return cmdutil.Usagef(cmd, "--name is required: the stack's name")
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			tmpl, params, err := f.read(cmd, args[0])
			if err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				tenant, err := c.tenantID(ctx, f.tenant)
				if err != nil {
					return err
				}
				sw := &stackWatch{c: c, stderr: cmd.ErrOrStderr(), tenant: tenant, name: name}
				sw.fit(tmpl)
				if w.wait {
					if err := sw.skip(ctx); err != nil {
						return c.explain(err)
					}
				}
				st, err := c.ApplyStack(ctx, name, api.ApplyStackRequest{Tenant: tenant, Template: tmpl, Parameters: params, KeepOnFailure: keep})
				if err != nil {
					return c.explain(err)
				}
				if !w.wait {
					return printStackState(cmd.OutOrStdout(), out.format, st)
				}
				st, err = c.waitApply(ctx, sw, st, w.timeout)
				if st != nil {
					if perr := printStackState(cmd.OutOrStdout(), out.format, st); err == nil {
						err = perr
					}
				}
				return err
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&name, "name", "", "the stack's name (required)")
	cmd.Flags().BoolVar(&keep, "keep-on-failure", false, "keep what a failed apply created instead of rolling it back")
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until the apply is done and every instance of the stack runs, printing each step")
	cmd.Flags().DurationVar(&w.timeout, "timeout", defaultWaitTimeout, "with --wait, give up after this long")
	out.register(cmd)
	return cmd
}

// printStackState writes a stack's name and state (and why it failed), or
// the stack as JSON or YAML.
func printStackState(w io.Writer, format string, st *cloud.Stack) error {
	if format != "table" {
		return writeData(w, format, st)
	}
	line := fmt.Sprintf("stack %s: %s", st.Name, st.State)
	if st.Reason != "" {
		line += ": " + st.Reason
	}
	_, err := fmt.Fprintln(w, line)
	return err
}

func newStacksDriftCommand(s *session) *cobra.Command {
	var (
		tenant string
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "drift NAME",
		Short: "Compare a stack's live resources with its last apply",
		Long: "List each resource of the stack that was terminated, deleted, stopped or\n" +
			"changed outside the stack since its last apply. The next apply repairs them.\n" +
			"The exit code is 0 when the stack is in sync, 2 when it drifted and 1 when\n" +
			"the command failed, like terraform plan -detailed-exitcode. With -o json or\n" +
			"yaml the exit code says the same.",
		Args: exactArgs(1, "the stack's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				d, err := c.StackDrift(ctx, t, args[0])
				if err != nil {
					return c.explain(err)
				}
				w := cmd.OutOrStdout()
				drifted := &codeError{code: ExitDrift, err: errors.New("")}
				if !out.table() {
					if err := writeData(w, out.format, d); err != nil || d.InSync {
						return err
					}
					return drifted
				}
				if d.InSync {
					_, err := fmt.Fprintf(w, "stack %s is in sync\n", args[0])
					return err
				}
				rows := [][]string{{"ADDRESS", "TYPE", "ID", "DRIFT", "DETAILS"}}
				for _, x := range d.Drift {
					var details []string
					for _, df := range x.Diffs {
						details = append(details, fmt.Sprintf("%s: %s -> %s", df.Path, diffValue(df.Old), diffValue(df.New)))
					}
					rows = append(rows, []string{x.Address, x.Type, dash(x.ID), x.Drift, dash(strings.Join(details, "; "))})
				}
				if err := writeTable(w, rows); err != nil {
					return err
				}
				if _, err := fmt.Fprintf(w, "`gpucloud stacks apply` repairs this.\n"); err != nil {
					return err
				}
				return drifted
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the stack of this tenant, by name or ID (admins only)")
	out.register(cmd)
	return cmd
}

func newStacksDestroyCommand(s *session) *cobra.Command {
	var (
		tenant string
		w      waitFlags
		out    outputFlag
	)
	cmd := &cobra.Command{
		Use:   "destroy NAME [--wait]",
		Short: "Delete a stack's resources, keeping the retained ones",
		Long: "Delete the stack's resources in reverse dependency order, keeping those with\n" +
			"deletion_policy: retain (and commitments, which are never cancelled). After it\n" +
			"nothing of the stack accrues cost but what it retained. With --wait the command\n" +
			"prints each step and returns once the stack is destroyed, listing what it kept.",
		Example: "  gpucloud stacks destroy train --wait",
		Args:    exactArgs(1, "the stack's name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			return s.withConn(cmd, func(ctx context.Context, c *conn) error {
				t, err := c.tenantID(ctx, tenant)
				if err != nil {
					return err
				}
				// What the stack holds, to say at the end what it kept.
				before, err := c.GetStack(ctx, t, args[0])
				if err != nil {
					return c.explain(err)
				}
				sw := &stackWatch{c: c, stderr: cmd.ErrOrStderr(), tenant: t, name: args[0]}
				if w.wait {
					if err := sw.skip(ctx); err != nil {
						return c.explain(err)
					}
				}
				st, err := c.DestroyStack(ctx, t, args[0])
				if err != nil {
					return c.explain(err)
				}
				if !w.wait {
					return printStackState(cmd.OutOrStdout(), out.format, st)
				}
				kept, err := c.waitDestroy(ctx, sw, st, before, w.timeout)
				if err != nil {
					return err
				}
				st.State = cloud.StackDestroyed
				if err := printStackState(cmd.OutOrStdout(), out.format, st); err != nil || !out.table() {
					return err
				}
				if len(kept) == 0 {
					_, err = fmt.Fprintln(cmd.OutOrStdout(), "Retained: none")
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "Retained (left alive, and billed; the stack no longer manages them):")
				rows := [][]string{{"  ADDRESS", "TYPE", "ID"}}
				for _, r := range kept {
					rows = append(rows, []string{"  " + r.Address, r.Type, dash(r.ID)})
				}
				return writeTable(cmd.OutOrStdout(), rows)
			})
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the stack of this tenant, by name or ID (admins only)")
	w.register(cmd, "destroyed")
	cmd.Flags().Lookup("wait").Usage = "wait until the stack is destroyed, printing each step and what it retained"
	out.register(cmd)
	return cmd
}
