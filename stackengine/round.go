package stackengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
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

// tagged is ctx with the tags of a stack's resource copy (tagsOf).
func (r *round) tagged(ctx context.Context, addr string) context.Context {
	return service.WithSystemTags(ctx, r.tagsOf(addr))
}

// tagsOf are the tags of a stack's resource copy: the stack's name, and
// for instances their resource, job, rank and job size.
func (r *round) tagsOf(addr string) map[string]string {
	tags := map[string]string{service.TagStack: r.st.Name}
	res, _, _ := stack.SplitAddress(addr)
	tags[service.TagStackResource] = res
	if job, rank, world, ok := r.jobOf(addr); ok {
		tags[service.TagStackJob], tags[service.TagStackRank], tags[service.TagStackWorld] = job, strconv.Itoa(rank), strconv.Itoa(world)
	}
	return tags
}

// jobOf is an instance copy's job: the copies that train together. Those
// that depend on one placement group of the stack form its job (in
// template order: a head before its workers); others, the copies of their
// resource.
func (r *round) jobOf(addr string) (job string, rank, world int, ok bool) {
	b := r.bound
	if b == nil {
		return "", 0, 0, false
	}
	jobKey := func(c *stack.Copy) string {
		for _, d := range c.DependsOn {
			if dc, ok := b.Copy(d); ok && dc.Type == stack.TypePlacementGroup {
				return d
			}
		}
		return c.Resource
	}
	me, found := b.Copy(addr)
	if !found || me.Type != stack.TypeInstance {
		return "", 0, 0, false
	}
	job = jobKey(me)
	for _, c := range b.Copies {
		if c.Type != stack.TypeInstance || jobKey(c) != job {
			continue
		}
		if c.Address == addr {
			rank = world
		}
		world++
	}
	return job, rank, world, true
}

// ready says whether a change can run now: every copy it depends on is
// applied and has no change of its own under way, and its properties
// resolve (an attribute such as a private address may not be known yet).
func (r *round) ready(b *stack.Bound, c *stack.Change, busy map[string]bool) (map[string]any, string) {
	for _, d := range c.DependsOn {
		if busy[d] {
			return nil, "waits for " + d
		}
		if _, ok := r.rec.State.Resources[d]; !ok {
			return nil, "waits for " + d
		}
	}
	if b == nil {
		return c.Properties, ""
	}
	props, err := b.Resolve(c.Address, r.rec.State.Attrs())
	if err != nil {
		var me *stack.MissingError
		if errors.As(err, &me) {
			return nil, "waits for " + me.Address + "." + me.Attr
		}
		return nil, err.Error()
	}
	return props, ""
}

