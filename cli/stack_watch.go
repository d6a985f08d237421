package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// stackWatch prints a stack's new events, one line each, on stderr, in
// aligned columns (see stackEventLine).
type stackWatch struct {
	c      *conn
	stderr io.Writer
	tenant string
	name   string
	// after is the last event printed or skipped.
	after int64
	// widths are the columns' widths so far: the addresses' (set from the
	// template, see fit) and the resource IDs'. A wider value widens its
	// column from its line on.
	widths eventWidths
}

// fit widens the address column for the resources of the template src
// (a counted resource's addresses end in "[N]"), so that the stream's
// lines line up from the first one. A template that does not parse
// changes nothing: the server says what is wrong with it.
func (sw *stackWatch) fit(src string) {
	t, err := stack.Parse([]byte(src))
	if err != nil {
		return
	}
	for _, r := range t.Resources {
		n := len(r.Name)
		if r.Counted() {
			n += len("[0]")
		}
		sw.widths.address = max(sw.widths.address, n)
	}
}

// skip passes over the events the stack has now, an earlier operation's;
// a stack that does not exist yet has none.
func (sw *stackWatch) skip(ctx context.Context) error {
	err := sw.read(ctx, func(*cloud.StackEvent) {})
	if cloud.ErrorCode(err) == cloud.NotFound {
		return nil
	}
	return err
}

// events prints the events that came since the last call.
func (sw *stackWatch) events(ctx context.Context) error {
	return sw.read(ctx, func(ev *cloud.StackEvent) { fmt.Fprintln(sw.stderr, stackEventLine(ev, &sw.widths)) })
}

// read passes each event after the last one read to fn.
func (sw *stackWatch) read(ctx context.Context, fn func(*cloud.StackEvent)) error {
	for {
		page, err := sw.c.StackEvents(ctx, sw.tenant, sw.name, sw.after, 0)
		if err != nil {
			return err
		}
		for _, ev := range page.Events {
			sw.after = ev.ID
			fn(ev)
		}
		if page.Next == "" {
			return nil
		}
	}
}

// eventWidths are the widths of a stream's padded columns.
type eventWidths struct{ address, resource int }

// eventIDWidth is the resource column's least width: an ID of the longest
// prefix a stack's resources have ("asg-" and "eip-", then 16 hex digits),
// so that the stack's own lines, which have none, line up with the rest.
const eventIDWidth = len("asg-0123456789abcdef")

// stackEventLine is one event on one line, in columns: the time, the
// address ("stack" for the stack itself), what happened ("created",
// "deleted", "apply started", "create failed"), the resource's ID and the
// message. w holds the columns' widths so far; the line widens them as it
// needs. The plan's reason that only restates the step ("not in the stack
// yet" for a create, "destroying the stack" for a destroy's delete) is
// left out.
func stackEventLine(ev *cloud.StackEvent, w *eventWidths) string {
	addr := cmpOrDash(ev.Address, "stack")
	w.address = max(w.address, len(addr), len("stack"))
	w.resource = max(w.resource, len(ev.Resource), eventIDWidth)
	msg := oneLineText(ev.Message)
	if ev.Outcome == "succeeded" && (ev.Action == string(stack.ActionCreate) && msg == "not in the stack yet" ||
		ev.Action == string(stack.ActionDelete) && msg == "destroying the stack") {
		msg = ""
	}
	line := fmt.Sprintf("%s  %-*s  %-*s  %-*s  %s", ev.Time.UTC().Format(time.RFC3339), w.address, addr,
		eventWhatWidth, stackEventWhat(ev), w.resource, ev.Resource, msg)
	return strings.TrimRight(line, " ")
}

// eventWhatWidth is the width of the column that says what happened:
// "rollback succeeded", the longest stackEventWhat answers for the
// engine's actions.
const eventWhatWidth = len("rollback succeeded")

// stackEventWhat says what an event did: a resource's step that succeeded
// as a past participle ("created", "deleted"), anything else as its action
// and outcome ("apply started", "create failed", "destroy succeeded").
func stackEventWhat(ev *cloud.StackEvent) string {
	done := map[string]string{
		string(stack.ActionCreate): "created", string(stack.ActionReplace): "replaced",
		string(stack.ActionUpdate): "updated", string(stack.ActionDelete): "deleted",
		string(stack.ActionRetain): "retained", string(stack.ActionStart): "started",
	}
	if w, ok := done[ev.Action]; ok && ev.Outcome == "succeeded" && ev.Address != "" {
		return w
	}
	return ev.Action + " " + ev.Outcome
}

