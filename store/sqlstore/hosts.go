package sqlstore

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/fleet"
)

const hostCols = "id, state, spec, last_heartbeat, version"

func scanHost(sc scanner) (*cloud.Host, error) {
	var h cloud.Host
	err := sc.Scan(&h.ID, &h.State, jsonCol{&h.Spec}, timeCol{&h.LastHeartbeat}, &h.Version)
	return &h, err
}

// PutHost inserts a host when h.Version is 0 (a missing host has version 0)
// and updates it when h.Version equals the stored version; it sets h.Version
// to the new version. Anything else is a Conflict that changes nothing:
// version 0 for a host that exists (two agents registering one host), a
// stale version, or a version for a host that does not exist.
//
// Spec is stored as JSON, which keeps fleet.Host's exported fields only;
// the fleet's own bookkeeping is rebuilt when a host is added to a Fleet.
func (t *tx) PutHost(ctx context.Context, h *cloud.Host) error {
	if h.ID == "" {
		return invalidf("host has no id")
	}
	spec, err := jsonArg("host "+h.ID+" spec", h.Spec)
	if err != nil {
		return err
	}
	beat := normTime(h.LastHeartbeat)
	d := &t.s.d
	if h.Version == 0 {
		n, err := t.execN(ctx, "create host "+h.ID,
			"INSERT INTO hosts ("+hostCols+") VALUES (?, ?, ?, ?, 1) ON CONFLICT DO NOTHING",
			h.ID, string(h.State), spec, d.timeArg(beat))
		if err != nil {
			return err
		}
		if n == 0 {
			err := t.staleVersion(ctx, "hosts", "host", h.ID, 0)
			if ce, ok := err.(*cloud.Error); ok && ce.Code == cloud.Conflict {
				ce.Message = "host " + h.ID + " already exists; update it with its version"
			}
			return err
		}
		h.Version, h.LastHeartbeat = 1, beat
		return nil
	}
	n, err := t.execN(ctx, "update host "+h.ID,
		"UPDATE hosts SET state = ?, spec = ?, last_heartbeat = ?, version = version + 1"+
			" WHERE id = ? AND version = ?",
		string(h.State), spec, d.timeArg(beat), h.ID, h.Version)
	if err != nil {
		return err
	}
	if n == 0 {
		err := t.staleVersion(ctx, "hosts", "host", h.ID, h.Version)
		if cloud.IsNotFound(err) {
			return &cloud.Error{
				Code:    cloud.Conflict,
				Message: "host " + h.ID + " does not exist; create it with version 0",
				Details: map[string]any{"id": h.ID, "version": 0},
			}
		}
		return err
	}
	h.Version++
	h.LastHeartbeat = beat
	return nil
}

func (t *tx) GetHost(ctx context.Context, id string) (*cloud.Host, error) {
	return one(ctx, t, "get host "+id, func() error { return notFoundf("host %s not found", id) },
		"SELECT "+hostCols+" FROM hosts WHERE id = ?", []any{id}, scanHost)
}

func (t *tx) ListHosts(ctx context.Context) ([]*cloud.Host, error) {
	return list(ctx, t, "list hosts", "SELECT "+hostCols+" FROM hosts ORDER BY id", nil, scanHost)
}

// ListSilentHosts answers the hosts that are not unhealthy and whose last
// heartbeat is before before, in ID order, through the index on
// last_heartbeat.
func (t *tx) ListSilentHosts(ctx context.Context, before time.Time) ([]*cloud.Host, error) {
	return list(ctx, t, "list silent hosts", "SELECT "+hostCols+" FROM hosts WHERE last_heartbeat < ? AND state <> ? ORDER BY id",
		[]any{t.s.d.timeArg(normTime(before)), string(fleet.Unhealthy)}, scanHost)
}

// ListHostVersions lists every host's ID and version, in ID order.
func (t *tx) ListHostVersions(ctx context.Context) ([]cloud.RowVersion, error) {
	return listVersions(ctx, t, "list host versions", "SELECT id, version FROM hosts ORDER BY id", nil)
}

// Heartbeat writes last_heartbeat alone. It takes no version: heartbeats
// are not decisions that could overwrite someone else's, and a heartbeat
// that raced a PutHost is simply ordered before or after it.
func (t *tx) Heartbeat(ctx context.Context, id string, at time.Time) error {
	n, err := t.execN(ctx, "heartbeat of host "+id,
		"UPDATE hosts SET last_heartbeat = ? WHERE id = ?", t.s.d.timeArg(normTime(at)), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("host %s not found", id)
	}
	return nil
}

