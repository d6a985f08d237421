package sqlstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/gpucloud/gpucloud/cloud"
)

// What a controller needs to commit many decisions at once: the scheduler
// writes a batch of placements in one transaction, and each statement
// here covers many rows, so that the transaction is a handful of round
// trips rather than a few per placement. Short transactions matter on
// PostgreSQL beyond their cost: a serializable transaction that stays open
// while others commit is the one most likely to be aborted.

// batchRows caps the rows of one statement, well under both databases'
// limits on parameters (PostgreSQL 65,535, SQLite 32,766).
const batchRows = 256

// typed is the placeholder of a parameter of SQL type typ where the query
// gives the database no column to infer its type from, as in a VALUES list
// that is not inserted: PostgreSQL needs the cast, while SQLite, which is
// dynamically typed, keeps what it is given (and a cast to a type it does
// not know, such as json, would convert the value).
func (d *Dialect) typed(typ string) string {
	if d.Name != "postgres" {
		return "?"
	}
	return "CAST(? AS " + typ + ")"
}

// values returns n rows of row, comma-separated.
func values(row string, n int) string {
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

// UpdateInstances joins the instances with a VALUES list of their new
// rows and updates those whose version matches, in one statement per
// batchRows instances.
func (t *tx) UpdateInstances(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	d := &t.s.d
	return t.updateInstanceRows(ctx, "update instances", ins, []column{
		{"name", ""}, {"offering", ""}, {"state", ""}, {"reason", ""}, {"zones", "json"}, {"labels", "json"},
		{"command", "json"}, {"env", "json"}, {"volumes", "json"}, {"tags", "json"}, {"host_id", ""},
		{"placement", "json"}, {"updated_at", "timestamptz"}, {"zone", ""}, {"market", ""},
		{"spot_request_id", ""}, {"interruption", "json"}, {"group_id", ""}, {"scale_in", "json"},
		{"image", ""}, {"private_address", ""}, {"network_id", ""}, {"subnet_id", ""},
		{"security_groups", "json"},
	}, func(in *cloud.Instance, doc *instanceDoc) []any {
		return []any{in.Name, in.Offering, string(in.State), in.Reason,
			doc.zones, doc.labels, doc.command, doc.env, doc.volumes, doc.tags, in.HostID, doc.placement,
			d.timeArg(normTime(in.UpdatedAt)), in.Zone, string(doc.market), in.SpotRequestID, doc.interruption,
			in.GroupID, doc.scaleIn, in.Image, in.PrivateAddress, in.NetworkID, in.SubnetID, doc.securityGroups}
	})
}

// UpdateInstanceStates writes the state fields of each instance
// (cloud.Tx.UpdateInstanceStates) as UpdateInstances writes them all.
func (t *tx) UpdateInstanceStates(ctx context.Context, ins []*cloud.Instance) ([]string, error) {
	d := &t.s.d
	return t.updateInstanceRows(ctx, "update instance states", ins, []column{
		{"state", ""}, {"reason", ""}, {"host_id", ""}, {"placement", "json"}, {"zone", ""},
		{"interruption", "json"}, {"updated_at", "timestamptz"},
	}, func(in *cloud.Instance, doc *instanceDoc) []any {
		return []any{string(in.State), in.Reason, in.HostID, doc.placement, in.Zone, doc.interruption,
			d.timeArg(normTime(in.UpdatedAt))}
	})
}

// column is a column an update writes, and the SQL type its parameter is
// cast to in a VALUES list (Dialect.typed; empty: none needed).
type column struct{ name, typ string }

// updateInstanceRows writes cols of each instance whose stored version
// matches (args gives their values, in cols' order), bumping its version:
// the instances are joined with a VALUES list of (id, version, cols...),
// one statement per batchRows of them. It returns the IDs of the stale
// and missing ones, in the order given; the written ones get their new
// version and their stored (normalized) form. An ID given twice is
// Invalid.
func (t *tx) updateInstanceRows(ctx context.Context, op string, ins []*cloud.Instance, cols []column,
	args func(*cloud.Instance, *instanceDoc) []any) ([]string, error) {
	seen := make(map[string]bool, len(ins))
	for _, in := range ins {
		if seen[in.ID] {
			return nil, invalidf("instance %s is given twice", in.ID)
		}
		seen[in.ID] = true
	}
	d := &t.s.d
	names := []string{"id", "version"}
	params := []string{"?", d.typed("bigint")}
	sets := make([]string, 0, len(cols)+1)
	for _, c := range cols {
		names = append(names, c.name)
		p := "?"
		if c.typ != "" {
			p = d.typed(c.typ)
		}
		params = append(params, p)
		sets = append(sets, c.name+" = v."+c.name)
	}
	sets = append(sets, "version = instances.version + 1")
	row := "(" + strings.Join(params, ", ") + ")"
	// Encode everything first, so that an instance that cannot be stored
	// fails the call before anything is written.
	n := len(names)
	all := make([]any, 0, n*len(ins))
	docs := make([]*instanceDoc, len(ins))
	for i, in := range ins {
		doc, err := encodeInstance(in)
		if err != nil {
			return nil, err
		}
		docs[i] = doc
		all = append(append(all, in.ID, in.Version), args(in, doc)...)
	}
	written := make(map[string]bool, len(ins))
	for lo := 0; lo < len(ins); lo += batchRows {
		hi := min(lo+batchRows, len(ins))
		ids, err := list(ctx, t, op,
			"WITH v ("+strings.Join(names, ", ")+") AS (VALUES "+values(row, hi-lo)+")"+
				" UPDATE instances SET "+strings.Join(sets, ", ")+
				" FROM v WHERE instances.id = v.id AND instances.version = v.version RETURNING instances.id",
			all[n*lo:n*hi], scanString)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			written[*id] = true
		}
	}
	stale := []string{}
	for i, in := range ins {
		if !written[in.ID] {
			stale = append(stale, in.ID)
			continue
		}
		in.Version++
		in.UpdatedAt = normTime(in.UpdatedAt)
		docs[i].normalize(in)
	}
	return stale, nil
}