// wave runs the plan's changes that are ready, in parallel. It answers how
// many ran and whether changes other than deletes and retains remain.
func (r *round) wave(ctx context.Context, b *stack.Bound, p *stack.PlanResult, live map[string]stack.Live) (ran int, pending bool, err error) {
	busy := map[string]bool{}
	for _, c := range p.Changes {
		if c.Action != stack.ActionNone {
			busy[c.Address] = true
		}
	}
	type job struct {
		c     *stack.Change
		props map[string]any
	}
	var jobs []job
	for _, c := range p.Changes {
		switch c.Action {
		case stack.ActionNone:
			continue
		case stack.ActionDelete, stack.ActionRetain:
			// Deletes wait for every create and update, and for the
			// copies that depend on them.
			if pendingWork(p) && !r.isDestroy(b) {
				pending = true
				continue
			}
			if dep := r.dependent(c.Address); dep != "" {
				r.rec.Waiting[c.Address] = "waits for " + dep + " to go"
				continue
			}
			jobs = append(jobs, job{c: c})
			continue
		}
		pending = true
		if c.Action == stack.ActionReplace && c.Type == stack.TypeInstance {
			if old := r.rec.State.Resources[c.Address]; old != nil && r.endsFirst(c, old, live) {
				// The old copy ends before its replacement starts: it is
				// gone already (failed), or it holds volumes the new one
				// takes over.
				if st, _ := old.Attributes["state"].(string); st != string(cloud.Terminated) {
					if _, _, err := deleteResource(ctx, r.svc, r.actor, old); err != nil {
						return ran, pending, fmt.Errorf("%s (replace): end %s: %w", c.Address, old.ID, err)
					}
					if st != string(cloud.Terminating) {
						ran++
					}
					r.rec.Waiting[c.Address] = "waits for the copy it replaces, " + old.ID + ", to end"
					continue
				}
			}
		}
		deps := map[string]bool{}
		for k := range busy {
			deps[k] = busy[k] && k != c.Address
		}
		props, why := r.ready(b, c, deps)
		if why != "" {
			r.rec.Waiting[c.Address] = why
			continue
		}
		jobs = append(jobs, job{c: c, props: props})
	}
	// Intents first, so that a crash in the middle of the creates leaves
	// them for the next round to complete.
	for _, j := range jobs {
		if j.c.Action == stack.ActionCreate || j.c.Action == stack.ActionReplace {
			r.rec.Pending[j.c.Address] = &service.StackIntent{Type: j.c.Type, Key: r.key(j.c.Address), Properties: j.props,
				DependsOn: j.c.DependsOn, DeletionPolicy: j.c.DeletionPolicy}
		}
	}
	if len(r.rec.Pending) > 0 {
		if err := r.save(ctx); err != nil {
			return 0, pending, err
		}
	}
	// The wave's instance creates go in one transaction when they can
	// (createMany); the rest, and all of them when that fails, one by one.
	var batch []job
	rest := jobs[:0:0]
	for _, j := range jobs {
		if j.c.Type == stack.TypeInstance && (j.c.Action == stack.ActionCreate || j.c.Action == stack.ActionReplace) {
			batch = append(batch, j)
		} else {
			rest = append(rest, j)
		}
	}
	if len(batch) > 1 {
		changes := make([]*stack.Change, len(batch))
		for i, j := range batch {
			changes[i] = j.c
		}
		if n, ok := r.createInstances(ctx, changes); ok {
			ran += n
			batch = nil
		}
	}
	jobs = append(rest, batch...)
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, waveWorkers)
		errMu sync.Mutex
		first error
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			progressed, err := r.do(ctx, j.c, j.props)
			errMu.Lock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s (%s): %w", j.c.Address, j.c.Action, err)
			}
			if progressed {
				ran++
			}
			errMu.Unlock()
		}()
	}
	wg.Wait()
	return ran, pending, first
}

// createInstances creates a wave's instances in one transaction, as
// their intents say; ok is false when that failed (nothing was written),
// and the caller creates them one by one.
func (r *round) createInstances(ctx context.Context, changes []*stack.Change) (int, bool) {
	items := make([]service.InstanceCreate, len(changes))
	intents := make([]*service.StackIntent, len(changes))
	for i, c := range changes {
		in := r.rec.Pending[c.Address]
		if in == nil {
			return 0, false
		}
		var spec service.InstanceSpec
		if err := service.DecodeStackProps(c.Address, in.Properties, &spec); err != nil {
			return 0, false
		}
		items[i], intents[i] = service.InstanceCreate{Spec: spec, Key: in.Key, Tags: r.tagsOf(c.Address)}, in
	}
	out, err := r.svc.Instances.CreateMany(ctx, r.actor, items)
	if err != nil {
		return 0, false
	}
	for i, c := range changes {
		r.recordCreate(c.Address, intents[i], out[i].ID, service.ResourceAttrs(out[i]))
		r.event(c.Address, string(c.Action), "succeeded", out[i].ID, c.Reason)
	}
	return len(changes), true
}

// endsFirst says whether an instance's replacement waits for the old copy
// to end: when the old one is gone (failed or terminated outside the
// stack), or either holds volumes, which attach to one instance at a
// time.
func (r *round) endsFirst(c *stack.Change, old *stack.ResourceState, live map[string]stack.Live) bool {
	if live[c.Address].Gone {
		return true
	}
	vols := func(props map[string]any) bool {
		v, _ := props["volumes"].([]any)
		return len(v) > 0
	}
	return vols(old.Properties) || vols(c.Properties)
}

// isDestroy says whether the round removes everything (no template).
func (r *round) isDestroy(b *stack.Bound) bool { return b == nil }