// stampChunk is the most host IDs one statement of StampHeartbeats
// names. Shorter lists are padded to a power of two (with their last ID
// again), so that the statement has a few texts, which stay prepared.
const stampChunk = 512

// StampHeartbeats writes last_heartbeat alone, as Heartbeat does, for
// every host of ids that exists and is not unhealthy, in one statement
// per stampChunk IDs, and answers the IDs it wrote, in no order.
func (t *tx) StampHeartbeats(ctx context.Context, ids []string, at time.Time) ([]string, error) {
	arg := t.s.d.timeArg(normTime(at))
	var out []string
	for lo := 0; lo < len(ids); lo += stampChunk {
		part := ids[lo:min(lo+stampChunk, len(ids))]
		n := 1
		for n < len(part) {
			n *= 2
		}
		args := make([]any, 0, n+2)
		args = append(args, arg, string(fleet.Unhealthy))
		for i := range n {
			args = append(args, part[min(i, len(part)-1)])
		}
		got, err := list(ctx, t, "stamp heartbeats",
			"UPDATE hosts SET last_heartbeat = ? WHERE state <> ? AND id IN ("+values("?", n)+") RETURNING id", args, scanString)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			out = append(out, *id)
		}
	}
	return out, nil
}

const volumeCols = "id, tenant_id, name, size_gib, zone, instance_id, created_at, deleted_at, idempotency_key, tags, kind"

func scanVolume(sc scanner) (*cloud.Volume, error) {
	var v cloud.Volume
	err := sc.Scan(&v.ID, &v.TenantID, &v.Name, &v.SizeGiB, &v.Zone, strCol{&v.InstanceID},
		timeCol{&v.CreatedAt}, nullTimeCol{&v.DeletedAt}, &v.IdempotencyKey, jsonCol{&v.Tags}, &v.Kind)
	return &v, err
}

// CreateVolume is idempotent by key as CreateInstance is, and for the same
// reasons looks the key up before and after its insert; a retry appends no
// usage.
func (t *tx) CreateVolume(ctx context.Context, v *cloud.Volume) error {
	if v.ID == "" {
		return invalidf("volume has no id")
	}
	if v.IdempotencyKey != "" {
		if err := t.volumeByKey(ctx, v); err != nil {
			return err
		}
	}
	if err := t.mustExist(ctx, "tenants", "tenant", v.TenantID); err != nil {
		return err
	}
	if v.InstanceID != "" {
		if err := t.mustExist(ctx, "instances", "instance", v.InstanceID); err != nil {
			return err
		}
	}
	created, deleted := normTime(v.CreatedAt), normTimePtr(v.DeletedAt)
	if deleted != nil && deleted.Before(created) {
		return invalidf("volume %s is deleted before it is created", v.ID)
	}
	tags, err := jsonArg("volume "+v.ID+" tags", v.Tags)
	if err != nil {
		return err
	}
	if v.Kind == "" {
		v.Kind = cloud.VolumeBlock
	}
	if v.Kind != cloud.VolumeBlock && v.Kind != cloud.VolumeShared {
		return invalidf("volume %s has unknown kind %q", v.ID, v.Kind)
	}
	if v.Kind == cloud.VolumeShared && v.InstanceID != "" {
		return invalidf("shared volume %s names instance %s: its attachments are the instances' volume lists", v.ID, v.InstanceID)
	}
	d := &t.s.d
	n, err := t.execN(ctx, "create volume "+v.ID,
		"INSERT INTO volumes ("+volumeCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
		v.ID, v.TenantID, v.Name, v.SizeGiB, v.Zone, nullStr(v.InstanceID),
		d.timeArg(created), d.nullTimeArg(deleted), v.IdempotencyKey, tags, string(v.Kind))
	if err != nil {
		return err
	}
	if n == 0 {
		if v.IdempotencyKey != "" {
			if err := t.volumeByKey(ctx, v); err != nil {
				return err
			}
		}
		return conflictf("volume %s already exists", v.ID)
	}
	meter := []*cloud.Usage{volumeUsage(v, created, true, v.SizeGiB)}
	if deleted != nil {
		meter = append(meter, volumeUsage(v, *deleted, false, v.SizeGiB))
	}
	if err := t.appendUsage(ctx, meter...); err != nil {
		return err
	}
	v.CreatedAt, v.DeletedAt = created, deleted
	return nil
}

