package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/internal/ctrlesc"
)

// pollEvery is how often --wait and logs --follow ask the server; tests
// shorten it.
var pollEvery = time.Second

// terminalWidth reports whether w is a terminal and its width; tests
// replace it to see the progress line.
var terminalWidth = func(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 {
		cols = 80
	}
	return cols, true
}

// waitFlags are --wait and --timeout.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func (w *waitFlags) register(cmd *cobra.Command, target string) {
	cmd.Flags().BoolVar(&w.wait, "wait", false, "wait until the instance is "+target+" (a progress line shows on a terminal)")
	cmd.Flags().DurationVar(&w.timeout, "timeout", defaultWaitTimeout, "with --wait, give up after this long")
}

func (w *waitFlags) check(cmd *cobra.Command) error {
	if cmd.Flags().Changed("timeout") && !w.wait {
		return cmdutil.Usagef(cmd, "--timeout only applies with --wait")
	}
	if w.timeout <= 0 {
		return cmdutil.Usagef(cmd, "--timeout %s: want a positive duration such as 5m", w.timeout)
	}
	return nil
}

// progressLine is one line on stderr, redrawn in place, shown only when
// stderr is a terminal.
type progressLine struct {
	w     io.Writer
	width int
	on    bool
	last  string
}

func newProgressLine(w io.Writer) *progressLine {
	width, on := terminalWidth(w)
	return &progressLine{w: w, width: width, on: on}
}

func (p *progressLine) show(s string) {
	if !p.on || s == p.last {
		return
	}
	p.last = s
	fmt.Fprintf(p.w, "\r%s\x1b[K", clip(s, max(p.width-1, 10)))
}

func (p *progressLine) clear() {
	if p.on && p.last != "" {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.last = ""
	}
}

// waitFails reports whether an instance in state st can no longer reach
// want without someone acting on it.
func waitFails(st, want cloud.State) bool {
	switch want {
	case cloud.Running:
		return !slices.Contains([]cloud.State{cloud.Pending, cloud.Scheduled, cloud.Starting, cloud.Running}, st)
	case cloud.Stopped:
		return slices.Contains([]cloud.State{cloud.Terminating, cloud.Terminated, cloud.Failed, cloud.Lost}, st)
	}
	return false
}

// withReason appends ": reason" when there is one.
func withReason(in *cloud.Instance) string {
	if in.Reason == "" {
		return ""
	}
	return ": " + in.Reason
}

// waitFor polls the instance in (as last read) until it is in state want,
// drawing a progress line on a terminal. A state from which want cannot
// be reached, the end of ctx, or timeout (which only names the limit in
// the error; ctx carries it) ends the wait with an error.
func (c *conn) waitFor(ctx context.Context, stderr io.Writer, in *cloud.Instance, want cloud.State, timeout time.Duration) (*cloud.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := newProgressLine(stderr)
	defer p.clear()
	for {
		switch {
		case in.State == want:
			return in, nil
		case in.State == cloud.Failed:
			return nil, fmt.Errorf("%s failed%s", in.ID, withReason(in))
		case waitFails(in.State, want):
			return nil, fmt.Errorf("%s is %s, so it will not be %s%s", in.ID, in.State, want, withReason(in))
		}
		line := in.ID + ": " + string(in.State)
		if in.Reason != "" {
			line += " (" + in.Reason + ")"
		}
		p.show(line)
		var err error
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-time.After(pollEvery):
			var next *cloud.Instance
			if next, err = c.GetInstance(ctx, in.ID); err == nil {
				in = next
				continue
			}
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("gave up after %s: %s is still %s%s; it keeps going (see `gpucloud instances describe %s`)",
				timeout, in.ID, in.State, withReason(in), in.ID)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted: %s is %s and keeps going (see `gpucloud instances describe %s`)", in.ID, in.State, in.ID)
		}
		return nil, c.explain(err)
	}
}

// parseIfMatch accepts a version as the API answers it in ETag: 3, "3" or
// W/"3".
func parseIfMatch(s string) (int64, error) {
	t := strings.Trim(strings.TrimPrefix(strings.TrimSpace(s), "W/"), `"`)
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 1 {
		return 0, fmt.Errorf("--if-match %q: want the instance's version, a positive integer", s)
	}
	return v, nil
}

