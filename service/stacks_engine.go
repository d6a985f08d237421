package service

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
	"github.com/gpucloud/gpucloud/stack"
)

// The stack engine. A stack's record (cloud.Stack.Applied) is the state
// of its last applied resources (stack.State), each address's generation,
// the creates under way (intents, written before the create is sent), the
// old copies of replaced resources waiting for their deletion, and the
// last template that applied cleanly (what a failed apply rolls back to).
// Every round (Step, on the leader) reads it, reads the live resources,
// plans with stack.Plan, and runs every change whose dependencies are
// done, wave after wave, in parallel within a wave, writing the record
// after each wave. A create's idempotency key is the stack's ID, the
// copy's address and its generation: a round cut short by a crash left an
// intent, and the next round completes that create with the same key, so
// it answers the resource the first call made instead of a second one.

// Stack engine limits.
const (
	// stackWaveWorkers bounds the changes one wave runs at once.
	stackWaveWorkers = 8
	// MaxStacksPerTenant bounds a tenant's stacks that are not destroyed.
	MaxStacksPerTenant = 100
	// maxStackEvents bounds one Events answer.
	maxStackEvents = 1000
)

// stackRecord is the engine's state of one stack.
type stackRecord struct {
	State *stack.State `json:"state"`
	// Gens is the generation of each address's current copy: a replace
	// creates generation n+1 with a key of its own.
	Gens map[string]int `json:"generations,omitempty"`
	// Pending are the creates sent and not yet recorded, by address.
	Pending map[string]*stackIntent `json:"pending,omitempty"`
	// Retired are the old copies of replaced resources, deleted once every
	// create and update of the apply is done.
	Retired []*stackRetired `json:"retired,omitempty"`
	// Actor is the user who applied or destroyed last: the stack acts as
	// them, in the stack's tenant.
	Actor string `json:"actor"`
	Keep  bool   `json:"keep_on_failure,omitempty"`
	// LastGood is the template and parameters of the last apply that
	// finished; nil before the first.
	LastGood *stackDesired `json:"last_good,omitempty"`
	// RollingBack is the failure a rollback undoes; empty otherwise.
	RollingBack string `json:"rolling_back,omitempty"`
	// Waiting says, per address, why a change waits for a later round.
	Waiting map[string]string `json:"waiting,omitempty"`
	// Created are the IDs this apply created, by address: one that
	// fails or goes while the apply runs fails the apply (it is not
	// replaced over and over); one that goes later is drift.
	Created map[string]string `json:"created,omitempty"`
}

type stackIntent struct {
	Type           string         `json:"type"`
	Key            string         `json:"key"`
	Properties     map[string]any `json:"properties"`
	DependsOn      []string       `json:"depends_on,omitempty"`
	DeletionPolicy string         `json:"deletion_policy,omitempty"`
	// Replaces is the ID of the copy this create replaces.
	Replaces string `json:"replaces,omitempty"`
}

type stackRetired struct {
	Address string               `json:"address"`
	State   *stack.ResourceState `json:"state"`
}

type stackDesired struct {
	Template string            `json:"template"`
	Args     map[string]string `json:"parameters,omitempty"`
}

func decodeRecord(st *cloud.Stack) (*stackRecord, error) {
	rec := &stackRecord{}
	if len(st.Applied) > 0 && string(st.Applied) != "null" {
		if err := json.Unmarshal(st.Applied, rec); err != nil {
			return nil, cloud.Errorf(cloud.Internal, "stack %s: its record does not decode: %v", st.ID, err)
		}
	}
	if rec.State == nil {
		rec.State = &stack.State{}
	}
	if rec.State.Resources == nil {
		rec.State.Resources = map[string]*stack.ResourceState{}
	}
	if rec.Gens == nil {
		rec.Gens = map[string]int{}
	}
	if rec.Pending == nil {
		rec.Pending = map[string]*stackIntent{}
	}
	return rec, nil
}

