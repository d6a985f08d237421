package sqlstore

import (
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"strconv"

	"github.com/gpucloud/gpucloud/cloud"
)

// Stacks: cloud.StackTx. A stack's parameters, applied
// state and outputs are JSON documents the stack service owns; the store
// keeps them as given (compacted) and reads them back byte for byte.

// ---- stacks ----

const stackCols = "id, tenant_id, name, state, template, parameters, applied, outputs, reason, version, created_at, updated_at"

func scanStack(sc scanner) (*cloud.Stack, error) {
	var s cloud.Stack
	err := sc.Scan(&s.ID, &s.TenantID, &s.Name, &s.State, &s.Template, rawCol{&s.Parameters}, rawCol{&s.Applied},
		rawCol{&s.Outputs}, &s.Reason, &s.Version, timeCol{&s.CreatedAt}, timeCol{&s.UpdatedAt})
	return &s, err
}

// stackDocs returns the stack's documents compacted, "null" for an empty
// one, and sets them on s so that s reads as it will be read back.
func stackDocs(s *cloud.Stack) ([3]string, error) {
	var out [3]string
	for i, f := range []*json.RawMessage{&s.Parameters, &s.Applied, &s.Outputs} {
		if len(*f) == 0 {
			*f = json.RawMessage("null")
		}
		b, err := compactJSON(*f)
		if err != nil {
			return out, invalidf("stack %s: %v", s.ID, err)
		}
		*f, out[i] = b, string(b)
	}
	return out, nil
}

func compactJSON(b []byte) (json.RawMessage, error) {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func validStack(s *cloud.Stack) error {
	switch {
	case s.ID == "":
		return invalidf("stack has no id")
	case s.TenantID == "":
		return invalidf("stack %s has no tenant", s.ID)
	case s.Name == "":
		return invalidf("stack %s has no name", s.ID)
	}
	switch s.State {
	case cloud.StackApplying, cloud.StackActive, cloud.StackFailed, cloud.StackDestroying, cloud.StackDestroyed:
		return nil
	}
	return invalidf("stack %s: state %q is unknown", s.ID, s.State)
}

// stackName returns a Conflict when s is not destroyed and another stack
// of its tenant that is not destroyed has its name.
func (t *tx) stackName(ctx context.Context, s *cloud.Stack) error {
	if s.State == cloud.StackDestroyed {
		return nil
	}
	var other string
	found := true
	err := t.get(ctx, "find stack by name", func() error { found = false; return nil },
		"SELECT id FROM stacks WHERE tenant_id = ? AND name = ? AND state <> ? AND id <> ?",
		[]any{s.TenantID, s.Name, string(cloud.StackDestroyed), s.ID}, &other)
	if err != nil || !found {
		return err
	}
	return &cloud.Error{Code: cloud.Conflict,
		Message: "tenant " + s.TenantID + " already has a stack named " + strconv.Quote(s.Name) + " (" + other + ")",
		Details: map[string]any{"name": s.Name, "stack_id": other}}
}

func (t *tx) CreateStack(ctx context.Context, s *cloud.Stack) error {
	if err := validStack(s); err != nil {
		return err
	}
	if err := t.mustExist(ctx, "tenants", "tenant", s.TenantID); err != nil {
		return err
	}
	if err := t.stackName(ctx, s); err != nil {
		return err
	}
	docs, err := stackDocs(s)
	if err != nil {
		return err
	}
	created, updated := normTime(s.CreatedAt), normTime(s.UpdatedAt)
	d := &t.s.d
	n, err := t.execN(ctx, "create stack "+s.ID,
		"INSERT INTO stacks ("+stackCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT DO NOTHING",
		s.ID, s.TenantID, s.Name, string(s.State), s.Template, docs[0], docs[1], docs[2], s.Reason,
		d.timeArg(created), d.timeArg(updated))
	if err != nil {
		return err
	}
	if n == 0 {
		if err := t.stackName(ctx, s); err != nil {
			return err
		}
		return conflictf("stack %s already exists", s.ID)
	}
	s.Version, s.CreatedAt, s.UpdatedAt = 1, created, updated
	return nil
}

func (t *tx) GetStack(ctx context.Context, id string) (*cloud.Stack, error) {
	return one(ctx, t, "get stack "+id, func() error { return notFoundf("stack %s not found", id) },
		"SELECT "+stackCols+" FROM stacks WHERE id = ?", []any{id}, scanStack)
}

func (t *tx) StackByName(ctx context.Context, tenantID, name string) (*cloud.Stack, error) {
	return one(ctx, t, "find stack "+name,
		func() error { return notFoundf("stack %s not found", strconv.Quote(name)) },
		"SELECT "+stackCols+" FROM stacks WHERE tenant_id = ? AND name = ? AND state <> ?",
		[]any{tenantID, name, string(cloud.StackDestroyed)}, scanStack)
}

func (t *tx) StackIDs(ctx context.Context, states ...cloud.StackState) ([]string, error) {
	var conds []string
	var args []any
	if len(states) > 0 {
		var cond string
		cond, args = inList("state", states, args)
		conds = append(conds, cond)
	}
	ids, err := list(ctx, t, "list stack ids", "SELECT id FROM stacks"+where(conds)+" ORDER BY id", args, scanString)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = *id
	}
	return out, nil
}