// newInstanceActionCommand builds stop, start and terminate.
// instanceAction is what newInstanceActionCommand needs of a verb: its
// help, the state it leads to, and the client call that does it.
type instanceAction struct {
	short, long string
	want        cloud.State
	call        func(c *conn) func(context.Context, string, int64) (*cloud.Instance, error)
}

// instanceActionOf is the action of verb: stop, start, or else terminate.
func instanceActionOf(verb string) instanceAction {
	switch verb {
	case "stop":
		return instanceAction{short: "Stop instances, releasing their GPUs", want: cloud.Stopped,
			long: "Stop instances: the agent sends the workload SIGTERM, then SIGKILL after the\n" +
				"grace period, and the GPUs are released. A pending instance stops at once.\n" +
				"'gpucloud instances start' puts a stopped instance back in the queue.",
			call: func(c *conn) func(context.Context, string, int64) (*cloud.Instance, error) { return c.StopInstance }}
	case "start":
		return instanceAction{short: "Start stopped instances again", want: cloud.Running,
			long: "Start stopped instances: they go back to pending and the scheduler places\n" +
				"them again, possibly on another host. Starting a running instance changes\n" +
				"nothing.",
			call: func(c *conn) func(context.Context, string, int64) (*cloud.Instance, error) { return c.StartInstance }}
	}
	return instanceAction{short: "Terminate instances for good", want: cloud.Terminated,
		long: "Terminate instances: the workload is stopped, the GPUs are released and\n" +
			"the volumes detached (they outlive the instance). A terminated instance\n" +
			"cannot be started again; terminating it again changes nothing.",
		call: func(c *conn) func(context.Context, string, int64) (*cloud.Instance, error) {
			return c.TerminateInstance
		}}
}

// actOn calls call on each instance of ids (IDs or names) and returns the
// instances it changed and the errors of the others: with one ID the
// error is all there is to say, with several each names its instance.
func (c *conn) actOn(ctx context.Context, ids []string, version int64,
	call func(c *conn) func(context.Context, string, int64) (*cloud.Instance, error)) (done []*cloud.Instance, failed []error) {
	for _, arg := range ids {
		id, err := c.resolve(ctx, instanceKind, arg)
		var in *cloud.Instance
		if err == nil {
			in, err = call(c)(ctx, id, version)
			err = c.explain(err)
		}
		if err != nil {
			if len(ids) > 1 {
				err = fmt.Errorf("%s: %w", arg, err)
			}
			failed = append(failed, err)
			continue
		}
		done = append(done, in)
	}
	return done, failed
}

// waitAll waits, all within timeout, until each instance is in state want,
// and returns those that got there and the errors of the others.
func (c *conn) waitAll(ctx context.Context, stderr io.Writer, ins []*cloud.Instance, want cloud.State, timeout time.Duration) (done []*cloud.Instance, failed []error) {
	wctx, wcancel := context.WithTimeout(ctx, timeout)
	defer wcancel()
	done = ins[:0]
	for _, in := range ins {
		got, err := c.waitFor(wctx, stderr, in, want, timeout)
		if err != nil {
			failed = append(failed, err)
			continue
		}
		done = append(done, got)
	}
	return done, failed
}

