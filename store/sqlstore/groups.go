package sqlstore

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Autoscaling groups, the metrics their policies read and the group
// controller's saved histories: cloud.GroupTx. A group's template,
// policies, mix, timing, idle release and status are JSON documents; a
// write normalizes the caller's group to exactly what was stored (the
// times of its status in UTC microseconds, and what JSON keeps of empty
// lists and maps), so that a group read back is reflect.DeepEqual to the
// one written.

// ---- groups ----

const groupCols = "id, tenant_id, name, state, template, min_size, max_size, desired_size, policies, mixed," +
	" timing, budget_per_hour, idle_release, status, version, idempotency_key, created_at, updated_at, tags"

func scanGroup(sc scanner) (*cloud.Group, error) {
	var g cloud.Group
	err := sc.Scan(&g.ID, &g.TenantID, &g.Name, &g.State, jsonCol{&g.Template}, &g.Min, &g.Max, &g.Desired,
		jsonCol{&g.Policies}, jsonCol{&g.Mixed}, jsonCol{&g.Timing}, &g.BudgetPerHour, jsonCol{&g.IdleRelease},
		jsonCol{&g.Status}, &g.Version, &g.IdempotencyKey, timeCol{&g.CreatedAt}, timeCol{&g.UpdatedAt},
		jsonCol{&g.Tags})
	return &g, err
}

func validGroup(g *cloud.Group) error {
	switch {
	case g.ID == "":
		return invalidf("group has no id")
	case g.TenantID == "":
		return invalidf("group %s has no tenant", g.ID)
	case g.Name == "":
		return invalidf("group %s has no name", g.ID)
	case g.Min < 0:
		return invalidf("group %s: min %d is negative", g.ID, g.Min)
	case g.Min > g.Max:
		return invalidf("group %s: min %d is above max %d", g.ID, g.Min, g.Max)
	case g.Desired < g.Min || g.Desired > g.Max:
		return invalidf("group %s: desired %d is not between min %d and max %d", g.ID, g.Desired, g.Min, g.Max)
	case g.BudgetPerHour < 0:
		return invalidf("group %s: budget per hour %d is negative", g.ID, g.BudgetPerHour)
	}
	switch g.State {
	case cloud.GroupActive, cloud.GroupDeleting, cloud.GroupDeleted:
	default:
		return invalidf("group %s: state %q is unknown", g.ID, g.State)
	}
	return nil
}

// groupDoc is the JSON text of a group's documents, in column order, and
// the same documents decoded again: what a read of the row returns.
type groupDoc struct {
	template, policies, mixed, timing, status string
	idle                                      any

	tmpl  cloud.GroupTemplate
	pols  []cloud.ScalingPolicy
	mix   cloud.MixedInstances
	tim   cloud.GroupTiming
	idleR *cloud.IdleRelease
	stat  cloud.GroupStatus
}

// normalize sets the documents of g to what was stored, after a
// successful write.
func (d *groupDoc) normalize(g *cloud.Group) {
	g.Template, g.Policies, g.Mixed, g.Timing, g.IdleRelease, g.Status = d.tmpl, d.pols, d.mix, d.tim, d.idleR, d.stat
}

// normStatus is a copy of s with its times in UTC microseconds. It copies
// the decisions and the backoff rather than changing them: the caller's
// may be shared.
func normStatus(s cloud.GroupStatus) cloud.GroupStatus {
	s.LastActionAt = normTime(s.LastActionAt)
	if s.Decisions != nil {
		ds := make([]cloud.GroupDecision, len(s.Decisions))
		for i, d := range s.Decisions {
			d.Time = normTime(d.Time)
			ds[i] = d
		}
		s.Decisions = ds
	}
	if s.Backoff != nil {
		b := *s.Backoff
		b.Until = normTime(b.Until)
		s.Backoff = &b
	}
	return s
}