func (rec *stackRecord) encode() (json.RawMessage, error) {
	if len(rec.Waiting) == 0 {
		rec.Waiting = nil
	}
	b, err := json.Marshal(rec)
	return b, err
}

func stackArgs(st *cloud.Stack) map[string]string {
	var args map[string]string
	if len(st.Parameters) > 0 {
		_ = json.Unmarshal(st.Parameters, &args)
	}
	return args
}

// bindStack parses and binds a template with its parameters; errors are
// Invalid with the template's line and column.
func bindStack(src string, args map[string]string) (*stack.Bound, error) {
	t, err := stack.Parse([]byte(src))
	if err != nil {
		return nil, templateError("template", err)
	}
	b, err := t.Bind(args)
	if err != nil {
		return nil, templateError("parameters", err)
	}
	return b, nil
}

// templateError turns the stack package's errors into one Invalid error
// naming every position.
func templateError(field string, err error) error {
	ce := &cloud.Error{Code: cloud.Invalid, Message: field + ": " + err.Error(), Details: map[string]any{"field": field}}
	var es stack.Errors
	if errors.As(err, &es) {
		list := make([]map[string]any, 0, len(es))
		for _, e := range es {
			list = append(list, map[string]any{"line": e.Line, "column": e.Column, "path": e.Path, "message": e.Msg})
		}
		ce.Details["errors"] = list
	}
	return ce
}

// CheckStackName validates a stack's name: a resource name's rules.
func CheckStackName(name string) error {
	return CheckName("name", name, true)
}

// stackOf finds the tenant's stack of that name that actor a may see.
func stackOf(ctx context.Context, tx cloud.Tx, a Actor, tenant, name string) (*cloud.Stack, error) {
	t, err := Scope(ctx, tx, a, tenant, a.TenantID)
	if err != nil {
		return nil, err
	}
	st, err := tx.StackByName(ctx, t, name)
	if cloud.ErrorCode(err) == cloud.NotFound {
		return nil, NotFound("stack", name)
	}
	return st, err
}

func (s *Stacks) plan(ctx context.Context, a Actor, req StackRequest) (*StackPlan, error) {
	if req.Name != "" {
		if err := CheckStackName(req.Name); err != nil {
			return nil, err
		}
	}
	b, err := bindStack(req.Template, req.Parameters)
	if err != nil {
		return nil, err
	}
	var (
		rec    *stackRecord
		exists bool
		tenant string
	)
	err = s.tx(ctx, func(tx cloud.Tx) error {
		rec, exists = &stackRecord{State: &stack.State{Resources: map[string]*stack.ResourceState{}}}, false
		var err error
		if tenant, err = Scope(ctx, tx, a, req.Tenant, a.TenantID); err != nil {
			return err
		}
		if req.Name == "" {
			return nil
		}
		st, err := tx.StackByName(ctx, tenant, req.Name)
		if cloud.ErrorCode(err) == cloud.NotFound {
			return nil
		}
		if err != nil {
			return err
		}
		exists = true
		rec, err = decodeRecord(st)
		return err
	})
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: tenant, Role: cloud.RoleMember}
	live := map[string]stack.Live{}
	if exists {
		live, _, err = s.refresh(ctx, actor, rec)
		if err != nil {
			return nil, err
		}
	}
	p, err := stack.Plan(b, rec.State, live)
	if err != nil {
		return nil, templateError("template", err)
	}
	for _, c := range p.Changes {
		switch c.Action {
		case stack.ActionCreate, stack.ActionReplace, stack.ActionUpdate:
			if err := s.checkStackProps(c); err != nil {
				return nil, err
			}
		}
	}
	out := &StackPlan{Name: req.Name, Exists: exists, Changes: p.Changes, Summary: p.Summary, Params: b.Parameters}
	if out.Cost, err = s.stackCost(ctx, b, p, rec); err != nil {
		return nil, err
	}
	out.Fit = s.stackFit(b, p, rec, tenant)
	if outs, err := b.OutputsPartial(rec.State.Attrs()); err == nil {
		out.Outputs = outs
	}
	return out, nil
}