// volumeByKey is commitmentByKey for volumes.
func (t *tx) volumeByKey(ctx context.Context, v *cloud.Volume) error {
	found := true
	old, err := one(ctx, t, "find volume by idempotency key", func() error { found = false; return nil },
		"SELECT "+volumeCols+" FROM volumes WHERE tenant_id = ? AND idempotency_key = ?"+
			" AND idempotency_key <> ''", []any{v.TenantID, v.IdempotencyKey}, scanVolume)
	if err != nil || !found {
		return err
	}
	key := v.IdempotencyKey
	*v = *old
	return idempotencyConflict("volume", old.ID, key)
}

func (t *tx) GetVolume(ctx context.Context, id string) (*cloud.Volume, error) {
	return one(ctx, t, "get volume "+id, func() error { return notFoundf("volume %s not found", id) },
		"SELECT "+volumeCols+" FROM volumes WHERE id = ?", []any{id}, scanVolume)
}

// ListVolumes includes deleted volumes (DeletedAt set): they are kept for
// billing and audit, and callers filter them as they need.
func (t *tx) ListVolumes(ctx context.Context, tenantID string) ([]*cloud.Volume, error) {
	q, args := "SELECT "+volumeCols+" FROM volumes", []any(nil)
	if tenantID != "" {
		q, args = q+" WHERE tenant_id = ?", append(args, tenantID)
	}
	return list(ctx, t, "list volumes", q+" ORDER BY id", args, scanVolume)
}

// UpdateVolume writes Name, SizeGiB, Zone, InstanceID and DeletedAt; ID,
// TenantID, Kind and CreatedAt are fixed at creation. Volumes carry no version:
// callers that attach one serialize through the instance's version.
//
// It appends the volume's usage entries: an Off at DeletedAt when the
// volume is deleted, and an Off and an On with the new size and zone when
// a live volume is resized or moved. The volume has no field for the time
// of a resize, so those two entries are at the wall-clock time of the
// update. A deleted volume stays deleted: restoring it (DeletedAt set back
// to nil) is Invalid, and deleting it again at another time a Conflict.
func (t *tx) UpdateVolume(ctx context.Context, v *cloud.Volume) error {
	old, err := t.GetVolume(ctx, v.ID)
	if err != nil {
		return err
	}
	if old.Kind == cloud.VolumeShared && v.InstanceID != "" {
		return invalidf("shared volume %s names instance %s: its attachments are the instances' volume lists", v.ID, v.InstanceID)
	}
	if v.InstanceID != "" {
		if err := t.mustExist(ctx, "instances", "instance", v.InstanceID); err != nil {
			return err
		}
	}
	deleted := normTimePtr(v.DeletedAt)
	var meter []*cloud.Usage
	switch {
	case old.DeletedAt != nil && deleted == nil:
		return invalidf("volume %s was deleted at %s and cannot be restored", v.ID, old.DeletedAt.Format(time.RFC3339Nano))
	case old.DeletedAt != nil && !deleted.Equal(*old.DeletedAt):
		return conflictf("volume %s was already deleted at %s", v.ID, old.DeletedAt.Format(time.RFC3339Nano))
	case old.DeletedAt == nil && deleted != nil:
		if deleted.Before(old.CreatedAt) {
			return invalidf("volume %s is deleted before it was created", v.ID)
		}
		meter = append(meter, volumeUsage(old, *deleted, false, old.SizeGiB))
	case old.DeletedAt == nil && (v.SizeGiB != old.SizeGiB || v.Zone != old.Zone):
		now := normTime(time.Now())
		changed := *old
		changed.SizeGiB, changed.Zone = v.SizeGiB, v.Zone
		meter = append(meter, volumeUsage(old, now, false, old.SizeGiB), volumeUsage(&changed, now, true, v.SizeGiB))
	}
	n, err := t.execN(ctx, "update volume "+v.ID,
		"UPDATE volumes SET name = ?, size_gib = ?, zone = ?, instance_id = ?, deleted_at = ? WHERE id = ?",
		v.Name, v.SizeGiB, v.Zone, nullStr(v.InstanceID), t.s.d.nullTimeArg(deleted), v.ID)
	if err != nil {
		return err
	}
	if n == 0 {
		return notFoundf("volume %s not found", v.ID)
	}
	if err := t.appendUsage(ctx, meter...); err != nil {
		return err
	}
	v.DeletedAt = deleted
	return nil
}

