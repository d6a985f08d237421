package sqlstore

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
)

const instanceCols = "id, tenant_id, name, offering, state, reason, version, idempotency_key, " +
	"zones, labels, command, env, volumes, tags, host_id, placement, created_at, updated_at, " +
	"zone, market, spot_request_id, interruption, group_id, scale_in, image, placement_group_id, private_address, " +
	"network_id, subnet_id, security_groups, publish, publish_keep_prefix, endpoint_id, prefer_hosts"

func scanInstance(sc scanner) (*cloud.Instance, error) {
	var in cloud.Instance
	err := sc.Scan(&in.ID, &in.TenantID, &in.Name, &in.Offering, &in.State, &in.Reason, &in.Version,
		&in.IdempotencyKey, jsonCol{&in.Zones}, jsonCol{&in.Labels}, jsonCol{&in.Command},
		jsonCol{&in.Env}, jsonCol{&in.Volumes}, jsonCol{&in.Tags}, &in.HostID,
		jsonCol{&in.Placement}, timeCol{&in.CreatedAt}, timeCol{&in.UpdatedAt},
		&in.Zone, &in.Market, &in.SpotRequestID, jsonCol{&in.Interruption}, &in.GroupID, jsonCol{&in.ScaleIn},
		&in.Image, &in.PlacementGroupID, &in.PrivateAddress, &in.NetworkID, &in.SubnetID, jsonCol{&in.SecurityGroupIDs}, jsonCol{&in.Publish},
		jsonCol{&in.PublishKeepPrefix}, &in.EndpointID, jsonCol{&in.PreferHosts})
	if err == nil && in.Market == "" {
		in.Market = cloud.MarketOnDemand
	}
	return &in, err
}

// instanceDoc is the JSON text of an instance's list, map, placement,
// interruption, scale-in and security group fields, in column order, with the values of the
// instance's fields that the store normalizes: the market (empty is on
// demand), the interruption's times and the scale-in lock's time (UTC
// microseconds, in copies: the caller's may be shared).
type instanceDoc struct {
	zones, labels, command, env, volumes, tags string
	securityGroups, publish, keepPrefix        string
	preferHosts                                string
	placement, interruption, scaleIn           any
	market                                     cloud.Market
	intr                                       *cloud.Interruption
	scale                                      *cloud.ScaleIn
}

// normalize sets the fields of in that the store normalizes to what was
// stored, after a successful write.
func (d *instanceDoc) normalize(in *cloud.Instance) {
	in.Market, in.Interruption, in.ScaleIn = d.market, d.intr, d.scale
}

func encodeInstance(in *cloud.Instance) (*instanceDoc, error) {
	var d instanceDoc
	var err error
	for _, f := range []struct {
		name string
		dst  *string
		v    any
	}{
		{"zones", &d.zones, in.Zones}, {"labels", &d.labels, in.Labels},
		{"command", &d.command, in.Command}, {"env", &d.env, in.Env},
		{"volumes", &d.volumes, in.Volumes}, {"tags", &d.tags, in.Tags},
		{"security groups", &d.securityGroups, in.SecurityGroupIDs},
		{"published ports", &d.publish, in.Publish},
		{"published ports keeping their prefix", &d.keepPrefix, in.PublishKeepPrefix},
		{"preferred hosts", &d.preferHosts, in.PreferHosts},
	} {
		if *f.dst, err = jsonArg("instance "+in.ID+" "+f.name, f.v); err != nil {
			return nil, err
		}
	}
	// No placement is SQL NULL rather than the JSON null, so that SQL can
	// tell placed instances apart with IS NULL.
	if in.Placement != nil {
		if d.placement, err = jsonArg("instance "+in.ID+" placement", in.Placement); err != nil {
			return nil, err
		}
	}
	d.market = in.Market
	if d.market == "" {
		d.market = cloud.MarketOnDemand
	}
	// No interruption is SQL NULL too.
	if in.Interruption != nil {
		intr := *in.Interruption
		intr.NoticedAt, intr.Deadline = normTime(intr.NoticedAt), normTime(intr.Deadline)
		d.intr = &intr
		if d.interruption, err = jsonArg("instance "+in.ID+" interruption", d.intr); err != nil {
			return nil, err
		}
	}
	// No scale-in protection is SQL NULL as well.
	if in.ScaleIn != nil {
		sc := *in.ScaleIn
		if sc.Lock != nil {
			lock := *sc.Lock
			lock.At = normTime(lock.At)
			sc.Lock = &lock
		}
		d.scale = &sc
		if d.scaleIn, err = jsonArg("instance "+in.ID+" scale-in", d.scale); err != nil {
			return nil, err
		}
	}
	return &d, nil
}