func (s *Stacks) apply(ctx context.Context, a Actor, req StackRequest) (*cloud.Stack, error) {
	if err := CheckStackName(req.Name); err != nil {
		return nil, err
	}
	// The plan's checks: the template binds, the properties are the API's,
	// and the commitment rules hold against the stack's state as recorded.
	if _, err := s.plan(ctx, a, req); err != nil {
		return nil, err
	}
	args, _ := json.Marshal(req.Parameters)
	var out *cloud.Stack
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		tenant, err := Scope(ctx, tx, a, req.Tenant, a.TenantID)
		if err != nil {
			return err
		}
		now := s.now()
		st, err := tx.StackByName(ctx, tenant, req.Name)
		switch {
		case cloud.ErrorCode(err) == cloud.NotFound:
			live, err := tx.ListStacks(ctx, tenant, false)
			if err != nil {
				return err
			}
			if len(live) >= MaxStacksPerTenant {
				return &cloud.Error{Code: cloud.QuotaExceeded,
					Message: fmt.Sprintf("the tenant has %d stacks, the most it may have; destroy one first", len(live)),
					Details: map[string]any{"limit": MaxStacksPerTenant}}
			}
			rec := &stackRecord{Actor: a.ID, Keep: req.KeepOnFailure}
			applied, err := rec.encode()
			if err != nil {
				return err
			}
			st = &cloud.Stack{ID: NewID(StackPrefix), TenantID: tenant, Name: req.Name, State: cloud.StackApplying,
				Template: req.Template, Parameters: args, Applied: applied, CreatedAt: now, UpdatedAt: now}
			if err := tx.CreateStack(ctx, st); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.State == cloud.StackDestroying:
			return &cloud.Error{Code: cloud.Conflict, Message: "stack " + req.Name + " is being destroyed; apply once it is gone",
				Details: map[string]any{"state": string(st.State)}}
		default:
			rec, err := decodeRecord(st)
			if err != nil {
				return err
			}
			rec.Actor, rec.Keep, rec.RollingBack, rec.Created = a.ID, req.KeepOnFailure, "", nil
			if st.Applied, err = rec.encode(); err != nil {
				return err
			}
			st.State, st.Reason, st.Template, st.Parameters, st.UpdatedAt = cloud.StackApplying, "", req.Template, args, now
			if err := tx.UpdateStack(ctx, st); err != nil {
				return err
			}
		}
		out = st
		return tx.AppendStackEvents(ctx, []*cloud.StackEvent{{StackID: st.ID, Time: now, Action: "apply", Outcome: "started",
			Message: "apply requested by " + a.ID}})
	})
	return out, err
}

func (s *Stacks) destroy(ctx context.Context, a Actor, tenant, name string) (*cloud.Stack, error) {
	var out *cloud.Stack
	err := s.tx(ctx, func(tx cloud.Tx) error {
		out = nil
		st, err := stackOf(ctx, tx, a, tenant, name)
		if err != nil {
			return err
		}
		if st.State == cloud.StackDestroying {
			out = st
			return nil
		}
		rec, err := decodeRecord(st)
		if err != nil {
			return err
		}
		rec.Actor, rec.RollingBack = a.ID, ""
		if st.Applied, err = rec.encode(); err != nil {
			return err
		}
		now := s.now()
		st.State, st.Reason, st.UpdatedAt = cloud.StackDestroying, "", now
		if err := tx.UpdateStack(ctx, st); err != nil {
			return err
		}
		out = st
		return tx.AppendStackEvents(ctx, []*cloud.StackEvent{{StackID: st.ID, Time: now, Action: "destroy", Outcome: "started",
			Message: "destroy requested by " + a.ID}})
	})
	return out, err
}

