package sqlstore

import (
	"context"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// The usage ledger is appended by the store itself, in the transaction of
// the change it meters, so that no caller can make a change and forget its
// entry (and a rolled-back change leaves none):
//
//   - AppendEvent and AppendEvents: an instance.state event whose move
//     crosses cloud.MeterEdge appends a compute On or Off at the event's
//     time, with the tenant, offering, zone, market and endpoint of the
//     instance row as the transaction sees it then (the caller updates the
//     instance before it appends the event), and the event's ID. An event of an
//     instance that is not stored meters nothing.
//   - CreateVolume, UpdateVolume: see there (On at creation, Off at
//     deletion, Off and On at a resize or move).
//   - CreateAddress, UpdateAddress: On at allocation, Off at release.

const usageCols = "id, at, tenant_id, kind, resource_id, on_, offering, zone, market, quantity, event_id, endpoint_id"

// usageInsertCols are the columns an insert writes (the ID is generated).
const usageInsertCols = "at, tenant_id, kind, resource_id, on_, offering, zone, market, quantity, event_id, endpoint_id"

func scanUsage(sc scanner) (*cloud.Usage, error) {
	var u cloud.Usage
	err := sc.Scan(&u.ID, timeCol{&u.Time}, &u.TenantID, &u.Kind, &u.ResourceID, &u.On, &u.Offering,
		&u.Zone, &u.Market, &u.Quantity, &u.EventID, &u.EndpointID)
	return &u, err
}

// volumeUsage is a volume's ledger entry at a time (normalized) with a
// size.
func volumeUsage(v *cloud.Volume, at time.Time, on bool, sizeGiB int64) *cloud.Usage {
	return &cloud.Usage{Time: at, TenantID: v.TenantID, Kind: cloud.UsageVolume, ResourceID: v.ID, On: on,
		Zone: v.Zone, Quantity: sizeGiB}
}

// addressUsage is an address's ledger entry at a time (normalized).
func addressUsage(a *cloud.Address, at time.Time, on bool) *cloud.Usage {
	return &cloud.Usage{Time: at, TenantID: a.TenantID, Kind: cloud.UsageAddress, ResourceID: a.ID, On: on,
		Zone: a.Zone, Quantity: 1}
}

// appendUsage inserts entries whose times are normalized, in order, in one
// statement per batchRows entries.
func (t *tx) appendUsage(ctx context.Context, us ...*cloud.Usage) error {
	const cols = 11
	d := &t.s.d
	for lo := 0; lo < len(us); lo += batchRows {
		part := us[lo:min(lo+batchRows, len(us))]
		args := make([]any, 0, cols*len(part))
		for _, u := range part {
			args = append(args, d.timeArg(u.Time), u.TenantID, string(u.Kind), u.ResourceID, u.On,
				u.Offering, u.Zone, string(u.Market), u.Quantity, u.EventID, u.EndpointID)
		}
		if _, err := t.exec(ctx, "append usage",
			"INSERT INTO usage ("+usageInsertCols+") VALUES "+values("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", len(part)),
			args...); err != nil {
			return err
		}
	}
	return nil
}

// meterEvents appends the compute entries of the events es, which were
// just stored (their IDs and times set). Most events cross no edge (the
// scheduler's batches move instances to scheduled), so they are filtered
// here and cost no statement; the others take one INSERT ... SELECT per
// batchRows events that reads each instance's row as this transaction
// sees it.
func (t *tx) meterEvents(ctx context.Context, es []*cloud.Event) error {
	d := &t.s.d
	var args []any
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		row := "(" + d.typed("timestamptz") + ", ?, " + d.typed("boolean") + ", " + d.typed("bigint") + ")"
		_, err := t.exec(ctx, "append usage of instance events",
			"WITH v (at, instance_id, on_, event_id) AS (VALUES "+values(row, n)+")"+
				" INSERT INTO usage ("+usageInsertCols+")"+
				" SELECT v.at, i.tenant_id, '"+string(cloud.UsageCompute)+"', i.id, v.on_, i.offering, i.zone,"+
				" i.market, 1, v.event_id, i.endpoint_id FROM v JOIN instances i ON i.id = v.instance_id ORDER BY v.event_id",
			args...)
		args, n = args[:0], 0
		return err
	}
	for _, e := range es {
		if e.Kind != cloud.EventInstanceState || e.InstanceID == "" {
			continue
		}
		on, off := cloud.MeterEdge(e.From, e.To)
		if !on && !off {
			continue
		}
		args = append(args, d.timeArg(normTime(e.Time)), e.InstanceID, on, e.ID)
		if n++; n == batchRows {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// ListUsage reads the ledger in ID order: the order in which the entries
// were appended.
func (t *tx) ListUsage(ctx context.Context, f cloud.UsageFilter) ([]*cloud.Usage, error) {
	var conds []string
	var args []any
	if f.TenantID != "" {
		conds, args = append(conds, "tenant_id = ?"), append(args, f.TenantID)
	}
	if !f.Since.IsZero() {
		conds, args = append(conds, "at >= ?"), append(args, t.s.d.timeArg(normTime(f.Since)))
	}
	if !f.Before.IsZero() {
		conds, args = append(conds, "at < ?"), append(args, t.s.d.timeArg(normTime(f.Before)))
	}
	if f.AfterID > 0 {
		conds, args = append(conds, "id > ?"), append(args, f.AfterID)
	}
	q, args, err := page("SELECT "+usageCols+" FROM usage"+where(conds), args, f.Limit)
	if err != nil {
		return nil, err
	}
	return list(ctx, t, "list usage", q, args, scanUsage)
}

// OpenUsage finds the On entries before at that no Off of the same
// resource follows before at. It reads the tenant's index by time and, per
// On, the resource's later entries by the (resource_id, id) index, so it
// returns a handful of rows however long the history; an interval that
// opened with several Ons (which rating ignores after the first) returns
// them all, so that rating from them equals rating from the whole ledger.
func (t *tx) OpenUsage(ctx context.Context, tenantID string, at time.Time) ([]*cloud.Usage, error) {
	ts := t.s.d.timeArg(normTime(at))
	conds := []string{"u.on_ = ?", "u.at < ?"}
	args := []any{true, ts}
	if tenantID != "" {
		conds, args = append(conds, "u.tenant_id = ?"), append(args, tenantID)
	}
	conds = append(conds, "NOT EXISTS (SELECT 1 FROM usage v WHERE v.resource_id = u.resource_id"+
		" AND v.kind = u.kind AND v.tenant_id = u.tenant_id AND v.id > u.id AND v.on_ = ? AND v.at < ?)")
	args = append(args, false, ts)
	cols := "u." + strings.ReplaceAll(usageCols, ", ", ", u.")
	return list(ctx, t, "open usage", "SELECT "+cols+" FROM usage u"+where(conds)+" ORDER BY u.id", args, scanUsage)
}