// CreateInstance inserts the instance unless its idempotency key (or its
// ID, or its address) is taken; a key taken by a committed create, this
// statement sees (at read committed it waits for a concurrent one to end,
// and at serializable PostgreSQL fails one of the two to serialize, after
// which Tx reruns it), and the lookup that follows answers that instance.
// There is no lookup before the insert: the service looked the key up
// already, and the insert decides anyway.
func (t *tx) CreateInstance(ctx context.Context, in *cloud.Instance) error {
	return t.CreateInstances(ctx, []*cloud.Instance{in})
}

// CreateInstances inserts the instances with one statement per batchRows
// of them (ON CONFLICT DO NOTHING ... RETURNING id), after checking each
// one's tenant once; an instance that was not inserted is explained as
// CreateInstance explains it, and the first such one's error returned.
func (t *tx) CreateInstances(ctx context.Context, ins []*cloud.Instance) error {
	const cols = 33 // parameters per row (the version is the literal 1)
	args := make([]any, 0, cols*len(ins))
	docs := make([]*instanceDoc, len(ins))
	tenants := map[string]bool{}
	ids := make(map[string]bool, len(ins))
	d := &t.s.d
	for i, in := range ins {
		if in.ID == "" {
			return invalidf("instance has no id")
		}
		if in.TenantID == "" {
			return invalidf("instance %s has no tenant", in.ID)
		}
		if ids[in.ID] {
			return invalidf("instance %s is given twice", in.ID)
		}
		ids[in.ID] = true
		doc, err := encodeInstance(in)
		if err != nil {
			return err
		}
		docs[i] = doc
		created, updated := normTime(in.CreatedAt), normTime(in.UpdatedAt)
		args = append(args, in.ID, in.TenantID, in.Name, in.Offering, string(in.State), in.Reason, in.IdempotencyKey,
			doc.zones, doc.labels, doc.command, doc.env, doc.volumes, doc.tags, in.HostID, doc.placement,
			d.timeArg(created), d.timeArg(updated),
			in.Zone, string(doc.market), in.SpotRequestID, doc.interruption, in.GroupID, doc.scaleIn, in.Image,
			in.PlacementGroupID, in.PrivateAddress, in.NetworkID, in.SubnetID, doc.securityGroups, doc.publish, doc.keepPrefix,
			in.EndpointID, doc.preferHosts)
		tenants[in.TenantID] = true
	}
	for _, tenant := range slices.Sorted(maps.Keys(tenants)) {
		if err := t.mustExist(ctx, "tenants", "tenant", tenant); err != nil {
			return err
		}
	}
	const row = "(?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	inserted := make(map[string]bool, len(ins))
	for lo := 0; lo < len(ins); lo += batchRows {
		hi := min(lo+batchRows, len(ins))
		got, err := list(ctx, t, "create instances",
			"INSERT INTO instances ("+instanceCols+") VALUES "+values(row, hi-lo)+" ON CONFLICT DO NOTHING RETURNING id",
			args[cols*lo:cols*hi], scanString)
		if err != nil {
			return err
		}
		for _, id := range got {
			inserted[*id] = true
		}
	}
	for i, in := range ins {
		if !inserted[in.ID] {
			return t.instanceNotInserted(ctx, in)
		}
		in.Version, in.CreatedAt, in.UpdatedAt = 1, normTime(in.CreatedAt), normTime(in.UpdatedAt)
		docs[i].normalize(in)
	}
	return nil
}

func (t *tx) GetInstance(ctx context.Context, id string) (*cloud.Instance, error) {
	return one(ctx, t, "get instance "+id, func() error { return notFoundf("instance %s not found", id) },
		"SELECT "+instanceCols+" FROM instances WHERE id = ?", []any{id}, scanInstance)
}