func scanRowVersion(sc scanner) (*cloud.RowVersion, error) {
	var v cloud.RowVersion
	err := sc.Scan(&v.ID, &v.Version)
	return &v, err
}

// listVersions runs a query for (id, version) rows.
func listVersions(ctx context.Context, t *tx, op, query string, args []any) ([]cloud.RowVersion, error) {
	ps, err := list(ctx, t, op, query, args, scanRowVersion)
	if err != nil {
		return nil, err
	}
	out := make([]cloud.RowVersion, len(ps))
	for i, p := range ps {
		out[i] = *p
	}
	return out, nil
}

func scanString(sc scanner) (*string, error) {
	var s string
	err := sc.Scan(&s)
	return &s, err
}

// BumpHosts bumps every host in one statement that checks all versions
// first (an uncorrelated subquery, evaluated once), so that a stale one
// leaves every host as it was.
func (t *tx) BumpHosts(ctx context.Context, versions map[string]int64) error {
	if len(versions) == 0 {
		return nil
	}
	if len(versions) > batchRows*32 {
		return invalidf("%d hosts in one bump; the limit is %d", len(versions), batchRows*32)
	}
	ids := make([]string, 0, len(versions))
	for id := range versions {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	args := make([]any, 0, 3*len(ids)+1)
	for _, id := range ids {
		args = append(args, id)
	}
	for _, id := range ids {
		args = append(args, id, versions[id])
	}
	args = append(args, len(ids))
	n, err := t.execN(ctx, "bump hosts",
		"UPDATE hosts SET version = version + 1 WHERE id IN ("+values("?", len(ids))+")"+
			" AND (SELECT COUNT(*) FROM hosts WHERE "+strings.Repeat("(id = ? AND version = ?) OR ", len(ids)-1)+
			"(id = ? AND version = ?)) = ?", args...)
	if err != nil {
		return err
	}
	if n == int64(len(ids)) {
		return nil
	}
	for _, id := range ids {
		var stored int64
		err := t.get(ctx, "find host "+id, func() error { return notFoundf("host %s not found", id) },
			"SELECT version FROM hosts WHERE id = ?", []any{id}, &stored)
		if err != nil {
			return err
		}
		if stored != versions[id] {
			return t.staleVersion(ctx, "hosts", "host", id, versions[id])
		}
	}
	return internal("bump hosts", errNoStale)
}

var errNoStale = &cloud.Error{Code: cloud.Internal, Message: "no host was bumped, yet none is stale"}

// HostStamp is one aggregate over the hosts table. PostgreSQL sums bigint
// into numeric, hence the cast back.
func (t *tx) HostStamp(ctx context.Context) (cloud.HostStamp, error) {
	var st cloud.HostStamp
	err := t.get(ctx, "host stamp", func() error { return nil },
		"SELECT COUNT(*), CAST(COALESCE(SUM(version), 0) AS BIGINT) FROM hosts", nil, &st.Hosts, &st.VersionSum)
	return st, err
}

// AppendEvents inserts batchRows events per statement, then the usage
// entries of the instance.state events among them (see meterEvents). Both databases
// number the rows of a multi-row insert in the order of its VALUES, so the
// IDs it returns, sorted, are the events' in order (RETURNING itself
// promises no order).
func (t *tx) AppendEvents(ctx context.Context, es []*cloud.Event) error {
	// Check every event first, so that a bad one fails the call before
	// anything is written.
	const cols = 10
	args := make([]any, 0, cols*len(es))
	for _, e := range es {
		a, _, err := t.eventArgs(e)
		if err != nil {
			return err
		}
		args = append(args, a...)
	}
	for lo := 0; lo < len(es); lo += batchRows {
		part := es[lo:min(lo+batchRows, len(es))]
		ids, err := list(ctx, t, "append events",
			"INSERT INTO events ("+eventInsertCols+") VALUES "+values(eventRow, len(part))+" RETURNING id",
			args[cols*lo:cols*(lo+len(part))], func(sc scanner) (*int64, error) {
				var id int64
				err := sc.Scan(&id)
				return &id, err
			})
		if err != nil {
			return err
		}
		if len(ids) != len(part) {
			return internal("append events", errNoID)
		}
		slices.SortFunc(ids, func(a, b *int64) int { return cmp.Compare(*a, *b) })
		for i, e := range part {
			e.ID, e.Time = *ids[i], normTime(e.Time)
		}
	}
	return t.meterEvents(ctx, es)
}

// CountInstances is one GROUP BY over the instances table. The groups are
// sorted here, in byte order, whatever the database's collation.
func (t *tx) CountInstances(ctx context.Context) ([]cloud.InstanceCount, error) {
	out, err := list(ctx, t, "count instances",
		"SELECT state, offering, market, tenant_id, COUNT(*) FROM instances GROUP BY state, offering, market, tenant_id", nil,
		func(sc scanner) (*cloud.InstanceCount, error) {
			var c cloud.InstanceCount
			err := sc.Scan(&c.State, &c.Offering, &c.Market, &c.TenantID, &c.Count)
			return &c, err
		})
	if err != nil {
		return nil, err
	}
	counts := derefAll(out)
	slices.SortFunc(counts, func(a, b cloud.InstanceCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Offering, b.Offering),
			cmp.Compare(a.Market, b.Market), cmp.Compare(a.TenantID, b.TenantID))
	})
	return counts, nil
}