const eventCols = "id, at, kind, tenant_id, instance_id, host_id, from_state, to_state, reason, actor, details"

func scanEvent(sc scanner) (*cloud.Event, error) {
	var e cloud.Event
	err := sc.Scan(&e.ID, timeCol{&e.Time}, &e.Kind, &e.TenantID, &e.InstanceID, &e.HostID,
		&e.From, &e.To, &e.Reason, &e.Actor, rawCol{&e.Details})
	return &e, err
}

// AppendEvent stores Details byte for byte (empty Details is SQL NULL) and
// rejects invalid JSON, which the JSON API could not render. An
// instance.state event that starts or stops metering appends its usage
// entry too (see meterEvents).
func (t *tx) AppendEvent(ctx context.Context, e *cloud.Event) error {
	args, at, err := t.eventArgs(e)
	if err != nil {
		return err
	}
	var id int64
	err = t.get(ctx, "append event", func() error { return internal("append event", errNoID) },
		"INSERT INTO events ("+eventInsertCols+") VALUES "+eventRow+" RETURNING id", args, &id)
	if err != nil {
		return err
	}
	e.ID, e.Time = id, at
	return t.meterEvents(ctx, []*cloud.Event{e})
}

// eventInsertCols are the columns an insert writes (the ID is generated),
// and eventRow the placeholders of one row.
const (
	eventInsertCols = "at, kind, tenant_id, instance_id, host_id, from_state, to_state, reason, actor, details"
	eventRow        = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

// eventArgs returns the arguments of one event's row and the time it
// stores.
func (t *tx) eventArgs(e *cloud.Event) ([]any, time.Time, error) {
	var details any
	if len(e.Details) > 0 {
		if !json.Valid(e.Details) {
			return nil, time.Time{}, invalidf("event details are not valid JSON")
		}
		details = string(e.Details)
	}
	at := normTime(e.Time)
	return []any{t.s.d.timeArg(at), string(e.Kind), e.TenantID, e.InstanceID, e.HostID,
		string(e.From), string(e.To), e.Reason, e.Actor, details}, at, nil
}

var errNoID = &cloud.Error{Code: cloud.Internal, Message: "insert returned no id"}

// ListEvents returns the matching events in ID order, after f.AfterID and
// at most f.Limit of them. Since compares with the stored time, which is
// normalized like every time the store keeps, so Since is normalized too.
func (t *tx) ListEvents(ctx context.Context, f cloud.EventFilter) ([]*cloud.Event, error) {
	var conds []string
	var args []any
	for _, c := range []struct {
		col, val string
	}{{"tenant_id", f.TenantID}, {"instance_id", f.InstanceID}, {"host_id", f.HostID}} {
		if c.val != "" {
			conds = append(conds, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if len(f.Kinds) > 0 {
		conds = append(conds, "kind IN ("+values("?", len(f.Kinds))+")")
		for _, k := range f.Kinds {
			args = append(args, string(k))
		}
	}
	if !f.Since.IsZero() {
		conds = append(conds, "at >= ?")
		args = append(args, t.s.d.timeArg(normTime(f.Since)))
	}
	if f.AfterID > 0 {
		conds = append(conds, "id > ?")
		args = append(args, f.AfterID)
	}
	q, args, err := page("SELECT "+eventCols+" FROM events"+where(conds), args, f.Limit)
	if err != nil {
		return nil, err
	}
	return list(ctx, t, "list events", q, args, scanEvent)
}

// Compile-time check that tx implements the whole interface.
var _ cloud.Tx = (*tx)(nil)

func (t *tx) VolumeByKey(ctx context.Context, tenantID, key string) (*cloud.Volume, error) {
	return one(ctx, t, "find volume by idempotency key",
		func() error {
			return notFoundf("tenant %s has no volume with idempotency key %s", tenantID, strconv.Quote(key))
		},
		"SELECT "+volumeCols+" FROM volumes WHERE tenant_id = ? AND idempotency_key = ? AND idempotency_key <> ''",
		[]any{tenantID, key}, scanVolume)
}