func encodeGroup(g *cloud.Group) (*groupDoc, error) {
	var d groupDoc
	var err error
	for _, f := range []struct {
		name string
		dst  *string
		v    any
		back any
	}{
		{"template", &d.template, g.Template, &d.tmpl}, {"policies", &d.policies, g.Policies, &d.pols},
		{"mixed", &d.mixed, g.Mixed, &d.mix}, {"timing", &d.timing, g.Timing, &d.tim},
		{"status", &d.status, normStatus(g.Status), &d.stat},
	} {
		if *f.dst, err = jsonArg("group "+g.ID+" "+f.name, f.v); err != nil {
			return nil, err
		}
		if err := json.Unmarshal([]byte(*f.dst), f.back); err != nil {
			return nil, invalidf("group %s %s: %v", g.ID, f.name, err)
		}
	}
	// No idle release is SQL NULL, as an instance's interruption.
	if g.IdleRelease != nil {
		r := *g.IdleRelease
		d.idleR = &r
		if d.idle, err = jsonArg("group "+g.ID+" idle release", d.idleR); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

// CreateGroup is idempotent by key as CreateSpotRequest is; the key is
// looked up before the name, so that a retried create is a retry, not a
// name conflict with the group it created.
func (t *tx) CreateGroup(ctx context.Context, g *cloud.Group) error {
	if err := validGroup(g); err != nil {
		return err
	}
	if g.IdempotencyKey != "" {
		if err := t.groupByKey(ctx, g); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", g.TenantID); err != nil {
		return err
	}
	if err := t.liveName(ctx, g); err != nil {
		return err
	}
	doc, err := encodeGroup(g)
	if err != nil {
		return err
	}
	created, updated := normTime(g.CreatedAt), normTime(g.UpdatedAt)
	tags, err := jsonArg("group "+g.ID+" tags", g.Tags)
	if err != nil {
		return err
	}
	d := &t.s.d
	n, err := t.execN(ctx, "create group "+g.ID,
		"INSERT INTO groups ("+groupCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)"+
			" ON CONFLICT DO NOTHING",
		g.ID, g.TenantID, g.Name, string(g.State), doc.template, g.Min, g.Max, g.Desired, doc.policies,
		doc.mixed, doc.timing, int64(g.BudgetPerHour), doc.idle, doc.status, g.IdempotencyKey,
		d.timeArg(created), d.timeArg(updated), tags)
	if err != nil {
		return err
	}
	if n == 0 {
		// At read committed a concurrent create may have committed after
		// the lookups above; these see it.
		if g.IdempotencyKey != "" {
			if err := t.groupByKey(ctx, g); err != nil {
				return err
			}
		}
		if err := t.liveName(ctx, g); err != nil {
			return err
		}
		return conflictf("group %s already exists", g.ID)
	}
	g.Version, g.CreatedAt, g.UpdatedAt = 1, created, updated
	doc.normalize(g)
	return nil
}

// liveName returns a Conflict when g is live and another live group of its
// tenant has its name. Checking first, instead of letting the unique index
// fail, gives a clear message and keeps the transaction usable.
func (t *tx) liveName(ctx context.Context, g *cloud.Group) error {
	if g.State == cloud.GroupDeleted {
		return nil
	}
	var other string
	found := true
	err := t.get(ctx, "find group by name", func() error { found = false; return nil },
		"SELECT id FROM groups WHERE tenant_id = ? AND name = ? AND state <> ? AND id <> ?",
		[]any{g.TenantID, g.Name, string(cloud.GroupDeleted), g.ID}, &other)
	if err != nil || !found {
		return err
	}
	return &cloud.Error{
		Code: cloud.Conflict,
		Message: "tenant " + g.TenantID + " already has a group named " + strconv.Quote(g.Name) +
			" (" + other + "); a name is free again once its group is deleted",
		Details: map[string]any{"name": g.Name, "group_id": other},
	}
}

// groupByKey is spotRequestByKey for groups.
func (t *tx) groupByKey(ctx context.Context, g *cloud.Group) error {
	found := true
	old, err := one(ctx, t, "find group by idempotency key", func() error { found = false; return nil },
		"SELECT "+groupCols+" FROM groups WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{g.TenantID, g.IdempotencyKey}, scanGroup)
	if err != nil || !found {
		return err
	}
	key := g.IdempotencyKey
	*g = *old
	return idempotencyConflict("group", old.ID, key)
}

func (t *tx) GetGroup(ctx context.Context, id string) (*cloud.Group, error) {
	return one(ctx, t, "get group "+id, func() error { return notFoundf("group %s not found", id) },
		"SELECT "+groupCols+" FROM groups WHERE id = ?", []any{id}, scanGroup)
}

// GroupByKey finds the group a tenant created with an idempotency key; the
// empty key never matches.
func (t *tx) GroupByKey(ctx context.Context, tenantID, key string) (*cloud.Group, error) {
	return one(ctx, t, "find group by idempotency key",
		func() error {
			return notFoundf("tenant %s has no group with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+groupCols+" FROM groups WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanGroup)
}

func (t *tx) ListGroups(ctx context.Context, f cloud.GroupFilter) ([]*cloud.Group, error) {
	conds, args := groupConds(f)
	return list(ctx, t, "list groups", "SELECT "+groupCols+" FROM groups"+where(conds)+" ORDER BY id", args, scanGroup)
}

// GroupVersions is ListGroups reading the id and version columns.
func (t *tx) GroupVersions(ctx context.Context, f cloud.GroupFilter) ([]cloud.RowVersion, error) {
	conds, args := groupConds(f)
	return listVersions(ctx, t, "list group versions", "SELECT id, version FROM groups"+where(conds)+" ORDER BY id", args)
}

func groupConds(f cloud.GroupFilter) ([]string, []any) {
	var conds []string
	var args []any
	if f.TenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, f.TenantID)
	}
	if len(f.States) > 0 {
		var cond string
		cond, args = inList("state", f.States, args)
		conds = append(conds, cond)
	}
	if len(f.IDs) > 0 {
		var cond string
		cond, args = inList("id", f.IDs, args)
		conds = append(conds, cond)
	}
	return conds, args
}

// UpdateGroup writes every field except the ones fixed at creation: ID,
// TenantID, IdempotencyKey and CreatedAt. A live group may not take the
// name of another live group of its tenant.
func (t *tx) UpdateGroup(ctx context.Context, g *cloud.Group) error {
	if err := validGroup(g); err != nil {
		return err
	}
	doc, err := encodeGroup(g)
	if err != nil {
		return err
	}
	// The tenant is the stored one: the name is unique among its groups.
	var tenant string
	err = t.get(ctx, "find group "+g.ID, func() error { return notFoundf("group %s not found", g.ID) },
		"SELECT tenant_id FROM groups WHERE id = ?", []any{g.ID}, &tenant)
	if err != nil {
		return err
	}
	named := *g
	named.TenantID = tenant
	if err := t.liveName(ctx, &named); err != nil {
		return err
	}
	updated := normTime(g.UpdatedAt)
	n, err := t.execN(ctx, "update group "+g.ID,
		"UPDATE groups SET name = ?, state = ?, template = ?, min_size = ?, max_size = ?, desired_size = ?,"+
			" policies = ?, mixed = ?, timing = ?, budget_per_hour = ?, idle_release = ?, status = ?,"+
			" updated_at = ?, version = version + 1 WHERE id = ? AND version = ?",
		g.Name, string(g.State), doc.template, g.Min, g.Max, g.Desired, doc.policies, doc.mixed, doc.timing,
		int64(g.BudgetPerHour), doc.idle, doc.status, t.s.d.timeArg(updated), g.ID, g.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.staleVersion(ctx, "groups", "group", g.ID, g.Version)
	}
	g.Version++
	g.UpdatedAt = updated
	doc.normalize(g)
	return nil
}

// ---- metrics ----

const metricCols = "tenant_id, name, instance_id, group_id, at, value"

func scanMetric(sc scanner) (*cloud.MetricPoint, error) {
	var p cloud.MetricPoint
	err := sc.Scan(&p.TenantID, &p.Name, &p.InstanceID, &p.GroupID, timeCol{&p.At}, &p.Value)
	return &p, err
}

// AppendMetrics appends all the points or none, batchRows per statement.
// A value that is not a finite number is Invalid too: neither JSON nor
// SQLite's REAL can hold it.
func (t *tx) AppendMetrics(ctx context.Context, ps []cloud.MetricPoint) error {
	const cols = 6
	d := &t.s.d
	args := make([]any, 0, cols*len(ps))
	for i, p := range ps {
		switch {
		case p.TenantID == "":
			return invalidf("metric point %d (%q) has no tenant", i, p.Name)
		case p.Name == "":
			return invalidf("metric point %d of tenant %s has no name", i, p.TenantID)
		case p.InstanceID == "" && p.GroupID == "":
			return invalidf("metric point %d (%q) of tenant %s has neither an instance nor a group", i, p.Name, p.TenantID)
		case math.IsNaN(p.Value) || math.IsInf(p.Value, 0):
			return invalidf("metric point %d (%q) of tenant %s: value %v is not a finite number", i, p.Name, p.TenantID, p.Value)
		}
		args = append(args, p.TenantID, p.Name, p.InstanceID, p.GroupID, d.timeArg(normTime(p.At)), p.Value)
	}
	for lo := 0; lo < len(ps); lo += batchRows {
		hi := min(lo+batchRows, len(ps))
		if _, err := t.exec(ctx, "append metrics",
			"INSERT INTO metric_points ("+metricCols+") VALUES "+values("(?, ?, ?, ?, ?, ?)", hi-lo),
			args[cols*lo:cols*hi]...); err != nil {
			return err
		}
	}
	return nil
}

// ListMetrics returns the matching points in time order, points of one
// time in the order they were appended, the first f.Limit of them when
// f.Limit > 0.
func (t *tx) ListMetrics(ctx context.Context, f cloud.MetricFilter) ([]cloud.MetricPoint, error) {
	if f.Limit < 0 {
		return nil, invalidf("limit %d is negative", f.Limit)
	}
	var conds []string
	var args []any
	if f.TenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, f.TenantID)
	}
	if f.GroupID != "" {
		conds, args = append(conds, "group_id = ?"), append(args, f.GroupID)
	}
	if !f.After.IsZero() {
		conds, args = append(conds, "at > ?"), append(args, t.s.d.timeArg(normTime(f.After)))
	}
	q := "SELECT " + metricCols + " FROM metric_points" + where(conds) + " ORDER BY at, id"
	if f.Limit > 0 {
		q, args = q+" LIMIT ?", append(args, f.Limit)
	}
	ps, err := list(ctx, t, "list metrics", q, args, scanMetric)
	if err != nil {
		return nil, err
	}
	return derefAll(ps), nil
}

