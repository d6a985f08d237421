package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/stack"
)

// The stacks' records and the rules over them. A stack's record
// (cloud.Stack.Applied, StackRecord) is the state of its last applied
// resources (stack.State), each address's generation, the creates under
// way (intents, written before the create is sent), the old copies of
// replaced resources waiting for their deletion, and the last template
// that applied cleanly (what a failed apply rolls back to). Apply and
// Destroy record what is wanted; the stack engine (package stackengine)
// carries it out round by round, reading the stacks at work (Working) and
// the live resources (Refresh) and writing each round's record and events
// (SaveRound).

// Stack limits.
const (
	// MaxStacksPerTenant bounds a tenant's stacks that are not destroyed.
	MaxStacksPerTenant = 100
	// maxStackEvents bounds one Events answer.
	maxStackEvents = 1000
)

// StackRecord is the engine's state of one stack, kept in
// cloud.Stack.Applied.
type StackRecord struct {
	State *stack.State `json:"state"`
	// Gens is the generation of each address's current copy: a replace
	// creates generation n+1 with a key of its own.
	Gens map[string]int `json:"generations,omitempty"`
	// Pending are the creates sent and not yet recorded, by address.
	Pending map[string]*StackIntent `json:"pending,omitempty"`
	// Retired are the old copies of replaced resources, deleted once every
	// create and update of the apply is done.
	Retired []*StackRetired `json:"retired,omitempty"`
	// Actor is the user who applied or destroyed last: the stack acts as
	// them, in the stack's tenant.
	Actor string `json:"actor"`
	Keep  bool   `json:"keep_on_failure,omitempty"`
	// LastGood is the template and parameters of the last apply that
	// finished; nil before the first.
	LastGood *StackDesired `json:"last_good,omitempty"`
	// RollingBack is the failure a rollback undoes; empty otherwise.
	RollingBack string `json:"rolling_back,omitempty"`
	// Waiting says, per address, why a change waits for a later round.
	Waiting map[string]string `json:"waiting,omitempty"`
	// Created are the IDs this apply created, by address: one that
	// fails or goes while the apply runs fails the apply (it is not
	// replaced over and over); one that goes later is drift.
	Created map[string]string `json:"created,omitempty"`
}

// StackIntent is a create sent and not yet recorded: a round cut short
// completes it with the same key.
type StackIntent struct {
	Type           string         `json:"type"`
	Key            string         `json:"key"`
	Properties     map[string]any `json:"properties"`
	DependsOn      []string       `json:"depends_on,omitempty"`
	DeletionPolicy string         `json:"deletion_policy,omitempty"`
	// Replaces is the ID of the copy this create replaces.
	Replaces string `json:"replaces,omitempty"`
}

// StackRetired is the old copy of a replaced resource, waiting for its
// deletion.
type StackRetired struct {
	Address string               `json:"address"`
	State   *stack.ResourceState `json:"state"`
}

// StackDesired is a template and its parameters.
type StackDesired struct {
	Template string            `json:"template"`
	Args     map[string]string `json:"parameters,omitempty"`
}

// DecodeStackRecord reads a stack's record, with its maps made.
func DecodeStackRecord(st *cloud.Stack) (*StackRecord, error) {
	rec := &StackRecord{}
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
		rec.Pending = map[string]*StackIntent{}
	}
	return rec, nil
}

// Encode is the record as cloud.Stack.Applied keeps it (an empty Waiting
// left out). It does not change rec, which a round goes on writing.
func (rec *StackRecord) Encode() (json.RawMessage, error) {
	b, err := json.Marshal(rec)
	return b, err
}

// StackArgs are the parameters of a stack's wanted template.
func StackArgs(st *cloud.Stack) map[string]string {
	var args map[string]string
	if len(st.Parameters) > 0 {
		_ = json.Unmarshal(st.Parameters, &args)
	}
	return args
}

// BindStack parses and binds a template with its parameters; errors are
// Invalid with the template's line and column.
func BindStack(src string, args map[string]string) (*stack.Bound, error) {
	t, err := stack.Parse([]byte(src))
	if err != nil {
		return nil, StackTemplateError("template", err)
	}
	b, err := t.Bind(args)
	if err != nil {
		return nil, StackTemplateError("parameters", err)
	}
	return b, nil
}