// InstanceByKey finds the instance a tenant created with an idempotency key.
// The empty key never matches: it means the create was not idempotent.
func (t *tx) InstanceByKey(ctx context.Context, tenantID, key string) (*cloud.Instance, error) {
	return one(ctx, t, "find instance by idempotency key",
		func() error {
			return notFoundf("tenant %s has no instance with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+instanceCols+" FROM instances WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanInstance)
}

// InstancesByKeys reads the instances of keys with one IN list per
// batchRows keys.
func (t *tx) InstancesByKeys(ctx context.Context, tenantID string, keys []string) ([]*cloud.Instance, error) {
	keys = slices.DeleteFunc(slices.Clone(keys), func(k string) bool { return k == "" })
	slices.Sort(keys)
	keys = slices.Compact(keys)
	var out []*cloud.Instance
	for lo := 0; lo < len(keys); lo += batchRows {
		part := keys[lo:min(lo+batchRows, len(keys))]
		args := make([]any, 0, len(part)+1)
		args = append(args, tenantID)
		for _, k := range part {
			args = append(args, k)
		}
		ins, err := list(ctx, t, "find instances by idempotency keys",
			"SELECT "+instanceCols+" FROM instances WHERE tenant_id = ? AND idempotency_key IN ("+
				strings.TrimSuffix(strings.Repeat("?, ", len(part)), ", ")+")", args, scanInstance)
		if err != nil {
			return nil, err
		}
		out = append(out, ins...)
	}
	return out, nil
}

// ListInstances returns the matching instances in ID order, after
// f.AfterID and at most f.Limit of them.
func (t *tx) ListInstances(ctx context.Context, f cloud.InstanceFilter) ([]*cloud.Instance, error) {
	q, args, err := instanceQuery(instanceCols, f)
	if err != nil {
		return nil, err
	}
	return list(ctx, t, "list instances", q, args, scanInstance)
}

// InstanceIDs is ListInstances reading the id column alone.
func (t *tx) InstanceIDs(ctx context.Context, f cloud.InstanceFilter) ([]string, error) {
	q, args, err := instanceQuery("id", f)
	if err != nil {
		return nil, err
	}
	ids, err := list(ctx, t, "list instance ids", q, args, scanString)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = *id
	}
	return out, nil
}

// InstanceVersions is ListInstances reading the id and version columns.
func (t *tx) InstanceVersions(ctx context.Context, f cloud.InstanceFilter) ([]cloud.RowVersion, error) {
	q, args, err := instanceQuery("id, version", f)
	if err != nil {
		return nil, err
	}
	return listVersions(ctx, t, "list instance versions", q, args)
}

// instanceQuery is the query of ListInstances for the columns cols.
func instanceQuery(cols string, f cloud.InstanceFilter) (string, []any, error) {
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		conds = append(conds, cond)
		args = append(args, arg)
	}
	if f.TenantID != "" {
		add("tenant_id = ?", f.TenantID)
	}
	if f.HostID != "" {
		add("host_id = ?", f.HostID)
	}
	if f.Offering != "" {
		add("offering = ?", f.Offering)
	}
	if f.Name != "" {
		add("name = ?", f.Name)
	}
	if f.Market != "" {
		add("market = ?", string(f.Market))
	}
	if f.SpotRequestID != "" {
		add("spot_request_id = ?", f.SpotRequestID)
	}
	if f.Interrupted {
		conds = append(conds, "interruption IS NOT NULL")
	}
	if f.PlacementGroupID != "" {
		add("placement_group_id = ?", f.PlacementGroupID)
	}
	if f.NetworkID != "" {
		add("network_id = ?", f.NetworkID)
	}
	if f.SubnetID != "" {
		add("subnet_id = ?", f.SubnetID)
	}
	if f.SecurityGroupID != "" {
		add(`CAST(security_groups AS TEXT) LIKE ? ESCAPE '\'`, jsonElemPattern(f.SecurityGroupID))
	}
	if f.GroupID != "" {
		add("group_id = ?", f.GroupID)
	}
	if f.InGroup {
		conds = append(conds, "group_id <> ''")
	}
	switch {
	case f.AfterID != "" && f.NewestFirst:
		cursor := "SELECT c.created_at, c.id FROM instances c WHERE c.id = ?"
		args = append(args, f.AfterID)
		if f.TenantID != "" {
			cursor += " AND c.tenant_id = ?"
			args = append(args, f.TenantID)
		}
		conds = append(conds, "(created_at, id) < ("+cursor+")")
	case f.AfterID != "":
		add("id > ?", f.AfterID)
	}
	if len(f.IDs) > 0 {
		var cond string
		cond, args = inList("id", f.IDs, args)
		conds = append(conds, cond)
	}
	if len(f.States) > 0 {
		marks := strings.Repeat(", ?", len(f.States))[2:]
		conds = append(conds, "state IN ("+marks+")")
		for _, s := range f.States {
			args = append(args, string(s))
		}
	}
	if f.NewestFirst {
		return pageOrdered("SELECT "+cols+" FROM instances"+where(conds), args, f.Limit, "created_at DESC, id DESC")
	}
	return page("SELECT "+cols+" FROM instances"+where(conds), args, f.Limit)
}