// pendingWork says whether a plan still creates, replaces, updates or
// starts something.
func pendingWork(p *stack.PlanResult) bool {
	for _, c := range p.Changes {
		switch c.Action {
		case stack.ActionCreate, stack.ActionReplace, stack.ActionUpdate, stack.ActionStart:
			return true
		}
	}
	return false
}

// dependent is an applied copy that depends on addr, if any: addr is
// deleted after it.
func (r *round) dependent(addr string) string {
	for _, other := range slices.Sorted(maps.Keys(r.rec.State.Resources)) {
		if slices.Contains(r.rec.State.Resources[other].DependsOn, addr) {
			return other
		}
	}
	return ""
}

// key is the idempotency key of addr's next copy.
func (r *round) key(addr string) string {
	if in := r.rec.Pending[addr]; in != nil {
		return in.Key
	}
	gen := r.rec.Gens[addr] + 1
	r.rec.Gens[addr] = gen
	return "stack-" + r.st.ID + "-" + addr + "-g" + strconv.Itoa(gen)
}

// do carries out one change; progressed is false when it must wait for a
// later round (a delete that cannot happen yet).
func (r *round) do(ctx context.Context, c *stack.Change, props map[string]any) (progressed bool, err error) {
	r.mu.Lock()
	old := r.rec.State.Resources[c.Address]
	in := r.rec.Pending[c.Address]
	r.mu.Unlock()
	switch c.Action {
	case stack.ActionCreate, stack.ActionReplace:
		id, attrs, err := createResource(r.tagged(ctx, c.Address), r.svc, r.actor, c.Type, c.Address, in.Properties, in.Key)
		if err != nil {
			r.event(c.Address, string(c.Action), "failed", "", err.Error())
			return false, err
		}
		r.recordCreate(c.Address, in, id, attrs)
		r.event(c.Address, string(c.Action), "succeeded", id, c.Reason)
	case stack.ActionUpdate:
		if err := updateGroup(ctx, r.svc, r.actor, c.Address, old.ID, props); err != nil {
			r.event(c.Address, "update", "failed", old.ID, err.Error())
			return false, err
		}
		r.mu.Lock()
		old.Properties, old.DependsOn = props, c.DependsOn
		r.mu.Unlock()
		r.event(c.Address, "update", "succeeded", old.ID, c.Reason)
	case stack.ActionStart:
		if _, err := r.svc.Instances.Act(ctx, r.actor, old.ID, service.Start, 0); err != nil {
			r.event(c.Address, "start", "failed", old.ID, err.Error())
			return false, err
		}
		r.event(c.Address, "start", "succeeded", old.ID, c.Reason)
	case stack.ActionRetain:
		r.mu.Lock()
		delete(r.rec.State.Resources, c.Address)
		r.mu.Unlock()
		r.event(c.Address, "retain", "succeeded", old.ID, c.Reason)
	case stack.ActionDelete:
		done, why, err := deleteResource(ctx, r.svc, r.actor, old)
		if err != nil {
			r.event(c.Address, "delete", "failed", old.ID, err.Error())
			return false, err
		}
		r.mu.Lock()
		if done {
			delete(r.rec.State.Resources, c.Address)
		} else {
			r.rec.Waiting[c.Address] = why
		}
		r.mu.Unlock()
		if !done {
			return false, nil
		}
		r.event(c.Address, "delete", "succeeded", old.ID, c.Reason)
	}
	return true, nil
}

// deleteRetired deletes the old copies of replaced resources (or lets
// retained ones go), once everything else of the apply is done.
func (r *round) deleteRetired(ctx context.Context) (int, error) {
	var keep []*service.StackRetired
	n := 0
	for _, old := range r.rec.Retired {
		if old.State.DeletionPolicy == stack.DeletionRetain {
			r.event(old.Address, "retain", "succeeded", old.State.ID, "the replaced copy is retained")
			n++
			continue
		}
		done, why, err := deleteResource(ctx, r.svc, r.actor, old.State)
		if err != nil {
			return n, err
		}
		if !done {
			r.rec.Waiting[old.Address+" (replaced)"] = why
			keep = append(keep, old)
			continue
		}
		r.event(old.Address, "delete", "succeeded", old.State.ID, "the replaced copy")
		n++
	}
	r.rec.Retired = keep
	return n, nil
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