// CountTenantInstances is one GROUP BY over a tenant's instances, which
// the instances_tenant_counts index covers.
func (t *tx) CountTenantInstances(ctx context.Context, tenantID string) ([]cloud.InstanceCount, error) {
	out, err := list(ctx, t, "count instances of tenant "+tenantID,
		"SELECT state, offering, market, COUNT(*) FROM instances WHERE tenant_id = ? GROUP BY state, offering, market", []any{tenantID},
		func(sc scanner) (*cloud.InstanceCount, error) {
			c := cloud.InstanceCount{TenantID: tenantID}
			err := sc.Scan(&c.State, &c.Offering, &c.Market, &c.Count)
			return &c, err
		})
	if err != nil {
		return nil, err
	}
	counts := derefAll(out)
	slices.SortFunc(counts, func(a, b cloud.InstanceCount) int {
		return cmp.Or(cmp.Compare(a.State, b.State), cmp.Compare(a.Offering, b.Offering), cmp.Compare(a.Market, b.Market))
	})
	return counts, nil
}

// CountHosts is one GROUP BY over the hosts table.
func (t *tx) CountHosts(ctx context.Context) ([]cloud.HostCount, error) {
	out, err := list(ctx, t, "count hosts", "SELECT state, COUNT(*) FROM hosts GROUP BY state", nil,
		func(sc scanner) (*cloud.HostCount, error) {
			var c cloud.HostCount
			err := sc.Scan(&c.State, &c.Count)
			return &c, err
		})
	if err != nil {
		return nil, err
	}
	counts := derefAll(out)
	slices.SortFunc(counts, func(a, b cloud.HostCount) int { return cmp.Compare(a.State, b.State) })
	return counts, nil
}