func (s *Stacks) list(ctx context.Context, a Actor, tenant string) ([]*cloud.Stack, error) {
	var out []*cloud.Stack
	err := s.tx(ctx, func(tx cloud.Tx) error {
		t, err := Scope(ctx, tx, a, tenant, "")
		if err != nil {
			return err
		}
		out, err = tx.ListStacks(ctx, t, false)
		return err
	})
	if out == nil {
		out = []*cloud.Stack{}
	}
	return out, err
}

func (s *Stacks) events(ctx context.Context, a Actor, tenant, name string, after int64, limit int) ([]*cloud.StackEvent, error) {
	if limit <= 0 || limit > maxStackEvents {
		limit = maxStackEvents
	}
	var out []*cloud.StackEvent
	err := s.tx(ctx, func(tx cloud.Tx) error {
		st, err := stackOf(ctx, tx, a, tenant, name)
		if err != nil {
			return err
		}
		out, err = tx.StackEvents(ctx, st.ID, after, limit)
		return err
	})
	if out == nil {
		out = []*cloud.StackEvent{}
	}
	return out, err
}

// readStack reads a stack actor a may see and its record.
func (s *Stacks) readStack(ctx context.Context, a Actor, tenant, name string) (*cloud.Stack, *stackRecord, error) {
	var (
		st  *cloud.Stack
		rec *stackRecord
	)
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if st, err = stackOf(ctx, tx, a, tenant, name); err != nil {
			return err
		}
		rec, err = decodeRecord(st)
		return err
	})
	return st, rec, err
}

func (s *Stacks) get(ctx context.Context, a Actor, tenant, name string) (*StackView, error) {
	st, rec, err := s.readStack(ctx, a, tenant, name)
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: st.TenantID, Role: cloud.RoleMember}
	_, statuses, err := s.refresh(ctx, actor, rec)
	if err != nil {
		return nil, err
	}
	v := &StackView{Stack: st, Resources: []StackResource{}}
	for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
		rs := rec.State.Resources[addr]
		v.Resources = append(v.Resources, StackResource{Address: addr, Type: rs.Type, ID: rs.ID, Status: statuses[addr]})
	}
	if len(st.Outputs) > 0 && string(st.Outputs) != "null" {
		_ = json.Unmarshal(st.Outputs, &v.Outputs)
	}
	v.Params = rec.State.Parameters
	return v, nil
}

func (s *Stacks) drift(ctx context.Context, a Actor, tenant, name string) ([]StackDrift, error) {
	st, rec, err := s.readStack(ctx, a, tenant, name)
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: st.TenantID, Role: cloud.RoleMember}
	live, _, err := s.refresh(ctx, actor, rec)
	if err != nil {
		return nil, err
	}
	out := []StackDrift{}
	for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
		rs, l := rec.State.Resources[addr], live[addr]
		d := StackDrift{Address: addr, Type: rs.Type, ID: rs.ID}
		switch {
		case l.Gone:
			d.Drift = "deleted"
		case l.Stopped:
			d.Drift = "stopped"
		case len(l.Changed) > 0:
			d.Drift, d.Diffs = "changed", l.Changed
		default:
			continue
		}
		out = append(out, d)
	}
	msg := "in sync"
	if len(out) > 0 {
		parts := make([]string, len(out))
		for i, d := range out {
			parts[i] = d.Address + " " + d.Drift
		}
		msg = strings.Join(parts, ", ")
	}
	err = s.tx(ctx, func(tx cloud.Tx) error {
		return tx.AppendStackEvents(ctx, []*cloud.StackEvent{{StackID: st.ID, Time: s.now(), Action: "drift", Outcome: "succeeded", Message: msg}})
	})
	return out, err
}

// services is the bundle the engine calls the other services through.
func (s *Stacks) services() *Services { return New(s.store, s.cat, s.opts) }

