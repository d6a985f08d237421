package stackengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
)

// Step runs one round of every stack being applied or destroyed: the
// stack controller's step, on the leader. It answers how many stacks it
// worked on. One stack's failure does not stop the others: it is recorded
// on the stack.
func (e *Engine) Step(ctx context.Context) (int, error) {
	todo, err := e.svc.Stacks.Working(ctx)
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, st := range todo {
		if err := e.stepStack(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("stack %s: %w", st.ID, err))
		}
	}
	return len(todo), errors.Join(errs...)
}

// round is one round of one stack.
type round struct {
	svc   *service.Services
	st    *cloud.Stack
	rec   *service.StackRecord
	actor service.Actor
	// bound is the template the round applies; nil when it removes
	// everything (a destroy, or the rollback of a first apply).
	bound  *stack.Bound
	events []*cloud.StackEvent
	mu     sync.Mutex
}

func (r *round) event(address, action, outcome, resource, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, &cloud.StackEvent{StackID: r.st.ID, Time: r.svc.Now(), Address: address,
		Action: action, Outcome: outcome, Resource: resource, Message: msg})
}

// save writes the record and the round's events; the stack's state and
// reason as set on r.st.
func (r *round) save(ctx context.Context) error {
	err := r.svc.Stacks.SaveRound(ctx, r.st, r.rec, r.events)
	if err == nil {
		r.events = nil
	}
	return err
}

// stepStack runs one round of a stack: finish the creates a crash cut short,
// read the live resources, plan, and run the changes that are ready, wave
// after wave.
func (e *Engine) stepStack(ctx context.Context, st *cloud.Stack) error {
	rec, err := service.DecodeStackRecord(st)
	if err != nil {
		return err
	}
	r := &round{svc: e.svc, st: st, rec: rec,
		actor: service.Actor{ID: rec.Actor, TenantID: st.TenantID, Role: cloud.RoleMember}}
	if r.actor.ID == "" {
		r.actor.ID = "stack:" + st.Name
	}
	ctx = service.WithSystemTags(ctx, map[string]string{service.TagStack: st.Name})
	rec.Waiting = map[string]string{}
	destroying := st.State == cloud.StackDestroying || rec.RollingBack != "" && rec.LastGood == nil
	var b *stack.Bound
	if !destroying {
		if b, err = service.BindStack(st.Template, service.StackArgs(st)); err != nil {
			return r.fail(ctx, err)
		}
		rec.State.Parameters = b.Parameters
		r.bound = b
	}
	if err := r.finishPending(ctx); err != nil {
		return r.fail(ctx, err)
	}
	live, statuses, err := e.svc.Stacks.Refresh(ctx, r.actor, rec)
	if err != nil {
		return err
	}
	if err := r.failedCreates(ctx, live, statuses, destroying); err != nil {
		return r.fail(ctx, err)
	}
	// Each wave makes progress or the round ends, so a round runs at most
	// one wave per change plus the retired copies' deletion.
	for range 2*len(rec.State.Resources) + 2*stack.MaxResources + 2 {
		var p *stack.PlanResult
		if destroying {
			p = stack.PlanDestroy(rec.State)
		} else if p, err = stack.Plan(b, rec.State, live); err != nil {
			return r.fail(ctx, service.StackTemplateError("template", err))
		}
		ran, pending, err := r.wave(ctx, b, p, live)
		if err != nil {
			return r.fail(ctx, err)
		}
		if !pending && len(rec.Retired) > 0 {
			n, err := r.deleteRetired(ctx)
			if err != nil {
				return r.fail(ctx, err)
			}
			ran += n
		}
		if err := r.save(ctx); err != nil {
			return err
		}
		if ran == 0 {
			if !pending && len(rec.Retired) == 0 && len(rec.Waiting) == 0 && len(rec.Pending) == 0 {
				return r.finish(ctx, b, destroying)
			}
			return nil
		}
		// What ran changed the state: the next wave plans on it with no
		// drift left for what was repaired.
		if live, statuses, err = e.svc.Stacks.Refresh(ctx, r.actor, rec); err != nil {
			return err
		}
		if err := r.failedCreates(ctx, live, statuses, destroying); err != nil {
			return r.fail(ctx, err)
		}
	}
	return nil
}

// failedCreates fails an apply whose own creates failed or went since: an
// instance that failed at start is not replaced again and again.
func (r *round) failedCreates(ctx context.Context, live map[string]stack.Live, statuses map[string]string, destroying bool) error {
	if destroying || r.st.State != cloud.StackApplying || r.rec.RollingBack != "" {
		return nil
	}
	for _, addr := range slices.Sorted(maps.Keys(live)) {
		rs := r.rec.State.Resources[addr]
		if !live[addr].Gone || rs == nil || r.rec.Created[addr] != rs.ID {
			continue
		}
		msg := fmt.Sprintf("%s %s is %s", addr, rs.ID, statuses[addr])
		if rs.Type == stack.TypeInstance {
			if in, err := r.svc.Instances.Get(ctx, r.actor, rs.ID); err == nil && in.Reason != "" {
				msg += ": " + in.Reason
			}
		}
		return errors.New(msg)
	}
	return nil
}