// waitApply follows an apply, printing the events sw has not seen, until
// the stack is active and every instance of it runs, or the stack fails:
// then it returns the stack and an error with the stack's reason.
func (c *conn) waitApply(ctx context.Context, sw *stackWatch, st *cloud.Stack, timeout time.Duration) (*cloud.Stack, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tenant := sw.tenant
	p := newProgressLine(sw.stderr)
	defer p.clear()
	var last *api.StackView
	for {
		v, err := c.GetStack(ctx, tenant, st.Name)
		if err == nil {
			last = v
			p.clear()
			err = sw.events(ctx)
		}
		if err == nil {
			switch v.State {
			case cloud.StackFailed:
				return &v.Stack, fmt.Errorf("stack %s failed: %s", v.Name, cmpOrDash(v.Reason, "no reason given"))
			case cloud.StackDestroying, cloud.StackDestroyed:
				return &v.Stack, fmt.Errorf("stack %s is %s: it was destroyed while applying", v.Name, v.State)
			case cloud.StackActive:
				waiting, bad := stackInstances(v)
				if len(bad) > 0 {
					return &v.Stack, fmt.Errorf("stack %s is active, but %s", v.Name, strings.Join(bad, ", "))
				}
				if len(waiting) == 0 {
					return &v.Stack, nil
				}
				p.show(fmt.Sprintf("%s: active; waiting for %s", v.Name, strings.Join(waiting, ", ")))
			default:
				p.show(fmt.Sprintf("%s: %s", v.Name, v.State))
			}
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(pollEvery):
				continue
			}
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			what := "not read yet"
			if last != nil {
				what = string(last.State)
				if waiting, _ := stackInstances(last); last.State == cloud.StackActive && len(waiting) > 0 {
					what += ", waiting for " + strings.Join(waiting, ", ")
				}
			}
			return nil, fmt.Errorf("gave up after %s: stack %s is %s; it keeps going (see `gpucloud stacks show %s`)", timeout, st.Name, what, st.Name)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted: stack %s keeps going (see `gpucloud stacks show %s`)", st.Name, st.Name)
		}
		return nil, c.explain(err)
	}
}

// stackInstances sorts a stack's instances that do not run yet: waiting
// ones ("box (starting)"), and bad ones, which never will without another
// apply ("box i-... is failed").
func stackInstances(v *api.StackView) (waiting, bad []string) {
	for _, r := range v.Resources {
		if r.Type != stack.TypeInstance {
			continue
		}
		switch cloud.State(r.Status) {
		case cloud.Running:
		case cloud.Pending, cloud.Scheduled, cloud.Starting:
			waiting = append(waiting, fmt.Sprintf("%s (%s)", r.Address, r.Status))
		default:
			bad = append(bad, fmt.Sprintf("%s %s is %s", r.Address, dash(r.ID), cmpOrDash(r.Status, "unknown")))
		}
	}
	return waiting, bad
}

// waitDestroy follows a destroy, printing the events sw has not seen,
// until the stack is gone (a destroyed stack is not found by its name any
// more, but its events are), and returns the resources it retained: those
// shown retained, and those the template retains (deletion_policy:
// retain, and commitments).
// before is the stack as it was before the destroy.
func (c *conn) waitDestroy(ctx context.Context, sw *stackWatch, st *cloud.Stack, before *api.StackView, timeout time.Duration) ([]api.StackResource, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tenant := sw.tenant
	p := newProgressLine(sw.stderr)
	defer p.clear()
	resources := map[string]api.StackResource{}
	for _, r := range before.Resources {
		resources[r.Address] = r
	}
	kept := map[string]bool{}
	if t, err := stack.Parse([]byte(before.Template)); err == nil {
		for addr, r := range resources {
			name, _, _ := stack.SplitAddress(addr)
			if res, ok := t.Resource(name); ok && res.DeletionPolicy == stack.DeletionRetain || r.Type == stack.TypeCommitment {
				kept[addr] = true
			}
		}
	}
	done := func() []api.StackResource {
		var out []api.StackResource
		for addr := range kept {
			if r, ok := resources[addr]; ok {
				out = append(out, r)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
		return out
	}
	for _, r := range before.Resources {
		sw.widths.address = max(sw.widths.address, len(r.Address))
	}
	for {
		v, err := c.GetStack(ctx, tenant, st.Name)
		if cloud.ErrorCode(err) == cloud.NotFound {
			// Destroyed: its last round's events (the deletions that
			// waited for others, a placement group's after its members,
			// and the destroy's end) are still to print. The name finds
			// the destroyed stack's events.
			if err := sw.events(ctx); err != nil && cloud.ErrorCode(err) != cloud.NotFound {
				return nil, c.explain(err)
			}
			return done(), nil
		}
		if err == nil && v.ID != st.ID {
			// Destroyed, and another apply made a new stack of the name.
			return done(), nil
		}
		if err == nil {
			for _, r := range v.Resources {
				resources[r.Address] = r
				if r.Status == "retained" {
					kept[r.Address] = true
				}
			}
			p.clear()
			err = sw.events(ctx)
			if cloud.ErrorCode(err) == cloud.NotFound {
				return done(), nil
			}
		}
		if err == nil {
			if v.State == cloud.StackDestroyed {
				return done(), nil
			}
			line := fmt.Sprintf("%s: %s, %d resources left", v.Name, v.State, len(v.Resources))
			if v.Reason != "" {
				line += " (" + v.Reason + ")"
			}
			p.show(line)
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(pollEvery):
				continue
			}
		}
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return nil, fmt.Errorf("gave up after %s: stack %s is not destroyed yet; it keeps going (see `gpucloud stacks show %s`)", timeout, st.Name, st.Name)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("interrupted: stack %s keeps being destroyed (see `gpucloud stacks show %s`)", st.Name, st.Name)
		}
		return nil, c.explain(err)
	}
}