func newInstanceActionCommand(s *session, verb string) *cobra.Command {
	act := instanceActionOf(verb)
	short, long, want := act.short, act.long, act.want
	var (
		ifMatch string
		w       waitFlags
		out     outputFlag
	)
	cmd := &cobra.Command{
		Use:   verb + " ID...",
		Short: short,
		Long: long + "\n\n--if-match makes the change only if the instance's version is still the one\n" +
			"given (the Version that describe shows), so that two operators cannot\n" +
			"silently act on a state the other has already changed. With --wait the\n" +
			"command returns once every instance is " + string(want) + ".",
		Example: fmt.Sprintf("  gpucloud instances %s i-0123456789abcdef\n  gpucloud instances %s i-0123456789abcdef i-fedcba9876543210 --wait\n"+
			"  gpucloud instances %s i-0123456789abcdef --if-match 7", verb, verb, verb),
		Args: minArgs(1, "one or more instance IDs or names"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			if err := w.check(cmd); err != nil {
				return err
			}
			var version int64
			if ifMatch != "" {
				if len(args) > 1 {
					return cmdutil.Usagef(cmd, "--if-match applies to one instance, got %d IDs", len(args))
				}
				v, err := parseIfMatch(ifMatch)
				if err != nil {
					return cmdutil.Usagef(cmd, "%v", err)
				}
				version = v
			}
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			done, failed := c.actOn(ctx, args, version, act.call)
			if w.wait {
				var late []error
				done, late = c.waitAll(ctx, cmd.ErrOrStderr(), done, want, w.timeout)
				failed = append(failed, late...)
			}
			if len(done) > 0 {
				if err := printInstances(cmd.OutOrStdout(), out.format, done...); err != nil {
					return err
				}
			}
			switch {
			case len(args) == 1 && len(failed) == 1:
				return failed[0]
			case len(failed) > 0:
				return fmt.Errorf("%d of %d instances failed: %w", len(failed), len(args), errors.Join(failed...))
			}
			return nil
		},
		ValidArgsFunction: s.completeInstances(true),
	}
	cmd.Flags().StringVar(&ifMatch, "if-match", "", "act only if the instance's version is still this one (one ID only)")
	w.register(cmd, string(want))
	out.register(cmd)
	return cmd
}

func newInstancesEventsCommand(s *session) *cobra.Command {
	cmd := newEventsCommand(s, &cobra.Command{
		Use:   "events ID",
		Short: "Show an instance's events, oldest first",
		Long: "Show every event of an instance, oldest first: its creation, each state change\n" +
			"with its reason and who caused it (a user ID, \"scheduler\", or the agent).",
		Example: "  gpucloud instances events i-0123456789abcdef\n  gpucloud instances events i-0123456789abcdef -o json",
	}, instanceKind, (*conn).allEvents)
	cmd.ValidArgsFunction = s.completeInstances(false)
	return cmd
}

// newEventsCommand is cmd showing every event of one resource of kind k
// (an ID or a name), oldest first, as a table or as JSON or YAML; all
// reads them.
func newEventsCommand(s *session, cmd *cobra.Command, k resourceKind,
	all func(c *conn, ctx context.Context, id string) ([]*cloud.Event, error)) *cobra.Command {
	var out outputFlag
	cmd.Args = exactArgs(1, k.arg())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if err := out.check(cmd); err != nil {
			return err
		}
		c, err := s.connect(cmd)
		if err != nil {
			return err
		}
		ctx, cancel := interruptible(cmd)
		defer cancel()
		id, err := c.resolve(ctx, k, args[0])
		if err != nil {
			return err
		}
		evs, err := all(c, ctx, id)
		if err != nil {
			return c.explain(err)
		}
		if !out.table() {
			return writeData(cmd.OutOrStdout(), out.format, evs)
		}
		if len(evs) == 0 {
			fmt.Fprintln(cmd.OutOrStdout(), "no events")
			return nil
		}
		return writeEvents(cmd.OutOrStdout(), evs, "")
	}
	out.register(cmd)
	return cmd
}

// finished reports whether an instance's workload can write no more output.
func finished(st cloud.State) bool {
	return st == cloud.Stopped || st == cloud.Failed || st == cloud.Terminated || st == cloud.Lost
}

// notStarted reports whether an instance in state st has not started its
// workload (yet, or again after a stop).
func notStarted(st cloud.State) bool {
	return st == cloud.Pending || st == cloud.Scheduled || st == cloud.Starting
}

// noOutputNote explains why an instance has no output, when its state
// does: it has not started yet, or it failed (the reason says why, often
// before its workload could write anything). "" when there is nothing to
// explain: a running workload that has not written anything yet.
func noOutputNote(in *cloud.Instance, follow bool) string {
	switch {
	case notStarted(in.State) && follow:
		return fmt.Sprintf("%s has not started yet (%s%s); waiting for its output", in.ID, in.State, withReason(in))
	case notStarted(in.State):
		return fmt.Sprintf("%s has not started yet (%s%s), so it has no output", in.ID, in.State, withReason(in))
	case in.State == cloud.Failed || in.State == cloud.Lost:
		return fmt.Sprintf("%s wrote no output; it is %s%s", in.ID, in.State, withReason(in))
	}
	return ""
}