// UpdateInstance writes every field except the ones fixed at creation: ID,
// TenantID (moving an instance between tenants would bypass quotas and
// billing), IdempotencyKey, CreatedAt, Publish (the published ports) and
// EndpointID.
func (t *tx) UpdateInstance(ctx context.Context, in *cloud.Instance) error {
	doc, err := encodeInstance(in)
	if err != nil {
		return err
	}
	updated := normTime(in.UpdatedAt)
	n, err := t.execN(ctx, "update instance "+in.ID,
		"UPDATE instances SET name = ?, offering = ?, state = ?, reason = ?, zones = ?, labels = ?,"+
			" command = ?, env = ?, volumes = ?, tags = ?, host_id = ?, placement = ?, updated_at = ?,"+
			" zone = ?, market = ?, spot_request_id = ?, interruption = ?, group_id = ?, scale_in = ?, image = ?,"+
			" private_address = ?, network_id = ?, subnet_id = ?, security_groups = ?, version = version + 1"+
			" WHERE id = ? AND version = ?",
		in.Name, in.Offering, string(in.State), in.Reason, doc.zones, doc.labels,
		doc.command, doc.env, doc.volumes, doc.tags, in.HostID, doc.placement, t.s.d.timeArg(updated),
		in.Zone, string(doc.market), in.SpotRequestID, doc.interruption, in.GroupID, doc.scaleIn, in.Image,
		in.PrivateAddress, in.NetworkID, in.SubnetID, doc.securityGroups, in.ID, in.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		return t.staleVersion(ctx, "instances", "instance", in.ID, in.Version)
	}
	in.Version++
	in.UpdatedAt = updated
	doc.normalize(in)
	return nil
}

// instanceNotInserted explains why the insert of in, with ON CONFLICT DO
// NOTHING, inserted nothing: its idempotency key is taken (Conflict with
// "existing_id", and *in set to that instance), its ID is, or its private
// address is held in its subnet.
func (t *tx) instanceNotInserted(ctx context.Context, in *cloud.Instance) error {
	if key := in.IdempotencyKey; key != "" {
		// At read committed a concurrent create with the same key may
		// have committed after the service's lookup; the insert saw it.
		if old, err := t.InstanceByKey(ctx, in.TenantID, key); err == nil {
			*in = *old
			return &cloud.Error{
				Code:    cloud.Conflict,
				Message: "instance " + old.ID + " was already created with idempotency key " + strconv.Quote(key),
				Details: map[string]any{"existing_id": old.ID},
			}
		} else if !cloud.IsNotFound(err) {
			return err
		}
	}
	dup, err := t.exists(ctx, "find instance "+in.ID, "SELECT 1 FROM instances WHERE id = ?", in.ID)
	if err != nil {
		return err
	}
	if !dup && in.SubnetID != "" && in.PrivateAddress != "" {
		return &cloud.Error{Code: cloud.Conflict,
			Message: "address " + in.PrivateAddress + " is held in subnet " + in.SubnetID + " by another instance",
			Details: map[string]any{"subnet_id": in.SubnetID, "private_address": in.PrivateAddress}}
	}
	return conflictf("instance %s already exists", in.ID)
}

// jsonElemPattern is the LIKE pattern (escape character \) that matches
// the JSON text of a list of strings holding s: s's JSON form, quotes
// included, so that one ID never matches another that contains it.
func jsonElemPattern(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return "%" + r.Replace(string(b)) + "%"
}

// staleVersion explains why a versioned update changed no row: NotFound for
// a missing row, else Conflict with the stored version in Details, so that
// a client can refetch.
func (t *tx) staleVersion(ctx context.Context, table, what, id string, version int64) error {
	var stored int64
	err := t.get(ctx, "find "+what+" "+id, func() error { return notFoundf("%s %s not found", what, id) },
		"SELECT version FROM "+table+" WHERE id = ?", []any{id}, &stored)
	if err != nil {
		return err
	}
	return &cloud.Error{
		Code: cloud.Conflict,
		Message: what + " " + id + " was changed concurrently: version " + strconv.FormatInt(version, 10) +
			" is stale, the stored version is " + strconv.FormatInt(stored, 10),
		Details: map[string]any{"id": id, "version": stored},
	}
}
