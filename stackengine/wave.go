package stackengine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
	"github.com/gpucloud/gpucloud/stack"
)

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

// resolve says whether a change can run now: every copy it depends on is
// applied and has no change of its own under way, and its properties
// resolve (an attribute such as a private address may not be known yet).
func (r *round) resolve(b *stack.Bound, c *stack.Change, busy map[string]bool) (map[string]any, string) {
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

// job is one change a wave carries out, with its resolved properties.
type job struct {
	c     *stack.Change
	props map[string]any
}

// wave runs the plan's changes that are ready, in parallel. It answers how
// many ran and whether changes other than deletes and retains remain.
func (r *round) wave(ctx context.Context, b *stack.Bound, p *stack.PlanResult, live map[string]stack.Live) (ran int, pending bool, err error) {
	jobs, ran, pending, err := r.ready(ctx, b, p, live)
	if err != nil {
		return ran, pending, err
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
	jobs, n := r.batchCreates(ctx, jobs)
	ran += n
	n, err = r.runJobs(ctx, jobs)
	return ran + n, pending, err
}

// ready picks the plan's changes that can run in this wave, and records
// why each other one waits. An instance's replacement that must wait for
// the old copy to end ends it here (counted in ran). pending says whether
// changes other than deletes and retains remain.
func (r *round) ready(ctx context.Context, b *stack.Bound, p *stack.PlanResult, live map[string]stack.Live) (jobs []job, ran int, pending bool, err error) {
	busy := map[string]bool{}
	for _, c := range p.Changes {
		if c.Action != stack.ActionNone {
			busy[c.Address] = true
		}
	}
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
				ended, err := r.endOld(ctx, c, old)
				if err != nil {
					return jobs, ran, pending, err
				}
				if ended >= 0 {
					ran += ended
					continue
				}
			}
		}
		deps := map[string]bool{}
		for k := range busy {
			deps[k] = busy[k] && k != c.Address
		}
		props, why := r.resolve(b, c, deps)
		if why != "" {
			r.rec.Waiting[c.Address] = why
			continue
		}
		jobs = append(jobs, job{c: c, props: props})
	}
	return jobs, ran, pending, nil
}

// endOld ends the old copy of an instance before its replacement starts:
// it is gone already (failed), or it holds volumes the new one takes
// over. It answers -1 when the old copy is terminated (the replacement
// can run), else how many changes it made (0 or 1), the replacement
// waiting for the old copy to end.
func (r *round) endOld(ctx context.Context, c *stack.Change, old *stack.ResourceState) (int, error) {
	st, _ := old.Attributes["state"].(string)
	if st == string(cloud.Terminated) {
		return -1, nil
	}
	if _, _, err := deleteResource(ctx, r.svc, r.actor, old); err != nil {
		return 0, fmt.Errorf("%s (replace): end %s: %w", c.Address, old.ID, err)
	}
	r.rec.Waiting[c.Address] = "waits for the copy it replaces, " + old.ID + ", to end"
	if st == string(cloud.Terminating) {
		return 0, nil
	}
	return 1, nil
}

// batchCreates creates the wave's instances in one transaction when there
// are several and they can (createInstances), and answers the jobs left
// to run one by one: the others, and all of them when that fails.
func (r *round) batchCreates(ctx context.Context, jobs []job) ([]job, int) {
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
			return rest, n
		}
	}
	return append(rest, batch...), 0
}

// runJobs carries out jobs in parallel, at most waveWorkers at once. It
// answers how many progressed and the first failure.
func (r *round) runJobs(ctx context.Context, jobs []job) (int, error) {
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, waveWorkers)
		mu    sync.Mutex
		ran   int
		first error
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			progressed, err := r.do(ctx, j.c, j.props)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = fmt.Errorf("%s (%s): %w", j.c.Address, j.c.Action, err)
			}
			if progressed {
				ran++
			}
		}()
	}
	wg.Wait()
	return ran, first
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
		var spec api.CreateInstanceRequest
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
		if err := updateResource(ctx, r.svc, r.actor, c.Type, c.Address, old, props); err != nil {
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