func (t *tx) ListStacks(ctx context.Context, tenantID string, all bool) ([]*cloud.Stack, error) {
	var conds []string
	var args []any
	if tenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, tenantID)
	}
	if !all {
		conds, args = append(conds, "state <> ?"), append(args, string(cloud.StackDestroyed))
	}
	return list(ctx, t, "list stacks", "SELECT "+stackCols+" FROM stacks"+where(conds)+" ORDER BY id", args, scanStack)
}

// UpdateStack writes every field but the ones fixed at creation: ID,
// TenantID, Name and CreatedAt.
func (t *tx) UpdateStack(ctx context.Context, s *cloud.Stack) error {
	if err := validStack(s); err != nil {
		return err
	}
	docs, err := stackDocs(s)
	if err != nil {
		return err
	}
	updated := normTime(s.UpdatedAt)
	n, err := t.execN(ctx, "update stack "+s.ID,
		"UPDATE stacks SET state = ?, template = ?, parameters = ?, applied = ?, outputs = ?, reason = ?,"+
			" updated_at = ?, version = version + 1 WHERE id = ? AND version = ?",
		string(s.State), s.Template, docs[0], docs[1], docs[2], s.Reason, t.s.d.timeArg(updated), s.ID, s.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		if _, err := t.GetStack(ctx, s.ID); err != nil {
			return err
		}
		return conflictf("stack %s changed since version %d was read", s.ID, s.Version)
	}
	s.Version++
	s.UpdatedAt = updated
	return nil
}

const stackEventCols = "id, stack_id, time, address, action, outcome, resource, message"

func scanStackEvent(sc scanner) (*cloud.StackEvent, error) {
	var e cloud.StackEvent
	err := sc.Scan(&e.ID, &e.StackID, timeCol{&e.Time}, &e.Address, &e.Action, &e.Outcome, &e.Resource, &e.Message)
	return &e, err
}

// AppendStackEvents inserts the events in statements of up to batchRows
// rows; the IDs RETURNING gives, sorted, are the events' in order (the
// sequence increases within a statement).
func (t *tx) AppendStackEvents(ctx context.Context, evs []*cloud.StackEvent) error {
	d := &t.s.d
	for _, e := range evs {
		if e.StackID == "" || e.Action == "" || e.Outcome == "" {
			return invalidf("stack event without stack, action or outcome")
		}
	}
	for lo := 0; lo < len(evs); lo += batchRows {
		part := evs[lo:min(lo+batchRows, len(evs))]
		args := make([]any, 0, 7*len(part))
		for _, e := range part {
			args = append(args, e.StackID, d.timeArg(normTime(e.Time)), e.Address, e.Action, e.Outcome, e.Resource, e.Message)
		}
		ids, err := list(ctx, t, "append stack events",
			"INSERT INTO stack_events (stack_id, time, address, action, outcome, resource, message) VALUES "+
				values("(?, ?, ?, ?, ?, ?, ?)", len(part))+" RETURNING id", args, func(sc scanner) (*int64, error) {
				var id int64
				err := sc.Scan(&id)
				return &id, err
			})
		if err != nil {
			return err
		}
		if len(ids) != len(part) {
			return internal("append stack events", errNoID)
		}
		sort.Slice(ids, func(i, j int) bool { return *ids[i] < *ids[j] })
		for i, e := range part {
			e.ID, e.Time = *ids[i], normTime(e.Time)
		}
	}
	return nil
}

func (t *tx) StackEvents(ctx context.Context, stackID string, afterID int64, limit int) ([]*cloud.StackEvent, error) {
	q := "SELECT " + stackEventCols + " FROM stack_events WHERE stack_id = ? AND id > ? ORDER BY id"
	args := []any{stackID, afterID}
	if limit > 0 {
		q, args = q+" LIMIT ?", append(args, limit)
	}
	return list(ctx, t, "list stack events", q, args, scanStackEvent)
}
