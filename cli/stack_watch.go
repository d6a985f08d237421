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

// stackWatch prints a stack's new events, one line each, on stderr.
type stackWatch struct {
	c      *conn
	stderr io.Writer
	tenant string
	name   string
	// after is the last event printed or skipped.
	after int64
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
	return sw.read(ctx, func(ev *cloud.StackEvent) { fmt.Fprintln(sw.stderr, stackEventLine(ev)) })
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

// stackEventLine is one event on one line.
func stackEventLine(ev *cloud.StackEvent) string {
	parts := []string{ev.Time.UTC().Format(time.RFC3339), cmpOrDash(ev.Address, "stack"), ev.Action, ev.Outcome}
	if ev.Resource != "" {
		parts = append(parts, ev.Resource)
	}
	if ev.Message != "" {
		parts = append(parts, oneLineText(ev.Message))
	}
	return strings.Join(parts, "  ")
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
// more), and returns the resources it retained: those shown retained, and
// those the template retains (deletion_policy: retain, and commitments).
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
	for {
		v, err := c.GetStack(ctx, tenant, st.Name)
		if cloud.ErrorCode(err) == cloud.NotFound {
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
