package sqlstore

import (
	"context"
	"time"

	"github.com/gpucloud/gpucloud/cloud"
)

// Replicas: cloud.ReplicaTx.

const replicaCols = "id, address, started_at, heartbeat_at, load"

func scanReplica(sc scanner) (*cloud.Replica, error) {
	var r cloud.Replica
	err := sc.Scan(&r.ID, &r.Address, timeCol{&r.StartedAt}, timeCol{&r.HeartbeatAt}, &r.Load)
	r.Hosts = []cloud.ReplicaHost{}
	return &r, err
}

type replicaHostRow struct {
	replica string
	host    cloud.ReplicaHost
}

func scanReplicaHost(sc scanner) (*replicaHostRow, error) {
	var h replicaHostRow
	err := sc.Scan(&h.replica, &h.host.HostID, timeCol{&h.host.Since})
	return &h, err
}

func (t *tx) PutReplica(ctx context.Context, r *cloud.Replica) error {
	if r.ID == "" || r.Address == "" {
		return invalidf("replica needs an id and an address")
	}
	hb, started := normTime(r.HeartbeatAt), normTime(r.StartedAt)
	if started.IsZero() {
		started = hb
	}
	d := t.s.d
	if _, err := t.exec(ctx, "put replica "+r.ID,
		"INSERT INTO replicas ("+replicaCols+") VALUES (?, ?, ?, ?, ?)"+
			" ON CONFLICT (id) DO UPDATE SET address = excluded.address, heartbeat_at = excluded.heartbeat_at, load = excluded.load",
		r.ID, r.Address, d.timeArg(started), d.timeArg(hb), r.Load); err != nil {
		return err
	}
	if _, err := t.exec(ctx, "clear replica hosts "+r.ID, "DELETE FROM replica_hosts WHERE replica_id = ?", r.ID); err != nil {
		return err
	}
	seen := make(map[string]bool, len(r.Hosts))
	for _, h := range r.Hosts {
		if h.HostID == "" || seen[h.HostID] {
			return invalidf("replica %s: host IDs must be given and distinct", r.ID)
		}
		seen[h.HostID] = true
	}
	// A statement per chunk of hosts, not per host: a replica writes them
	// every few seconds.
	const chunk = 200
	for i := 0; i < len(r.Hosts); i += chunk {
		part := r.Hosts[i:min(i+chunk, len(r.Hosts))]
		q := "INSERT INTO replica_hosts (replica_id, host_id, since) VALUES "
		args := make([]any, 0, 3*len(part))
		for j, h := range part {
			if j > 0 {
				q += ", "
			}
			q += "(?, ?, ?)"
			args = append(args, r.ID, h.HostID, d.timeArg(normTime(h.Since)))
		}
		if _, err := t.exec(ctx, "put replica hosts "+r.ID, q, args...); err != nil {
			return err
		}
	}
	return nil
}

func (t *tx) ListReplicas(ctx context.Context, since time.Time) ([]*cloud.Replica, error) {
	arg := t.s.d.timeArg(normTime(since))
	rs, err := list(ctx, t, "list replicas", "SELECT "+replicaCols+" FROM replicas WHERE heartbeat_at >= ? ORDER BY id", []any{arg}, scanReplica)
	if err != nil || len(rs) == 0 {
		return rs, err
	}
	hs, err := list(ctx, t, "list replica hosts",
		"SELECT h.replica_id, h.host_id, h.since FROM replica_hosts h JOIN replicas r ON r.id = h.replica_id"+
			" WHERE r.heartbeat_at >= ? ORDER BY h.replica_id, h.host_id", []any{arg}, scanReplicaHost)
	if err != nil {
		return nil, err
	}
	by := make(map[string]*cloud.Replica, len(rs))
	for _, r := range rs {
		by[r.ID] = r
	}
	for _, h := range hs {
		if r := by[h.replica]; r != nil {
			r.Hosts = append(r.Hosts, h.host)
		}
	}
	return rs, nil
}

func (t *tx) DeleteReplicas(ctx context.Context, before time.Time) (int, error) {
	arg := t.s.d.timeArg(normTime(before))
	if _, err := t.exec(ctx, "delete gone replicas' hosts",
		"DELETE FROM replica_hosts WHERE replica_id IN (SELECT id FROM replicas WHERE heartbeat_at < ?)", arg); err != nil {
		return 0, err
	}
	n, err := t.execN(ctx, "delete gone replicas", "DELETE FROM replicas WHERE heartbeat_at < ?", arg)
	return int(n), err
}