// StackTemplateError turns the stack package's errors into one Invalid error
// naming every position.
func StackTemplateError(field string, err error) error {
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

// latestStackOf finds the stack of that name actor a may see, as stackOf
// does, and when none is live the latest one destroyed (created last), so
// that a destroyed stack's events stay readable by its name. It answers
// NotFound when the tenant never had a stack of that name.
func latestStackOf(ctx context.Context, tx cloud.Tx, a Actor, tenant, name string) (*cloud.Stack, error) {
	t, err := Scope(ctx, tx, a, tenant, a.TenantID)
	if err != nil {
		return nil, err
	}
	st, err := tx.StackByName(ctx, t, name)
	if cloud.ErrorCode(err) != cloud.NotFound {
		return st, err
	}
	all, err := tx.ListStacks(ctx, t, true)
	if err != nil {
		return nil, err
	}
	var latest *cloud.Stack
	for _, x := range all {
		if x.TenantID != t || x.Name != name {
			continue
		}
		if latest == nil || x.CreatedAt.After(latest.CreatedAt) || x.CreatedAt.Equal(latest.CreatedAt) && x.ID > latest.ID {
			latest = x
		}
	}
	if latest == nil {
		return nil, NotFound("stack", name)
	}
	return latest, nil
}

func (s *Stacks) plan(ctx context.Context, a Actor, req api.StackRequest) (*api.StackPlan, error) {
	if req.Name != "" {
		if err := CheckStackName(req.Name); err != nil {
			return nil, err
		}
	}
	b, err := BindStack(req.Template, req.Parameters)
	if err != nil {
		return nil, err
	}
	var (
		rec    *StackRecord
		exists bool
		tenant string
	)
	err = s.tx(ctx, func(tx cloud.Tx) error {
		rec, exists = &StackRecord{State: &stack.State{Resources: map[string]*stack.ResourceState{}}}, false
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
		rec, err = DecodeStackRecord(st)
		return err
	})
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: tenant, Role: cloud.RoleMember}
	live := map[string]stack.Live{}
	if exists {
		live, _, err = s.Refresh(ctx, actor, rec)
		if err != nil {
			return nil, err
		}
	}
	p, err := stack.Plan(b, rec.State, live)
	if err != nil {
		return nil, StackTemplateError("template", err)
	}
	for _, c := range p.Changes {
		switch c.Action {
		case stack.ActionCreate, stack.ActionReplace, stack.ActionUpdate:
			if err := s.checkStackProps(c); err != nil {
				return nil, err
			}
		}
	}
	out := &api.StackPlan{Name: req.Name, Exists: exists, Changes: p.Changes, Summary: p.Summary, Params: b.Parameters}
	if out.Changes == nil {
		out.Changes = []*stack.Change{}
	}
	if out.Summary == nil {
		out.Summary = map[stack.Action]int{}
	}
	if out.Cost, err = s.stackCost(ctx, b, p, rec); err != nil {
		return nil, err
	}
	if out.Fit, err = s.stackFit(ctx, b, p, rec, tenant); err != nil {
		return nil, err
	}
	if outs, err := b.OutputsPartial(rec.State.Attrs()); err == nil {
		out.Outputs = outs
	}
	return out, nil
}