// refresh reads every applied resource, records its attributes as they are
// now, and answers the drift inputs (stack.Live) and each one's status.
func (s *Stacks) refresh(ctx context.Context, a Actor, rec *stackRecord) (map[string]stack.Live, map[string]string, error) {
	svc := s.services()
	live := map[string]stack.Live{}
	statuses := map[string]string{}
	// Instances, most of a stack, in one read; the rest one by one.
	var ids []string
	for _, rs := range rec.State.Resources {
		if rs.Type == stack.TypeInstance {
			ids = append(ids, rs.ID)
		}
	}
	instances := map[string]*cloud.Instance{}
	if len(ids) > 0 {
		err := s.tx(ctx, func(tx cloud.Tx) error {
			ins, err := tx.ListInstances(ctx, cloud.InstanceFilter{TenantID: a.TenantID, IDs: ids})
			for _, in := range ins {
				instances[in.ID] = in
			}
			return err
		})
		if err != nil {
			return nil, nil, err
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
		rs := rec.State.Resources[addr]
		var (
			l      stack.Live
			attrs  map[string]any
			status string
			err    error
		)
		if rs.Type == stack.TypeInstance {
			if in, ok := instances[rs.ID]; ok {
				l, attrs, status = instanceLive(in)
			} else {
				l, status = stack.Live{Gone: true}, "not found"
			}
		} else if l, attrs, status, err = s.readResource(ctx, svc, a, rs); err != nil {
			return nil, nil, err
		}
		if attrs != nil {
			rs.Attributes = attrs
		}
		if l.Gone || l.Stopped || len(l.Changed) > 0 {
			live[addr] = l
		}
		statuses[addr] = status
	}
	return live, statuses, nil
}

// Step runs one round of every stack being applied or destroyed: the
// stack controller's step, on the leader. It answers how many stacks it
// worked on. One stack's failure does not stop the others: it is recorded
// on the stack.
func (s *Stacks) Step(ctx context.Context) (int, error) {
	var todo []*cloud.Stack
	err := s.tx(ctx, func(tx cloud.Tx) error {
		ids, err := tx.StackIDs(ctx, cloud.StackApplying, cloud.StackDestroying)
		if err != nil {
			return err
		}
		todo = todo[:0]
		for _, id := range ids {
			st, err := tx.GetStack(ctx, id)
			if err != nil {
				return err
			}
			todo = append(todo, st)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	var errs []error
	for _, st := range todo {
		if err := s.round(ctx, st); err != nil {
			errs = append(errs, fmt.Errorf("stack %s: %w", st.ID, err))
		}
	}
	return len(todo), errors.Join(errs...)
}

// stackRun is one round of one stack.
type stackRun struct {
	s     *Stacks
	svc   *Services
	st    *cloud.Stack
	rec   *stackRecord
	actor Actor
	// bound is the template the round applies; nil when it removes
	// everything (a destroy, or the rollback of a first apply).
	bound  *stack.Bound
	events []*cloud.StackEvent
	mu     sync.Mutex
}

func (r *stackRun) event(address, action, outcome, resource, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, &cloud.StackEvent{StackID: r.st.ID, Time: r.s.now(), Address: address,
		Action: action, Outcome: outcome, Resource: resource, Message: msg})
}

// save writes the record and the round's events; the stack's state and
// reason as set on r.st.
func (r *stackRun) save(ctx context.Context) error {
	applied, err := r.rec.encode()
	if err != nil {
		return err
	}
	r.st.Applied, r.st.UpdatedAt = applied, r.s.now()
	evs := r.events
	err = r.s.tx(ctx, func(tx cloud.Tx) error {
		cur := *r.st
		if err := tx.UpdateStack(ctx, &cur); err != nil {
			return err
		}
		r.st.Version = cur.Version
		return tx.AppendStackEvents(ctx, evs)
	})
	if err == nil {
		r.events = nil
	}
	return err
}

// round runs one round of a stack: finish the creates a crash cut short,
// read the live resources, plan, and run the changes that are ready, wave
// after wave.
func (s *Stacks) round(ctx context.Context, st *cloud.Stack) error {
	rec, err := decodeRecord(st)
	if err != nil {
		return err
	}
	r := &stackRun{s: s, svc: s.services(), st: st, rec: rec,
		actor: Actor{ID: rec.Actor, TenantID: st.TenantID, Role: cloud.RoleMember}}
	if r.actor.ID == "" {
		r.actor.ID = "stack:" + st.Name
	}
	ctx = withSystemTags(ctx, map[string]string{TagStack: st.Name})
	rec.Waiting = map[string]string{}
	destroying := st.State == cloud.StackDestroying || rec.RollingBack != "" && rec.LastGood == nil
	var b *stack.Bound
	if !destroying {
		if b, err = bindStack(st.Template, stackArgs(st)); err != nil {
			return r.fail(ctx, err)
		}
		rec.State.Parameters = b.Parameters
		r.bound = b
	}
	if err := r.finishPending(ctx); err != nil {
		return r.fail(ctx, err)
	}
	live, statuses, err := s.refresh(ctx, r.actor, rec)
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
			return r.fail(ctx, templateError("template", err))
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
		if live, statuses, err = s.refresh(ctx, r.actor, rec); err != nil {
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
func (r *stackRun) failedCreates(ctx context.Context, live map[string]stack.Live, statuses map[string]string, destroying bool) error {
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
func (r *stackRun) finishPending(ctx context.Context) error {
	for _, addr := range slices.Sorted(maps.Keys(r.rec.Pending)) {
		in := r.rec.Pending[addr]
		id, attrs, err := r.s.createResource(r.tagged(ctx, addr), r.svc, r.actor, in.Type, addr, in.Properties, in.Key)
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
func (r *stackRun) recordCreate(addr string, in *stackIntent, id string, attrs map[string]any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old := r.rec.State.Resources[addr]; old != nil && old.ID != id {
		r.rec.Retired = append(r.rec.Retired, &stackRetired{Address: addr, State: old})
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
func (r *stackRun) tagged(ctx context.Context, addr string) context.Context {
	return withSystemTags(ctx, r.tagsOf(addr))
}

// tagsOf are the tags of a stack's resource copy: the stack's name, and
// for instances their resource, job, rank and job size.
func (r *stackRun) tagsOf(addr string) map[string]string {
	tags := map[string]string{TagStack: r.st.Name}
	res, _, _ := stack.SplitAddress(addr)
	tags[TagStackResource] = res
	if job, rank, world, ok := r.jobOf(addr); ok {
		tags[TagStackJob], tags[TagStackRank], tags[TagStackWorld] = job, strconv.Itoa(rank), strconv.Itoa(world)
	}
	return tags
}

// jobOf is an instance copy's job: the copies that train together. Those
// that depend on one placement group of the stack form its job (in
// template order: a head before its workers); others, the copies of their
// resource.
func (r *stackRun) jobOf(addr string) (job string, rank, world int, ok bool) {
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
func (r *stackRun) ready(b *stack.Bound, c *stack.Change, busy map[string]bool) (map[string]any, string) {
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
func (r *stackRun) wave(ctx context.Context, b *stack.Bound, p *stack.PlanResult, live map[string]stack.Live) (ran int, pending bool, err error) {
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
					if _, _, err := r.s.deleteResource(ctx, r.svc, r.actor, old); err != nil {
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
			r.rec.Pending[j.c.Address] = &stackIntent{Type: j.c.Type, Key: r.key(j.c.Address), Properties: j.props,
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
		sem   = make(chan struct{}, stackWaveWorkers)
		errMu sync.Mutex
		first error
	)
	for _, j := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			progressed, err := r.run(ctx, j.c, j.props)
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
func (r *stackRun) createInstances(ctx context.Context, changes []*stack.Change) (int, bool) {
	items := make([]instanceItem, len(changes))
	intents := make([]*stackIntent, len(changes))
	for i, c := range changes {
		in := r.rec.Pending[c.Address]
		if in == nil {
			return 0, false
		}
		var spec InstanceSpec
		if err := decodeProps(c.Address, in.Properties, &spec); err != nil {
			return 0, false
		}
		items[i], intents[i] = instanceItem{spec: spec, key: in.Key, tags: r.tagsOf(c.Address)}, in
	}
	out, err := r.svc.Instances.createMany(ctx, r.actor, items)
	if err != nil {
		return 0, false
	}
	for i, c := range changes {
		r.recordCreate(c.Address, intents[i], out[i].ID, instanceAttrs(out[i]))
		r.event(c.Address, string(c.Action), "succeeded", out[i].ID, c.Reason)
	}
	return len(changes), true
}

// endsFirst says whether an instance's replacement waits for the old copy
// to end: when the old one is gone (failed or terminated outside the
// stack), or either holds volumes, which attach to one instance at a
// time.
func (r *stackRun) endsFirst(c *stack.Change, old *stack.ResourceState, live map[string]stack.Live) bool {
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
func (r *stackRun) isDestroy(b *stack.Bound) bool { return b == nil }

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
func (r *stackRun) dependent(addr string) string {
	for _, other := range slices.Sorted(maps.Keys(r.rec.State.Resources)) {
		if slices.Contains(r.rec.State.Resources[other].DependsOn, addr) {
			return other
		}
	}
	return ""
}

// key is the idempotency key of addr's next copy.
func (r *stackRun) key(addr string) string {
	if in := r.rec.Pending[addr]; in != nil {
		return in.Key
	}
	gen := r.rec.Gens[addr] + 1
	r.rec.Gens[addr] = gen
	return "stack-" + r.st.ID + "-" + addr + "-g" + strconv.Itoa(gen)
}

// run carries out one change; progressed is false when it must wait for a
// later round (a delete that cannot happen yet).
func (r *stackRun) run(ctx context.Context, c *stack.Change, props map[string]any) (progressed bool, err error) {
	r.mu.Lock()
	old := r.rec.State.Resources[c.Address]
	in := r.rec.Pending[c.Address]
	r.mu.Unlock()
	switch c.Action {
	case stack.ActionCreate, stack.ActionReplace:
		id, attrs, err := r.s.createResource(r.tagged(ctx, c.Address), r.svc, r.actor, c.Type, c.Address, in.Properties, in.Key)
		if err != nil {
			r.event(c.Address, string(c.Action), "failed", "", err.Error())
			return false, err
		}
		r.recordCreate(c.Address, in, id, attrs)
		r.event(c.Address, string(c.Action), "succeeded", id, c.Reason)
	case stack.ActionUpdate:
		if err := r.s.updateGroup(ctx, r.svc, r.actor, c.Address, old.ID, props); err != nil {
			r.event(c.Address, "update", "failed", old.ID, err.Error())
			return false, err
		}
		r.mu.Lock()
		old.Properties, old.DependsOn = props, c.DependsOn
		r.mu.Unlock()
		r.event(c.Address, "update", "succeeded", old.ID, c.Reason)
	case stack.ActionStart:
		if _, err := r.svc.Instances.Act(ctx, r.actor, old.ID, Start, 0); err != nil {
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
		done, why, err := r.s.deleteResource(ctx, r.svc, r.actor, old)
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
func (r *stackRun) deleteRetired(ctx context.Context) (int, error) {
	var keep []*stackRetired
	n := 0
	for _, old := range r.rec.Retired {
		if old.State.DeletionPolicy == stack.DeletionRetain {
			r.event(old.Address, "retain", "succeeded", old.State.ID, "the replaced copy is retained")
			n++
			continue
		}
		done, why, err := r.s.deleteResource(ctx, r.svc, r.actor, old.State)
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
func (r *stackRun) finish(ctx context.Context, b *stack.Bound, destroyed bool) error {
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
		rec.LastGood = &stackDesired{Template: st.Template, Args: stackArgs(st)}
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
func (r *stackRun) fail(ctx context.Context, cause error) error {
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
			id, _, err := r.s.createResource(r.tagged(ctx, addr), r.svc, r.actor, in.Type, addr, in.Properties, in.Key)
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