func (t *tx) PruneMetrics(ctx context.Context, before time.Time) (int64, error) {
	return t.execN(ctx, "prune metrics", "DELETE FROM metric_points WHERE at < ?", t.s.d.timeArg(normTime(before)))
}

// ---- histories ----

// GroupHistory returns the document as it was put, byte for byte (an
// empty document is empty and non-nil).
func (t *tx) GroupHistory(ctx context.Context, groupID string) ([]byte, error) {
	var doc []byte
	err := t.get(ctx, "get group history "+groupID,
		func() error { return notFoundf("group %s has no saved history", groupID) },
		"SELECT doc FROM group_histories WHERE group_id = ?", []any{groupID}, &doc)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		doc = []byte{}
	}
	return doc, nil
}

// PutGroupHistory saves doc as the group's history, replacing the one
// saved before; the group must exist (NotFound otherwise).
func (t *tx) PutGroupHistory(ctx context.Context, groupID string, doc []byte) error {
	if err := t.mustExist(ctx, "groups", "group", groupID); err != nil {
		return err
	}
	if doc == nil {
		doc = []byte{}
	}
	_, err := t.exec(ctx, "put group history "+groupID,
		"INSERT INTO group_histories (group_id, doc, updated_at) VALUES (?, ?, ?)"+
			" ON CONFLICT (group_id) DO UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at",
		groupID, doc, t.s.d.timeArg(normTime(time.Now())))
	return err
}