func (s *Stacks) apply(ctx context.Context, a Actor, name string, req api.ApplyStackRequest) (*cloud.Stack, error) {
	if err := CheckStackName(name); err != nil {
		return nil, err
	}
	// The plan's checks: the template binds, the properties are the API's,
	// and the commitment rules hold against the stack's state as recorded.
	if _, err := s.plan(ctx, a, api.StackRequest{Tenant: req.Tenant, Name: name, Template: req.Template, Parameters: req.Parameters}); err != nil {
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
		st, err := tx.StackByName(ctx, tenant, name)
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
			rec := &StackRecord{Actor: a.ID, Keep: req.KeepOnFailure}
			applied, err := rec.Encode()
			if err != nil {
				return err
			}
			st = &cloud.Stack{ID: NewID(StackPrefix), TenantID: tenant, Name: name, State: cloud.StackApplying,
				Template: req.Template, Parameters: args, Applied: applied, CreatedAt: now, UpdatedAt: now}
			if err := tx.CreateStack(ctx, st); err != nil {
				return err
			}
		case err != nil:
			return err
		case st.State == cloud.StackDestroying:
			return &cloud.Error{Code: cloud.Conflict, Message: "stack " + name + " is being destroyed; apply once it is gone",
				Details: map[string]any{"state": string(st.State)}}
		default:
			rec, err := DecodeStackRecord(st)
			if err != nil {
				return err
			}
			rec.Actor, rec.Keep, rec.RollingBack, rec.Created = a.ID, req.KeepOnFailure, "", nil
			if st.Applied, err = rec.Encode(); err != nil {
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
		rec, err := DecodeStackRecord(st)
		if err != nil {
			return err
		}
		rec.Actor, rec.RollingBack = a.ID, ""
		if st.Applied, err = rec.Encode(); err != nil {
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
		st, err := latestStackOf(ctx, tx, a, tenant, name)
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
func (s *Stacks) readStack(ctx context.Context, a Actor, tenant, name string) (*cloud.Stack, *StackRecord, error) {
	var (
		st  *cloud.Stack
		rec *StackRecord
	)
	err := s.tx(ctx, func(tx cloud.Tx) error {
		var err error
		if st, err = stackOf(ctx, tx, a, tenant, name); err != nil {
			return err
		}
		rec, err = DecodeStackRecord(st)
		return err
	})
	return st, rec, err
}

func (s *Stacks) get(ctx context.Context, a Actor, tenant, name string) (*api.StackView, error) {
	st, rec, err := s.readStack(ctx, a, tenant, name)
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: st.TenantID, Role: cloud.RoleMember}
	_, statuses, err := s.Refresh(ctx, actor, rec)
	if err != nil {
		return nil, err
	}
	v := &api.StackView{Stack: *st, Resources: []api.StackResource{}}
	for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
		rs := rec.State.Resources[addr]
		v.Resources = append(v.Resources, api.StackResource{Address: addr, Type: rs.Type, ID: rs.ID, Status: statuses[addr]})
	}
	if len(st.Outputs) > 0 && string(st.Outputs) != "null" {
		_ = json.Unmarshal(st.Outputs, &v.Outputs)
	}
	v.Params = rec.State.Parameters
	return v, nil
}

func (s *Stacks) drift(ctx context.Context, a Actor, tenant, name string) ([]api.StackDrift, error) {
	st, rec, err := s.readStack(ctx, a, tenant, name)
	if err != nil {
		return nil, err
	}
	actor := Actor{ID: a.ID, TenantID: st.TenantID, Role: cloud.RoleMember}
	live, _, err := s.Refresh(ctx, actor, rec)
	if err != nil {
		return nil, err
	}
	out := []api.StackDrift{}
	for _, addr := range slices.Sorted(maps.Keys(rec.State.Resources)) {
		rs, l := rec.State.Resources[addr], live[addr]
		d := api.StackDrift{Address: addr, Type: rs.Type, ID: rs.ID}
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

// Refresh reads every applied resource of rec as actor a (the stack's
// tenant), records its attributes as they are now, and answers the drift
// inputs (stack.Live) and each one's status.
func (s *Stacks) Refresh(ctx context.Context, a Actor, rec *StackRecord) (map[string]stack.Live, map[string]string, error) {
	svc := s.svc
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

// Working answers the stacks being applied or destroyed: the engine's
// work for one round.
func (s *Stacks) Working(ctx context.Context) ([]*cloud.Stack, error) {
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
	return todo, err
}

// SaveRound writes a round of the engine: st with its record rec, its
// state and reason as the engine set them, and the round's events. On
// success st carries its new version.
func (s *Stacks) SaveRound(ctx context.Context, st *cloud.Stack, rec *StackRecord, events []*cloud.StackEvent) error {
	applied, err := rec.Encode()
	if err != nil {
		return err
	}
	st.Applied, st.UpdatedAt = applied, s.now()
	return s.tx(ctx, func(tx cloud.Tx) error {
		cur := *st
		if err := tx.UpdateStack(ctx, &cur); err != nil {
			return err
		}
		st.Version = cur.Version
		return tx.AppendStackEvents(ctx, events)
	})
}