func newInstancesLogsCommand(s *session) *cobra.Command {
	var follow, raw bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print an instance's output",
		Long: "Print what an instance's workload wrote to stdout and stderr, as its agent\n" +
			"reported it. With --follow, keep printing new output until the instance stops,\n" +
			"fails or is terminated (or Ctrl-C).\n\n" +
			"An instance that has not started yet has no output: a one-line note on stderr\n" +
			"says so (and its state), and the exit status is 0, as for any instance whose\n" +
			"workload has written nothing yet.\n\n" +
			"On a terminal, control characters other than newline and tab are shown\n" +
			"visibly (ESC as \\x1b, CR as \\r), so that no escape sequence the workload\n" +
			"wrote (a window title, the clipboard, cursor moves) acts on the terminal;\n" +
			"--raw writes the bytes as they are. Into a pipe or a file the output is\n" +
			"always written as it is.",
		Example: "  gpucloud instances logs i-0123456789abcdef\n  gpucloud instances logs i-0123456789abcdef --follow\n" +
			"  gpucloud instances logs i-0123456789abcdef --raw",
		Args: exactArgs(1, instanceKind.arg()),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			out := cmd.OutOrStdout()
			_, tty := terminalWidth(out)
			id, err := c.resolve(ctx, instanceKind, args[0])
			if err != nil {
				return err
			}
			err = c.copyLogs(ctx, out, cmd.ErrOrStderr(), id, follow, tty && !raw)
			if follow && ctx.Err() != nil {
				// Ctrl-C is how a follow ends.
				return nil
			}
			return err
		},
		ValidArgsFunction: s.completeInstances(false),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new output until the instance stops")
	cmd.Flags().BoolVar(&raw, "raw", false, "write the output's bytes as they are on a terminal too, escape sequences included\n(a pipe or a file always gets them as they are)")
	return cmd
}

// copyLogs writes an instance's output to w: what there is now, or with
// follow, everything until the instance is finished; with escape, its
// control characters made visible (ctrlesc), for a terminal. Output the
// server dropped to keep its log under its cap is noted on stderr.
func (c *conn) copyLogs(ctx context.Context, w, stderr io.Writer, id string, follow, escape bool) error {
	var offset int64
	last, noted := false, false
	for {
		ch, err := c.InstanceLogs(ctx, id, offset)
		if err != nil {
			var ce *cloud.Error
			if errors.As(err, &ce) && ce.Code == cloud.NotFound && strings.HasPrefix(ce.Message, "no such route") {
				return fmt.Errorf("the gpucloud server at %s does not serve instance logs (it is older than this command line)", c.server)
			}
			return c.explain(err)
		}
		if ch.Start > offset {
			fmt.Fprintf(stderr, "[gpucloud: %d bytes of earlier output were dropped by the server]\n", ch.Start-offset)
		}
		if ch.Data != "" {
			data := ch.Data
			if escape {
				data = ctrlesc.Escape(data)
			}
			if _, err := io.WriteString(w, data); err != nil {
				return err
			}
		}
		moved := ch.Offset > offset
		offset = max(offset, ch.Offset)
		if ch.Data != "" && moved {
			continue
		}
		if offset == 0 && !noted {
			// No output at all: say why, when the state explains it, on
			// stderr so that what goes to stdout is still only the output.
			noted = true
			in, err := c.GetInstance(ctx, id)
			if err != nil {
				return c.explain(err)
			}
			if n := noOutputNote(in, follow); n != "" {
				fmt.Fprintln(stderr, n)
			}
			if !follow {
				return nil
			}
		}
		if !follow || last {
			return nil
		}
		in, err := c.GetInstance(ctx, id)
		if err != nil {
			return c.explain(err)
		}
		// Once the workload is finished, one more read drains what it
		// wrote before its last report.
		last = finished(in.State)
		if !last {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pollEvery):
			}
		}
	}
}