// finishPending completes the creates a round cut short (an intent without
// its result recorded): the same key answers the resource the first call
// made.
func (r *round) finishPending(ctx context.Context) error {
	for _, addr := range slices.Sorted(maps.Keys(r.rec.Pending)) {
		in := r.rec.Pending[addr]
		id, attrs, err := createResource(r.tagged(ctx, addr), r.svc, r.actor, in.Type, addr, in.Properties, in.Key)
		if err != nil {
			return err
		}
		r.recordCreate(addr, in, id, attrs)
		r.event(addr, "create", "succeeded", id, "completed after an interrupted round (key "+in.Key+")")
	}
	return nil
}

// recordCreate puts a created copy in the state, retiring the copy it
// replaces.
func (r *round) recordCreate(addr string, in *service.StackIntent, id string, attrs map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.rec.State.Resources[addr]; old != nil && old.ID != id {
		r.rec.Retired = append(r.rec.Retired, &service.StackRetired{Address: addr, State: old})
	}
	r.rec.State.Resources[addr] = &stack.ResourceState{Type: in.Type, ID: id, Properties: in.Properties,
		Attributes: attrs, DependsOn: in.DependsOn, DeletionPolicy: in.DeletionPolicy}
	delete(r.rec.Pending, addr)
	if r.rec.Created == nil {
		r.rec.Created = map[string]string{}
	}
	r.rec.Created[addr] = id
}

// finish ends an apply or a destroy that has nothing left to do.
func (r *round) finish(ctx context.Context, b *stack.Bound, destroyed bool) error {
	st, rec := r.st, r.rec
	switch {
	case destroyed && st.State == cloud.StackDestroying:
		st.State, st.Reason = cloud.StackDestroyed, ""
		kept := []string{}
		for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
			kept = append(kept, addr+" "+rec.State.Resources[addr].ID)
		}
		msg := "every resource is gone"
		if len(kept) > 0 {
			msg = "retained: " + strings.Join(kept, ", ")
		}
		r.event("", "destroy", "succeeded", "", msg)
	case rec.RollingBack != "":
		st.State, st.Reason = cloud.StackFailed, rec.RollingBack+"; rolled back"
		rec.RollingBack = ""
		if rec.LastGood != nil {
			st.Template, st.Parameters = rec.LastGood.Template, mustJSON(rec.LastGood.Args)
		}
		r.event("", "rollback", "succeeded", "", st.Reason)
	default:
		st.State, st.Reason = cloud.StackActive, ""
		rec.LastGood = &service.StackDesired{Template: st.Template, Args: service.StackArgs(st)}
		if b != nil {
			outs, err := b.OutputsPartial(rec.State.Attrs())
			if err == nil {
				st.Outputs = mustJSON(outs)
			}
		}
		r.event("", "apply", "succeeded", "", fmt.Sprintf("%d resources", len(rec.State.Resources)))
	}
	return r.save(ctx)
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// fail handles a failed step: with keep-on-failure (or a failing rollback,
// or a destroy) the stack is failed and keeps what it has; otherwise a
// rollback to the last template that applied (none: everything goes)
// starts on the next round.
func (r *round) fail(ctx context.Context, cause error) error {
	st, rec := r.st, r.rec
	msg := cause.Error()
	switch {
	case st.State == cloud.StackDestroying:
		st.Reason = "destroy: " + msg
		r.event("", "destroy", "failed", "", msg)
		// A destroy keeps trying: the next round retries.
	case rec.Keep || rec.RollingBack != "":
		if rec.RollingBack != "" {
			msg = rec.RollingBack + "; the rollback failed too: " + msg
		}
		st.State, st.Reason = cloud.StackFailed, msg
		rec.RollingBack = ""
		r.event("", "apply", "failed", "", msg)
	default:
		rec.RollingBack = "apply failed: " + msg
		st.Reason = rec.RollingBack + "; rolling back"
		// Creates whose intent is left would be completed by the next
		// round; a rollback forgets them instead.
		for addr, in := range rec.Pending {
			id, _, err := createResource(r.tagged(ctx, addr), r.svc, r.actor, in.Type, addr, in.Properties, in.Key)
			if err == nil {
				r.recordCreate(addr, in, id, nil)
			} else {
				delete(rec.Pending, addr)
			}
		}
		if rec.LastGood != nil {
			st.Template, st.Parameters = rec.LastGood.Template, mustJSON(rec.LastGood.Args)
		}
		r.event("", "apply", "failed", "", msg+"; rolling back")
	}
	if err := r.save(ctx); err != nil {
		return errors.Join(cause, err)
	}
	return nil
}
